package gateway

import (
	"context"
	"errors"

	"github.com/shellgate/shellgate/internal/identity"
)

// Forwarder is implemented by Sandboxes that can have a whole request
// served by another process: with several replicas on one database, the
// one that holds the request's container awake (its processes live there).
type Forwarder interface {
	// Forward serves the request elsewhere when sel names an existing
	// container that another live process holds awake, and then returns
	// ErrAnswered: the answer, streamed or not, has been written. It
	// returns nil to serve the request here (a new container, one asleep
	// or awake here, or no other process) and a *RequestError when the
	// container's process cannot be reached.
	Forward(ctx context.Context, sel identity.Request) error
}

// ErrAnswered is Forward's "the request was answered elsewhere": the
// frontend writes nothing more.
var ErrAnswered = errors.New("gateway: the request was answered by the process that holds its container")

// Forward is called by a frontend once it has read the request, before
// it calls the model or writes anything, when the request may run tools
// in a container: it reports whether the request was answered elsewhere
// (then the frontend returns), or the error to answer with. Forwarding
// before the first model call means the model is called once, by the
// process that runs the tools, and the request is billed there only.
func Forward(ctx context.Context, sbx Sandboxes, sel identity.Request) (answered bool, err error) {
	f, ok := sbx.(Forwarder)
	if !ok {
		return false, nil
	}
	err = f.Forward(ctx, sel)
	if errors.Is(err, ErrAnswered) {
		return true, nil
	}
	return false, err
}
