package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"strings"
	"unicode/utf8"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
)

// The code-execution tools of Anthropic's Messages API, run in the
// caller's sandbox on any upstream model: the bash and text-editor
// sub-tools of code_execution_20250825 (and _20260120), the legacy Python
// tool of code_execution_20250522, and the namespaced bash tool
// (shellgate:bash / openrouter:bash with a sandbox engine).
//
// Their results are Anthropic's own result-block contents (CodeExecDetail
// holds one), and what the model reads is exactly that content as JSON, so
// a replayed result block reads the same to the model as the live one.

// Function names the model sees for the code-execution sub-tools.
const (
	BashCodeExecution       = "bash_code_execution"
	TextEditorCodeExecution = "text_editor_code_execution"
	CodeExecution           = "code_execution" // legacy Python (code_execution_20250522)
)

// MaxEditorFile is the largest file the text editor views or edits.
const MaxEditorFile = 1 << 20

// MaxPromotedFile is the largest file a bash call's result lists as an
// output file; a larger one is output_file_too_large.
const MaxPromotedFile = 512 << 20

// CodeExecDetail is a code-execution step's result: Content is the
// content object of the result block, one of *BashResult, *ViewResult,
// *CreateResult, *StrReplaceResult or *CodeExecError.
type CodeExecDetail struct {
	Content any
	// Images are the image outputs of a Python call on the kernel, for
	// the frontends that return them (Gemini's inlineData parts).
	Images []tool.Display
}

// BashResult is bash_code_execution_result (or, for the legacy Python
// tool, code_execution_result).
type BashResult struct {
	Type       string       `json:"type"`
	Stdout     string       `json:"stdout"`
	Stderr     string       `json:"stderr"`
	ReturnCode int          `json:"return_code"`
	Content    []OutputFile `json:"content"`
}

// OutputFile is a file a command created, as a durable file id
// (bash_code_execution_output / code_execution_output).
type OutputFile struct {
	Type   string `json:"type"`
	FileID string `json:"file_id"`
}

// ViewResult is text_editor_code_execution_view_result.
type ViewResult struct {
	Type       string `json:"type"`
	Content    string `json:"content"`
	FileType   string `json:"file_type"`
	NumLines   int    `json:"num_lines"`
	StartLine  int    `json:"start_line"`
	TotalLines int    `json:"total_lines"`
}

// CreateResult is text_editor_code_execution_create_result.
type CreateResult struct {
	Type         string `json:"type"`
	IsFileUpdate bool   `json:"is_file_update"`
}

// StrReplaceResult is text_editor_code_execution_str_replace_result: the
// edit as a unified-diff hunk ("-old", "+new" lines).
type StrReplaceResult struct {
	Type     string   `json:"type"`
	Lines    []string `json:"lines"`
	NewLines int      `json:"new_lines"`
	NewStart int      `json:"new_start"`
	OldLines int      `json:"old_lines"`
	OldStart int      `json:"old_start"`
}

// CodeExecError is a …_tool_result_error. ErrorMessage is Anthropic's for
// the text editor; Shellgate adds it to bash errors too, so the model
// learns what to fix.
type CodeExecError struct {
	Type         string `json:"type"`
	ErrorCode    string `json:"error_code"`
	ErrorMessage string `json:"error_message,omitempty"`
}

// CodeExecText is what the model reads for a code-execution result: the
// content object as JSON, as encoding/json's Encoder writes it without
// HTML escaping.
func CodeExecText(content any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(content)
	return strings.TrimSuffix(buf.String(), "\n")
}

func codeExecResult(content any, executed bool) StepResult {
	_, isErr := content.(*CodeExecError)
	return StepResult{Content: CodeExecText(content), IsError: isErr, Executed: executed, Detail: &CodeExecDetail{Content: content}}
}

// decodeArgs decodes a model's arguments object into v, saying plainly
// what is wrong.
func decodeArgs(raw string, v any, shape string) error {
	if strings.TrimSpace(raw) == "" {
		raw = "{}"
	}
	// As tool.ParseShellArgs does: in one pass with encoding/json's
	// semantics (the v1 API of the encoding/json/v2 module); what that
	// refuses takes encoding/json's Decoder, whose results and errors these
	// are (TestDecodeArgsMatchesDecoder).
	if jsonv1.Unmarshal([]byte(raw), v) == nil {
		return nil
	}
	reflect.ValueOf(v).Elem().SetZero()
	return decodeArgsDecoder(raw, v, shape)
}

