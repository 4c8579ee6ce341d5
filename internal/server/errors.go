package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/openaierr"
)

// apiError is an error the handler answers with: an HTTP status and a
// message for the caller.
type apiError struct {
	status int
	msg    string
	// param and code fill OpenAI's envelope (the request field at fault;
	// a machine-readable reason); the other envelopes ignore them.
	param, code string
	// retryAfter, when positive, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *apiError) Error() string { return e.msg }

func errorf(status int, format string, a ...any) *apiError {
	return &apiError{status: status, msg: fmt.Sprintf(format, a...)}
}

// errorBody is the OpenRouter error envelope (wire-formats §1.4):
// {"error":{"code":404,"message":"..."}}; code is the HTTP status.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code     int            `json:"code"`
	Message  string         `json:"message"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// writeError answers with err's status and message; an error that is not
// an *apiError is the server's fault (500) and its text is not shown.
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = errorf(http.StatusInternalServerError, "internal error")
	}
	var meta map[string]any
	if me := (*metaError)(nil); errors.As(err, &me) {
		meta = me.meta
	}
	errorHeaders(w, ae)
	writeJSON(w, ae.status, errorBody{Error: errorDetail{Code: ae.status, Message: ae.msg, Metadata: meta}})
}

func errorHeaders(w http.ResponseWriter, ae *apiError) {
	if ae.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="shellgate"`)
	}
	if ae.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(ae.retryAfter))
	}
}

// writeOpenAIError answers with err in OpenAI's envelope; the type follows
// the status as OpenAI's API sets it.
func writeOpenAIError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = errorf(http.StatusInternalServerError, "internal error")
	}
	code := ae.code
	if code == "" {
		code = openAIErrorCode(ae.status)
	}
	errorHeaders(w, ae)
	openaierr.Write(w, &openaierr.Error{Status: ae.status, Type: openaierr.TypeFor(ae.status), Message: ae.msg, Param: ae.param, Code: code})
}

// writeJSON answers with v. The length is set, so the client has the whole
// answer at once even while the handler goes on (the exec call's ledger
// write comes after its answer).
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":500,"message":"encoding the answer failed"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	w.Write(buf.Bytes())
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// decodeJSON decodes one JSON object from the body into v as it is read
// (the body is never held twice: no copy of it is made before decoding).
// Unknown fields, trailing data, wrong types and bodies over the route's
// cap are the caller's errors, each said plainly. An empty body decodes
// as {} when emptyOK.
func decodeJSON(r *http.Request, v any, emptyOK bool) error {
	body := &bodyReader{r: r.Body}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errDataAfter
	}
	if body.err != nil {
		if ae := bodyLimitError(body.err); ae != nil {
			return ae
		}
		return errorf(http.StatusBadRequest, "reading the request body: %v", body.err)
	}
	if err == io.EOF {
		if emptyOK {
			return nil
		}
		return errorf(http.StatusBadRequest, "request body is empty: send a JSON object")
	}
	if err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case err == errDataAfter:
			return errorf(http.StatusBadRequest, "malformed JSON: data after the object")
		case errors.As(err, &se):
			return errorf(http.StatusBadRequest, "malformed JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			if te.Field == "" {
				return errorf(http.StatusBadRequest, "request body must be a JSON object, not a JSON %s", te.Value)
			}
			return errorf(http.StatusBadRequest, "field %q: want %s, got JSON %s", te.Field, gateway.JSONKind(te.Type.Kind().String()), te.Value)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return errorf(http.StatusBadRequest, "malformed JSON: the body ends early")
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return errorf(http.StatusBadRequest, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return errorf(http.StatusBadRequest, "malformed JSON: %v", err)
	}
	return nil
}

var errDataAfter = errors.New("data after the object")

// bodyReader keeps the first error reading a request body other than its
// end, so that a decoder's failure can be told from the body's (its cap,
// a connection cut).
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}
