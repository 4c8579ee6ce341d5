package server

import (
	"context"
	"errors"
	"time"

	"github.com/shellgate/shellgate/internal/metering"
)

// The server's state sits behind these small interfaces. cmd/shellgate
// wires them to internal/store (storeBackend in store.go); the HTTP layer
// never sees SQL.

// Principal is who a request acts for: the account and workspace of its
// API key. Every container belongs to exactly one.
type Principal struct {
	Account   string
	Workspace string
}

// Authenticator resolves an API key. Any key that is malformed, unknown or
// revoked is ErrUnauthorized; other errors mean the key store failed.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (Principal, error)
}

// Errors the backends return (wrapped); the handlers map them to statuses.
var (
	ErrUnauthorized = errors.New("invalid or revoked API key")
	// ErrNotFound: no such container in the principal's workspace (another
	// workspace's container is not found either).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the name is taken in the workspace.
	ErrConflict = errors.New("already exists")
	// ErrInvalid: the request asks for something the store refuses (a
	// cursor that is not a container of the workspace, say).
	ErrInvalid = errors.New("invalid argument")
)

// Container is a container's record as the HTTP layer uses it.
type Container struct {
	// ID is the store's id (cntr_ + 32 hex digits). It is also the name of
	// the sandbox the manager runs: random and unique across workspaces,
	// so two workspaces' containers never share a sandbox, whatever names
	// their owners choose.
	ID string
	// Name is the caller's name for it (SPEC §3.3: 1–40 letters, digits,
	// '_', '-'), unique in the workspace; the ID when none was given.
	Name         string
	CreatedAt    time.Time
	LastActiveAt time.Time
}

// ListOptions select a page of a workspace's containers.
type ListOptions struct {
	After string // id of the last container of the previous page
	Limit int
	Order string // "asc" or "desc", by creation
	Name  string // only the container of this name
}

// Containers are the per-container records, always within a principal's
// workspace: another workspace's container answers ErrNotFound.
type Containers interface {
	// Create records a new container; an empty name makes the name the
	// new id.
	Create(ctx context.Context, p Principal, name string) (Container, error)
	// Lookup finds a container by id or by name.
	Lookup(ctx context.Context, p Principal, ref string) (Container, error)
	List(ctx context.Context, p Principal, opts ListOptions) (items []Container, hasMore bool, err error)
	// Touch records that the container was used at t.
	Touch(ctx context.Context, p Principal, id string, t time.Time) error
	Delete(ctx context.Context, p Principal, id string) error
}

// Ledger is the usage ledger: what each call cost, per workspace.
type Ledger interface {
	Record(ctx context.Context, p Principal, containerID string, at time.Time, kind string, bill metering.Bill) error
	// Totals sums the principal's charges with from <= at < to per UTC
	// day (oldest first) and per container (by id).
	Totals(ctx context.Context, p Principal, from, to time.Time) (byDay, byContainer []UsageTotal, err error)
}

// UsageTotal sums the charges of one UTC day ("2006-01-02") or of one
// container; money in integer micro-dollars.
type UsageTotal struct {
	Day           string
	ContainerID   string
	Events        int64
	MeteredMillis int64
	BilledMillis  int64
	CostMicroUSD  int64
}
