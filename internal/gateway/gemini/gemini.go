// Package gemini is the Gemini API client dialect of the model gateway:
// POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent (?alt=sse), with the request and answer shapes of
// the genai SDK's types. Client function tools (functionDeclarations) come
// back to the client as functionCall parts; the codeExecution tool is
// served by Shellgate on any upstream model: the model is offered a Python
// function (gateway.CodeTool), each run comes back as an executableCode
// part followed by a codeExecutionResult part and, when the code drew
// figures, one inlineData part (image/png) per figure, in order, then the
// model's text.
//
// Parts replayed in a request's history — executableCode and
// codeExecutionResult pairs (with the inlineData figures right after a
// result), functionCall and functionResponse — become the assistant's tool
// calls and their results for the upstream model and are never run again.
//
// # How it works
//
// `internal/server/gemini.go` mounts `POST /v1beta/{rest...}` (the key
// also from `x-goog-api-key` or `?key=` on these paths; Google's envelope for
// every failure and every unrouted path) and hands the path's rest
// (`models/MODEL:method`, or `provider/model:method`) to
// `gemini.Serve`, which decodes the body into the `genai` SDK's types, builds
// a `gateway.Run` — `codeExecution` as `gateway.CodeTool` under the function
// name `code_execution`, function declarations as client tools, replayed
// `executableCode`/`codeExecutionResult` pairs as an assistant call and a user
// result — runs `gateway.Execute`, and renders a `GenerateContentResponse`
// (each step an `executableCode` and a `codeExecutionResult` part) or, as the
// loop's `Sink`, one SSE chunk per part.
package gemini

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/identity"
)

// MaxBody caps a request body (inline images make Gemini bodies large).
const MaxBody = 32 << 20

// Options are what a request is served with.
type Options struct {
	Models    gateway.Models
	Sandboxes gateway.Sandboxes // the caller's
	Log       *slog.Logger
	// Screen, if set, inspects each request before its container is
	// opened and its model called (the workspace's guardrails).
	Screen gateway.Screen
}

// request is a generateContent body.
type request struct {
	Contents          []*genai.Content        `json:"contents"`
	SystemInstruction *genai.Content          `json:"systemInstruction"`
	Tools             []*genai.Tool           `json:"tools"`
	ToolConfig        *genai.ToolConfig       `json:"toolConfig"`
	GenerationConfig  *genai.GenerationConfig `json:"generationConfig"`
}

// Error is a refusal in Google's envelope.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

func bad(format string, a ...any) error {
	return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, a...)}
}

