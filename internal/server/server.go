// Package server is Shellgate's HTTP layer: the routes of `shellgate
// serve`, their wire formats, authentication, limits, metrics and logs. It
// speaks JSON to clients and calls the layer below — internal/tool for a
// shell call's validation, limits and result shaping, and the sandbox
// Manager for the container's lifecycle — and nothing else; state (keys,
// container records, usage) is behind the interfaces in backend.go.
//
// Routes (see openapi.json for the full contract):
//
//	GET    /healthz                         liveness, no key
//	GET    /metrics                         Prometheus, no key
//	GET    /api/v1/openapi.json             this API's OpenAPI 3.1 document, no key
//	POST   /api/v1/containers               create
//	GET    /api/v1/containers               list (the key's workspace only)
//	GET    /api/v1/containers/{id}          retrieve (status running/sleeping/expired)
//	DELETE /api/v1/containers/{id}          delete (cancels what runs)
//	POST   /api/v1/containers/{id}/exec     run commands (JSON, or SSE with "stream": true)
//	GET    /api/v1/usage                    the workspace's usage ledger by UTC day and container
//	GET    /api/v1/guardrails               the workspace's prompt-injection guardrails (guard.go)
//	PUT    /api/v1/guardrails               replace them
//	GET    /api/v1/logging                  the workspace's request-log settings (logs.go)
//	PUT    /api/v1/logging                  change them
//	GET    /api/v1/logs                     the workspace's request logs, newest first, filtered
//	GET    /api/v1/logs/{id}                one, with its prompts, completion, commands and detections
//	POST   /api/v1/eval                     JavaScript eval (jsrunhttp) with built-ins on the workspace's containers
//	…      /api/v1/containers/{id}/files…   container files, OpenRouter's shape (cfiles.go), and promote
//	…      /v1/containers/{id}/files…       the same in OpenAI's shape
//	…      /api/v1/files…, /v1/files…       workspace files (wfiles.go): OpenRouter's; OpenAI's or Anthropic's
//	POST   /v1/containers                   OpenAI's containers API over the same records:
//	GET    /v1/containers                   create, list, retrieve, delete, in OpenAI's
//	GET    /v1/containers/{id}              error envelope
//	DELETE /v1/containers/{id}
//
// Every route that takes a key counts against the workspace's rate and
// concurrency limits (ratelimit.go); Sweep (sweep.go) expires containers
// past their retention.
//
//	POST   /v1/responses, /api/v1/responses OpenAI Responses API (internal/gateway/responses)
//	POST   /v1/messages, /api/v1/messages   the Anthropic Messages API of the gateway (internal/gateway/messages)
//	POST   /v1/chat/completions             Chat Completions pass-through to the model's provider (also /api/v1)
//	GET    /v1/models                       the configured models, OpenAI's list shape (also /api/v1)
//	GET    /console/                        the web console's static pages, no key (console.go)
//	POST   /mcp, GET /mcp, DELETE /mcp      the MCP server, streamable HTTP (mcp.go, internal/mcp)
//
// # The HTTP layer
//
// `internal/server` sits on top of `internal/tool` and the sandbox `Manager`'s
// public API, and holds nothing the layers below know about: it turns requests
// into a principal (account + workspace, from the key), a container record, a
// `tool.Plan`, and calls.
//
//   - State behind interfaces (`backend.go`): `Authenticator`, `Containers`
//     (records within a principal's workspace) and `Ledger`; `StoreBackend`
//     serves all three from an `internal/store.Store`. A successful key check is
//     remembered for `Config.AuthCacheTTL` (default 5 s) by the SHA-256 of the
//     whole key (`auth.go`); failures always reach the store, so revocation is
//     seen within the TTL. The sandbox of a container
//     is named by its record's id (`cntr_` + 32 random hex digits), so the name
//     the manager sees is unique across workspaces whatever names callers choose;
//     an id or name of another workspace is the same 404 as a missing one.
//   - Routes are registered once (`Server.route`) with a body cap each; the
//     registration list is what the OpenAPI test compares with `openapi.json`
//     (embedded, served at `/api/v1/openapi.json`) in both directions. One
//     wrapper (`observe`) does the request log line, the request metric by route
//     pattern and status, and panic recovery.
//   - An exec call: key → record lookup → body decode (unknown fields
//     refused) → `tool.ShellArgs.Plan` → the container's call lock (one call at a
//     time per container; waiting is bounded by `CallWait`, then 409) → record
//     looked up again (a delete may have won) → `tool.RunShell` with an executor
//     that wraps `Manager.Exec`: it stops before a command once the container is
//     being deleted, times each command (histogram), notes the first command's
//     start (metering starts there) and, when streaming, queues SSE events (the
//     agent's output callback never blocks on the client; the handler goroutine
//     writes). The bill (`internal/metering`: new after create, woken when the
//     manager says sleeping, else warm) goes in the answer, then to the ledger
//     after the answer and after the lock is released.
//   - Delete marks the container as being deleted, removes the record, and
//     `Manager.Destroy`s the sandbox, which cuts the running command short; a
//     call that was running destroys, when it ends, anything it woke after that.
//   - Files (`cfiles.go`, `wfiles.go`, `envelopes.go`): container files
//     under `cfile_<base64url(path)>` ids need no records — the home is the
//     truth, read through the manager's file calls, which hold the sandbox and
//     never start it; each route holds the container like an exec call (call
//     lock, delete check). Workspace files are `store.Files` records with bytes
//     in `store.Blobs` under the same id (blob first, then record; bytes a
//     crash or a failed delete left without a record are deleted by
//     `store.SweepBlobs` — `Blobs.Walk` × `Files.Missing` — once an hour old,
//     from the server's sweep loop). Uploads are
//     read part by part (`r.MultipartReader`) and streamed to their
//     destination with a cap. `/v1` routes answer in OpenAI's or Anthropic's
//     envelope (`handleAs` picks the shape per request).
//   - Containers in two shapes (`containers.go`): `/api/v1/containers` and
//     OpenAI's `/v1/containers` share the records, the handlers and the object;
//     only the error envelope (`writeError` / `writeOpenAIError`, chosen per
//     route at registration) and the name rule differ. A record carries its
//     limits, network policy and own expiry; the manager asks the server for a
//     sandbox's settings each time it starts (`Manager.SetSettings`, answered
//     from the record via `Containers.Find`), so the record is the one source of
//     a container's limits, and only sandboxes on the defaults take a pooled one.
//   - Retention (`sweep.go`): `Server.Sweep`, run by `Run` every minute on the
//     injected clock (`Config.Now`), reads due containers across workspaces
//     (`Containers.Expiring`), skips any whose call lock is held, marks each
//     expired with a compare-and-set on its last use (`Expire`; a use since wins)
//     and then destroys its sandbox; it then reconciles the data directory with
//     the records (homes of expired or record-less `cntr_` ids). Every call that
//     uses a container goes through `lookup`, which answers 410 for an expired
//     one and records the use (`Touch`, which slides an own expiry too).
//   - Usage (`GET /api/v1/usage`) reads the ledger back through
//     `Ledger.Totals` (by UTC day and by container, the key's scope only).
//   - Eval (`POST /api/v1/eval`) is jsrunhttp's handler behind the same key
//     check: the principal is the continuation's scope, the built-ins' sandbox is
//     the container `{id}` resolution finds in the principal's workspace, and each
//     built-in call holds that container like an exec call (call lock, delete
//     check, record looked up again); `sandbox.exec` goes through
//     `tool.EvalSandbox` with the exec route's executor and is billed the same
//     way (kind `eval`). Continuation claims live in the server's database.
//   - Shutdown (`Server.Run`): stop accepting and refuse new calls, let calls
//     in flight finish for the grace period, then cancel them (each answers with
//     what ran), wait for them, and `Manager.Close` (every sandbox sleeps).
//     MCP sessions (whose GET streams would otherwise hold the shutdown) end
//     once the calls in flight have.
//   - MCP (`mcp.go`, internal/mcp): `/mcp` behind the same key check and
//     limits; `mcpWorkspace` opens each tool call's container through
//     `gatewaySandboxes` (kind "mcp") and makes, lists and deletes
//     containers with the containers routes' own `create` and `remove`.
//
// # Request logs
//
// A logged gateway request carries a `reqLog` in its context: the server's
// Screen wrapper copies the input before the guardrails, `gateway.Execute`
// hands its `Result` to the context's `gateway.Observer`, `gatewayCall.Exec`
// times each command; when the handler returns (answer flushed) the record
// goes to a bounded queue whose writer caps it and stores it in `store.Logs`
// (detections stay in `guard_detections`, joined by request id).
//
// # Routing across replicas
//
// With `serve --advertise-url`, each replica is a node: a row in `nodes`
// (id, URL, heartbeat every 2 s; live within 10 s), and each awake
// container's node is `containers.node` (schema step 5). `cluster.Node.Archive`
// wraps the sandbox manager's `HomeArchive` (or stands in for none): its
// `Restore`, which the manager calls under the sandbox's lock before every
// wake and file call on a sleeping home, first claims the container with one
// conditional UPDATE (taken only if no other live node holds it; without an
// archive, not even from a dead one) and refuses the wake with an error that
// matches `sandbox.ErrBusy` otherwise; its `Archive` (sleep) archives, then
// releases — and skips the archive when another node has taken the container
// meanwhile; `Delete` releases. So the database, not the data directory's
// file locks, is the one-node-at-a-time rule across machines. In the server,
// `handleDyn` asks `Node.Route` for every route with `/containers/{id}` after
// the key check: a container awake on another live node is proxied there
// (`httputil.ReverseProxy`, flushed at once, `Shellgate-Proxied-From` so a
// request is proxied at most once; the target re-checks the client's key);
// one whose only home is on a dead node is 503; anything else is served
// here. Gateway requests name their container in the body, so the seam is
// in the frontends: once a request is read, and before the model is called
// or anything written, each frontend (responses, messages, gemini) calls
// `gateway.Forward` when the request may run tools; the server's
// `gatewaySandboxes` implements `gateway.Forwarder`: it resolves the
// selection as `Open` would (without creating), asks `Node.Route`, and
// replays the body it buffered (`Server.replayable`) through the same proxy
// (`ErrAnswered`: the frontend writes nothing more; the request log is the
// target's). Eval does the same on `sandbox.container_id` before jsrunhttp
// runs (`routeEval`). A container that wakes on another node after that
// point makes its next shell call meet the claim (`sandbox.ErrBusy`):
// `gatewayBox.Exec` then runs the call on the holder through its streamed
// exec API (`Server.remoteExec`: the client's key headers, the hop header,
// output events passed to the step's stream) and un-bills the local start
// the failed attempt recorded, so the call is billed once, there. File
// steps that meet the claim (ReadFile, WriteFile, CopyIn, Promote) go to
// the holder's container-file API (`remoteFiles`, remotefiles.go: the
// `/api/v1/containers/{id}/files` routes, same key and hop header; uploads
// streamed as multipart, content read with the step's cap, objects and
// listings read with fixed caps and their ids checked); the holder's
// answers map back to the sandbox errors a local step meets (404 a missing
// file, 400 a bad path or not a regular file, 413/422 too large, 409 busy
// → 429). A moved call's changed files are the holder's listing (first
// `MaxListLimit` files) before and after the call, compared by size and
// modification second (`changedSince`), so the two nodes' clocks never
// meet. Once a step of a request found its container elsewhere, the next
// steps read its location first (`gatewayBox.away`, one indexed read)
// rather than meet the claim again.
//
// # Billing under a lost database connection
//
// Ledger writes under a lost connection: `sqlstore` treats PostgreSQL's
// "session ended" errors (57P0x, class 08, a closed connection) as the
// pool's idle connections being dead too and closes them; reads and the
// usage insert (`ON CONFLICT (id) DO NOTHING`, so running it twice counts
// once) run again on a new connection, other writes are not re-run (they may
// have committed). Exec and eval write the bill before they answer
// (`settleNow`): a bill the ledger refused is a 503 with what ran, never a
// 200 unbilled. A gateway request is billed when its loop ends, before its
// answer (`gatewayBox.Close`): the write is tried `billTries` (3) times, 100
// and 200 ms apart, always as the request's one usage id (made when the box
// is opened, passed through `Ledger.Record`), so neither the store's retries
// nor these can bill it twice; when none succeeds the request is answered
// with its API's 503 (or its stream ends with the API's error event instead
// of `response.completed` / `message_stop` / Gemini's last chunk). The
// observer (request log, trace) runs after the close and sees that error and
// what ran. A client that went away is still billed (the write does not use
// the request's context); a request replayed to the owner node opens no box
// here and is billed by the owner only.
package server

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shellgate/shellgate/internal/broadcast"
	"github.com/shellgate/shellgate/internal/cluster"
	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/guard"
	"github.com/shellgate/shellgate/internal/mcp"
	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/jsrun"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/egress"
)

