// Package messages is the Anthropic Messages client API of Shellgate's
// gateway (POST /v1/messages, also /api/v1/messages and ?beta=true): it
// parses a Messages request into a gateway.Run — the conversation, the
// client's own tools, the server tools (code execution, shellgate:shell,
// shellgate:bash) and the container to run in — runs the loop, and renders
// the result as a Message or as Anthropic's event stream.
//
// Shellgate's own blocks come back on replay (server_tool_use followed by
// bash_code_execution_tool_result, text_editor_code_execution_tool_result,
// code_execution_tool_result, <ns>_shell_tool_result or
// <ns>_bash_tool_result): they are translated for the upstream as an
// assistant tool call followed by a user tool result reading exactly as
// the live result did, and never run again.
//
// # How it works
//
// `internal/server/messages.go` checks the key (answering in Anthropic's
// envelope) and hands the request to `messages.Serve` with the caller's
// `gateway.Sandboxes`. The frontend decodes the body into small structs (not
// the SDK's param unions, so every error names its field), builds a
// `gateway.Run` — the conversation, client tools, `Run.ServerTools` by the
// function name the model sees (`bash_code_execution`,
// `text_editor_code_execution`, `code_execution`, `shell`, `bash`), the
// container choice, `container_upload`s as `Run.Uploads` into `input`, budget
// mode `gateway.Pause` — runs `gateway.Execute`, and renders the result or, as
// the loop's `Sink`, the event stream. Replayed Shellgate blocks become an
// assistant tool call plus a user tool result, with the same text the model
// read live: the code-execution tools (`internal/gateway/codeexec.go`) answer
// the model with their result block's content as JSON, so the block alone
// reproduces it. Client tools whose `allowed_callers` name the code
// execution version are called from its Python code (programmatic tool
// calling, `programmatic.go`): a call pauses the run with a `tool_use`
// carrying `caller`, and the request answering it becomes `Run.Resume`.
package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/tool"
)

// Limits of a request, beyond the body cap.
const (
	MaxBody          = 32 << 20 // images come inline as base64
	MaxTools         = 256
	MaxStopSequences = 64
	MaxMessages      = 10_000
	MaxBlocks        = 10_000 // content blocks in one message
)

// request is the body of POST /v1/messages. Fields the gateway has no use
// for (thinking, service_tier, cache_control, ...) are accepted and ignored.
type request struct {
	Model         *string           `json:"model"`
	MaxTokens     *int64            `json:"max_tokens"`
	Messages      []inMessage       `json:"messages"`
	System        json.RawMessage   `json:"system"`
	Tools         []json.RawMessage `json:"tools"`
	ToolChoice    *toolChoice       `json:"tool_choice"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int64            `json:"top_k"`
	StopSequences []string          `json:"stop_sequences"`
	Stream        bool              `json:"stream"`
	Container     json.RawMessage   `json:"container"`
	Metadata      *struct {
		UserID *string `json:"user_id"`
	} `json:"metadata"`
	MaxToolCalls *int64  `json:"max_tool_calls"`
	SessionID    *string `json:"session_id"`
}

type inMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type toolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// block is any content block of a request message.
type block struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	Source    *source         `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	FileID    string          `json:"file_id"`
	Caller    *caller         `json:"caller"`
}

// caller is a tool_use's caller: {"type":"direct"} or, for a call made by
// code, {"type":"code_execution_20260120","tool_id":"srvtoolu_…"}.
type caller struct {
	Type   string `json:"type"`
	ToolID string `json:"tool_id"`
}

type source struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

// toolSpec is any entry of tools.
type toolSpec struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Strict      bool            `json:"strict"`
	// AllowedCallers: "direct" (the model), and the code execution
	// versions whose code may call the tool (programmatic tool calling).
	AllowedCallers []string `json:"allowed_callers"`
	Parameters     *struct {
		Engine        string          `json:"engine"`
		Environment   json.RawMessage `json:"environment"`
		NetworkPolicy json.RawMessage `json:"network_policy"`
	} `json:"parameters"`
}