// decodeArgsDecoder is decodeArgs with encoding/json's Decoder alone.
func decodeArgsDecoder(raw string, v any, shape string) error {
	dec := json.NewDecoder(strings.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("arguments are not a JSON object of the form %s: %v", shape, err)
	}
	if dec.More() {
		return fmt.Errorf("arguments are not a JSON object of the form %s: data after the object", shape)
	}
	return nil
}

// RestartText answers a bash call's restart: each command runs in a fresh
// shell anyway.
const RestartText = "The shell was restarted. (Every command runs in a fresh shell anyway; the files in /workspace/home are kept.)"

// BashTool is Anthropic's bash_code_execution: {"command": "..."} runs one
// command in a fresh bash -lc in /workspace/home, with internal/tool's
// default timeout and output cap; {"restart": true} answers that the
// shell was restarted (every command already starts a fresh shell; the
// files are kept).
type BashTool struct{}

func (BashTool) Function() Tool {
	return Tool{
		Name: BashCodeExecution,
		Description: "Run a bash command in the user's persistent Linux sandbox (Debian 12; bash, coreutils, Python 3 with " +
			"pandas and numpy, Node.js, git, jq, sqlite3; no network). The command runs in its own `bash -lc` in " +
			"/workspace/home (also /mnt/data), so environment variables and `cd` do not carry over to the next call; files " +
			"in /workspace/home do. Uploaded files are in $INPUT_DIR; write files for the user to $OUTPUT_DIR. " +
			fmt.Sprintf("Each command may run %d seconds; stdout and stderr are each cut to %d characters. ", tool.DefaultTimeoutMs/1000, tool.DefaultMaxOutput) +
			"`restart: true` restarts the shell.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"command":{"type":"string","description":"The bash command to run."},` +
			`"restart":{"type":"boolean","description":"Restart the shell instead of running a command."}` +
			`}}`),
	}
}

func bashError(code, msg string) *CodeExecError {
	return &CodeExecError{Type: "bash_code_execution_tool_result_error", ErrorCode: code, ErrorMessage: msg}
}

func (BashTool) Run(ctx context.Context, open SandboxFunc, call ToolCall, onOutput func(cmd, stream int, text string)) StepResult {
	var a struct {
		Command *string `json:"command"`
		Restart bool    `json:"restart"`
	}
	if err := decodeArgs(call.Arguments, &a, `{"command": "..."}`); err != nil {
		return codeExecResult(bashError("invalid_tool_input", err.Error()), false)
	}
	if a.Restart && a.Command == nil {
		return codeExecResult(&BashResult{Type: "bash_code_execution_result", Stdout: RestartText, Content: []OutputFile{}}, false)
	}
	if a.Command == nil || strings.TrimSpace(*a.Command) == "" {
		return codeExecResult(bashError("invalid_tool_input", `"command" is missing or empty: give the bash command to run`), false)
	}
	return runOne(ctx, open, *a.Command, onOutput, "bash_code_execution_result", "bash_code_execution_output", "bash_code_execution_tool_result_error")
}

// runOne runs one command and shapes its result as a code-execution
// result of the given type names.
func runOne(ctx context.Context, open SandboxFunc, command string, onOutput func(cmd, stream int, text string), resultType, outputType, errorType string) StepResult {
	fail := func(code, msg string, executed bool) StepResult {
		return codeExecResult(&CodeExecError{Type: errorType, ErrorCode: code, ErrorMessage: msg}, executed)
	}
	p := tool.Plan{Commands: []string{command}, TimeoutMs: tool.DefaultTimeoutMs, MaxOutputLength: tool.DefaultMaxOutput}
	res, err := RunPlan(ctx, open, p, onOutput)
	if err != nil && len(res.Outputs) == 0 {
		return fail(ErrorCode(err), err.Error(), res.containerID != "")
	}
	out := res.Outputs[0]
	if out.Outcome.Type == "timeout" {
		return fail("execution_time_exceeded", timeoutMessage(fmt.Sprintf("the command did not finish within %d seconds and was killed", p.TimeoutMs/1000), out.Stdout, out.Stderr), true)
	}
	r := &BashResult{Type: resultType, Stdout: out.Stdout, Stderr: out.Stderr, Content: []OutputFile{}}
	if out.Outcome.ExitCode != nil {
		r.ReturnCode = *out.Outcome.ExitCode
	}
	if fail := promoteChanged(ctx, open, res.Changed, r, outputType, errorType); fail != nil {
		return codeExecResult(fail, true)
	}
	return codeExecResult(r, true)
}

