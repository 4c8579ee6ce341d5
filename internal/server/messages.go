package server

import (
	"net/http"

	"github.com/shellgate/shellgate/internal/gateway/messages"
)

// mountMessages serves the Anthropic Messages API (POST /v1/messages and
// /api/v1/messages, with or without ?beta=true). Every failure, a missing
// key, the workspace's limits and the body cap (messages.MaxBody, 32 MiB
// for inline images) included, is answered in Anthropic's error envelope.
func (s *Server) mountMessages() {
	ew := gatewayEnvelope(func(w http.ResponseWriter, status int, msg string) {
		messages.WriteError(w, "", status, "", msg)
	})
	for _, pattern := range []string{"POST /v1/messages", "POST /api/v1/messages"} {
		s.handleWith(ew, pattern, messages.MaxBody, true, s.traced("messages", pattern, func(w http.ResponseWriter, r *http.Request, p Principal) error {
			s.logged(w, r, p, "messages", func(w http.ResponseWriter, r *http.Request, rl *reqLog) {
				messages.Serve(w, r, messages.Options{Models: rl.models(s.cfg.Models), Sandboxes: s.gatewayFor(w, r, p, rl), Log: s.log,
					Screen: rl.screen(s.gatewayScreen(w, p, "messages"))})
			})
			return nil
		}))
	}
}
