package gateway

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/shellgate/shellgate/internal/tool"
)

// OpenAI's code_interpreter hosted tool, run on the container's Python
// kernel for any upstream model. The model sees the function
// "code_interpreter" taking {"code": "..."}; each call runs on the kernel
// (Sandbox.Python), so variables and imports carry over from call to call
// and from request to request on one container. What the model reads is
// InterpreterResultText; the Responses frontend shows the step as a
// code_interpreter_call item from its InterpreterDetail.

// CodeInterpreter is the function name the model sees for OpenAI's
// code_interpreter tool.
const CodeInterpreter = "code_interpreter"

// InterpreterDetail is a code_interpreter step's result.
type InterpreterDetail struct {
	// Code is the code as the model wrote it ("" when the arguments did
	// not parse).
	Code        string
	ContainerID string
	// Ran says the code reached the kernel: Output and Changed are its.
	Ran     bool
	Output  tool.PythonOutput
	Changed []ChangedFile
	// Error says why the call did not run (bad arguments, sandbox
	// failure); ErrorCode is as ShellDetail's.
	Error     string
	ErrorCode string
}

// InterpreterTool runs {"code": "..."} calls on the container's kernel.
type InterpreterTool struct {
	Name string // the function name the model sees (CodeInterpreter)
}

func (t InterpreterTool) Function() Tool {
	return PythonFunction(t.Name, "To give the user a file, save it in /mnt/data and link it as sandbox:/mnt/data/<name> in your answer.")
}

func (t InterpreterTool) Run(ctx context.Context, open SandboxFunc, call ToolCall, onOutput func(cmd, stream int, text string)) StepResult {
	d := &InterpreterDetail{}
	c, err := tool.ParsePythonArgs([]byte(call.Arguments))
	if err != nil {
		// Show what code there is (too long, a NUL, ...).
		var a tool.PythonArgs
		if json.Unmarshal([]byte(call.Arguments), &a) == nil && a.Code != nil {
			d.Code = *a.Code
		}
		d.Error, d.ErrorCode = err.Error(), "invalid_tool_input"
		return StepResult{Content: "error: " + err.Error(), IsError: true, Detail: d}
	}
	d.Code = c.Code
	res, containerID, err := RunPython(ctx, open, c, onOutput)
	d.ContainerID = containerID
	if err != nil {
		d.Error, d.ErrorCode = err.Error(), ErrorCode(err)
		return StepResult{Content: "error: " + err.Error(), IsError: true, Executed: containerID != "", Detail: d}
	}
	d.Ran, d.Output, d.Changed = true, res.Output, res.Changed
	return StepResult{Content: InterpreterResultText(PythonStdout(res.Output), PythonStderr(res.Output), res.Changed), Executed: true,
		Images: ModelImages(PythonImages(res.Output)), Detail: d}
}

// InterpreterResultText is what the model reads for a code_interpreter
// call (its figures go with it as images, StepResult.Images): JSON with its stdout (PythonStdout), its stderr (PythonStderr:
// the traceback, Shellgate's notes, and a line when the kernel was
// restarted) and the files of /mnt/data the call created or modified.
func InterpreterResultText(stdout, stderr string, changed []ChangedFile) string {
	type file struct {
		Path  string `json:"path"` // under /mnt/data/
		Bytes int64  `json:"bytes"`
	}
	v := struct {
		Stdout string `json:"stdout"`
		Stderr string `json:"stderr"`
		Files  []file `json:"files_changed,omitempty"`
	}{Stdout: stdout, Stderr: stderr}
	for _, f := range changed {
		v.Files = append(v.Files, file{Path: "/mnt/data/" + strings.TrimPrefix(f.Path, "/"), Bytes: f.Bytes})
	}
	return CodeExecText(v)
}
