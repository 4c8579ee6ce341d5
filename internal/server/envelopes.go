package server

import (
	"errors"
	"net/http"

	"github.com/shellgate/shellgate/internal/gateway/messages"
)

// shape is the wire format a route answers in: its error envelope, and for
// the file routes its objects. /api/v1 speaks OpenRouter's; /v1 speaks
// OpenAI's, or Anthropic's where the request says it is Anthropic's client.
type shape int

const (
	shapeOpenRouter shape = iota
	shapeOpenAI
	shapeAnthropic
)

// writeErrorAs answers err in the envelope of sh, with the same statuses
// and messages as writeError.
func writeErrorAs(w http.ResponseWriter, sh shape, err error) {
	if sh == shapeOpenRouter {
		writeError(w, err)
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = errorf(http.StatusInternalServerError, "internal error")
	}
	if ae.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="shellgate"`)
	}
	if sh == shapeAnthropic {
		messages.WriteError(w, "", ae.status, "", ae.msg)
		return
	}
	writeOpenAIError(w, err)
}

// openAIErrorCode is the code OpenAI sets for a status ("" for none).
func openAIErrorCode(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "invalid_api_key"
	case http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusRequestEntityTooLarge:
		return "file_too_large"
	}
	return ""
}

// shapeFunc picks the shape of a request.
type shapeFunc func(*http.Request) shape

func fixed(sh shape) shapeFunc { return func(*http.Request) shape { return sh } }

// filesShape is the shape of /v1/files: Anthropic's when the request
// carries anthropic-version (every Anthropic SDK sends it), else OpenAI's.
func filesShape(r *http.Request) shape {
	if r.Header.Get("anthropic-version") != "" {
		return shapeAnthropic
	}
	return shapeOpenAI
}

// handleAs registers an authenticated API route whose errors, the key
// check's and the limits' included, are written in the envelope the
// request's shape calls for; h gets that shape.
func (s *Server) handleAs(pattern string, maxBody int64, pick shapeFunc, h func(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error) {
	s.handleShaped(pattern, maxBody, true, pick, h)
}

// handleUploadAs is handleAs for an upload: its body streams to its
// destination, so it does not count against the workspace's bound on
// bodies in flight (the upload cap bounds it).
func (s *Server) handleUploadAs(pattern string, maxBody int64, pick shapeFunc, h func(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error) {
	s.handleShaped(pattern, maxBody, false, pick, h)
}

func (s *Server) handleShaped(pattern string, maxBody int64, held bool, pick shapeFunc, h func(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error) {
	s.handleBody(func(r *http.Request) errWriter {
		sh := pick(r)
		return func(w http.ResponseWriter, err error) { writeErrorAs(w, sh, err) }
	}, pattern, maxBody, true, held, func(w http.ResponseWriter, r *http.Request, p Principal) error {
		return h(w, r, p, pick(r))
	})
}