// timeoutMessage is a timed-out run's error message: what happened, then
// the output so far.
func timeoutMessage(msg, stdout, stderr string) string {
	if stdout != "" {
		msg += "; stdout so far: " + stdout
	}
	if stderr != "" {
		msg += "; stderr so far: " + stderr
	}
	return msg
}

// promoteChanged adds the files a call changed to r's content as output
// file ids; a file too large to keep is the error returned.
func promoteChanged(ctx context.Context, open SandboxFunc, changed []ChangedFile, r *BashResult, outputType, errorType string) *CodeExecError {
	if len(changed) == 0 {
		return nil
	}
	sb, err := open(ctx)
	if err != nil {
		return nil
	}
	for _, f := range changed {
		if f.Bytes > MaxPromotedFile {
			return &CodeExecError{Type: errorType, ErrorCode: "output_file_too_large", ErrorMessage: fmt.Sprintf("the command ran (exit code %d), but the file %s it wrote is %d bytes, over the %d-byte cap for output files", r.ReturnCode, f.Path, f.Bytes, MaxPromotedFile)}
		}
		id, err := sb.Promote(ctx, f.Path)
		if errors.Is(err, sandbox.ErrTooLarge) {
			return &CodeExecError{Type: errorType, ErrorCode: "output_file_too_large", ErrorMessage: fmt.Sprintf("the command ran (exit code %d), but the file %s it wrote is too large to keep as an output file", r.ReturnCode, f.Path)}
		}
		if err == nil {
			r.Content = append(r.Content, OutputFile{Type: outputType, FileID: id})
		}
	}
	return nil
}

// CodeTool is the legacy code_execution_20250522 tool (and Gemini's
// codeExecution): {"code": "..."} runs on the container's Python kernel,
// so state carries from call to call; the result is code_execution_result.
// With Programmatic set it is Anthropic's Python tool of programmatic tool
// calling: the code can call client tools, pausing the execution
// (StepResult.Paused) until the client's result resumes it (Resume).
type CodeTool struct {
	Programmatic *Programmatic
}

// Programmatic are the client tools code may call.
type Programmatic struct {
	// Tools may be called from code; their descriptions and schemas go
	// into the function's description for the model.
	Tools []Tool
	// Denied are the client's other tools: calling one from code raises
	// an error naming Caller.
	Denied []string
	// Caller is the code execution tool's version, as the client named it
	// ("code_execution_20260120"): client calls made by code carry it.
	Caller string
}

// ToolAnswer is a client's result for a client tool call made by code.
type ToolAnswer struct {
	Call    string // the paused call (a ToolCall.ID of StepResult.Paused)
	Content string
	IsError bool
}

// Resumer is a server tool whose steps can pause on client tool calls and
// be resumed with their answers in a later request.
type Resumer interface {
	// Resume hands rs.Answers (one per paused call) to the execution
	// rs.Call paused in (with rs.State, the state its paused StepResult
	// gave, when the tool keeps none itself) and runs it on, as Run would.
	Resume(ctx context.Context, sb SandboxFunc, rs *Resume, onOutput func(cmd, stream int, text string)) StepResult
}

// PythonFunction is a Python tool on the container's kernel as the model
// sees it: the function name, taking {"code": "..."}; extra, when not
// empty, ends the description.
func PythonFunction(name, extra string) Tool {
	desc := "Run Python 3 code in a Jupyter (IPython) kernel in the user's persistent Linux sandbox " +
		"(pandas, numpy, matplotlib, scipy, scikit-learn, seaborn, openpyxl). The kernel keeps variables and " +
		"imports between calls. The working directory is /workspace/home (also /mnt/data): files there persist " +
		"and are what the user can download; no network. stdout, stderr, the value of the last expression and " +
		"figures (plt.show() or any open figure) come back; to give the user a figure as a file, save it there " +
		"(plt.savefig('chart.png'))."
	if extra != "" {
		desc += " " + extra
	}
	return Tool{
		Name:        name,
		Description: desc,
		Parameters:  json.RawMessage(`{"type":"object","properties":{"code":{"type":"string","description":"The Python code to run."}},"required":["code"]}`),
	}
}

