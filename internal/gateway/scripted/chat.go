package scripted

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/chat"
)

// Chat Completions (POST /v1/chat/completions), as OpenAI serves it.

var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

type chatRequest struct {
	Model         *string       `json:"model"`
	Messages      []chatMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

type chatMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

// chatText is the text of a message's content (a string or text parts),
// after checking the parts' types.
func chatText(i int, raw json.RawMessage) (string, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", false, badRequest("Invalid type for 'messages[%d].content': expected a string or an array of content parts.", i)
	}
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "text":
			b.WriteString(p.Text)
		case "image_url":
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return "", false, badRequest("Missing required parameter: 'messages[%d].content[%d].image_url.url'.", i, j)
			}
		case "input_audio", "file":
		default:
			return "", false, badRequest("Invalid value: '%s'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', 'audio', and 'file'. ('messages[%d].content[%d].type')", p.Type, i, j)
		}
	}
	return b.String(), len(parts) > 0, nil
}

func parseChat(raw []byte) (*conversation, error) {
	var req chatRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, badRequest("We could not parse the JSON body of your request: %v", err)
	}
	if req.Model == nil || *req.Model == "" {
		return nil, &apiError{status: 400, typ: "invalid_request_error", param: "model", msg: "you must provide a model parameter"}
	}
	if len(req.Messages) == 0 {
		return nil, &apiError{status: 400, typ: "invalid_request_error", param: "messages", msg: "[] is too short - 'messages'"}
	}
	c := &conversation{Model: *req.Model, Stream: req.Stream}
	c.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	names := map[string]bool{}
	for i, t := range req.Tools {
		if t.Type != "function" {
			return nil, badRequest("Invalid value: '%s'. Supported values are: 'function' and 'custom'. ('tools[%d].type')", t.Type, i)
		}
		if !functionName.MatchString(t.Function.Name) {
			return nil, badRequest("Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i)
		}
		if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && p[0] != '{' {
			return nil, badRequest("Invalid type for 'tools[%d].function.parameters': expected an object.", i)
		}
		names[t.Function.Name] = true
		c.Tools = append(c.Tools, t.Function.Name)
	}
	if tc := bytes.TrimSpace(req.ToolChoice); len(tc) > 0 && string(tc) != "null" {
		if len(req.Tools) == 0 {
			return nil, badRequest("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.")
		}
		err := checkToolChoice(tc, func() error {
			var named struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(tc, &named) != nil || named.Type != "function" {
				return badRequest("Invalid 'tool_choice': expected 'none', 'auto', 'required' or {\"type\":\"function\",\"function\":{\"name\":...}}.")
			}
			if !names[named.Function.Name] {
				return badRequest("Invalid value for 'tool_choice': tool choice '%s' not found in 'tools' parameter.", named.Function.Name)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var pending []string // tool_call ids of the last assistant message not yet answered
	unanswered := func() error {
		if len(pending) > 0 {
			return badRequest("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(pending, ", "))
		}
		return nil
	}
	for i, m := range req.Messages {
		text, hasContent, err := chatText(i, m.Content)
		if err != nil {
			return nil, err
		}
		if m.Role != "tool" {
			if err := unanswered(); err != nil {
				return nil, err
			}
		}
		switch m.Role {
		case "system", "developer":
		case "user":
			if !hasContent {
				return nil, badRequest("Invalid value for 'messages[%d].content': expected a string or an array of content parts, got null.", i)
			}
			c.LastUserText = text
		case "assistant":
			c.AssistantTurns++
			if !hasContent && len(m.ToolCalls) == 0 {
				return nil, badRequest("Invalid value for 'messages[%d].content': expected a string, got null.", i)
			}
			for j, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
					return nil, badRequest("Missing required parameter: 'messages[%d].tool_calls[%d]' needs id, type 'function' and function.name.", i, j)
				}
				if a := bytes.TrimSpace(tc.Function.Arguments); len(a) == 0 || a[0] != '"' {
					return nil, badRequest("Invalid type for 'messages[%d].tool_calls[%d].function.arguments': expected a string, but got an object instead.", i, j)
				}
				pending = append(pending, tc.ID)
			}
		case "tool":
			k := -1
			for j, id := range pending {
				if id == m.ToolCallID {
					k = j
				}
			}
			if k < 0 {
				return nil, badRequest("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
			}
			pending = append(pending[:k], pending[k+1:]...)
			c.ToolResults = append(c.ToolResults, text)
		default:
			return nil, badRequest("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'tool', 'function', and 'developer'. ('messages[%d].role')", m.Role, i)
		}
	}
	if err := unanswered(); err != nil {
		return nil, err
	}
	return c, nil
}

// chatFinish is the answer's stop reason in Chat Completions' words (the
// script's stop is in the gateway's).
func chatFinish(a *answer) string { return chat.FinishReason(gateway.StopReason(a.turn.stop())) }

func chatUsage(u Usage) map[string]any {
	return map[string]any{
		"prompt_tokens":     u.InputTokens,
		"completion_tokens": u.OutputTokens,
		"total_tokens":      u.InputTokens + u.OutputTokens,
		"prompt_tokens_details": map[string]any{
			"cached_tokens": u.CacheReadTokens,
			"audio_tokens":  0,
		},
		"completion_tokens_details": map[string]any{
			"reasoning_tokens":           u.ReasoningTokens,
			"audio_tokens":               0,
			"accepted_prediction_tokens": 0,
			"rejected_prediction_tokens": 0,
		},
	}
}

func chatCompletion(a *answer) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil, "annotations": []any{}}
	if a.turn.stop() == "refusal" {
		msg["refusal"] = a.text
	} else if a.text != "" {
		msg["content"] = a.text
	}
	if len(a.calls) > 0 {
		var tcs []any
		for _, c := range a.calls {
			id := c.id
			if id == "" {
				id = newID("call_")
			}
			tcs = append(tcs, map[string]any{"id": id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}})
		}
		msg["tool_calls"] = tcs
	}
	return map[string]any{
		"id": newID("chatcmpl-"), "object": "chat.completion", "created": time.Now().Unix(), "model": a.model,
		"choices":            []any{map[string]any{"index": 0, "message": msg, "finish_reason": chatFinish(a), "logprobs": nil}},
		"usage":              chatUsage(a.turn.Usage),
		"service_tier":       "default",
		"system_fingerprint": "fp_scripted",
	}
}

func streamChat(s *sse, a *answer) {
	id, created := newID("chatcmpl-"), time.Now().Unix()
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": a.model,
			"service_tier": "default", "system_fingerprint": "fp_scripted",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}}
	}
	s.event("", chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil))
	key := "content"
	if a.turn.stop() == "refusal" {
		key = "refusal"
	}
	for _, p := range chunks(a.text, 16) {
		s.event("", chunk(map[string]any{key: p}, nil))
	}
	for i, c := range a.calls {
		cid := c.id
		if cid == "" {
			cid = newID("call_")
		}
		s.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": cid, "type": "function",
			"function": map[string]any{"name": c.name, "arguments": ""}}}}, nil))
		for _, p := range argChunks(c.args) {
			s.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": p}}}}, nil))
		}
	}
	s.event("", chunk(map[string]any{}, chatFinish(a)))
	if a.conv.includeUsage {
		s.event("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": a.model,
			"choices": []any{}, "usage": chatUsage(a.turn.Usage)})
	}
	s.event("", "[DONE]")
}
