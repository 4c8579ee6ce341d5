package server

import (
	"errors"
	"net/http"

	"github.com/shellgate/shellgate/internal/gateway/responses"
)

// mountResponses serves the OpenAI Responses API (internal/gateway/responses)
// at POST /v1/responses and POST /api/v1/responses. Every answer, the key
// check, the workspace's limits and the body cap (responses.MaxBody,
// 32 MiB) included, is in OpenAI's error envelope.
func (s *Server) mountResponses() {
	// Programs (programmatic tool calling) run on the eval's runner, their
	// fingerprints bound to the caller's workspace and to the program
	// tool's purpose, so an eval's continuation never resumes a program.
	f := &responses.Frontend{Models: s.cfg.Models, Log: s.log, Programs: s.cfg.EvalRunner}
	for _, route := range []struct {
		pattern     string
		statusCodes bool // OpenRouter's envelope: error.code is the status
		ew          errWriter
	}{
		{"POST /v1/responses", false, gatewayEnvelope(responses.WriteError)},
		{"POST /api/v1/responses", true, gatewayEnvelope(responses.WriteStatusCodeError)},
	} {
		pattern := route.pattern
		s.handleWith(route.ew, pattern, responses.MaxBody, true, s.traced("responses", pattern, func(w http.ResponseWriter, r *http.Request, p Principal) error {
			s.logged(w, r, p, "responses", func(w http.ResponseWriter, r *http.Request, rl *reqLog) {
				f := *f
				f.StatusCodes = route.statusCodes
				f.Models = rl.models(f.Models)
				f.Screen = rl.screen(s.gatewayScreen(w, p, "responses"))
				f.ProgramScope = evalScope(p)
				f.Serve(w, r, s.gatewayFor(w, r, p, rl))
			})
			return nil
		}))
	}
}

// gatewayEnvelope adapts a gateway frontend's error writer (its API's
// envelope) to the routes' errWriter.
func gatewayEnvelope(write func(w http.ResponseWriter, status int, msg string)) errWriter {
	return func(w http.ResponseWriter, err error) {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = errorf(http.StatusInternalServerError, "internal error")
		}
		errorHeaders(w, ae)
		write(w, ae.status, ae.msg)
	}
}
