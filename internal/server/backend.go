package server

import (
	"context"
	"io"
	"time"

	"github.com/shellgate/shellgate/internal/metering"
	"github.com/shellgate/shellgate/internal/store"
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
// They are the store's own, so a backend over the store passes its errors
// on as they come.
var (
	ErrUnauthorized = store.ErrUnauthorized
	// ErrNotFound: no such container in the principal's workspace (another
	// workspace's container is not found either).
	ErrNotFound = store.ErrNotFound
	// ErrConflict: the name is taken in the workspace.
	ErrConflict = store.ErrConflict
	// ErrInvalid: the request asks for something the store refuses (a
	// cursor that is not a container of the workspace, say).
	ErrInvalid = store.ErrInvalid
	// ErrQuota: the workspace is at its quota (ContainerSpec.MaxContainers).
	ErrQuota = store.ErrQuota
)

// Container is a container's record as the HTTP layer uses it.
type Container struct {
	// ID is the store's id (cntr_ + 32 hex digits). It is also the name of
	// the sandbox the manager runs: random and unique across workspaces,
	// so two workspaces' containers never share a sandbox, whatever names
	// their owners choose.
	ID string
	// Owner is the workspace the container belongs to.
	Owner Principal
	// Name is the caller's name for it, unique in the workspace; the ID
	// when none was given. /api/v1 names are SPEC §3.3's (1–40 letters,
	// digits, '_', '-'); /v1 (OpenAI's shape) takes any 1–256 printable
	// characters.
	Name string
	// Limits are the container's own; zero fields take the server's
	// defaults (the sandbox manager's).
	Limits Limits
	// NetworkPolicy is nil for no network (OpenAI's "disabled").
	NetworkPolicy *NetworkPolicy
	// Expired is set once the retention sweep deleted its files.
	Expired      bool
	CreatedAt    time.Time
	LastActiveAt time.Time
	// ExpiresAt is set when the container has an expiry of its own
	// (expires_after): ExpiresAt - LastUse is its idle allowance. Zero:
	// the server's retention applies.
	ExpiresAt time.Time
}

// LastUse is LastActiveAt, or CreatedAt before the first use (the store's
// rule, store.LastUse).
func (c Container) LastUse() time.Time { return store.LastUse(c.CreatedAt, c.LastActiveAt) }

// Limits are a container's resources; zero fields mean the default. They
// are the store's record as it is.
type Limits = store.Limits

// NetworkPolicy is a container's outbound network (SPEC §3.4), fixed when
// it is created: Type "allowlist" with at most 50 hostnames or "*.x.y"
// globs, or "*" alone for any host. The sandbox's egress (sandbox/egress)
// enforces it from the container's first start (limits.go).
type NetworkPolicy struct {
	Type           string   `json:"type"`
	AllowedDomains []string `json:"allowed_domains"`
}

// ContainerSpec is what a create asks for.
type ContainerSpec struct {
	Name          string // empty: named by its id
	Limits        Limits
	NetworkPolicy *NetworkPolicy
	// ExpiresAfter, when set, is the container's own idle allowance
	// before its files are deleted (OpenAI's expires_after), instead of
	// the server's retention.
	ExpiresAfter time.Duration
	// CreatedAt is the server's clock at the create (zero: now).
	CreatedAt time.Time
	// MaxContainers, when positive, refuses the create (ErrQuota) if the
	// workspace already has that many containers that are not expired;
	// the count and the create are one step for every process sharing
	// the records.
	MaxContainers int
}

// ListOptions select a page of a workspace's containers.
type ListOptions struct {
	After string // id of the last container of the previous page
	Limit int
	Order string // "asc" or "desc", by creation
	Name  string // only the container of this name
}

// Containers are the per-container records, always within a principal's
// workspace: another workspace's container answers ErrNotFound. Find,
// Expiring and Expire cross workspaces: they serve the server's own
// bookkeeping and never take an id from a request.
type Containers interface {
	// Create records a new container on the server's defaults; an empty
	// name makes the name the new id. It is CreateSpec with only a name.
	Create(ctx context.Context, p Principal, name string) (Container, error)
	// CreateSpec records a new container with its own settings.
	CreateSpec(ctx context.Context, p Principal, spec ContainerSpec) (Container, error)
	// Lookup finds a container by id or by name.
	Lookup(ctx context.Context, p Principal, ref string) (Container, error)
	List(ctx context.Context, p Principal, opts ListOptions) (items []Container, hasMore bool, err error)
	// Touch records that the container was used at t (a later t only; an
	// expired container is left alone).
	Touch(ctx context.Context, p Principal, id string, t time.Time) error
	Delete(ctx context.Context, p Principal, id string) error
	// Find returns the container with that id in any workspace.
	Find(ctx context.Context, id string) (Container, error)
	// Expiring returns up to limit containers due to expire at now: their
	// own ExpiresAt passed, or, without one, their last use is at or
	// before idleBefore.
	Expiring(ctx context.Context, now, idleBefore time.Time, limit int) ([]Container, error)
	// Expire marks the container expired unless it was used since
	// (LastActiveAt is no longer lastActive); it reports whether it did.
	Expire(ctx context.Context, id string, lastActive time.Time) (bool, error)
}

// WorkspaceFiles are the workspace's durable files, as far as creating a
// container with file_ids needs them.
type WorkspaceFiles interface {
	// OpenFile opens p's file id: its name as uploaded and its bytes
	// (ErrNotFound for a missing file or another workspace's).
	OpenFile(ctx context.Context, p Principal, id string) (name string, r io.ReadCloser, err error)
}

// Ledger is the usage ledger: what each call cost, per workspace.
type Ledger interface {
	// Record writes one bill. id names the usage event ("": a new one):
	// recording an id again records nothing more, so a write retried after
	// a lost connection cannot bill twice.
	Record(ctx context.Context, p Principal, id, containerID string, at time.Time, kind string, bill metering.Bill) error
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