// StatusWord is the google.rpc status name of an HTTP status, as Google's
// error envelope carries it.
func StatusWord(status int) string {
	switch status {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 409:
		return "ABORTED"
	case 410:
		return "NOT_FOUND"
	case 413:
		return "INVALID_ARGUMENT"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 501:
		return "UNIMPLEMENTED"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

// WriteError writes {"error":{"code","message","status"}}.
func WriteError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": msg, "status": StatusWord(status)}})
}

func classify(err error) (int, string) {
	var ge *Error
	if errors.As(err, &ge) {
		return ge.Status, ge.Message
	}
	status, msg, _ := gateway.Describe(err)
	return status, msg
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":500,"message":"encoding the answer failed","status":"INTERNAL"}}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	w.Write(b)
}

// Serve answers one request whose path under /v1beta is rest
// ("models/MODEL:generateContent" or ":streamGenerateContent", MODEL an
// alias or provider/model; or "provider/model:…" without "models/", as
// @ai-sdk/google sends an id with a '/'); the key is checked, the body not
// yet read.
func Serve(w http.ResponseWriter, r *http.Request, rest string, o Options) {
	fail := func(err error) {
		status, msg := classify(err)
		if status >= 500 && o.Log != nil {
			o.Log.ErrorContext(r.Context(), "gemini request failed", "status", status, "err", err)
		}
		WriteError(w, status, msg)
	}
	i := strings.LastIndex(rest, ":")
	if i <= 0 {
		fail(&Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no route for %q: want models/MODEL:generateContent or :streamGenerateContent", rest)})
		return
	}
	model, method := strings.TrimPrefix(rest[:i], "models/"), rest[i+1:]
	var stream bool
	switch method {
	case "generateContent":
	case "streamGenerateContent":
		stream = true
		if alt := r.URL.Query().Get("alt"); alt != "" && alt != "sse" {
			fail(bad("alt=%q: only alt=sse streams are served", alt))
			return
		}
	default:
		fail(&Error{Status: http.StatusNotFound, Message: fmt.Sprintf("method %q is not served: want generateContent or streamGenerateContent", method)})
		return
	}
	if o.Models == nil {
		fail(&Error{Status: http.StatusNotFound, Message: "no model is configured on this Shellgate server (see the gateway's provider config)"})
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		fail(&Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("the request body is too large or unreadable (at most %d bytes): %v", MaxBody, err)})
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		fail(bad("Invalid JSON payload received: %v", err))
		return
	}
	run, err := parse(&req, r)
	if err != nil {
		fail(err)
		return
	}
	if len(run.ServerTools) > 0 {
		if answered, err := gateway.Forward(r.Context(), o.Sandboxes, run.Select); answered || err != nil {
			if err != nil {
				fail(err)
			}
			return
		}
	}
	m, err := o.Models.Resolve(model)
	if err != nil {
		fail(err)
		return
	}
	run.Model, run.Request.Model, run.Sandboxes = m, m.Name, o.Sandboxes
	if o.Screen != nil {
		if err := o.Screen(r.Context(), run.Request); err != nil {
			fail(err)
			return
		}
	}
	rd := &renderer{model: model, id: newID()}
	ctx := r.Context()
	if !stream {
		gateway.Serve(ctx, run, func(res *gateway.Result) { writeJSON(w, http.StatusOK, rd.response(res)) }, fail)
		return
	}
	st := &streamer{w: w, rd: rd}
	run.Sink = st
	gateway.Serve(ctx, run, st.finish, func(err error) {
		if !st.started {
			fail(err)
			return
		}
		status, msg := classify(err)
		st.send(map[string]any{"error": map[string]any{"code": status, "message": msg, "status": StatusWord(status)}})
	})
}

// parse turns the body into a run.
func parse(req *request, r *http.Request) (*gateway.Run, error) {
	if len(req.Contents) == 0 {
		return nil, bad("* GenerateContentRequest.contents: contents is not specified")
	}
	g := &gateway.Request{}
	run := &gateway.Run{Request: g, Budget: gateway.FinalAnswer,
		Select: identity.Request{HeaderSessionID: strings.TrimSpace(r.Header.Get("x-session-id"))}}
	if si := req.SystemInstruction; si != nil {
		var sys []string
		for _, p := range si.Parts {
			if p != nil && p.Text != "" {
				sys = append(sys, p.Text)
			}
		}
		g.System = strings.Join(sys, "\n")
	}
	code := false
	names := map[string]bool{}
	for i, t := range req.Tools {
		if t == nil {
			continue
		}
		if t.CodeExecution != nil {
			code = true
		}
		for j, d := range t.FunctionDeclarations {
			if d == nil || d.Name == "" {
				return nil, bad("* GenerateContentRequest.tools[%d].function_declarations[%d].name: Name is required.", i, j)
			}
			if d.Name == gateway.CodeExecution && code {
				return nil, bad("tools[%d].function_declarations[%d].name: %q is the name of the code execution tool", i, j, d.Name)
			}
			if names[d.Name] {
				return nil, bad("* GenerateContentRequest.tools[%d].function_declarations[%d].name: duplicate function name %q", i, j, d.Name)
			}
			names[d.Name] = true
			params, err := declSchema(d)
			if err != nil {
				return nil, bad("tools[%d].function_declarations[%d]: %v", i, j, err)
			}
			g.Tools = append(g.Tools, gateway.Tool{Name: d.Name, Description: d.Description, Parameters: params})
		}
		if t.GoogleSearch != nil || t.GoogleSearchRetrieval != nil || t.URLContext != nil || t.Retrieval != nil || t.GoogleMaps != nil || t.ComputerUse != nil || t.FileSearch != nil {
			return nil, bad("tools[%d]: only functionDeclarations and codeExecution are served by Shellgate", i)
		}
	}
	if code {
		if names[gateway.CodeExecution] {
			return nil, bad("a function named %q clashes with the code execution tool", gateway.CodeExecution)
		}
		run.ServerTools = map[string]gateway.ServerTool{gateway.CodeExecution: gateway.CodeTool{}}
		run.Hosting = map[string]gateway.Hosting{gateway.CodeExecution: gateway.HostVendor}
	}
	if tc := req.ToolConfig; tc != nil && tc.FunctionCallingConfig != nil {
		fc := tc.FunctionCallingConfig
		switch fc.Mode {
		case "", genai.FunctionCallingConfigModeAuto, genai.FunctionCallingConfigModeValidated:
		case genai.FunctionCallingConfigModeNone:
			g.ToolChoice.Mode = gateway.ChoiceNone
		case genai.FunctionCallingConfigModeAny:
			g.ToolChoice.Mode = gateway.ChoiceRequired
			if len(fc.AllowedFunctionNames) == 1 {
				g.ToolChoice = gateway.ToolChoice{Mode: gateway.ChoiceTool, Name: fc.AllowedFunctionNames[0]}
			}
		default:
			return nil, bad("Invalid value at 'tool_config.function_calling_config.mode' (%q)", fc.Mode)
		}
		for _, n := range fc.AllowedFunctionNames {
			if !names[n] {
				return nil, bad("tool_config.function_calling_config.allowed_function_names: %q is not a declared function", n)
			}
		}
	}
	if gc := req.GenerationConfig; gc != nil {
		g.MaxTokens = int(gc.MaxOutputTokens)
		if gc.Temperature != nil {
			t := float64(*gc.Temperature)
			g.Temperature = &t
		}
		if gc.TopP != nil {
			t := float64(*gc.TopP)
			g.TopP = &t
		}
		g.Stop = gc.StopSequences
		if gc.CandidateCount > 1 {
			return nil, bad("generationConfig.candidateCount: only 1 candidate is served")
		}
	}
	if err := conversation(req.Contents, g); err != nil {
		return nil, err
	}
	return run, nil
}

// declSchema is a declaration's parameters as JSON Schema: its
// parametersJsonSchema, or its OpenAPI-subset parameters (upper-case type
// names lowered), or an empty object schema.
func declSchema(d *genai.FunctionDeclaration) (json.RawMessage, error) {
	switch {
	case d.ParametersJsonSchema != nil && d.Parameters != nil:
		return nil, errors.New("parameters and parametersJsonSchema are mutually exclusive")
	case d.ParametersJsonSchema != nil:
		return json.Marshal(d.ParametersJsonSchema)
	case d.Parameters != nil:
		b, err := json.Marshal(d.Parameters)
		if err != nil {
			return nil, err
		}
		var v any
		json.Unmarshal(b, &v)
		lowerTypes(v)
		return json.Marshal(v)
	}
	return json.RawMessage(`{"type":"object","properties":{}}`), nil
}

// lowerTypes rewrites OpenAPI "type": "STRING" as JSON Schema "string".
func lowerTypes(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "type" {
				x[k] = strings.ToLower(s)
				continue
			}
			lowerTypes(e)
		}
	case []any:
		for _, e := range x {
			lowerTypes(e)
		}
	}
}

