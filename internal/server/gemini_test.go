package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/gateway/gemini"
	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
)

// The Gemini dialect, driven by the official genai client, unchanged but
// for its base URL, against the scripted model of every upstream flavour.

func geminiClient(t *testing.T, e *env, key string) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(t.Context(), &genai.ClientConfig{APIKey: key, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: e.url + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// geminiSumScript runs print(sum(range(1,101))) through whichever code tool
// the request offers, then answers with its stdout.
func geminiSumScript() *scripted.Script {
	shell, _ := json.Marshal(map[string]any{"commands": []string{sumPython}})
	return &scripted.Script{Turns: []scripted.Turn{
		{Text: "Let me compute that.", ToolCalls: []scripted.ToolCall{{Name: "code_execution|shell", Arguments: shell,
			ArgumentsFor: map[string]json.RawMessage{"code_execution": json.RawMessage(`{"code":"print(sum(range(1,101)))"}`)}}},
			Usage: scripted.Usage{InputTokens: 100, OutputTokens: 20}},
		{Text: "The sum is {{last_tool_stdout}}", Usage: scripted.Usage{InputTokens: 150, OutputTokens: 10}},
	}, Models: map[string][]scripted.Turn{
		// a replayed run: two assistant turns in the history, then this
		"replay": {{Text: "-"}, {Text: "-"}, {Text: "still {{last_tool_stdout}}"}},
	}}
}

// partKinds names each part: text, code, result:OUTCOME, call:NAME.
func partKinds(parts []*genai.Part) (kinds []string, text string) {
	for _, p := range parts {
		switch {
		case p.ExecutableCode != nil:
			kinds = append(kinds, "code:"+string(p.ExecutableCode.Language))
		case p.CodeExecutionResult != nil:
			kinds = append(kinds, "result:"+string(p.CodeExecutionResult.Outcome))
			text += p.CodeExecutionResult.Output
		case p.FunctionCall != nil:
			kinds = append(kinds, "call:"+p.FunctionCall.Name)
		case p.Text != "":
			if len(kinds) == 0 || kinds[len(kinds)-1] != "text" {
				kinds = append(kinds, "text")
			}
			text += p.Text
		}
	}
	return kinds, text
}

func TestGeminiCodeExecution(t *testing.T) {
	model := scripted.NewServer(geminiSumScript())
	t.Cleanup(model.Close)
	e := newEnv(t, "crun", "default", func(c *Config) { c.Models = upstream.EveryAPI(model.URL, 30*time.Second) })
	client := geminiClient(t, e, e.keyA)
	cfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{CodeExecution: &genai.ToolCodeExecution{}}}}
	want := "[text code:PYTHON result:OUTCOME_OK text]"
	for _, fl := range []string{"chat_completions", "responses", "messages", "gemini"} {
		t.Run(fl, func(t *testing.T) {
			resp, err := client.Models.GenerateContent(t.Context(), fl+"/some-model", genai.Text("What is 1+2+...+100?"), cfg)
			if err != nil {
				t.Fatal(err)
			}
			kinds, text := partKinds(resp.Candidates[0].Content.Parts)
			if fmt.Sprint(kinds) != want || !strings.Contains(text, "5050\nThe sum is 5050") || resp.Candidates[0].FinishReason != genai.FinishReasonStop {
				t.Fatalf("parts %v %q finish %s", kinds, text, resp.Candidates[0].FinishReason)
			}
			code := resp.Candidates[0].Content.Parts[1].ExecutableCode.Code
			if code != "print(sum(range(1,101)))" || resp.UsageMetadata.PromptTokenCount != 250 || resp.UsageMetadata.CandidatesTokenCount != 30 {
				t.Fatalf("code %q usage %+v", code, resp.UsageMetadata)
			}

			// Streamed: the chunks add up to the same parts, in order.
			var parts []*genai.Part
			var last *genai.GenerateContentResponse
			for chunk, err := range client.Models.GenerateContentStream(t.Context(), fl+"/some-model", genai.Text("What is 1+2+...+100?"), cfg) {
				if err != nil {
					t.Fatal(err)
				}
				if len(chunk.Candidates) > 0 && chunk.Candidates[0].Content != nil {
					parts = append(parts, chunk.Candidates[0].Content.Parts...)
				}
				last = chunk
			}
			kinds, text = partKinds(parts)
			if fmt.Sprint(kinds) != want || !strings.Contains(text, "The sum is 5050") || last == nil ||
				last.Candidates[0].FinishReason != genai.FinishReasonStop || last.UsageMetadata.TotalTokenCount != 280 {
				t.Fatalf("streamed parts %v %q last %+v", kinds, text, last)
			}

			// The history replayed with the code run: the run reaches the
			// model as a call and its result, and is not run again.
			history := []*genai.Content{genai.NewContentFromText("What is 1+2+...+100?", genai.RoleUser), resp.Candidates[0].Content,
				genai.NewContentFromText("Thanks. And again?", genai.RoleUser)}
			again, err := client.Models.GenerateContent(t.Context(), fl+"/replay", history, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if kinds, text := partKinds(again.Candidates[0].Content.Parts); fmt.Sprint(kinds) != "[text]" || text != "still 5050" {
				t.Fatalf("replay: %v %q", kinds, text)
			}
		})
	}
}

func TestGeminiFunctionCalling(t *testing.T) {
	model := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{
		{ToolCalls: []scripted.ToolCall{{Name: "get_weather", Arguments: json.RawMessage(`{"city":"Oslo"}`)}}},
		{Text: "It is {{last_tool_output}}"},
	}})
	t.Cleanup(model.Close)
	e := newEnv(t, "crun", "busybox", func(c *Config) { c.Models = upstream.EveryAPI(model.URL, 30*time.Second) })
	client := geminiClient(t, e, e.keyA)
	cfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
		Name: "get_weather", Description: "Weather of a city",
		Parameters: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{"city": {Type: genai.TypeString}}, Required: []string{"city"}},
	}}}}}
	for _, fl := range []string{"responses", "gemini"} {
		model.Reset()
		q := genai.NewContentFromText("Weather in Oslo?", genai.RoleUser)
		resp, err := client.Models.GenerateContent(t.Context(), fl+"/m", []*genai.Content{q}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		fcs := resp.FunctionCalls()
		if len(fcs) != 1 || fcs[0].Name != "get_weather" || fcs[0].Args["city"] != "Oslo" || fcs[0].ID == "" {
			t.Fatalf("%s: function calls %+v", fl, fcs)
		}
		// The upstream saw the OpenAPI schema as JSON Schema.
		if !strings.Contains(string(model.Last().Raw), `"string"`) {
			t.Errorf("%s: schema types not lowered: %s", fl, model.Last().Raw)
		}
		answer := &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{genai.NewPartFromFunctionResponse("get_weather", map[string]any{"output": "sunny, 12°C"})}}
		answer.Parts[0].FunctionResponse.ID = fcs[0].ID
		resp, err = client.Models.GenerateContent(t.Context(), fl+"/m", []*genai.Content{q, resp.Candidates[0].Content, answer}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Text(); !strings.Contains(got, "sunny, 12°C") {
			t.Fatalf("%s: answer %q", fl, got)
		}
	}
}

