// Package jsrunhttp serves jsrun over HTTP: the handler for POST /api/v1/eval.
//
// The request names client functions (a guest call to one surfaces as an
// interruption the HTTP client resolves and resumes with the continuation)
// and may enable built-in functions that act on the caller's own sandbox.
// Values travel as jsrun's tagged JSON (see jsrun.MarshalTagged). The wire
// format is documented in docs/jsrun.md.
//
//	mux.Handle("POST /api/v1/eval", jsrunhttp.NewHandler(jsrunhttp.Config{
//		Runner:    runner,
//		Sandboxes: resolveSandbox, // the caller's sandbox by container_id
//		Scope:     func(r *http.Request) string { return workspaceOf(r) },
//	}))
package jsrunhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"time"

	"github.com/shellgate/shellgate/jsrun"
)

// Sandbox is what the built-in functions need from the caller's sandbox.
// Implementations must be path-safe (no escape from the home directory by
// "..", absolute paths or links) and meter their use like any sandbox use.
type Sandbox interface {
	// Exec runs each command in order, each in its own invocation, in the
	// sandbox's home directory (timeoutMs and maxOutput are per command,
	// already clamped by the caller to the SPEC §2 limits).
	Exec(ctx context.Context, commands []string, timeoutMs, maxOutput int) ([]CommandResult, error)
	// ReadFile reads a regular file; path is relative to /workspace/home.
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// WriteFile creates or replaces a file; path is relative to /workspace/home.
	WriteFile(ctx context.Context, path string, data []byte) error
}

// CommandResult is the outcome of one command.
type CommandResult struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	TimedOut bool   `json:"timed_out"`
	// Truncated reports that stdout or stderr was cut at maxOutput.
	Truncated bool `json:"truncated"`
}

// SandboxResolver returns the sandbox with containerID if, and only if, it
// belongs to the caller of r (its account and workspace). It returns an error
// wrapping ErrSandboxNotFound otherwise.
type SandboxResolver func(ctx context.Context, r *http.Request, containerID string) (Sandbox, error)

// ErrSandboxNotFound is what a SandboxResolver wraps for an unknown or
// foreign container.
var ErrSandboxNotFound = errors.New("sandbox not found")

// Config configures the handler.
type Config struct {
	// Runner runs the code; its Audience should be specific to this
	// service, e.g. "shellgate-eval". Its Config.Limits are the most a
	// request gets: request limits can only lower them. A runner that can
	// interrupt has a single-use store (jsrun requires one with a secret),
	// so each continuation resumes once.
	Runner *jsrun.Runner
	// Sandboxes resolves request.sandbox.container_id; nil disables the
	// built-in functions.
	Sandboxes SandboxResolver
	// Scope returns the caller's identity (account and workspace) that every
	// continuation is bound to, so a token cannot be resumed by another
	// tenant. nil binds nothing (single-tenant use such as the CLI).
	Scope func(r *http.Request) string
	// MaxBodyBytes bounds the request body (default DefaultMaxBodyBytes).
	// Each field is bounded besides by the most a request the runner
	// accepts holds there (body.go): the body is refused as soon as one
	// is over, not once it has been read.
	MaxBodyBytes int64
	// Logger receives failures the response does not detail.
	Logger *slog.Logger
}

// Request is the body of POST /api/v1/eval.
type Request struct {
	Source string `json:"source"`
	// Language is "javascript" (default) or "typescript" (types stripped,
	// error positions in the TypeScript).
	Language string `json:"language,omitempty"`
	// SourceType is "function-body" (default without modules) or "module"
	// (default with modules): an ES module, its completed value undefined.
	SourceType string `json:"source_type,omitempty"`
	// Modules are the modules the source may import, by name (see
	// jsrun.ModuleMap): "./x.js" from the source resolves to "x.js".
	Modules map[string]string `json:"modules,omitempty"`
	// Loader serves the modules instead of Modules (not on the wire: the
	// CLI sets it to the source file's directory).
	Loader          jsrun.ModuleLoader  `json:"-"`
	ClientFunctions map[string][]string `json:"client_functions,omitempty"`
	Sandbox         *SandboxRequest     `json:"sandbox,omitempty"`
	Limits          *Limits             `json:"limits,omitempty"`
	// Context is any tagged-JSON value bound into the continuation.
	Context      json.RawMessage `json:"context,omitempty"`
	Continuation string          `json:"continuation,omitempty"`
	Resolutions  []Resolution    `json:"resolutions,omitempty"`
}

