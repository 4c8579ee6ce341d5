package chat

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
)

// TestParseRequest: a Chat Completions body becomes the gateway's
// conversation (the server's tests drive it end to end with openai-go).
func TestParseRequest(t *testing.T) {
	body := `{"model":"claude/sonnet","messages":[
		{"role":"system","content":"Be brief."},{"role":"developer","content":[{"type":"text","text":"Use tools."}]},
		{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"one"},{"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"two"}]},
		{"role":"user","content":"thanks"}],
		"tools":[{"type":"function","function":{"name":"f","description":"F","parameters":{"type":"object"},"strict":true}}],
		"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false,
		"max_tokens":50,"max_completion_tokens":70,"temperature":0.5,"top_p":0.8,"stop":"END","user":"u1","stream":true,"stream_options":{"include_usage":true}}`
	req, opt, err := ParseRequest([]byte(body), "sonnet")
	if err != nil {
		t.Fatal(err)
	}
	temp, topP := 0.5, 0.8
	want := &gateway.Request{
		Model: "sonnet", System: "Be brief.\n\nUse tools.",
		Messages: []gateway.Message{
			{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "What is this?"},
				{Kind: gateway.PartImage, Image: &gateway.Image{MediaType: "image/png", Data: "AAAA"}},
				{Kind: gateway.PartImage, Image: &gateway.Image{URL: "https://x/y.png"}}}},
			{Role: gateway.RoleAssistant, Parts: []gateway.Part{
				{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "c1", Name: "f", Arguments: `{"a":1}`}},
				{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "c2", Name: "g", Arguments: `{}`}}}},
			{Role: gateway.RoleUser, Parts: []gateway.Part{
				{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "c1", Content: "one"}},
				{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "c2", Content: "two"}}}},
			{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: "thanks"}}},
		},
		Tools:       []gateway.Tool{{Name: "f", Description: "F", Parameters: json.RawMessage(`{"type":"object"}`), Strict: true}},
		ToolChoice:  gateway.ToolChoice{Mode: gateway.ChoiceTool, Name: "f", DisableParallel: true},
		MaxTokens:   70,
		Temperature: &temp, TopP: &topP, Stop: []string{"END"}, User: "u1",
	}
	if !reflect.DeepEqual(req, want) {
		a, _ := json.Marshal(req)
		b, _ := json.Marshal(want)
		t.Errorf("got\n  %s\nwant\n  %s", a, b)
	}
	if !opt.Stream || !opt.IncludeUsage {
		t.Errorf("options %+v", opt)
	}
}

// TestErrorsEvent: a stream's error event carries the upstream's type as
// its code on /v1, the status (502 when the upstream gave none) on
// OpenRouter's /api/v1.
func TestErrorsEvent(t *testing.T) {
	for _, c := range []struct {
		errs   Errors
		status int
		want   any
	}{
		{Errors{}, 529, "overloaded_error"},
		{Errors{StatusCodes: true}, 529, 529},
		{Errors{StatusCodes: true}, 0, 502},
		{Errors{StatusCodes: true}, 200, 502},
	} {
		ev := c.errs.Event(c.status, "overloaded_error", "Overloaded")["error"].(map[string]any)
		if ev["code"] != c.want || ev["message"] != "Overloaded" || ev["type"] != "server_error" {
			t.Errorf("%+v status %d: %v, want code %v", c.errs, c.status, ev, c.want)
		}
	}
}
