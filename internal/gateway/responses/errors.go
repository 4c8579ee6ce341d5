package responses

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/openaierr"
)

// apiError is an answer in OpenAI's error envelope.
type apiError = openaierr.Error

// invalid is a 400 invalid_request_error about param.
func invalid(param, format string, a ...any) error {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, a...)}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// WriteError answers with an error in OpenAI's envelope. The server uses
// it for what fails before the frontend runs (authentication).
func WriteError(w http.ResponseWriter, status int, message string) {
	openaierr.Write(w, &apiError{Status: status, Type: typeFor(status), Message: message, Code: codeFor(status)})
}

// WriteStatusCodeError is WriteError on OpenRouter's /api/v1, where
// error.code is the HTTP status (Frontend.StatusCodes).
func WriteStatusCodeError(w http.ResponseWriter, status int, message string) {
	openaierr.Write(w, &apiError{Status: status, Type: typeFor(status), Message: message, StatusCode: true})
}

// writeError answers with e, its code the status where f.StatusCodes.
func (f *Frontend) writeError(w http.ResponseWriter, e *apiError) {
	if f.StatusCodes {
		c := *e
		c.StatusCode = true
		e = &c
	}
	openaierr.Write(w, e)
}

// typeFor is the error type OpenAI's Responses API sets for a status
// (not openaierr.TypeFor: a 401 is invalid_request_error, a 429 "requests").
func typeFor(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func codeFor(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "invalid_api_key"
	case http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	}
	return ""
}

// toAPIError maps what the loop or the sandboxes returned to the envelope:
// a *gateway.RequestError keeps its status and param, an
// *gateway.UpstreamError its status, type and message. Anything else is
// the server's fault (500, the text not shown) — the caller logs it.
func toAPIError(err error) (*apiError, bool) {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae, true
	}
	var re *gateway.RequestError
	if errors.As(err, &re) {
		st := re.HTTPStatus()
		code := re.Code
		if code == "" {
			code = codeFor(st)
		}
		return &apiError{Status: st, Type: typeFor(st), Message: re.Message, Param: re.Param, Code: code}, true
	}
	if ue, ok := gateway.AsUpstreamError(err); ok {
		st := ue.HTTPStatus()
		typ := ue.Type
		if typ == "" {
			typ = typeFor(st)
		}
		return &apiError{Status: st, Type: typ, Message: ue.Message, Code: codeFor(st)}, true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &apiError{Status: http.StatusGatewayTimeout, Type: "server_error", Message: "The request timed out."}, true
	}
	return &apiError{Status: http.StatusInternalServerError, Type: "server_error",
		Message: "The server had an error while processing your request."}, false
}
