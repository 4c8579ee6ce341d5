package mcp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/jsrun/jsrunhttp"
)

// MaxFileBytes caps read_file and write_file: a file travels inside one
// JSON-RPC message (base64 when binary). Larger files: the files API.
const MaxFileBytes = 8 << 20

// session is one MCP session's state: the containers whose files it
// published as resources.
type session struct {
	srv *sdk.Server

	mu     sync.Mutex
	listed map[string]bool // containers whose files were published
	// runs are the interrupted evals of the session by continuation: a
	// resume replays the run, so it needs its source, client functions and
	// sandbox again; the session remembers them (the last maxRuns).
	runs map[string]evalIn
}

const maxRuns = 64

// remember keeps a's run for a resume with continuation cont; a resume
// that gives no source takes the session's.
func (ss *session) remember(cont string, a evalIn) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.runs == nil || len(ss.runs) >= maxRuns {
		ss.runs = map[string]evalIn{}
	}
	ss.runs[cont] = a
}

func (ss *session) recall(a evalIn) evalIn {
	if a.Continuation == "" || a.Source != "" {
		return a
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	run, ok := ss.runs[a.Continuation]
	if !ok {
		return a
	}
	delete(ss.runs, a.Continuation)
	run.Continuation, run.Resolutions = a.Continuation, a.Resolutions
	return run
}

// newSessionID makes a session id whose last identity.MaxSessionKey (20)
// characters, all of it, name the session's container.
func newSessionID() string {
	var b [8]byte
	rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}

// in is the part every container tool's input shares.
type in struct {
	Container string `json:"container,omitempty" jsonschema:"the container: an id or a name of this workspace; default: this session's own container"`
}

type execIn struct {
	Commands        []string `json:"commands" jsonschema:"1-100 shell commands, each run in its own bash -lc in /workspace/home, in order"`
	TimeoutMs       *int64   `json:"timeout_ms,omitempty" jsonschema:"per-command timeout in milliseconds (default 120000, clamped to the server's limit)"`
	MaxOutputLength *int64   `json:"max_output_length,omitempty" jsonschema:"characters kept of each stream of each command (default and maximum as the shell tool's)"`
	in
}

type execOut struct {
	ContainerID string               `json:"container_id"`
	Output      []tool.CommandOutput `json:"output" jsonschema:"one entry per command that ran; outcome is {type: exit, exit_code} or {type: timeout}"`
	Changed     []string             `json:"changed_files,omitempty" jsonschema:"files of the home the call created or modified, newest first, at most 10"`
}

type pythonIn struct {
	Code            string `json:"code" jsonschema:"Python code to run on the container's IPython kernel; variables and imports persist between calls"`
	TimeoutMs       *int64 `json:"timeout_ms,omitempty" jsonschema:"timeout in milliseconds (interrupts the code; the kernel and its state are kept)"`
	MaxOutputLength *int64 `json:"max_output_length,omitempty" jsonschema:"characters kept of stdout and of stderr"`
	in
}

type pythonOut struct {
	ContainerID string            `json:"container_id"`
	Stdout      string            `json:"stdout"`
	Stderr      string            `json:"stderr"`
	Outcome     tool.Outcome      `json:"outcome"`
	Error       *tool.PythonError `json:"error,omitempty" jsonschema:"the exception the code raised"`
	Results     []string          `json:"results,omitempty" jsonschema:"text of the rich outputs (the last expression's value, display calls); images are image content"`
	Restarted   string            `json:"restarted,omitempty" jsonschema:"why the kernel is new and earlier state is gone"`
	Notes       string            `json:"notes,omitempty"`
	Changed     []string          `json:"changed_files,omitempty"`
}

type evalIn struct {
	Source          string              `json:"source,omitempty" jsonschema:"JavaScript (or TypeScript) to run, a function body: return gives the value; a resume replays it (omit it to take the one this session ran)"`
	Language        string              `json:"language,omitempty" jsonschema:"javascript (default) or typescript"`
	ClientFunctions map[string][]string `json:"client_functions,omitempty" jsonschema:"functions the code may call that the client answers: namespace to function names; a call interrupts the run"`
	Sandbox         bool                `json:"sandbox,omitempty" jsonschema:"give the code sandbox.exec, sandbox.readFile and sandbox.writeFile on the container"`
	Continuation    string              `json:"continuation,omitempty" jsonschema:"resume an interrupted run: its continuation"`
	Resolutions     []resolution        `json:"resolutions,omitempty" jsonschema:"with continuation: one answer per interruption"`
	in
}

type resolution struct {
	InterruptionID string `json:"interruption_id"`
	Value          any    `json:"value,omitempty" jsonschema:"the value the guest's call returns"`
	Error          string `json:"error,omitempty" jsonschema:"reject the guest's call with this message instead"`
}

type evalOut struct {
	Status                string               `json:"status" jsonschema:"completed, interrupted or error"`
	Value                 any                  `json:"value,omitempty" jsonschema:"the completed value, in jsrun's tagged JSON"`
	Interruptions         []interruption       `json:"interruptions,omitempty"`
	Continuation          string               `json:"continuation,omitempty" jsonschema:"pass back with resolutions to resume"`
	ContinuationExpiresAt string               `json:"continuation_expires_at,omitempty"`
	Console               string               `json:"console,omitempty"`
	Error                 *jsrunhttp.ErrorBody `json:"error,omitempty"`
}

type interruption struct {
	ID               string `json:"id"`
	HostFunctionName string `json:"host_function_name"`
	Arguments        []any  `json:"arguments"`
}

type readIn struct {
	Path string `json:"path" jsonschema:"relative to /workspace/home, or absolute under it"`
	in
}

type readOut struct {
	ContainerID string `json:"container_id"`
	Path        string `json:"path"`
	Bytes       int    `json:"bytes"`
	Text        string `json:"text,omitempty" jsonschema:"the content, when it is UTF-8"`
	Base64      string `json:"base64,omitempty" jsonschema:"the content in base64, when it is not UTF-8"`
}

type writeIn struct {
	Path     string `json:"path" jsonschema:"relative to /workspace/home; parent directories are made"`
	Content  string `json:"content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	in
}

type writeOut struct {
	ContainerID string `json:"container_id"`
	Path        string `json:"path"`
	Bytes       int    `json:"bytes"`
}

type listIn struct {
	After string `json:"after,omitempty" jsonschema:"continue after this path (next of the previous page)"`
	Limit int    `json:"limit,omitempty" jsonschema:"files per page, 1-1000 (default 100)"`
	in
}

type listOut struct {
	ContainerID string `json:"container_id"`
	Files       []File `json:"files"`
	Next        string `json:"next,omitempty" jsonschema:"when there are more: after for the next page"`
}

type createIn struct {
	Name string `json:"name,omitempty" jsonschema:"a name unique in the workspace (letters, digits, _ and -); default none"`
}

type containersOut struct {
	Containers []Container `json:"containers" jsonschema:"the most recently created first, at most 100"`
}

type deleteIn struct {
	Container string `json:"container" jsonschema:"the container to delete: an id or a name"`
}

type deleteOut struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

func (ss *session) addTools() {
	sdk.AddTool(ss.srv, &sdk.Tool{Name: "exec", Title: "Run shell commands",
		Description: "Run shell commands in the container, in order, each in bash -lc in /workspace/home (files there persist). Output streams as progress notifications. isError when a command exits non-zero or times out."},
		withBox(ss, func(ctx context.Context, req *sdk.CallToolRequest, a execIn, b Box) (*sdk.CallToolResult, execOut, error) {
			plan, err := tool.ShellArgs{Commands: a.Commands, TimeoutMs: a.TimeoutMs, MaxOutputLength: a.MaxOutputLength}.Plan()
			if err != nil {
				return nil, execOut{}, err
			}
			pr := newProgress(ctx, req)
			res, err := b.Exec(ctx, plan, pr.execSink())
			pr.close()
			out := execOut{ContainerID: b.ContainerID(), Output: res.Outputs, Changed: ss.changed(ctx, b, res.Changed)}
			if out.Output == nil {
				out.Output = []tool.CommandOutput{}
			}
			if err != nil {
				return nil, out, fmt.Errorf("%w (%d of %d commands ran)", err, len(res.Outputs), len(plan.Commands))
			}
			failed := false
			for _, o := range res.Outputs {
				failed = failed || o.Outcome.Type != "exit" || o.Outcome.ExitCode == nil || *o.Outcome.ExitCode != 0
			}
			return &sdk.CallToolResult{IsError: failed}, out, nil
		}))
	sdk.AddTool(ss.srv, &sdk.Tool{Name: "python", Title: "Run Python",
		Description: "Run Python on the container's IPython kernel: variables, imports and open files persist from call to call (until the container sleeps). The last expression's value and displays are returned; images as image content. isError when the code raises or times out."},
		withBox(ss, func(ctx context.Context, req *sdk.CallToolRequest, a pythonIn, b Box) (*sdk.CallToolResult, pythonOut, error) {
			c, err := tool.PythonArgs{Code: &a.Code, TimeoutMs: a.TimeoutMs, MaxOutputLength: a.MaxOutputLength}.Call()
			if err != nil {
				return nil, pythonOut{}, err
			}
			pr := newProgress(ctx, req)
			res, err := b.Python(ctx, c, pr.pythonSink())
			pr.close()
			if err != nil {
				return nil, pythonOut{}, err
			}
			o := res.Output
			out := pythonOut{ContainerID: b.ContainerID(), Stdout: o.Stdout, Stderr: o.Stderr, Outcome: o.Outcome, Error: o.Error,
				Restarted: o.Restarted, Notes: o.Notes, Changed: ss.changed(ctx, b, res.Changed)}
			var images []sdk.Content
			for _, d := range o.Displays {
				if d.IsImage() {
					images = append(images, &sdk.ImageContent{MIMEType: d.MIME, Data: d.Data})
				} else {
					out.Results = append(out.Results, d.Text)
				}
			}
			r := &sdk.CallToolResult{IsError: o.Error != nil || o.Outcome.Type == "timeout"}
			if len(images) > 0 {
				r.Content = append([]sdk.Content{&sdk.TextContent{Text: jsonText(out)}}, images...)
			}
			return r, out, nil
		}))
	sdk.AddTool(ss.srv, &sdk.Tool{Name: "eval", Title: "Evaluate JavaScript",
		Description: "Run JavaScript (or TypeScript) in Shellgate's secure eval: no network, no files unless sandbox is true. A call to a client function interrupts the run: answer each interruption and call eval again with the continuation and resolutions to resume it (the session remembers the source). isError when the run failed."},
		func(ctx context.Context, req *sdk.CallToolRequest, a evalIn) (*sdk.CallToolResult, evalOut, error) {
			ws, err := workspaceOf(req)
			if err != nil {
				return nil, evalOut{}, err
			}
			a = ss.recall(a)
			er := &jsrunhttp.Request{Source: a.Source, Language: a.Language, ClientFunctions: a.ClientFunctions, Continuation: a.Continuation}
			for _, r := range a.Resolutions {
				res := jsrunhttp.Resolution{InterruptionID: r.InterruptionID}
				if r.Error != "" {
					res.Error = &jsrunhttp.ErrorBody{Code: "CLIENT_ERROR", Message: r.Error}
				} else if res.Value, err = jsonRaw(r.Value); err != nil {
					return nil, evalOut{}, fmt.Errorf("resolution %s: %w", r.InterruptionID, err)
				}
				er.Resolutions = append(er.Resolutions, res)
			}
			if a.Sandbox {
				// The built-ins' container must exist for eval to find it:
				// opening it (the session's is created then) bills nothing.
				b, err := ws.Open(ctx, a.Container, req.Session.ID())
				if err != nil {
					return nil, evalOut{}, err
				}
				er.Sandbox = &jsrunhttp.SandboxRequest{ContainerID: b.ContainerID()}
				if err := b.Close(); err != nil {
					return nil, evalOut{}, err
				}
			}
			resp, err := ws.Eval(ctx, er)
			if err != nil {
				return nil, evalOut{}, err
			}
			out := evalOut{Status: resp.Status, Value: jsonValue(resp.Value), Continuation: resp.Continuation,
				ContinuationExpiresAt: resp.ContinuationExpiresAt, Console: resp.Console, Error: resp.Error}
			if resp.Continuation != "" {
				ss.remember(resp.Continuation, a)
			}
			for _, it := range resp.Interruptions {
				x := interruption{ID: it.ID, HostFunctionName: it.HostFunctionName, Arguments: []any{}}
				for _, a := range it.Arguments {
					x.Arguments = append(x.Arguments, jsonValue(a))
				}
				out.Interruptions = append(out.Interruptions, x)
			}
			return &sdk.CallToolResult{IsError: resp.Status == "error"}, out, nil
		})
	sdk.AddTool(ss.srv, &sdk.Tool{Name: "read_file", Title: "Read a file",
		Description: fmt.Sprintf("Read a regular file of the container's home (at most %d MiB): text when it is UTF-8, else base64.", MaxFileBytes>>20)},
		withBox(ss, func(ctx context.Context, _ *sdk.CallToolRequest, a readIn, b Box) (*sdk.CallToolResult, readOut, error) {
			data, err := b.ReadFile(ctx, a.Path, MaxFileBytes)
			if err != nil {
				return nil, readOut{}, err
			}
			out := readOut{ContainerID: b.ContainerID(), Path: a.Path, Bytes: len(data)}
			if utf8.Valid(data) {
				out.Text = string(data)
			} else {
				out.Base64 = base64.StdEncoding.EncodeToString(data)
			}
			return nil, out, nil
		}))
	sdk.AddTool(ss.srv, &sdk.Tool{Name: "write_file", Title: "Write a file",
		Description: fmt.Sprintf("Create or replace a regular file of the container's home (at most %d MiB).", MaxFileBytes>>20)},
		withBox(ss, func(ctx context.Context, _ *sdk.CallToolRequest, a writeIn, b Box) (*sdk.CallToolResult, writeOut, error) {
			data := []byte(a.Content)
			switch a.Encoding {
			case "", "utf-8", "utf8":
			case "base64":
				var err error
				if data, err = base64.StdEncoding.DecodeString(a.Content); err != nil {
					return nil, writeOut{}, fmt.Errorf("content is not base64: %v", err)
				}
			default:
				return nil, writeOut{}, fmt.Errorf("encoding %q: want utf-8 or base64", a.Encoding)
			}
			if len(data) > MaxFileBytes {
				return nil, writeOut{}, fmt.Errorf("content is %d bytes: write_file takes at most %d (use the files API for larger files)", len(data), MaxFileBytes)
			}
			if err := b.WriteFile(ctx, a.Path, strings.NewReader(string(data))); err != nil {
				return nil, writeOut{}, err
			}
			ss.publish(ctx, b, []string{strings.TrimPrefix(strings.TrimPrefix(a.Path, "/workspace/home"), "/")})
			return nil, writeOut{ContainerID: b.ContainerID(), Path: a.Path, Bytes: len(data)}, nil
		}))
	sdk.AddTool(ss.srv, &sdk.Tool{Name: "list_files", Title: "List files",
		Description: "List the regular files of the container's home, in path order, a page at a time."},
		withBox(ss, func(ctx context.Context, _ *sdk.CallToolRequest, a listIn, b Box) (*sdk.CallToolResult, listOut, error) {
			if a.Limit == 0 {
				a.Limit = 100
			}
			if a.Limit < 1 || a.Limit > 1000 {
				return nil, listOut{}, fmt.Errorf("limit %d: want 1-1000", a.Limit)
			}
			files, more, err := b.ListFiles(ctx, a.After, a.Limit)
			if err != nil {
				return nil, listOut{}, err
			}
			out := listOut{ContainerID: b.ContainerID(), Files: files}
			if out.Files == nil {
				out.Files = []File{}
			}
			if more && len(files) > 0 {
				out.Next = files[len(files)-1].Path
			}
			return nil, out, nil
		}))
	sdk.AddTool(ss.srv, &sdk.Tool{Name: "create_container", Title: "Create a container",
		Description: "Create a container in this workspace (started at once); later calls name it by id or name."},
		withWorkspace(func(ctx context.Context, ws Workspace, a createIn) (Container, error) {
			return ws.CreateContainer(ctx, a.Name)
		}))
	sdk.AddTool(ss.srv, &sdk.Tool{Name: "list_containers", Title: "List containers",
		Description: "List this workspace's containers, the most recently created first."},
		withWorkspace(func(ctx context.Context, ws Workspace, _ struct{}) (containersOut, error) {
			cs, err := ws.ListContainers(ctx)
			if cs == nil {
				cs = []Container{}
			}
			return containersOut{Containers: cs}, err
		}))
	sdk.AddTool(ss.srv, &sdk.Tool{Name: "delete_container", Title: "Delete a container",
		Description: "Delete a container and its files; what runs in it is stopped."},
		withWorkspace(func(ctx context.Context, ws Workspace, a deleteIn) (deleteOut, error) {
			if a.Container == "" {
				return deleteOut{}, errors.New("container is required: the id or name of the container to delete")
			}
			id, err := ws.DeleteContainer(ctx, a.Container)
			if err != nil {
				return deleteOut{}, err
			}
			return deleteOut{ID: id, Deleted: true}, nil
		}))
}

// containerIn is an input that names a container.
type containerIn interface{ container() string }

func (i in) container() string { return i.Container }

// withWorkspace adapts a tool on the request's workspace.
func withWorkspace[In, Out any](h func(context.Context, Workspace, In) (Out, error)) sdk.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *sdk.CallToolRequest, a In) (*sdk.CallToolResult, Out, error) {
		ws, err := workspaceOf(req)
		if err != nil {
			var zero Out
			return nil, zero, err
		}
		out, err := h(ctx, ws, a)
		return nil, out, toolErr(err)
	}
}

// withBox adapts a tool that runs on one container: the workspace of the
// request, the container opened (the argument or the session's), its
// files published as resources the first time the session uses it, and
// the call billed when it ends. A bill the ledger did not take fails the
// call.
func withBox[In containerIn, Out any](ss *session, h func(context.Context, *sdk.CallToolRequest, In, Box) (*sdk.CallToolResult, Out, error)) sdk.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *sdk.CallToolRequest, a In) (*sdk.CallToolResult, Out, error) {
		var zero Out
		ws, err := workspaceOf(req)
		if err != nil {
			return nil, zero, err
		}
		b, err := ws.Open(ctx, a.container(), req.Session.ID())
		if err != nil {
			return nil, zero, toolErr(err)
		}
		res, out, err := h(ctx, req, a, b)
		if cerr := b.Close(); cerr != nil && err == nil {
			return nil, zero, toolErr(cerr)
		}
		if err != nil {
			return nil, out, toolErr(err)
		}
		ss.listOnce(ctx, b)
		return res, out, nil
	}
}

// toolErr is the message a failed call gives the model: a request error's
// own message, else the error's.
func toolErr(err error) error {
	if re := (*gateway.RequestError)(nil); errors.As(err, &re) {
		return errors.New(re.Message)
	}
	return err
}
