package scripted

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Anthropic Messages (POST /v1/messages).

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

type messagesRequest struct {
	Model     *string `json:"model"`
	MaxTokens *int    `json:"max_tokens"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	System    json.RawMessage `json:"system"`
	Stream    bool            `json:"stream"`
	Container json.RawMessage `json:"container"` // an id, or {"id": …}
	Tools     []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
}

type messagesBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

func mbad(format string, a ...any) *apiError {
	return badRequest(format, a...)
}

// messagesBlocks parses a content (a string or blocks), checking each
// block as the API does.
func messagesBlocks(where string, raw json.RawMessage) ([]messagesBlock, error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, mbad("%s: text content blocks must be non-empty", where)
		}
		t := s
		return []messagesBlock{{Type: "text", Text: &t}}, nil
	}
	var blocks []messagesBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, mbad("%s: Input should be a valid list", where)
	}
	for j, b := range blocks {
		at := fmt.Sprintf("%s.%d", where, j)
		switch {
		case b.Type == "text":
			if b.Text == nil {
				return nil, mbad("%s.text: Field required", at)
			}
			if *b.Text == "" {
				return nil, mbad("%s: text content blocks must be non-empty", at)
			}
		case b.Type == "image":
			if b.Source == nil {
				return nil, mbad("%s.image.source: Field required", at)
			}
			switch b.Source.Type {
			case "base64":
				if b.Source.Data == "" || !strings.HasPrefix(b.Source.MediaType, "image/") {
					return nil, mbad("%s.image.source.base64: media_type and data are required", at)
				}
			case "url":
				if b.Source.URL == "" {
					return nil, mbad("%s.image.source.url.url: Field required", at)
				}
			default:
				return nil, mbad("%s.image.source: Input tag '%s' found using 'type' does not match any of the expected tags: 'base64', 'url', 'file'", at, b.Source.Type)
			}
		case b.Type == "tool_use" || b.Type == "server_tool_use":
			if b.ID == "" || b.Name == "" {
				return nil, mbad("%s.%s: id and name are required", at, b.Type)
			}
			if in := bytes.TrimSpace(b.Input); len(in) == 0 || in[0] != '{' {
				return nil, mbad("%s.%s.input: Input should be a valid dictionary", at, b.Type)
			}
		case b.Type == "tool_result":
			if b.ToolUseID == "" {
				return nil, mbad("%s.tool_result.tool_use_id: Field required", at)
			}
			if len(bytes.TrimSpace(b.Content)) > 0 {
				if _, err := messagesBlocks(at+".content", b.Content); err != nil {
					var s string
					if json.Unmarshal(b.Content, &s) != nil || s != "" {
						return nil, err
					}
				}
			}
		case b.Type == "document", b.Type == "thinking", b.Type == "redacted_thinking", b.Type == "search_result",
			b.Type == "container_upload", strings.HasSuffix(b.Type, "_tool_result"):
		default:
			return nil, mbad("%s: Input tag '%s' found using 'type' does not match any of the expected tags", at, b.Type)
		}
	}
	return blocks, nil
}

func blocksText(blocks []messagesBlock) string {
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" && bl.Text != nil {
			b.WriteString(*bl.Text)
		}
	}
	return b.String()
}

func parseMessages(raw []byte) (*conversation, error) {
	var req messagesRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, mbad("invalid request body: %v", err)
	}
	if req.Model == nil || *req.Model == "" {
		return nil, mbad("model: Field required")
	}
	if req.MaxTokens == nil {
		return nil, mbad("max_tokens: Field required")
	}
	if *req.MaxTokens < 1 {
		return nil, mbad("max_tokens: Input should be greater than or equal to 1")
	}
	if len(req.Messages) == 0 {
		return nil, mbad("messages: at least one message is required")
	}
	if sys := bytes.TrimSpace(req.System); len(sys) > 0 && string(sys) != "null" {
		var s string
		if json.Unmarshal(sys, &s) != nil {
			var blocks []struct {
				Type string  `json:"type"`
				Text *string `json:"text"`
			}
			if json.Unmarshal(sys, &blocks) != nil {
				return nil, mbad("system: Input should be a valid string or a list of text blocks")
			}
			for i, b := range blocks {
				if b.Type != "text" || b.Text == nil || *b.Text == "" {
					return nil, mbad("system.%d: want a non-empty text block", i)
				}
			}
		}
	}
	c := &conversation{Model: *req.Model, Stream: req.Stream}
	if json.Unmarshal(req.Container, &c.HostedContainer) != nil {
		var obj struct {
			ID string `json:"id"`
		}
		json.Unmarshal(req.Container, &obj)
		c.HostedContainer = obj.ID
	}
	names := map[string]bool{}
	for i, t := range req.Tools {
		if t.Type == "" || t.Type == "custom" {
			if !toolName.MatchString(t.Name) {
				return nil, mbad("tools.%d.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'", i)
			}
			if s := bytes.TrimSpace(t.InputSchema); len(s) == 0 || s[0] != '{' {
				return nil, mbad("tools.%d.custom.input_schema: Field required", i)
			}
		}
		if names[t.Name] {
			return nil, mbad("tools: Tool names must be unique.")
		}
		names[t.Name] = true
		c.Tools = append(c.Tools, t.Name)
		if strings.HasPrefix(t.Type, "code_execution_") {
			c.Hosted = append(c.Hosted, "code_execution")
		}
	}
	if tc := req.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto", "any", "none":
		case "tool":
			if !names[tc.Name] {
				return nil, mbad("tool_choice: tool '%s' is not among the tools", tc.Name)
			}
		default:
			return nil, mbad("tool_choice: Input tag '%s' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'", tc.Type)
		}
	}
	var prevUses []string // tool_use ids of the previous (assistant) message
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return nil, mbad("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if i > 0 && req.Messages[i-1].Role == m.Role {
			return nil, mbad("messages: roles must alternate between \"user\" and \"assistant\", but found multiple %q roles in a row", m.Role)
		}
		blocks, err := messagesBlocks(fmt.Sprintf("messages.%d.content", i), m.Content)
		if err != nil {
			return nil, err
		}
		switch m.Role {
		case "user":
			answered := map[string]bool{}
			for j, b := range blocks {
				if b.Type != "tool_result" {
					continue
				}
				if !contains(prevUses, b.ToolUseID) {
					return nil, mbad("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
				}
				answered[b.ToolUseID] = true
				var s string
				if json.Unmarshal(b.Content, &s) == nil {
					c.ToolResults = append(c.ToolResults, s)
				} else {
					inner, _ := messagesBlocks("", b.Content)
					c.ToolResults = append(c.ToolResults, blocksText(inner))
				}
			}
			var missing []string
			for _, id := range prevUses {
				if !answered[id] {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return nil, mbad("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
			}
			if t := blocksText(blocks); t != "" {
				c.LastUserText = t
			}
			prevUses = nil
		case "assistant":
			c.AssistantTurns++
			prevUses = nil
			for _, b := range blocks {
				if b.Type == "tool_use" {
					prevUses = append(prevUses, b.ID)
				}
			}
		}
	}
	if len(prevUses) > 0 {
		return nil, mbad("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", len(req.Messages)-1, strings.Join(prevUses, ", "))
	}
	return c, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func messagesStop(a *answer) (string, any) {
	switch a.turn.stop() {
	case "end":
		return "end_turn", nil
	case "stop_sequence":
		return "stop_sequence", a.turn.StopSequence
	case "pause":
		return "pause_turn", nil
	default:
		return a.turn.stop(), nil
	}
}

func messagesUsage(u Usage) map[string]any {
	return map[string]any{
		"input_tokens":                max(u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens, 0),
		"output_tokens":               u.OutputTokens,
		"cache_creation_input_tokens": u.CacheWriteTokens,
		"cache_read_input_tokens":     u.CacheReadTokens,
		"service_tier":                "standard",
	}
}

// toolInput is a call's arguments as a tool_use input: the object when
// they are one, else the text as a JSON string (what a broken model would
// leave a client to deal with).
func toolInput(args string) json.RawMessage {
	t := strings.TrimSpace(args)
	if strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(args)
	return b
}

func messagesContent(a *answer) []map[string]any {
	var out []map[string]any
	for _, h := range a.hosted {
		if len(h.Editor) > 0 {
			out = append(out, map[string]any{"type": "server_tool_use", "id": h.ID, "name": "text_editor_code_execution", "input": h.Editor, "args": string(h.Editor)},
				map[string]any{"type": "text_editor_code_execution_tool_result", "tool_use_id": h.ID, "content": h.Result})
			continue
		}
		in, _ := json.Marshal(map[string]string{"command": h.Code})
		result := map[string]any{"type": "bash_code_execution_result", "stdout": h.Stdout, "stderr": h.Stderr, "return_code": h.ExitCode, "content": []any{}}
		if h.Error != "" {
			result = map[string]any{"type": "bash_code_execution_tool_result_error", "error_code": h.Error}
		}
		out = append(out, map[string]any{"type": "server_tool_use", "id": h.ID, "name": "bash_code_execution", "input": json.RawMessage(in), "args": string(in)},
			map[string]any{"type": "bash_code_execution_tool_result", "tool_use_id": h.ID, "content": result})
	}
	if a.text != "" {
		out = append(out, map[string]any{"type": "text", "text": a.text})
	}
	for _, c := range a.calls {
		id := c.id
		if id == "" {
			id = newID("toolu_")
		}
		out = append(out, map[string]any{"type": "tool_use", "id": id, "name": c.name, "input": toolInput(c.args), "args": c.args})
	}
	return out
}

func messageObject(a *answer) map[string]any {
	content := messagesContent(a)
	list := make([]any, 0, len(content))
	for _, b := range content {
		delete(b, "args")
		list = append(list, b)
	}
	reason, seq := messagesStop(a)
	return map[string]any{"id": newID("msg_"), "type": "message", "role": "assistant", "model": a.model,
		"content": list, "stop_reason": reason, "stop_sequence": seq, "usage": messagesUsage(a.turn.Usage), "container": messagesContainer(a)}
}

// messagesContainer is the container the answer's hosted runs ran in, as
// Anthropic names it (nil without any).
func messagesContainer(a *answer) any {
	if len(a.hosted) == 0 {
		return nil
	}
	return map[string]any{"id": hostedContainer(a, "container_scripted"), "expires_at": time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.RFC3339)}
}

func streamMessages(s *sse, a *answer) {
	ev := func(name string, v map[string]any) {
		v["type"] = name
		s.event(name, v)
	}
	start := messagesUsage(a.turn.Usage)
	start["output_tokens"] = 1
	ev("message_start", map[string]any{"message": map[string]any{"id": newID("msg_"), "type": "message", "role": "assistant",
		"model": a.model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": start}})
	ev("ping", map[string]any{})
	for i, b := range messagesContent(a) {
		switch b["type"] {
		case "text":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, p := range chunks(a.text, 16) {
				ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": p}})
			}
		case "bash_code_execution_tool_result", "text_editor_code_execution_tool_result":
			ev("content_block_start", map[string]any{"index": i, "content_block": b})
		case "tool_use", "server_tool_use":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": b["type"], "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": ""}})
			for _, p := range argChunks(b["args"].(string)) {
				ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
			}
		}
		ev("content_block_stop", map[string]any{"index": i})
	}
	reason, seq := messagesStop(a)
	ev("message_delta", map[string]any{"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq, "container": messagesContainer(a)},
		"usage": messagesUsage(a.turn.Usage)})
	ev("message_stop", map[string]any{})
}