// maxToolDoc bounds what one client tool adds to the Python function's
// description.
const maxToolDoc = 4096

func (t CodeTool) Function() Tool {
	p := t.Programmatic
	if p == nil || len(p.Tools) == 0 {
		return PythonFunction(CodeExecution, "")
	}
	var b strings.Builder
	b.WriteString("The code can call these tools of the user's as async functions, with keyword arguments as their input schema names them, " +
		"or positional ones in the order of its properties (top-level await works: `r = await " + p.Tools[0].Name + "(...)`); each returns the tool's result as a string (json.loads it when it is JSON) " +
		"and raises ToolError when the tool fails. Call them from code to process many results without reading each one:")
	for _, c := range p.Tools {
		doc := fmt.Sprintf("\n- %s: %s Input schema: %s", c.Name, c.Description, compactJSON(c.Parameters))
		if len(doc) > maxToolDoc {
			doc = doc[:maxToolDoc] + "…"
		}
		b.WriteString(doc)
	}
	return PythonFunction(CodeExecution, b.String())
}

// schemaProperties are the names of a JSON Schema's properties, in the
// order the schema lists them (nil when it has none or does not parse).
func schemaProperties(schema []byte) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(schema, &top) != nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(top["properties"]))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var names []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := t.(string)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
		names = append(names, name)
	}
	return names
}