// toolKind says how a server tool's steps are rendered.
type toolKind struct {
	kind string // "codeexec", "shell", "bash"
	typ  string // the tool type as the request named it ("shellgate:shell", ...)
}

// parsed is a request turned into what the loop needs.
type parsed struct {
	model    string // as the client sent it
	stream   bool
	run      *gateway.Run
	kinds    map[string]toolKind // server tools by function name
	statFile []string            // container_upload file ids, in order

	// Programmatic tool calling (see programmatic.go).
	codeExec   string // the code execution tool's type, "" without one
	codeExecAt int    // its index in tools
	custom     []customTool
	execCalls  map[string]*gateway.ToolCall   // replayed code_execution calls by id
	prog       map[string]progCall            // client tool_use ids made by code → their call
	answers    map[string]*gateway.ToolResult // tool_results answering them
	answerMsg  map[string]int                 // … and the message holding each
}

// reqError is a client error in Anthropic's envelope.
type reqError struct {
	status int
	typ    string
	msg    string
}

func (e *reqError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &reqError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: fmt.Sprintf(format, a...)}
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

// readBody reads and decodes the request body.
func readBody(r *http.Request) (*request, error) {
	if r.ContentLength > MaxBody {
		return nil, &reqError{status: http.StatusRequestEntityTooLarge, typ: "request_too_large",
			msg: fmt.Sprintf("request body of %d bytes exceeds the %d-byte limit", r.ContentLength, MaxBody)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &reqError{status: http.StatusRequestEntityTooLarge, typ: "request_too_large",
				msg: fmt.Sprintf("request body exceeds the %d-byte limit", MaxBody)}
		}
		return nil, badRequest("reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("request body is empty: send a JSON object")
	}
	var req request
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	return &req, nil
}

// blocksOf decodes raw, Anthropic's content (a message's, a tool_result's,
// the system prompt): a string, as one text block, or an array of blocks.
func blocksOf(raw json.RawMessage) ([]block, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []block{{Type: "text", Text: &s}}, nil
	}
	var blocks []block
	err := json.Unmarshal(raw, &blocks)
	return blocks, err
}

// decodeStrict decodes one JSON value into v and says plainly what is
// wrong (field and expected type), without Go type names.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return badRequest("malformed JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			if te.Field == "" {
				return badRequest("expected %s, got JSON %s", gateway.JSONKind(te.Type.Kind().String()), te.Value)
			}
			return badRequest("%s: expected %s, got JSON %s", te.Field, gateway.JSONKind(te.Type.Kind().String()), te.Value)
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return badRequest("malformed JSON: the body ends early")
		}
		return badRequest("malformed JSON: %v", err)
	}
	if dec.More() {
		return badRequest("malformed JSON: data after the object")
	}
	return nil
}

