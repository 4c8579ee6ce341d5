package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/guard"
	"github.com/shellgate/shellgate/internal/store"
)

// Guardrails (SPEC §6): each workspace sets its prompt-injection
// guardrails with GET/PUT /api/v1/guardrails; every gateway request
// (Responses, Messages, Gemini, Chat Completions) of the workspace is screened
// before its container is opened and its model called.
//
// What is inspected: the text of every user message of the incoming
// request (the history the client sends included). Not inspected: system
// and developer prompts (the application's own, trusted text), assistant
// turns, images, files, and tool results — neither those the client sends
// back nor those of server tools run later in the request.
//
// With detections, the strictest action of the guardrails that apply
// wins: block answers 403 in the API's envelope and nothing runs; redact
// replaces each match of a redacting (or blocking) guardrail with
// [PROMPT_INJECTION] in the text forwarded; flag forwards the request
// unchanged. Every detection is stored with the request's id (sent back
// in the Shellgate-Request-Id header) and counted in /metrics.

// guardrailsBody is GET/PUT /api/v1/guardrails.
type guardrailsBody struct {
	Guardrails []guard.Guardrail `json:"guardrails"`
	Detector   string            `json:"detector,omitempty"` // guard.Version, on answers
}

func (s *Server) guardrailRoutes() {
	s.handle("GET /api/v1/guardrails", maxEmptyBody, true, s.getGuardrails)
	s.handle("PUT /api/v1/guardrails", maxCreateBody, true, s.putGuardrails)
}

// settingsTTL is how long a workspace's guardrails and log settings are
// remembered: a PUT takes effect at once on the server that took it, and
// within this on other servers sharing the database.
const settingsTTL = 5 * time.Second

// settingsCache remembers one kind of per-workspace setting for
// settingsTTL, so that a gateway request does not read the database for it.
type settingsCache[T any] struct {
	mu sync.Mutex
	m  map[Principal]cachedSetting[T]
}

type cachedSetting[T any] struct {
	v     T
	until time.Time
}

// get returns p's remembered value, or load's (then remembered).
func (c *settingsCache[T]) get(p Principal, load func() (T, error)) (T, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[p]
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		return e.v, nil
	}
	v, err := load()
	if err != nil {
		return v, err
	}
	c.put(p, v, now)
	return v, nil
}

// put remembers v as p's value as of now (a PUT's value at once).
func (c *settingsCache[T]) put(p Principal, v T, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > 10000 {
		c.m = map[Principal]cachedSetting[T]{}
	}
	c.m[p] = cachedSetting[T]{v: v, until: now.Add(settingsTTL)}
}

func (s *Server) guardrailsOf(ctx context.Context, p Principal) ([]guard.Guardrail, error) {
	if s.cfg.Guardrails == nil {
		return nil, nil
	}
	return s.guardrails.get(p, func() ([]guard.Guardrail, error) {
		raw, err := s.cfg.Guardrails.Get(ctx, scope(p))
		if err != nil {
			return nil, err
		}
		var gs []guard.Guardrail
		if raw != "" {
			if err := json.Unmarshal([]byte(raw), &gs); err != nil {
				return nil, fmt.Errorf("the stored guardrails of %s/%s: %w", p.Account, p.Workspace, err)
			}
		}
		return gs, nil
	})
}

func (s *Server) getGuardrails(w http.ResponseWriter, r *http.Request, p Principal) error {
	if s.cfg.Guardrails == nil {
		return errorf(http.StatusNotFound, "guardrails are not available on this server")
	}
	gs, err := s.guardrailsOf(r.Context(), p)
	if err != nil {
		return err
	}
	if gs == nil {
		gs = []guard.Guardrail{}
	}
	writeJSON(w, http.StatusOK, guardrailsBody{Guardrails: gs, Detector: guard.Version})
	return nil
}

