package messages

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/tool"
)

// Options are what a request is served with.
type Options struct {
	Models    gateway.Models
	Sandboxes gateway.Sandboxes // the caller's
	Log       *slog.Logger
	// Screen, if set, inspects each request before its container is
	// opened and its model called (the workspace's guardrails).
	Screen gateway.Screen
}

// Serve answers one Messages request: the key is already checked, the
// body not yet read.
func Serve(w http.ResponseWriter, r *http.Request, o Options) {
	reqID := newID("req_")
	w.Header().Set("request-id", reqID)
	fail := func(err error) { writeErr(w, reqID, err, o.Log, r) }
	if o.Models == nil {
		fail(&reqError{status: http.StatusNotFound, typ: "not_found_error", msg: "no model is configured on this Shellgate server (see the gateway's provider config)"})
		return
	}
	req, err := readBody(r)
	if err != nil {
		fail(err)
		return
	}
	p, err := parse(req, r)
	if err != nil {
		fail(err)
		return
	}
	ctx := r.Context()
	if len(p.run.ServerTools) > 0 || p.run.Select.ContainerReference != "" {
		if answered, err := gateway.Forward(ctx, o.Sandboxes, p.run.Select); answered || err != nil {
			if err != nil {
				fail(err)
			}
			return
		}
	}
	m, err := o.Models.Resolve(p.model)
	if err != nil {
		fail(err)
		return
	}
	p.run.Model = m
	p.run.Request.Model = m.Name
	if o.Screen != nil {
		if err := o.Screen(ctx, p.run.Request); err != nil {
			fail(err)
			return
		}
	}
	p.run.Sandboxes = o.Sandboxes
	if err := p.resolveUploads(ctx, o.Sandboxes); err != nil {
		fail(err)
		return
	}
	rd := &renderer{kinds: p.kinds, model: p.model, id: newID("msg_"), stops: p.run.Request.Stop}
	// A container named for tools the provider runs every one of is the
	// provider's (engine auto): it goes to the provider.
	if ref := p.run.Select.ContainerReference; ref != "" && (len(p.run.ServerTools) == 0 || len(p.run.HostedTools()) < len(p.run.ServerTools)) {
		// A container the request names must be the caller's: say so
		// before the model runs, not as a tool error. The response names
		// it even when no tool ran in it this time.
		sb, err := o.Sandboxes.Open(ctx, p.run.Select, p.run.Open)
		if err != nil {
			fail(err)
			return
		}
		rd.named = &containerField{ID: sb.ContainerID(), ExpiresAt: sb.ExpiresAt().UTC().Format(time.RFC3339)}
		sb.Close() // nothing ran in it: nothing to bill
	}
	if !p.stream {
		gateway.Serve(ctx, p.run, func(res *gateway.Result) { writeJSON(w, http.StatusOK, rd.message(res)) }, fail)
		return
	}
	st := &streamer{w: w, rd: rd}
	defer st.stop()
	p.run.Sink = st
	gateway.Serve(ctx, p.run, st.finish, func(err error) {
		if !st.started {
			fail(err)
			return
		}
		status, typ, msg := classify(err)
		logErr(o.Log, r, status, err)
		st.event("error", map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}, "request_id": reqID})
	})
}

// resolveUploads names each container_upload's file for the model and
// adds it to the run's uploads (into $INPUT_DIR).
func (p *parsed) resolveUploads(ctx context.Context, sbs gateway.Sandboxes) error {
	if len(p.statFile) == 0 {
		return nil
	}
	names := map[string]string{}
	for _, id := range p.statFile {
		if _, ok := names[id]; ok {
			continue
		}
		fi, err := sbs.StatFile(ctx, id)
		if err != nil {
			return err
		}
		names[id] = fi.Name
		p.run.Uploads = append(p.run.Uploads, gateway.Upload{FileID: id, Dir: "input"})
	}
	for mi := range p.run.Request.Messages {
		parts := p.run.Request.Messages[mi].Parts
		for pi := range parts {
			if id, ok := strings.CutPrefix(parts[pi].Text, uploadMarker); ok && parts[pi].Kind == gateway.PartText {
				parts[pi].Text = fmt.Sprintf("[The user uploaded the file %s to the sandbox: $INPUT_DIR/%s, i.e. /workspace/home/input/%s]", names[id], names[id], names[id])
			}
		}
	}
	return nil
}

