package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/shellgate/shellgate/internal/tool"
)

// ServerTool is a tool Shellgate runs itself. The loop exposes Function()
// to the upstream model and calls Run for each call the model makes to it.
type ServerTool interface {
	// Function is the tool as the upstream model sees it.
	Function() Tool
	// Run executes call. sb opens the request's sandbox on first use (the
	// loop's, shared by every step). onOutput streams command output when
	// not nil. Run never returns a Go error for what the model did wrong:
	// bad arguments are a StepResult with IsError set, which the model
	// reads and can recover from.
	Run(ctx context.Context, sb SandboxFunc, call ToolCall, onOutput func(cmd, stream int, text string)) StepResult
}

// SandboxFunc returns the request's sandbox, opening it on the first call.
type SandboxFunc func(ctx context.Context) (Sandbox, error)

// StepResult is a server tool's answer to one call.
type StepResult struct {
	Content  string // what the model reads
	IsError  bool
	Executed bool // it ran in the sandbox (usage: tool_calls_executed)
	// Images go to the model with the result (a Python call's figures),
	// as image input where the upstream API takes it.
	Images []Image
	// Detail is the tool's own result (*ShellDetail, ...) for the client
	// API's frontend to render in its native shape.
	Detail any
	// Paused is set when the step has no result yet: its code called these
	// client tools and waits, in the sandbox, for the client's answers
	// (Resumer). Their IDs are the tool's tokens for the calls.
	Paused []ToolCall
	// State, with Paused, is what the tool needs back to resume the step
	// when it keeps nothing itself (a program's signed continuation): the
	// frontend hands it to the client, opaque, and Resume.State brings it
	// back.
	State string
	// Fatal, set by a Resumer, refuses the resume as the client's error
	// (a *RequestError: a State that does not verify); the request fails.
	Fatal error
}

// ShellDetail is the result of a shell call.
type ShellDetail struct {
	Args tool.ShellArgs // as the model wrote them (zero when unparsable)
	// ArgsOf is the arguments text Args were parsed from ("" when they
	// were not): a frontend showing the call reuses Args when its call's
	// arguments are this text instead of parsing them again.
	ArgsOf      string
	Plan        tool.Plan // as clamped; empty when refused
	ContainerID string
	Outputs     []tool.CommandOutput
	Changed     []ChangedFile
	Error       string // why the call did not run (bad arguments, sandbox failure)
	ErrorCode   string // "invalid_tool_input", "unavailable", "container_expired", ...
}

// ShellFunction is the function tool "shell" as the upstream model sees it.
func ShellFunction(name string) Tool {
	return Tool{
		Name: name,
		Description: "Run shell commands in the user's persistent Linux sandbox (Debian 12; bash, coreutils, " +
			"Python 3 with pandas and numpy, Node.js, git, jq, sqlite3). Each command runs in order, in its own " +
			"`bash -lc`, as an unprivileged user in /workspace/home (also reachable as /mnt/data). Files in " +
			"/workspace/home persist between calls and are what the user can download; environment variables, " +
			"the working directory and background processes do not carry over from one command to the next. " +
			"Files the user uploaded are in /workspace/home (Anthropic-style uploads in $INPUT_DIR); write " +
			"results for the user there or in $OUTPUT_DIR. There is no network access unless the user allowed " +
			fmt.Sprintf("some hosts. Per command: timeout_ms defaults to %d (max %d); stdout and stderr are each cut to "+
				"max_output_length characters (default %d, max %d) and marked when truncated. At most %d commands per call.",
				tool.DefaultTimeoutMs, tool.MaxTimeoutMs, tool.DefaultMaxOutput, tool.MaxMaxOutput, tool.MaxCommands),
		Parameters: json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{`+
			`"commands":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":%d,"description":"Shell commands to run in order, each in its own bash -lc in /workspace/home."},`+
			`"timeout_ms":{"type":"integer","minimum":1,"description":"Per-command timeout in milliseconds (default %d, max %d)."},`+
			`"max_output_length":{"type":"integer","minimum":0,"description":"Characters kept of stdout and of stderr, per command (default %d, max %d)."}`+
			`},"required":["commands"],"additionalProperties":false}`,
			tool.MaxCommands, tool.DefaultTimeoutMs, tool.MaxTimeoutMs, tool.DefaultMaxOutput, tool.MaxMaxOutput)),
	}
}