func compactJSON(raw []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

func (t CodeTool) Run(ctx context.Context, open SandboxFunc, call ToolCall, onOutput func(cmd, stream int, text string)) StepResult {
	c, err := tool.ParsePythonArgs([]byte(call.Arguments))
	if err != nil {
		return codeExecResult(&CodeExecError{Type: "code_execution_tool_result_error", ErrorCode: "invalid_tool_input", ErrorMessage: err.Error()}, false)
	}
	if p := t.Programmatic; p != nil {
		c.ToolParams = map[string][]string{}
		for _, f := range p.Tools {
			c.Tools = append(c.Tools, f.Name)
			c.ToolParams[f.Name] = schemaProperties(f.Parameters)
		}
		c.Denied, c.Caller = p.Denied, p.Caller
	}
	return pythonStep(ctx, open, c, onOutput)
}

// Resume answers the client tool calls the execution of call waits for.
func (t CodeTool) Resume(ctx context.Context, open SandboxFunc, rs *Resume, onOutput func(cmd, stream int, text string)) StepResult {
	c, err := tool.ParsePythonArgs([]byte(rs.Call.Arguments))
	if err != nil {
		// The limits come from the call as it was made; a call that did
		// not parse never ran, so there is nothing to resume.
		return codeExecResult(&CodeExecError{Type: "code_execution_tool_result_error", ErrorCode: "invalid_tool_input", ErrorMessage: err.Error()}, false)
	}
	c.Resume = &tool.PythonResume{}
	for _, a := range rs.Answers {
		pa := tool.PythonAnswer{Call: a.Call, Result: a.Content}
		if a.IsError {
			pa.Error = "the tool reported an error: " + a.Content
		}
		c.Resume.Answers = append(c.Resume.Answers, pa)
	}
	if t.Programmatic != nil {
		for _, f := range t.Programmatic.Tools {
			c.Tools = append(c.Tools, f.Name)
		}
	}
	return pythonStep(ctx, open, c, onOutput)
}

func pythonStep(ctx context.Context, open SandboxFunc, c tool.PythonCall, onOutput func(cmd, stream int, text string)) StepResult {
	res, containerID, err := RunPython(ctx, open, c, onOutput)
	if err != nil {
		return codeExecResult(&CodeExecError{Type: "code_execution_tool_result_error", ErrorCode: ErrorCode(err), ErrorMessage: err.Error()}, containerID != "")
	}
	out := res.Output
	if len(out.ToolCalls) > 0 {
		st := StepResult{Executed: true}
		for _, tc := range out.ToolCalls {
			st.Paused = append(st.Paused, ToolCall{ID: tc.Call, Name: tc.Name, Arguments: string(tc.Input)})
		}
		return st
	}
	if out.Expired != "" {
		code := "unavailable"
		if out.ExpiredWaiting {
			code = "execution_time_exceeded"
		}
		return codeExecResult(&CodeExecError{Type: "code_execution_tool_result_error", ErrorCode: code,
			ErrorMessage: "the code's execution could not be resumed with the tool result: " + out.Expired}, true)
	}
	if out.Outcome.Type == "timeout" {
		msg := timeoutMessage(fmt.Sprintf("the code did not finish within %d seconds and was interrupted; the kernel and its variables are kept", c.TimeoutMs/1000), out.Stdout, out.Stderr)
		return withImages(codeExecResult(&CodeExecError{Type: "code_execution_tool_result_error", ErrorCode: "execution_time_exceeded", ErrorMessage: msg}, true), out)
	}
	r := &BashResult{Type: "code_execution_result", Stdout: PythonStdout(out), Stderr: PythonStderr(out), Content: []OutputFile{}}
	if out.Outcome.ExitCode != nil {
		r.ReturnCode = *out.Outcome.ExitCode
	}
	if fail := promoteChanged(ctx, open, res.Changed, r, "code_execution_output", "code_execution_tool_result_error"); fail != nil {
		return withImages(codeExecResult(fail, true), out)
	}
	return withImages(codeExecResult(r, true), out)
}

// withImages adds a Python call's figures to its step: for the model, and
// for the frontends that return them (CodeExecDetail.Images).
func withImages(st StepResult, out tool.PythonOutput) StepResult {
	imgs := PythonImages(out)
	st.Detail.(*CodeExecDetail).Images = imgs
	st.Images = ModelImages(imgs)
	return st
}

// ModelImages are images as the upstream model is given them.
func ModelImages(ds []tool.Display) []Image {
	var out []Image
	for _, d := range ds {
		out = append(out, Image{MediaType: d.MIME, Data: base64.StdEncoding.EncodeToString(d.Data)})
	}
	return out
}

// RunPython opens the sandbox and runs c on its kernel; containerID is
// set once the sandbox was opened.
func RunPython(ctx context.Context, open SandboxFunc, c tool.PythonCall, onOutput func(cmd, stream int, text string)) (res PythonResult, containerID string, err error) {
	sb, err := open(ctx)
	if err != nil {
		return PythonResult{}, "", err
	}
	var f func(stream int, text string)
	if onOutput != nil {
		f = func(stream int, text string) { onOutput(0, stream, text) }
	}
	res, err = sb.Python(ctx, c, f)
	return res, sb.ContainerID(), err
}

// PythonStdout is what a Python call printed, followed by the text of its
// rich outputs (the value of the last expression, a DataFrame's table) as
// a notebook shows them, each on its own line.
func PythonStdout(o tool.PythonOutput) string {
	s := o.Stdout
	for _, d := range o.Displays {
		if d.MIME != "text/plain" {
			continue
		}
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += d.Text + "\n"
	}
	return s
}

// PythonStderr is a Python call's stderr, then the exception's traceback,
// then Shellgate's notes, and first, when the kernel is new and earlier
// state is gone, a line that says so.
func PythonStderr(o tool.PythonOutput) string {
	var b strings.Builder
	if o.Restarted != "" {
		b.WriteString("shellgate: the Python kernel was restarted and variables, imports and other state from earlier calls are lost: " + o.Restarted + "\n")
	}
	b.WriteString(o.Stderr)
	if o.Error != nil {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		if len(o.Error.Traceback) > 0 {
			b.WriteString(strings.Join(o.Error.Traceback, "\n") + "\n")
		} else {
			b.WriteString(o.Error.Name + ": " + o.Error.Value + "\n")
		}
	}
	if o.Notes != "" {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		b.WriteString(o.Notes)
	}
	return b.String()
}

// PythonImages are a Python call's image outputs.
func PythonImages(o tool.PythonOutput) []tool.Display {
	var out []tool.Display
	for _, d := range o.Displays {
		if d.IsImage() {
			out = append(out, d)
		}
	}
	return out
}

// EditorTool is Anthropic's text_editor_code_execution: view, create and
// str_replace on files beneath /workspace/home.
type EditorTool struct{}

func (EditorTool) Function() Tool {
	return Tool{
		Name: TextEditorCodeExecution,
		Description: "View, create and edit text files in the user's sandbox, beneath /workspace/home (also /mnt/data; uploads are " +
			"in $INPUT_DIR = /workspace/home/input). Paths are relative to /workspace/home or absolute beneath it. " +
			"`view` shows a file (view_range [start, end] 1-based, end -1 for the rest); `create` writes file_text to path " +
			"(replacing the file); `str_replace` replaces old_str, which must occur exactly once, with new_str. " +
			fmt.Sprintf("Files over %d bytes cannot be viewed or edited here; use bash for those.", MaxEditorFile),
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"command":{"type":"string","enum":["view","create","str_replace"]},` +
			`"path":{"type":"string"},` +
			`"file_text":{"type":"string","description":"create: the file's content."},` +
			`"old_str":{"type":"string","description":"str_replace: the text to replace (exactly one occurrence)."},` +
			`"new_str":{"type":"string","description":"str_replace: the replacement."},` +
			`"view_range":{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2,"description":"view: [first line, last line], 1-based; -1 as last for the end."}` +
			`},"required":["command","path"]}`),
	}
}

func editorError(code, msg string) *CodeExecError {
	return &CodeExecError{Type: "text_editor_code_execution_tool_result_error", ErrorCode: code, ErrorMessage: msg}
}

// editorPath maps the model's path to one relative to the home, or says
// why it is refused.
func editorPath(p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", errors.New(`"path" is missing: give a file path beneath /workspace/home`)
	}
	rel := p
	for _, root := range []string{"/workspace/home", "/mnt/data"} {
		if p == root {
			return "", fmt.Errorf("%s is a directory: give a file path beneath it", p)
		}
		if strings.HasPrefix(p, root+"/") {
			rel = strings.TrimPrefix(p, root+"/")
			break
		}
	}
	if path.IsAbs(rel) {
		return "", fmt.Errorf("%s is outside the sandbox's files: paths must be beneath /workspace/home (or /mnt/data)", p)
	}
	clean := path.Clean(rel)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%s is outside the sandbox's files: paths must be beneath /workspace/home", p)
	}
	return clean, nil
}

func (EditorTool) Run(ctx context.Context, open SandboxFunc, call ToolCall, _ func(cmd, stream int, text string)) StepResult {
	var a struct {
		Command   string  `json:"command"`
		Path      string  `json:"path"`
		FileText  *string `json:"file_text"`
		OldStr    *string `json:"old_str"`
		NewStr    *string `json:"new_str"`
		ViewRange []int   `json:"view_range"`
	}
	invalid := func(msg string) StepResult { return codeExecResult(editorError("invalid_tool_input", msg), false) }
	if err := decodeArgs(call.Arguments, &a, `{"command": "view|create|str_replace", "path": "...", ...}`); err != nil {
		return invalid(err.Error())
	}
	switch a.Command {
	case "view", "create", "str_replace":
	case "":
		return invalid(`"command" is missing: use view, create or str_replace`)
	default:
		return invalid(fmt.Sprintf("unknown command %q: use view, create or str_replace", a.Command))
	}
	rel, err := editorPath(a.Path)
	if err != nil {
		return invalid(err.Error())
	}
	switch a.Command {
	case "create":
		if a.FileText == nil {
			return invalid(`create needs "file_text", the file's content`)
		}
	case "str_replace":
		if a.OldStr == nil || *a.OldStr == "" {
			return invalid(`str_replace needs a non-empty "old_str"`)
		}
		if a.NewStr == nil {
			a.NewStr = new(string)
		}
	case "view":
		if a.ViewRange != nil && (len(a.ViewRange) != 2 || a.ViewRange[0] < 1 || (a.ViewRange[1] != -1 && a.ViewRange[1] < a.ViewRange[0])) {
			return invalid(fmt.Sprintf("view_range %v: want [first, last] with 1 <= first <= last, or last -1 for the end of the file", a.ViewRange))
		}
	}
	sb, err := open(ctx)
	if err != nil {
		return codeExecResult(editorError(ErrorCode(err), err.Error()), false)
	}
	// read returns the file's text, or a result to answer with.
	read := func() (string, *StepResult) {
		data, err := sb.ReadFile(ctx, rel, MaxEditorFile)
		if err != nil {
			r := codeExecResult(readError(a.Path, err), true)
			return "", &r
		}
		if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
			r := codeExecResult(editorError("invalid_tool_input", fmt.Sprintf("%s is not a text file; use bash to inspect it", a.Path)), true)
			return "", &r
		}
		return string(data), nil
	}
	switch a.Command {
	case "view":
		text, fail := read()
		if fail != nil {
			return *fail
		}
		lines := splitLines(text)
		start, end := 1, len(lines)
		if a.ViewRange != nil {
			start = a.ViewRange[0]
			if a.ViewRange[1] != -1 {
				end = min(a.ViewRange[1], len(lines))
			}
			if start > len(lines) && !(start == 1 && len(lines) == 0) {
				return invalid(fmt.Sprintf("view_range starts at line %d, but %s has %d lines", start, a.Path, len(lines)))
			}
		}
		shown := []string{}
		if start <= end {
			shown = lines[start-1 : end]
		}
		return codeExecResult(&ViewResult{Type: "text_editor_code_execution_view_result", Content: strings.Join(shown, "\n"),
			FileType: "text", NumLines: len(shown), StartLine: start, TotalLines: len(lines)}, true)
	case "create":
		existed := false
		if _, err := sb.ReadFile(ctx, rel, 0); err == nil || errors.Is(err, sandbox.ErrTooLarge) || errors.Is(err, sandbox.ErrNotRegular) {
			existed = true
		}
		if err := sb.WriteFile(ctx, rel, strings.NewReader(*a.FileText)); err != nil {
			return codeExecResult(writeError(a.Path, err), true)
		}
		return codeExecResult(&CreateResult{Type: "text_editor_code_execution_create_result", IsFileUpdate: existed}, true)
	default: // str_replace
		text, fail := read()
		if fail != nil {
			return *fail
		}
		switch n := strings.Count(text, *a.OldStr); n {
		case 0:
			return codeExecResult(editorError("string_not_found", fmt.Sprintf("old_str was not found in %s; view the file and copy the text exactly", a.Path)), true)
		case 1:
		default:
			return codeExecResult(editorError("invalid_tool_input", fmt.Sprintf("old_str occurs %d times in %s; it must occur exactly once: include more surrounding text to make it unique", n, a.Path)), true)
		}
		at := strings.Index(text, *a.OldStr)
		updated := text[:at] + *a.NewStr + text[at+len(*a.OldStr):]
		if len(updated) > MaxEditorFile {
			return invalid(fmt.Sprintf("the edit would make %s larger than %d bytes", a.Path, MaxEditorFile))
		}
		if err := sb.WriteFile(ctx, rel, strings.NewReader(updated)); err != nil {
			return codeExecResult(writeError(a.Path, err), true)
		}
		// The hunk spans whole lines: from the line where old_str starts
		// to the line where it ends, before and after.
		lineStart := strings.LastIndexByte(text[:at], '\n') + 1
		first := strings.Count(text[:at], "\n") + 1
		oldEnd := at + len(*a.OldStr)
		oldEnd += lineTail(text[oldEnd:])
		newEnd := at + len(*a.NewStr)
		newEnd += lineTail(updated[newEnd:])
		oldHunk := splitLines(text[lineStart:oldEnd])
		newHunk := splitLines(updated[lineStart:newEnd])
		r := &StrReplaceResult{Type: "text_editor_code_execution_str_replace_result", Lines: []string{},
			OldStart: first, OldLines: len(oldHunk), NewStart: first, NewLines: len(newHunk)}
		for _, l := range oldHunk {
			r.Lines = append(r.Lines, "-"+l)
		}
		for _, l := range newHunk {
			r.Lines = append(r.Lines, "+"+l)
		}
		return codeExecResult(r, true)
	}
}

