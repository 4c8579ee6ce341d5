package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/identity"
	"github.com/shellgate/shellgate/internal/metering"
	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent"
)

// gatewaySandboxes is gateway.Sandboxes for one principal: the containers
// a gateway request runs its server-tool calls in are records of the
// caller's workspace, held call by call like exec calls, and billed once
// per request (kind "response") from its first command to its end.
type gatewaySandboxes struct {
	s *Server
	p Principal
}

var _ gateway.Sandboxes = gatewaySandboxes{}

// sandboxesFor is the gateway's view of p's containers.
func (s *Server) sandboxesFor(p Principal) gateway.Sandboxes { return gatewaySandboxes{s: s, p: p} }

func (g gatewaySandboxes) Open(ctx context.Context, sel identity.Request, opts gateway.OpenOptions) (gateway.Sandbox, error) {
	choice, err := identity.Choose(sel)
	if err != nil {
		return nil, gateway.BadRequest("container_reference", "%v", err)
	}
	s, p := g.s, g.p
	var c Container
	switch choice.Source {
	case identity.FromReference:
		if c, err = s.cfg.Containers.Lookup(ctx, p, choice.Key); err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, &gateway.RequestError{Status: http.StatusNotFound, Param: "container_reference",
					Message: fmt.Sprintf("No container found with id %q in this workspace.", choice.Key)}
			}
			return nil, err
		}
	case identity.FromConversation:
		c, err = s.cfg.Containers.Lookup(ctx, p, choice.Key)
		if errors.Is(err, ErrNotFound) {
			// The conversation's container is gone: a new one.
			c, err = s.cfg.Containers.Create(ctx, p, "")
		}
	case identity.FromNew:
		c, err = s.cfg.Containers.Create(ctx, p, "")
	default: // a session: its container is named by the session key
		c, err = s.cfg.Containers.Lookup(ctx, p, choice.Key)
		if errors.Is(err, ErrNotFound) {
			c, err = s.cfg.Containers.Create(ctx, p, choice.Key)
			if errors.Is(err, ErrConflict) { // another request made it first
				c, err = s.cfg.Containers.Lookup(ctx, p, choice.Key)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("container for the request: %w", err)
	}
	return &gatewayBox{s: s, p: p, c: c}, nil
}

func (g gatewaySandboxes) StatFile(ctx context.Context, fileID string) (gateway.FileInfo, error) {
	return gateway.FileInfo{}, &gateway.RequestError{Status: http.StatusNotFound, Param: "file_id",
		Message: fmt.Sprintf("No file found with id %q.", fileID)}
}

// gatewayBox is one request's session on a container.
type gatewayBox struct {
	s *Server
	p Principal

	mu     sync.Mutex
	c      Container
	first  time.Time      // the request's first command
	start  metering.Start // what the first command found
	closed bool
}

var _ gateway.Sandbox = (*gatewayBox)(nil)

func (b *gatewayBox) ContainerID() string { return b.c.ID }

func (b *gatewayBox) ExpiresAt() time.Time {
	return time.Now().Add(DefaultRetention).UTC().Truncate(time.Second)
}

// hold runs f on the container as an exec call holds it (see evalBox.hold).
func (b *gatewayBox) hold(ctx context.Context, f func(Container) error) error {
	s := b.s
	if !s.beginCall() {
		return &gateway.RequestError{Status: http.StatusServiceUnavailable, Message: "the server is shutting down"}
	}
	defer s.execs.Done()
	s.metrics.inflight.Inc()
	defer s.metrics.inflight.Dec()
	release, ok := s.calls.acquire(ctx, b.c.ID, s.cfg.CallWait)
	if !ok {
		if err := ctx.Err(); err != nil {
			return err
		}
		return &gateway.RequestError{Status: http.StatusTooManyRequests,
			Message: fmt.Sprintf("the container is running another call; calls on one container run one at a time and this one waited %s", s.cfg.CallWait)}
	}
	defer release()
	if !s.beginActive(b.c.ID) {
		return errGatewayGone
	}
	defer s.endActive(b.c.ID)
	c, err := s.cfg.Containers.Lookup(ctx, b.p, b.c.ID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return errGatewayGone
		}
		return err
	}
	return f(c)
}

var errGatewayGone = &gateway.RequestError{Status: http.StatusNotFound, Message: "the container was deleted"}

