// Package upstream holds Shellgate's upstream model adapters — one
// gateway.Upstream per API flavour: OpenAI-compatible Chat Completions
// (OpenAI, vLLM, Ollama, llama.cpp's server, OpenRouter), OpenAI Responses
// and Anthropic Messages — and the provider config that maps a model name
// "provider/model" to one of them (LoadConfig, Providers).
//
// Requests are built with the official SDKs' parameter types
// (openai.ChatCompletionNewParams, responses.ResponseNewParams,
// anthropic.MessageNewParams) and answers decoded into their response and
// stream-event types; the HTTP exchange itself is this package's (one
// attempt, no retries), so that errors, timeouts and cancellation follow
// gateway.Upstream's contract exactly:
//
//   - an upstream error answer → *gateway.UpstreamError with the upstream's
//     status, error type and message;
//   - a connection failure → 502; the provider's timeout → 504 (for a
//     non-streamed call the whole call, for a streamed one the response
//     head and then every gap between two events);
//   - ctx ending → ctx's error, promptly, the upstream request cancelled.
//
// # Adapters
//
//   - Adapters, one `gateway.Upstream` per API flavour: `Chat` (OpenAI-
//     compatible Chat Completions), `Responses`, `Messages`, `Gemini`. Each
//     translates a `gateway.Request` into the official SDK's parameter type
//     (`openai.ChatCompletionNewParams`, `responses.ResponseNewParams`,
//     `anthropic.MessageNewParams`; for Gemini a generateContent body of the
//     `genai` SDK's `Content`, `Tool`, `ToolConfig` and `GenerationConfig`),
//     and decodes the answer and stream events into lean views of the SDKs'
//     response types (`answers.go`, and `geminiAnswer` for
//     `genai.GenerateContentResponse`: only the fields read, same JSON names;
//     the SDKs' own decoders cost 1.5–9× as much and were most of a step's
//     work). Every answer and stream event is decoded with `unmarshal`: the
//     v1 API of `github.com/go-json-experiment/json` (the module that becomes
//     `encoding/json/v2` in Go 1.27), encoding/json's semantics in one pass.
//     The tools' arguments (`tool.ParseShellArgs`, the code-execution tools'
//     `decodeArgs`) are decoded the same way, with encoding/json's Decoder
//     (whose errors the model reads) behind; Gemini's call arguments are
//     written back with json.Marshal. (Hand-written readers of the views and
//     arguments saved 10.8–12.6 µs of a step's gateway work on a quiet
//     machine, under issue 30's 30 µs rule, and were deleted.) A non-streamed
//     answer is read into a pooled buffer (the views copy what they keep). Within a run the loop sets
//     `Request.Encoded`, a memo (`encode.go`): each turn translates into SDK
//     params and encodes only the messages added since the memo's (`Msgs`),
//     the tools once (shared between runs with the same tools) and the other
//     fields when the tool choice changes, and splices them into one body —
//     the same JSON value as encoding it whole (`TestEncodeMemo`), since the
//     loop only appends to the conversation. When the new messages continue
//     the memo's last element (Messages and Gemini merge consecutive turns of
//     one role: `memoContinued`), the adapter translates again from that
//     element's first message and the memo rebuilds it. `Prepare` (the
//     adapters' `gateway.Preparer`) runs the same encoding while the tools run,
//     keeps the body it assembled up to the last element (`Prefix`) for the
//     next turn to append to, and leaves that turn's HTTP exchange ready
//     (`readied`, in `Encoded.Next`; discarded when not sent). The turn after
//     Prepare's, which adds only a message of text results, builds no params:
//     `directTurn` appends the elements that the adapter's results writer
//     (`lean.go`: `chatResults`, `responsesResults`, `messagesResults`,
//     `geminiResults`) writes from the message itself, byte for byte what the
//     SDK writes for the params (`TestResultsWritersMatchSDK`); any other turn
//     goes the usual way. A step's own elements (the model's call and
//     text, the call's text result) are written without the SDKs by `lean.go`
//     for Responses, Messages and Gemini, byte for byte what the SDK's encoder
//     writes (`TestLeanMatchesSDK`); anything with more fields goes to the SDK
//     (Chat Completions' elements always do; off the step's path, in Prepare). The
//     HTTP exchange is the package's own
//     (`client.go`: one attempt, a provider timeout that bounds a whole call or
//     each gap of a stream, 502 on connection failure, 504 on the timeout, ctx
//     cancel ends the request at once). The timeouts of all calls with the same
//     duration share one runtime timer (`deadline.go`, a `watch`: the calls in
//     deadline order, the timer set for the first and left armed when the list
//     empties), so a call costs a list insertion rather than arming a timer,
//     which could wake a sleeping scheduler thread on every step. A streamed turn is assembled from the
//     same events the deltas come from, so it equals the non-streamed one.
//
// # Providers
//
//   - Providers (`config.go`): the YAML of `serve --config`, keys from the
//     environment; implements `gateway.Models` (`provider/model` → adapter).
package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/shellgate/shellgate/internal/gateway"
)

