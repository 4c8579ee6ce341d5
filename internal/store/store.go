// Package store holds the server's state behind small interfaces: API keys,
// per-sandbox container records, workspace file metadata (with the bytes
// in a Blobs store), and the usage ledger. Implementations live apart:
// internal/store/sqlstore (SQLite under the data directory by default; the
// same portable SQL on PostgreSQL for replicas), and LocalBlobs in this
// package for file bytes. Each interface has a conformance suite in
// internal/store/storetest that every implementation runs.
//
// Tenancy is part of every contract: each call on a container, file or
// usage row takes the caller's Scope (account + workspace, from its API
// key), and a row of another scope answers exactly like a row that does not
// exist (ErrNotFound), for reads, updates, deletes and cursors alike.
//
// Conventions, the same in every implementation:
//   - times are UTC with millisecond precision (stored as unix
//     milliseconds); a zero time.Time means "not set";
//   - money is integer micro-dollars (see internal/metering);
//   - ids are "<prefix>_" plus 32 lowercase hex digits of crypto/rand
//     (NewID), assigned by the store on create (a usage event may bring
//     its own, so that a retried write is recorded once).
//
// A typical request of the coming server:
//
//	key, err := st.Keys().Authenticate(ctx, bearer) // ErrUnauthorized
//	scope := key.Scope()
//	c, err := st.Containers().GetByName(ctx, scope, "analysis") // ErrNotFound
//	... run commands ...
//	err = st.Usage().Record(ctx, store.UsageEvent{Scope: scope, ContainerID: c.ID, ...})
//
// # Records and scopes
//
// The server's state is records, not inference: `internal/store` defines the
// small interfaces `Keys`, `Containers`, `Files`, `Usage`, `Guardrails`,
// `Logs`, `Nodes` (the replicas and each awake container's node; together a
// `Store`)
// and `Blobs`, with the types they carry. Every container, file and usage call
// takes the caller's `Scope` (account + workspace), and another scope's row
// answers exactly like a missing one (`ErrNotFound`), cursors included.
//
// # API keys, local blobs, conformance
//
//   - API keys: `sgk_<id>_<secret>`, SHA-256 of the 256-bit secret stored,
//     compared in constant time (`store.MintKey`, `ParseToken`).
//   - `store.LocalBlobs` keeps file bytes in `DATA/files/ID` through an
//     `os.Root`: streamed in to a temporary file, synced and hard-linked into
//     place (never overwritten, never partial), streamed out.
//   - `internal/store/storetest` is the conformance suite of each interface
//     (tenancy, pagination edges, restart, concurrent writers on two handles,
//     replicas racing for one row); `sqlstore` runs it on SQLite and on a real
//     PostgreSQL, `LocalBlobs` and `s3store.Blobs` too.
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors every implementation returns (wrapped, with what failed and which
// id); test them with errors.Is.
var (
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("already exists")
	ErrInvalid      = errors.New("invalid argument")
	ErrUnauthorized = errors.New("invalid or revoked API key")
	ErrTooLarge     = errors.New("too large")
	// ErrQuota: the write would take the scope over a quota the caller
	// passed (CreateWithin); nothing was written.
	ErrQuota = errors.New("over quota")
)

// Scope is the owner of every container, file and usage event: the
// account and workspace of the API key that made it.
type Scope struct {
	Account   string
	Workspace string
}

// Store is the server's state. Close releases it; the other methods return
// views that share it.
type Store interface {
	Keys() Keys
	Containers() Containers
	Files() Files
	Usage() Usage
	Guardrails() Guardrails
	Logs() Logs
	Nodes() Nodes
	Close() error
}

// Guardrails are each workspace's guardrail settings, kept as the JSON
// document the server validated (package guard reads it), and the
// detections recorded with requests.
type Guardrails interface {
	// Get returns the scope's settings; "" when it has none.
	Get(ctx context.Context, scope Scope) (string, error)
	// Put replaces the scope's settings.
	Put(ctx context.Context, scope Scope, config string) error
	// Record stores one request's detections.
	Record(ctx context.Context, scope Scope, ds []Detection) error
	// Detections returns a request's detections in the order recorded.
	Detections(ctx context.Context, scope Scope, requestID string) ([]Detection, error)
}

// Detection is one prompt-injection match in a request, with what the
// workspace's guardrails did about it.
type Detection struct {
	RequestID string
	At        time.Time
	API       string // "responses", "messages", "chat_completions"
	Action    string // flag, redact or block: the strictest guardrail that applies
	Guardrail string // that guardrail's name
	Rule      string
	Technique string
	Via       string
	Location  string // where in the request: "input[2].content[0]", "messages[0].content"
	Start     int    // byte offsets in that text
	End       int
	Excerpt   string
	Detector  string // guard.Version
}

// Keys are the API keys. A key is shown once, at Create; only a hash of its
// secret is kept.
type Keys interface {
	// Create mints a key for scope and returns its record and the token,
	// which is never stored and cannot be recovered.
	Create(ctx context.Context, scope Scope) (Key, string, error)
	// List returns every key, oldest first, without secrets.
	List(ctx context.Context) ([]Key, error)
	// Revoke marks the key revoked (ErrNotFound if there is none; revoking
	// twice keeps the first time). A revoked key never authenticates.
	Revoke(ctx context.Context, id string) error
	// Authenticate returns the key a token belongs to, or ErrUnauthorized
	// for anything else: malformed, unknown, wrong secret, revoked.
	Authenticate(ctx context.Context, token string) (Key, error)
}

// Key is an API key's record.
type Key struct {
	ID        string // "key_" + 16 hex digits; also the token's visible prefix
	Account   string
	Workspace string
	CreatedAt time.Time
	RevokedAt time.Time // zero while valid
}

// Scope is the key's account and workspace.
func (k Key) Scope() Scope { return Scope{Account: k.Account, Workspace: k.Workspace} }

// Revoked reports whether the key was revoked.
func (k Key) Revoked() bool { return !k.RevokedAt.IsZero() }

// Containers are the per-sandbox records, always read and written within a
// scope.
type Containers interface {
	// Create stores c under a new id (NewID("cntr"); an id the caller set
	// is replaced) and returns it as stored. Names are
	// unique within a scope: another container of the scope with c.Name
	// gives ErrConflict.
	Create(ctx context.Context, c Container) (Container, error)
	// CreateWithin is Create unless c's scope already has max containers
	// that are not expired: then ErrQuota, and nothing is stored. The
	// count and the insert are one decision of the database, so creates
	// racing in one scope, from any number of handles or processes on the
	// same database, never leave more than max. max < 1: no cap.
	CreateWithin(ctx context.Context, c Container, max int) (Container, error)
	Get(ctx context.Context, scope Scope, id string) (Container, error)
	GetByName(ctx context.Context, scope Scope, name string) (Container, error)
	// List returns one page of the scope's containers in creation order.
	List(ctx context.Context, scope Scope, opts ListOptions) (Page[Container], error)
	// Update writes every field of c but ID, Scope and CreatedAt to the row
	// with c's id in c's scope.
	Update(ctx context.Context, c Container) (Container, error)
	Delete(ctx context.Context, scope Scope, id string) error
	// Touch records a use of the container at t: LastActiveAt becomes t,
	// and an ExpiresAt that is set moves by as much, so a container's own
	// expiry (ExpiresAt - LastUse) keeps counting from its last use. Only
	// a later t is written; an expired container is left as it is (nil).
	Touch(ctx context.Context, scope Scope, id string, t time.Time) error

	// The calls below cross scopes. They are for the server's own
	// bookkeeping (a sandbox's settings when it starts, the retention
	// sweep) and never take an id a caller sent.

	// Find returns the container with that id in whichever scope holds it.
	Find(ctx context.Context, id string) (Container, error)
	// Expiring returns up to limit containers, oldest first, that are not
	// expired but due: ExpiresAt set and at or before now, or ExpiresAt
	// unset and LastUse at or before idleBefore (the server's retention).
	Expiring(ctx context.Context, now, idleBefore time.Time, limit int) ([]Container, error)
	// Expire marks the container expired, unless it already is or was
	// used since the caller read it (its LastActiveAt is no longer
	// lastActive); it reports whether it marked it.
	Expire(ctx context.Context, id string, lastActive time.Time) (bool, error)
}

// Container statuses (SPEC §3.5).
const (
	StatusRunning  = "running"
	StatusSleeping = "sleeping"
	StatusExpired  = "expired"
)

// Container is one sandbox's record.
type Container struct {
	ID    string
	Scope Scope
	Name  string // 1–256 bytes, unique within the scope
	Image string
	// Limits the sandbox runs with; zero fields mean the server's default.
	Limits Limits
	// NetworkPolicy is the policy as the API received it (JSON), stored now
	// and enforced by the egress layer; empty means no network.
	NetworkPolicy json.RawMessage
	Status        string
	CreatedAt     time.Time
	LastActiveAt  time.Time
	// ExpiresAt is when the container's files are deleted, when it has an
	// expiry of its own (OpenAI's expires_after); zero: the server's
	// retention applies, counted from LastUse. Touch moves it with
	// LastActiveAt, so ExpiresAt - LastUse is the container's own idle
	// allowance.
	ExpiresAt time.Time
}

// LastUse is when the container was last used: LastActiveAt, or CreatedAt
// before its first use.
func (c Container) LastUse() time.Time { return LastUse(c.CreatedAt, c.LastActiveAt) }

// LastUse is lastActive, or created when lastActive is zero (no use yet).
func LastUse(created, lastActive time.Time) time.Time {
	if lastActive.IsZero() {
		return created
	}
	return lastActive
}

// Limits are a sandbox's resources.
type Limits struct {
	CPUMillis   int64 // 1000 = one CPU
	MemoryBytes int64
	Processes   int64
	DiskBytes   int64 // the size of /workspace/home
}

// Files are the workspace's durable file records. Their bytes are in a
// Blobs store under the same id: the server writes the blob first, then
// the record; it deletes the record first, then the blob.
type Files interface {
	// Create stores f and returns it as stored. Its id is f.ID when that
	// is a well-formed file id (ValidFileID: the caller made it with
	// NewID("file") to write the blob first under the same id; a taken one
	// is ErrConflict), else a new NewID("file").
	Create(ctx context.Context, f File) (File, error)
	// CreateWithin is Create unless the scope's files would then hold
	// more than maxBytes in all: then ErrQuota, and nothing is stored.
	// Like Containers.CreateWithin, racing creates never go over it.
	// maxBytes < 1: no cap.
	CreateWithin(ctx context.Context, f File, maxBytes int64) (File, error)
	// Used is the bytes the scope's files hold in all.
	Used(ctx context.Context, scope Scope) (int64, error)
	Get(ctx context.Context, scope Scope, id string) (File, error)
	List(ctx context.Context, scope Scope, opts ListOptions) (Page[File], error)
	Delete(ctx context.Context, scope Scope, id string) error
	// Missing returns the ids among ids that no file of any scope has,
	// for the sweep of orphaned blobs (SweepBlobs).
	Missing(ctx context.Context, ids []string) ([]string, error)
}

// File is a workspace file's metadata.
type File struct {
	ID        string
	Scope     Scope
	Name      string // the file name as uploaded
	Bytes     int64
	SHA256    string // lowercase hex
	CreatedAt time.Time
	Purpose   string // as the API was told ("assistants", "user_data", ...)
	Source    string // how it came: "upload", or "container:<id>" when promoted
}

// Usage is the metering ledger.
type Usage interface {
	// Record appends e, assigning e.ID (NewID("use")) if empty. Recording
	// the same ID twice keeps the first, so a retried write never bills
	// twice.
	Record(ctx context.Context, e UsageEvent) error
	// ByDay totals the scope's events with from <= At < to per UTC day,
	// oldest day first.
	ByDay(ctx context.Context, scope Scope, from, to time.Time) ([]UsageTotal, error)
	// ByContainer totals them per container, by container id.
	ByContainer(ctx context.Context, scope Scope, from, to time.Time) ([]UsageTotal, error)
}

// UsageEvent is one metered charge (one request on one container).
type UsageEvent struct {
	ID            string
	Scope         Scope
	ContainerID   string
	At            time.Time // when the request ended
	MeteredMillis int64
	BilledMillis  int64
	CostMicroUSD  int64
	Kind          string // what was metered, e.g. "exec", "response", "eval"
}

// UsageTotal sums events of one day ("2006-01-02", UTC) or one container.
type UsageTotal struct {
	Day           string // set by ByDay
	ContainerID   string // set by ByContainer
	Events        int64
	MeteredMillis int64
	BilledMillis  int64
	CostMicroUSD  int64
}

// Orders of a listing, by creation time (then id).
const (
	Asc  = "asc"
	Desc = "desc"
)

// MaxPageSize is the largest Limit a listing accepts.
const MaxPageSize = 1000

// ListOptions select one page of a listing.
type ListOptions struct {
	// After is the id of the last item of the previous page; empty starts
	// at the beginning. An id that is not in the scope is ErrNotFound.
	After string
	Limit int    // 1..MaxPageSize
	Order string // Asc (default when empty) or Desc
	Name  string // containers only: only this name
}

// Validate checks opts and fills in the default order.
func (o *ListOptions) Validate() error {
	if o.Limit < 1 || o.Limit > MaxPageSize {
		return fmt.Errorf("%w: limit %d: want 1-%d", ErrInvalid, o.Limit, MaxPageSize)
	}
	switch o.Order {
	case "":
		o.Order = Asc
	case Asc, Desc:
	default:
		return fmt.Errorf("%w: order %q: want %q or %q", ErrInvalid, o.Order, Asc, Desc)
	}
	return nil
}

// Page is one page of a listing; HasMore says whether a page after it
// has items.
type Page[T any] struct {
	Items   []T
	HasMore bool
}

// NewID returns prefix + "_" + 32 random lowercase hex digits (128 bits).
func NewID(prefix string) string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return prefix + "_" + hex.EncodeToString(b[:])
}