func (s *Server) putGuardrails(w http.ResponseWriter, r *http.Request, p Principal) error {
	if s.cfg.Guardrails == nil {
		return errorf(http.StatusNotFound, "guardrails are not available on this server")
	}
	var body guardrailsBody
	if err := decodeJSON(r, &body, false); err != nil {
		return err
	}
	if body.Detector != "" {
		return errorf(http.StatusBadRequest, "detector is read-only: send only guardrails")
	}
	if body.Guardrails == nil {
		return errorf(http.StatusBadRequest, "guardrails: required, a list (empty to remove them all)")
	}
	for i := range body.Guardrails {
		if body.Guardrails[i].Type == "" {
			body.Guardrails[i].Type = guard.TypePromptInjection
		}
	}
	if err := guard.Validate(body.Guardrails); err != nil {
		return errorf(http.StatusBadRequest, "%v", err)
	}
	raw, _ := json.Marshal(body.Guardrails)
	if err := s.cfg.Guardrails.Put(r.Context(), scope(p), string(raw)); err != nil {
		return err
	}
	s.guardrails.put(p, body.Guardrails, time.Now())
	writeJSON(w, http.StatusOK, guardrailsBody{Guardrails: body.Guardrails, Detector: guard.Version})
	return nil
}

// maxRecorded caps the detections stored for one request: a prompt made
// of thousands of attack phrases is acted on whole, but stores only the
// first ones (the log line and the block message give the total).
const maxRecorded = 100

// inspected is one text of a request the guardrails read, and where it is.
type inspected struct {
	loc  string
	text *string // rewritten in place on redaction
}

// errBlocked is the answer to a blocked request (403 in every envelope).
func errBlocked(id string, n int) *gateway.RequestError {
	return &gateway.RequestError{Status: http.StatusForbidden,
		Message: fmt.Sprintf("This request was blocked by the workspace's prompt-injection guardrail (%d detection(s), request %s); the model was not called.", n, id)}
}

// screenTexts applies p's guardrails to texts: it records and counts the
// detections, redacts, and returns errBlocked when the request is
// blocked. w gets the Shellgate-Request-Id header when anything was
// detected.
func (s *Server) screenTexts(ctx context.Context, w http.ResponseWriter, p Principal, api string, texts []inspected) error {
	gs, err := s.guardrailsOf(ctx, p)
	if err != nil || len(gs) == 0 || len(texts) == 0 {
		return err
	}
	strs := make([]string, len(texts))
	for i, t := range texts {
		strs[i] = *t.text
	}
	found := guard.ScanAll(strs)
	id := store.NewID("req")
	rl := reqLogFrom(ctx)
	if rl != nil {
		id = rl.id // the request's log finds its detections by it
	}
	var recs []store.Detection
	total := 0
	action := ""
	for i, ds := range found {
		var redact []guard.Detection
		for _, d := range ds {
			a, name := guard.Judge(gs, d)
			if a == "" {
				continue
			}
			action = guard.Strictest(action, a)
			if a != guard.ActionFlag {
				redact = append(redact, d)
			}
			excerpt := d.Excerpt
			if d.Decoded != "" {
				excerpt += " (decoded: " + d.Decoded + ")"
			}
			total++
			if len(recs) == maxRecorded {
				continue // counted, redacted, not stored
			}
			recs = append(recs, store.Detection{RequestID: id, API: api, Action: a, Guardrail: name, Rule: d.Rule,
				Technique: d.Technique, Via: d.Via, Location: texts[i].loc, Start: d.Start, End: d.End, Excerpt: excerpt, Detector: guard.Version})
			s.metrics.guardDetections.WithLabelValues(d.Technique, a).Inc()
		}
		if len(redact) > 0 {
			*texts[i].text = guard.Redact(*texts[i].text, redact)
		}
	}
	if action == "" {
		return nil
	}
	s.metrics.guardRequests.WithLabelValues(action).Inc()
	w.Header().Set("Shellgate-Request-Id", id)
	// The text stays out of the server log: it is in the detections.
	s.log.InfoContext(ctx, "guardrail", "request", id, "api", api, "action", action, "detections", total,
		"account", p.Account, "workspace", p.Workspace)
	if err := s.cfg.Guardrails.Record(context.WithoutCancel(ctx), scope(p), recs); err != nil {
		s.log.ErrorContext(ctx, "recording guardrail detections failed", "request", id, "err", err)
	}
	if action == guard.ActionBlock {
		if rl != nil {
			rl.blocked = true
		}
		return errBlocked(id, total)
	}
	return nil
}

