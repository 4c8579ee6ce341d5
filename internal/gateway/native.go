package gateway

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shellgate/shellgate/internal/tool"
)

// Provider-native hosted tools (engine auto). A provider in the config
// may declare hosted tools its API runs itself (Model.Native). A server
// tool the client left on engine auto (shellgate:shell without an engine,
// or the provider's own tool type: shell, code_interpreter,
// code_execution_*; Run.Hosting) whose native tool the provider has is not
// run in the sandbox: the upstream adapter sends the provider's tool
// instead of the function (Tool.Native), the provider runs the calls and
// answers with them and their results (PartHosted), and the loop shows each
// as a step of the client's tool, with the result the tool itself would
// give (Hostable.FromHosted): the frontends render it as they render a
// sandbox step, so across APIs it is translated as the sandbox's results
// are. Such a step is Step.Native: not billed as sandbox time (the
// provider bills it), marked in logs and traces, and counted toward
// max_tool_calls as the provider reports it. A turn the provider paused
// in its own run (Anthropic's pause_turn) goes on with another turn for a
// client that knows no pause (Budget FinalAnswer); a Messages client gets
// the pause.
//
// Within the run, the model's conversation holds a native step as the
// tool's call and result (as a replayed step is), so a later turn (after a
// sandbox step in the same turn) reads it the same way.

// The provider-native hosted tools, as written in a provider's native_tools.
const (
	NativeShell           = "shell"            // OpenAI Responses' shell with environment container_auto
	NativeCodeInterpreter = "code_interpreter" // OpenAI Responses' code_interpreter
	NativeCodeExecution   = "code_execution"   // Anthropic's code_execution_20250825, Gemini's codeExecution
)

// Hosting says how a client asked for a server tool the provider may run.
type Hosting int

const (
	// HostAuto: shellgate:shell / openrouter:shell with engine auto (or none).
	HostAuto Hosting = iota + 1
	// HostVendor: the provider's own tool type (shell, code_interpreter,
	// code_execution_*); the provider's vendor_tools: sandbox keeps it in
	// the sandbox.
	HostVendor
)

// Kinds of HostedCall.
const (
	HostedBash       = "bash"        // Code holds shell commands, one each
	HostedPython     = "python"      // Code[0] is a Python program
	HostedTextEditor = "text_editor" // Input and Result are Anthropic's text_editor_code_execution call and result
)

// HostedCall is a call the provider ran with its own hosted tool, and the
// result it reported, in neutral form.
type HostedCall struct {
	ID   string // the provider's call id
	Tool string // NativeShell, NativeCodeInterpreter, NativeCodeExecution
	Kind string // HostedBash, HostedPython, HostedTextEditor
	Code []string
	// Outputs are what each of Code printed and how it ended; nil when the
	// provider reported no result.
	Outputs []tool.CommandOutput
	// Error is the provider's error code when its tool failed
	// ("unavailable", "execution_time_exceeded", …).
	Error         string
	Input, Result json.RawMessage
	// ContainerID is the provider's container the call ran in, when it
	// says ("" else), and when it expires, when it says.
	ContainerID        string
	ContainerExpiresAt time.Time
}

// Container is a provider's container.
type Container struct {
	ID        string
	ExpiresAt time.Time // zero when the provider did not say
}

// Hostable is a server tool a provider may run itself.
type Hostable interface {
	ServerTool
	// Native is the provider-native tool that runs this tool's calls on
	// an upstream of api, "" when there is none.
	Native(api string) string
	// FromHosted is h as this tool's call arguments and step result (what
	// the tool would have answered had it run h in the sandbox); ok is
	// false when h is not a call of this tool (another sub-tool's).
	FromHosted(h *HostedCall) (args string, res StepResult, ok bool)
}

// HostedTools are the run's server tools the provider runs itself, by
// name, with the native tool each becomes: a frontend need not open a
// sandbox for them.
func (run *Run) HostedTools() map[string]string {
	out := map[string]string{}
	for name, how := range run.Hosting {
		st, ok := run.ServerTools[name].(Hostable)
		if !ok || (how == HostVendor && run.Model.VendorSandbox) {
			continue
		}
		if n := st.Native(run.Model.API); n != "" && slices.Contains(run.Model.Native, n) {
			out[name] = n
		}
	}
	return out
}

