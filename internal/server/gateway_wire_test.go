package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
)

// The whole gateway over the wire: the official SDKs as clients, the
// server, real sandboxes, the upstream adapters and the scripted model as
// a real HTTP server speaking each upstream API. One question, asked on
// both client APIs, of a model behind each of the three upstream flavours
// (six combinations): the model runs python in the sandbox and answers
// 5050 from what the command printed.

const sumPython = `python3 -c "print(sum(range(1,101)))"`

func sumScript() *scripted.Script {
	args, _ := json.Marshal(map[string]any{"commands": []string{sumPython}})
	bashArgs, _ := json.Marshal(map[string]any{"command": sumPython})
	return &scripted.Script{Turns: []scripted.Turn{
		{Text: "Let me compute that.", ToolCalls: []scripted.ToolCall{{Name: "shell|bash_code_execution", Arguments: args,
			ArgumentsFor: map[string]json.RawMessage{"bash_code_execution": bashArgs}}}, Usage: scripted.Usage{InputTokens: 100, OutputTokens: 20}},
		{Text: "The sum is {{last_tool_stdout}}", Usage: scripted.Usage{InputTokens: 150, OutputTokens: 10}},
	}}
}

func TestGatewayEveryUpstream(t *testing.T) {
	model := scripted.NewServer(sumScript())
	t.Cleanup(model.Close)
	e := newEnv(t, "crun", "default", func(c *Config) { c.Models = upstream.EveryAPI(model.URL, 30*time.Second) })
	g := &gwEnv{env: e}
	flavours := []string{"chat_completions", "responses", "messages", "gemini"}

	for _, fl := range flavours {
		t.Run("responses client, "+fl+" upstream", func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				params := responses.ResponseNewParams{Model: fl + "/some-model",
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What is 1+2+...+100?")}}
				client := g.openAI(e.keyA)
				var r *responses.Response
				var err error
				shell := map[string]any{"type": "shell", "environment": map[string]any{"type": "container_auto"}}
				if !stream {
					r, err = client.Responses.New(t.Context(), params, option.WithJSONSet("tools", []any{shell}))
				} else {
					st := client.Responses.NewStreaming(t.Context(), params, option.WithJSONSet("tools", []any{shell}))
					for st.Next() {
						if ev := st.Current(); ev.Type == "response.completed" {
							c := ev.AsResponseCompleted().Response
							r = &c
						}
					}
					err = st.Err()
				}
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(r.OutputText(), "The sum is 5050") || r.Usage.InputTokens != 250 || r.Usage.OutputTokens != 30 {
					t.Fatalf("stream %v: answer %q, usage %+v", stream, r.OutputText(), r.Usage)
				}
				kinds := []string{}
				for _, it := range r.Output {
					kinds = append(kinds, it.Type)
				}
				if fmt.Sprint(kinds) != "[message shell_call shell_call_output message]" {
					t.Fatalf("items %v", kinds)
				}
			}
		})
		t.Run("messages client, "+fl+" upstream", func(t *testing.T) {
			client := e.anthropic(e.keyA)
			params := anthropic.MessageNewParams{Model: anthropic.Model(fl + "/some-model"), MaxTokens: 1000, Tools: codeExecTool,
				Messages: userText("What is 1+2+...+100?")}
			m, err := client.Messages.New(t.Context(), params)
			if err != nil {
				t.Fatal(err)
			}
			st := client.Messages.NewStreaming(t.Context(), params)
			var acc anthropic.Message
			for st.Next() {
				if err := acc.Accumulate(st.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			for _, msg := range []*anthropic.Message{m, &acc} {
				types := []string{}
				text := ""
				for _, b := range msg.Content {
					types = append(types, b.Type)
					if b.Type == "text" {
						text += b.Text
					}
				}
				if fmt.Sprint(types) != "[text server_tool_use bash_code_execution_tool_result text]" || !strings.Contains(text, "The sum is 5050") ||
					msg.StopReason != "end_turn" || msg.Container.ID == "" || msg.Usage.InputTokens != 250 {
					t.Fatalf("message %v %q %s %+v", types, text, msg.StopReason, msg.Usage)
				}
			}
		})
	}
	// What the upstreams were sent: each flavour got its own wire format
	// with the tool result of the command.
	seen := map[string]bool{}
	for _, req := range model.Requests() {
		seen[req.API] = true
		if req.Turn == 1 && !strings.Contains(string(req.Raw), "5050") {
			t.Errorf("%s: the second call does not carry the tool result: %s", req.API, req.Raw)
		}
	}
	if len(seen) != len(flavours) {
		t.Fatalf("upstream APIs called: %v", seen)
	}
}
