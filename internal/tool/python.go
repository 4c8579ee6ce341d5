package tool

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/shellgate/shellgate/sandbox"
)

// The container's Python kernel: one IPython kernel per sandbox, started
// on the first Python call and serving every Python tool of that
// container, so variables, imports and open files survive from one call
// (and one request) to the next until the sandbox sleeps or the kernel
// dies.
//
// kernel.py runs inside the sandbox in two roles. As the sandbox's
// resident process (sandbox.Command.Resident: the agent spares it when it
// kills what a command left behind) it owns the kernel through
// jupyter_client, IPython's own client library, and serves calls on a Unix
// socket in /tmp. Each call is an ordinary command: a small client, Python
// without site packages, that sends the code to the driver and copies its
// answer, JSON lines, to stdout. So a call streams, is timed, capped,
// metered and limited exactly like a shell command, on every runtime and
// backend, and the host speaks neither ZeroMQ nor Jupyter's messages
// (docs/python.md says why).

//go:embed kernel.py
var kernelScript string

// Limits of one Python call.
const (
	// MaxPythonCode is the largest code a call takes, in bytes: the code
	// travels base64-encoded in the client's command line, which Linux
	// caps at 128 KiB per argument.
	MaxPythonCode = 64 << 10
	// MaxPythonImages and MaxPythonImageBytes bound the images one call
	// returns; the rest are dropped with a note.
	MaxPythonImages     = 4
	MaxPythonImageBytes = 1 << 20
	// pythonMaxBytes bounds the client's answer (the driver caps what it
	// sends below it; the bound holds against a hostile sandbox).
	pythonMaxBytes = 8 << 20
	// kernelGraceMs is how long past a call's timeout the host waits for
	// the driver to interrupt the code and answer.
	kernelGraceMs = 10_000
)

// PythonCall is a validated Python call.
type PythonCall struct {
	Code            string
	TimeoutMs       int64
	MaxOutputLength int
	Notes           []string // what was adjusted, as Plan's

	// Programmatic tool calling: Tools are client tools the code may call
	// (async functions in the kernel's namespace, keyword arguments);
	// calling one pauses the execution in the kernel and the call's output
	// is the ToolCall. Denied are client tools the code may not call
	// (calling one raises ToolError naming Caller, the code execution tool
	// version).
	Tools, Denied []string
	Caller        string
	// ToolParams are each tool's input properties in their schema's
	// order: positional arguments fill them.
	ToolParams map[string][]string
	// ToolWait bounds how long the execution waits for a tool's result
	// (0: ToolWait).
	ToolWait time.Duration
	// Resume, when set, answers the tool calls a paused execution waits
	// for instead of running Code; the execution goes on from there.
	Resume *PythonResume
}

// PythonResume are the client's answers to the tool calls a paused
// execution waits for: one for each, together.
type PythonResume struct {
	Answers []PythonAnswer
}

// PythonAnswer answers one tool call.
type PythonAnswer struct {
	Call string // PythonToolCall.Call
	// Result is what the tool returns to the code; Error, when not empty,
	// is raised in the code instead (a ToolError).
	Result, Error string
}

// PythonToolCall is a client tool called by code: the execution waits in
// the kernel for PythonResume (at most ToolWait). Calls the code starts
// together (asyncio.gather) pause it together.
type PythonToolCall struct {
	Call  string // the driver's token for this call: 24 hex digits
	Name  string // one of PythonCall.Tools
	Input json.RawMessage
}

// Limits of programmatic tool calls.
const (
	// MaxToolInput bounds a tool call's input (JSON) the code makes.
	MaxToolInput = 256 << 10
	// MaxToolResult bounds a tool's result handed to the code, as JSON
	// text, and MaxToolResults the results of one resume together: they
	// travel in the client's command line, which Linux caps at 128 KiB per
	// argument (base64 of the JSON).
	MaxToolResult  = 64 << 10
	MaxToolResults = 80 << 10
	// MaxToolBatch bounds the calls the code makes at once (kernel.py's
	// MAX_BATCH).
	MaxToolBatch = 32
	// ToolWait is how long a paused execution waits for its tool result
	// (kernel.py's PARK_S): then it is ended, and a resume finds it gone.
	ToolWait = 300 * time.Second
)