// conversation translates contents into messages. Within a model content,
// a codeExecutionResult closes the assistant message that holds its
// executableCode: the result goes to the model as a user tool result, and
// what follows starts a new assistant message.
func conversation(contents []*genai.Content, g *gateway.Request) error {
	var pending []*gateway.ToolCall // the last model message's unanswered calls
	n := 0
	newCallID := func() string { n++; return fmt.Sprintf("gx_%d", n) }
	add := func(m gateway.Message) { g.Messages = gateway.AppendMerged(g.Messages, m) }
	answer := func(name, id string) (*gateway.ToolCall, bool) {
		for i, c := range pending {
			if (id != "" && c.ID == id) || (id == "" && c.Name == name) {
				pending = append(pending[:i], pending[i+1:]...)
				return c, true
			}
		}
		return nil, false
	}
	for i, c := range contents {
		if c == nil || len(c.Parts) == 0 {
			return bad("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty.", i)
		}
		switch c.Role {
		case "", genai.RoleUser:
			m := gateway.Message{Role: gateway.RoleUser}
			for j, p := range c.Parts {
				switch {
				case p == nil:
				case p.FunctionResponse != nil:
					fr := p.FunctionResponse
					call, ok := answer(fr.Name, fr.ID)
					if !ok {
						return bad("contents[%d].parts[%d].functionResponse: %q (id %q) answers no function call of the previous model turn", i, j, fr.Name, fr.ID)
					}
					out, _ := json.Marshal(fr.Response)
					_, isErr := fr.Response["error"]
					m.Parts = append(m.Parts, gateway.Part{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: call.ID, Content: string(out), IsError: isErr && len(fr.Response) == 1}})
				case p.Text != "":
					m.Parts = append(m.Parts, gateway.Part{Kind: gateway.PartText, Text: p.Text})
				case p.InlineData != nil:
					if !strings.HasPrefix(p.InlineData.MIMEType, "image/") {
						return bad("contents[%d].parts[%d].inlineData: only images are served inline (got %q)", i, j, p.InlineData.MIMEType)
					}
					m.Parts = append(m.Parts, gateway.Part{Kind: gateway.PartImage, Image: &gateway.Image{MediaType: p.InlineData.MIMEType, Data: base64Std(p.InlineData.Data)}})
				case p.FileData != nil:
					m.Parts = append(m.Parts, gateway.Part{Kind: gateway.PartImage, Image: &gateway.Image{MediaType: p.FileData.MIMEType, URL: p.FileData.FileURI}})
				case p.ExecutableCode != nil, p.CodeExecutionResult != nil, p.FunctionCall != nil:
					return bad("contents[%d].parts[%d]: a user turn cannot hold model parts (functionCall, executableCode, codeExecutionResult)", i, j)
				}
			}
			if len(pending) > 0 {
				return bad("contents[%d]: the function calls of the previous model turn (%s) need a functionResponse each", i, callNames(pending))
			}
			add(m)
		case genai.RoleModel:
			if len(pending) > 0 {
				return bad("contents[%d]: the function calls of the previous model turn (%s) need a functionResponse each", i, callNames(pending))
			}
			m := gateway.Message{Role: gateway.RoleAssistant}
			var code *gateway.ToolCall
			// figures is the result of the code run just replayed: the
			// inlineData images right after it are its figures, and go
			// back to the model with it.
			var figures *gateway.ToolResult
			for j, p := range c.Parts {
				if p != nil && p.InlineData != nil && figures != nil && strings.HasPrefix(p.InlineData.MIMEType, "image/") {
					figures.Images = append(figures.Images, gateway.Image{MediaType: p.InlineData.MIMEType, Data: base64Std(p.InlineData.Data)})
					continue
				}
				if p != nil && !p.Thought {
					figures = nil
				}
				switch {
				case p == nil, p.Thought:
				case p.FunctionCall != nil:
					fc := p.FunctionCall
					args, _ := json.Marshal(fc.Args)
					if fc.Args == nil {
						args = []byte("{}")
					}
					id := fc.ID
					if id == "" {
						id = newCallID()
					}
					call := &gateway.ToolCall{ID: id, Name: fc.Name, Arguments: string(args)}
					pending = append(pending, call)
					m.Parts = append(m.Parts, gateway.Part{Kind: gateway.PartToolCall, Call: call})
				case p.ExecutableCode != nil:
					args, _ := json.Marshal(map[string]string{"code": p.ExecutableCode.Code})
					code = &gateway.ToolCall{ID: newCallID(), Name: gateway.CodeExecution, Arguments: string(args)}
					m.Parts = append(m.Parts, gateway.Part{Kind: gateway.PartToolCall, Call: code})
				case p.CodeExecutionResult != nil:
					if code == nil {
						return bad("contents[%d].parts[%d].codeExecutionResult: no executableCode before it", i, j)
					}
					add(m)
					figures = &gateway.ToolResult{CallID: code.ID, Content: replayedResult(p.CodeExecutionResult), IsError: p.CodeExecutionResult.Outcome != genai.OutcomeOK}
					add(gateway.Message{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartToolResult, Result: figures}}})
					m, code = gateway.Message{Role: gateway.RoleAssistant}, nil
				case p.Text != "":
					m.Parts = append(m.Parts, gateway.Part{Kind: gateway.PartText, Text: p.Text})
				}
			}
			if code != nil {
				return bad("contents[%d]: an executableCode part needs its codeExecutionResult after it", i)
			}
			add(m)
		default:
			return bad("* GenerateContentRequest.contents[%d].role: Please use a valid role: user, model.", i)
		}
	}
	if len(pending) > 0 {
		return bad("the function calls of the last model turn (%s) need a functionResponse each", callNames(pending))
	}
	if len(g.Messages) == 0 || g.Messages[len(g.Messages)-1].Role != gateway.RoleUser {
		return bad("contents: the conversation must end with a user turn")
	}
	return nil
}