// ValidFileID reports whether id has the form NewID("file") makes.
func ValidFileID(id string) bool {
	rest, ok := strings.CutPrefix(id, "file_")
	return ok && len(rest) == 32 && lowerHex(rest)
}

// Millis is t as unix milliseconds, 0 for the zero time.
func Millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// FromMillis is the inverse of Millis, in UTC.
func FromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Day is t's UTC calendar day, the unit of UsageTotal.Day.
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Node is one gateway replica: its id, the URL the other replicas reach
// it at, and its last heartbeat. A node is live while its heartbeat is
// newer than the cluster's liveness window.
type Node struct {
	ID          string
	URL         string
	HeartbeatAt time.Time
}

// Nodes are the replicas sharing the database and the location of each
// awake container: the node it is awake on. A container is held by at
// most one node at a time; Claim is atomic across replicas.
type Nodes interface {
	// Heartbeat records node id (reachable at url) as live at at.
	Heartbeat(ctx context.Context, id, url string, at time.Time) error
	// Get returns the node (ErrNotFound if it never beat).
	Get(ctx context.Context, id string) (Node, error)
	// List returns every node that ever beat, by id.
	List(ctx context.Context) ([]Node, error)
	// Claim makes node the container's location unless another node
	// whose heartbeat is after liveAfter holds it. It returns the holder
	// after the call: node itself when the claim took, else the live
	// holder. An unknown container is ErrNotFound.
	Claim(ctx context.Context, containerID, node string, liveAfter time.Time) (holder string, err error)
	// Release clears the container's location if node holds it.
	Release(ctx context.Context, containerID, node string) error
	// Location returns the node holding the container ("" for none, with
	// a zero Node); an unknown container is ErrNotFound.
	Location(ctx context.Context, containerID string) (Node, error)
}