// PythonArgs are the arguments a model writes for a Python tool.
type PythonArgs struct {
	Code            *string `json:"code"`
	TimeoutMs       *int64  `json:"timeout_ms,omitempty"`
	MaxOutputLength *int64  `json:"max_output_length,omitempty"`
}

// ParsePythonArgs decodes and validates a model's {"code": "..."}.
func ParsePythonArgs(raw []byte) (PythonCall, error) {
	var a PythonArgs
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&a); err != nil {
		return PythonCall{}, invalid(`arguments are not a JSON object of the form {"code": "..."}: %v`, err)
	}
	return a.Call()
}

// Call validates the arguments: code non-empty, at most MaxPythonCode
// bytes, without NUL; limits as the shell's.
func (a PythonArgs) Call() (PythonCall, error) {
	if a.Code == nil || strings.TrimSpace(*a.Code) == "" {
		return PythonCall{}, invalid(`"code" is missing or empty: give the Python code to run`)
	}
	c := PythonCall{Code: *a.Code}
	if len(c.Code) > MaxPythonCode {
		return PythonCall{}, invalid(`"code" is %d bytes: at most %d are allowed in one call; write long code to a file with the shell and run it from there`, len(c.Code), MaxPythonCode)
	}
	if strings.IndexByte(c.Code, 0) >= 0 {
		return PythonCall{}, invalid(`"code" contains a NUL character`)
	}
	var err error
	if c.TimeoutMs, c.MaxOutputLength, err = limits(a.TimeoutMs, a.MaxOutputLength, &c.Notes); err != nil {
		return PythonCall{}, err
	}
	return c, nil
}

// PythonOutput is one Python call's result.
type PythonOutput struct {
	// Stdout and Stderr are the code's streams, capped at the call's
	// MaxOutputLength characters each with the shell's truncation marker.
	Stdout, Stderr string
	// Displays are the rich outputs (display_data and the execute_result)
	// in order.
	Displays []Display
	// Error is the exception the code raised, if any (a timeout raises
	// KeyboardInterrupt).
	Error *PythonError
	// Outcome is {"type":"exit","exit_code":0} when the code ran through,
	// exit code 1 when it raised, {"type":"timeout"} when it was
	// interrupted at its timeout (the kernel and its state are kept).
	Outcome Outcome
	// Restarted says why the kernel is new and earlier state is gone
	// ("" for the container's first kernel and for a kernel that was kept).
	Restarted string
	// Notes are Shellgate's own lines (limits, dropped images, a kernel
	// that died), each ending in a newline.
	Notes     string
	Truncated bool
	// ToolCalls are set when the code called client tools: the execution
	// is paused in the kernel (Outcome is then zero), to be resumed with
	// PythonCall.Resume answering each.
	ToolCalls []PythonToolCall
	// Expired says why a resume found no paused execution to answer (it
	// waited too long, another call ended it, the container slept);
	// ExpiredWaiting that it was ended for waiting past its limit.
	Expired        string
	ExpiredWaiting bool
}

// Display is one rich output: an image (Data) or text (Text).
type Display struct {
	MIME string // "image/png", "image/jpeg", "text/plain", "text/html"
	Text string
	Data []byte
}

