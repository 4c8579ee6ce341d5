package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/gateway/scripted"
)

// These tests run each adapter against the scripted upstream (a real HTTP
// server speaking the three APIs, validating requests as the real APIs
// do), streamed and not: every translation rule one way (the recorded
// request body) and back (the Turn).

var apis = []string{gateway.APIChat, gateway.APIResponses, gateway.APIMessages, gateway.APIGemini}

func adapter(api, base string, timeout time.Duration) gateway.Upstream {
	version := "/v1"
	if api == gateway.APIGemini {
		version = "/v1beta"
	}
	return newAdapter(api, Endpoint{BaseURL: base + version, APIKey: "sk-test", Timeout: timeout})
}

// collect runs a turn, streamed when stream is set, and checks that the
// deltas add up to the returned turn.
func collect(t *testing.T, up gateway.Upstream, req *gateway.Request, stream bool) (*gateway.Turn, error) {
	t.Helper()
	if !stream {
		return up.Turn(context.Background(), req, nil)
	}
	var parts []gateway.Part
	onDelta := func(d gateway.Delta) {
		switch d.Kind {
		case gateway.DeltaText:
			if d.Index == len(parts) {
				parts = append(parts, gateway.Part{Kind: gateway.PartText})
			}
			if d.Index != len(parts)-1 && parts[d.Index].Kind != gateway.PartText {
				t.Errorf("text delta for part %d of kind %s", d.Index, parts[d.Index].Kind)
				return
			}
			parts[d.Index].Text += d.Text
		case gateway.DeltaCallStart:
			if d.Index != len(parts) {
				t.Errorf("call start at %d, have %d parts", d.Index, len(parts))
				return
			}
			parts = append(parts, gateway.Part{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: d.Call.ID, Name: d.Call.Name}})
		case gateway.DeltaCallArgs:
			if d.Index >= len(parts) || parts[d.Index].Kind != gateway.PartToolCall {
				t.Errorf("args delta for part %d", d.Index)
				return
			}
			parts[d.Index].Call.Arguments += d.Text
		}
	}
	turn, err := up.Turn(context.Background(), req, onDelta)
	if err == nil {
		for i := range parts {
			if parts[i].Kind == gateway.PartToolCall && parts[i].Call.Arguments == "" {
				parts[i].Call.Arguments = "{}"
			}
		}
		if !reflect.DeepEqual(parts, turn.Parts) {
			t.Errorf("deltas add up to\n  %s\nthe turn has\n  %s", dump(parts), dump(turn.Parts))
		}
	}
	return turn, err
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func userText(s string) gateway.Message {
	return gateway.Message{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartText, Text: s}}}
}