// parse validates req and builds the loop's run. StatFile and the model
// are resolved by the caller (they need the context and the deps).
func parse(req *request, r *http.Request) (*parsed, error) {
	if req.Model == nil || *req.Model == "" {
		return nil, badRequest("model: Field required")
	}
	if req.MaxTokens == nil {
		return nil, badRequest("max_tokens: Field required")
	}
	if *req.MaxTokens < 1 || *req.MaxTokens > 1<<24 {
		return nil, badRequest("max_tokens: must be between 1 and %d, got %d", 1<<24, *req.MaxTokens)
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages: at least one message is required")
	}
	if len(req.Messages) > MaxMessages {
		return nil, badRequest("messages: %d messages, at most %d are accepted", len(req.Messages), MaxMessages)
	}
	if len(req.Tools) > MaxTools {
		return nil, badRequest("tools: %d tools, at most %d are accepted", len(req.Tools), MaxTools)
	}
	if len(req.StopSequences) > MaxStopSequences {
		return nil, badRequest("stop_sequences: %d sequences, at most %d are accepted", len(req.StopSequences), MaxStopSequences)
	}
	for i, s := range req.StopSequences {
		if s == "" || len(s) > 1024 {
			return nil, badRequest("stop_sequences.%d: must be 1 to 1024 bytes", i)
		}
	}
	if req.Temperature != nil && (*req.Temperature < 0 || *req.Temperature > 2) {
		return nil, badRequest("temperature: must be between 0 and 2")
	}
	if req.TopP != nil && (*req.TopP < 0 || *req.TopP > 1) {
		return nil, badRequest("top_p: must be between 0 and 1")
	}
	p := &parsed{model: *req.Model, stream: req.Stream, kinds: map[string]toolKind{},
		execCalls: map[string]*gateway.ToolCall{}, prog: map[string]progCall{}, answers: map[string]*gateway.ToolResult{}, answerMsg: map[string]int{}}
	gr := &gateway.Request{MaxTokens: int(*req.MaxTokens), Temperature: req.Temperature, TopP: req.TopP, Stop: req.StopSequences}
	run := &gateway.Run{Request: gr, ServerTools: map[string]gateway.ServerTool{}, Hosting: map[string]gateway.Hosting{}, Budget: gateway.Pause}
	p.run = run
	if req.Metadata != nil && req.Metadata.UserID != nil {
		gr.User = *req.Metadata.UserID
	}
	if req.MaxToolCalls != nil {
		if *req.MaxToolCalls < 1 {
			return nil, badRequest("max_tool_calls: must be at least 1, got %d", *req.MaxToolCalls)
		}
		// Larger values are clamped to the maximum, 30.
		run.MaxToolCalls = int(min(*req.MaxToolCalls, gateway.MaxToolCalls))
	}

	// System prompt: a string or text blocks.
	if len(req.System) > 0 && string(req.System) != "null" {
		blocks, err := blocksOf(req.System)
		if err != nil {
			return nil, badRequest("system: expected a string or an array of text blocks")
		}
		var parts []string
		for i, b := range blocks {
			if b.Type != "text" || b.Text == nil {
				return nil, badRequest("system.%d: expected a text block {\"type\":\"text\",\"text\":...}", i)
			}
			parts = append(parts, *b.Text)
		}
		gr.System = strings.Join(parts, "\n\n")
	}

	// Container: "container_…" or {"id": …}.
	if len(req.Container) > 0 && string(req.Container) != "null" {
		var id string
		if err := json.Unmarshal(req.Container, &id); err != nil {
			var obj struct {
				ID *string `json:"id"`
			}
			if err := json.Unmarshal(req.Container, &obj); err != nil {
				return nil, badRequest("container: expected a container id string or an object {\"id\": ...}")
			}
			if obj.ID != nil {
				id = *obj.ID
			}
		}
		run.Select.ContainerReference = id
	}
	if req.SessionID != nil {
		run.Select.BodySessionID = *req.SessionID
	}
	run.Select.HeaderSessionID = r.Header.Get("x-session-id")

	if err := p.parseTools(req.Tools); err != nil {
		return nil, err
	}
	if err := p.parseToolChoice(req.ToolChoice); err != nil {
		return nil, err
	}
	if err := p.parseMessages(req.Messages); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *parsed) parseTools(raw []json.RawMessage) error {
	run, gr := p.run, p.run.Request
	names := map[string]bool{}
	claim := func(i int, name string) error {
		if names[name] {
			return badRequest("tools.%d: a tool named %q is already defined (tool names must be unique; each server tool takes the function names it gives the model: code_execution → bash_code_execution and text_editor_code_execution, shellgate:shell → shell, shellgate:bash → bash)", i, name)
		}
		names[name] = true
		return nil
	}
	addServer := func(i int, name string, t gateway.ServerTool, k toolKind) error {
		if err := claim(i, name); err != nil {
			return err
		}
		run.ServerTools[name] = t
		p.kinds[name] = k
		return nil
	}
	for i, rt := range raw {
		var t toolSpec
		if err := decodeStrict(rt, &t); err != nil {
			var re *reqError
			if errors.As(err, &re) {
				re.msg = fmt.Sprintf("tools.%d: %s", i, re.msg)
			}
			return err
		}
		engine := ""
		if t.Parameters != nil {
			engine = t.Parameters.Engine
			if err := p.toolEnvironment(i, t.Parameters.Environment, t.Parameters.NetworkPolicy); err != nil {
				return err
			}
		}
		switch t.Type {
		case "", "custom":
			if !toolName.MatchString(t.Name) {
				return badRequest("tools.%d.name: must be 1-128 letters, digits, '_' or '-', got %q", i, clip(t.Name))
			}
			var schema map[string]any
			if len(t.InputSchema) == 0 || json.Unmarshal(t.InputSchema, &schema) != nil {
				return badRequest("tools.%d.input_schema: a JSON Schema object is required", i)
			}
			if ty, ok := schema["type"]; ok && ty != "object" {
				return badRequest("tools.%d.input_schema.type: must be \"object\"", i)
			}
			if err := claim(i, t.Name); err != nil {
				return err
			}
			direct, code, err := allowedCallers(i, t.AllowedCallers)
			if err != nil {
				return err
			}
			ft := gateway.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema, Strict: t.Strict}
			if direct {
				gr.Tools = append(gr.Tools, ft)
			}
			p.custom = append(p.custom, customTool{i: i, tool: ft, code: code})
		case "code_execution_20250825", "code_execution_20260120", "code_execution_20260521":
			if t.Name != "" && t.Name != "code_execution" {
				return badRequest("tools.%d.name: %s must be named \"code_execution\"", i, t.Type)
			}
			k := toolKind{kind: "codeexec", typ: t.Type}
			p.codeExec, p.codeExecAt = t.Type, i
			if err := addServer(i, gateway.BashCodeExecution, gateway.BashTool{}, k); err != nil {
				return err
			}
			if err := addServer(i, gateway.TextEditorCodeExecution, gateway.EditorTool{}, k); err != nil {
				return err
			}
			run.Hosting[gateway.BashCodeExecution] = gateway.HostVendor
			run.Hosting[gateway.TextEditorCodeExecution] = gateway.HostVendor
		case "code_execution_20250522":
			if t.Name != "" && t.Name != "code_execution" {
				return badRequest("tools.%d.name: %s must be named \"code_execution\"", i, t.Type)
			}
			if err := addServer(i, gateway.CodeExecution, gateway.CodeTool{}, toolKind{kind: "codeexec", typ: t.Type}); err != nil {
				return err
			}
		case "bash_20250124":
			if t.Name != "" && t.Name != "bash" {
				return badRequest("tools.%d.name: bash_20250124 must be named \"bash\"", i)
			}
			if err := claim(i, "bash"); err != nil {
				return err
			}
			gr.Tools = append(gr.Tools, gateway.Tool{Name: "bash",
				Description: "Run a bash command on the user's machine. The shell keeps its state between calls; `restart: true` restarts it.",
				Parameters:  json.RawMessage(`{"type":"object","properties":{"command":{"type":"string","description":"The bash command to run."},"restart":{"type":"boolean","description":"Restart the shell."}}}`)})
		case "shellgate:shell", "openrouter:shell":
			switch engine {
			case "", "auto", "native", "shellgate", "openrouter":
			default:
				return badRequest("tools.%d.parameters.engine: %q is not one of auto, native, shellgate, openrouter", i, engine)
			}
			if err := addServer(i, "shell", gateway.ShellTool{Name: "shell"}, toolKind{kind: "shell", typ: t.Type}); err != nil {
				return err
			}
			if engine == "" || engine == "auto" || engine == "native" {
				run.Hosting["shell"] = gateway.HostAuto
			}
		case "shellgate:bash", "openrouter:bash":
			switch engine {
			case "shellgate", "openrouter":
				if err := addServer(i, "bash", gateway.NSBashTool{Name: "bash"}, toolKind{kind: "bash", typ: t.Type}); err != nil {
					return err
				}
			case "", "auto", "native":
				// Client-side: the model's call goes back as a tool_use.
				if err := claim(i, "bash"); err != nil {
					return err
				}
				gr.Tools = append(gr.Tools, gateway.BashFunction("bash"))
			default:
				return badRequest("tools.%d.parameters.engine: %q is not one of auto, native, shellgate, openrouter", i, engine)
			}
		default:
			return badRequest("tools.%d.type: %q is not supported here; Shellgate's Messages API takes custom tools, code_execution_20250825 "+
				"(also _20260120, _20260521 and the legacy _20250522), bash_20250124 (client-side), shellgate:shell, shellgate:bash "+
				"and their openrouter: aliases", i, clip(t.Type))
		}
	}
	if err := p.programmaticTools(claim, addServer); err != nil {
		return err
	}
	if run.ServerTools[gateway.CodeExecution] != nil {
		// Code that calls client tools runs in the sandbox; the bash and
		// editor of its code execution tool go with it.
		delete(run.Hosting, gateway.BashCodeExecution)
		delete(run.Hosting, gateway.TextEditorCodeExecution)
	}
	return nil
}

