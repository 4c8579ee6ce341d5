package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/chat"
)

// The Chat Completions pass-through (POST /v1/chat/completions, also under
// /api/v1) and the model list (GET /v1/models). Both answer errors in
// OpenAI's envelope, {"error":{"message","type","param","code"}}, since
// their clients are OpenAI SDKs; under /api/v1 the code is the HTTP
// status, a number, as OpenRouter's envelope has it (chatErrors).
//
// The pass-through forwards the body to the provider of its model as it
// is, with only "model" rewritten to the provider's own name (the
// "provider/" prefix removed), and copies the provider's status, headers
// of interest and body back — a stream event by event, flushed as each
// arrives. That is for models of chat_completions providers; a model of a
// responses or messages provider is translated instead (package
// internal/gateway/chat: the body read into the gateway's conversation
// model, sent through the provider's adapter, the turn written back as a
// chat.completion or its chunk stream). A request whose tools include a Shellgate server tool (shell,
// bash, code execution) is a 400 naming the Responses and Messages APIs,
// which run them; Chat Completions has no server tools.

// maxChatBody caps a Chat Completions body (images inline as data: URLs).
const maxChatBody = 32 << 20

// copyBufs are the pass-through's copy buffers. A fresh 32 KiB buffer
// per call (allocated large, zeroed, collected) was a third of the
// handler's CPU at saturation; pooled, Shellgate's own CPU per call fell
// by a quarter (BENCHMARKS.md, "Chat Completions pass-through"; the
// before/after run is in that file's history at aa5f522).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// chatForwarder is what a chat_completions upstream adapter offers the
// pass-through (upstream.Chat): the body sent as is, the answer returned
// whatever its status.
type chatForwarder interface {
	Forward(ctx context.Context, body []byte) (*http.Response, error)
}

// serverToolTypes are the tool types Chat Completions refuses.
var serverToolTypes = map[string]bool{
	"shell": true, "local_shell": true,
	"shellgate:shell": true, "openrouter:shell": true,
	"shellgate:bash": true, "openrouter:bash": true,
}

func isServerTool(typ string) bool {
	return serverToolTypes[typ] || strings.HasPrefix(typ, "code_execution")
}

// chatErrors is how a route at path writes errors: under /api/v1 with the
// HTTP status as error.code, a number, as OpenRouter's envelope has it
// (@openrouter/sdk's error classes require one); on /v1 as OpenAI does.
func chatErrors(path string) chat.Errors {
	return chat.Errors{StatusCodes: strings.HasPrefix(path, "/api/")}
}

