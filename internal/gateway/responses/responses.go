// Package responses is the OpenAI Responses API frontend of the gateway
// (POST /v1/responses): it reads a Responses request into the gateway's
// neutral Run, lets gateway.Execute run the loop, and renders the Result —
// or, with "stream": true, the run's progress — in the Responses wire
// format, errors in OpenAI's envelope.
//
// Server tools. Every shell-like tool is the function "shell" to the model
// (gateway.ShellTool); the tool's type decides how a step is shown:
//
//	{"type":"shell"}                     shell_call + shell_call_output (ids sh_…/sho_…,
//	                                     environment container_reference on every call)
//	{"type":"local_shell"}               local_shell_call + local_shell_call_output
//	{"type":"shellgate:shell"},          one item of that type with call, arguments,
//	{"type":"openrouter:shell"}          action, container_id, files and output
//
// They run in Shellgate's sandbox unless the provider runs its own hosted
// tool (gateway native.go): {"type":"shell"}, and a router shell on engine
// auto or none, on a provider whose native_tools has shell (the code
// interpreter likewise); the provider's runs are rendered as the sandbox's
// steps are. shellgate:bash and
// openrouter:bash are Messages-only (400 here), other hosted tools are 400
// but one: {"type":"code_interpreter"} is the function "code_interpreter"
// (gateway.InterpreterTool, the container's Python kernel), its steps
// code_interpreter_call items (interpreter.go), the files they write cited
// on the next message. It shares the request's one container with the
// shell tool; a step is shown by the tool its call names.
//
// Programmatic tool calling ({"type":"programmatic_tool_calling"}, function
// tools with allowed_callers "programmatic") is program.go: the model's
// JavaScript runs on jsrun (gateway.ProgramTool), its pauses are program
// items whose fingerprint the client hands back to resume it.
//
// A step that did not run (arguments the tool refused, the max_tool_calls
// budget spent, the sandbox unavailable) shows what the model read: the
// shell_call_output has status "incomplete" and one more output entry
// whose stderr is that text (exit code 1); the router item has status
// "failed" and the text in error; local_shell_call_output carries it as
// its output. Replayed, such an output gives the model the same text again.
//
// Streaming writes each item as it happens; response.completed carries the
// items of the output_item.done events, in their order. That is the
// non-streamed order too, except for a turn whose text follows its own tool
// calls: streamed, the turn's text comes first (it streams while the model
// writes, the steps run after), unstreamed it keeps the model's order. A
// command's shell_call_output_content.done events come when its step ends.
//
// The container is resolved (identity rules) when the request starts, so
// response.created already names it in the echoed tools, and a
// container_reference that is not the caller's is a 404 before the model
// is called.
//
// # How it works
//
// Wire format only: `request.go` and `input.go` read a Responses body into a
// `gateway.Run` (the conversation, client function tools, the one shell-like
// server tool as `gateway.ShellTool{Name:"shell"}`, identity, uploads); the
// loop (`gateway.Execute`) runs it; `render.go` shapes the `gateway.Result`
// into the response object and the item type the request's tool asked for
// (each item encoded once, then spliced into the response's `output` by
// `encodeResponse` rather than scanned again by encoding/json);
// `stream.go` is the `gateway.Sink` that writes the same items as SSE while the
// run happens. Replayed shell items become an assistant tool call and a result
// (`gateway.ShellResultText`), checked pairwise (OpenAI's orphan 400s), never
// run. `internal/server/responses.go` mounts it (key check in OpenAI's
// envelope) with `Server.sandboxesFor(principal)`; the frontend opens the
// container before the loop and hands it to the loop, so the echoed tools name
// it from the first event; the loop closes it (and bills the request) before
// the answer, the frontend's deferred close covers a request that ended before
// the loop used it (nothing ran: nothing to bill).
package responses

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/identity"
	"github.com/shellgate/shellgate/jsrun"
)

// Frontend serves the Responses API.
type Frontend struct {
	// Models resolves "provider/model"; nil answers every request with 503.
	Models gateway.Models
	Log    *slog.Logger
	// Screen, if set, inspects each request before its container is
	// opened and its model called (the workspace's guardrails).
	Screen gateway.Screen
	// Programs runs the programs of programmatic tool calling (nil: the
	// programmatic_tool_calling tool is refused); ProgramScope is bound
	// into their fingerprints: the caller's workspace, so that one
	// workspace's fingerprint does not resume in another.
	Programs     *jsrun.Runner
	ProgramScope string
	// StatusCodes answers errors with the HTTP status as error.code (a
	// number), as OpenRouter's /api/v1 does: its SDK requires one.
	StatusCodes bool
}

