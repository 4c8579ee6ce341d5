package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/broadcast"
	"github.com/shellgate/shellgate/internal/broadcast/otlptest"
	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
)

// Provider-native hosted tools (engine auto, issue 32 §1): a provider that
// declares native_tools runs the shell itself; the scripted upstream acts
// as one, answering with its own executed items (shell_call +
// shell_call_output, server_tool_use + bash_code_execution_tool_result,
// executableCode + codeExecutionResult), and the official SDKs read them
// back in their own API's shapes, streamed and not, on the same API and
// across APIs. engine shellgate and a provider's vendor_tools: sandbox keep
// the sandbox.

// nativeItems renders a Responses answer's output as "type" or
// "type:stdout" for the items that carry a command's output, with
// "@provider" or "@shellgate" for the container an item names (the
// scripted provider's is cntr_scripted).
func nativeItems(t *testing.T, raw string) (kinds []string, text string) {
	t.Helper()
	var r struct {
		Output []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Code    string `json:"code"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			Output      json.RawMessage `json:"output"`
			ContainerID string          `json:"container_id"`
			Environment struct {
				ContainerID string `json:"container_id"`
			} `json:"environment"`
		} `json:"output"`
	}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	for _, it := range r.Output {
		k := it.Type
		var outs []struct {
			Stdout string `json:"stdout"`
		}
		if json.Unmarshal(it.Output, &outs) == nil && len(outs) > 0 {
			k += ":" + strings.TrimSpace(outs[0].Stdout)
		}
		if it.Code != "" {
			k += ":" + it.Code
		}
		if it.Status == "failed" {
			k += ":failed"
		}
		switch c := it.ContainerID + it.Environment.ContainerID; c {
		case "":
		case "cntr_scripted", "container_scripted":
			k += "@provider"
		case "cntr_theirs": // one the client named for the provider
			k += "@" + c
		default:
			k += "@shellgate"
		}
		kinds = append(kinds, k)
		for _, c := range it.Content {
			text += c.Text
		}
	}
	return kinds, text
}

const editorResult = `{"type":"text_editor_code_execution_create_result","is_file_update":false}`

func TestNativeTools(t *testing.T) {
	hosted := scripted.Turn{Hosted: []scripted.HostedRun{{Code: "echo native", Stdout: "native\n"}}, Text: "It printed native.",
		Usage: scripted.Usage{InputTokens: 50, OutputTokens: 5}}
	shellArgs, _ := json.Marshal(map[string]any{"commands": []string{"echo sandbox"}})
	model := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{hosted}, Models: map[string][]scripted.Turn{
		// The sandbox's run, for the requests that must not go native.
		"sandboxed": {{ToolCalls: []scripted.ToolCall{{Name: "shell", Arguments: shellArgs}}}, {Text: "It printed {{last_tool_stdout}}."}},
		// One native run and, in the same turn, a call of the shell as a
		// function: with max_tool_calls 1 the provider's run spent it.
		"budget": {{Hosted: hosted.Hosted, ToolCalls: []scripted.ToolCall{{Name: "shell", Arguments: shellArgs}}}, {Text: "done"}},
		// The provider paused its long run (Anthropic's pause_turn).
		"pausing": {{Hosted: hosted.Hosted, Stop: "pause"}, {Text: "Finished."}},
		// The provider's text editor (Anthropic's code execution).
		"editing": {{Hosted: []scripted.HostedRun{{Editor: json.RawMessage(`{"command":"create","path":"/tmp/a.txt","file_text":"x"}`),
			Result: json.RawMessage(editorResult)}}, Text: "Created."}},
		// The provider's tool failed.
		"failing": {{Hosted: []scripted.HostedRun{{Code: "sleep 1000", Error: "execution_time_exceeded"}}, Text: "It timed out."}},
	}})
	t.Cleanup(model.Close)
	ep := func(version string) upstream.Endpoint {
		return upstream.Endpoint{BaseURL: model.URL + version, APIKey: "sk-scripted", Timeout: 30 * time.Second}
	}
	oaiNative := []string{gateway.NativeShell, gateway.NativeCodeInterpreter}
	traces := otlptest.NewReceiver()
	t.Cleanup(traces.Close)
	bc := newBroadcast(t, broadcast.Destination{Type: broadcast.TypeOTLPHTTP, Endpoint: traces.URL, Name: "traces"})
	e := newEnv(t, "crun", "default", func(c *Config) {
		c.Broadcast = bc
		c.Models = upstream.NewProviders(
			upstream.Provider{Name: "oai", API: gateway.APIResponses, Endpoint: ep("/v1"), Native: oaiNative},
			upstream.Provider{Name: "oai_sandbox", API: gateway.APIResponses, Endpoint: ep("/v1"), Native: oaiNative, VendorSandbox: true},
			upstream.Provider{Name: "claude", API: gateway.APIMessages, Endpoint: ep("/v1"), Native: []string{gateway.NativeCodeExecution}},
			upstream.Provider{Name: "gem", API: gateway.APIGemini, Endpoint: ep("/v1beta"), Native: []string{gateway.NativeCodeExecution}},
			upstream.Provider{Name: "plain", API: gateway.APIResponses, Endpoint: ep("/v1")},
		)
	})
	e.srv.cfg.Logs = e.st.Logs()
	e.setLogging(t, e.keyA, map[string]any{"enabled": true})
	g := &gwEnv{env: e}

	// lastTools is the tools array of the last request the upstream got.
	lastTools := func(t *testing.T) string {
		t.Helper()
		reqs := model.Requests()
		b, _ := json.Marshal(reqs[len(reqs)-1].Body["tools"])
		return string(b)
	}
	// respond asks model with tools on the Responses API, plainly and
	// streamed, and checks both answers read as want; it returns the
	// tools the upstream was sent.
	respond := func(t *testing.T, modelName string, tools []any, want string, extra ...option.RequestOption) string {
		t.Helper()
		client := g.openAI(e.keyA)
		params := responses.ResponseNewParams{Model: modelName, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say it.")}}
		opts := append([]option.RequestOption{option.WithJSONSet("tools", tools)}, extra...)
		r, err := client.Responses.New(t.Context(), params, opts...)
		if err != nil {
			t.Fatal(err)
		}
		answers := []string{r.RawJSON()}
		st := client.Responses.NewStreaming(t.Context(), params, opts...)
		n := 0
		for st.Next() {
			if ev := st.Current(); ev.Type == "response.completed" {
				answers = append(answers, ev.AsResponseCompleted().Response.RawJSON())
			}
			n++
		}
		if err := st.Err(); err != nil || len(answers) != 2 {
			t.Fatalf("stream: %v, %d answers of %d events", err, len(answers), n)
		}
		for i, raw := range answers {
			kinds, text := nativeItems(t, raw)
			if got := fmt.Sprintf("%v %q", kinds, text); got != want {
				t.Fatalf("stream %v:\n got %s\nwant %s", i == 1, got, want)
			}
		}
		return lastTools(t)
	}
	shell := map[string]any{"type": "shell", "environment": map[string]any{"type": "container_auto"}}

	t.Run("01 responses shell on a responses provider: the provider's shell_call and output", func(t *testing.T) {
		sent := respond(t, "oai/m", []any{shell}, `[shell_call@provider shell_call_output:native message] "It printed native."`)
		if sent != `[{"environment":{"type":"container_auto"},"type":"shell"}]` {
			t.Fatalf("upstream tools %s", sent)
		}
	})
	t.Run("02 openrouter:shell, engine auto, on each API's provider", func(t *testing.T) {
		before := countContainers(t, e)
		for _, tc := range []struct{ model, tools, container string }{
			{"oai/m", `[{"environment":{"type":"container_auto"},"type":"shell"}]`, "@provider"},
			{"claude/m", `[{"name":"code_execution","type":"code_execution_20250825"}]`, "@provider"},
			{"gem/m", `[{"codeExecution":{}}]`, ""},
		} {
			for _, tool := range []map[string]any{{"type": "openrouter:shell"}, {"type": "shellgate:shell", "parameters": map[string]any{"engine": "auto"}}} {
				sent := respond(t, tc.model, []any{tool}, fmt.Sprintf(`[%s:native%s message] "It printed native."`, tool["type"], tc.container))
				if sent != tc.tools {
					t.Fatalf("%s: upstream tools %s", tc.model, sent)
				}
			}
		}
		// The provider ran them all: Shellgate made no container.
		if after := countContainers(t, e); after != before {
			t.Fatalf("containers: %d before, %d after", before, after)
		}
	})
	t.Run("03 engine shellgate, vendor_tools sandbox, a provider without native tools: the sandbox", func(t *testing.T) {
		for _, tc := range []struct {
			model string
			tool  map[string]any
			want  string
		}{
			{"oai/sandboxed", map[string]any{"type": "openrouter:shell", "parameters": map[string]any{"engine": "shellgate"}}, `[openrouter:shell:sandbox@shellgate message] "It printed sandbox."`},
			{"oai_sandbox/sandboxed", shell, `[shell_call@shellgate shell_call_output:sandbox message] "It printed sandbox."`},
			{"plain/sandboxed", shell, `[shell_call@shellgate shell_call_output:sandbox message] "It printed sandbox."`},
		} {
			if sent := respond(t, tc.model, []any{tc.tool}, tc.want); !strings.Contains(sent, `"name":"shell"`) || !strings.Contains(sent, `"type":"function"`) {
				t.Fatalf("%s: upstream tools %s", tc.model, sent)
			}
		}
	})
	t.Run("04 a tool choice of the tool chooses the provider's own", func(t *testing.T) {
		for _, tc := range []struct {
			tool        map[string]any
			items, sent string
		}{
			{shell, `[shell_call@provider shell_call_output:native message] "It printed native."`, `{"type":"shell"}`},
			{map[string]any{"type": "code_interpreter", "container": map[string]any{"type": "auto"}},
				`[code_interpreter_call:echo native@provider message] "It printed native."`, `{"type":"code_interpreter"}`},
		} {
			respond(t, "oai/m", []any{tc.tool}, tc.items, option.WithJSONSet("tool_choice", map[string]any{"type": tc.tool["type"]}))
			reqs := model.Requests()
			if b, _ := json.Marshal(reqs[len(reqs)-1].Body["tool_choice"]); string(b) != tc.sent {
				t.Fatalf("upstream tool_choice %s, want %s", b, tc.sent)
			}
		}
	})
	t.Run("05 responses code_interpreter on a responses provider", func(t *testing.T) {
		sent := respond(t, "oai/m", []any{map[string]any{"type": "code_interpreter", "container": map[string]any{"type": "auto"}}},
			`[code_interpreter_call:echo native@provider message] "It printed native."`)
		if sent != `[{"container":{"type":"auto"},"type":"code_interpreter"}]` {
			t.Fatalf("upstream tools %s", sent)
		}
	})
	t.Run("06 max_tool_calls counts the provider's runs", func(t *testing.T) {
		respond(t, "oai/budget", []any{map[string]any{"type": "openrouter:shell"}}, `[openrouter:shell:native@provider openrouter:shell:failed message] "done"`,
			option.WithJSONSet("max_tool_calls", 1))
	})

	messages := func(t *testing.T, modelName string, tools []anthropic.ToolUnionParam, opts ...aoption.RequestOption) []*anthropic.Message {
		t.Helper()
		client := e.anthropic(e.keyA)
		params := anthropic.MessageNewParams{Model: anthropic.Model(modelName), MaxTokens: 1000, Tools: tools, Messages: userText("Say it.")}
		m, err := client.Messages.New(t.Context(), params, opts...)
		if err != nil {
			t.Fatal(err)
		}
		acc, _ := streamed(t, client, params, opts...)
		return []*anthropic.Message{m, acc}
	}
	blocks := func(m *anthropic.Message) string {
		var out []string
		for _, b := range m.Content {
			k := b.Type
			if strings.HasSuffix(b.Type, "_tool_result") {
				var c struct {
					Stdout    string `json:"stdout"`
					ErrorCode string `json:"error_code"`
					Output    []struct {
						Stdout string `json:"stdout"`
					} `json:"output"`
				}
				json.Unmarshal([]byte(b.Content.RawJSON()), &c)
				for _, o := range c.Output {
					c.Stdout += o.Stdout
				}
				k += ":" + strings.TrimSpace(c.Stdout+c.ErrorCode)
				if strings.HasPrefix(b.Type, "text_editor") {
					k += b.Content.RawJSON()
				}
			}
			if b.Type == "server_tool_use" {
				k += ":" + b.Name
			}
			if b.Type == "text" {
				k += ":" + b.Text
			}
			out = append(out, k)
		}
		return fmt.Sprint(out)
	}
	t.Run("07 messages code_execution on a messages provider: the provider's blocks", func(t *testing.T) {
		for _, m := range messages(t, "claude/m", codeExecTool) {
			if got := blocks(m); got != "[server_tool_use:bash_code_execution bash_code_execution_tool_result:native text:It printed native.]" ||
				m.StopReason != "end_turn" || m.Container.ID != "container_scripted" || m.Container.ExpiresAt.IsZero() {
				t.Fatalf("%s %s %+v", got, m.StopReason, m.Container)
			}
		}
		if sent := lastTools(t); sent != `[{"name":"code_execution","type":"code_execution_20250825"}]` {
			t.Fatalf("upstream tools %s", sent)
		}
	})
	t.Run("08 a container the client names for tools the provider runs is the provider's", func(t *testing.T) {
		before := countContainers(t, e)
		params := anthropic.MessageNewParams{Model: "claude/m", MaxTokens: 100, Tools: codeExecTool, Messages: userText("Say it."),
			Container: anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String("container_theirs")}}
		client := e.anthropic(e.keyA)
		m, err := client.Messages.New(t.Context(), params)
		if err != nil || m.Container.ID != "container_theirs" {
			t.Fatalf("%v %+v", err, m)
		}
		reqs := model.Requests()
		if c := reqs[len(reqs)-1].Body["container"]; c != "container_theirs" {
			t.Fatalf("upstream container %v", c)
		}
		ref := map[string]any{"type": "shell", "environment": map[string]any{"type": "container_reference", "container_id": "cntr_theirs"}}
		respond(t, "oai/m", []any{ref}, `[shell_call@cntr_theirs shell_call_output:native message] "It printed native."`)
		if sent := lastTools(t); sent != `[{"environment":{"container_id":"cntr_theirs","type":"container_reference"},"type":"shell"}]` {
			t.Fatalf("upstream tools %s", sent)
		}
		if after := countContainers(t, e); after != before {
			t.Fatalf("containers: %d before, %d after", before, after)
		}
	})
	t.Run("09 the provider's tool failed: its error in each API's shape", func(t *testing.T) {
		for _, m := range messages(t, "claude/failing", codeExecTool) {
			if got := blocks(m); got != "[server_tool_use:bash_code_execution bash_code_execution_tool_result:execution_time_exceeded text:It timed out.]" {
				t.Fatal(got)
			}
		}
		respond(t, "claude/failing", []any{map[string]any{"type": "openrouter:shell"}}, `[openrouter:shell:failed@provider message] "It timed out."`)
	})
	t.Run("10 the provider paused its run: a Messages client gets pause_turn, the others the rest of the turn", func(t *testing.T) {
		for _, m := range messages(t, "claude/pausing", codeExecTool) {
			if got := blocks(m); got != "[server_tool_use:bash_code_execution bash_code_execution_tool_result:native]" || m.StopReason != "pause_turn" {
				t.Fatalf("%s %s", got, m.StopReason)
			}
		}
		respond(t, "claude/pausing", []any{map[string]any{"type": "openrouter:shell"}}, `[openrouter:shell:native@provider message] "Finished."`)
	})
	t.Run("11 the provider's text editor: its blocks on Messages, a command with its result to a shell", func(t *testing.T) {
		for _, m := range messages(t, "claude/editing", codeExecTool) {
			if got := blocks(m); got != "[server_tool_use:text_editor_code_execution text_editor_code_execution_tool_result:"+editorResult+" text:Created.]" {
				t.Fatal(got)
			}
		}
		respond(t, "claude/editing", []any{map[string]any{"type": "openrouter:shell"}}, `[openrouter:shell:`+editorResult+`@provider message] "Created."`)
	})
	t.Run("12 messages shellgate:shell on a responses provider: OpenAI's shell_call in Messages shapes", func(t *testing.T) {
		for _, m := range messages(t, "oai/m", nil, rawTools(map[string]any{"type": "shellgate:shell"})) {
			if got := blocks(m); got != "[server_tool_use:shellgate:shell shellgate_shell_tool_result:native text:It printed native.]" {
				t.Fatal(got)
			}
			// The provider's container, which the provider named.
			var content any
			json.Unmarshal([]byte(m.Content[1].Content.RawJSON()), &content)
			if c := gatewaytest.JSONAt(content, "container_id"); c != "cntr_scripted" {
				t.Fatalf("container_id %v", c)
			}
		}
	})
	t.Run("13 gemini codeExecution on a gemini provider", func(t *testing.T) {
		c := geminiClient(t, e, e.keyA)
		cfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{CodeExecution: &genai.ToolCodeExecution{}}}}
		r, err := c.Models.GenerateContent(t.Context(), "gem/m", genai.Text("Say it."), cfg)
		if err != nil {
			t.Fatal(err)
		}
		kinds, text := partKinds(r.Candidates[0].Content.Parts)
		if fmt.Sprint(kinds) != "[code:PYTHON result:OUTCOME_OK text]" || text != "native\nIt printed native." {
			t.Fatalf("%v %q", kinds, text)
		}
		var streamed []*genai.Part
		for r, err := range c.Models.GenerateContentStream(t.Context(), "gem/m", genai.Text("Say it."), cfg) {
			if err != nil {
				t.Fatal(err)
			}
			streamed = append(streamed, r.Candidates[0].Content.Parts...)
		}
		if kinds, text := partKinds(streamed); fmt.Sprint(kinds) != "[code:PYTHON result:OUTCOME_OK text]" || text != "native\nIt printed native." {
			t.Fatalf("streamed: %v %q", kinds, text)
		}
		if sent := lastTools(t); sent != `[{"codeExecution":{}}]` {
			t.Fatalf("upstream tools %s", sent)
		}
		// Gemini takes no ANY without a function to call: only the code
		// execution is left, and the choice is the model's.
		cfg.ToolConfig = &genai.ToolConfig{FunctionCallingConfig: &genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeAny}}
		if _, err := c.Models.GenerateContent(t.Context(), "gem/m", genai.Text("Say it."), cfg); err != nil {
			t.Fatal(err)
		}
		if reqs := model.Requests(); reqs[len(reqs)-1].Body["toolConfig"] != nil {
			t.Fatalf("upstream toolConfig %v", reqs[len(reqs)-1].Body["toolConfig"])
		}
	})
	t.Run("14 request logs and traces mark native runs; nothing is billed as sandbox time", func(t *testing.T) {
		l := e.requestLogs(t, e.keyA, "?limit=100")
		if l.HasMore {
			t.Fatal("more than 100 requests")
		}
		native, sandbox := 0, 0
		for _, s := range l.Data {
			r := e.logRecord(t, e.keyA, s.ID)
			for _, it := range r.Items {
				if it.Type != "command" {
					continue
				}
				switch {
				case it.Native && it.DurationMs == nil && (it.Stdout == "native\n" || it.Stdout == editorResult || it.Outcome == "error" && strings.Contains(it.Stdout+it.Stderr, "execution_time_exceeded")):
					native++
					if !strings.Contains(r.Model, "budget") && r.CostMicroUSD != 0 {
						t.Fatalf("a native run billed: %+v", r.logSummary)
					}
				case !it.Native && (it.Stdout == "sandbox\n" || it.Outcome == "error"):
					sandbox++
				default:
					t.Fatalf("log item %+v", it)
				}
			}
		}
		if native < 10 || sandbox < 6 {
			t.Fatalf("%d native, %d sandbox command items", native, sandbox)
		}
		// Traces are sent after the answers, on the destination's worker.
		timeout := time.After(30 * time.Second)
		for {
			steps, roots := 0, 0
			for _, sp := range traces.Spans() {
				a := sp.Attributes
				if sp.Name == "execute_tool shell" && otlptest.Bool(a, "shellgate.tool.native") && !otlptest.Bool(a, "shellgate.tool.executed") {
					steps++
				}
				if len(sp.ParentSpanId) == 0 && otlptest.Int(a, "shellgate.tool_calls.native") == 1 && otlptest.Int(a, "shellgate.tool_calls.executed") == 0 &&
					otlptest.Float(a, "shellgate.cost.usd") == 0 {
					roots++
				}
			}
			if steps > 0 && roots > 0 {
				break
			}
			select {
			case <-traces.Arrived():
			case <-timeout:
				t.Fatalf("no trace of a native run among %d spans", len(traces.Spans()))
			}
		}
	})
}

// countContainers is how many containers the workspace of keyA has.
func countContainers(t *testing.T, e *env) int {
	t.Helper()
	st, b := e.do("GET", "/v1/containers?limit=100", e.keyA, nil)
	var l struct {
		Data []json.RawMessage `json:"data"`
	}
	if st != 200 || json.Unmarshal(b, &l) != nil {
		t.Fatalf("GET /v1/containers: %d %s", st, b)
	}
	return len(l.Data)
}
