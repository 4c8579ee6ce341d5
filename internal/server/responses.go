package server

import (
	"errors"
	"net/http"

	"github.com/shellgate/shellgate/internal/gateway/responses"
)

// mountResponses serves the OpenAI Responses API (internal/gateway/responses)
// at POST /v1/responses and POST /api/v1/responses. Every answer, the
// authentication failures and the body cap (responses.MaxBody, 32 MiB)
// included, is in OpenAI's error envelope, so these routes bypass handle.
func (s *Server) mountResponses() {
	f := &responses.Frontend{Models: s.cfg.Models, Log: s.log}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.authenticate(r)
		if err != nil {
			status, msg := http.StatusInternalServerError, "internal error"
			var ae *apiError
			if errors.As(err, &ae) {
				status, msg = ae.status, ae.msg
			}
			responses.WriteError(w, status, msg)
			return
		}
		if rec, ok := w.(*recorder); ok {
			rec.principal = p
		}
		f.Serve(w, r, s.sandboxesFor(p))
	})
	for _, pattern := range []string{"POST /v1/responses", "POST /api/v1/responses"} {
		s.routes = append(s.routes, pattern)
		s.mux.Handle(pattern, h)
	}
}