// hostedStep is h as a step of the run's tool that became h.Tool: its
// call and result; nil when no tool of the run became h.Tool (an upstream
// that ran a hosted tool it was not given: nothing of it is shown).
func hostedStep(run *Run, hosted map[string]string, h *HostedCall) *Step {
	var first string
	for _, name := range slices.Sorted(maps.Keys(hosted)) {
		if hosted[name] != h.Tool {
			continue
		}
		if first == "" {
			first = name
		}
		st := run.ServerTools[name]
		if args, res, ok := st.(Hostable).FromHosted(h); ok {
			return &Step{Call: ToolCall{ID: h.ID, Name: name, Arguments: args}, Tool: st, Result: res, Native: true}
		}
	}
	if first == "" {
		return nil
	}
	// A call no tool of the request shows (the provider ran a sub-tool
	// the client's tool has no shape for): the model's own tool, failed,
	// saying what ran.
	msg := "error: the provider ran its " + h.Tool + " tool in a way this request's tool cannot show (" + h.Kind + ")"
	return &Step{Call: ToolCall{ID: h.ID, Name: first, Arguments: "{}"}, Tool: run.ServerTools[first], Native: true,
		Result: StepResult{Content: msg, IsError: true, Detail: &ShellDetail{Error: msg, ErrorCode: "unavailable"}}}
}

// asCalls is parts with each hosted call as the call and result of its
// step, for the conversation the model reads next: the calls in place,
// the results in the order of their calls.
func asCalls(parts []Part, steps map[*HostedCall]*Step) (calls []Part, results []Part) {
	calls = make([]Part, 0, len(parts))
	for _, p := range parts {
		if p.Kind != PartHosted {
			calls = append(calls, p)
			continue
		}
		s := steps[p.Hosted]
		if s == nil {
			continue
		}
		c := s.Call
		calls = append(calls, Part{Kind: PartToolCall, Call: &c})
		results = append(results, Part{Kind: PartToolResult, Result: s.toolResult()})
	}
	return calls, results
}

// pythonCommand is a Python program as one shell command, for a shell
// tool showing the provider's Python run.
func pythonCommand(code string) string {
	delim := "PY"
	for strings.Contains(code, delim) {
		delim += "_"
	}
	return "python3 - <<'" + delim + "'\n" + code + "\n" + delim
}

// argsObject is {key: text} as a tool's arguments.
func argsObject(key, text string) string {
	b, _ := json.Marshal(map[string]string{key: text}) // a string only
	return string(b)
}

// nativeOn is native on an upstream of want, else none.
func nativeOn(api, want, native string) string {
	if api == want {
		return native
	}
	return ""
}

// Native implements Hostable: OpenAI's shell, else the provider's code
// execution.
func (ShellTool) Native(api string) string {
	switch api {
	case APIResponses:
		return NativeShell
	case APIMessages, APIGemini:
		return NativeCodeExecution
	}
	return ""
}

// FromHosted implements Hostable: every hosted run is commands (a Python
// program as python3 reading it; a text editor call as a comment with its
// input, its result as the output).
func (ShellTool) FromHosted(h *HostedCall) (string, StepResult, bool) {
	var cmds []string
	outs := h.Outputs
	switch h.Kind {
	case HostedBash:
		cmds = h.Code
	case HostedPython:
		cmds = []string{pythonCommand(strings.Join(h.Code, "\n"))}
	case HostedTextEditor:
		cmds = []string{"# " + TextEditorCodeExecution + " " + string(h.Input)}
		if len(h.Result) > 0 {
			exit := 0
			if editorFailed(h.Result) {
				exit = 1
			}
			outs = []tool.CommandOutput{{Stdout: string(h.Result), Outcome: tool.Outcome{Type: "exit", ExitCode: &exit}}}
		}
	default:
		return "", StepResult{}, false
	}
	args := tool.ShellArgs{Commands: cmds}
	b, _ := json.Marshal(args) // strings only
	// The provider's limits, not Shellgate's, bounded what ran: the plan
	// is its commands as they are.
	d := &ShellDetail{Args: args, ArgsOf: string(b), Plan: tool.Plan{Commands: cmds}, Outputs: outs, ContainerID: h.ContainerID}
	if h.Error != "" && len(outs) == 0 {
		d.Error, d.ErrorCode = "the provider's tool failed: "+h.Error, h.Error
		return string(b), StepResult{Content: "error: " + d.Error, IsError: true, Detail: d}, true
	}
	return string(b), StepResult{Content: ShellResultText("", outs, nil), Detail: d}, true
}

