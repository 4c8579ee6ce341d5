package server

import (
	"net/http"

	"github.com/shellgate/shellgate/internal/gateway/gemini"
)

// mountGemini serves the Gemini API dialect: POST
// /v1beta/models/{model}:generateContent and :streamGenerateContent (also
// under /api/v1beta), the model an alias or provider/model. A model id
// with a '/' comes also without "models/" (/v1beta/{provider}/{model}:…),
// as @ai-sdk/google sends it. The key may come as x-goog-api-key or ?key=
// (Google's conventions) besides the usual headers; every failure, and
// every path under /v1beta no route serves, is answered in Google's error
// envelope.
func (s *Server) mountGemini() {
	write := func(w http.ResponseWriter, status int, msg string) { gemini.WriteError(w, status, msg) }
	ew := gatewayEnvelope(write)
	for _, prefix := range []string{"/v1beta/", "/api/v1beta/"} {
		pattern := "POST " + prefix + "{rest...}"
		s.handleWith(ew, pattern, gemini.MaxBody, true, s.traced("gemini", pattern, func(w http.ResponseWriter, r *http.Request, p Principal) error {
			s.logged(w, r, p, "gemini", func(w http.ResponseWriter, r *http.Request, rl *reqLog) {
				gemini.Serve(w, r, r.PathValue("rest"), gemini.Options{Models: rl.models(s.cfg.Models), Sandboxes: s.gatewayFor(w, r, p, rl), Log: s.log,
					Screen: rl.screen(s.gatewayScreen(w, p, "gemini"))})
			})
			return nil
		}))
		s.routeWith(ew, prefix, maxEmptyBody, s.noRoute(ew, prefix))
	}
}
