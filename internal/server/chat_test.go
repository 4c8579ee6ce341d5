package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
)

// chatEnv is a server whose provider "local" (chat_completions) and
// "claude" (messages) are the scripted upstream, and "down" a
// chat_completions provider where nothing listens; the alias
// gemini-2.5-flash is local/m1.
func chatEnv(t *testing.T, script *scripted.Script) (*env, *scripted.Server) {
	t.Helper()
	return chatEnvTB(t, script)
}

func chatEnvTB(t testing.TB, script *scripted.Script, mod ...func(*Config)) (*env, *scripted.Server) {
	t.Helper()
	up := scripted.NewServer(script)
	t.Cleanup(up.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	models := upstream.NewProviders(
		upstream.Provider{Name: "local", API: gateway.APIChat, Endpoint: upstream.Endpoint{BaseURL: up.URL + "/v1", APIKey: "sk-upstream", Timeout: 5 * time.Second}, Models: []string{"m1", "qwen3"}},
		upstream.Provider{Name: "claude", API: gateway.APIMessages, Endpoint: upstream.Endpoint{BaseURL: up.URL}, Models: []string{"sonnet"}},
		upstream.Provider{Name: "oai", API: gateway.APIResponses, Endpoint: upstream.Endpoint{BaseURL: up.URL + "/v1"}},
		upstream.Provider{Name: "down", API: gateway.APIChat, Endpoint: upstream.Endpoint{BaseURL: down}},
	)
	if err := models.SetAliases(map[string]string{"gemini-2.5-flash": "local/m1"}); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "crun", "busybox", append([]func(*Config){func(c *Config) { c.Models = models }}, mod...)...)
	return e, up
}

func openaiClient(e *env, base string) openai.Client {
	return openai.NewClient(option.WithBaseURL(e.url+base), option.WithAPIKey(e.keyA), option.WithMaxRetries(0))
}

