// Package mcp is Shellgate's Model Context Protocol server: the workspace's
// sandboxes as MCP tools and resources, for agents that take tools over
// MCP rather than call an API (Claude Code, Cursor, Codex CLI, the Agents
// SDKs). It is a wire format only, like the gateway's frontends: it turns
// MCP requests into calls on a Workspace, which internal/server implements
// for the caller's key with the same records, call locks, limits and
// metering as its HTTP API, and turns their results into MCP results.
//
// The transport is the official Go SDK's (github.com/modelcontextprotocol/
// go-sdk): NewHandler serves the streamable HTTP transport at /mcp. The
// server authenticates each HTTP request and puts the caller's Workspace
// in its context (WithWorkspace) before the handler sees it. A session is
// bound to the workspace that opened it: the SDK refuses (403) a request
// for it made with a key of another workspace.
//
// Each session gets its own SDK server (the per-session state is the set
// of files it publishes as resources). Tools:
//
//	exec              commands in bash -lc, the shell tool's limits and outcome shapes;
//	                  output streamed as progress notifications
//	python            code on the container's IPython kernel (state kept between calls)
//	eval              the secure JavaScript eval; a client function's call interrupts,
//	                  a later call with the continuation and resolutions resumes
//	read_file, write_file, list_files
//	create_container, list_containers, delete_container
//
// Which container: the tool's "container" argument (an id or a name of the
// caller's workspace), else the session's own, named after the session id
// and created on first use, the way session_id picks one on the model APIs.
// A tool that fails (a command that exits non-zero or times out, Python
// that raises, a bad path, a missing container) is a result with isError
// and says why; protocol errors are only for protocol mistakes (an unknown
// tool; arguments that do not match the input schema are a tool error, as
// the SDK does it). notifications/cancelled cancels the call's context,
// which stops the running command.
//
// Resources: shellgate://containers/{id}/files/{path} (a template: any
// file of the workspace's containers can be read; binary as a blob). The
// files of each container the session used are listed; a call that
// changed files adds them, which sends notifications/resources/list_changed.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/jsrun/jsrunhttp"
)

// Workspace is one caller's containers as the MCP tools use them. The
// server implements it for the key of the request; every method is scoped
// to that workspace (another workspace's container is not found).
type Workspace interface {
	// ID names the workspace; a session is bound to the one that opened it.
	ID() string
	// Open holds the container ref names (an id or a name), or with ref ""
	// the session's own container (named by session, created if new), for
	// one tool call. Its Close bills the call, like an exec call's.
	Open(ctx context.Context, ref, session string) (Box, error)
	CreateContainer(ctx context.Context, name string) (Container, error)
	ListContainers(ctx context.Context) ([]Container, error)
	// DeleteContainer deletes the container ref names, cutting short what
	// runs in it, and returns its id.
	DeleteContainer(ctx context.Context, ref string) (string, error)
	// Eval runs req as POST /api/v1/eval would for this workspace (its
	// continuations bound to it; sandbox built-ins on its containers). An
	// error is an eval that could not run at all (eval not enabled).
	Eval(ctx context.Context, req *jsrunhttp.Request) (*jsrunhttp.Response, error)
}

// Box is one tool call's hold on a container: the gateway's sandbox
// session (exec, Python, files, billing on Close) plus a listing.
type Box interface {
	gateway.Sandbox
	// ListFiles lists one page of the home's regular files in path order,
	// at most limit, after the path after ("" from the start).
	ListFiles(ctx context.Context, after string, limit int) (files []File, more bool, err error)
}

// File is a regular file of a container's home.
type File struct {
	Path       string    `json:"path" jsonschema:"relative to /workspace/home"`
	Bytes      int64     `json:"bytes"`
	ModifiedAt time.Time `json:"modified_at"`
}

// Container is a container of the workspace.
type Container struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Status    string    `json:"status" jsonschema:"running, sleeping or expired"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at" jsonschema:"when its files are deleted if it is not used again"`
}

type workspaceKey struct{}

// WithWorkspace returns ctx for a request the server authenticated as ws.
func WithWorkspace(ctx context.Context, ws Workspace) context.Context {
	return context.WithValue(ctx, workspaceKey{}, ws)
}

// tokenInfo is the SDK's view of the caller: the key was checked by the
// server before the handler, so the "verifier" only reads the workspace
// WithWorkspace put in the request's context. Its UserID binds a session
// to the workspace that opened it: the SDK refuses (403) a request for the
// session made with another workspace's key.
func tokenInfo(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
	ws, ok := r.Context().Value(workspaceKey{}).(Workspace)
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: ws.ID(), Expiration: time.Now().Add(time.Hour), Extra: map[string]any{"shellgate.workspace": ws}}, nil
}

// workspaceOf is the workspace of the HTTP request a tool call came in.
func workspaceOf(req interface{ GetExtra() *sdk.RequestExtra }) (Workspace, error) {
	if ex := req.GetExtra(); ex != nil && ex.TokenInfo != nil {
		if ws, ok := ex.TokenInfo.Extra["shellgate.workspace"].(Workspace); ok {
			return ws, nil
		}
	}
	return nil, errors.New("shellgate: the request carries no authenticated workspace")
}