func callNames(calls []*gateway.ToolCall) string {
	var s []string
	for _, c := range calls {
		s = append(s, c.Name)
	}
	return strings.Join(s, ", ")
}

// replayedResult is the text the model read for a code run (the
// code-execution tool's result object), rebuilt from the part.
func replayedResult(r *genai.CodeExecutionResult) string {
	switch r.Outcome {
	case genai.OutcomeOK:
		return gateway.CodeExecText(&gateway.BashResult{Type: "code_execution_result", Stdout: r.Output, Content: []gateway.OutputFile{}})
	case genai.OutcomeDeadlineExceeded:
		return gateway.CodeExecText(&gateway.CodeExecError{Type: "code_execution_tool_result_error", ErrorCode: "execution_time_exceeded", ErrorMessage: r.Output})
	}
	return gateway.CodeExecText(&gateway.BashResult{Type: "code_execution_result", Stderr: r.Output, ReturnCode: 1, Content: []gateway.OutputFile{}})
}

// renderer shapes results as GenerateContentResponse objects.
type renderer struct {
	model string
	id    string
}

// The parts of a step, as structs whose fields are in the order
// encoding/json writes a map's keys (sorted): the bytes are those of the
// maps the other parts are (TestStepPartsBytes), without building and
// sorting four maps a step.
type (
	textPart struct {
		Text string `json:"text"`
	}
	codePart struct {
		ExecutableCode executableCode `json:"executableCode"`
	}
	executableCode struct {
		Code     string `json:"code"`
		Language string `json:"language"`
	}
	resultPart struct {
		CodeExecutionResult codeResult `json:"codeExecutionResult"`
	}
	codeResult struct {
		Outcome genai.Outcome `json:"outcome"`
		Output  string        `json:"output"`
	}
	// imagePart is a figure of a code run, as Gemini returns the charts
	// its own code execution draws: an inlineData part after the
	// codeExecutionResult.
	imagePart struct {
		InlineData inlineData `json:"inlineData"`
	}
	inlineData struct {
		Data     []byte `json:"data"` // base64, as genai.Blob's
		MIMEType string `json:"mimeType"`
	}
)