// classify maps an error to its status, Anthropic error type and message.
func classify(err error) (int, string, string) {
	var re *reqError
	if errors.As(err, &re) {
		return re.status, re.typ, re.msg
	}
	status, msg, utype := gateway.Describe(err)
	return status, errorType(status, utype), msg
}

// errorType is Anthropic's error type for a status, keeping an upstream's
// own type when it is one of Anthropic's.
func errorType(status int, upstream string) string {
	switch upstream {
	case "invalid_request_error", "authentication_error", "permission_error", "not_found_error", "request_too_large",
		"rate_limit_error", "api_error", "overloaded_error", "timeout_error", "billing_error":
		return upstream
	}
	return ErrorType(status)
}

// ErrorType is Anthropic's error type for an HTTP status.
func ErrorType(status int) string {
	switch status {
	case 400, 409, 410, 422:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 504:
		return "timeout_error"
	case 503, 529:
		return "overloaded_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

func logErr(log *slog.Logger, r *http.Request, status int, err error) {
	if log != nil && status >= 500 {
		log.ErrorContext(r.Context(), "messages request failed", "status", status, "err", err)
	}
}

func writeErr(w http.ResponseWriter, reqID string, err error, log *slog.Logger, r *http.Request) {
	status, typ, msg := classify(err)
	logErr(log, r, status, err)
	WriteError(w, reqID, status, typ, msg)
}

// WriteError answers in Anthropic's error envelope:
// {"type":"error","error":{"type","message"},"request_id"}.
func WriteError(w http.ResponseWriter, reqID string, status int, typ, msg string) {
	if reqID == "" {
		reqID = newID("req_")
		w.Header().Set("request-id", reqID)
	}
	if typ == "" {
		typ = errorType(status, "")
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}, "request_id": reqID})
}

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte(`{"type":"error","error":{"type":"api_error","message":"encoding the answer failed"}}`)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b := marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

const idChars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func newID(prefix string) string {
	b := make([]byte, 24)
	rand.Read(b)
	for i := range b {
		b[i] = idChars[int(b[i])%len(idChars)]
	}
	return prefix + "01" + string(b)
}

// --- the response ---

type message struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Model        string          `json:"model"`
	Content      []any           `json:"content"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	StopDetails  any             `json:"stop_details"`
	Usage        usage           `json:"usage"`
	Container    *containerField `json:"container,omitempty"`
}

type containerField struct {
	ID        string `json:"id"`
	ExpiresAt string `json:"expires_at"`
}

type usage struct {
	InputTokens              int64         `json:"input_tokens"`
	OutputTokens             int64         `json:"output_tokens"`
	CacheCreationInputTokens int64         `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64         `json:"cache_read_input_tokens"`
	ServerToolUse            serverToolUse `json:"server_tool_use"`
	ServerToolUseDetails     *toolDetails  `json:"server_tool_use_details,omitempty"`
	CostDetails              *costDetails  `json:"cost_details,omitempty"`
}

type serverToolUse struct {
	WebSearchRequests     int64 `json:"web_search_requests"`
	WebFetchRequests      int64 `json:"web_fetch_requests"`
	CodeExecutionRequests int64 `json:"code_execution_requests"`
}

type toolDetails struct {
	ToolCallsRequested int `json:"tool_calls_requested"`
	ToolCallsExecuted  int `json:"tool_calls_executed"`
}