// chatError writes an error in OpenAI's envelope, as errs does.
func chatError(w http.ResponseWriter, errs chat.Errors, status int, param, code, format string, a ...any) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="shellgate"`)
	}
	errs.Write(w, status, param, code, fmt.Sprintf(format, a...))
}

// openAIRoute registers an OpenAI-shaped route: body cap, key check, the
// workspace's limits, and errors in OpenAI's envelope (chatErrors).
func (s *Server) openAIRoute(pattern string, maxBody int64, h func(w http.ResponseWriter, r *http.Request, p Principal)) {
	_, path, _ := strings.Cut(pattern, " ")
	errs := chatErrors(path)
	ew := gatewayEnvelope(func(w http.ResponseWriter, status int, msg string) { chatError(w, errs, status, "", "", "%s", msg) })
	s.handleWith(ew, pattern, maxBody, true, func(w http.ResponseWriter, r *http.Request, p Principal) error {
		h(w, r, p)
		return nil
	})
}

// tracedChat is loggedChat with its trace broadcast (trace.go).
func (s *Server) tracedChat(pattern string) func(w http.ResponseWriter, r *http.Request, p Principal) {
	h := s.traced("chat_completions", pattern, func(w http.ResponseWriter, r *http.Request, p Principal) error {
		s.loggedChat(w, r, p)
		return nil
	})
	return func(w http.ResponseWriter, r *http.Request, p Principal) { h(w, r, p) }
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request, _ Principal) {
	data := []map[string]any{}
	if s.cfg.Models != nil {
		for _, id := range s.cfg.Models.List() {
			owner, _, _ := strings.Cut(id, "/")
			if m, err := s.cfg.Models.Resolve(id); err == nil {
				owner = m.Provider // an alias's is its target's
			}
			data = append(data, map[string]any{"id": id, "object": "model", "created": 0, "owned_by": owner})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// loggedChat is chatCompletions with its request log: the answer is
// copied (up to four times the workspace's record cap) for the record.
func (s *Server) loggedChat(w http.ResponseWriter, r *http.Request, p Principal) {
	s.logged(w, r, p, "chat_completions", func(w http.ResponseWriter, r *http.Request, rl *reqLog) {
		if rl != nil {
			rl.chatOut = &teeWriter{ResponseWriter: w, max: 4 * rl.settings.MaxRecordBytes}
			w = rl.chatOut
		}
		s.chatCompletions(w, r, p)
	})
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, p Principal) {
	errs := chatErrors(r.URL.Path)
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			chatError(w, errs, http.StatusRequestEntityTooLarge, "", "", "the request body is larger than %d bytes", maxChatBody)
			return
		}
		chatError(w, errs, http.StatusBadRequest, "", "", "reading the request body: %v", err)
		return
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil || body == nil {
		chatError(w, errs, http.StatusBadRequest, "", "", "We could not parse the JSON body of your request: it must be a JSON object.")
		return
	}
	var model string
	if err := json.Unmarshal(body["model"], &model); err != nil || model == "" {
		chatError(w, errs, http.StatusBadRequest, "model", "", "you must provide a model parameter (a string, provider/model)")
		return
	}
	if rl := reqLogFrom(r.Context()); rl != nil {
		rl.chatBody, rl.model = raw, model
	}
	noteModel(r.Context(), model)
	if t, ok := body["tools"]; ok {
		var tools []struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(t, &tools); err != nil {
			chatError(w, errs, http.StatusBadRequest, "tools", "", "Invalid type for 'tools': expected an array of tool objects.")
			return
		}
		for i, tool := range tools {
			if isServerTool(tool.Type) {
				chatError(w, errs, http.StatusBadRequest, fmt.Sprintf("tools[%d].type", i), "unsupported_tool",
					"tools[%d]: %q is a server tool that Shellgate runs in a sandbox; Chat Completions is a plain pass-through without server tools. "+
						"Use the Responses API (POST /v1/responses) or the Messages API (POST /v1/messages) for shell, bash and code execution.", i, tool.Type)
				return
			}
		}
	}
	if s.cfg.Models == nil {
		chatError(w, errs, http.StatusNotFound, "model", "model_not_found", "model %q: no model providers are configured (shellgate serve --config FILE)", model)
		return
	}
	m, err := s.cfg.Models.Resolve(model)
	if err != nil {
		var re *gateway.RequestError
		if errors.As(err, &re) {
			status := re.Status
			if status == 0 {
				status = http.StatusBadRequest
			}
			code := ""
			if status == http.StatusNotFound {
				code = "model_not_found"
			}
			chatError(w, errs, status, re.Param, code, "%s", re.Message)
			return
		}
		s.log.ErrorContext(r.Context(), "resolving a model failed", "model", model, "err", err)
		chatError(w, errs, http.StatusInternalServerError, "", "", "internal error")
		return
	}
	redacted, err := s.screenChat(r.Context(), w, p, body)
	if re := (*gateway.RequestError)(nil); errors.As(err, &re) {
		chatError(w, errs, re.Status, "", "prompt_injection_blocked", "%s", re.Message)
		return
	}
	if err != nil {
		s.log.ErrorContext(r.Context(), "reading the workspace's guardrails failed", "err", err)
		chatError(w, errs, http.StatusInternalServerError, "", "", "internal error")
		return
	}
	fwd, ok := m.Upstream.(chatForwarder)
	if m.API != gateway.APIChat || !ok {
		// Another API upstream: translated through its adapter, with the
		// guardrails' redactions.
		if redacted {
			if raw, err = json.Marshal(body); err != nil {
				chatError(w, errs, http.StatusBadRequest, "", "", "re-encoding the request: %v", err)
				return
			}
		}
		noteCall(r.Context(), m, chat.Serve(r.Context(), w, raw, model, m, errs))
		return
	}
	name, _ := json.Marshal(m.Name)
	body["model"] = name
	out, err := json.Marshal(body)
	if err != nil {
		chatError(w, errs, http.StatusBadRequest, "", "", "re-encoding the request: %v", err)
		return
	}
	// The call, for the trace: from the request to the end of the copied
	// answer; the pass-through does not read the answer, so the span has
	// the status but no token counts.
	call := gateway.UpstreamCall{Start: time.Now()}
	defer func() {
		call.End = time.Now()
		noteCall(r.Context(), m, call)
	}()
	resp, err := fwd.Forward(r.Context(), out)
	call.Err = err
	if err != nil {
		if ue, ok := gateway.AsUpstreamError(err); ok {
			chatError(w, errs, ue.Status, "", ue.Type, "%s", ue.Message)
			return
		}
		if r.Context().Err() != nil {
			return // the client went away
		}
		s.log.ErrorContext(r.Context(), "chat pass-through failed", "model", model, "err", err)
		chatError(w, errs, http.StatusBadGateway, "", "", "upstream call failed")
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		call.Err = &gateway.UpstreamError{Status: resp.StatusCode, Message: http.StatusText(resp.StatusCode)}
	}
	for _, h := range []string{"Content-Type", "Cache-Control", "X-Request-Id", "Openai-Processing-Ms", "Retry-After"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	// A stream is flushed after every read (each event as it arrives); a
	// JSON answer is copied whole.
	var flusher http.Flusher
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		flusher, _ = w.(http.Flusher)
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			// The head is sent: the stream can only end early. A streamed
			// answer gets an error event the SDKs surface.
			if ue, ok := gateway.AsUpstreamError(err); ok && flusher != nil {
				b, _ := json.Marshal(errs.Event(ue.Status, ue.Type, ue.Message))
				fmt.Fprintf(w, "data: %s\n\n", b)
				flusher.Flush()
			}
			return
		}
	}
}
