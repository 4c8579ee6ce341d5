// Package gatewaytest has an in-process scripted model for the gateway's
// frontend tests: a gateway.Upstream that plays scripted turns and records
// what it was sent. (The wire-level scripted model, a real HTTP server
// speaking the upstream APIs, is internal/gateway/scripted; tests of whole
// requests use that.) JSONAt walks a decoded JSON body, for the checks of
// what either model was sent.
package gatewaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/scripted"
)

// Turn is one scripted answer. Reply, when set, computes the turn from the
// request (e.g. to answer with the last tool result); otherwise Parts,
// Stop and Usage are the answer. Err fails the turn.
type Turn struct {
	Parts []gateway.Part
	Stop  gateway.StopReason
	Usage gateway.Usage
	Reply func(req *gateway.Request) *gateway.Turn
	Err   error
}

// Text is a text part.
func Text(s string) gateway.Part { return gateway.Part{Kind: gateway.PartText, Text: s} }

// Call is a tool call part with arguments args (marshalled to JSON unless
// it is a string, which is sent as is).
func Call(id, name string, args any) gateway.Part {
	var a string
	if s, ok := args.(string); ok {
		a = s
	} else {
		b, err := json.Marshal(args)
		if err != nil {
			panic(err)
		}
		a = string(b)
	}
	return gateway.Part{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: id, Name: name, Arguments: a}}
}

// Script is a gateway.Upstream playing Turns in order; past the last one it
// fails with a 500 UpstreamError.
type Script struct {
	mu       sync.Mutex
	turns    []Turn
	next     int
	requests []gateway.Request
}

// NewScript returns a script of turns.
func NewScript(turns ...Turn) *Script { return &Script{turns: turns} }

// Requests returns copies of the requests the script received.
func (s *Script) Requests() []gateway.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]gateway.Request(nil), s.requests...)
}

func (s *Script) Turn(ctx context.Context, req *gateway.Request, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	s.mu.Lock()
	cp := *req
	cp.Messages = append([]gateway.Message(nil), req.Messages...)
	cp.Tools = append([]gateway.Tool(nil), req.Tools...)
	s.requests = append(s.requests, cp)
	if s.next >= len(s.turns) {
		s.mu.Unlock()
		return nil, &gateway.UpstreamError{Status: http.StatusInternalServerError, Type: "api_error", Message: "scripted model: no more turns"}
	}
	t := s.turns[s.next]
	s.next++
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if t.Err != nil {
		return nil, t.Err
	}
	turn := &gateway.Turn{ID: fmt.Sprintf("turn_%d", s.next), Model: req.Model, Parts: t.Parts, Stop: t.Stop, Usage: t.Usage}
	if t.Reply != nil {
		turn = t.Reply(&cp)
	}
	if turn.Stop == "" {
		turn.Stop = gateway.StopEnd
		for _, p := range turn.Parts {
			if p.Kind == gateway.PartToolCall {
				turn.Stop = gateway.StopToolUse
			}
		}
	}
	if onDelta != nil {
		for i, p := range turn.Parts {
			switch p.Kind {
			case gateway.PartText:
				for _, chunk := range scripted.Chunks(p.Text, 7, false) {
					onDelta(gateway.Delta{Kind: gateway.DeltaText, Index: i, Text: chunk})
				}
			case gateway.PartToolCall:
				onDelta(gateway.Delta{Kind: gateway.DeltaCallStart, Index: i, Call: &gateway.ToolCall{ID: p.Call.ID, Name: p.Call.Name}})
				for _, chunk := range scripted.Chunks(p.Call.Arguments, 11, false) {
					onDelta(gateway.Delta{Kind: gateway.DeltaCallArgs, Index: i, Text: chunk})
				}
			}
		}
	}
	return turn, nil
}

// Models resolves "provider/model" names to in-process upstreams.
type Models map[string]gateway.Upstream // by provider

func (m Models) Resolve(name string) (gateway.Model, error) {
	provider, model, ok := strings.Cut(name, "/")
	if !ok || provider == "" || model == "" {
		return gateway.Model{}, gateway.BadRequest("model", "model %q: want provider/model", name)
	}
	up, ok := m[provider]
	if !ok {
		return gateway.Model{}, &gateway.RequestError{Status: http.StatusNotFound, Param: "model", Message: fmt.Sprintf("model %q: no provider %q", name, provider)}
	}
	return gateway.Model{Provider: provider, Name: model, API: "scripted", Upstream: up}, nil
}

func (m Models) List() []string { return nil }

// LastResult is the last tool result of req, or nil.
func LastResult(req *gateway.Request) *gateway.ToolResult {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		parts := req.Messages[i].Parts
		for j := len(parts) - 1; j >= 0; j-- {
			if parts[j].Kind == gateway.PartToolResult {
				return parts[j].Result
			}
		}
	}
	return nil
}

// EchoResult is a turn that answers "result: " and the last tool result's
// text ("no result" without one), using 30 input and 7 output tokens.
func EchoResult() Turn {
	return Turn{Reply: func(req *gateway.Request) *gateway.Turn {
		text := "no result"
		if r := LastResult(req); r != nil {
			text = "result: " + r.Content
		}
		return &gateway.Turn{Parts: []gateway.Part{Text(text)}, Stop: gateway.StopEnd, Usage: gateway.Usage{InputTokens: 30, OutputTokens: 7}}
	}}
}

// JSONAt walks a decoded JSON value (any, as encoding/json decodes it) by
// object keys (string) and array indexes (int); nil where the path leads
// nowhere.
func JSONAt(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}