// TestTurnsBack: what each API answers comes back as the same Turn,
// streamed and not.
func TestTurnsBack(t *testing.T) {
	usage := scripted.Usage{InputTokens: 100, OutputTokens: 20, CacheReadTokens: 30, CacheWriteTokens: 10, ReasoningTokens: 5}
	cases := []struct {
		name  string
		turn  scripted.Turn
		parts []gateway.Part
		stop  map[string]gateway.StopReason // by API; "" key for all
	}{
		{"01 text", scripted.Turn{Text: "Hello there, this is a longer answer — with ünïcode.", Usage: usage},
			[]gateway.Part{{Kind: gateway.PartText, Text: "Hello there, this is a longer answer — with ünïcode."}},
			map[string]gateway.StopReason{"": gateway.StopEnd}},
		{"02 text and two calls", scripted.Turn{Text: "Let me look.", Usage: usage, ToolCalls: []scripted.ToolCall{
			{ID: "call_1", Name: "shell", Arguments: json.RawMessage(`{"commands":["ls -la","python3 -c 'print(1)'"]}`)},
			{ID: "call_2", Name: "lookup", Arguments: json.RawMessage(`{"q":"ß"}`)}}},
			[]gateway.Part{{Kind: gateway.PartText, Text: "Let me look."},
				{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "call_1", Name: "shell", Arguments: `{"commands":["ls -la","python3 -c 'print(1)'"]}`}},
				{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "call_2", Name: "lookup", Arguments: `{"q":"ß"}`}}},
			map[string]gateway.StopReason{"": gateway.StopToolUse}},
		{"03 call without text", scripted.Turn{ToolCalls: []scripted.ToolCall{{ID: "call_9", Name: "shell", Arguments: json.RawMessage(`{"commands":["pwd"]}`)}}},
			[]gateway.Part{{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "call_9", Name: "shell", Arguments: `{"commands":["pwd"]}`}}},
			map[string]gateway.StopReason{"": gateway.StopToolUse}},
		{"04 max tokens", scripted.Turn{Text: "cut sh", Stop: "max_tokens"},
			[]gateway.Part{{Kind: gateway.PartText, Text: "cut sh"}},
			map[string]gateway.StopReason{"": gateway.StopMaxTokens}},
		{"05 stop sequence", scripted.Turn{Text: "one two", Stop: "stop_sequence", StopSequence: "three"},
			[]gateway.Part{{Kind: gateway.PartText, Text: "one two"}},
			// Chat and Responses do not tell a stop sequence from a stop.
			map[string]gateway.StopReason{"": gateway.StopEnd, gateway.APIMessages: gateway.StopSequence}},
		{"06 refusal", scripted.Turn{Text: "I can't help with that.", Stop: "refusal"},
			[]gateway.Part{{Kind: gateway.PartText, Text: "I can't help with that."}},
			map[string]gateway.StopReason{"": gateway.StopRefusal}},
		{"07 pause", scripted.Turn{Text: "pausing", Stop: "pause"},
			[]gateway.Part{{Kind: gateway.PartText, Text: "pausing"}},
			map[string]gateway.StopReason{"": gateway.StopEnd, gateway.APIMessages: gateway.StopPause}},
	}
	for _, c := range cases {
		srv := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{c.turn}})
		for _, api := range apis {
			up := adapter(api, srv.URL, 0)
			var turns [2]*gateway.Turn
			for i, stream := range []bool{false, true} {
				name := c.name + "/" + api
				if stream {
					name += "/stream"
				}
				t.Run(name, func(t *testing.T) {
					req := &gateway.Request{Model: "m1", Messages: []gateway.Message{userText("hi")},
						Tools: []gateway.Tool{{Name: "shell"}, {Name: "lookup"}}}
					turn, err := collect(t, up, req, stream)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(turn.Parts, c.parts) {
						t.Errorf("parts\n  %s\nwant\n  %s", dump(turn.Parts), dump(c.parts))
					}
					want, ok := c.stop[api]
					if !ok {
						want = c.stop[""]
					}
					if turn.Stop != want {
						t.Errorf("stop %q, want %q", turn.Stop, want)
					}
					if turn.Model != "m1" || turn.ID == "" {
						t.Errorf("model %q id %q", turn.Model, turn.ID)
					}
					wantUsage := gateway.Usage{InputTokens: c.turn.Usage.InputTokens, OutputTokens: c.turn.Usage.OutputTokens,
						CacheReadTokens: c.turn.Usage.CacheReadTokens}
					switch api {
					case gateway.APIMessages:
						wantUsage.CacheWriteTokens = c.turn.Usage.CacheWriteTokens // Messages reports writes, not reasoning
					default:
						wantUsage.ReasoningTokens = c.turn.Usage.ReasoningTokens
					}
					if turn.Usage != wantUsage {
						t.Errorf("usage %+v, want %+v", turn.Usage, wantUsage)
					}
					turns[i] = turn
				})
			}
			if turns[0] != nil && turns[1] != nil {
				a, b := *turns[0], *turns[1]
				a.ID, b.ID = "", ""
				if !reflect.DeepEqual(a, b) {
					t.Errorf("%s %s: streamed turn %s differs from the non-streamed %s", c.name, api, dump(b), dump(a))
				}
			}
		}
		srv.Close()
	}
}

