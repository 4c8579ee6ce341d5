// Package chat serves a Chat Completions request on a model whose provider
// speaks another API (Responses, Messages): the body is read into the
// gateway's conversation model, sent through the provider's
// gateway.Upstream, and the Turn written back as a chat.completion (or its
// chunk stream). Requests for chat_completions providers do not come here:
// internal/server forwards those as they are.
//
// What translates: system and developer messages (joined as the system
// prompt), user text and images (image_url, data: URLs inline), assistant
// text and tool_calls, tool messages (as tool results), function tools,
// tool_choice, parallel_tool_calls, max_completion_tokens / max_tokens,
// temperature, top_p, stop, user, stream and stream_options.include_usage.
// Other fields are not sent on (they have no neutral form); n > 1 is a 400.
//
// # Chat pass-through and translation
//
//   - Chat pass-through (`internal/server/chat.go`): the body forwarded as
//     it is through `Chat.Forward` (only `model` rewritten), the answer copied
//     back, flushed per read when it is a stream; errors in OpenAI's envelope.
//     A model of a responses/messages provider goes through
//     `internal/gateway/chat` instead: Chat body → `gateway.Request` → adapter
//     → chat.completion (or chunks from the adapter's deltas).
package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/openaierr"
)

type request struct {
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      bool            `json:"strict"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Stop                json.RawMessage `json:"stop"`
	User                string          `json:"user"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// Options are the parts of the request that shape the answer, not the
// conversation.
type Options struct {
	Stream       bool
	IncludeUsage bool
}

// Error is a request error with the field it concerns.
type Error struct {
	Param   string
	Message string
}

func (e *Error) Error() string { return e.Message }

func bad(param, format string, a ...any) *Error {
	return &Error{Param: param, Message: fmt.Sprintf(format, a...)}
}

// content reads a message's content: a string, or parts (text and, when
// images is set, image_url).
func content(where string, raw json.RawMessage, images bool) ([]gateway.Part, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return []gateway.Part{{Kind: gateway.PartText, Text: s}}, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Refusal  string `json:"refusal"`
		ImageURL struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, bad(where, "Invalid type for '%s': expected a string or an array of content parts.", where)
	}
	var out []gateway.Part
	for i, p := range parts {
		switch {
		case p.Type == "text":
			out = append(out, gateway.Part{Kind: gateway.PartText, Text: p.Text})
		case p.Type == "refusal":
			out = append(out, gateway.Part{Kind: gateway.PartText, Text: p.Refusal})
		case p.Type == "image_url" && images:
			img := &gateway.Image{URL: p.ImageURL.URL}
			if rest, ok := strings.CutPrefix(p.ImageURL.URL, "data:"); ok {
				head, data, _ := strings.Cut(rest, ",")
				mt, _, _ := strings.Cut(head, ";")
				img = &gateway.Image{MediaType: mt, Data: data}
			}
			if img.URL == "" && img.Data == "" {
				return nil, bad(fmt.Sprintf("%s[%d].image_url.url", where, i), "Missing required parameter: '%s[%d].image_url.url'.", where, i)
			}
			out = append(out, gateway.Part{Kind: gateway.PartImage, Image: img})
		default:
			return nil, bad(fmt.Sprintf("%s[%d].type", where, i), "content part type %q is not supported here", p.Type)
		}
	}
	return out, nil
}