// PythonError is an exception: its class, its message and the traceback.
type PythonError struct {
	Name      string   `json:"ename"`
	Value     string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// IsImage reports whether d is an image.
func (d Display) IsImage() bool { return strings.HasPrefix(d.MIME, "image/") }

// Kernels remembers the sandboxes that had a kernel, to tell the model
// when a call starts a new one and earlier state is gone. It is in memory:
// after the server restarts, a new kernel reads as a first one.
type Kernels struct {
	mu   sync.Mutex
	seen map[string]bool
}

// maxKernelsSeen bounds Kernels' memory; past it the record starts over.
const maxKernelsSeen = 1 << 16

func (k *Kernels) started(name string) (had bool) {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen == nil || len(k.seen) >= maxKernelsSeen {
		k.seen = map[string]bool{}
	}
	had = k.seen[name]
	k.seen[name] = true
	return had
}

// RunPython runs c on the named sandbox's kernel, starting the kernel
// (and its driver) when there is none. onOutput, when not nil, gets the
// code's stdout (1) and stderr (2) as they are produced.
func RunPython(ctx context.Context, ex Executor, name string, c PythonCall, k *Kernels, onOutput func(stream int, text string)) (PythonOutput, error) {
	req := map[string]any{
		"code": c.Code, "timeout_ms": c.TimeoutMs, "max_text": c.MaxOutputLength,
		"max_images": MaxPythonImages, "max_image_bytes": MaxPythonImageBytes,
	}
	if len(c.Tools) > 0 || len(c.Denied) > 0 {
		req["tools"], req["denied"], req["caller"], req["params"] = c.Tools, c.Denied, c.Caller, c.ToolParams
		if c.ToolWait > 0 {
			req["park_s"] = c.ToolWait.Seconds()
		}
	}
	if r := c.Resume; r != nil {
		var answers []map[string]string
		total := 0
		for _, a := range r.Answers {
			enc, _ := json.Marshal(a.Result)
			switch {
			case a.Error != "":
				answers = append(answers, map[string]string{"call": a.Call, "error": capped(a.Error, 4096)})
			case len(enc) > MaxToolResult || total+len(enc) > MaxToolResults:
				answers = append(answers, map[string]string{"call": a.Call, "error": fmt.Sprintf("the tool's result is %d bytes of JSON: at most %d bytes (%d for the results of one resume together) reach the code", len(enc), MaxToolResult, MaxToolResults)})
			default:
				total += len(enc)
				answers = append(answers, map[string]string{"call": a.Call, "result": a.Result})
			}
		}
		req = map[string]any{"resume": true, "answers": answers, "timeout_ms": c.TimeoutMs}
	}
	run := func(wait bool) (*kernelAnswer, sandbox.Result, error) {
		req["wait"] = wait
		b, _ := json.Marshal(req)
		a := &kernelAnswer{onOutput: onOutput, maxChars: c.MaxOutputLength, tools: c.Tools}
		res, err := ex.Exec(ctx, name, sandbox.Command{
			Command:   "exec python3 -I -S -c " + shellQuote(kernelScript) + " call " + base64.StdEncoding.EncodeToString(b),
			TimeoutMs: c.TimeoutMs + kernelGraceMs,
			MaxBytes:  pythonMaxBytes,
			OnOutput:  func(stream byte, data []byte) { a.feed(stream, data) },
		})
		return a, res, err
	}
	a, res, err := run(false)
	if err != nil {
		return PythonOutput{}, err
	}
	if a.noKernel && res.ExitCode == 3 && c.Resume != nil {
		// No driver: the kernel and the paused execution are gone.
		return PythonOutput{Expired: "the container's Python kernel is not running (the container slept or was restarted while the execution waited), so the paused execution is gone"}, nil
	}
	if a.noKernel && res.ExitCode == 3 {
		had := k.started(name)
		if _, err := ex.Exec(ctx, name, sandbox.Command{Command: "exec python3 -I -c " + shellQuote(kernelScript) + " serve", Resident: true}); err != nil {
			return PythonOutput{}, fmt.Errorf("start the Python kernel: %w", err)
		}
		first := res.Notes // a wake's own note (the running state lost)
		if a, res, err = run(true); err != nil {
			return PythonOutput{}, err
		}
		res.Notes = append(first, res.Notes...)
		if had && a.out.Restarted == "" {
			a.out.Restarted = "the container's Python kernel was not running (the container slept or was restarted since the last Python call)"
		}
	}
	return a.result(res, c), nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// kernelAnswer reads the client's JSON lines as they come.
type kernelAnswer struct {
	onOutput func(stream int, text string)
	maxChars int
	line     []byte
	bad      int // lines that were not the driver's
	noKernel bool
	done     bool
	tools    []string // the client tools the code may call
	paused   bool
	timedOut bool
	exitCode *int     // set by sys.exit
	chars    [3]int64 // characters the code wrote per stream, kept or not
	out      PythonOutput
	stdout   strings.Builder
	stderr   strings.Builder
	stderrC  []byte // the client's own stderr (a broken driver), kept short
}

// maxKernelLine bounds one answer line (an image is at most
// MaxPythonImageBytes, base64-encoded, plus its text).
const maxKernelLine = 2*MaxPythonImageBytes + 4*MaxMaxOutput + 4096

func (a *kernelAnswer) feed(stream byte, data []byte) {
	if stream != 1 {
		if len(a.stderrC) < 4096 {
			a.stderrC = append(a.stderrC, data[:min(len(data), 4096-len(a.stderrC))]...)
		}
		return
	}
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if len(a.line)+len(data) > maxKernelLine {
				a.bad++
				a.line = a.line[:0]
				return
			}
			a.line = append(a.line, data...)
			return
		}
		a.line = append(a.line, data[:i]...)
		data = data[i+1:]
		a.take(a.line)
		a.line = a.line[:0]
	}
}