// toolEnvironment takes a server tool's parameters.environment and
// network_policy.
func (p *parsed) toolEnvironment(i int, env, policy json.RawMessage) error {
	run := p.run
	if len(env) > 0 && string(env) != "null" {
		var e struct {
			Type        string `json:"type"`
			ContainerID string `json:"container_id"`
		}
		if err := json.Unmarshal(env, &e); err != nil {
			return badRequest("tools.%d.parameters.environment: expected {\"type\":\"container_auto\"} or {\"type\":\"container_reference\",\"container_id\":...}", i)
		}
		switch e.Type {
		case "container_auto", "":
		case "container_reference":
			if e.ContainerID == "" {
				return badRequest("tools.%d.parameters.environment.container_id: required for a container_reference", i)
			}
			if cur := run.Select.ContainerReference; cur != "" && cur != e.ContainerID {
				return badRequest("tools.%d.parameters.environment: container %q conflicts with container %q named elsewhere in the request", i, clip(e.ContainerID), clip(cur))
			}
			run.Select.ContainerReference = e.ContainerID
		default:
			return badRequest("tools.%d.parameters.environment.type: %q is not container_auto or container_reference", i, clip(e.Type))
		}
	}
	if len(policy) > 0 && string(policy) != "null" {
		if run.Open.NetworkPolicy != nil && !bytes.Equal(run.Open.NetworkPolicy, policy) {
			return badRequest("tools.%d.parameters.network_policy: differs from another tool's; one request has one container and one policy", i)
		}
		run.Open.NetworkPolicy = append([]byte(nil), policy...)
	}
	return nil
}

