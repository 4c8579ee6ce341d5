package responses

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/metering"
	"github.com/shellgate/shellgate/internal/tool"
)

// newID is an id in OpenAI's style: a prefix and 48 hex digits.
func newID(prefix string) string {
	var b [24]byte
	rand.Read(b[:])
	id := make([]byte, len(prefix)+hex.EncodedLen(len(b)))
	hex.Encode(id[copy(id, prefix):], b[:])
	return string(id)
}

// Item id prefixes, as the live API uses them where it has the item.
const (
	prefixResponse  = "resp_"
	prefixMessage   = "msg_"
	prefixFunction  = "fc_"
	prefixShell     = "sh_"
	prefixShellOut  = "sho_"
	prefixLocal     = "lsh_"
	prefixRouter    = "st_tmp_"
	prefixInterp    = "ci_"
	routerErrStatus = "failed"
)

// Output items. Field order follows the live API; nullable fields are
// pointers so that they are sent as null, never left out.

type outputText struct {
	Type        string `json:"type"` // output_text
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

func newOutputText(text string, annotations ...any) outputText {
	if annotations == nil {
		annotations = []any{}
	}
	return outputText{Type: "output_text", Text: text, Annotations: annotations, Logprobs: []any{}}
}

type messageItem struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"` // message
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

func newMessage(id, status string, content ...outputText) messageItem {
	if content == nil {
		content = []outputText{}
	}
	return messageItem{ID: id, Type: "message", Status: status, Role: "assistant", Content: content}
}

type functionCallItem struct {
	ID        string `json:"id"`
	Type      string `json:"type"` // function_call
	Status    string `json:"status"`
	Arguments string `json:"arguments"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	// Caller is set on a call a program made (programmatic tool calling).
	Caller *callerField `json:"caller,omitempty"`
}

type containerRef struct {
	Type        string `json:"type"` // container_reference
	ContainerID string `json:"container_id"`
}

type shellActionOut struct {
	Commands        []string `json:"commands"`
	TimeoutMs       *int64   `json:"timeout_ms"`
	MaxOutputLength *int64   `json:"max_output_length"`
}

type shellCallItem struct {
	ID          string         `json:"id"`
	Type        string         `json:"type"` // shell_call
	Status      string         `json:"status"`
	CallID      string         `json:"call_id"`
	Action      shellActionOut `json:"action"`
	Environment containerRef   `json:"environment"`
}

type shellOutputItem struct {
	ID              string               `json:"id"`
	Type            string               `json:"type"` // shell_call_output
	Status          string               `json:"status"`
	CallID          string               `json:"call_id"`
	MaxOutputLength *int64               `json:"max_output_length"`
	Output          []tool.CommandOutput `json:"output"`
}

type localActionOut struct {
	Type             string            `json:"type"` // exec
	Command          []string          `json:"command"`
	Env              map[string]string `json:"env"`
	TimeoutMs        *int64            `json:"timeout_ms"`
	User             *string           `json:"user"`
	WorkingDirectory *string           `json:"working_directory"`
}

type localCallItem struct {
	ID     string         `json:"id"`
	Type   string         `json:"type"` // local_shell_call
	Status string         `json:"status"`
	CallID string         `json:"call_id"`
	Action localActionOut `json:"action"`
}

type localOutputItem struct {
	ID     string `json:"id"` // the call id, as OpenAI names a local shell output
	Type   string `json:"type"`
	Status string `json:"status"`
	Output string `json:"output"`
}

type fileCitation struct {
	Type        string `json:"type"` // container_file_citation
	ContainerID string `json:"container_id"`
	FileID      string `json:"file_id"`
	Filename    string `json:"filename"`
	StartIndex  int    `json:"start_index"`
	EndIndex    int    `json:"end_index"`
}

// routerItem is the shellgate:shell / openrouter:shell item (wire-formats
// §1.2): the call and its output in one.
type routerItem struct {
	Type        string               `json:"type"`
	ID          string               `json:"id"`
	CallID      string               `json:"call_id"`
	Status      string               `json:"status"`
	Arguments   string               `json:"arguments"`
	Action      shellActionOut       `json:"action"`
	ContainerID string               `json:"container_id"`
	Files       []fileCitation       `json:"files,omitempty"`
	Output      []tool.CommandOutput `json:"output,omitempty"`
	Error       string               `json:"error,omitempty"`
}

func raw(v any) json.RawMessage {
	e := itemEncoders.Get().(*itemEncoder)
	defer itemEncoders.Put(e)
	e.buf.Reset()
	e.enc.Encode(v) // the item types always encode
	out := bytes.Clone(bytes.TrimRight(e.buf.Bytes(), "\n"))
	if e.buf.Cap() > 64<<10 {
		e.buf = bytes.Buffer{} // a large item's buffer is not kept
	}
	return out
}

// itemEncoder is a JSON encoder without HTML escaping and its buffer,
// reused by raw (an item's bytes are copied out).
type itemEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var itemEncoders = sync.Pool{New: func() any {
	e := &itemEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// stepView is a step as the items show it.
type stepView struct {
	call    gateway.ToolCall
	action  shellActionOut
	failed  bool   // the step did not run: Error is what the model read
	errText string // ...
	outputs []tool.CommandOutput
	changed []gateway.ChangedFile
}

// viewCall reads a call's arguments for display (commands as far as they
// parse), before it runs.
func viewCall(call gateway.ToolCall) stepView {
	a, err := tool.ParseShellArgs([]byte(call.Arguments))
	return viewArgs(call, a, err == nil)
}

// viewArgs is viewCall with the call's arguments parsed (ok: they parsed).
func viewArgs(call gateway.ToolCall, a tool.ShellArgs, ok bool) stepView {
	v := stepView{call: call, action: shellActionOut{Commands: []string{}}}
	if ok {
		if a.Commands != nil {
			v.action.Commands = a.Commands
		}
		v.action.TimeoutMs, v.action.MaxOutputLength = a.TimeoutMs, a.MaxOutputLength
	}
	return v
}

// viewStep is a finished step. The shell tool kept the arguments it
// parsed: they are not parsed again when they are the call's.
func viewStep(s *gateway.Step) stepView {
	var v stepView
	if d, ok := s.Result.Detail.(*gateway.ShellDetail); ok && d.ArgsOf != "" && d.ArgsOf == s.Call.Arguments {
		v = viewArgs(s.Call, d.Args, true)
	} else {
		v = viewCall(s.Call)
	}
	if d, ok := s.Result.Detail.(*gateway.ShellDetail); ok {
		v.outputs, v.changed = d.Outputs, d.Changed
	}
	if s.Result.IsError {
		v.failed, v.errText = true, s.Result.Content
	}
	if v.outputs == nil {
		v.outputs = []tool.CommandOutput{}
	}
	return v
}

// shownOutputs are the outputs a shell_call_output carries: a refused step
// shows the error text the model read in stderr, with exit code 1.
func (v stepView) shownOutputs() []tool.CommandOutput {
	if !v.failed {
		return v.outputs
	}
	one := 1
	return append(append([]tool.CommandOutput{}, v.outputs...), tool.CommandOutput{Stderr: v.errText, Outcome: tool.Outcome{Type: "exit", ExitCode: &one}})
}

func (v stepView) outputStatus() string {
	if v.failed {
		return "incomplete"
	}
	return "completed"
}

func shellCall(id, status string, v stepView, containerID string) shellCallItem {
	return shellCallItem{ID: id, Type: "shell_call", Status: status, CallID: v.call.ID, Action: v.action,
		Environment: containerRef{Type: "container_reference", ContainerID: containerID}}
}

func shellOutput(id, status string, v stepView, outs []tool.CommandOutput) shellOutputItem {
	if outs == nil {
		outs = []tool.CommandOutput{}
	}
	return shellOutputItem{ID: id, Type: "shell_call_output", Status: status, CallID: v.call.ID, MaxOutputLength: v.action.MaxOutputLength, Output: outs}
}

// localCommand is the argv a local_shell_call shows for a step: each
// command runs in its own bash -lc; several are shown as one script.
func localCommand(cmds []string) []string {
	return []string{"bash", "-lc", strings.Join(cmds, "\n")}
}

func localCall(id, status string, v stepView) localCallItem {
	return localCallItem{ID: id, Type: "local_shell_call", Status: status, CallID: v.call.ID,
		Action: localActionOut{Type: "exec", Command: localCommand(v.action.Commands), Env: map[string]string{}, TimeoutMs: v.action.TimeoutMs}}
}

func localOutput(v stepView, content string) localOutputItem {
	return localOutputItem{ID: v.call.ID, Type: "local_shell_call_output", Status: v.outputStatus(), Output: content}
}

func router(typ, id, status string, v stepView, containerID string) routerItem {
	it := routerItem{Type: typ, ID: id, CallID: v.call.ID, Status: status, Arguments: v.call.Arguments, Action: v.action, ContainerID: containerID}
	if status == "in_progress" {
		return it
	}
	if v.failed {
		it.Status, it.Error = routerErrStatus, v.errText
		return it
	}
	it.Output = v.outputs
	if it.Output == nil {
		it.Output = []tool.CommandOutput{}
	}
	for _, f := range v.changed {
		it.Files = append(it.Files, fileCitation{Type: "container_file_citation", ContainerID: containerID, FileID: f.ID, Filename: path.Base(f.Path)})
	}
	return it
}

// renderOutput renders a finished run's items in order (the non-streamed
// response).
func (m *meta) renderOutput(res *gateway.Result) []json.RawMessage {
	out := []json.RawMessage{}
	var cites citer
	for _, it := range res.Items {
		switch it.Kind {
		case gateway.ItemText:
			if it.Text != "" {
				out = append(out, raw(newMessage(newID(prefixMessage), "completed", newOutputText(it.Text, cites.cite(it.Text, m.containerID)...))))
			}
		case gateway.ItemClientCall:
			out = append(out, raw(functionCall(newID(prefixFunction), "completed", *it.Call, it.Call.Arguments)))
		case gateway.ItemStep:
			if isProgram(it.Step) {
				out = append(out, programItems(it.Step)...)
				continue
			}
			if isInterp(it.Step) {
				out = append(out, raw(m.interpDone(newID(prefixInterp), it.Step)))
				cites.add(it.Step)
				continue
			}
			v := viewStep(it.Step)
			switch m.p.shell {
			case shellNative:
				out = append(out, raw(shellCall(newID(prefixShell), "completed", v, m.containerOf(it.Step))),
					raw(shellOutput(newID(prefixShellOut), v.outputStatus(), v, v.shownOutputs())))
			case shellLocal:
				out = append(out, raw(localCall(newID(prefixLocal), "completed", v)), raw(localOutput(v, it.Step.Result.Content)))
			default:
				out = append(out, raw(router(m.p.shellType, newID(prefixRouter), "completed", v, m.containerOf(it.Step))))
			}
		}
	}
	return out
}

// containerOf is the container step ran in: the request's, or the
// provider's for a call the provider ran itself (engine auto) when it
// named one.
func (m *meta) containerOf(step *gateway.Step) string {
	if step.Native {
		switch d := step.Result.Detail.(type) {
		case *gateway.ShellDetail:
			if d.ContainerID != "" {
				return d.ContainerID
			}
		case *gateway.InterpreterDetail:
			if d.ContainerID != "" {
				return d.ContainerID
			}
		}
	}
	return m.containerID
}

// meta is what one response object says besides its output.
type meta struct {
	p           *parsed
	id          string
	created     int64
	containerID string // the request's container ("" without a server tool)
}

func newMeta(p *parsed, containerID string) *meta {
	return &meta{p: p, id: newID(prefixResponse), created: time.Now().Unix(), containerID: containerID}
}

// response is the response object. Every field openai-go marks required
// is present (nullable ones as null).
type response struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Background         bool              `json:"background"`
	CompletedAt        *int64            `json:"completed_at"`
	Error              *responseError    `json:"error"`
	FrequencyPenalty   *float64          `json:"frequency_penalty"` // always null: OpenRouter's SDK requires the key
	IncompleteDetails  *incomplete       `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	MaxToolCalls       int               `json:"max_tool_calls"`
	Model              string            `json:"model"`
	Output             []json.RawMessage `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PresencePenalty    *float64          `json:"presence_penalty"` // always null, as frequency_penalty
	PreviousResponseID *string           `json:"previous_response_id"`
	PromptCacheKey     *string           `json:"prompt_cache_key"`
	Reasoning          json.RawMessage   `json:"reasoning"`
	SafetyIdentifier   *string           `json:"safety_identifier"`
	ServiceTier        string            `json:"service_tier"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	Text               json.RawMessage   `json:"text"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	TopLogprobs        int               `json:"top_logprobs"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *usage            `json:"usage"`
	User               *string           `json:"user"`
	Metadata           map[string]string `json:"metadata"`
	AccessPrograms     json.RawMessage   `json:"access_programs"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type usage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens     int64 `json:"cached_tokens"`
		CacheWriteTokens int64 `json:"cache_write_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens          int64 `json:"total_tokens"`
	ServerToolUseDetails *struct {
		ToolCallsRequested int `json:"tool_calls_requested"`
		ToolCallsExecuted  int `json:"tool_calls_executed"`
	} `json:"server_tool_use_details,omitempty"`
	CostDetails *costDetails `json:"cost_details,omitempty"`
}

// costDetails is usage.cost_details. Shellgate meters only its hosted tools:
// the upstream's inference is not billed here, so its input and output
// costs are 0, present because OpenRouter's SDK requires both keys whenever
// cost_details is.
type costDetails struct {
	ServerToolCost              json.Number `json:"server_tool_cost"`
	UpstreamInferenceInputCost  json.Number `json:"upstream_inference_input_cost"`
	UpstreamInferenceOutputCost json.Number `json:"upstream_inference_output_cost"`
}

func usageOf(res *gateway.Result) *usage {
	u := &usage{InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens,
		TotalTokens: res.Usage.InputTokens + res.Usage.OutputTokens}
	u.InputTokensDetails.CachedTokens = res.Usage.CacheReadTokens
	u.InputTokensDetails.CacheWriteTokens = res.Usage.CacheWriteTokens
	u.OutputTokensDetails.ReasoningTokens = res.Usage.ReasoningTokens
	if res.ToolCallsRequested > 0 {
		u.ServerToolUseDetails = &struct {
			ToolCallsRequested int `json:"tool_calls_requested"`
			ToolCallsExecuted  int `json:"tool_calls_executed"`
		}{res.ToolCallsRequested, res.ToolCallsExecuted}
	}
	if res.ToolCallsExecuted > 0 || res.CostMicroUSD > 0 {
		u.CostDetails = &costDetails{ServerToolCost: json.Number(trimZeros(metering.USD(res.CostMicroUSD))),
			UpstreamInferenceInputCost: "0", UpstreamInferenceOutputCost: "0"}
	}
	return u
}

// trimZeros shortens "0.003000" to "0.003" (and "1.000000" to "1").
func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// response builds the response object: status "in_progress" (no res),
// "completed"/"incomplete" (from res.Stop), or "failed" with fail.
func (m *meta) response(status string, output []json.RawMessage, res *gateway.Result, fail *apiError) *response {
	p := m.p
	r := &response{
		ID: m.id, Object: "response", CreatedAt: m.created, Status: status, Instructions: p.instructions,
		MaxOutputTokens: p.maxOutput, MaxToolCalls: p.maxCalls, Model: p.model, Output: output,
		ParallelToolCalls: p.parallel, Reasoning: p.reasoning, ServiceTier: "default", Store: p.store,
		Temperature: p.temperature, Text: json.RawMessage(`{"format":{"type":"text"}}`), ToolChoice: p.toolChoice,
		Tools: m.tools(), TopP: p.topP, Truncation: "disabled", User: nullable(p.user), Metadata: p.metadata,
		PromptCacheKey: nullable(p.cacheKey), AccessPrograms: json.RawMessage(`{"cyber":"standard"}`),
	}
	if r.Output == nil {
		r.Output = []json.RawMessage{}
	}
	if r.Metadata == nil {
		r.Metadata = map[string]string{}
	}
	if len(r.Reasoning) == 0 || string(r.Reasoning) == "null" {
		r.Reasoning = json.RawMessage(`{"effort":null,"summary":null}`)
	}
	if res != nil && status != "in_progress" {
		r.Usage = usageOf(res)
		if status == "completed" {
			switch res.Stop {
			case gateway.StopMaxTokens:
				r.Status, r.IncompleteDetails = "incomplete", &incomplete{Reason: "max_output_tokens"}
			case gateway.StopRefusal:
				r.Status, r.IncompleteDetails = "incomplete", &incomplete{Reason: "content_filter"}
			}
		}
	}
	if fail != nil {
		code := "server_error"
		if fail.Status == http.StatusTooManyRequests {
			code = "rate_limit_exceeded"
		}
		r.Error = &responseError{Code: code, Message: fail.Message}
	}
	if r.Status != "in_progress" {
		now := time.Now().Unix()
		r.CompletedAt = &now
	}
	return r
}

// tools echoes the request's tools, the shell tool's environment rewritten
// to the container the request used (wire-formats §7.1).
func (m *meta) tools() []json.RawMessage {
	tools := append([]json.RawMessage{}, m.p.tools...)
	if m.containerID == "" || (m.p.shell != shellNative && m.p.shell != shellRouter) {
		return tools
	}
	ref := raw(containerRef{Type: "container_reference", ContainerID: m.containerID})
	var t map[string]json.RawMessage
	if json.Unmarshal(tools[m.p.shellTool], &t) != nil {
		return tools
	}
	if m.p.shell == shellNative {
		t["environment"] = ref
	} else {
		var params map[string]json.RawMessage
		if len(t["parameters"]) > 0 && string(t["parameters"]) != "null" {
			json.Unmarshal(t["parameters"], &params)
		}
		if params == nil {
			params = map[string]json.RawMessage{}
		}
		params["environment"] = ref
		t["parameters"] = raw(params)
	}
	tools[m.p.shellTool] = raw(t)
	return tools
}

// writeJSON answers with v, its length set.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b []byte
	if r, ok := v.(*response); ok {
		b = encodeResponse(r)
	} else {
		b = raw(v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// outputNull is how raw writes a response's output key when Output is nil.
var outputNull = []byte(`,"output":null`)

// encodeResponse is raw(r) with r.Output's items copied in as they are:
// encoding/json scans and compacts every json.RawMessage it writes, so a
// response of many steps was encoded twice over (the items by raw, then
// the response), which was most of the cost of answering. The items are
// raw's own output (valid, compact JSON).
//
// The response is encoded with a nil Output and the items spliced in at
// the first `,"output":null`: every field before output is a number, a
// bool or a string encoded by encoding/json, in which a '"' is always
// escaped, so that sequence cannot occur inside any of them.
func encodeResponse(r *response) []byte {
	items := r.Output
	if items == nil {
		items = []json.RawMessage{}
	}
	r.Output = nil
	b := raw(r)
	r.Output = items
	i := bytes.Index(b, outputNull)
	if i < 0 {
		return raw(r) // cannot happen: the struct has the field, without omitempty
	}
	n := len(b) + len(items) + 3 // +1: room for writeJSON's newline
	for _, it := range items {
		n += len(it)
	}
	out := make([]byte, 0, n)
	out = append(out, b[:i]...)
	out = append(out, `,"output":[`...)
	for k, it := range items {
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	out = append(out, ']')
	return append(out, b[i+len(outputNull):]...)
}