// maxKernelNotes bounds the notes one answer may add (a hostile sandbox
// can send any number of lines).
const maxKernelNotes = 4096

func (a *kernelAnswer) take(line []byte) {
	if len(a.out.Notes) > maxKernelNotes {
		a.out.Notes = strings.ToValidUTF8(a.out.Notes[:maxKernelNotes], "") + "shellgate: further notes dropped\n"
	}
	var m struct {
		T         string            `json:"t"`
		Name      string            `json:"name"`
		Text      string            `json:"text"`
		Why       string            `json:"why"`
		Waited    bool              `json:"waited"`
		Data      map[string]string `json:"data"`
		Ename     string            `json:"ename"`
		Evalue    string            `json:"evalue"`
		Traceback []string          `json:"traceback"`
		Code      string            `json:"code"`
		TimedOut  bool              `json:"timed_out"`
		Status    *int              `json:"exit_status"`
		Stdout    int64             `json:"stdout_chars"`
		Stderr    int64             `json:"stderr_chars"`
		Dropped   struct {
			Images int `json:"images"`
		} `json:"dropped"`
		Call  string          `json:"call"`
		Input json.RawMessage `json:"input"`
	}
	if len(line) > maxKernelLine || json.Unmarshal(line, &m) != nil || a.done {
		a.bad++
		return
	}
	switch m.T {
	case "nokernel":
		a.noKernel = true
	case "started":
	case "restarted":
		a.out.Restarted = m.Why
		if a.out.Restarted == "" {
			a.out.Restarted = "the Python kernel had stopped"
		}
	case "stream":
		stream, sb := 1, &a.stdout
		if m.Name == "stderr" {
			stream, sb = 2, &a.stderr
		}
		room := 4*a.maxChars - sb.Len()
		if room <= 0 {
			return
		}
		text := strings.ToValidUTF8(m.Text, "\uFFFD")
		if len(text) > room {
			text = text[:room]
		}
		sb.WriteString(text)
		if a.onOutput != nil && text != "" {
			a.onOutput(stream, text)
		}
	case "display":
		if len(a.out.Displays) >= MaxPythonImages+8 {
			return
		}
		for _, mime := range []string{"image/png", "image/jpeg"} {
			if v, ok := m.Data[mime]; ok {
				img, err := base64.StdEncoding.DecodeString(v)
				if err != nil || len(img) > MaxPythonImageBytes || a.images() >= MaxPythonImages {
					a.out.Notes += "shellgate: an image output was dropped (not valid, or over the limit of " + fmt.Sprint(MaxPythonImages) + " images of at most 1 MiB per call)\n"
					continue
				}
				a.out.Displays = append(a.out.Displays, Display{MIME: mime, Data: img})
			}
		}
		if _, img := m.Data["image/png"]; img || m.Data["image/jpeg"] != "" {
			// A figure's text is its repr ("<Figure size 640x480 with 1
			// Axes>"): a notebook shows the image alone.
			return
		}
		for _, mime := range []string{"text/html", "text/plain"} {
			if v, ok := m.Data[mime]; ok {
				a.out.Displays = append(a.out.Displays, Display{MIME: mime, Text: capped(stripANSI(v), a.maxChars)})
			}
		}
	case "error":
		// The traceback, as a whole, within the call's character cap.
		var tb []string
		room := a.maxChars
		for _, line := range m.Traceback {
			if room <= 0 || len(tb) == 50 {
				tb = append(tb, "[shellgate: traceback truncated]")
				break
			}
			line = capped(stripANSI(line), room)
			room -= utf8.RuneCountInString(line)
			tb = append(tb, line)
		}
		a.out.Error = &PythonError{Name: capped(m.Ename, 200), Value: capped(stripANSI(m.Evalue), a.maxChars), Traceback: tb}
	case "exit":
		// sys.exit(arg): as a script's exit status: None or "" is 0, an
		// integer is itself, anything else is printed to stderr and is 1.
		code := 1
		switch n, err := strconv.Atoi(m.Code); {
		case m.Code == "" || m.Code == "None":
			code = 0
		case err == nil:
			code = n & 0xff
		default:
			a.stderr.WriteString(capped(stripANSI(m.Code), a.maxChars) + "\n")
		}
		a.exitCode = &code
	case "note":
		a.out.Notes += "shellgate: " + capped(m.Text, 1000) + "\n"
	case "died":
		st := "unknown"
		if m.Status != nil {
			st = fmt.Sprint(*m.Status)
		}
		a.out.Notes += "shellgate: the Python kernel exited during this call (exit status " + st + "); the next call starts a new kernel, and variables, imports and other state are lost\n"
	case "tool_call":
		if err := a.toolCall(m.Call, m.Name, m.Input); err != nil {
			a.out.Notes += "shellgate: a tool call from the kernel was refused: " + err.Error() + "\n"
			a.bad++
		}
	case "paused":
		a.paused = len(a.out.ToolCalls) > 0
		a.done = a.paused
	case "expired":
		a.out.Expired, a.out.ExpiredWaiting = capped(stripANSI(m.Why), 1000), m.Waited
		if a.out.Expired == "" {
			a.out.Expired = "the paused execution is gone"
		}
		a.done = true
	case "done":
		a.done, a.timedOut = true, m.TimedOut
		a.chars[1], a.chars[2] = m.Stdout, m.Stderr
		if m.Dropped.Images > 0 {
			a.out.Notes += fmt.Sprintf("shellgate: %d image output(s) dropped: at most %d images of at most 1 MiB each are kept per call\n", m.Dropped.Images, MaxPythonImages)
		}
	default:
		a.bad++
	}
}