func (p *parsed) parseToolChoice(tc *toolChoice) error {
	if tc == nil {
		return nil
	}
	c := gateway.ToolChoice{DisableParallel: tc.DisableParallelToolUse}
	switch tc.Type {
	case "auto":
		c.Mode = gateway.ChoiceAuto
	case "any":
		c.Mode = gateway.ChoiceRequired
	case "none":
		c.Mode = gateway.ChoiceNone
	case "tool":
		known := p.run.ServerTools[tc.Name] != nil
		for _, t := range p.run.Request.Tools {
			known = known || t.Name == tc.Name
		}
		if !known {
			return badRequest("tool_choice.name: no tool named %q in tools", clip(tc.Name))
		}
		c.Mode, c.Name = gateway.ChoiceTool, tc.Name
	default:
		return badRequest("tool_choice.type: %q is not one of auto, any, tool, none", clip(tc.Type))
	}
	p.run.Request.ToolChoice = c
	return nil
}

// replayName maps a replayed server_tool_use name to the function name
// the model saw.
func replayName(name string) (string, string, bool) {
	switch name {
	case gateway.BashCodeExecution, gateway.TextEditorCodeExecution, gateway.CodeExecution:
		return name, "codeexec", true
	case "shellgate:shell", "openrouter:shell":
		return "shell", "shell", true
	case "shellgate:bash", "openrouter:bash":
		return "bash", "bash", true
	}
	return "", "", false
}