// SandboxRequest enables the built-in functions on the caller's sandbox.
type SandboxRequest struct {
	ContainerID string `json:"container_id"`
	// Functions restricts the built-ins (default all: exec, readFile,
	// readFileBytes, writeFile).
	Functions []string `json:"functions,omitempty"`
	// RequireApproval lists built-ins that first interrupt for the client's
	// approval: resolve with true to let the call go ahead.
	RequireApproval []string `json:"require_approval,omitempty"`
	// Synchronous lists built-ins whose calls return their result directly
	// instead of a Promise (const text = sandbox.readFile('a.txt')). They
	// cannot require approval, which needs an interruption.
	Synchronous []string `json:"synchronous,omitempty"`
}

// Limits a request may lower. A value above the server's limit gets the
// server's limit; zero or absent keeps it.
type Limits struct {
	TimeoutMs          int `json:"timeout_ms,omitempty"`
	MemoryBytes        int `json:"memory_bytes,omitempty"`
	StackBytes         int `json:"stack_bytes,omitempty"`
	MaxSourceBytes     int `json:"max_source_bytes,omitempty"`
	MaxResultBytes     int `json:"max_result_bytes,omitempty"`
	MaxHostCalls       int `json:"max_host_calls,omitempty"`
	MaxConsoleBytes    int `json:"max_console_bytes,omitempty"`
	MaxInFlightCalls   int `json:"max_in_flight_calls,omitempty"`
	MaxArgumentsBytes  int `json:"max_arguments_bytes,omitempty"`
	MaxHostOutputBytes int `json:"max_host_output_bytes,omitempty"`
	MaxModuleRequests  int `json:"max_module_requests,omitempty"`
	MaxModuleBytes     int `json:"max_module_bytes,omitempty"`
}

// Resolution answers an interruption: value fulfils the guest's call, error
// rejects it (the guest sees name, message and code).
type Resolution struct {
	InterruptionID string          `json:"interruption_id"`
	Value          json.RawMessage `json:"value,omitempty"`
	Error          *ErrorBody      `json:"error,omitempty"`
}

// Response is the body of every answer.
type Response struct {
	Status                string          `json:"status"` // completed | interrupted | error
	Value                 json.RawMessage `json:"value,omitempty"`
	Interruptions         []Interruption  `json:"interruptions,omitempty"`
	Continuation          string          `json:"continuation,omitempty"`
	ContinuationExpiresAt string          `json:"continuation_expires_at,omitempty"`
	Console               string          `json:"console,omitempty"`
	ConsoleTruncated      bool            `json:"console_truncated,omitempty"`
	Error                 *ErrorBody      `json:"error,omitempty"`
}

// Interruption is one paused call the client must resolve.
type Interruption struct {
	ID               string            `json:"id"`
	HostFunctionName string            `json:"host_function_name"`
	Arguments        []json.RawMessage `json:"arguments"`
	Payload          json.RawMessage   `json:"payload"`
}

// ErrorBody is a typed error. Details carries jsrun's machine-readable
// extras, e.g. {"limit": "timeoutMs"} or, for RUN_CONTINUATION_USED,
// {"first_used_at": "2026-12-01T03:00:05.000Z"}.
type ErrorBody struct {
	Code    string `json:"code"`
	Name    string `json:"name,omitempty"`
	Message string `json:"message"`
	Stack   string `json:"stack,omitempty"`
	// GuestCode is the code the guest gave an error it threw and did not
	// catch (Code is then RUN_USER_SOURCE_ERROR).
	GuestCode string         `json:"guest_code,omitempty"`
	Details   map[string]any `json:"details,omitempty"`
}

