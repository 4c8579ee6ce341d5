package server

import (
	"net/http"

	"github.com/shellgate/shellgate/internal/gateway/gemini"
)

// mountGemini serves the Gemini API dialect: POST
// /v1beta/models/{provider/model}:generateContent and
// :streamGenerateContent (also under /api/v1beta). The key may come as
// x-goog-api-key or ?key= (Google's conventions) besides the usual
// headers; every failure is answered in Google's error envelope.
func (s *Server) mountGemini() {
	ew := gatewayEnvelope(func(w http.ResponseWriter, status int, msg string) {
		gemini.WriteError(w, status, msg)
	})
	for _, pattern := range []string{"POST /v1beta/models/{rest...}", "POST /api/v1beta/models/{rest...}"} {
		s.handleWith(ew, pattern, gemini.MaxBody, true, s.traced("gemini", pattern, func(w http.ResponseWriter, r *http.Request, p Principal) error {
			s.logged(w, r, p, "gemini", func(w http.ResponseWriter, r *http.Request, rl *reqLog) {
				gemini.Serve(w, r, r.PathValue("rest"), gemini.Options{Models: rl.models(s.cfg.Models), Sandboxes: s.gatewayFor(w, r, p, rl), Log: s.log,
					Screen: rl.screen(s.gatewayScreen(w, p, "gemini"))})
			})
			return nil
		}))
	}
}