// Config configures a Server. Sandboxes, Keys and Containers are required.
type Config struct {
	Sandboxes  sandbox.Backend
	Keys       Authenticator
	Containers Containers
	// Ledger, if set, records every exec call's bill and answers
	// GET /api/v1/usage (without it that route is 404).
	Ledger Ledger
	Logger *slog.Logger
	// EvalRunner, if set, serves POST /api/v1/eval (without it that route
	// is 404). Its Store must be the server's own database
	// (sqlstore.DB.Continuations) and its Audience "shellgate-eval".
	EvalRunner *jsrun.Runner
	// Files and Blobs hold the workspaces' durable files (/api/v1/files,
	// /v1/files, promote, and copies into containers by file_id); without
	// them those routes answer 404.
	Files store.Files
	Blobs store.Blobs
	// MaxUploadBytes caps one uploaded file, into the workspace or a
	// container; default DefaultMaxUploadBytes (512 MiB).
	MaxUploadBytes int64
	// MaxFileBytes caps a file read out of a container's home (download,
	// promote); default DefaultMaxFileBytes (5 GiB, the default home).
	MaxFileBytes int64
	// CallWait bounds how long an exec call waits for another call on the
	// same container to finish before it answers 409; default
	// DefaultCallWait.
	CallWait time.Duration
	// Models resolves the gateway's "provider/model" names; without it the
	// gateway routes answer that no model is configured.
	Models gateway.Models

	// MaxLimits are the most a container may ask for; zero fields: the
	// sandbox manager's defaults (so by default a container may ask for
	// less than the default, never more).
	MaxLimits Limits
	// Retention: a container's files are deleted this long after its last
	// use, unless it has an expiry of its own (OpenAI's expires_after);
	// default DefaultRetention. The container's record stays, "expired".
	Retention time.Duration
	// SweepEvery is how often Run sweeps expired containers; default one
	// minute.
	SweepEvery time.Duration
	// Now is the server's clock for last use and expiry; default
	// time.Now. Tests move it forward and call Sweep.
	Now func() time.Time
	// Guardrails, if set, keeps each workspace's guardrails and their
	// detections (GET/PUT /api/v1/guardrails; gateway requests screened).
	// Without it those routes answer 404 and nothing is screened.
	Guardrails store.Guardrails
	// Logs, if set, keeps the request logs of the workspaces that turn
	// them on (GET/PUT /api/v1/logging, GET /api/v1/logs; logs.go).
	// Without it those routes answer 404 and nothing is recorded.
	Logs store.Logs
	// WorkspaceFiles, if set, serves file_ids on create.
	WorkspaceFiles WorkspaceFiles

	// RateLimit is each workspace's sustained rate of authenticated
	// requests per second, with RateBurst more at once (default: the rate
	// rounded up); 0: no rate limit. MaxConcurrent is each workspace's
	// quota of requests in flight (default DefaultMaxConcurrent; negative:
	// no quota). Over either: 429 with Retry-After.
	//
	// The other per-workspace quotas (quota.go), zero for the default,
	// negative for none: MaxContainers, containers that exist (not
	// expired), default DefaultMaxContainers, over it a create is 403;
	// MaxAwake, containers awake at once on this server, default
	// DefaultMaxAwake, over it a create or a wake is 429;
	// MaxWorkspaceFileBytes, bytes of workspace files, default
	// DefaultMaxWorkspaceFileBytes, over it an upload or a promote is 403.
	//
	// NetworkAllow is the most network any workspace's containers may
	// open (egress.Narrow); NetworkAllowByWorkspace overrides it for the
	// workspaces it names ("account/workspace"). nil, the default: no
	// container may have network at all, and a network_policy that asks
	// for a domain is a 400 naming it.
	NetworkAllow            *egress.Policy
	NetworkAllowByWorkspace map[string]*egress.Policy

	RateLimit     float64
	RateBurst     int
	MaxConcurrent int
	// MaxBodyBytesInFlight bounds the bytes of request bodies each
	// workspace's requests hold in memory at once (ratelimit.go); default
	// DefaultMaxBodyBytesInFlight, negative: no bound. Over it: 429.
	MaxBodyBytesInFlight int64

	MaxContainers         int
	MaxAwake              int
	MaxWorkspaceFileBytes int64
	// MaxMCPSessions bounds each workspace's open MCP sessions on this
	// server (default mcp.DefaultMaxSessions; negative: none): over it, an
	// initialize at /mcp is 429.
	MaxMCPSessions int

	// Broadcast, if set, receives the trace of every gateway request when
	// it ends (trace.go); its counters are served in /metrics.
	Broadcast *broadcast.Broadcaster

	// AuthCacheTTL is how long a key that authenticated is remembered
	// (by the SHA-256 of the whole key) before the key store is asked
	// again: a revoked key keeps working for at most this long. Default
	// DefaultAuthCacheTTL; negative: no cache. Failures are never cached.
	AuthCacheTTL time.Duration

	// Conns bound the connections Run serves: timeouts of each phase,
	// header size, and how many it holds (conns.go).
	Conns ConnLimits

	// Cluster, if set, is this replica's node among those sharing the
	// database: a request for a container awake on another live node is
	// proxied there (routing.go). Its Archive must wrap the sandbox
	// manager's HomeArchive, so that wakes claim and sleeps release.
	Cluster *cluster.Node
}