// lineTail is the length of s up to (not including) its first newline.
func lineTail(s string) int {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return i
	}
	return len(s)
}

// splitLines splits text into lines; a final newline does not start
// another line, and the empty text has no lines.
func splitLines(text string) []string {
	if text == "" {
		return []string{}
	}
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n")
}

func readError(p string, err error) *CodeExecError {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrDestroyed):
		return editorError("file_not_found", fmt.Sprintf("%s does not exist", p))
	case errors.Is(err, sandbox.ErrTooLarge):
		return editorError("invalid_tool_input", fmt.Sprintf("%s is larger than %d bytes, the text editor's cap; use bash (head, sed -n, grep) for it", p, MaxEditorFile))
	case errors.Is(err, sandbox.ErrNotRegular):
		return editorError("invalid_tool_input", fmt.Sprintf("%s is not a regular file (a directory?); use bash `ls` to list a directory", p))
	}
	return editorError(ErrorCode(err), fmt.Sprintf("reading %s: %v", p, err))
}

func writeError(p string, err error) *CodeExecError {
	if errors.Is(err, sandbox.ErrNotRegular) {
		return editorError("invalid_tool_input", fmt.Sprintf("%s is not a regular file (a directory?)", p))
	}
	return editorError(ErrorCode(err), fmt.Sprintf("writing %s: %v", p, err))
}

