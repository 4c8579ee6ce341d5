package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Upstream is one model provider's API. Turn sends req and returns the
// model's answer; when onDelta is not nil the adapter streams from the
// upstream and calls onDelta (from Turn's goroutine) as parts arrive, and
// the returned Turn is the same one the deltas add up to.
//
// Errors: an answer of the upstream that is an error is an *UpstreamError
// with its status and message; a connection failure is an *UpstreamError
// with Status 502, a timeout (the adapter's own bound, not ctx) Status 504.
// When ctx ends, Turn returns ctx's error promptly and the upstream request
// is cancelled.
type Upstream interface {
	Turn(ctx context.Context, req *Request, onDelta func(Delta)) (*Turn, error)
}

// Preparer is an Upstream that can do part of a turn's work ahead of it.
// While the tools of the model's last turn run, Execute calls Prepare on
// another goroutine with the run's ctx, the conversation up to that turn
// and whether the run streams, and waits for it to return before the
// next Turn, on that conversation plus the tools' results. Prepare may
// change nothing of req but the memo req.Encoded; what it does there is
// what the next Turn need not do (the adapters translate and encode the
// model's turn and make their HTTP request ready, so that the Turn after
// the tools encodes only their results, and the request goes out that
// much sooner after the last command ends).
type Preparer interface {
	Prepare(ctx context.Context, req *Request, stream bool)
}

// UpstreamError is an upstream failure as the client will see it: the
// client API's frontend writes it in its own error envelope with Status.
type UpstreamError struct {
	Status  int    // HTTP status for the client (the upstream's own, or 502/504)
	Type    string // the upstream's error type when it said one ("rate_limit_error", ...)
	Message string
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("upstream %d %s: %s", e.Status, e.Type, e.Message)
}

// HTTPStatus is the status a frontend answers e with: Status when it is
// an error status (4xx, 5xx), else 502.
func (e *UpstreamError) HTTPStatus() int {
	if e.Status < 400 || e.Status > 599 {
		return http.StatusBadGateway
	}
	return e.Status
}

// AsUpstreamError returns err's *UpstreamError, if it has one.
func AsUpstreamError(err error) (*UpstreamError, bool) {
	var ue *UpstreamError
	ok := errors.As(err, &ue)
	return ue, ok
}

// RequestError is a client request the gateway refuses (HTTP 400 unless
// Status says otherwise); frontends write it in their envelope. Param names
// the offending field when known.
type RequestError struct {
	Status  int
	Param   string
	Message string
	// Code, when set, is the machine-readable reason in the envelopes
	// that have one (OpenAI's error.code: "quota_exceeded").
	Code string
}

func (e *RequestError) Error() string { return e.Message }

// HTTPStatus is the status a frontend answers e with: Status, or 400.
func (e *RequestError) HTTPStatus() int {
	if e.Status == 0 {
		return http.StatusBadRequest
	}
	return e.Status
}

// Describe is how a frontend whose error envelope has no field for the
// parameter (Gemini's, Anthropic's) answers err: the HTTP status
// (HTTPStatus) and message of a *RequestError, its Param leading the
// message unless the message names it, or of an *UpstreamError, with its
// type (utype); 504 for a deadline; anything else is the server's fault,
// 500 "internal error".
func Describe(err error) (status int, msg, utype string) {
	var re *RequestError
	if errors.As(err, &re) {
		msg := re.Message
		if re.Param != "" && !strings.Contains(msg, re.Param) {
			msg = re.Param + ": " + msg
		}
		return re.HTTPStatus(), msg, ""
	}
	if ue, ok := AsUpstreamError(err); ok {
		return ue.HTTPStatus(), "upstream model: " + ue.Message, ue.Type
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout, "the request took too long", ""
	}
	return http.StatusInternalServerError, "internal error", ""
}

// BadRequest is a *RequestError with status 400.
func BadRequest(param, format string, a ...any) error {
	return &RequestError{Status: http.StatusBadRequest, Param: param, Message: fmt.Sprintf(format, a...)}
}

// Model is a resolved model name: the upstream to call and the model name
// it knows.
type Model struct {
	Provider string // the prefix before '/'
	Name     string // the rest, sent to the upstream
	API      string // the provider's API flavour (APIChat, APIResponses, APIMessages)
	Upstream Upstream
	// Native are the hosted tools the provider runs itself (NativeShell,
	// NativeCodeInterpreter, NativeCodeExecution): a server tool the
	// client left on engine auto uses the provider's one (native.go).
	Native []string
	// VendorSandbox runs the provider's own tool types (shell,
	// code_interpreter, code_execution_*) in Shellgate's sandbox even
	// when Native lists them.
	VendorSandbox bool
}

// Upstream API flavours, as written in the provider config.
const (
	APIChat      = "chat_completions"
	APIResponses = "responses"
	APIMessages  = "messages"
	APIGemini    = "gemini"
)

// Models resolves "provider/model" names. internal/gateway/upstream
// implements it from the provider config.
type Models interface {
	// Resolve returns the model for name, or a *RequestError (404 for an
	// unknown provider, 400 for a name without '/').
	Resolve(name string) (Model, error)
	// List returns the configured model names for GET /v1/models (those
	// the config lists; a provider without a list shows none).
	List() []string
}