// conversation is a request using every translation rule.
func conversation() *gateway.Request {
	temp, topP := 0.25, 0.9
	return &gateway.Request{
		Model:  "m1",
		System: "You are terse.",
		Messages: []gateway.Message{
			{Role: gateway.RoleUser, Parts: []gateway.Part{
				{Kind: gateway.PartText, Text: "What is in this picture and my CSV?"},
				{Kind: gateway.PartImage, Image: &gateway.Image{MediaType: "image/png", Data: "iVBORw0KGgo="}},
				{Kind: gateway.PartImage, Image: &gateway.Image{URL: "https://example.com/cat.jpg"}},
			}},
			{Role: gateway.RoleAssistant, Parts: []gateway.Part{
				{Kind: gateway.PartText, Text: "Looking."},
				{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "call_a", Name: "shell", Arguments: `{"commands":["head data.csv"]}`}},
				{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "call_b", Name: "lookup", Arguments: `{"q":"x"}`}},
			}},
			{Role: gateway.RoleUser, Parts: []gateway.Part{
				{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "call_a", Content: `{"output":[{"stdout":"a,b\n1,2\n"}]}`}},
				{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "call_b", Content: "not found", IsError: true}},
			}},
			userText("And the sum?"),
		},
		Tools: []gateway.Tool{
			{Name: "shell", Description: "Run commands", Parameters: json.RawMessage(`{"type":"object","properties":{"commands":{"type":"array","items":{"type":"string"}}},"required":["commands"],"additionalProperties":false}`)},
			{Name: "lookup", Description: "Look up", Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`), Strict: true},
		},
		ToolChoice:  gateway.ToolChoice{Mode: gateway.ChoiceTool, Name: "lookup", DisableParallel: true},
		MaxTokens:   321,
		Temperature: &temp,
		TopP:        &topP,
		Stop:        []string{"END"},
		User:        "user-7",
	}
}

// TestRequestTranslation: the conversation reaches each API as that API
// spells it, and the scripted upstream (validating like the real one)
// accepts it.
func TestRequestTranslation(t *testing.T) {
	srv := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{{Text: "ok"}}, Repeat: true})
	defer srv.Close()
	type check struct {
		path []any
		want any
	}
	checks := map[string][]check{
		gateway.APIChat: {
			{[]any{"model"}, "m1"},
			{[]any{"messages", 0, "role"}, "system"},
			{[]any{"messages", 0, "content"}, "You are terse."},
			{[]any{"messages", 1, "content", 0, "text"}, "What is in this picture and my CSV?"},
			{[]any{"messages", 1, "content", 1, "image_url", "url"}, "data:image/png;base64,iVBORw0KGgo="},
			{[]any{"messages", 1, "content", 2, "image_url", "url"}, "https://example.com/cat.jpg"},
			{[]any{"messages", 2, "role"}, "assistant"},
			{[]any{"messages", 2, "content"}, "Looking."},
			{[]any{"messages", 2, "tool_calls", 0, "id"}, "call_a"},
			{[]any{"messages", 2, "tool_calls", 0, "function", "arguments"}, `{"commands":["head data.csv"]}`},
			{[]any{"messages", 2, "tool_calls", 1, "function", "name"}, "lookup"},
			{[]any{"messages", 3, "role"}, "tool"},
			{[]any{"messages", 3, "tool_call_id"}, "call_a"},
			{[]any{"messages", 4, "tool_call_id"}, "call_b"},
			{[]any{"messages", 4, "content"}, "error: not found"},
			{[]any{"messages", 5, "content"}, "And the sum?"},
			{[]any{"tools", 0, "type"}, "function"},
			{[]any{"tools", 0, "function", "description"}, "Run commands"},
			{[]any{"tools", 0, "function", "parameters", "additionalProperties"}, false},
			{[]any{"tools", 1, "function", "strict"}, true},
			{[]any{"tool_choice", "function", "name"}, "lookup"},
			{[]any{"parallel_tool_calls"}, false},
			{[]any{"max_tokens"}, 321.0},
			{[]any{"temperature"}, 0.25},
			{[]any{"top_p"}, 0.9},
			{[]any{"stop", 0}, "END"},
			{[]any{"user"}, "user-7"},
		},
		gateway.APIResponses: {
			{[]any{"model"}, "m1"},
			{[]any{"instructions"}, "You are terse."},
			{[]any{"store"}, false},
			{[]any{"input", 0, "role"}, "user"},
			{[]any{"input", 0, "content", 0, "type"}, "input_text"},
			{[]any{"input", 0, "content", 1, "image_url"}, "data:image/png;base64,iVBORw0KGgo="},
			{[]any{"input", 0, "content", 2, "image_url"}, "https://example.com/cat.jpg"},
			{[]any{"input", 1, "role"}, "assistant"},
			{[]any{"input", 1, "content"}, "Looking."},
			{[]any{"input", 2, "type"}, "function_call"},
			{[]any{"input", 2, "call_id"}, "call_a"},
			{[]any{"input", 2, "arguments"}, `{"commands":["head data.csv"]}`},
			{[]any{"input", 3, "type"}, "function_call"},
			{[]any{"input", 4, "type"}, "function_call_output"},
			{[]any{"input", 4, "call_id"}, "call_a"},
			{[]any{"input", 5, "output"}, "error: not found"},
			{[]any{"input", 6, "content", 0, "text"}, "And the sum?"},
			{[]any{"tools", 0, "type"}, "function"},
			{[]any{"tools", 0, "name"}, "shell"},
			{[]any{"tools", 0, "strict"}, false},
			{[]any{"tools", 1, "strict"}, true},
			{[]any{"tool_choice", "type"}, "function"},
			{[]any{"tool_choice", "name"}, "lookup"},
			{[]any{"parallel_tool_calls"}, false},
			{[]any{"max_output_tokens"}, 321.0},
			{[]any{"temperature"}, 0.25},
			{[]any{"stop"}, nil}, // Responses has no stop sequences
			{[]any{"user"}, "user-7"},
		},
		gateway.APIMessages: {
			{[]any{"model"}, "m1"},
			{[]any{"system", 0, "text"}, "You are terse."},
			{[]any{"max_tokens"}, 321.0},
			{[]any{"messages", 0, "content", 0, "text"}, "What is in this picture and my CSV?"},
			{[]any{"messages", 0, "content", 1, "source", "type"}, "base64"},
			{[]any{"messages", 0, "content", 1, "source", "media_type"}, "image/png"},
			{[]any{"messages", 0, "content", 2, "source", "url"}, "https://example.com/cat.jpg"},
			{[]any{"messages", 1, "role"}, "assistant"},
			{[]any{"messages", 1, "content", 1, "type"}, "tool_use"},
			{[]any{"messages", 1, "content", 1, "input", "commands", 0}, "head data.csv"},
			// the tool results and the next user text merge into one user message, results first
			{[]any{"messages", 2, "role"}, "user"},
			{[]any{"messages", 2, "content", 0, "type"}, "tool_result"},
			{[]any{"messages", 2, "content", 0, "tool_use_id"}, "call_a"},
			{[]any{"messages", 2, "content", 1, "is_error"}, true},
			{[]any{"messages", 2, "content", 1, "content", 0, "text"}, "not found"},
			{[]any{"messages", 2, "content", 2, "text"}, "And the sum?"},
			{[]any{"messages", 3}, nil},
			{[]any{"tools", 0, "input_schema", "type"}, "object"},
			{[]any{"tools", 0, "input_schema", "additionalProperties"}, false},
			{[]any{"tools", 0, "input_schema", "required", 0}, "commands"},
			{[]any{"tools", 1, "strict"}, true},
			{[]any{"tool_choice", "type"}, "tool"},
			{[]any{"tool_choice", "name"}, "lookup"},
			{[]any{"tool_choice", "disable_parallel_tool_use"}, true},
			{[]any{"temperature"}, 0.25},
			{[]any{"top_p"}, 0.9},
			{[]any{"stop_sequences", 0}, "END"},
			{[]any{"metadata", "user_id"}, "user-7"},
		},
		gateway.APIGemini: {
			{[]any{"systemInstruction", "parts", 0, "text"}, "You are terse."},
			{[]any{"contents", 0, "role"}, "user"},
			{[]any{"contents", 0, "parts", 0, "text"}, "What is in this picture and my CSV?"},
			{[]any{"contents", 0, "parts", 1, "inlineData", "mimeType"}, "image/png"},
			{[]any{"contents", 0, "parts", 1, "inlineData", "data"}, "iVBORw0KGgo="},
			{[]any{"contents", 0, "parts", 2, "fileData", "fileUri"}, "https://example.com/cat.jpg"},
			{[]any{"contents", 1, "role"}, "model"},
			{[]any{"contents", 1, "parts", 0, "text"}, "Looking."},
			{[]any{"contents", 1, "parts", 1, "functionCall", "id"}, "call_a"},
			{[]any{"contents", 1, "parts", 1, "functionCall", "args", "commands", 0}, "head data.csv"},
			{[]any{"contents", 1, "parts", 2, "functionCall", "name"}, "lookup"},
			// the results and the next user text merge into one user content
			{[]any{"contents", 2, "role"}, "user"},
			{[]any{"contents", 2, "parts", 0, "functionResponse", "name"}, "shell"},
			{[]any{"contents", 2, "parts", 0, "functionResponse", "id"}, "call_a"},
			{[]any{"contents", 2, "parts", 1, "functionResponse", "response", "error"}, "not found"},
			{[]any{"contents", 2, "parts", 2, "text"}, "And the sum?"},
			{[]any{"contents", 3}, nil},
			{[]any{"tools", 0, "functionDeclarations", 0, "name"}, "shell"},
			{[]any{"tools", 0, "functionDeclarations", 0, "description"}, "Run commands"},
			{[]any{"tools", 0, "functionDeclarations", 0, "parametersJsonSchema", "additionalProperties"}, false},
			{[]any{"toolConfig", "functionCallingConfig", "mode"}, "ANY"},
			{[]any{"toolConfig", "functionCallingConfig", "allowedFunctionNames", 0}, "lookup"},
			{[]any{"generationConfig", "maxOutputTokens"}, 321.0},
			{[]any{"generationConfig", "temperature"}, 0.25},
			{[]any{"generationConfig", "stopSequences", 0}, "END"},
		},
	}
	for _, api := range apis {
		for _, stream := range []bool{false, true} {
			name := api
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				if _, err := collect(t, adapter(api, srv.URL, 0), conversation(), stream); err != nil {
					t.Fatal(err)
				}
				rec := srv.Last()
				if rec.Status != 200 || rec.API != api || rec.Stream != stream {
					t.Fatalf("recorded %s status %d stream %v", rec.API, rec.Status, rec.Stream)
				}
				for _, c := range checks[api] {
					if got := gatewaytest.JSONAt(rec.Body, c.path...); !reflect.DeepEqual(got, c.want) {
						t.Errorf("%v = %#v, want %#v", c.path, got, c.want)
					}
				}
				if stream && api != gateway.APIGemini && gatewaytest.JSONAt(rec.Body, "stream") != true {
					t.Error("stream not set")
				}
				switch api {
				case gateway.APIChat, gateway.APIResponses:
					if rec.Header.Get("Authorization") != "Bearer sk-test" {
						t.Errorf("Authorization %q", rec.Header.Get("Authorization"))
					}
				case gateway.APIMessages:
					if rec.Header.Get("x-api-key") != "sk-test" || rec.Header.Get("anthropic-version") != AnthropicVersion {
						t.Errorf("headers %v", rec.Header)
					}
				case gateway.APIGemini:
					if rec.Header.Get("x-goog-api-key") != "sk-test" || rec.Header.Get("Authorization") != "" {
						t.Errorf("headers %v", rec.Header)
					}
					if want := map[bool]string{false: "/v1beta/models/m1:generateContent", true: "/v1beta/models/m1:streamGenerateContent"}[stream]; rec.Path != want {
						t.Errorf("path %q, want %q", rec.Path, want)
					}
				}
			})
		}
	}
}

// TestToolChoice: each mode in each API's words.
func TestToolChoice(t *testing.T) {
	srv := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{{Text: "ok"}}, Repeat: true})
	defer srv.Close()
	want := map[string]map[string]any{
		gateway.APIChat:      {gateway.ChoiceAuto: nil, gateway.ChoiceNone: "none", gateway.ChoiceRequired: "required"},
		gateway.APIResponses: {gateway.ChoiceAuto: nil, gateway.ChoiceNone: "none", gateway.ChoiceRequired: "required"},
		gateway.APIMessages: {gateway.ChoiceAuto: nil, gateway.ChoiceNone: map[string]any{"type": "none"},
			gateway.ChoiceRequired: map[string]any{"type": "any"}},
		gateway.APIGemini: {gateway.ChoiceAuto: nil, gateway.ChoiceNone: map[string]any{"functionCallingConfig": map[string]any{"mode": "NONE"}},
			gateway.ChoiceRequired: map[string]any{"functionCallingConfig": map[string]any{"mode": "ANY"}}},
	}
	choiceKey := func(api string) string {
		if api == gateway.APIGemini {
			return "toolConfig"
		}
		return "tool_choice"
	}
	for _, api := range apis {
		for _, mode := range []string{gateway.ChoiceAuto, gateway.ChoiceNone, gateway.ChoiceRequired} {
			req := &gateway.Request{Model: "m", Messages: []gateway.Message{userText("hi")},
				Tools: []gateway.Tool{{Name: "shell"}}, ToolChoice: gateway.ToolChoice{Mode: mode}}
			if _, err := adapter(api, srv.URL, 0).Turn(context.Background(), req, nil); err != nil {
				t.Fatalf("%s %s: %v", api, mode, err)
			}
			if got := gatewaytest.JSONAt(srv.Last().Body, choiceKey(api)); !reflect.DeepEqual(got, want[api][mode]) {
				t.Errorf("%s %s: tool_choice %#v, want %#v", api, mode, got, want[api][mode])
			}
		}
		// No tools: no tool_choice at all (the APIs refuse one without tools).
		req := &gateway.Request{Model: "m", Messages: []gateway.Message{userText("hi")}, ToolChoice: gateway.ToolChoice{Mode: gateway.ChoiceNone}}
		if _, err := adapter(api, srv.URL, 0).Turn(context.Background(), req, nil); err != nil {
			t.Fatalf("%s no tools: %v", api, err)
		}
		if got := gatewaytest.JSONAt(srv.Last().Body, choiceKey(api)); got != nil {
			t.Errorf("%s: tool_choice %v without tools", api, got)
		}
	}
}

// TestInvalidArgumentsReplay: a call whose arguments are not JSON (the
// model wrote them) replays in a form every API accepts.
func TestInvalidArgumentsReplay(t *testing.T) {
	srv := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{{Text: "ok"}}, Repeat: true})
	defer srv.Close()
	for _, api := range apis {
		req := &gateway.Request{Model: "m", Messages: []gateway.Message{userText("hi"),
			{Role: gateway.RoleAssistant, Parts: []gateway.Part{{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "c1", Name: "shell", Arguments: `{"commands": [`}}}},
			{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "c1", Content: "error: arguments are not JSON", IsError: true}}}},
		}, Tools: []gateway.Tool{{Name: "shell"}}}
		if _, err := adapter(api, srv.URL, 0).Turn(context.Background(), req, nil); err != nil {
			t.Errorf("%s: %v", api, err)
		}
	}
}

// TestUpstreamErrors: the upstream's status, type and message come back
// as an *UpstreamError, streamed and not.
func TestUpstreamErrors(t *testing.T) {
	srv := scripted.NewServer(&scripted.Script{Models: map[string][]scripted.Turn{
		"limited":    {{Error: &scripted.Error{Status: 429, Type: "rate_limit_error", Message: "slow down, please"}}},
		"overloaded": {{Error: &scripted.Error{Status: 529, Message: "Overloaded"}}},
		"plain":      {{Error: &scripted.Error{Status: 503, Body: "upstream connect error"}}},
		"midstream":  {{Error: &scripted.Error{Status: 529, Type: "overloaded_error", Message: "Overloaded mid-stream", MidStream: true}}},
	}})
	defer srv.Close()
	cases := []struct {
		model  string
		status int
		typ    string // "" for any
		msg    string
	}{
		{"limited", 429, "rate_limit_error", "slow down, please"},
		{"overloaded", 529, "", "Overloaded"},
		{"plain", 503, "", "upstream connect error"},
		{"unknown-model", 404, "", "unknown-model"},
		{"midstream", 529, "overloaded_error", "Overloaded mid-stream"},
	}
	for _, api := range apis {
		for _, stream := range []bool{false, true} {
			for _, c := range cases {
				req := &gateway.Request{Model: c.model, Messages: []gateway.Message{userText("hi")}}
				_, err := collect(t, adapter(api, srv.URL, 0), req, stream)
				ue, ok := gateway.AsUpstreamError(err)
				if !ok {
					t.Errorf("%s %s stream=%v: %v, want an UpstreamError", api, c.model, stream, err)
					continue
				}
				status, typ := c.status, c.typ
				if c.model == "midstream" && stream && api == gateway.APIResponses {
					status = http.StatusBadGateway // a Responses error event carries no status
				}
				if api == gateway.APIGemini && typ != "" {
					// Google's envelope has a status word, not a type
					typ = map[string]string{"rate_limit_error": "RESOURCE_EXHAUSTED", "overloaded_error": "INTERNAL"}[typ]
				}
				if ue.Status != status || (typ != "" && ue.Type != typ) || !strings.Contains(ue.Message, c.msg) {
					t.Errorf("%s %s stream=%v: %+v", api, c.model, stream, ue)
				}
			}
		}
	}
}

// TestConnectionRefused: nothing listens → 502, at once.
func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, api := range apis {
		for _, stream := range []bool{false, true} {
			_, err := collect(t, adapter(api, "http://"+addr, 0), &gateway.Request{Model: "m", Messages: []gateway.Message{userText("hi")}}, stream)
			if ue, ok := gateway.AsUpstreamError(err); !ok || ue.Status != http.StatusBadGateway {
				t.Errorf("%s stream=%v: %v, want a 502", api, stream, err)
			}
		}
	}
}

// TestTimeout: an upstream slower than the provider's timeout is a 504,
// whether it never answers, answers late, or stalls mid-stream; the
// upstream sees the request go away.
func TestTimeout(t *testing.T) {
	srv := scripted.NewServer(&scripted.Script{Models: map[string][]scripted.Turn{
		"hang":    {{Hang: true}},
		"late":    {{Text: "late", Delay: scripted.Duration(5 * time.Second)}},
		"stalled": {{Text: "a b c d e f g h i j k l m n o p", HangStream: true}},
	}})
	defer srv.Close()
	for _, api := range apis {
		for _, stream := range []bool{false, true} {
			for _, model := range []string{"hang", "late", "stalled"} {
				srv.Reset()
				_, err := collect(t, adapter(api, srv.URL, 300*time.Millisecond), &gateway.Request{Model: model, Messages: []gateway.Message{userText("hi")}}, stream)
				if ue, ok := gateway.AsUpstreamError(err); !ok || ue.Status != http.StatusGatewayTimeout {
					t.Errorf("%s %s stream=%v: %v, want a 504", api, model, stream, err)
					continue
				}
				select {
				case <-srv.Last().Gone:
				case <-time.After(10 * time.Second):
					t.Errorf("%s %s stream=%v: the upstream never saw the request go away", api, model, stream)
				}
			}
		}
	}
}

// TestCancel: ctx ending returns ctx's error and cancels the upstream
// request (the scripted server sees the client go away).
func TestCancel(t *testing.T) {
	srv := scripted.NewServer(&scripted.Script{Models: map[string][]scripted.Turn{
		"hang":    {{Hang: true}},
		"stalled": {{Text: "a b c d e f g h i j k l m n o p", HangStream: true}},
	}})
	defer srv.Close()
	for _, api := range apis {
		for _, stream := range []bool{false, true} {
			for _, model := range []string{"hang", "stalled"} {
				srv.Reset()
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				var onDelta func(gateway.Delta)
				if stream {
					onDelta = func(gateway.Delta) {}
				}
				go func() {
					_, err := adapter(api, srv.URL, time.Hour).Turn(ctx, &gateway.Request{Model: model, Messages: []gateway.Message{userText("hi")}}, onDelta)
					done <- err
				}()
				// wait for the upstream to have the request
				for i := 0; srv.Last() == nil || srv.Last().Turn < 0; i++ {
					if i > 1000 {
						t.Fatal("the request never arrived")
					}
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
				select {
				case err := <-done:
					if !errors.Is(err, context.Canceled) {
						t.Errorf("%s %s stream=%v: %v, want context.Canceled", api, model, stream, err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s %s stream=%v: Turn did not return after cancel", api, model, stream)
				}
				select {
				case <-srv.Last().Gone:
				case <-time.After(10 * time.Second):
					t.Errorf("%s %s stream=%v: the upstream never saw the request go away", api, model, stream)
				}
			}
		}
	}
}

// TestToolResultImages: images in a tool result reach each API where it
// carries them (Chat: a user message after the tool messages).
func TestToolResultImages(t *testing.T) {
	srv := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{{Text: "ok"}}, Repeat: true})
	defer srv.Close()
	want := map[string][]any{
		gateway.APIChat:      {"messages", 3, "content", 1, "image_url", "url"},
		gateway.APIResponses: {"input", 2, "output", 1, "image_url"},
		gateway.APIMessages:  {"messages", 2, "content", 0, "content", 1, "source", "data"},
		gateway.APIGemini:    {"contents", 2, "parts", 1, "inlineData", "data"},
	}
	for _, api := range apis {
		req := &gateway.Request{Model: "m", Messages: []gateway.Message{userText("plot it"),
			{Role: gateway.RoleAssistant, Parts: []gateway.Part{{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "c1", Name: "shell", Arguments: `{}`}}}},
			{Role: gateway.RoleUser, Parts: []gateway.Part{{Kind: gateway.PartToolResult, Result: &gateway.ToolResult{CallID: "c1", Content: "plotted",
				Images: []gateway.Image{{MediaType: "image/png", Data: "iVBORw0KGgo="}}}}}},
		}, Tools: []gateway.Tool{{Name: "shell"}}}
		if _, err := adapter(api, srv.URL, 0).Turn(context.Background(), req, nil); err != nil {
			t.Fatalf("%s: %v", api, err)
		}
		got := gatewaytest.JSONAt(srv.Last().Body, want[api]...)
		if s, _ := got.(string); !strings.Contains(s, "iVBORw0KGgo=") {
			t.Errorf("%s: %v = %v in %s", api, want[api], got, srv.Last().Raw)
		}
	}
}

// TestChatStreamWholeCalls: a Chat server that streams whole tool calls,
// all at index 0 (older Ollama), still yields one part per call.
func TestChatStreamWholeCalls(t *testing.T) {
	srv := httptestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			`{"id":"x","model":"llama","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`,
			`{"id":"x","model":"llama","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]}}]}`,
			`{"id":"x","model":"llama","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`[DONE]`,
		} {
			w.Write([]byte("data: " + c + "\n\n"))
		}
	})
	turn, err := collect(t, adapter(gateway.APIChat, srv, 0), &gateway.Request{Model: "llama", Messages: []gateway.Message{userText("hi")}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []gateway.Part{
		{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "call_a", Name: "f", Arguments: `{"a":1}`}},
		{Kind: gateway.PartToolCall, Call: &gateway.ToolCall{ID: "call_b", Name: "g", Arguments: `{}`}},
	}
	if !reflect.DeepEqual(turn.Parts, want) || turn.Stop != gateway.StopToolUse {
		t.Errorf("%s %s", dump(turn.Parts), turn.Stop)
	}
}

// TestTruncatedStreams: a stream that ends before its last event is a 502,
// not a partial turn.
func TestTruncatedStreams(t *testing.T) {
	bodies := map[string]string{
		gateway.APIChat:      "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
		gateway.APIResponses: "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"r\",\"status\":\"in_progress\",\"output\":[]}}\n\n",
		gateway.APIMessages:  "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":1}}}\n\n",
	}
	for _, api := range apis {
		srv := httptestServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte(bodies[api]))
		})
		_, err := collect(t, adapter(api, srv, 0), &gateway.Request{Model: "m", Messages: []gateway.Message{userText("hi")}}, true)
		if ue, ok := gateway.AsUpstreamError(err); !ok || ue.Status != http.StatusBadGateway {
			t.Errorf("%s: %v, want a 502", api, err)
		}
		// and garbage instead of JSON
		srv = httptestServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>oops</html>")) })
		_, err = collect(t, adapter(api, srv, 0), &gateway.Request{Model: "m", Messages: []gateway.Message{userText("hi")}}, false)
		if ue, ok := gateway.AsUpstreamError(err); !ok || ue.Status != http.StatusBadGateway {
			t.Errorf("%s garbage: %v, want a 502", api, err)
		}
	}
}

func httptestServer(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestEveryAPI: one script, one request, the three flavours.
func TestEveryAPI(t *testing.T) {
	srv := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{{Text: "5050"}}})
	defer srv.Close()
	ps := EveryAPI(srv.URL, 0)
	for _, api := range apis {
		m, err := ps.Resolve(api + "/sum-model")
		if err != nil {
			t.Fatal(err)
		}
		turn, err := m.Upstream.Turn(context.Background(), &gateway.Request{Model: m.Name, Messages: []gateway.Message{userText("sum 1..100")}}, nil)
		if err != nil || turn.Parts[0].Text != "5050" || srv.Last().API != api || srv.Last().Model != "sum-model" {
			t.Errorf("%s: %v %+v", api, err, srv.Last())
		}
	}
}