// TestChatPassThrough drives the pass-through with the official openai-go
// client, unchanged, against the real server and the scripted upstream.
func TestChatPassThrough(t *testing.T) {
	e, up := chatEnv(t, &scripted.Script{Models: map[string][]scripted.Turn{
		"sonnet": {{Text: "unused"}, {Text: "Paris: 18C, sunny. Anything else?", Usage: scripted.Usage{InputTokens: 70, OutputTokens: 9},
			ToolCalls: []scripted.ToolCall{{ID: "call_l", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Lyon"}`)}}}},
		"gpt": {{Text: "unused"}, {Text: "Paris: 18C, sunny. Anything else?", Usage: scripted.Usage{InputTokens: 70, OutputTokens: 9},
			ToolCalls: []scripted.ToolCall{{ID: "call_l", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Lyon"}`)}}}},
		"m1": {{Text: "Hello from the scripted model, streamed in pieces.", Usage: scripted.Usage{InputTokens: 12, OutputTokens: 9, CacheReadTokens: 4}}},
		"qwen3": {{Text: "Checking.", ToolCalls: []scripted.ToolCall{
			{ID: "call_w", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}}}},
		"limited": {{Error: &scripted.Error{Status: 429, Type: "rate_limit_exceeded", Message: "Rate limit reached for requests"}}},
		"stall":   {{Text: "a b c d e f g h i j k l m n o p q r s t", HangStream: true}},
		"broken":  {{Text: "a b c", Error: &scripted.Error{Status: 529, Type: "overloaded_error", Message: "Overloaded", MidStream: true}}},
	}})
	ctx := context.Background()
	for _, base := range []string{"/v1/", "/api/v1/"} {
		client := openaiClient(e, base)
		t.Run("01 plain"+base, func(t *testing.T) {
			cc, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:       "local/m1",
				Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Hi")},
				Temperature: openai.Float(0.3),
			})
			if err != nil {
				t.Fatal(err)
			}
			if cc.Choices[0].Message.Content != "Hello from the scripted model, streamed in pieces." || cc.Usage.PromptTokens != 12 ||
				cc.Usage.PromptTokensDetails.CachedTokens != 4 || cc.Choices[0].FinishReason != "stop" {
				t.Errorf("answer %s", cc.RawJSON())
			}
			rec := up.Last()
			if gatewaytest.JSONAt(rec.Body, "model") != "m1" || gatewaytest.JSONAt(rec.Body, "temperature") != 0.3 || gatewaytest.JSONAt(rec.Body, "messages", 0, "content") != "Be brief." {
				t.Errorf("upstream got %s", rec.Raw)
			}
			if rec.Header.Get("Authorization") != "Bearer sk-upstream" {
				t.Errorf("upstream auth %q (the client's key must not be forwarded)", rec.Header.Get("Authorization"))
			}
		})
		t.Run("02 streamed"+base, func(t *testing.T) {
			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model:         "local/qwen3",
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			})
			acc := openai.ChatCompletionAccumulator{}
			chunks := 0
			for stream.Next() {
				acc.AddChunk(stream.Current())
				chunks++
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			msg := acc.Choices[0].Message
			if chunks < 5 || msg.Content != "Checking." || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].ID != "call_w" ||
				msg.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` || acc.Choices[0].FinishReason != "tool_calls" {
				t.Errorf("%d chunks accumulate to %+v", chunks, acc.ChatCompletion)
			}
			if gatewaytest.JSONAt(up.Last().Body, "stream") != true || gatewaytest.JSONAt(up.Last().Body, "model") != "qwen3" {
				t.Errorf("upstream got %s", up.Last().Raw)
			}
		})
	}

	client := openaiClient(e, "/v1/")
	t.Run("03 models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
			if m.Object != "model" || m.OwnedBy == "" || (m.ID == "gemini-2.5-flash" && m.OwnedBy != "local") {
				t.Errorf("model %s", m.RawJSON())
			}
		}
		if want := []string{"claude/sonnet", "gemini-2.5-flash", "local/m1", "local/qwen3"}; !slices.Equal(ids, want) {
			t.Errorf("models %v, want %v", ids, want)
		}
		// The alias is a model: the upstream gets its target's name.
		cc, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gemini-2.5-flash",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}})
		if err != nil || cc.Choices[0].Message.Content != "Hello from the scripted model, streamed in pieces." || gatewaytest.JSONAt(up.Last().Body, "model") != "m1" {
			t.Errorf("by alias: %v %+v, upstream got %s", err, cc, up.Last().Raw)
		}
	})

	// Errors, each in OpenAI's envelope with its status.
	shellTool := openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: openai.FunctionDefinitionParam{Name: "x"}}}
	shellTool.OfFunction.SetExtraFields(map[string]any{"type": "shell"})
	cases := []struct {
		name   string
		params openai.ChatCompletionNewParams
		status int
		want   []string
	}{
		{"04 upstream 429", openai.ChatCompletionNewParams{Model: "local/limited"}, 429, []string{"Rate limit reached for requests"}},
		{"05 unknown provider", openai.ChatCompletionNewParams{Model: "nope/m"}, 404, []string{`no provider "nope"`, "claude, down, local, oai"}},
		{"06 no provider prefix", openai.ChatCompletionNewParams{Model: "gpt-5"}, 400, []string{"provider/model"}},
		{"07 shell server tool", openai.ChatCompletionNewParams{Model: "local/m1", Tools: []openai.ChatCompletionToolUnionParam{shellTool}}, 400, []string{"Responses API", "Messages API"}},
		{"09 connection refused", openai.ChatCompletionNewParams{Model: "down/m"}, 502, []string{"connection"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.params.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}
			_, err := client.Chat.Completions.New(ctx, c.params)
			var oe *openai.Error
			if !errors.As(err, &oe) {
				t.Fatalf("error %v", err)
			}
			if oe.StatusCode != c.status || oe.Type == "" {
				t.Errorf("status %d type %q, want %d: %s", oe.StatusCode, oe.Type, c.status, oe.RawJSON())
			}
			for _, w := range c.want {
				if !strings.Contains(oe.Message, w) {
					t.Errorf("message %q lacks %q", oe.Message, w)
				}
			}
		})
	}
	t.Run("10 shell tool types", func(t *testing.T) {
		for _, typ := range []string{"shell", "local_shell", "shellgate:shell", "openrouter:shell", "shellgate:bash", "openrouter:bash", "code_execution_20250825"} {
			st, body := e.do("POST", "/v1/chat/completions", e.keyA, map[string]any{"model": "local/m1", "messages": []any{map[string]any{"role": "user", "content": "hi"}},
				"tools": []any{map[string]any{"type": typ}}})
			if st != 400 || !strings.Contains(string(body), "Responses API") || !strings.Contains(string(body), "Messages API") {
				t.Errorf("%s: %d %s", typ, st, body)
			}
		}
		// A client function named shell is an ordinary tool.
		st, body := e.do("POST", "/v1/chat/completions", e.keyA, map[string]any{"model": "local/m1", "messages": []any{map[string]any{"role": "user", "content": "hi"}},
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "shell", "parameters": map[string]any{"type": "object"}}}}})
		if st != 200 {
			t.Errorf("function named shell: %d %s", st, body)
		}
	})
	t.Run("11 hostile bodies", func(t *testing.T) {
		for _, b := range []string{``, `[]`, `{"model":`, `{"model":5,"messages":[]}`, `{"model":"local/m1","tools":"x"}`, `null`,
			`{"model":"claude/sonnet","messages":"x"}`, `{"model":"claude/sonnet","messages":[]}`,
			`{"model":"claude/sonnet","messages":[{"role":"wizard","content":"x"}]}`, `{"model":"oai/gpt","messages":[{"role":"user","content":"x"}],"n":3}`,
			`{"model":"oai/gpt","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, `{"model":"oai/gpt","messages":[{"role":"user","content":"x"}],"stop":5}`} {
			st, body := e.do("POST", "/v1/chat/completions", e.keyA, b)
			var env struct {
				Error struct{ Message, Type string } `json:"error"`
			}
			if st != 400 || json.Unmarshal(body, &env) != nil || env.Error.Type != "invalid_request_error" || env.Error.Message == "" {
				t.Errorf("%q: %d %s", b, st, body)
			}
		}
		st, body := e.do("POST", "/v1/chat/completions", e.keyA, `{"model":"local/m1","messages":[{"role":"user","content":"`+strings.Repeat("a", maxChatBody)+`"}]}`)
		if st != 413 || !strings.Contains(string(body), `"error"`) {
			t.Errorf("oversized: %d %.200s", st, body)
		}
		st, body = e.do("POST", "/v1/chat/completions", "sk-wrong", `{"model":"local/m1"}`)
		if st != 401 || !strings.Contains(string(body), `"authentication_error"`) {
			t.Errorf("bad key: %d %s", st, body)
		}
		// the upstream's own 400 comes back as it is
		st, body = e.do("POST", "/v1/chat/completions", e.keyA, `{"model":"local/m1","messages":[{"role":"tool","tool_call_id":"x","content":"1"}]}`)
		if st != 400 || !strings.Contains(string(body), "preceeding message with 'tool_calls'") {
			t.Errorf("upstream 400: %d %s", st, body)
		}
	})
	t.Run("13 other APIs translated", func(t *testing.T) {
		conv := []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("Be brief."),
			openai.UserMessage("Weather in Paris?"),
			{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{
				{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_p", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}}}},
			openai.ToolMessage("18C, sunny", "call_p"),
		}
		weather := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather", Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})
		for _, model := range []string{"claude/sonnet", "oai/gpt"} {
			p := openai.ChatCompletionNewParams{Model: model, Messages: conv, Tools: []openai.ChatCompletionToolUnionParam{weather}, MaxCompletionTokens: openai.Int(200)}
			cc, err := client.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatalf("%s: %v", model, err)
			}
			msg := cc.Choices[0].Message
			if msg.Content != "Paris: 18C, sunny. Anything else?" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Arguments != `{"city":"Lyon"}` ||
				cc.Choices[0].FinishReason != "tool_calls" || cc.Model != model || cc.Usage.PromptTokens != 70 {
				t.Errorf("%s: %s", model, cc.RawJSON())
			}
			rec := up.Last()
			if rec.Status != 200 || rec.Turn != 1 {
				t.Errorf("%s: upstream %s answered %d turn %d to %s", model, rec.API, rec.Status, rec.Turn, rec.Raw)
			}
			p.StreamOptions.IncludeUsage = openai.Bool(true)
			s := client.Chat.Completions.NewStreaming(ctx, p)
			acc := openai.ChatCompletionAccumulator{}
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatalf("%s stream: %v", model, err)
			}
			if m := acc.Choices[0].Message; m.Content != msg.Content || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Arguments != `{"city":"Lyon"}` ||
				m.ToolCalls[0].ID != msg.ToolCalls[0].ID || acc.Choices[0].FinishReason != "tool_calls" || acc.Usage.PromptTokens != 70 {
				t.Errorf("%s stream: %+v", model, acc.ChatCompletion)
			}
		}
		// The upstream's errors keep their status.
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "claude/limited", Messages: conv[:2]})
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.StatusCode != 429 {
			t.Errorf("translated 429: %v", err)
		}
	})
	t.Run("14 error.code on /api/v1 is the status", func(t *testing.T) {
		// OpenRouter's envelope: @openrouter/sdk's error classes parse
		// error.code as an integer. /v1 keeps OpenAI's string or null.
		msgs := []any{map[string]any{"role": "user", "content": "hi"}}
		for _, c := range []struct {
			name, method, path, key string
			body                    any
			status                  int
		}{
			{"bad key", "POST", "chat/completions", "sk-wrong", map[string]any{"model": "local/m1", "messages": msgs}, 401},
			{"unknown provider", "POST", "chat/completions", e.keyA, map[string]any{"model": "nope/m", "messages": msgs}, 404},
			{"not JSON", "POST", "chat/completions", e.keyA, `{"model":`, 400},
			{"server tool", "POST", "chat/completions", e.keyA, map[string]any{"model": "local/m1", "messages": msgs, "tools": []any{map[string]any{"type": "shell"}}}, 400},
			{"translated bad body", "POST", "chat/completions", e.keyA, map[string]any{"model": "claude/sonnet", "messages": "x"}, 400},
			{"translated upstream 429", "POST", "chat/completions", e.keyA, map[string]any{"model": "claude/limited", "messages": msgs}, 429},
			{"models, bad key", "GET", "models", "sk-wrong", nil, 401},
		} {
			st, b := e.do(c.method, "/api/v1/"+c.path, c.key, c.body)
			if msg, _, code := statusCodeError(t, st, b); st != c.status || code != c.status || msg == "" {
				t.Errorf("%s on /api/v1: %d %s", c.name, st, b)
			}
			st, b = e.do(c.method, "/v1/"+c.path, c.key, c.body)
			var env struct {
				Error struct {
					Code *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &env); st != c.status || err != nil {
				t.Errorf("%s on /v1: %d %s (%v)", c.name, st, b, err)
			}
		}
		// A translated stream whose upstream fails before any text answers
		// the upstream's status, the code that status under /api/v1.
		for path, want := range map[string]string{"/api/v1/chat/completions": `"code":529}`, "/v1/chat/completions": `"code":"overloaded_error"}`} {
			st, b := e.do("POST", path, e.keyA, map[string]any{"model": "claude/broken", "messages": msgs, "stream": true})
			if st != 529 || !strings.Contains(string(b), want) {
				t.Errorf("streamed upstream error on %s: %d %s", path, st, b)
			}
		}
	})
	t.Run("12 client disconnect cancels the upstream", func(t *testing.T) {
		up.Reset()
		cctx, cancel := context.WithCancel(ctx)
		stream := client.Chat.Completions.NewStreaming(cctx, openai.ChatCompletionNewParams{Model: "local/stall",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		if !stream.Next() {
			t.Fatalf("no first chunk: %v", stream.Err())
		}
		cancel()
		for stream.Next() {
		}
		stream.Close()
		select {
		case <-up.Last().Gone:
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream request was not cancelled")
		}
	})
}

// TestChatNoProviders: without a provider config the routes still answer
// in OpenAI's envelope.
func TestChatNoProviders(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	st, body := e.do("POST", "/api/v1/chat/completions", e.keyA, map[string]any{"model": "local/m", "messages": []any{}})
	if st != 404 || !strings.Contains(string(body), "--config") {
		t.Errorf("%d %s", st, body)
	}
	st, body = e.do("GET", "/v1/models", e.keyA, nil)
	if st != 200 || strings.TrimSpace(string(body)) != `{"data":[],"object":"list"}` {
		t.Errorf("%d %s", st, body)
	}
	if st, _ := e.do("GET", "/v1/models", "", nil); st != http.StatusUnauthorized {
		t.Errorf("no key: %d", st)
	}
}