// Error codes of the HTTP layer (the rest are jsrun's RUN_* codes).
const (
	CodeBadRequest      = "EVAL_BAD_REQUEST"
	CodeSandboxNotFound = "EVAL_SANDBOX_NOT_FOUND"
	CodeNotApproved     = "EVAL_NOT_APPROVED"
	CodeBodyTooLarge    = "EVAL_BODY_TOO_LARGE"
)

// DefaultMaxBodyBytes is the default body cap, 40 MiB: what a resume of
// the largest continuation (32 MiB, jsrun.Limits.ContinuationBytes)
// carries besides it — its source (256 KiB) and modules (4 MiB) again,
// and the resolutions.
const DefaultMaxBodyBytes = 40 << 20

type handler struct {
	cfg  Config
	log  *slog.Logger
	caps func(key string) fieldCap
}

// NewHandler returns the handler for POST /api/v1/eval.
func NewHandler(cfg Config) http.Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	lim := jsrun.DefaultLimits
	if cfg.Runner != nil {
		lim = cfg.Runner.Limits()
	}
	return &handler{cfg: cfg, log: cfg.Logger, caps: fieldCaps(lim, cfg.MaxBodyBytes)}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, errorResponse(CodeBadRequest, "use POST"))
		return
	}
	var req Request
	if err := h.decodeRequest(w, r, &req); err != nil {
		status, resp := errorStatus(err)
		writeJSON(w, status, resp)
		return
	}
	status, resp := h.Eval(r.Context(), r, &req)
	writeJSON(w, status, resp)
}

// Eval runs one request and returns the HTTP status and body. r is passed to
// the Scope and SandboxResolver functions (nil is allowed when both ignore it).
func (h *handler) Eval(ctx context.Context, r *http.Request, req *Request) (int, *Response) {
	in, err := h.input(ctx, r, req)
	if err != nil {
		return errorStatus(err)
	}
	res, err := h.cfg.Runner.Run(ctx, in)
	if err != nil {
		return errorStatus(err)
	}
	out := &Response{Status: string(res.Status), Console: res.Console, ConsoleTruncated: res.ConsoleTruncated}
	switch res.Status {
	case jsrun.StatusCompleted:
		v, err := jsrun.MarshalTagged(res.Value)
		if err != nil {
			return errorStatus(err)
		}
		out.Value = v
	case jsrun.StatusInterrupted:
		out.Continuation = res.Continuation
		out.ContinuationExpiresAt = res.ContinuationExpiresAt.UTC().Format(time.RFC3339)
		for _, in := range res.Interruptions {
			item := Interruption{ID: in.ID, HostFunctionName: in.HostFunctionName, Arguments: []json.RawMessage{}}
			for _, a := range in.Arguments {
				b, err := jsrun.MarshalTagged(a)
				if err != nil {
					return errorStatus(err)
				}
				item.Arguments = append(item.Arguments, b)
			}
			p, err := jsrun.MarshalTagged(in.Payload)
			if err != nil {
				return errorStatus(err)
			}
			item.Payload = p
			out.Interruptions = append(out.Interruptions, item)
		}
	}
	return http.StatusOK, out
}

// EvalRequest runs one request without HTTP (the CLI uses it so that it
// prints exactly what the endpoint would answer).
func EvalRequest(ctx context.Context, h http.Handler, req *Request) (int, *Response) {
	return evalOn(ctx, h, nil, req)
}

// EvalFor runs req on behalf of r without reading r's body: the handler's
// Scope and Sandboxes see r (its context, its caller) as they would for a
// request that carried req. Another wire format served over the same
// handler (the MCP server's eval tool) uses it, so that its continuations
// are bound to the caller's scope as the HTTP route's are.
func EvalFor(r *http.Request, h http.Handler, req *Request) (int, *Response) {
	return evalOn(r.Context(), h, r, req)
}

