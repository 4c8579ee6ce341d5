package server

import (
	"errors"
	"math"
	"net/http"

	"github.com/shellgate/shellgate/internal/gateway/messages"
)

// messages serves the Anthropic Messages API (POST /v1/messages and
// /api/v1/messages, with or without ?beta=true): the key is checked here
// so that every failure, a missing key included, is answered in
// Anthropic's error envelope; the body cap (messages.MaxBody, 32 MiB for
// inline images) is the frontend's.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r)
	if err != nil {
		status, msg := http.StatusInternalServerError, "internal error"
		if ae := (*apiError)(nil); errors.As(err, &ae) {
			status, msg = ae.status, ae.msg
		}
		messages.WriteError(w, "", status, "", msg)
		return
	}
	if rec, ok := w.(*recorder); ok {
		rec.principal = p
	}
	messages.Serve(w, r, messages.Options{Models: s.cfg.Models, Sandboxes: s.sandboxesFor(p), Log: s.log})
}

// messagesBodyCap leaves the body cap to the frontend, which answers in
// its own envelope.
const messagesBodyCap = math.MaxInt64
