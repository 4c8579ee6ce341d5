package scripted

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	rtrace "runtime/trace"
	"strings"
	"sync"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/messages"
)

// The four APIs, as Request.API names them.
const (
	APIChat      = "chat_completions"
	APIResponses = "responses"
	APIMessages  = "messages"
	APIGemini    = "gemini"
)

// maxBody caps a request body (the real APIs take tens of MiB with images).
const maxBody = 32 << 20

// Model is the scripted model as an http.Handler: POST /v1/chat/completions,
// /v1/responses and /v1/messages (also without the /v1 prefix, so a base
// URL with or without it works).
type Model struct {
	script *Script
	mux    *http.ServeMux

	mu       sync.Mutex
	requests []*Request
	counters map[string]int
}

// Request is one request the model received.
type Request struct {
	API    string // APIChat, APIResponses, APIMessages
	Path   string
	Header http.Header
	Raw    []byte         // the body as received
	Body   map[string]any // the body parsed (nil when it was not a JSON object)
	Model  string
	Stream bool
	// Turn is the script turn played; -1 when the request was refused
	// before one was chosen.
	Turn int
	// Status is what the model answered (0 until the head is written).
	Status int
	// Gone is closed when the client went away before the answer was
	// complete (a hanging or delayed turn, a stream cut short).
	Gone chan struct{}
	gone *sync.Once
}

func (r *Request) markGone() { r.gone.Do(func() { close(r.Gone) }) }

// update changes rec under the lock (Requests and Last copy it under the
// same lock).
func (m *Model) update(rec *Request, f func(*Request)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(rec)
}

// New returns the model playing script.
func New(script *Script) *Model {
	m := &Model{script: script, mux: http.NewServeMux(), counters: map[string]int{}}
	for _, prefix := range []string{"/v1", ""} {
		m.mux.HandleFunc("POST "+prefix+"/chat/completions", m.serve(APIChat))
		m.mux.HandleFunc("POST "+prefix+"/responses", m.serve(APIResponses))
		m.mux.HandleFunc("POST "+prefix+"/messages", m.serve(APIMessages))
	}
	m.mux.HandleFunc("POST /v1beta/models/{rest...}", m.serve(APIGemini))
	return m
}

func (m *Model) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.mux.ServeHTTP(w, r) }

// Requests returns copies of the requests received so far, oldest first.
func (m *Model) Requests() []*Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Request, len(m.requests))
	for i, r := range m.requests {
		c := *r
		out[i] = &c
	}
	return out
}

// Last returns the last request received, or nil.
func (m *Model) Last() *Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.requests) == 0 {
		return nil
	}
	c := *m.requests[len(m.requests)-1]
	return &c
}

// Reset forgets the recorded requests and the sequential counters.
func (m *Model) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests, m.counters = nil, map[string]int{}
}

// Server is the model served over loopback HTTP (httptest): URL is its
// base, e.g. URL+"/v1" for an OpenAI-style base URL.
type Server struct {
	*httptest.Server
	*Model
}

// NewServer starts the model playing script on a loopback port. Close it
// when done.
func NewServer(script *Script) *Server {
	m := New(script)
	return &Server{Server: httptest.NewServer(m), Model: m}
}

// apiError is a refusal in the API's envelope.
type apiError struct {
	status int
	typ    string
	param  string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, a ...any) *apiError {
	return &apiError{status: 400, typ: "invalid_request_error", msg: fmt.Sprintf(format, a...)}
}

// serve is the common path of the four APIs: read, validate, record,
// pick the turn, wait as scripted, answer.
func (m *Model) serve(api string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The handler's start in the runtime trace, for bench/exchtrace
		// (nothing when the trace is off).
		rtrace.Log(r.Context(), "scripted", api)
		rec := &Request{API: api, Path: r.URL.Path, Header: r.Header.Clone(), Turn: -1, Gone: make(chan struct{}), gone: &sync.Once{}}
		m.mu.Lock()
		m.requests = append(m.requests, rec)
		m.mu.Unlock()
		m.answer(&statusWriter{ResponseWriter: w, m: m, rec: rec}, r, rec)
	}
}