func evalOn(ctx context.Context, h http.Handler, r *http.Request, req *Request) (int, *Response) {
	hh, ok := h.(*handler)
	if !ok {
		return http.StatusInternalServerError, errorResponse(string(jsrun.CodeInternal), "not a jsrunhttp handler")
	}
	return hh.Eval(ctx, r, req)
}

type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func (h *handler) input(ctx context.Context, r *http.Request, req *Request) (jsrun.Input, error) {
	in := jsrun.Input{Source: req.Source, Language: jsrun.Language(req.Language), Continuation: req.Continuation, HostFunctions: map[string]jsrun.Namespace{},
		SourceType: jsrun.SourceType(req.SourceType)}
	if req.Loader != nil {
		if req.Modules != nil {
			return in, &badRequest{"modules and a module loader both given"}
		}
		in.ModuleLoader = req.Loader
	} else if req.Modules != nil {
		m, err := jsrun.NewModuleMap(req.Modules)
		if err != nil {
			return in, &badRequest{"modules: " + err.Error()}
		}
		in.ModuleLoader = m
	}
	for ns, fns := range req.ClientFunctions {
		if ns == builtinNamespace && req.Sandbox != nil {
			return in, &badRequest{fmt.Sprintf("namespace %q is reserved for the sandbox built-ins", ns)}
		}
		if len(fns) == 0 {
			return in, &badRequest{fmt.Sprintf("client namespace %q lists no functions", ns)}
		}
		n := jsrun.Namespace{}
		for _, fn := range fns {
			n[fn] = jsrun.Sync(clientFunction)
		}
		in.HostFunctions[ns] = n
	}
	if req.Limits != nil {
		l := req.Limits
		if l.TimeoutMs < 0 || l.MemoryBytes < 0 || l.StackBytes < 0 || l.MaxSourceBytes < 0 || l.MaxResultBytes < 0 ||
			l.MaxHostCalls < 0 || l.MaxConsoleBytes < 0 || l.MaxInFlightCalls < 0 || l.MaxArgumentsBytes < 0 || l.MaxHostOutputBytes < 0 ||
			l.MaxModuleRequests < 0 || l.MaxModuleBytes < 0 {
			return in, &badRequest{"limits must not be negative"}
		}
		// The runner keeps every limit at or below its own (the operator's):
		// a request can lower them, never raise them.
		// Values past jsrun's range (2^31-1) are above any operator limit
		// too, so they get the operator's limit like any other raise.
		c := func(v int) int { return min(v, math.MaxInt32) }
		in.Limits = jsrun.Limits{
			Timeout: time.Duration(c(l.TimeoutMs)) * time.Millisecond, MemoryBytes: c(l.MemoryBytes), StackBytes: c(l.StackBytes),
			SourceBytes: c(l.MaxSourceBytes), ResultBytes: c(l.MaxResultBytes), HostCalls: c(l.MaxHostCalls), ConsoleBytes: c(l.MaxConsoleBytes),
			InFlightHostCalls: c(l.MaxInFlightCalls), HostArgumentsBytes: c(l.MaxArgumentsBytes), HostOutputBytes: c(l.MaxHostOutputBytes),
			ModuleRequests: c(l.MaxModuleRequests), ModuleBytes: c(l.MaxModuleBytes),
		}
	}
	var clientCtx any = jsrun.Undefined{}
	if len(req.Context) > 0 {
		v, err := jsrun.UnmarshalTagged(req.Context)
		if err != nil {
			return in, &badRequest{"context: " + err.Error()}
		}
		clientCtx = v
	}
	scope := ""
	if h.cfg.Scope != nil && r != nil {
		scope = h.cfg.Scope(r)
	}
	bound := map[string]any{"scope": scope, "client": clientCtx}
	if req.Sandbox != nil {
		ns, approvals, err := h.builtins(ctx, r, req.Sandbox)
		if err != nil {
			return in, err
		}
		in.HostFunctions[builtinNamespace] = ns
		bound["sandbox"] = req.Sandbox.ContainerID
		bound["require_approval"] = approvals
	}
	in.Context = bound
	for _, res := range req.Resolutions {
		var v any = jsrun.Undefined{}
		if res.Error != nil {
			v = &rejection{err: res.Error}
		} else if len(res.Value) > 0 {
			d, err := jsrun.UnmarshalTaggedOrdered(res.Value) // the client's key order reaches the guest
			if err != nil {
				return in, &badRequest{fmt.Sprintf("resolution %s: %v", res.InterruptionID, err)}
			}
			v = d
		}
		in.Resolutions = append(in.Resolutions, jsrun.Resolution{InterruptionID: res.InterruptionID, Value: v})
	}
	return in, nil
}