func gatewayErr(err error) error {
	switch {
	case errors.Is(err, errDeleted), errors.Is(err, sandbox.ErrDestroyed):
		return errGatewayGone
	case errors.Is(err, sandbox.ErrBusy):
		return &gateway.RequestError{Status: http.StatusTooManyRequests, Message: "the container is awake in another Shellgate process; try again when that call ends"}
	case errors.Is(err, tool.ErrInvalid):
		return &gateway.RequestError{Status: http.StatusBadRequest, Message: err.Error()}
	}
	return err
}

func (b *gatewayBox) Exec(ctx context.Context, p tool.Plan, onOutput func(cmd, stream int, text string)) (gateway.ExecResult, error) {
	var res gateway.ExecResult
	err := b.hold(ctx, func(c Container) error {
		run := &gatewayCall{call: call{s: b.s, id: c.ID, maxChars: p.MaxOutputLength}, box: b, onOutput: onOutput}
		var err error
		res.Outputs, err = tool.RunShell(ctx, run, c.ID, p)
		return gatewayErr(err)
	})
	return res, err
}

// gatewayCall is the exec route's executor, plus the request's billing
// start and output streaming.
type gatewayCall struct {
	call
	box      *gatewayBox
	onOutput func(cmd, stream int, text string)
	n        int
}

func (c *gatewayCall) Exec(ctx context.Context, name string, cmd sandbox.Command) (sandbox.Result, error) {
	b := c.box
	b.mu.Lock()
	if b.first.IsZero() {
		b.start = b.s.startState(name)
		b.first = time.Now()
	}
	b.mu.Unlock()
	if c.onOutput != nil {
		idx := c.n
		cmd.OnOutput = utf8Output(cmd.MaxBytes, func(stream int, text string) { c.onOutput(idx, stream, text) })
	}
	c.n++
	return c.call.Exec(ctx, name, cmd)
}

func (b *gatewayBox) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	var data []byte
	err := b.hold(ctx, func(c Container) error {
		var err error
		data, err = b.s.mgr.ReadFile(ctx, c.ID, path, maxBytes)
		return gatewayErr(err)
	})
	return data, err
}

func (b *gatewayBox) WriteFile(ctx context.Context, path string, r io.Reader) error {
	return b.hold(ctx, func(c Container) error {
		err := b.s.mgr.WriteFile(ctx, c.ID, path, r)
		if errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrDestroyed) {
			// A new container has no home until it first starts.
			if err = b.s.mgr.Create(ctx, c.ID); err == nil {
				err = b.s.mgr.WriteFile(ctx, c.ID, path, r)
			}
		}
		return gatewayErr(err)
	})
}

func (b *gatewayBox) CopyIn(ctx context.Context, fileID, dir string) (string, error) {
	return "", &gateway.RequestError{Status: http.StatusNotFound, Param: "file_id",
		Message: fmt.Sprintf("No file found with id %q.", fileID)}
}

func (b *gatewayBox) Promote(ctx context.Context, path string) (string, error) {
	return "", errors.New("promoting container files is not available")
}

func (b *gatewayBox) Cost() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.first.IsZero() {
		return 0
	}
	return metering.Charge(b.first, time.Now(), b.start).CostMicroUSD
}

// Close bills the request, from its first command to now, to the ledger.
func (b *gatewayBox) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.first.IsZero() {
		b.closed = true
		return
	}
	b.closed = true
	now := time.Now()
	b.s.record(context.Background(), b.p, b.c, now, "response", metering.Charge(b.first, now, b.start))
}

// utf8Output adapts the agent's output callback to text: at most maxBytes
// per stream, and never a UTF-8 character split across two calls.
func utf8Output(maxBytes int, emit func(stream int, text string)) agent.OutputFunc {
	var sent [2]int
	var carry [2][]byte
	return func(stream byte, data []byte) {
		k := 0
		if stream == agent.Stderr {
			k = 1
		}
		room := maxBytes - sent[k]
		if room <= 0 {
			return
		}
		if len(data) > room {
			data = data[:room]
		}
		sent[k] += len(data)
		b := append(carry[k], data...)
		carry[k] = nil
		if cut := incompleteTail(b); cut > 0 && sent[k] < maxBytes {
			carry[k] = append([]byte(nil), b[len(b)-cut:]...)
			b = b[:len(b)-cut]
		}
		if len(b) > 0 {
			emit(k+1, string(b))
		}
	}
}