func (m *Model) answer(w http.ResponseWriter, r *http.Request, rec *Request) int {
	api := rec.API
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return writeError(w, api, &apiError{status: 413, typ: "request_too_large", msg: "request body too large or unreadable: " + err.Error()})
	}
	m.update(rec, func(r *Request) { r.Raw = raw })
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil || body == nil {
		return writeError(w, api, badRequest("the request body is not a JSON object"))
	}
	m.update(rec, func(r *Request) { r.Body = body })
	var conv *conversation
	switch api {
	case APIChat:
		conv, err = parseChat(raw)
	case APIResponses:
		conv, err = parseResponses(raw)
	case APIMessages:
		conv, err = parseMessages(raw)
	case APIGemini:
		conv, err = parseGemini(raw, r.PathValue("rest"))
	}
	if err != nil {
		ae, ok := err.(*apiError)
		if !ok {
			ae = badRequest("%s", err.Error())
		}
		return writeError(w, api, ae)
	}
	m.update(rec, func(r *Request) { r.Model, r.Stream = conv.Model, conv.Stream })

	turns, ok := m.script.Models[conv.Model]
	if !ok {
		turns = m.script.Turns
	}
	if len(turns) == 0 {
		return writeError(w, api, &apiError{status: 404, typ: "not_found_error", param: "model", msg: fmt.Sprintf("The model `%s` does not exist (scripted upstream)", conv.Model)})
	}
	idx := conv.AssistantTurns
	if m.script.Sequential {
		m.mu.Lock()
		idx = m.counters[conv.Model]
		m.counters[conv.Model]++
		m.mu.Unlock()
	}
	if idx >= len(turns) {
		if !m.script.Repeat {
			return writeError(w, api, &apiError{status: 500, typ: "api_error", msg: fmt.Sprintf("scripted upstream: the script of model %q has %d turns, this request is turn %d", conv.Model, len(turns), idx)})
		}
		idx %= len(turns)
	}
	m.update(rec, func(r *Request) { r.Turn = idx })
	t := turns[idx]

	ctx := r.Context()
	if t.Hang || (t.HangStream && !conv.Stream) {
		<-ctx.Done()
		rec.markGone()
		return 0
	}
	if t.Delay > 0 && !sleep(ctx, time.Duration(t.Delay)) {
		rec.markGone()
		return 0
	}
	if t.Error != nil && t.Error.MidStream && conv.Stream {
		s := newSSE(w, ctx, time.Duration(t.ChunkDelay), false)
		streamError(s, api, conv.Model, t.Error)
		if s.gone {
			rec.markGone()
		}
		return 200
	}
	if t.Error != nil {
		if t.Error.Body != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(t.Error.Status)
			io.WriteString(w, t.Error.Body)
			return t.Error.Status
		}
		return writeError(w, api, &apiError{status: t.Error.Status, typ: t.Error.Type, msg: t.Error.Message})
	}
	a := &answer{turn: &t, conv: conv, index: idx, model: conv.Model}
	if t.Model != "" {
		a.model = t.Model
	}
	a.text = fill(t.Text, conv, idx)
	for _, c := range t.ToolCalls {
		name, args := c.resolve(conv.Tools)
		a.calls = append(a.calls, call{id: c.ID, name: name, args: fill(args, conv, idx)})
	}
	if len(t.Hosted) > 0 {
		if len(conv.Hosted) == 0 {
			return writeError(w, api, badRequest("scripted upstream: turn %d of model %q runs the provider's hosted tool, but the request offers none", idx, conv.Model))
		}
		a.hostedTool = conv.Hosted[0]
		for _, h := range t.Hosted {
			if h.ID == "" {
				h.ID = newID(map[string]string{APIResponses: "call_", APIMessages: "srvtoolu_"}[api])
			}
			a.hosted = append(a.hosted, h)
		}
	}
	if !conv.Stream {
		var v any
		switch api {
		case APIChat:
			v = chatCompletion(a)
		case APIResponses:
			v = responseObject(a, "completed")
		case APIMessages:
			v = messageObject(a)
		case APIGemini:
			v = geminiObject(a)
		}
		writeJSON(w, 200, v)
		return 200
	}
	s := newSSE(w, ctx, time.Duration(t.ChunkDelay), t.HangStream)
	switch api {
	case APIChat:
		streamChat(s, a)
	case APIResponses:
		streamResponses(s, a)
	case APIMessages:
		streamMessages(s, a)
	case APIGemini:
		streamGemini(s, a)
	}
	if s.gone {
		rec.markGone()
	}
	return 200
}

// statusWriter records the status in the request as the head is written,
// so a client that has the answer finds it recorded.
type statusWriter struct {
	http.ResponseWriter
	m   *Model
	rec *Request
}