// DefaultMaxBodyBytesInFlight is each workspace's default bound on request
// bodies in flight: three eval bodies or four gateway bodies at their caps,
// hundreds of ordinary ones.
const DefaultMaxBodyBytesInFlight = 128 << 20

// DefaultAuthCacheTTL is how long a successful key check is remembered:
// revoking a key takes effect within it.
const DefaultAuthCacheTTL = 5 * time.Second

// DefaultRetention is how long a container's files are kept after its
// last use (SPEC §3.5: 30 days).
const DefaultRetention = 30 * 24 * time.Hour

// DefaultCallWait is how long a call waits for the container's previous
// call (calls on one container run one at a time) before answering 409.
const DefaultCallWait = 30 * time.Second

// Body caps. A route that takes no body still refuses one larger than
// maxEmptyBody.
const (
	maxCreateBody = 64 << 10
	// maxExecBody fits 100 commands of about 10 KiB each.
	maxExecBody  = 1 << 20
	maxEmptyBody = 4 << 10
)

// Server serves the HTTP API. Its Handler is safe for concurrent use.
type Server struct {
	cfg Config
	// kernels remembers which containers had a Python kernel, to tell the
	// model when a call finds it gone (tool.Kernels).
	kernels tool.Kernels
	// mgr is the sandbox manager (Config.Sandboxes) behind the awake
	// quota (awake, quota.go).
	mgr     sandbox.Backend
	awake   *awakeCounter
	log     *slog.Logger
	mux     *http.ServeMux
	handler http.Handler
	metrics *metrics
	calls   *callLocks
	// conns caps the connections Run holds (conns.go).
	conns  *connLimiter
	limits *wsLimits
	auth   authCache
	// guardrails caches each workspace's guardrails (guard.go).
	guardrails settingsCache[[]guard.Guardrail]
	// logging caches each workspace's log settings; logQ feeds the
	// request-log writer (logs.go), which runs while it has records.
	logging    settingsCache[store.LogSettings]
	logMu      sync.Mutex
	logQ       chan *reqLog
	logWriting bool
	logWG      pending
	// evalHandler serves POST /api/v1/eval; nil without an EvalRunner.
	evalHandler http.Handler
	// mcp serves /mcp (mcp.go); Run ends its sessions at shutdown.
	mcp *mcp.Handler
	// routes are the patterns registered on mux, in order (the OpenAPI
	// test compares them with openapi.json).
	routes []string

	// stateMu guards the per-container state below, all keyed by
	// container id (the sandbox's name).
	stateMu sync.Mutex
	// cold: sandboxes a create started that no exec has billed yet; the
	// first exec on one pays the new-container minimum.
	cold map[string]bool
	// active: an exec call holds the container (after its call lock).
	active map[string]bool
	// deleted: a delete is under way, or finished while a call ran; the
	// call runs no further command and destroys the sandbox when it ends.
	deleted map[string]bool
	// dropped counts the container records this process deleted or
	// expired: a gateway request re-reads its container's record before a
	// step only when it moved (or a second passed), see gatewayBox.hold.
	dropped atomic.Uint64

	// Exec calls in flight, for a graceful shutdown. stopMu orders
	// beginCall against BeginShutdown, so no call starts after WaitCalls
	// began waiting.
	stopMu   sync.Mutex
	execs    sync.WaitGroup
	stopping chan struct{}
}