// rejection is a client's error resolution. It marshals to JSON so that
// jsrun can size-check it like any resolution.
type rejection struct{ err *ErrorBody }

func (r *rejection) MarshalJSON() ([]byte, error) { return json.Marshal(r.err) }

// clientFunction surfaces every call as an interruption; on resume it
// answers with the client's resolution.
func clientFunction(ctx context.Context, args []any) (any, error) {
	res := jsrun.ResumeFrom(ctx)
	if res == nil {
		return nil, jsrun.Interrupt(ctx, nil)
	}
	if rej, ok := res.Resolution.(*rejection); ok {
		return nil, userError(rej.err)
	}
	return res.Resolution, nil
}

func userError(e *ErrorBody) *jsrun.UserError {
	ue := &jsrun.UserError{Name: e.Name, Message: e.Message, Code: e.Code}
	if ue.Name == "" {
		ue.Name = "Error"
	}
	if ue.Code == "" {
		ue.Code = "EVAL_CLIENT_ERROR"
	}
	return ue
}

func errorResponse(code, msg string) *Response {
	return &Response{Status: "error", Error: &ErrorBody{Code: code, Message: msg}}
}

// errorStatus maps an error to its HTTP status and body.
func errorStatus(err error) (int, *Response) {
	var br *badRequest
	if errors.As(err, &br) {
		return http.StatusBadRequest, errorResponse(CodeBadRequest, br.msg)
	}
	var btl *bodyTooLarge
	if errors.As(err, &btl) {
		return http.StatusRequestEntityTooLarge, errorResponse(CodeBodyTooLarge, btl.Error())
	}
	if errors.Is(err, ErrSandboxNotFound) {
		return http.StatusNotFound, errorResponse(CodeSandboxNotFound, err.Error())
	}
	var je *jsrun.Error
	if !errors.As(err, &je) {
		return http.StatusInternalServerError, errorResponse(string(jsrun.CodeInternal), "internal error")
	}
	body := &ErrorBody{Code: string(je.Code), Message: je.Message, Details: je.Details}
	if je.Guest {
		body.Name, body.Stack, body.GuestCode = je.Name, je.Stack, je.GuestCode
	}
	status := http.StatusUnprocessableEntity // the code ran and failed
	switch je.Code {
	case jsrun.CodeInvalidInput, jsrun.CodeSourceTooLarge, jsrun.CodeProtocol:
		status = http.StatusBadRequest
	case jsrun.CodeContinuationUsed:
		status = http.StatusConflict
	case jsrun.CodeConcurrencyLimit:
		status = http.StatusTooManyRequests
	case jsrun.CodeAborted:
		status = 499 // client closed request
	case jsrun.CodeInternal:
		status = http.StatusInternalServerError
	}
	// What the guest logged before the failure (issue 10 item 10).
	return status, &Response{Status: "error", Error: body, Console: je.Console, ConsoleTruncated: je.ConsoleTruncated}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