// Serve answers one POST /v1/responses of an authenticated caller whose
// containers are sbx.
func (f *Frontend) Serve(w http.ResponseWriter, r *http.Request, sbx gateway.Sandboxes) {
	ctx := r.Context()
	p, err := readRequest(w, r)
	if err != nil {
		f.writeErr(ctx, w, err)
		return
	}
	if p.sandboxed() {
		if answered, err := gateway.Forward(ctx, sbx, p.sel); answered || err != nil {
			if err != nil {
				f.writeErr(ctx, w, err)
			}
			return
		}
	}
	if f.Models == nil {
		f.writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error",
			Message: "No models are configured on this Shellgate server: start `shellgate serve` with --config naming the providers."})
		return
	}
	model, err := f.Models.Resolve(p.model)
	if err != nil {
		ae, _ := toAPIError(err)
		if ae.Status == http.StatusNotFound {
			ae.Param, ae.Code = "model", "model_not_found"
		}
		f.writeErr(ctx, w, ae)
		return
	}
	p.req.Model = model.Name
	if f.Screen != nil {
		if err := f.Screen(ctx, p.req); err != nil {
			f.writeErr(ctx, w, err)
			return
		}
	}
	for _, u := range p.uploads {
		if _, err := sbx.StatFile(ctx, u.FileID); err != nil {
			f.writeErr(ctx, w, err)
			return
		}
	}
	run := &gateway.Run{Model: model, Request: p.req, Sandboxes: sbx, Select: p.sel, Open: p.open,
		Uploads: p.uploads, MaxToolCalls: p.maxCalls, Budget: gateway.FinalAnswer}
	var containerID string
	if p.sandboxed() {
		run.ServerTools, run.Hosting = p.serverTools(), p.hosting()
	}
	// A request whose every server tool the provider runs itself (engine
	// auto) opens no container: one it names is the provider's.
	if p.sandboxed() && len(run.HostedTools()) < len(run.ServerTools) {
		box, err := sbx.Open(ctx, p.sel, p.open)
		if err != nil {
			f.writeErr(ctx, w, err)
			return
		}
		// The loop closes (and bills) it before Execute returns, once it
		// used it: the bill is written before the answer. A request that
		// ends before the loop used it ran nothing: nothing to bill.
		defer box.Close()
		containerID = box.ContainerID()
		run.Sandboxes = opened{Sandboxes: sbx, box: box}
	}
	if p.programmatic {
		if f.Programs == nil {
			f.writeErr(ctx, w, invalid(fmt.Sprintf("tools[%d].type", p.programTool), "programmatic_tool_calling is not enabled on this Shellgate server (it runs programs on the server's JavaScript runtime, which needs the continuation secret of `shellgate serve`)."))
			return
		}
		if run.ServerTools == nil {
			run.ServerTools = map[string]gateway.ServerTool{}
		}
		run.ServerTools[gateway.ProgramFunction] = gateway.ProgramTool{Runner: f.Programs, Scope: f.ProgramScope, Tools: p.programTools, Denied: p.programDenied}
		run.Resume = p.resume
	}
	m := newMeta(p, containerID)
	if !p.stream {
		res, err := gateway.Execute(ctx, run)
		if err != nil {
			f.runFailed(ctx, w, err, nil, res)
			return
		}
		writeJSON(w, http.StatusOK, m.response("completed", m.renderOutput(res), res, nil))
		return
	}
	s := newStreamer(w, m)
	s.start()
	run.Sink = s
	res, err := gateway.Execute(ctx, run)
	if err != nil {
		f.runFailed(ctx, w, err, s, res)
		return
	}
	s.complete(res)
}

// runFailed answers a run that ended in an error: nothing when the client
// is gone (its request context ended), else the error in the envelope, or
// response.failed once the stream has begun.
func (f *Frontend) runFailed(ctx context.Context, w http.ResponseWriter, err error, s *streamer, res *gateway.Result) {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		f.log().InfoContext(ctx, "responses: client went away", "err", err)
		return
	}
	ae, known := toAPIError(err)
	if !known {
		f.log().ErrorContext(ctx, "responses: request failed", "err", err)
	}
	if s == nil {
		f.writeError(w, ae)
		return
	}
	s.fail(ae, res)
}

func (f *Frontend) writeErr(ctx context.Context, w http.ResponseWriter, err error) {
	ae, known := toAPIError(err)
	if !known {
		f.log().ErrorContext(ctx, "responses: request failed", "err", err)
	}
	f.writeError(w, ae)
}

func (f *Frontend) log() *slog.Logger {
	if f.Log == nil {
		return slog.Default()
	}
	return f.Log
}

// opened hands the loop the container the request already resolved.
type opened struct {
	gateway.Sandboxes
	box gateway.Sandbox
}

func (o opened) Open(context.Context, identity.Request, gateway.OpenOptions) (gateway.Sandbox, error) {
	return o.box, nil
}