func (p *parsed) parseMessages(in []inMessage) error {
	var out []gateway.Message
	srvCalls := map[string]string{} // server_tool_use id → kind, awaiting a result
	for i, m := range in {
		if m.Role != "user" && m.Role != "assistant" {
			return badRequest("messages.%d.role: %q is not user or assistant", i, clip(m.Role))
		}
		if len(m.Content) == 0 || string(m.Content) == "null" {
			return badRequest("messages.%d.content: Field required", i)
		}
		blocks, err := blocksOf(m.Content)
		if err != nil {
			if err := decodeStrict(m.Content, &blocks); err != nil {
				return badRequest("messages.%d.content: %v", i, err)
			}
			return badRequest("messages.%d.content: expected a string or an array of content blocks", i)
		}
		if len(blocks) > MaxBlocks {
			return badRequest("messages.%d.content: %d blocks, at most %d are accepted", i, len(blocks), MaxBlocks)
		}
		if m.Role == "user" {
			out, err = p.userMessage(out, i, blocks)
		} else {
			out, err = p.assistantMessage(out, i, blocks, srvCalls)
		}
		if err != nil {
			return err
		}
	}
	// Merge neighbours of one role (a replay's tool results, then the
	// user's next message).
	var merged []gateway.Message
	for _, m := range out {
		merged = gateway.AppendMerged(merged, m)
	}
	merged, err := p.resumeCall(srvCalls, len(in)-1, merged)
	if err != nil {
		return err
	}
	if len(merged) == 0 {
		return badRequest("messages: every message is empty; send some content")
	}
	p.run.Request.Messages = merged
	return nil
}

func (p *parsed) userMessage(out []gateway.Message, i int, blocks []block) ([]gateway.Message, error) {
	msg := gateway.Message{Role: gateway.RoleUser}
	for j, b := range blocks {
		where := fmt.Sprintf("messages.%d.content.%d", i, j)
		switch b.Type {
		case "text":
			if b.Text == nil {
				return nil, badRequest("%s.text: Field required", where)
			}
			msg.Parts = append(msg.Parts, gateway.Part{Kind: gateway.PartText, Text: *b.Text})
		case "image":
			img, err := image(where, b.Source)
			if err != nil {
				return nil, err
			}
			msg.Parts = append(msg.Parts, gateway.Part{Kind: gateway.PartImage, Image: img})
		case "tool_result":
			if b.ToolUseID == "" {
				return nil, badRequest("%s.tool_use_id: Field required", where)
			}
			res := &gateway.ToolResult{CallID: b.ToolUseID, IsError: b.IsError}
			if len(b.Content) > 0 && string(b.Content) != "null" {
				inner, err := blocksOf(b.Content)
				if err != nil {
					return nil, badRequest("%s.content: expected a string or an array of text and image blocks", where)
				}
				var texts []string
				for k, ib := range inner {
					switch ib.Type {
					case "text":
						if ib.Text == nil {
							return nil, badRequest("%s.content.%d.text: Field required", where, k)
						}
						texts = append(texts, *ib.Text)
					case "image":
						img, err := image(fmt.Sprintf("%s.content.%d", where, k), ib.Source)
						if err != nil {
							return nil, err
						}
						res.Images = append(res.Images, *img)
					default:
						return nil, badRequest("%s.content.%d.type: %q is not supported in a tool_result (text, image)", where, k, clip(ib.Type))
					}
				}
				res.Content = strings.Join(texts, "\n")
			}
			if _, ok := p.prog[b.ToolUseID]; ok {
				// The answer to a call made by code: for the code, not
				// the model.
				if len(res.Images) > 0 {
					return nil, badRequest("%s.content: images cannot be handed to code; the tool_result of a tool_use made by code holds text", where)
				}
				p.answers[b.ToolUseID], p.answerMsg[b.ToolUseID] = res, i
				continue
			}
			msg.Parts = append(msg.Parts, gateway.Part{Kind: gateway.PartToolResult, Result: res})
		case "container_upload":
			if b.FileID == "" {
				return nil, badRequest("%s.file_id: Field required", where)
			}
			p.statFile = append(p.statFile, b.FileID)
			// The note naming the file is filled in once StatFile has
			// named it (see resolveUploads).
			msg.Parts = append(msg.Parts, gateway.Part{Kind: gateway.PartText, Text: uploadMarker + b.FileID})
		case "document", "search_result":
			return nil, badRequest("%s.type: %q blocks are not supported by Shellgate's gateway; upload the file with container_upload and let the model read it in the sandbox", where, b.Type)
		default:
			return nil, badRequest("%s.type: %q is not a user content block Shellgate accepts (text, image, tool_result, container_upload)", where, clip(b.Type))
		}
	}
	return append(out, msg), nil
}