// Defaults of a provider's HTTP bounds.
const (
	DefaultTimeout     = 120 * time.Second
	DefaultDialTimeout = 10 * time.Second
	// maxAnswer caps a non-streamed answer or one SSE event (an upstream is
	// trusted less than ourselves: a runaway answer must not exhaust memory).
	maxAnswer = 32 << 20
	// maxErrorBody is how much of an error answer is read.
	maxErrorBody = 64 << 10
)

// Endpoint is how an adapter reaches its upstream.
type Endpoint struct {
	// BaseURL is the API root the paths are appended to
	// ("https://api.openai.com/v1", "http://127.0.0.1:11434/v1",
	// "https://api.anthropic.com" or ".../v1" for Messages).
	BaseURL string
	APIKey  string
	// Header is sent with every request (e.g. OpenRouter's HTTP-Referer).
	Header http.Header
	// Timeout bounds a call (see the package comment); 0: DefaultTimeout.
	Timeout time.Duration
	// Client is the HTTP client; nil: a shared one with DefaultDialTimeout
	// that honours HTTPS_PROXY/NO_PROXY.
	Client *http.Client
}

var defaultClient = &http.Client{Transport: &http.Transport{
	Proxy:               http.ProxyFromEnvironment,
	DialContext:         (&net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
	TLSHandshakeTimeout: DefaultDialTimeout,
	MaxIdleConnsPerHost: 64,
	IdleConnTimeout:     90 * time.Second,
	ForceAttemptHTTP2:   true,
}}

func (e *Endpoint) client() *http.Client {
	if e.Client != nil {
		return e.Client
	}
	return defaultClient
}

func (e *Endpoint) timeout() time.Duration {
	if e.Timeout > 0 {
		return e.Timeout
	}
	return DefaultTimeout
}

// url joins the base URL and path, not doubling a "/v1" the base already
// ends with.
func (e *Endpoint) url(path string) string {
	base := strings.TrimRight(e.BaseURL, "/")
	if strings.HasSuffix(base, "/v1") && strings.HasPrefix(path, "/v1/") {
		path = strings.TrimPrefix(path, "/v1")
	}
	return base + path
}

// jsonContentType is the Content-Type value of a request (shared: the HTTP
// client does not modify a request's header values).
var jsonContentType = []string{"application/json"}

// errTimeout is the cause of a call ended by the provider's own timeout.
var errTimeout = errors.New("upstream timeout")

// call is one HTTP exchange with the upstream, bounded by the provider's
// timeout: its deadline (see watch) runs until the answer is read
// (non-streamed) or is restarted by every event (streamed, via touch).
type call struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	limit  time.Duration
	resp   *http.Response
	body   io.Closer // resp's own body, when resp.Body was replaced (Forward)

	// The call's place in its watch (w.mu guards them).
	w          *watch
	deadline   time.Time
	watched    bool
	prev, next *call
}

// startCall starts an exchange bounded by e's timeout.
func (e *Endpoint) startCall(ctx context.Context) *call {
	c := e.newCall(ctx)
	c.start()
	return c
}

// newCall is an exchange with its context, its timeout not yet running.
func (e *Endpoint) newCall(ctx context.Context) *call {
	c := &call{limit: e.timeout()}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	return c
}

// start starts c's timeout.
func (c *call) start() {
	c.w = watchFor(c.limit)
	c.w.add(c)
}