// stepParts are a code run's executableCode and codeExecutionResult.
func stepParts(s *gateway.Step) (codePart, resultPart) {
	var a struct {
		Code string `json:"code"`
	}
	json.Unmarshal([]byte(s.Call.Arguments), &a)
	return codePart{executableCode{Code: a.Code, Language: "PYTHON"}}, resultPart{stepResult(s)}
}

// stepImages are a code run's figures as inlineData parts.
func stepImages(s *gateway.Step) []any {
	d, ok := s.Result.Detail.(*gateway.CodeExecDetail)
	if !ok {
		return nil
	}
	var parts []any
	for _, img := range d.Images {
		parts = append(parts, imagePart{inlineData{Data: img.Data, MIMEType: img.MIME}})
	}
	return parts
}

func stepResult(s *gateway.Step) codeResult {
	outcome, output := genai.OutcomeFailed, s.Result.Content
	if d, ok := s.Result.Detail.(*gateway.CodeExecDetail); ok {
		switch c := d.Content.(type) {
		case *gateway.BashResult:
			output = c.Stdout + c.Stderr
			if c.ReturnCode == 0 {
				outcome, output = genai.OutcomeOK, c.Stdout
			}
		case *gateway.CodeExecError:
			output = c.ErrorMessage
			if c.ErrorCode == "execution_time_exceeded" {
				outcome = genai.OutcomeDeadlineExceeded
			}
		}
	}
	return codeResult{Outcome: outcome, Output: output}
}