// New builds a Server over cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Sandboxes == nil || cfg.Keys == nil || cfg.Containers == nil {
		return nil, errors.New("server: Sandboxes, Keys and Containers are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.CallWait = positiveOr(cfg.CallWait, DefaultCallWait)
	cfg.MaxUploadBytes = positiveOr(cfg.MaxUploadBytes, DefaultMaxUploadBytes)
	cfg.MaxFileBytes = positiveOr(cfg.MaxFileBytes, DefaultMaxFileBytes)
	cfg.Retention = positiveOr(cfg.Retention, DefaultRetention)
	cfg.SweepEvery = positiveOr(cfg.SweepEvery, time.Minute)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AuthCacheTTL == 0 {
		cfg.AuthCacheTTL = DefaultAuthCacheTTL
	}
	if cfg.MaxBodyBytesInFlight == 0 {
		cfg.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	cfg.Conns = cfg.Conns.withDefaults()
	// From here on a quota of 0 is none.
	cfg.MaxConcurrent = quotaOr(cfg.MaxConcurrent, DefaultMaxConcurrent)
	cfg.MaxContainers = quotaOr(cfg.MaxContainers, DefaultMaxContainers)
	cfg.MaxAwake = quotaOr(cfg.MaxAwake, DefaultMaxAwake)
	cfg.MaxWorkspaceFileBytes = quotaOr(cfg.MaxWorkspaceFileBytes, DefaultMaxWorkspaceFileBytes)
	cfg.MaxMCPSessions = quotaOr(cfg.MaxMCPSessions, mcp.DefaultMaxSessions)
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		mux:      http.NewServeMux(),
		metrics:  newMetrics(cfg.Sandboxes),
		calls:    newCallLocks(),
		limits:   newWSLimits(cfg.RateLimit, cfg.RateBurst, cfg.MaxConcurrent, cfg.MaxBodyBytesInFlight),
		cold:     map[string]bool{},
		active:   map[string]bool{},
		deleted:  map[string]bool{},
		stopping: make(chan struct{}),
		conns:    newConnLimiter(cfg.Conns, cfg.Logger),
	}
	s.metrics.reg.MustRegister(s.conns.collectors()...)
	s.awake = newAwakeCounter(cfg.Sandboxes, cfg.MaxAwake, s.containerOwner)
	s.mgr = s.awake
	s.metrics.reg.MustRegister(cfg.Broadcast.Collectors()...)
	s.handle("GET /healthz", maxEmptyBody, false, s.healthz)
	s.route("GET /metrics", maxEmptyBody, promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	s.handle("GET /api/v1/openapi.json", maxEmptyBody, false, s.openAPI)
	s.handle("POST /api/v1/containers", maxCreateBody, true, s.createContainer(shapeOpenRouter))
	s.handle("GET /api/v1/containers", maxEmptyBody, true, s.listContainers(shapeOpenRouter))
	s.handle("GET /api/v1/containers/{id}", maxEmptyBody, true, s.getContainer)
	s.handle("DELETE /api/v1/containers/{id}", maxEmptyBody, true, s.deleteContainer)
	s.handle("POST /api/v1/containers/{id}/exec", maxExecBody, true, s.exec)
	s.handle("POST /api/v1/containers/{id}/sleep", maxEmptyBody, true, s.sleepContainer)
	s.handle("GET /api/v1/usage", maxEmptyBody, true, s.usage)
	s.guardrailRoutes()
	s.logRoutes()
	if cfg.EvalRunner != nil {
		s.evalHandler = s.newEvalHandler()
	}
	s.handle("POST /api/v1/eval", maxEvalBody, true, s.eval)
	s.fileRoutes()
	s.mcpRoutes()
	// OpenAI's containers API, over the same records.
	s.handleOpenAI("POST /v1/containers", maxCreateBody, s.createContainer(shapeOpenAI))
	s.handleOpenAI("GET /v1/containers", maxEmptyBody, s.listContainers(shapeOpenAI))
	s.handleOpenAI("GET /v1/containers/{id}", maxEmptyBody, s.getContainer)
	s.handleOpenAI("DELETE /v1/containers/{id}", maxEmptyBody, s.deleteContainer)
	s.mountResponses()
	s.mountMessages()
	s.mountGemini()
	for _, pattern := range []string{"POST /v1/chat/completions", "POST /api/v1/chat/completions"} {
		s.openAIRoute(pattern, maxChatBody, s.tracedChat(pattern))
	}
	s.openAIRoute("GET /v1/models", maxEmptyBody, s.listModels)
	s.openAIRoute("GET /api/v1/models", maxEmptyBody, s.listModels)
	// Anything else under /api/v1 answers in the API's envelope, not the
	// mux's plain text.
	s.route("/api/v1/", maxEmptyBody, s.noRoute(writeError, "/api/v1/"))
	// And under OpenAI's containers routes, in OpenAI's envelope.
	s.routeWith(writeOpenAIError, "/v1/containers/", maxEmptyBody, s.noRoute(writeOpenAIError, "/v1/containers/"))
	// The web console's static pages (console.go), outside the API.
	s.consoleRoutes()
	s.handler = s.observe(s.mux)
	// Each sandbox starts with its container's own limits.
	s.mgr.SetSettings(s.sandboxSettings)
	return s, nil
}

// noRoute answers a request no API route matched, in ew's envelope: 405
// with Allow when the path is served with other methods, else 404.
// catchAll is the pattern it is registered under.
func (s *Server) noRoute(ew errWriter, catchAll string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pat := s.mux.Handler(probe); pat != "" && pat != catchAll {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			ew(w, errorf(http.StatusMethodNotAllowed, "%s %s: this route takes %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		ew(w, errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
}

// Handler is the server's root handler: logs, metrics and panic recovery
// around the routes.
func (s *Server) Handler() http.Handler { return s.handler }

// Routes are the patterns the server registers, in order.
func (s *Server) Routes() []string { return append([]string(nil), s.routes...) }

// apiHandler is a route's handler: it returns an error to answer with
// instead of writing one.
type apiHandler func(w http.ResponseWriter, r *http.Request, p Principal) error

type principalKey struct{}

// handle registers an API route that answers errors in the OpenRouter
// envelope: body cap, then (when auth) the key check, then h; an error h
// returns is written in the envelope.
func (s *Server) handle(pattern string, maxBody int64, auth bool, h apiHandler) {
	s.handleWith(writeError, pattern, maxBody, auth, h)
}

// handleOpenAI registers an authenticated route of OpenAI's API shape: its
// errors are in OpenAI's envelope.
func (s *Server) handleOpenAI(pattern string, maxBody int64, h apiHandler) {
	s.handleWith(writeOpenAIError, pattern, maxBody, true, h)
}

// errWriter answers with an error in one API's envelope.
type errWriter func(http.ResponseWriter, error)

func (s *Server) handleWith(ew errWriter, pattern string, maxBody int64, auth bool, h apiHandler) {
	s.handleDyn(func(*http.Request) errWriter { return ew }, pattern, maxBody, auth, h)
}

// handleDyn registers an API route whose envelope is chosen per request
// (envelope(r)), for the body cap, the key check, the workspace's limits
// and h's error alike. Its body counts against the workspace's bound on
// bodies in flight.
func (s *Server) handleDyn(envelope func(*http.Request) errWriter, pattern string, maxBody int64, auth bool, h apiHandler) {
	s.handleBody(envelope, pattern, maxBody, auth, true, h)
}

// handleBody is handleDyn for a body held in memory (held: decoded or
// read whole, counted against the workspace's bound) or streamed to its
// destination (an upload, not counted).
func (s *Server) handleBody(envelope func(*http.Request) errWriter, pattern string, maxBody int64, auth, held bool, h apiHandler) {
	s.routeDyn(envelope, pattern, maxBody, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := envelope(r)
		var p Principal
		if auth {
			var err error
			if p, err = s.authenticate(r); err != nil {
				ew(w, err)
				return
			}
			if rec, ok := w.(*recorder); ok {
				rec.principal = p
			}
			release, lerr := s.limits.admit(p)
			if lerr != nil {
				ew(w, lerr)
				return
			}
			if idleStream(pattern) {
				release()
			}
			defer release()
			if held {
				n := r.ContentLength // at most maxBody: routeDyn refused more
				if n < 0 {
					n = maxBody
				}
				releaseBody, lerr := s.limits.admitBody(p, n)
				if lerr != nil {
					ew(w, lerr)
					return
				}
				defer releaseBody()
			}
			if routed(pattern) && s.routeAcross(w, r, p, ew) {
				return
			}
		}
		if err := h(w, r, p); err != nil {
			if ae := (*apiError)(nil); !errors.As(err, &ae) {
				s.log.ErrorContext(r.Context(), "request failed", "route", pattern, "err", err)
			}
			ew(w, err)
		}
	}))
}

// route registers h under pattern with a body cap.
func (s *Server) route(pattern string, maxBody int64, h http.Handler) {
	s.routeWith(writeError, pattern, maxBody, h)
}

func (s *Server) routeWith(ew errWriter, pattern string, maxBody int64, h http.Handler) {
	s.routeDyn(func(*http.Request) errWriter { return ew }, pattern, maxBody, h)
}

func (s *Server) routeDyn(envelope func(*http.Request) errWriter, pattern string, maxBody int64, h http.Handler) {
	s.routes = append(s.routes, pattern)
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBody {
			envelope(r)(w, errorf(http.StatusRequestEntityTooLarge, "request body of %d bytes is larger than this route's %d", r.ContentLength, maxBody))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		h.ServeHTTP(w, r)
	}))
}