// keyHeader is the header that carries an adapter's API key, name set to
// prefix+key; empty when there is no key.
func keyHeader(name, prefix, key string) http.Header {
	h := http.Header{}
	if key != "" {
		h.Set(name, prefix+key)
	}
	return h
}

// send is the exchange of one Turn: body, the adapter's request encoder,
// encodes req, and post sends it to path with the exchange Prepare made
// ready, if any (taken before encoding; discarded if encoding fails).
func (e *Endpoint) send(ctx context.Context, req *gateway.Request, stream bool, body func(*gateway.Request, bool) ([]byte, error), path string, hdr http.Header) (*call, error) {
	ready := readyOf(req)
	b, err := body(req, stream)
	if err != nil {
		ready.Discard()
		return nil, err
	}
	return e.post(ctx, path, b, hdr, ready)
}

// turn is an adapter's Turn: it sends req (send) and reads the answer, a
// whole one decoded into an A and made a Turn by whole, a streamed one
// (onDelta set) by stream.
func turn[A any](ctx context.Context, e *Endpoint, req *gateway.Request, onDelta func(gateway.Delta), body func(*gateway.Request, bool) ([]byte, error), path string, hdr http.Header,
	whole func(*A) (*gateway.Turn, error), stream func(context.Context, *call, func(gateway.Delta)) (*gateway.Turn, error)) (*gateway.Turn, error) {
	call, err := e.send(ctx, req, onDelta != nil, body, path, hdr)
	if err != nil {
		return nil, err
	}
	defer call.close()
	if onDelta == nil {
		var a A
		if err := call.decode(ctx, &a); err != nil {
			return nil, err
		}
		return whole(&a)
	}
	return stream(ctx, call, onDelta)
}

// post sends body to path and returns the exchange with a 2xx answer, or
// the error the adapter returns (an *UpstreamError or ctx's error).
//
// ready, when not nil, is the exchange Prepare made ready for this one
// (readyOf): used when it is for the same endpoint, path and ctx, else
// discarded.
func (e *Endpoint) post(ctx context.Context, path string, body []byte, hdr http.Header, ready *readied) (*call, error) {
	var c *call
	var req *http.Request
	if ready != nil && ready.e == e && ready.path == path && sameContext(ready.parent, ctx) {
		c, req = ready.c, ready.req
		c.start()
		req.ContentLength = int64(len(body))
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	} else {
		ready.Discard()
		c = e.startCall(ctx)
		var err error
		if req, err = e.newRequest(c, path, bytes.NewReader(body), hdr); err != nil {
			c.close()
			return nil, err
		}
	}
	resp, err := e.client().Do(req)
	if err != nil {
		err = c.fail(ctx, err)
		c.close()
		return nil, err
	}
	c.resp = resp
	if resp.StatusCode/100 != 2 {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if rerr != nil && len(b) == 0 {
			err := c.fail(ctx, rerr)
			c.close()
			return nil, err
		}
		c.close()
		return nil, errorFromBody(resp.StatusCode, b)
	}
	return c, nil
}

// newRequest is the HTTP request of call c to path.
func (e *Endpoint) newRequest(c *call, path string, body io.Reader, hdr http.Header) (*http.Request, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, e.url(path), body)
	if err != nil {
		return nil, &gateway.UpstreamError{Status: http.StatusBadGateway, Message: "bad upstream URL: " + err.Error()}
	}
	req.Header["Content-Type"] = jsonContentType
	for k, v := range e.Header {
		req.Header[k] = v
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	return req, nil
}

// readied is an exchange that an adapter's Prepare made ready ahead of
// its Turn: the call with its context but not yet its deadline (which
// starts when the request is sent), the HTTP request without its body.
type readied struct {
	e      *Endpoint
	path   string
	parent context.Context
	c      *call
	req    *http.Request
}

// Discard releases an exchange that is not sent (nil: nothing).
func (r *readied) Discard() {
	if r != nil {
		r.c.cancel(context.Canceled)
	}
}

// ready makes an exchange with path ready for post (nil when the request
// cannot be made: post then fails as it would have).
func (e *Endpoint) ready(ctx context.Context, path string, hdr http.Header) *readied {
	c := e.newCall(ctx)
	req, err := e.newRequest(c, path, nil, hdr)
	if err != nil {
		c.cancel(context.Canceled)
		return nil
	}
	return &readied{e: e, path: path, parent: ctx, c: c, req: req}
}