// BashFunction is the namespaced bash tool (shellgate:bash,
// openrouter:bash) as the model sees it, whether it runs in the sandbox
// or goes back to the client.
func BashFunction(name string) Tool {
	return Tool{
		Name: name,
		Description: "Run bash commands in the user's Linux sandbox, in /workspace/home. Give `command` (one command) or " +
			"`commands` (several, run in order, each in its own shell). `restart: true` restarts the shell. " +
			fmt.Sprintf("timeout_ms per command defaults to %d (max %d); stdout and stderr are each cut to max_output_length "+
				"characters (default %d, max %d).", tool.DefaultTimeoutMs, tool.MaxTimeoutMs, tool.DefaultMaxOutput, tool.MaxMaxOutput),
		Parameters: json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{`+
			`"command":{"type":"string","description":"The bash command to run."},`+
			`"commands":{"type":"array","items":{"type":"string"},"maxItems":%d,"description":"Several commands, run in order."},`+
			`"restart":{"type":"boolean","description":"Restart the shell."},`+
			`"timeout_ms":{"type":"integer","minimum":1},`+
			`"max_output_length":{"type":"integer","minimum":0}`+
			`}}`, tool.MaxCommands)),
	}
}

// NSBashTool runs the namespaced bash tool's calls in the sandbox:
// {"command"} or {"commands": [...]}, restart, timeout_ms and
// max_output_length, with the shell tool's limits. Its Detail is a
// *ShellDetail.
type NSBashTool struct {
	Name string // the function name the model sees ("bash")
}

func (t NSBashTool) Function() Tool { return BashFunction(t.Name) }

func (t NSBashTool) Run(ctx context.Context, open SandboxFunc, call ToolCall, onOutput func(cmd, stream int, text string)) StepResult {
	var a struct {
		Command         *string  `json:"command"`
		Commands        []string `json:"commands"`
		Restart         bool     `json:"restart"`
		TimeoutMs       *int64   `json:"timeout_ms"`
		MaxOutputLength *int64   `json:"max_output_length"`
	}
	if err := decodeArgs(call.Arguments, &a, `{"command": "..."} or {"commands": ["..."]}`); err != nil {
		d := &ShellDetail{Error: err.Error(), ErrorCode: "invalid_tool_input"}
		return StepResult{Content: "error: " + err.Error(), IsError: true, Detail: d}
	}
	sa := tool.ShellArgs{Commands: a.Commands, TimeoutMs: a.TimeoutMs, MaxOutputLength: a.MaxOutputLength}
	if a.Command != nil {
		sa.Commands = append([]string{*a.Command}, sa.Commands...)
	}
	if a.Restart && len(sa.Commands) == 0 {
		d := &ShellDetail{Outputs: []tool.CommandOutput{}}
		return StepResult{Content: RestartText, Detail: d}
	}
	args, _ := json.Marshal(sa)
	return ShellTool{Name: t.Name}.Run(ctx, open, ToolCall{ID: call.ID, Name: call.Name, Arguments: string(args)}, onOutput)
}