// uploadMarker stands in for a container_upload's note until the file's
// name is known.
const uploadMarker = "\x00container_upload:"

func image(where string, s *source) (*gateway.Image, error) {
	if s == nil {
		return nil, badRequest("%s.source: Field required", where)
	}
	switch s.Type {
	case "base64":
		switch s.MediaType {
		case "image/jpeg", "image/png", "image/gif", "image/webp":
		default:
			return nil, badRequest("%s.source.media_type: %q is not one of image/jpeg, image/png, image/gif, image/webp", where, clip(s.MediaType))
		}
		if s.Data == "" {
			return nil, badRequest("%s.source.data: Field required", where)
		}
		return &gateway.Image{MediaType: s.MediaType, Data: s.Data}, nil
	case "url":
		if !strings.HasPrefix(s.URL, "https://") && !strings.HasPrefix(s.URL, "http://") {
			return nil, badRequest("%s.source.url: must be an http(s) URL", where)
		}
		return &gateway.Image{URL: s.URL}, nil
	}
	return nil, badRequest("%s.source.type: %q is not base64 or url", where, clip(s.Type))
}

func (p *parsed) assistantMessage(out []gateway.Message, i int, blocks []block, srvCalls map[string]string) ([]gateway.Message, error) {
	cur := gateway.Message{Role: gateway.RoleAssistant}
	var results []gateway.Part
	flush := func() {
		if len(results) > 0 {
			out = append(out, cur, gateway.Message{Role: gateway.RoleUser, Parts: results})
			cur, results = gateway.Message{Role: gateway.RoleAssistant}, nil
		}
	}
	for j, b := range blocks {
		where := fmt.Sprintf("messages.%d.content.%d", i, j)
		if strings.HasSuffix(b.Type, "_tool_result") {
			kind, ok := srvCalls[b.ToolUseID]
			if !ok {
				return nil, badRequest("%s: %s for tool_use_id %q follows no server_tool_use with that id", where, clip(b.Type), clip(b.ToolUseID))
			}
			delete(srvCalls, b.ToolUseID)
			res, err := p.replayResult(where, kind, b)
			if err != nil {
				return nil, err
			}
			results = append(results, gateway.Part{Kind: gateway.PartToolResult, Result: res})
			continue
		}
		flush()
		switch b.Type {
		case "text":
			if b.Text == nil {
				return nil, badRequest("%s.text: Field required", where)
			}
			if *b.Text != "" {
				cur.Parts = append(cur.Parts, gateway.Part{Kind: gateway.PartText, Text: *b.Text})
			}
		case "tool_use", "server_tool_use":
			if b.ID == "" || b.Name == "" {
				return nil, badRequest("%s: a %s needs an id and a name", where, b.Type)
			}
			if b.Type == "tool_use" && b.Caller != nil && b.Caller.Type != "direct" {
				if err := p.programmaticUse(where, i, b); err != nil {
					return nil, err
				}
				continue
			}
			args, err := inputArgs(where, b.Input)
			if err != nil {
				return nil, err
			}
			name := b.Name
			if b.Type == "server_tool_use" {
				fn, kind, ok := replayName(b.Name)
				if !ok {
					return nil, badRequest("%s.name: server tool %q is not one Shellgate runs", where, clip(b.Name))
				}
				if _, dup := srvCalls[b.ID]; dup {
					return nil, badRequest("%s.id: server_tool_use id %q is used twice", where, clip(b.ID))
				}
				srvCalls[b.ID] = kind
				name = fn
			}
			call := &gateway.ToolCall{ID: b.ID, Name: name, Arguments: args}
			if b.Type == "server_tool_use" && name == gateway.CodeExecution {
				p.execCalls[b.ID] = call
			}
			cur.Parts = append(cur.Parts, gateway.Part{Kind: gateway.PartToolCall, Call: call})
		case "thinking", "redacted_thinking":
			// Another model's reasoning does not carry across upstreams.
		default:
			return nil, badRequest("%s.type: %q is not an assistant content block Shellgate accepts (text, tool_use, server_tool_use and Shellgate's own tool results)", where, clip(b.Type))
		}
	}
	if len(results) > 0 {
		return append(out, cur, gateway.Message{Role: gateway.RoleUser, Parts: results}), nil
	}
	return append(out, cur), nil
}