// sameContext reports whether a and b are the same context (false, not a
// panic, for a context type that cannot be compared).
func sameContext(a, b context.Context) bool {
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t != nil && t.Comparable() && a == b
}

// readyOf takes from req's memo the exchange Prepare made ready, if any.
func readyOf(req *gateway.Request) *readied {
	m := req.Encoded
	if m == nil || m.Next == nil {
		return nil
	}
	r, _ := m.Next.(*readied)
	if r == nil {
		m.Next.Discard()
	}
	m.Next = nil
	return r
}

// touch restarts the timeout (a streamed event arrived).
func (c *call) touch() { c.w.touch(c) }

// close ends the exchange: the deadline removed, the body closed, the
// request's context released.
func (c *call) close() {
	c.w.remove(c)
	switch {
	case c.body != nil:
		c.body.Close()
	case c.resp != nil:
		c.resp.Body.Close()
	}
	c.cancel(context.Canceled)
}

// fail maps an error of the exchange to the adapter's error: the caller's
// ctx error when it ended, 504 when the provider's timeout fired or the
// network timed out, else 502.
func (c *call) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(context.Cause(c.ctx), errTimeout) {
		return &gateway.UpstreamError{Status: http.StatusGatewayTimeout, Type: "timeout",
			Message: fmt.Sprintf("the upstream did not answer within %s", c.limit)}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &gateway.UpstreamError{Status: http.StatusGatewayTimeout, Type: "timeout", Message: "upstream timed out: " + err.Error()}
	}
	return &gateway.UpstreamError{Status: http.StatusBadGateway, Type: "connection_error", Message: "upstream connection failed: " + err.Error()}
}

// unmarshal is encoding/json's Unmarshal with the same semantics — it is
// the v1 API of the encoding/json/v2 module, which is what encoding/json
// itself becomes in Go 1.27 — at about half the cost: it decodes in one
// pass where encoding/json scans the whole value once to validate it and
// again to decode it, and allocates a fifth as much. Every answer and
// streamed event of a step is decoded with it (BenchmarkDecodeAnswer).
func unmarshal(data []byte, v any) error { return jsonv1.Unmarshal(data, v) }

// answerBufs are the buffers non-streamed answers are read into: the
// decoded views copy what they keep (encoding/json copies strings and
// RawMessages), so a buffer is reused once its answer is decoded.
var answerBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledAnswer is the largest buffer put back in answerBufs (a rare
// huge answer's buffer is left to the GC rather than kept).
const maxPooledAnswer = 1 << 20

// decode reads a non-streamed answer, capped, and decodes it into v (with
// unmarshal): the exchange's error (see fail) when the read fails, badAnswer when it does
// not decode.
func (c *call) decode(ctx context.Context, v any) error {
	buf := answerBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledAnswer {
			buf.Reset()
			answerBufs.Put(buf)
		}
	}()
	buf.Reset()
	if n := c.resp.ContentLength; n > 0 && n <= maxAnswer {
		buf.Grow(int(n) + 1) // +1: ReadFrom wants room to see EOF
	}
	if _, err := buf.ReadFrom(io.LimitReader(c.resp.Body, maxAnswer+1)); err != nil {
		return c.fail(ctx, err)
	}
	if buf.Len() > maxAnswer {
		return &gateway.UpstreamError{Status: http.StatusBadGateway, Message: fmt.Sprintf("upstream answer larger than %d bytes", maxAnswer)}
	}
	if err := unmarshal(buf.Bytes(), v); err != nil {
		return badAnswer(err)
	}
	return nil
}