// Options configure NewHandler.
type Options struct {
	Logger *slog.Logger
	// Version is the server's version in the initialize answer.
	Version string
	// SessionTimeout ends a session idle this long (default 30 minutes);
	// its container stays, like any container.
	SessionTimeout time.Duration
	// MaxBodyBytes caps one HTTP request's body.
	MaxBodyBytes int64
	// MaxSessions bounds each workspace's open sessions (0: no bound):
	// over it, an initialize is 429.
	MaxSessions int
}

// DefaultMaxSessions is each workspace's default bound on open sessions.
const DefaultMaxSessions = 100

// Handler serves the streamable HTTP transport (NewHandler).
type Handler struct {
	http.Handler
	reg *registry
}

// Close ends every open session (their streams end; their containers
// stay): the server calls it when it shuts down, once the calls in flight
// have finished, so that the sessions' open GET streams do not hold the
// shutdown for its whole grace period.
func (h *Handler) Close() {
	h.reg.mu.Lock()
	var open []live
	for _, ls := range h.reg.by {
		open = append(open, ls...)
	}
	h.reg.mu.Unlock()
	for _, l := range open {
		for ss := range l.srv.Sessions() {
			ss.Close()
		}
	}
}

// NewHandler serves the streamable HTTP transport. Every request must
// carry a workspace (WithWorkspace) and its key as `Authorization: Bearer`;
// one without is answered 401.
func NewHandler(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 30 * time.Minute
	}
	cache := sdk.NewSchemaCache()
	// The SDK asks for a server on every request, to read its protocol
	// versions, and connects one only for a request without a session (an
	// initialize, twice for it): the others get this one, which is never
	// connected; an initialize gets the one its slot holds.
	versions := NewServer(o.Version, o.Logger, cache)
	reg := &registry{by: map[string][]live{}}
	h := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		slot, _ := r.Context().Value(slotKey{}).(*live)
		if slot == nil {
			return versions
		}
		if slot.srv == nil {
			slot.srv = NewServer(o.Version, o.Logger, cache)
		}
		return slot.srv
	}, &sdk.StreamableHTTPOptions{
		Logger:         o.Logger,
		SessionTimeout: o.SessionTimeout,
		// Every request carries the workspace's key: a page that rebinds
		// a name to the loopback address has none to send.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        o.MaxBodyBytes,
	})
	open := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, ok := r.Context().Value(workspaceKey{}).(Workspace)
		if !ok || r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
			h.ServeHTTP(w, r)
			return
		}
		if !reg.admit(ws.ID(), o.MaxSessions) && o.MaxSessions > 0 {
			http.Error(w, fmt.Sprintf("this workspace has %d open MCP sessions, the most it may on this server (shellgate serve --max-mcp-sessions): end one (DELETE /mcp) or wait for one to time out", o.MaxSessions), http.StatusTooManyRequests)
			return
		}
		slot := &live{}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), slotKey{}, slot)))
		if slot.srv != nil && slot.open() {
			reg.add(ws.ID(), *slot)
		}
	})
	return &Handler{Handler: auth.RequireBearerToken(tokenInfo, nil)(open), reg: reg}
}

type slotKey struct{}

// live is a session's server, made for an initialize.
type live struct{ srv *sdk.Server }

// open reports whether the server's session is open (the SDK connects it
// before it serves the initialize, and drops it when it ends).
func (l live) open() bool {
	for range l.srv.Sessions() {
		return true
	}
	return false
}

// registry counts each workspace's open sessions: the servers made for an
// initialize whose session has not ended.
type registry struct {
	mu sync.Mutex
	by map[string][]live
}

// admit prunes the servers whose session ended (of every workspace: what
// the registry holds is what is open) and reports whether ws may open one
// more.
func (g *registry) admit(ws string, max int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, ls := range g.by {
		kept := ls[:0]
		for _, l := range ls {
			if l.open() {
				kept = append(kept, l)
			}
		}
		if len(kept) == 0 {
			delete(g.by, k)
		} else {
			g.by[k] = kept
		}
	}
	return len(g.by[ws]) < max
}

func (g *registry) add(ws string, l live) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.by[ws] = append(g.by[ws], l)
}

// NewServer is one session's MCP server: the tools and the file resources.
// cache may be nil.
func NewServer(version string, log *slog.Logger, cache *sdk.SchemaCache) *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "shellgate", Title: "Shellgate sandboxes", Version: version}, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       log,
		SchemaCache:  cache,
		Capabilities: &sdk.ServerCapabilities{
			Tools:     &sdk.ToolCapabilities{},
			Resources: &sdk.ResourceCapabilities{ListChanged: true},
		},
		GetSessionID: func() string { return newSessionID() },
	})
	ss := &session{srv: srv}
	ss.addTools()
	srv.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "container-file",
		Title:       "A file of a container's home",
		Description: "A regular file under /workspace/home of one of the workspace's containers; binary files are blobs.",
		URITemplate: fileTemplate,
	}, ss.readResource)
	return srv
}

const instructions = `Shellgate runs commands, Python and JavaScript in the user's own Linux sandboxes (containers with a persistent /workspace/home).
Tools take an optional "container" (an id or a name from list_containers); without it they use this session's own container, created on first use.
A failed command or call is a result with isError that says why.`

// jsonValue decodes raw tagged JSON for a structured result (nil when absent).
func jsonValue(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	return v
}