type costDetails struct {
	ServerToolCost float64 `json:"server_tool_cost"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type useBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// Caller is set on a tool_use made by code (programmatic tool calling).
	Caller *caller `json:"caller,omitempty"`
}

type resultBlock struct {
	Type      string `json:"type"`
	ToolUseID string `json:"tool_use_id"`
	Content   any    `json:"content"`
}

// renderer turns the loop's items into Anthropic's blocks.
type renderer struct {
	kinds map[string]toolKind
	model string
	id    string
	ids   map[*gateway.Step]string // server_tool_use ids, once per step
	byID  map[string]string        // … by the step's call id
	named *containerField          // the container the request named
	stops []string                 // the request's stop_sequences
}

func stopReason(s gateway.StopReason) string {
	switch s {
	case gateway.StopMaxTokens:
		return "max_tokens"
	case gateway.StopToolUse:
		return "tool_use"
	case gateway.StopSequence:
		return "stop_sequence"
	case gateway.StopRefusal:
		return "refusal"
	case gateway.StopPause:
		return "pause_turn"
	}
	return "end_turn"
}

// inputObject is a call's arguments as the block's input: the JSON object
// compacted, or {} when the model wrote something else.
func inputObject(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return json.RawMessage(`{}`)
	}
	var buf bytes.Buffer
	json.Compact(&buf, []byte(args))
	return buf.Bytes()
}

// blockID makes a block id from the model's call id: prefix plus the id
// when it is made of the characters Anthropic ids use, so the same call
// renders the same streamed or not.
func blockID(prefix, callID string) string {
	if strings.HasPrefix(callID, prefix) {
		return callID
	}
	ok := callID != "" && len(callID) <= 100
	for _, c := range callID {
		if !(c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			ok = false
		}
	}
	if !ok {
		return newID(prefix)
	}
	return prefix + callID
}

func (rd *renderer) clientCall(c *gateway.ToolCall) useBlock {
	if c.Caller != "" {
		// Made by code: its id is the kernel's token, for the resume.
		tool, ok := rd.byID[c.Caller]
		if !ok {
			tool = blockID("srvtoolu_", c.Caller)
		}
		return useBlock{Type: "tool_use", ID: "toolu_" + c.ID, Name: c.Name, Input: inputObject(c.Arguments),
			Caller: &caller{Type: rd.kinds[gateway.CodeExecution].typ, ToolID: tool}}
	}
	id := c.ID
	if id == "" {
		// The client must be able to answer it.
		id = newID("toolu_")
	}
	return useBlock{Type: "tool_use", ID: id, Name: c.Name, Input: inputObject(c.Arguments)}
}

// step renders a server step as its server_tool_use and result blocks.
func (rd *renderer) step(s *gateway.Step) (useBlock, resultBlock) {
	k := rd.kinds[s.Call.Name]
	if rd.ids == nil {
		rd.ids = map[*gateway.Step]string{}
	}
	id, ok := rd.ids[s]
	if !ok {
		id = blockID("srvtoolu_", s.Call.ID)
		rd.ids[s] = id
		if rd.byID == nil {
			rd.byID = map[string]string{}
		}
		rd.byID[s.Call.ID] = id
	}
	use := useBlock{Type: "server_tool_use", ID: id, Name: s.Call.Name, Input: inputObject(s.Call.Arguments)}
	res := resultBlock{ToolUseID: use.ID}
	errText := strings.TrimPrefix(s.Result.Content, "error: ")
	switch k.kind {
	case "codeexec":
		res.Type = s.Call.Name + "_tool_result"
		if s.Call.Name == gateway.CodeExecution {
			res.Type = "code_execution_tool_result"
		}
		if d, ok := s.Result.Detail.(*gateway.CodeExecDetail); ok {
			res.Content = d.Content
		} else {
			code := "unavailable"
			if sd, ok := s.Result.Detail.(*gateway.ShellDetail); ok && sd.ErrorCode != "" {
				code = sd.ErrorCode
			}
			res.Content = &gateway.CodeExecError{Type: res.Type + "_error", ErrorCode: code, ErrorMessage: errText}
		}
	default:
		ns, _, _ := strings.Cut(k.typ, ":")
		use.Name = k.typ
		res.Type = ns + "_" + k.kind + "_tool_result"
		c := shellContent{Output: []tool.CommandOutput{}}
		d, _ := s.Result.Detail.(*gateway.ShellDetail)
		if d == nil {
			d = &gateway.ShellDetail{}
		}
		c.ContainerID = d.ContainerID
		switch {
		case s.Result.IsError:
			c.Error, c.ErrorCode = errText, d.ErrorCode
			if c.ErrorCode == "" {
				c.ErrorCode = "unavailable"
			}
		case s.Result.Content == gateway.RestartText:
			c.Restarted = true
		default:
			if d.Outputs != nil {
				c.Output = d.Outputs
			}
			for _, f := range d.Changed {
				c.FilesChanged = append(c.FilesChanged, changedFile{Path: f.Path, Bytes: f.Bytes})
			}
		}
		if k.kind == "bash" && !s.Result.IsError {
			cmd := strings.Join(d.Plan.Commands, "\n")
			var stdout, stderr strings.Builder
			exit := 0
			for _, o := range c.Output {
				stdout.WriteString(o.Stdout)
				stderr.WriteString(o.Stderr)
				if o.Outcome.ExitCode != nil {
					exit = *o.Outcome.ExitCode
				} else {
					exit = 124 // timeout, as timeout(1) says it
				}
			}
			so, se := stdout.String(), stderr.String()
			c.Command, c.Stdout, c.Stderr, c.ExitCode = &cmd, &so, &se, &exit
		}
		res.Content = c
	}
	return use, res
}

// message renders a finished run.
func (rd *renderer) message(res *gateway.Result) *message {
	m := &message{ID: rd.id, Type: "message", Role: "assistant", Model: rd.model, Content: []any{}}
	for _, it := range res.Items {
		switch it.Kind {
		case gateway.ItemText:
			if it.Text != "" {
				m.Content = append(m.Content, textBlock{Type: "text", Text: it.Text})
			}
		case gateway.ItemClientCall:
			m.Content = append(m.Content, rd.clientCall(it.Call))
		case gateway.ItemStep:
			// A step paused on a client call has no result yet; a resumed
			// one showed its call in the response that paused it.
			u, r := rd.step(it.Step)
			if !it.Step.Resumed {
				m.Content = append(m.Content, u)
			}
			if it.Step.Result.Paused == nil {
				m.Content = append(m.Content, r)
			}
		}
	}
	sr := stopReason(res.Stop)
	m.StopReason = &sr
	if res.Stop == gateway.StopSequence && len(rd.stops) == 1 {
		// The neutral turn does not say which sequence matched; with one
		// there is no doubt.
		m.StopSequence = &rd.stops[0]
	}
	m.Usage = rd.usage(res)
	m.Container = container(res)
	if m.Container == nil {
		m.Container = rd.named
	}
	return m
}

func container(res *gateway.Result) *containerField {
	if res.ContainerID == "" && res.NativeContainer.ID != "" {
		// The provider's, where it ran every tool (engine auto).
		c := &containerField{ID: res.NativeContainer.ID}
		if !res.NativeContainer.ExpiresAt.IsZero() {
			c.ExpiresAt = res.NativeContainer.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return c
	}
	if res.ContainerID == "" {
		return nil
	}
	exp := res.ExpiresAt
	if exp.IsZero() {
		exp = time.Now().Add(30 * 24 * time.Hour)
	}
	return &containerField{ID: res.ContainerID, ExpiresAt: exp.UTC().Format(time.RFC3339)}
}

func (rd *renderer) usage(res *gateway.Result) usage {
	u := res.Usage
	in := u.InputTokens - u.CacheReadTokens - u.CacheWriteTokens
	if in < 0 {
		in = 0
	}
	out := usage{InputTokens: in, OutputTokens: u.OutputTokens, CacheCreationInputTokens: u.CacheWriteTokens, CacheReadInputTokens: u.CacheReadTokens,
		ServerToolUse: serverToolUse{CodeExecutionRequests: int64(res.ToolCallsExecuted)}}
	if res.ToolCallsRequested > 0 {
		out.ServerToolUseDetails = &toolDetails{ToolCallsRequested: res.ToolCallsRequested, ToolCallsExecuted: res.ToolCallsExecuted}
	}
	if res.ContainerID != "" || res.CostMicroUSD > 0 {
		out.CostDetails = &costDetails{ServerToolCost: float64(res.CostMicroUSD) / 1e6}
	}
	return out
}