// errorFromBody is an upstream error answer as an *UpstreamError: the
// message and type from OpenAI's {"error":{"message","type"}},
// Anthropic's {"type":"error","error":{"type","message"}} or Gemini's
// {"error":{"code","message","status"}} envelope, else
// the body's text.
func errorFromBody(status int, body []byte) *gateway.UpstreamError {
	ue := &gateway.UpstreamError{Status: status}
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	var detail struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Status  string          `json:"status"` // Gemini's
	}
	if unmarshal(body, &env) == nil && len(env.Error) > 0 {
		if unmarshal(env.Error, &detail) == nil {
			ue.Message, ue.Type = detail.Message, detail.Type
			if ue.Type == "" {
				var code string
				if unmarshal(detail.Code, &code) == nil {
					ue.Type = code
				} else {
					ue.Type = detail.Status
				}
			}
		} else {
			var s string
			if unmarshal(env.Error, &s) == nil {
				ue.Message = s
			}
		}
	}
	if ue.Message == "" {
		ue.Message = strings.TrimSpace(string(body))
		if len(ue.Message) > 1000 {
			ue.Message = ue.Message[:1000] + "…"
		}
		if ue.Message == "" {
			ue.Message = http.StatusText(status)
		}
	}
	return ue
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	name string
	data []byte
}

// sseReader reads events from a streamed answer, restarting the call's
// timeout on each.
type sseReader struct {
	c  *call
	br *bufio.Reader
}

func newSSEReader(c *call) *sseReader {
	return &sseReader{c: c, br: bufio.NewReaderSize(c.resp.Body, 64<<10)}
}

// next returns the next event, io.EOF at the end of the stream, or the
// adapter's error.
func (r *sseReader) next(ctx context.Context) (sseEvent, error) {
	var ev sseEvent
	var data bytes.Buffer
	hasData := false
	for {
		line, err := r.readLine()
		if err != nil {
			if err == io.EOF && hasData {
				ev.data = data.Bytes()
				return ev, nil
			}
			if err == io.EOF {
				return ev, io.EOF
			}
			if ue, ok := gateway.AsUpstreamError(err); ok {
				return ev, ue
			}
			return ev, r.c.fail(ctx, err)
		}
		if len(line) == 0 {
			if hasData {
				r.c.touch()
				ev.data = data.Bytes()
				return ev, nil
			}
			ev.name = ""
			continue
		}
		if line[0] == ':' {
			r.c.touch() // a comment keeps the stream alive (OpenRouter sends ": OPENROUTER PROCESSING")
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.name = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			if data.Len()+len(value) > maxAnswer {
				return ev, &gateway.UpstreamError{Status: http.StatusBadGateway, Message: fmt.Sprintf("upstream event larger than %d bytes", maxAnswer)}
			}
			data.Write(value)
			hasData = true
		}
	}
}

// readLine reads one line without its line ending, capped at maxAnswer.
func (r *sseReader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxAnswer {
			return nil, &gateway.UpstreamError{Status: http.StatusBadGateway, Message: fmt.Sprintf("upstream event line larger than %d bytes", maxAnswer)}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return bytes.TrimRight(line, "\r\n"), nil
			}
			return nil, err
		}
		return bytes.TrimRight(line, "\r\n"), nil
	}
}

// truncated is the error of a stream that ended before its last event.
func truncated(what string) error {
	return &gateway.UpstreamError{Status: http.StatusBadGateway, Type: "stream_error", Message: "the upstream stream ended before " + what}
}

// badAnswer is the error of an answer that does not decode.
func badAnswer(err error) error {
	return &gateway.UpstreamError{Status: http.StatusBadGateway, Type: "bad_response", Message: "the upstream's answer does not decode: " + err.Error()}
}

// imageURL is the image as a URL: its own, or a data: URL of the inline
// bytes.
func imageURL(img *gateway.Image) string {
	if img.URL != "" {
		return img.URL
	}
	return "data:" + img.MediaType + ";base64," + img.Data
}

// schema is a tool's JSON Schema as a map, an empty object schema when it
// has none.
func schema(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("tool parameters are not a JSON object: %w", err)
	}
	return m, nil
}

// nativeChoice is the provider's own tool that req's tool choice names
// (Tool.Native), "" when it names a function or none.
func nativeChoice(req *gateway.Request) string {
	if req.ToolChoice.Mode != gateway.ChoiceTool {
		return ""
	}
	for _, t := range req.Tools {
		if t.Name == req.ToolChoice.Name && t.Native != "" {
			return t.Native
		}
	}
	return ""
}

// errorText is a tool result's content as the model reads it, marked as
// an error for APIs that have no is_error flag.
func errorText(r *gateway.ToolResult) string {
	if r.IsError && !strings.HasPrefix(strings.ToLower(strings.TrimSpace(r.Content)), "error") {
		return "error: " + r.Content
	}
	return r.Content
}