// ParseRequest reads a Chat Completions body into a gateway.Request for
// upstream model name.
func ParseRequest(raw []byte, name string) (*gateway.Request, Options, error) {
	var req request
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, Options{}, bad("", "We could not parse the JSON body of your request: %v", err)
	}
	opt := Options{Stream: req.Stream, IncludeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	if req.N != nil && *req.N != 1 {
		return nil, opt, bad("n", "n must be 1 for a model of a provider that does not speak Chat Completions")
	}
	if len(req.Messages) == 0 {
		return nil, opt, bad("messages", "[] is too short - 'messages'")
	}
	out := &gateway.Request{Model: name, Temperature: req.Temperature, TopP: req.TopP, User: req.User}
	var system []string
	for i, m := range req.Messages {
		where := fmt.Sprintf("messages[%d].content", i)
		switch m.Role {
		case "system", "developer":
			parts, err := content(where, m.Content, false)
			if err != nil {
				return nil, opt, err
			}
			for _, p := range parts {
				system = append(system, p.Text)
			}
		case "user":
			parts, err := content(where, m.Content, true)
			if err != nil {
				return nil, opt, err
			}
			if len(parts) == 0 {
				return nil, opt, bad(where, "Invalid value for '%s': expected a string or an array of content parts, got null.", where)
			}
			out.Messages = append(out.Messages, gateway.Message{Role: gateway.RoleUser, Parts: parts})
		case "assistant":
			parts, err := content(where, m.Content, false)
			if err != nil {
				return nil, opt, err
			}
			for _, tc := range m.ToolCalls {
				parts = append(parts, gateway.Part{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
			}
			out.Messages = append(out.Messages, gateway.Message{Role: gateway.RoleAssistant, Parts: parts})
		case "tool":
			parts, err := content(where, m.Content, false)
			if err != nil {
				return nil, opt, err
			}
			var text strings.Builder
			for _, p := range parts {
				text.WriteString(p.Text)
			}
			part := gateway.Part{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: m.ToolCallID, Content: text.String()}}
			if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == gateway.RoleUser && out.Messages[n-1].Parts[0].Kind == gateway.PartToolResult {
				out.Messages[n-1].Parts = append(out.Messages[n-1].Parts, part)
			} else {
				out.Messages = append(out.Messages, gateway.Message{Role: gateway.RoleUser, Parts: []gateway.Part{part}})
			}
		default:
			return nil, opt, bad(fmt.Sprintf("messages[%d].role", i), "Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'tool', and 'developer'.", m.Role)
		}
	}
	out.System = strings.Join(system, "\n\n")
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, opt, bad(fmt.Sprintf("tools[%d]", i), "tools[%d]: only function tools with a name are supported", i)
		}
		out.Tools = append(out.Tools, gateway.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters, Strict: t.Function.Strict})
	}
	if tc := bytes.TrimSpace(req.ToolChoice); len(tc) > 0 && string(tc) != "null" {
		var mode string
		if json.Unmarshal(tc, &mode) == nil {
			switch mode {
			case "auto", "none", "required":
				out.ToolChoice.Mode = mode
			default:
				return nil, opt, bad("tool_choice", "Invalid value: '%s'. Supported values are: 'none', 'auto', and 'required'.", mode)
			}
		} else {
			var named struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(tc, &named) != nil || named.Function.Name == "" {
				return nil, opt, bad("tool_choice", "Invalid 'tool_choice': want 'none', 'auto', 'required' or {\"type\":\"function\",\"function\":{\"name\":...}}.")
			}
			out.ToolChoice = gateway.ToolChoice{Mode: gateway.ChoiceTool, Name: named.Function.Name}
		}
	}
	if req.ParallelToolCalls != nil && !*req.ParallelToolCalls {
		out.ToolChoice.DisableParallel = true
	}
	switch {
	case req.MaxCompletionTokens != nil:
		out.MaxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		out.MaxTokens = *req.MaxTokens
	}
	if s := bytes.TrimSpace(req.Stop); len(s) > 0 && string(s) != "null" {
		var one string
		if json.Unmarshal(s, &one) == nil {
			out.Stop = []string{one}
		} else if json.Unmarshal(s, &out.Stop) != nil {
			return nil, opt, bad("stop", "Invalid type for 'stop': expected a string or an array of strings.")
		}
	}
	return out, opt, nil
}

// FinishReason is a stop reason in Chat Completions' words.
func FinishReason(s gateway.StopReason) string {
	switch s {
	case gateway.StopMaxTokens:
		return "length"
	case gateway.StopToolUse:
		return "tool_calls"
	case gateway.StopRefusal:
		return "content_filter"
	default:
		return "stop"
	}
}

func usage(u gateway.Usage) map[string]any {
	return map[string]any{
		"prompt_tokens": u.InputTokens, "completion_tokens": u.OutputTokens, "total_tokens": u.InputTokens + u.OutputTokens,
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.CacheReadTokens},
		"completion_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
	}
}

// Completion is a Turn as a chat.completion object; model is the name the
// client asked for.
func Completion(t *gateway.Turn, id, model string) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	var text strings.Builder
	var calls []any
	for _, p := range t.Parts {
		switch p.Kind {
		case gateway.PartText:
			text.WriteString(p.Text)
		case gateway.PartToolCall:
			calls = append(calls, map[string]any{"id": p.Call.ID, "type": "function", "function": map[string]any{"name": p.Call.Name, "arguments": p.Call.Arguments}})
		}
	}
	if text.Len() > 0 {
		msg["content"] = text.String()
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	// system_fingerprint is null (no fingerprint), as OpenAI sends it:
	// @openrouter/sdk's schema requires the key (in a completion; its
	// chunks take a string or none, so they carry none).
	return map[string]any{"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": model, "system_fingerprint": nil,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": FinishReason(t.Stop), "logprobs": nil}},
		"usage":   usage(t.Usage)}
}