func (w *statusWriter) WriteHeader(code int) {
	w.m.update(w.rec, func(r *Request) { r.Status = code })
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// streamError opens a stream as api does and sends e as its error event.
func streamError(s *sse, api, model string, e *Error) {
	typ := e.Type
	switch api {
	case APIChat:
		s.event("", map[string]any{"id": newID("chatcmpl-"), "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "finish_reason": nil}}})
		if typ == "" {
			typ = "server_error"
		}
		s.event("", map[string]any{"error": map[string]any{"message": e.Message, "type": typ, "param": nil, "code": e.Status}})
	case APIResponses:
		a := &answer{turn: &Turn{}, model: model}
		id, created := newID("resp_"), time.Now().Unix()
		s.event("response.created", map[string]any{"type": "response.created", "sequence_number": 0, "response": responseWith(a, id, created, nil, "in_progress")})
		if typ == "" {
			typ = "server_error"
		}
		s.event("error", map[string]any{"type": "error", "sequence_number": 1, "code": typ, "message": e.Message, "param": nil})
	case APIMessages:
		s.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": newID("msg_"), "type": "message", "role": "assistant",
			"model": model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": messagesUsage(Usage{})}})
		if typ == "" {
			typ = messages.ErrorType(e.Status)
		}
		s.event("error", map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": e.Message}})
	case APIGemini:
		s.event("", geminiChunk(&answer{turn: &Turn{}, model: model}, []any{map[string]any{"text": ""}}, false, newID("")))
		s.event("", map[string]any{"error": map[string]any{"code": e.Status, "message": e.Message, "status": geminiStatus(e.Status)}})
	}
}

// answer is a turn ready to render: placeholders filled, ids chosen.
type answer struct {
	turn  *Turn
	conv  *conversation
	index int
	model string
	text  string
	calls []call
	// hosted are the turn's runs of the provider's hosted tool
	// hostedTool, ids chosen.
	hosted     []HostedRun
	hostedTool string
}

type call struct {
	id, name, args string
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func newID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// marshal is json.Marshal without HTML escaping ("2>/dev/null" stays
// readable in a recorded answer).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		status, b = 500, []byte(`{"error":{"message":"scripted upstream: encoding failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// writeError answers e in the API's envelope: OpenAI's
// {"error":{message,type,param,code}}, Anthropic's
// {"type":"error","error":{type,message}} or Google's
// {"error":{code,message,status}}.
func writeError(w http.ResponseWriter, api string, e *apiError) int {
	typ := e.typ
	if api == APIGemini {
		if typ == "" || strings.Contains(typ, "_error") {
			typ = geminiStatus(e.status)
		}
		writeJSON(w, e.status, map[string]any{"error": map[string]any{"code": e.status, "message": e.msg, "status": typ}})
		return e.status
	}
	if api == APIMessages {
		if typ == "" {
			typ = messages.ErrorType(e.status)
		}
		writeJSON(w, e.status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": e.msg}, "request_id": newID("req_")})
		return e.status
	}
	if typ == "" {
		typ = "invalid_request_error"
		if e.status >= 500 {
			typ = "server_error"
		}
	}
	var param any
	if e.param != "" {
		param = e.param
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"message": e.msg, "type": typ, "param": param, "code": nil}})
	return e.status
}

// checkToolChoice checks an OpenAI tool_choice (Chat Completions and
// Responses): a mode (none, auto, required), or an object that named
// checks (its shape is each API's).
func checkToolChoice(tc []byte, named func() error) error {
	var mode string
	if json.Unmarshal(tc, &mode) != nil {
		return named()
	}
	if mode != "none" && mode != "auto" && mode != "required" {
		return badRequest("Invalid value: '%s'. Supported values are: 'none', 'auto', and 'required'. ('tool_choice')", mode)
	}
	return nil
}

// sse writes Server-Sent Events, one flush per event, with the scripted
// delay between events; it notices a client that went away.
type sse struct {
	w      http.ResponseWriter
	ctx    context.Context
	delay  time.Duration
	hang   bool // after the first event
	n      int
	gone   bool
	header bool
}

func newSSE(w http.ResponseWriter, ctx context.Context, delay time.Duration, hang bool) *sse {
	return &sse{w: w, ctx: ctx, delay: delay, hang: hang}
}

// event writes one event; name "" writes only the data line (Chat
// Completions). Once the client is gone it writes nothing.
func (s *sse) event(name string, v any) {
	if s.gone {
		return
	}
	if !s.header {
		s.w.Header().Set("Content-Type", "text/event-stream")
		s.w.Header().Set("Cache-Control", "no-cache")
		s.w.WriteHeader(200)
		s.header = true
	} else if s.hang {
		<-s.ctx.Done()
		s.gone = true
		return
	} else if s.delay > 0 && !sleep(s.ctx, s.delay) {
		s.gone = true
		return
	}
	var data []byte
	if b, ok := v.(string); ok {
		data = []byte(b)
	} else {
		data, _ = marshal(v)
	}
	var err error
	if name != "" {
		_, err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, data)
	} else {
		_, err = fmt.Fprintf(s.w, "data: %s\n\n", data)
	}
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
	if err != nil || s.ctx.Err() != nil {
		s.gone = true
	}
}

// chunks splits text into pieces of about n bytes at word ends, so
// streamed text arrives in several deltas.
func chunks(text string, n int) []string { return Chunks(text, n, true) }

// Chunks splits s into pieces of n bytes, each run on to the end of a
// word (at a space) when words is set, and to the end of a UTF-8
// sequence; the last piece is the rest (none when s is empty). The
// scripted models stream text and arguments in them.
func Chunks(s string, n int, words bool) []string {
	var out []string
	for len(s) > n {
		cut := n
		for words && cut < len(s) && s[cut-1] != ' ' {
			cut++
		}
		for cut < len(s) && s[cut]&0xC0 == 0x80 {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// argChunks splits tool-call arguments into pieces (at least two when the
// text allows), as the real APIs stream them.
func argChunks(args string) []string {
	if len(args) < 2 {
		return []string{args}
	}
	return Chunks(args, max(len(args)/3, 1), false)
}