// ShellTool runs {"commands":[...],"timeout_ms","max_output_length"} calls.
type ShellTool struct {
	Name string // the function name the model sees ("shell")
}

func (t ShellTool) Function() Tool { return ShellFunction(t.Name) }

func (t ShellTool) Run(ctx context.Context, open SandboxFunc, call ToolCall, onOutput func(cmd, stream int, text string)) StepResult {
	d := &ShellDetail{}
	args, err := tool.ParseShellArgs([]byte(call.Arguments))
	if err == nil {
		d.Args, d.ArgsOf = args, call.Arguments
		d.Plan, err = args.Plan()
	}
	if err != nil {
		d.Error, d.ErrorCode = err.Error(), "invalid_tool_input"
		return StepResult{Content: "error: " + err.Error(), IsError: true, Detail: d}
	}
	res, err := RunPlan(ctx, open, d.Plan, onOutput)
	d.ContainerID = res.containerID
	d.Outputs, d.Changed = res.Outputs, res.Changed
	if err != nil && len(d.Outputs) == 0 {
		d.Error, d.ErrorCode = err.Error(), ErrorCode(err)
		return StepResult{Content: "error: " + err.Error(), IsError: true, Executed: res.containerID != "", Detail: d}
	}
	return StepResult{Content: ShellResultText(d.ContainerID, d.Outputs, d.Changed), Executed: true, Detail: d}
}

type planResult struct {
	ExecResult
	containerID string
}

// RunPlan opens the sandbox and runs p in it.
func RunPlan(ctx context.Context, open SandboxFunc, p tool.Plan, onOutput func(cmd, stream int, text string)) (planResult, error) {
	sb, err := open(ctx)
	if err != nil {
		return planResult{}, err
	}
	res, err := sb.Exec(ctx, p, onOutput)
	return planResult{ExecResult: res, containerID: sb.ContainerID()}, err
}

// ErrorCode maps a sandbox error to Anthropic's tool error codes, which
// the other APIs reuse in their error texts.
func ErrorCode(err error) string {
	var re *RequestError
	switch {
	case errors.As(err, &re) && re.Status == 410:
		return "container_expired"
	case errors.As(err, &re) && re.Status == 429:
		return "too_many_requests"
	case errors.Is(err, context.DeadlineExceeded):
		return "execution_time_exceeded"
	default:
		return "unavailable"
	}
}

// ShellResultText is what the model reads for a shell call: JSON with the
// container id, one entry per command and the files changed. The same text
// is produced for a replayed call, so a conversation reads the same to the
// model whether it was run in this request or an earlier one.
//
// It is json.Marshal's text: issue 30's measure found a hand-written
// encoder saved under 13 µs per step (BENCHMARKS.md).
func ShellResultText(containerID string, outs []tool.CommandOutput, changed []ChangedFile) string {
	type file struct {
		Path  string `json:"path"` // under /workspace/home/
		Bytes int64  `json:"bytes"`
	}
	v := struct {
		ContainerID string               `json:"container_id,omitempty"`
		Output      []tool.CommandOutput `json:"output"` // never null
		Files       []file               `json:"files_changed,omitempty"`
	}{ContainerID: containerID, Output: outs}
	if v.Output == nil {
		v.Output = []tool.CommandOutput{}
	}
	for _, f := range changed {
		v.Files = append(v.Files, file{Path: "/workspace/home/" + strings.TrimPrefix(f.Path, "/"), Bytes: f.Bytes})
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // strings and integers only
	}
	return string(b)
}