func TestGeminiErrors(t *testing.T) {
	model := scripted.NewServer(geminiSumScript())
	t.Cleanup(model.Close)
	e := newEnv(t, "crun", "busybox", func(c *Config) { c.Models = upstream.EveryAPI(model.URL, 30*time.Second) })
	ctx := context.Background()
	check := func(name string, err error, code int, status string) {
		t.Helper()
		var ae genai.APIError
		if !errors.As(err, &ae) || ae.Code != code || ae.Status != status || ae.Message == "" {
			t.Errorf("%s: %v, want %d %s", name, err, code, status)
		}
	}
	client := geminiClient(t, e, e.keyA)
	_, err := client.Models.GenerateContent(ctx, "nope/m", genai.Text("hi"), nil)
	check("unknown provider", err, 404, "NOT_FOUND")
	_, err = client.Models.GenerateContent(ctx, "gemini/m", []*genai.Content{{Role: "robot", Parts: []*genai.Part{{Text: "hi"}}}}, nil)
	check("bad role", err, 400, "INVALID_ARGUMENT")
	_, err = client.Models.GenerateContent(ctx, "gemini/m", genai.Text("hi"), &genai.GenerateContentConfig{Tools: []*genai.Tool{{GoogleSearch: &genai.GoogleSearch{}}}})
	check("google search", err, 400, "INVALID_ARGUMENT")
	_, err = geminiClient(t, e, "sk-wrong").Models.GenerateContent(ctx, "gemini/m", genai.Text("hi"), nil)
	check("bad key", err, 401, "UNAUTHENTICATED")

	// Raw HTTP: ?key= works on these paths; a model id with a '/' is also
	// served without "models/" (as @ai-sdk/google sends it); a body that
	// is not JSON, an unknown method and every unrouted path under /v1beta
	// answer in Google's envelope (not the mux's plain text).
	hi := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1beta/models/gemini/m:generateContent?key=" + e.keyA, hi, 200},
		{"POST", "/v1beta/gemini/m:generateContent?key=" + e.keyA, hi, 200},
		{"POST", "/api/v1beta/responses/m:streamGenerateContent?alt=sse&key=" + e.keyA, hi, 200},
		{"POST", "/v1beta/models/gemini/m:generateContent?key=" + e.keyA, `{"contents":`, 400},
		{"POST", "/v1beta/models/gemini/m:countTokens?key=" + e.keyA, `{}`, 404},
		{"POST", "/v1beta/models/gemini/m:generateContent", `{}`, 401},
		{"POST", "/v1beta/nope/m:generateContent?key=" + e.keyA, hi, 404},
		{"POST", "/v1beta/?key=" + e.keyA, hi, 404},
		{"POST", "/v1beta/models/:generateContent?key=" + e.keyA, hi, 400},
		{"POST", "/v1beta/:generateContent?key=" + e.keyA, hi, 404},
		{"POST", "/v1beta/gemini/m:generateContent:x?key=" + e.keyA, hi, 404},
		{"POST", "/api/v1beta/files?key=" + e.keyA, hi, 404},
		{"GET", "/v1beta/models?key=" + e.keyA, "", 405},
		{"DELETE", "/api/v1beta/cachedContents/x", "", 405},
	} {
		req, _ := http.NewRequest(c.method, e.url+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Status  string `json:"status"`
			} `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.status != 200 && (env.Error.Code != c.status || env.Error.Status != gemini.StatusWord(c.status) || env.Error.Message == "")) {
			t.Errorf("%s %s: %d %+v", c.method, c.path, resp.StatusCode, env)
		}
	}
}