// Errors writes errors in OpenAI's envelope. With StatusCodes, error.code
// is the HTTP status, a number, as OpenRouter's /api/v1 has it (its SDK
// parses error.code as an integer); else the code string or null.
type Errors struct{ StatusCodes bool }

// Write writes an error in OpenAI's envelope.
func (e Errors) Write(w http.ResponseWriter, status int, param, code, msg string) {
	openaierr.Write(w, &openaierr.Error{Status: status, Type: openaierr.TypeFor(status), Param: param, Code: code, Message: msg, StatusCode: e.StatusCodes})
}

// Event is the error event that ends a stream whose head was sent: an
// upstream failure (status 0 when it gave none).
func (e Errors) Event(status int, code, msg string) map[string]any {
	d := map[string]any{"message": msg, "type": "server_error", "param": nil, "code": code}
	if e.StatusCodes {
		if status < 400 || status > 599 {
			status = http.StatusBadGateway
		}
		d["code"] = status
	}
	return map[string]any{"error": d}
}

// write writes err (a request error, an upstream error, or another) in
// OpenAI's envelope.
func (e Errors) write(w http.ResponseWriter, err error) {
	if ce, ok := err.(*Error); ok {
		e.Write(w, http.StatusBadRequest, ce.Param, "", ce.Message)
		return
	}
	if re, ok := err.(*gateway.RequestError); ok {
		e.Write(w, re.HTTPStatus(), re.Param, "", re.Message)
		return
	}
	if ue, ok := gateway.AsUpstreamError(err); ok {
		e.Write(w, ue.Status, "", ue.Type, ue.Message)
		return
	}
	e.Write(w, http.StatusBadGateway, "", "", "upstream call failed")
}

// Serve answers raw (a Chat Completions body asking for model, already
// resolved to m) through m's adapter, streamed when the body says so. It
// returns the upstream call it made, for the request's trace (a zero
// Start when the body was refused before any call). Errors are written
// with errs.
func Serve(ctx context.Context, w http.ResponseWriter, raw []byte, model string, m gateway.Model, errs Errors) (call gateway.UpstreamCall) {
	req, opt, err := ParseRequest(raw, m.Name)
	if err != nil {
		errs.write(w, err)
		return call
	}
	call.Start = time.Now()
	turn := func(onDelta func(gateway.Delta)) (*gateway.Turn, error) {
		t, err := m.Upstream.Turn(ctx, req, onDelta)
		call.End, call.Err = time.Now(), err
		if t != nil {
			call.ID, call.Model, call.Stop, call.Usage = t.ID, t.Model, t.Stop, t.Usage
		}
		return t, err
	}
	id := fmt.Sprintf("chatcmpl-%d", time.Now().UnixNano())
	if !opt.Stream {
		t, err := turn(nil)
		if err != nil {
			if ctx.Err() == nil {
				errs.write(w, err)
			}
			return call
		}
		b, _ := json.Marshal(Completion(t, id, model))
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
		return call
	}
	created := time.Now().Unix()
	flusher, _ := w.(http.Flusher)
	started := false
	send := func(v any) {
		if !started {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}}
	}
	callIndex := map[int]int{} // part index → tool_calls index
	onDelta := func(d gateway.Delta) {
		if !started {
			send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
		}
		switch d.Kind {
		case gateway.DeltaText:
			send(chunk(map[string]any{"content": d.Text}, nil))
		case gateway.DeltaCallStart:
			i := len(callIndex)
			callIndex[d.Index] = i
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": d.Call.ID, "type": "function",
				"function": map[string]any{"name": d.Call.Name, "arguments": ""}}}}, nil))
		case gateway.DeltaCallArgs:
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": callIndex[d.Index], "function": map[string]any{"arguments": d.Text}}}}, nil))
		}
	}
	t, err := turn(onDelta)
	if err != nil {
		if ctx.Err() != nil {
			return call
		}
		if !started {
			errs.write(w, err)
			return call
		}
		status, msg, code := 0, "upstream call failed", ""
		if ue, ok := gateway.AsUpstreamError(err); ok {
			status, msg, code = ue.Status, ue.Message, ue.Type
		}
		send(errs.Event(status, code, msg))
		return call
	}
	if !started {
		send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	}
	send(chunk(map[string]any{}, FinishReason(t.Stop)))
	if opt.IncludeUsage {
		send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": []any{}, "usage": usage(t.Usage)})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
	return call
}