// recorder remembers what a handler answered, for logs and metrics.
type recorder struct {
	http.ResponseWriter
	status    int
	bytes     int64
	principal Principal
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// observe wraps the mux: one structured log line and one metric per
// request, and a panic in a handler answered as a 500 (and logged with its
// stack) instead of ending the server. Keys and bodies are never logged.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if rec.status == 0 {
					writeError(rec, fmt.Errorf("panic: %v", v))
				} else {
					rec.status = http.StatusInternalServerError
				}
			}
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			s.metrics.requests.WithLabelValues(route, fmt.Sprint(rec.status)).Inc()
			attrs := []any{"method", r.Method, "path", r.URL.Path, "route", route, "status", rec.status,
				"bytes", rec.bytes, "duration_ms", time.Since(start).Milliseconds(), "remote", r.RemoteAddr}
			if rec.principal != (Principal{}) {
				attrs = append(attrs, "account", rec.principal.Account, "workspace", rec.principal.Workspace)
			}
			s.log.InfoContext(r.Context(), "request", attrs...)
		}()
		next.ServeHTTP(rec, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request, _ Principal) error {
	select {
	case <-s.stopping:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "runtime": s.mgr.Runtime()})
	}
	return nil
}

//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request, _ Principal) error {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIDoc)
	return nil
}

// BeginShutdown marks the server as stopping: /healthz answers 503 and new
// exec calls are refused with 503 while those in flight go on.
func (s *Server) BeginShutdown() {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	select {
	case <-s.stopping:
	default:
		close(s.stopping)
	}
}

// beginCall registers an exec call; false once the server is stopping.
// endCall (execs.Done) ends it.
func (s *Server) beginCall() bool {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	select {
	case <-s.stopping:
		return false
	default:
		s.execs.Add(1)
		return true
	}
}

// WaitCalls waits for the exec calls in flight to end, or for ctx.
func (s *Server) WaitCalls(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.execs.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
