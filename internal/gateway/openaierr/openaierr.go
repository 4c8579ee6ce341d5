// Package openaierr is OpenAI's error envelope, the one the Responses and
// Chat Completions frontends and the server's other OpenAI-shaped routes
// answer in (wire-formats §2.6):
//
//	{"error":{"message":"...","type":"invalid_request_error","param":"model","code":null}}
//
// param and code are null when there is nothing to say. Each caller picks
// the type and code its API sets for a status; Write is the one writer.
package openaierr

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
)

// Error is an answer in OpenAI's error envelope; an empty Param or Code is
// written as null.
type Error struct {
	Status  int
	Type    string
	Message string
	Param   string
	Code    string
	// StatusCode writes the HTTP status as the code, a number, instead of
	// Code: OpenRouter's envelope on /api/v1, whose SDK parses error.code
	// as an integer.
	StatusCode bool
}

func (e *Error) Error() string { return e.Message }

// statusDetail is Detail with the HTTP status as its code (Error.StatusCode).
type statusDetail struct {
	Detail
	Code int `json:"code"`
}

// Body is the envelope on the wire.
type Body struct {
	Error Detail `json:"error"`
}

// Detail is the envelope's error object.
type Detail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// TypeFor is the error type OpenAI's Chat Completions and file routes set
// for a status.
func TypeFor(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// Write answers with e: a 401 with WWW-Authenticate, the body with its
// length set (so the client has the whole answer at once) and flushed.
func Write(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="shellgate"`)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	d := Detail{Message: e.Message, Type: e.Type, Param: nullable(e.Param), Code: nullable(e.Code)}
	if e.StatusCode {
		// The outer code hides Detail's (encoding/json: the shallower wins).
		enc.Encode(struct {
			Error statusDetail `json:"error"`
		}{statusDetail{d, e.Status}}) // strings and ints always encode
	} else {
		enc.Encode(Body{Error: d}) // strings always encode
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(e.Status)
	w.Write(buf.Bytes())
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
