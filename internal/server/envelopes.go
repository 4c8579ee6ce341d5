package server

import (
	"errors"
	"math"
	"net/http"
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

// openAIError is OpenAI's error envelope (wire-formats §2.6).
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// anthropicError is Anthropic's error envelope (wire-formats §3.7).
type anthropicError struct {
	Type  string `json:"type"` // "error"
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

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
		var body anthropicError
		body.Type = "error"
		body.Error.Type = anthropicErrorType(ae.status)
		body.Error.Message = ae.msg
		writeJSON(w, ae.status, body)
		return
	}
	var body openAIError
	body.Error.Message = ae.msg
	body.Error.Type = openAIErrorType(ae.status)
	if c := openAIErrorCode(ae.status); c != "" {
		body.Error.Code = &c
	}
	writeJSON(w, ae.status, body)
}

func openAIErrorType(status int) string {
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

func openAIErrorCode(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "invalid_api_key"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusRequestEntityTooLarge:
		return "file_too_large"
	}
	return ""
}

func anthropicErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		return "overloaded_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
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
// check's included, are written in the envelope the request's shape
// calls for; h gets that shape.
func (s *Server) handleAs(pattern string, maxBody int64, pick shapeFunc, h func(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error) {
	// The body cap is applied here rather than by route, so that an
	// oversized body is refused in the right envelope too.
	s.route(pattern, math.MaxInt64, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sh := pick(r)
		if r.ContentLength > maxBody {
			writeErrorAs(w, sh, errorf(http.StatusRequestEntityTooLarge, "request body of %d bytes is larger than this route's %d", r.ContentLength, maxBody))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		p, err := s.authenticate(r)
		if err != nil {
			writeErrorAs(w, sh, err)
			return
		}
		if rec, ok := w.(*recorder); ok {
			rec.principal = p
		}
		if err := h(w, r, p, sh); err != nil {
			if ae := (*apiError)(nil); !errors.As(err, &ae) {
				s.log.ErrorContext(r.Context(), "request failed", "route", pattern, "err", err)
			}
			writeErrorAs(w, sh, err)
		}
	}))
}