func callPart(c *gateway.ToolCall) map[string]any {
	var args map[string]any
	if json.Unmarshal([]byte(c.Arguments), &args) != nil || args == nil {
		args = map[string]any{}
	}
	return map[string]any{"functionCall": map[string]any{"id": c.ID, "name": c.Name, "args": args}}
}

// FinishReason is a stop reason in Gemini's words.
func FinishReason(stop gateway.StopReason) genai.FinishReason {
	switch stop {
	case gateway.StopMaxTokens:
		return genai.FinishReasonMaxTokens
	case gateway.StopRefusal:
		return genai.FinishReasonSafety
	}
	return genai.FinishReasonStop
}

func usage(res *gateway.Result) map[string]any {
	u := res.Usage
	m := map[string]any{"promptTokenCount": u.InputTokens, "candidatesTokenCount": u.OutputTokens - u.ReasoningTokens,
		"totalTokenCount": u.InputTokens + u.OutputTokens}
	if u.CacheReadTokens > 0 {
		m["cachedContentTokenCount"] = u.CacheReadTokens
	}
	if u.ReasoningTokens > 0 {
		m["thoughtsTokenCount"] = u.ReasoningTokens
	}
	return m
}

func (rd *renderer) chunk(parts []any, res *gateway.Result) map[string]any {
	if parts == nil {
		parts = []any{}
	}
	cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
	v := map[string]any{"candidates": []any{cand}, "modelVersion": rd.model, "responseId": rd.id}
	if res != nil {
		cand["finishReason"] = FinishReason(res.Stop)
		v["usageMetadata"] = usage(res)
	}
	return v
}

func (rd *renderer) response(res *gateway.Result) map[string]any {
	var parts []any
	for _, it := range res.Items {
		switch it.Kind {
		case gateway.ItemText:
			if it.Text != "" {
				parts = append(parts, textPart{it.Text})
			}
		case gateway.ItemClientCall:
			parts = append(parts, callPart(it.Call))
		case gateway.ItemStep:
			code, result := stepParts(it.Step)
			parts = append(append(parts, code, result), stepImages(it.Step)...)
		}
	}
	return rd.chunk(parts, res)
}

// streamer is the run's Sink: one SSE data line per chunk, each chunk a
// GenerateContentResponse with the parts produced since the last.
type streamer struct {
	w       http.ResponseWriter
	rd      *renderer
	mu      sync.Mutex
	started bool
}

func (s *streamer) send(v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		s.w.Header().Set("Content-Type", "text/event-stream")
		s.w.Header().Set("Cache-Control", "no-cache")
		s.w.WriteHeader(http.StatusOK)
	}
	b, _ := json.Marshal(v)
	fmt.Fprintf(s.w, "data: %s\r\n\r\n", b)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *streamer) TextDelta(text string) {
	if text != "" {
		s.send(s.rd.chunk([]any{textPart{text}}, nil))
	}
}
func (s *streamer) TextDone(string) {}
func (s *streamer) ClientCall(c gateway.ToolCall) {
	s.send(s.rd.chunk([]any{callPart(&c)}, nil))
}
func (s *streamer) StepStart(st *gateway.Step) {
	code, _ := stepParts(st)
	s.send(s.rd.chunk([]any{code}, nil))
}
func (s *streamer) StepOutput(*gateway.Step, int, int, string) {}
func (s *streamer) StepDone(st *gateway.Step) {
	s.send(s.rd.chunk(append([]any{resultPart{stepResult(st)}}, stepImages(st)...), nil))
}

// finish sends the last chunk: no parts, the finish reason and usage.
func (s *streamer) finish(res *gateway.Result) {
	s.send(s.rd.chunk(nil, res))
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