// gatewayScreen is the gateway.Screen of p's requests on api: the user
// messages' text parts.
func (s *Server) gatewayScreen(w http.ResponseWriter, p Principal, api string) gateway.Screen {
	if s.cfg.Guardrails == nil {
		return nil
	}
	return func(ctx context.Context, req *gateway.Request) error {
		if gs, err := s.guardrailsOf(ctx, p); err != nil || len(gs) == 0 {
			return err
		}
		var texts []inspected
		for mi := range req.Messages {
			m := &req.Messages[mi]
			if m.Role != gateway.RoleUser {
				continue
			}
			for pi := range m.Parts {
				if m.Parts[pi].Kind == gateway.PartText {
					texts = append(texts, inspected{loc: fmt.Sprintf("messages[%d].content[%d]", mi, pi), text: &m.Parts[pi].Text})
				}
			}
		}
		return s.screenTexts(ctx, w, p, api, texts)
	}
}

// screenChat screens a Chat Completions body's user messages (content a
// string or text parts), rewriting body["messages"] on redaction (and
// saying so).
func (s *Server) screenChat(ctx context.Context, w http.ResponseWriter, p Principal, body map[string]json.RawMessage) (bool, error) {
	if s.cfg.Guardrails == nil || len(body["messages"]) == 0 {
		return false, nil
	}
	if gs, err := s.guardrailsOf(ctx, p); err != nil || len(gs) == 0 {
		return false, err
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(body["messages"], &msgs); err != nil {
		return false, nil // the upstream (or the translation) reports a malformed list
	}
	type part struct {
		msg, idx int // idx -1: content is a string
		text     string
	}
	var parts []*part
	var texts []inspected
	for mi, m := range msgs {
		var role string
		if json.Unmarshal(m["role"], &role) != nil || role != "user" {
			continue
		}
		var str string
		if json.Unmarshal(m["content"], &str) == nil {
			pt := &part{msg: mi, idx: -1, text: str}
			parts = append(parts, pt)
			texts = append(texts, inspected{loc: fmt.Sprintf("messages[%d].content", mi), text: &pt.text})
			continue
		}
		var list []map[string]any
		if json.Unmarshal(m["content"], &list) != nil {
			continue
		}
		for ci, c := range list {
			if t, ok := c["text"].(string); ok && c["type"] == "text" {
				pt := &part{msg: mi, idx: ci, text: t}
				parts = append(parts, pt)
				texts = append(texts, inspected{loc: fmt.Sprintf("messages[%d].content[%d]", mi, ci), text: &pt.text})
			}
		}
	}
	orig := make([]string, len(parts))
	for i, pt := range parts {
		orig[i] = pt.text
	}
	if err := s.screenTexts(ctx, w, p, "chat_completions", texts); err != nil {
		return false, err
	}
	changed := false
	for i, pt := range parts {
		if pt.text == orig[i] {
			continue
		}
		changed = true
		if pt.idx < 0 {
			msgs[pt.msg]["content"], _ = json.Marshal(pt.text)
			continue
		}
		var list []map[string]any
		json.Unmarshal(msgs[pt.msg]["content"], &list)
		list[pt.idx]["text"] = pt.text
		msgs[pt.msg]["content"], _ = json.Marshal(list)
	}
	if changed {
		body["messages"], _ = json.Marshal(msgs)
	}
	return changed, nil
}

// guardMetrics are the guardrails' series.
func guardMetrics() (detections, requests *prometheus.CounterVec) {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shellgate_guardrail_detections_total",
			Help: "Prompt-injection detections that a workspace guardrail acted on, by technique and action (flag, redact, block).",
		}, []string{"technique", "action"}),
		prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shellgate_guardrail_requests_total",
			Help: "Gateway requests with detections, by the action taken (the strictest guardrail's).",
		}, []string{"action"})
}