func inputArgs(where string, in json.RawMessage) (string, error) {
	if len(in) == 0 || string(in) == "null" {
		return "{}", nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(in, &obj); err != nil {
		return "", badRequest("%s.input: expected an object", where)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, in); err != nil {
		return "", badRequest("%s.input: %v", where, err)
	}
	return buf.String(), nil
}

// replayResult turns one of Shellgate's result blocks back into the tool
// result the model read.
func (p *parsed) replayResult(where, kind string, b block) (*gateway.ToolResult, error) {
	res := &gateway.ToolResult{CallID: b.ToolUseID}
	var head struct {
		Type string `json:"type"`
	}
	if len(b.Content) == 0 || json.Unmarshal(b.Content, &head) != nil {
		return nil, badRequest("%s.content: expected the result object", where)
	}
	switch kind {
	case "codeexec":
		var v any
		switch head.Type {
		case "bash_code_execution_result", "code_execution_result":
			v = &gateway.BashResult{}
		case "text_editor_code_execution_view_result":
			v = &gateway.ViewResult{}
		case "text_editor_code_execution_create_result":
			v = &gateway.CreateResult{}
		case "text_editor_code_execution_str_replace_result":
			v = &gateway.StrReplaceResult{}
		case "bash_code_execution_tool_result_error", "text_editor_code_execution_tool_result_error", "code_execution_tool_result_error":
			v = &gateway.CodeExecError{}
			res.IsError = true
		default:
			return nil, badRequest("%s.content.type: %q is not a code execution result Shellgate makes", where, clip(head.Type))
		}
		if err := json.Unmarshal(b.Content, v); err != nil {
			return nil, badRequest("%s.content: %v", where, err)
		}
		if br, ok := v.(*gateway.BashResult); ok && br.Content == nil {
			br.Content = []gateway.OutputFile{}
		}
		res.Content = gateway.CodeExecText(v)
	default: // shell, bash: the shell tool's text
		var c shellContent
		if err := json.Unmarshal(b.Content, &c); err != nil {
			return nil, badRequest("%s.content: %v", where, err)
		}
		if c.ContainerID != "" {
			p.run.Select.ConversationContainerIDs = append(p.run.Select.ConversationContainerIDs, c.ContainerID)
		}
		switch {
		case c.Error != "":
			res.Content, res.IsError = "error: "+c.Error, true
		case c.Restarted:
			res.Content = gateway.RestartText
		default:
			var changed []gateway.ChangedFile
			for _, f := range c.FilesChanged {
				changed = append(changed, gateway.ChangedFile{Path: f.Path, Bytes: f.Bytes})
			}
			res.Content = gateway.ShellResultText(c.ContainerID, c.Output, changed)
		}
	}
	return res, nil
}

// shellContent is the content of <ns>_shell_tool_result and
// <ns>_bash_tool_result. The bash result adds command, stdout, stderr and
// exitCode (the shape OpenRouter documents) beside the per-command output.
type shellContent struct {
	Command      *string              `json:"command,omitempty"`
	Stdout       *string              `json:"stdout,omitempty"`
	Stderr       *string              `json:"stderr,omitempty"`
	ExitCode     *int                 `json:"exitCode,omitempty"`
	Output       []tool.CommandOutput `json:"output"`
	ContainerID  string               `json:"container_id,omitempty"`
	FilesChanged []changedFile        `json:"files_changed,omitempty"`
	Restarted    bool                 `json:"restarted,omitempty"`
	Error        string               `json:"error,omitempty"`
	ErrorCode    string               `json:"error_code,omitempty"`
}

type changedFile struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