// hostedBashResult is h's one run as a code-execution result of the
// given types.
func hostedBashResult(h *HostedCall, resultType, errorType string) StepResult {
	if h.Error != "" || len(h.Outputs) == 0 {
		code := h.Error
		if code == "" {
			code = "unavailable"
		}
		return codeExecResult(&CodeExecError{Type: errorType, ErrorCode: code}, false)
	}
	r := &BashResult{Type: resultType, Content: []OutputFile{}}
	for _, o := range h.Outputs {
		r.Stdout += o.Stdout
		r.Stderr += o.Stderr
		if o.Outcome.ExitCode != nil && r.ReturnCode == 0 {
			r.ReturnCode = *o.Outcome.ExitCode
		}
	}
	return codeExecResult(r, false)
}

// Native implements Hostable: the provider's code execution (Anthropic's).
func (BashTool) Native(api string) string { return nativeOn(api, APIMessages, NativeCodeExecution) }

// FromHosted implements Hostable: a bash run.
func (BashTool) FromHosted(h *HostedCall) (string, StepResult, bool) {
	if h.Kind != HostedBash {
		return "", StepResult{}, false
	}
	return argsObject("command", strings.Join(h.Code, "\n")), hostedBashResult(h, "bash_code_execution_result", "bash_code_execution_tool_result_error"), true
}

// Native implements Hostable: the editor goes with the bash tool to
// Anthropic's code execution.
func (EditorTool) Native(api string) string { return BashTool{}.Native(api) }

// FromHosted implements Hostable: the provider's text editor call and
// result, as they are.
func (EditorTool) FromHosted(h *HostedCall) (string, StepResult, bool) {
	if h.Kind != HostedTextEditor {
		return "", StepResult{}, false
	}
	var content any = h.Result
	if len(h.Result) == 0 {
		content = editorError("unavailable", "the provider reported no result")
	}
	res := codeExecResult(content, false)
	res.IsError = res.IsError || editorFailed(h.Result)
	return string(h.Input), res, true
}

// editorFailed says whether a text editor result is its error object.
func editorFailed(result json.RawMessage) bool {
	var e struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(result, &e) == nil && strings.HasSuffix(e.Type, "_error")
}

// Native implements Hostable: Gemini's code execution.
func (CodeTool) Native(api string) string { return nativeOn(api, APIGemini, NativeCodeExecution) }

// FromHosted implements Hostable: a Python run.
func (t CodeTool) FromHosted(h *HostedCall) (string, StepResult, bool) {
	if h.Kind != HostedPython || t.Programmatic != nil {
		return "", StepResult{}, false
	}
	return argsObject("code", strings.Join(h.Code, "\n")), hostedBashResult(h, "code_execution_result", "code_execution_tool_result_error"), true
}

// Native implements Hostable: OpenAI's code interpreter.
func (InterpreterTool) Native(api string) string {
	return nativeOn(api, APIResponses, NativeCodeInterpreter)
}

// FromHosted implements Hostable: a Python run.
func (InterpreterTool) FromHosted(h *HostedCall) (string, StepResult, bool) {
	if h.Kind != HostedPython {
		return "", StepResult{}, false
	}
	code := strings.Join(h.Code, "\n")
	args := argsObject("code", code)
	d := &InterpreterDetail{Code: code, Ran: h.Error == "", ContainerID: h.ContainerID}
	for _, o := range h.Outputs {
		d.Output.Stdout += o.Stdout
		d.Output.Stderr += o.Stderr
		d.Output.Outcome = o.Outcome
	}
	if !d.Ran {
		d.Error, d.ErrorCode = "the provider's tool failed: "+h.Error, h.Error
		return args, StepResult{Content: "error: " + d.Error, IsError: true, Detail: d}, true
	}
	return args, StepResult{Content: InterpreterResultText(d.Output.Stdout, d.Output.Stderr, nil), Detail: d}, true
}