var toolCallToken = regexp.MustCompile(`^[0-9a-f]{24}$`)

// toolCall checks a tool call the kernel reports: nothing from the sandbox
// is trusted.
func (a *kernelAnswer) toolCall(call, name string, input json.RawMessage) error {
	if len(a.out.ToolCalls) >= MaxToolBatch {
		return fmt.Errorf("more than %d tool calls at once", MaxToolBatch)
	}
	for _, c := range a.out.ToolCalls {
		if c.Call == call {
			return fmt.Errorf("the same call token twice")
		}
	}
	if !toolCallToken.MatchString(call) {
		return fmt.Errorf("malformed call token")
	}
	if !slices.Contains(a.tools, name) {
		return fmt.Errorf("%q is not a tool the code may call", capped(name, 128))
	}
	if len(input) > MaxToolInput {
		return fmt.Errorf("input of %d bytes, over %d", len(input), MaxToolInput)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(input, &obj) != nil || obj == nil {
		return fmt.Errorf("input is not a JSON object")
	}
	var buf bytes.Buffer
	json.Compact(&buf, input)
	a.out.ToolCalls = append(a.out.ToolCalls, PythonToolCall{Call: call, Name: name, Input: json.RawMessage(strings.ToValidUTF8(buf.String(), "\uFFFD"))})
	return nil
}

func (a *kernelAnswer) images() int {
	n := 0
	for _, d := range a.out.Displays {
		if d.IsImage() {
			n++
		}
	}
	return n
}

// result completes the output once the client's command has ended.
func (a *kernelAnswer) result(res sandbox.Result, c PythonCall) PythonOutput {
	o := a.out
	if len(o.ToolCalls) > 0 && !a.paused {
		// Calls the driver did not pause on: nothing waits for a result.
		o.ToolCalls = nil
		o.Notes += "shellgate: a tool call from the kernel was dropped: the execution did not pause for it\n"
	}
	var cutOut, cutErr bool
	o.Stdout, cutOut = capText([]byte(a.stdout.String()), max(a.chars[1], int64(a.stdout.Len())), c.MaxOutputLength)
	o.Stderr, cutErr = capText([]byte(a.stderr.String()), max(a.chars[2], int64(a.stderr.Len())), c.MaxOutputLength)
	o.Truncated = cutOut || cutErr
	for _, n := range c.Notes {
		o.Notes += "shellgate: " + n + "\n"
	}
	switch {
	case a.timedOut || (res.TimedOut && !a.done):
		o.Outcome = Outcome{Type: "timeout"}
		if a.timedOut {
			o.Notes += fmt.Sprintf("shellgate: the code was interrupted after %d ms (its timeout); the kernel and its variables are kept\n", c.TimeoutMs)
		}
	case a.exitCode != nil:
		o.Outcome = Outcome{Type: "exit", ExitCode: a.exitCode}
	case o.Error != nil:
		one := 1
		o.Outcome = Outcome{Type: "exit", ExitCode: &one}
	case !a.done:
		one := 1
		o.Outcome = Outcome{Type: "exit", ExitCode: &one}
	default:
		zero := 0
		o.Outcome = Outcome{Type: "exit", ExitCode: &zero}
	}
	if !a.done && !res.Restarted {
		why := "the kernel's answer ended early"
		if len(a.stderrC) > 0 {
			why += ": " + strings.TrimSpace(strings.ToValidUTF8(string(a.stderrC), "\uFFFD"))
		}
		o.Notes += "shellgate: " + why + "\n"
	}
	if a.bad > 0 {
		o.Notes += fmt.Sprintf("shellgate: %d line(s) of the kernel's answer were not understood and were dropped\n", a.bad)
	}
	if len(res.Notes) > 0 {
		o.Notes += string(res.Notes)
	}
	if res.Restarted {
		o.Restarted = ""
		o.Notes += string(res.Stderr)
		o.Notes += "shellgate: the sandbox restarted, so the Python kernel is gone; the next call starts a new one\n"
	}
	return o
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

func stripANSI(s string) string {
	if strings.IndexByte(s, 0x1b) < 0 {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ToValidUTF8(ansi.ReplaceAllString(s, ""), "\uFFFD")
}

// capped cuts s to n characters with the truncation marker.
func capped(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	t, _ := capText([]byte(s), int64(len(s)), n)
	return t
}
