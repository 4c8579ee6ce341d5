package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/gateway/messages"
)

// The Messages frontend end to end: the official Anthropic SDK as the
// client, the real server (keys, SQLite, crun sandboxes on the default
// image) and gatewaytest.Script as the model, one script per provider
// name so that each case has its own (gwEnv.scriptAs).

// scriptAs registers turns as the model "<name>/m".
func (e *gwEnv) scriptAs(name string, turns ...gatewaytest.Turn) (*gatewaytest.Script, anthropic.Model) {
	s := gatewaytest.NewScript(turns...)
	e.models[name] = s
	return s, anthropic.Model(name + "/m")
}

func userText(s string) []anthropic.MessageParam {
	return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(s))}
}

var codeExecTool = []anthropic.ToolUnionParam{{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}}}

// echoResult answers with the text of the last tool result.

// blocks returns the response's content blocks as JSON objects.
func blocks(t *testing.T, m *anthropic.Message) []map[string]any {
	t.Helper()
	var v struct {
		Content []map[string]any `json:"content"`
	}
	if err := json.Unmarshal([]byte(m.RawJSON()), &v); err != nil {
		t.Fatal(err)
	}
	return v.Content
}

func types(bs []map[string]any) []string {
	var out []string
	for _, b := range bs {
		out = append(out, fmt.Sprint(b["type"]))
	}
	return out
}

func TestMessagesText(t *testing.T) {
	e := newGatewayEnv(t)
	for _, tc := range []struct {
		name string
		send func(c anthropic.Client, model anthropic.Model) (string, string, error)
	}{
		{"v1", func(c anthropic.Client, model anthropic.Model) (string, string, error) {
			m, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("hi"),
				System: []anthropic.TextBlockParam{{Text: "be brief"}}})
			if err != nil {
				return "", "", err
			}
			return m.Content[0].Text, string(m.StopReason), nil
		}},
		{"beta", func(c anthropic.Client, model anthropic.Model) (string, string, error) {
			m, err := c.Beta.Messages.New(t.Context(), anthropic.BetaMessageNewParams{Model: model, MaxTokens: 100,
				Messages: []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("hi"))},
				Betas:    []anthropic.AnthropicBeta{"code-execution-2025-08-25", "files-api-2025-04-14"}})
			if err != nil {
				return "", "", err
			}
			return m.Content[0].Text, string(m.StopReason), nil
		}},
		{"api-prefix", func(_ anthropic.Client, model anthropic.Model) (string, string, error) {
			c := e.anthropic(e.keyA, option.WithBaseURL(e.url+"/api/"))
			m, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("hi")})
			if err != nil {
				return "", "", err
			}
			return m.Content[0].Text, string(m.StopReason), nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, model := e.scriptAs("text"+tc.name, gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("Hello there.")}, Usage: gateway.Usage{InputTokens: 12, OutputTokens: 3}})
			text, stop, err := tc.send(e.anthropic(e.keyA), model)
			if err != nil {
				t.Fatal(err)
			}
			if text != "Hello there." || stop != "end_turn" {
				t.Fatalf("got %q %q", text, stop)
			}
			reqs := s.Requests()
			if len(reqs) != 1 || reqs[0].Model != "m" || reqs[0].MaxTokens != 100 {
				t.Fatalf("upstream requests %+v", reqs)
			}
			if tc.name == "v1" && reqs[0].System != "be brief" {
				t.Fatalf("system %q", reqs[0].System)
			}
		})
	}
}

func TestMessagesCodeExecution(t *testing.T) {
	e := newGatewayEnv(t)
	py := `python3 -c "print(sum(range(1,101)))"`
	turns := func() []gatewaytest.Turn {
		return []gatewaytest.Turn{
			// Text after the call too: the stream must keep the parts' order.
			{Parts: []gateway.Part{gatewaytest.Text("Let me compute."), gatewaytest.Call("toolu_1", "bash_code_execution", map[string]string{"command": py}), gatewaytest.Text("Running it.")}, Usage: gateway.Usage{InputTokens: 20, OutputTokens: 10}},
			gatewaytest.EchoResult(),
		}
	}
	s, model := e.scriptAs("ce", turns()...)
	c := e.anthropic(e.keyA)
	params := anthropic.MessageNewParams{Model: model, MaxTokens: 1000, Messages: userText("sum 1..100"), Tools: codeExecTool}
	m, err := c.Messages.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	bs := blocks(t, m)
	if got := types(bs); !reflect.DeepEqual(got, []string{"text", "server_tool_use", "bash_code_execution_tool_result", "text", "text"}) || bs[3]["text"] != "Running it." {
		t.Fatalf("blocks %v", got)
	}
	use, res := bs[1], bs[2]
	if use["name"] != "bash_code_execution" || gatewaytest.JSONAt(use, "input", "command") != py || !strings.HasPrefix(fmt.Sprint(use["id"]), "srvtoolu_") {
		t.Fatalf("server_tool_use %v", use)
	}
	if res["tool_use_id"] != use["id"] || gatewaytest.JSONAt(res, "content", "type") != "bash_code_execution_result" ||
		gatewaytest.JSONAt(res, "content", "stdout") != "5050\n" || gatewaytest.JSONAt(res, "content", "return_code") != 0.0 {
		t.Fatalf("result %v", res)
	}
	if cont, ok := gatewaytest.JSONAt(res, "content", "content").([]any); !ok || len(cont) != 0 {
		t.Fatalf("content.content %v", gatewaytest.JSONAt(res, "content", "content"))
	}
	if m.StopReason != "end_turn" || m.Container.ID == "" || m.Container.ExpiresAt.IsZero() {
		t.Fatalf("stop %q container %+v", m.StopReason, m.Container)
	}
	if m.Usage.InputTokens != 50 || m.Usage.OutputTokens != 17 {
		t.Fatalf("usage %+v", m.Usage)
	}
	var raw map[string]any
	json.Unmarshal([]byte(m.RawJSON()), &raw)
	if gatewaytest.JSONAt(raw, "usage", "server_tool_use_details", "tool_calls_executed") != 1.0 || gatewaytest.JSONAt(raw, "usage", "cost_details", "server_tool_cost") == nil {
		t.Fatalf("usage %v", raw["usage"])
	}
	// The model got the output as the tool result, and the tools it saw.
	reqs := s.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	var names []string
	for _, tl := range reqs[0].Tools {
		names = append(names, tl.Name)
	}
	if !reflect.DeepEqual(names, []string{"bash_code_execution", "text_editor_code_execution"}) {
		t.Fatalf("tools %v", names)
	}
	if r := gatewaytest.LastResult(&reqs[1]); r == nil || r.CallID != "toolu_1" || !strings.Contains(r.Content, `"stdout":"5050\n"`) {
		t.Fatalf("tool result %+v", r)
	}

	// The same script streamed: Accumulate takes every event and the
	// message is the same one.
	_, model2 := e.scriptAs("ce2", turns()...)
	params.Model = model2
	// The beta client (?beta=true) decodes the same blocks into its types.
	_, model3 := e.scriptAs("ce3", turns()...)
	bm, err := c.Beta.Messages.New(t.Context(), anthropic.BetaMessageNewParams{Model: model3, MaxTokens: 1000,
		Messages: []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("sum 1..100"))},
		Tools:    []anthropic.BetaToolUnionParam{{OfCodeExecutionTool20250825: &anthropic.BetaCodeExecutionTool20250825Param{}}},
		Betas:    []anthropic.AnthropicBeta{"code-execution-2025-08-25"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(bm.Content) != 5 || bm.Content[2].Type != "bash_code_execution_tool_result" {
		t.Fatalf("beta: %s", bm.RawJSON())
	}
	if r := bm.Content[2].AsBashCodeExecutionToolResult(); r.Content.Stdout != "5050\n" || r.Content.ReturnCode != 0 || r.ToolUseID != bm.Content[1].ID || bm.Container.ID == "" {
		t.Fatalf("beta result %+v", r)
	}

	acc, events := streamed(t, c, params)
	if events[0] != "message_start" || events[len(events)-1] != "message_stop" || events[len(events)-2] != "message_delta" {
		t.Fatalf("events %v", events)
	}
	if acc.Container.ID == "" || acc.Container.ID == m.Container.ID {
		t.Fatalf("streamed container %q (first %q)", acc.Container.ID, m.Container.ID)
	}
	sameMessage(t, m, acc)
}

// streamed sends params as a stream and accumulates it with the SDK.
func streamed(t *testing.T, c anthropic.Client, params anthropic.MessageNewParams, opts ...option.RequestOption) (*anthropic.Message, []string) {
	t.Helper()
	stream := c.Messages.NewStreaming(t.Context(), params, opts...)
	var acc anthropic.Message
	var events []string
	for stream.Next() {
		ev := stream.Current()
		events = append(events, ev.Type)
		if err := acc.Accumulate(ev); err != nil {
			t.Fatalf("accumulate %s: %v", ev.Type, err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return &acc, events
}

// sameMessage checks that two messages are the same but for their ids,
// model names (one script each) and containers.
func sameMessage(t *testing.T, m1, m2 *anthropic.Message) {
	t.Helper()
	norm := func(msg *anthropic.Message) map[string]any {
		var v map[string]any
		b, _ := json.Marshal(msg)
		json.Unmarshal(b, &v)
		delete(v, "id")
		delete(v, "container")
		delete(v, "model")
		return v
	}
	a, b := norm(m1), norm(m2)
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.MarshalIndent(a, "", " ")
		jb, _ := json.MarshalIndent(b, "", " ")
		t.Fatalf("streamed message differs:\n%s\nvs\n%s", ja, jb)
	}
}

// editorCall is a text_editor_code_execution call.
func editorCall(id string, args map[string]any) gatewaytest.Turn {
	return gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call(id, "text_editor_code_execution", args)}}
}

func TestMessagesTextEditor(t *testing.T) {
	e := newGatewayEnv(t)
	_, model := e.scriptAs("ed",
		editorCall("t1", map[string]any{"command": "create", "path": "notes/a.txt", "file_text": "alpha\nbeta\ngamma\n"}),
		editorCall("t2", map[string]any{"command": "view", "path": "/workspace/home/notes/a.txt"}),
		editorCall("t3", map[string]any{"command": "str_replace", "path": "/mnt/data/notes/a.txt", "old_str": "beta", "new_str": "BETA\nbeta2"}),
		editorCall("t4", map[string]any{"command": "view", "path": "notes/a.txt", "view_range": []int{2, 3}}),
		editorCall("t5", map[string]any{"command": "create", "path": "notes/a.txt", "file_text": "x x\n"}),
		editorCall("t6", map[string]any{"command": "view", "path": "missing.txt"}),
		editorCall("t7", map[string]any{"command": "str_replace", "path": "notes/a.txt", "old_str": "nope", "new_str": "y"}),
		editorCall("t8", map[string]any{"command": "str_replace", "path": "notes/a.txt", "old_str": "x", "new_str": "y"}),
		editorCall("t9", map[string]any{"command": "view", "path": "/etc/passwd"}),
		editorCall("t10", map[string]any{"command": "view", "path": "../../etc/passwd"}),
		editorCall("t11", map[string]any{"command": "delete", "path": "notes/a.txt"}),
		gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("done")}},
	)
	c := e.anthropic(e.keyA)
	m, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 1000, Messages: userText("edit"), Tools: codeExecTool})
	if err != nil {
		t.Fatal(err)
	}
	bs := blocks(t, m)
	if len(bs) != 23 {
		t.Fatalf("%d blocks: %v", len(bs), types(bs))
	}
	content := func(i int) map[string]any {
		b := bs[2*i+1]
		if b["type"] != "text_editor_code_execution_tool_result" || bs[2*i]["name"] != "text_editor_code_execution" {
			t.Fatalf("block %d: %v / %v", i, bs[2*i], b)
		}
		c, _ := b["content"].(map[string]any)
		return c
	}
	want := []map[string]any{
		{"type": "text_editor_code_execution_create_result", "is_file_update": false},
		{"type": "text_editor_code_execution_view_result", "content": "alpha\nbeta\ngamma", "file_type": "text", "num_lines": 3.0, "start_line": 1.0, "total_lines": 3.0},
		{"type": "text_editor_code_execution_str_replace_result", "old_start": 2.0, "old_lines": 1.0, "new_start": 2.0, "new_lines": 2.0, "lines": []any{"-beta", "+BETA", "+beta2"}},
		{"type": "text_editor_code_execution_view_result", "content": "BETA\nbeta2", "file_type": "text", "num_lines": 2.0, "start_line": 2.0, "total_lines": 4.0},
		{"type": "text_editor_code_execution_create_result", "is_file_update": true},
	}
	for i, w := range want {
		if got := content(i); !reflect.DeepEqual(got, w) {
			t.Errorf("step %d: got %v\nwant %v", i+1, got, w)
		}
	}
	for i, w := range []struct{ code, msg string }{
		{"file_not_found", "missing.txt"},
		{"string_not_found", "old_str"},
		{"invalid_tool_input", "occurs 2 times"},
		{"invalid_tool_input", "outside"},
		{"invalid_tool_input", "outside"},
		{"invalid_tool_input", "unknown command"},
	} {
		c := content(len(want) + i)
		if c["type"] != "text_editor_code_execution_tool_result_error" || c["error_code"] != w.code || !strings.Contains(fmt.Sprint(c["error_message"]), w.msg) {
			t.Errorf("error step %d: %v, want %s (%s)", len(want)+i+1, c, w.code, w.msg)
		}
	}
	if bs[22]["text"] != "done" {
		t.Fatalf("last %v", bs[22])
	}
}

func TestMessagesLoop(t *testing.T) {
	e := newGatewayEnv(t)
	c := e.anthropic(e.keyA)

	t.Run("bad arguments", func(t *testing.T) {
		s, model := e.scriptAs("bad",
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("b1", "bash_code_execution", `{"command": 42`)}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("b2", "bash_code_execution", map[string]any{"command": 7})}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("b3", "bash_code_execution", map[string]any{"command": "echo ok"})}},
			gatewaytest.EchoResult())
		m, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("go"), Tools: codeExecTool})
		if err != nil {
			t.Fatal(err)
		}
		bs := blocks(t, m)
		if len(bs) != 7 {
			t.Fatalf("blocks %v", types(bs))
		}
		for _, i := range []int{1, 3} {
			if gatewaytest.JSONAt(bs[i], "content", "type") != "bash_code_execution_tool_result_error" || gatewaytest.JSONAt(bs[i], "content", "error_code") != "invalid_tool_input" {
				t.Fatalf("block %d: %v", i, bs[i])
			}
		}
		if gatewaytest.JSONAt(bs[5], "content", "stdout") != "ok\n" {
			t.Fatalf("third call %v", bs[5])
		}
		reqs := s.Requests()
		if r := gatewaytest.LastResult(&reqs[1]); r == nil || !r.IsError || !strings.Contains(r.Content, "invalid_tool_input") {
			t.Fatalf("model read %+v", r)
		}
	})

	t.Run("restart and a spent budget in one turn", func(t *testing.T) {
		_, model := e.scriptAs("budget", gatewaytest.Turn{Parts: []gateway.Part{
			gatewaytest.Call("r1", "bash_code_execution", map[string]any{"restart": true}),
			gatewaytest.Call("r2", "bash_code_execution", map[string]any{"command": "echo two"}),
			gatewaytest.Call("r3", "text_editor_code_execution", map[string]any{"command": "view", "path": "x"}),
		}})
		m, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("go"), Tools: codeExecTool},
			option.WithJSONSet("max_tool_calls", 2))
		if err != nil {
			t.Fatal(err)
		}
		bs := blocks(t, m)
		if m.StopReason != "pause_turn" || len(bs) != 6 {
			t.Fatalf("stop %q blocks %v", m.StopReason, types(bs))
		}
		if gatewaytest.JSONAt(bs[1], "content", "type") != "bash_code_execution_result" || !strings.Contains(fmt.Sprint(gatewaytest.JSONAt(bs[1], "content", "stdout")), "restarted") ||
			gatewaytest.JSONAt(bs[3], "content", "stdout") != "two\n" ||
			gatewaytest.JSONAt(bs[5], "content", "type") != "text_editor_code_execution_tool_result_error" || gatewaytest.JSONAt(bs[5], "content", "error_code") != "too_many_requests" {
			t.Fatalf("blocks %v", bs)
		}
	})

	t.Run("pause and resume", func(t *testing.T) {
		// Each call appends a line to a file: a replayed call that ran
		// again would show as an extra line.
		call := func(id string) gatewaytest.Turn {
			return gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call(id, "bash_code_execution", map[string]any{"command": "echo run >> runs.txt; wc -l < runs.txt"})}}
		}
		s, model := e.scriptAs("pause", call("p1"), call("p2"), gatewaytest.EchoResult())
		params := anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("go"), Tools: codeExecTool}
		m, err := c.Messages.New(t.Context(), params, option.WithJSONSet("max_tool_calls", 2))
		if err != nil {
			t.Fatal(err)
		}
		if m.StopReason != "pause_turn" || len(m.Content) != 4 {
			t.Fatalf("stop %q, %d blocks", m.StopReason, len(m.Content))
		}
		if n := len(s.Requests()); n != 2 {
			t.Fatalf("%d upstream calls before the pause", n)
		}
		_, smodel := e.scriptAs("pause-stream", call("p1"), call("p2"))
		sparams := params
		sparams.Model = smodel
		acc, _ := streamed(t, c, sparams, option.WithJSONSet("max_tool_calls", 2))
		if acc.StopReason != "pause_turn" || len(acc.Content) != 4 {
			t.Fatalf("streamed pause: %q, %d blocks", acc.StopReason, len(acc.Content))
		}
		// Resend the conversation with the paused turn, in the same
		// container: the model continues from the results.
		params.Messages = append(params.Messages, m.ToParam())
		params.Container = anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(m.Container.ID)}
		m2, err := c.Messages.New(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		if m2.StopReason != "end_turn" || len(m2.Content) != 1 || !strings.Contains(m2.Content[0].Text, `"stdout":"2\n"`) {
			t.Fatalf("continued: %s", m2.RawJSON())
		}
		reqs := s.Requests()
		last := reqs[len(reqs)-1]
		// user, assistant(call p1), user(result), assistant(call p2), user(result)
		if len(last.Messages) != 5 || last.Messages[1].Parts[0].Call.Name != "bash_code_execution" || last.Messages[4].Parts[0].Result == nil {
			t.Fatalf("replayed conversation %+v", last.Messages)
		}
		if m2.Container.ID != m.Container.ID {
			t.Fatalf("container %q then %q", m.Container.ID, m2.Container.ID)
		}
	})

	t.Run("client tools after a server step", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			tool anthropic.ToolUnionParam
			call string
		}{
			{"bash_20250124", anthropic.ToolUnionParam{OfBashTool20250124: &anthropic.ToolBash20250124Param{}}, "bash"},
			{"custom", anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "get_weather", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}, "get_weather"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s, model := e.scriptAs("client"+tc.name,
					gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("s1", "bash_code_execution", map[string]any{"command": "echo server"})}},
					gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("Now yours."), gatewaytest.Call("toolu_c1", tc.call, map[string]any{"command": "ls", "city": "Paris"})}},
					gatewaytest.EchoResult())
				params := anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("go"), Tools: append([]anthropic.ToolUnionParam{tc.tool}, codeExecTool...)}
				m, err := c.Messages.New(t.Context(), params)
				if err != nil {
					t.Fatal(err)
				}
				_, smodel := e.scriptAs("client-stream"+tc.name,
					gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("s1", "bash_code_execution", map[string]any{"command": "echo server"})}},
					gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("Now yours."), gatewaytest.Call("toolu_c1", tc.call, map[string]any{"command": "ls", "city": "Paris"})}})
				sparams := params
				sparams.Model = smodel
				acc, _ := streamed(t, c, sparams)
				sameMessage(t, m, acc)
				bs := blocks(t, m)
				if got := types(bs); m.StopReason != "tool_use" || !reflect.DeepEqual(got, []string{"server_tool_use", "bash_code_execution_tool_result", "text", "tool_use"}) {
					t.Fatalf("stop %q blocks %v", m.StopReason, got)
				}
				if bs[3]["name"] != tc.call || bs[3]["id"] != "toolu_c1" || gatewaytest.JSONAt(bs[3], "input", "city") != "Paris" {
					t.Fatalf("tool_use %v", bs[3])
				}
				if tc.name == "bash_20250124" {
					reqs := s.Requests()
					var schema string
					for _, tl := range reqs[0].Tools {
						if tl.Name == "bash" {
							schema = string(tl.Parameters)
						}
					}
					if !strings.Contains(schema, `"command"`) || !strings.Contains(schema, `"restart"`) {
						t.Fatalf("bash schema %q", schema)
					}
				}
				// The client answers its call; the server step replays
				// without running again.
				params.Messages = append(params.Messages, m.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_c1", "sunny", false)))
				m2, err := c.Messages.New(t.Context(), params)
				if err != nil {
					t.Fatal(err)
				}
				if m2.Content[0].Text != "result: sunny" || m2.Container.ID != "" {
					t.Fatalf("second answer %s", m2.RawJSON())
				}
				reqs := s.Requests()
				last := reqs[len(reqs)-1].Messages
				if len(last) != 5 || last[1].Parts[0].Call.ID != bs[0]["id"] || !strings.Contains(last[2].Parts[0].Result.Content, "server") {
					t.Fatalf("replayed %+v", last)
				}
			})
		}
	})
}

func TestMessagesContainers(t *testing.T) {
	e := newGatewayEnv(t)
	c := e.anthropic(e.keyA)
	_, model := e.scriptAs("c1", gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("w", "bash_code_execution", map[string]any{"command": "echo kept > f.txt"})}},
		gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("written")}})
	m, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("write"), Tools: codeExecTool})
	if err != nil {
		t.Fatal(err)
	}
	id := m.Container.ID
	if id == "" {
		t.Fatal("no container")
	}
	_, model = e.scriptAs("c2", gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("r", "bash_code_execution", map[string]any{"command": "cat f.txt"})}}, gatewaytest.EchoResult())
	m2, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("read"), Tools: codeExecTool, Container: anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(id)}})
	if err != nil {
		t.Fatal(err)
	}
	if m2.Container.ID != id || !strings.Contains(m2.Content[2].Text, `"stdout":"kept\n"`) {
		t.Fatalf("reuse: %s", m2.RawJSON())
	}

	// Another workspace's key cannot name it; nor can anyone name a
	// container that does not exist.
	for _, tc := range []struct{ key, container string }{{e.keyB, id}, {e.keyA, "container_nope"}} {
		s, model := e.scriptAs("c3", gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("never")}})
		ck := e.anthropic(tc.key)
		_, err = ck.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("read"), Tools: codeExecTool, Container: anthropic.MessageCreateParamsContainerUnion{OfString: anthropic.String(tc.container)}})
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Type() != "not_found_error" {
			t.Fatalf("container %s: %v", tc.container, err)
		}
		if len(s.Requests()) != 0 {
			t.Fatal("the model was called")
		}
	}
}

// rawTools sets the request's tools to Shellgate's own tool types, which
// the SDK does not model.
func rawTools(tools ...map[string]any) option.RequestOption {
	return option.WithJSONSet("tools", tools)
}

func TestMessagesNamespacedTools(t *testing.T) {
	e := newGatewayEnv(t)
	c := e.anthropic(e.keyA)
	base := func(model anthropic.Model) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("go")}
	}

	t.Run("shellgate:shell", func(t *testing.T) {
		s, model := e.scriptAs("sh", gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("c1", "shell", map[string]any{"commands": []string{"echo one > one.txt; cat one.txt", "exit 3"}})}}, gatewaytest.EchoResult())
		m, err := c.Messages.New(t.Context(), base(model), rawTools(map[string]any{"type": "shellgate:shell"}))
		if err != nil {
			t.Fatal(err)
		}
		bs := blocks(t, m)
		if got := types(bs); !reflect.DeepEqual(got, []string{"server_tool_use", "shellgate_shell_tool_result", "text"}) {
			t.Fatalf("blocks %v", got)
		}
		out, _ := gatewaytest.JSONAt(bs[1], "content", "output").([]any)
		if bs[0]["name"] != "shellgate:shell" || len(out) != 2 || gatewaytest.JSONAt(out[0], "stdout") != "one\n" || gatewaytest.JSONAt(out[1], "outcome", "exit_code") != 3.0 ||
			gatewaytest.JSONAt(bs[1], "content", "container_id") != m.Container.ID {
			t.Fatalf("blocks %v", bs)
		}
		// Replayed (raw, as a client keeps it): the model reads the same
		// text again, nothing runs again, and a new call runs in the
		// container the replayed result names.
		s2, model2 := e.scriptAs("sh2", gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("c2", "shell", map[string]any{"commands": []string{"cat one.txt"}})}}, gatewaytest.EchoResult())
		var raw struct {
			Content json.RawMessage `json:"content"`
		}
		json.Unmarshal([]byte(m.RawJSON()), &raw)
		m2, err := c.Messages.New(t.Context(), base(model2), rawTools(map[string]any{"type": "shellgate:shell"}),
			option.WithJSONSet("messages", []any{map[string]any{"role": "user", "content": "go"}, map[string]any{"role": "assistant", "content": raw.Content}, map[string]any{"role": "user", "content": "again"}}))
		if err != nil {
			t.Fatal(err)
		}
		live, replayed := gatewaytest.LastResult(&s.Requests()[1]), gatewaytest.LastResult(&s2.Requests()[0])
		if live == nil || replayed == nil || live.Content != replayed.Content {
			t.Fatalf("live %+v\nreplayed %+v", live, replayed)
		}
		if m2.Container.ID != m.Container.ID || !strings.Contains(m2.Content[2].Text, `"stdout":"one\n"`) {
			t.Fatalf("the replay's container: %s", m2.RawJSON())
		}
	})

	for _, tc := range []struct {
		engine string
		server bool
	}{{"shellgate", true}, {"openrouter", true}, {"auto", false}, {"native", false}, {"", false}} {
		t.Run("bash engine "+tc.engine, func(t *testing.T) {
			typ := "shellgate:bash"
			if tc.engine == "openrouter" {
				typ = "openrouter:bash"
			}
			tl := map[string]any{"type": typ}
			if tc.engine != "" {
				tl["parameters"] = map[string]any{"engine": tc.engine}
			}
			_, model := e.scriptAs("bash"+tc.engine, gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("toolu_b", "bash", map[string]any{"command": "echo hi; echo err >&2"})}}, gatewaytest.EchoResult())
			m, err := c.Messages.New(t.Context(), base(model), rawTools(tl))
			if err != nil {
				t.Fatal(err)
			}
			bs := blocks(t, m)
			if !tc.server {
				if m.StopReason != "tool_use" || len(bs) != 1 || bs[0]["type"] != "tool_use" || bs[0]["name"] != "bash" {
					t.Fatalf("client bash: %s", m.RawJSON())
				}
				return
			}
			ns := strings.TrimSuffix(typ, ":bash")
			if got := types(bs); !reflect.DeepEqual(got, []string{"server_tool_use", ns + "_bash_tool_result", "text"}) || bs[0]["name"] != typ {
				t.Fatalf("blocks %v", bs)
			}
			cont := bs[1]["content"]
			if gatewaytest.JSONAt(cont, "command") != "echo hi; echo err >&2" || gatewaytest.JSONAt(cont, "stdout") != "hi\n" || gatewaytest.JSONAt(cont, "stderr") != "err\n" || gatewaytest.JSONAt(cont, "exitCode") != 0.0 {
				t.Fatalf("bash result %v", cont)
			}
		})
	}
}

func TestMessagesErrors(t *testing.T) {
	e := newGatewayEnv(t)
	_, model := e.scriptAs("err", gatewaytest.Turn{Err: &gateway.UpstreamError{Status: 429, Type: "rate_limit_error", Message: "slow down"}})
	c := e.anthropic(e.keyA)
	_, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 10, Messages: userText("hi")})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 429 || ae.Type() != "rate_limit_error" || !strings.Contains(ae.Message, "slow down") || ae.RequestID == "" {
		t.Fatalf("upstream error: %v", err)
	}
	_, model = e.scriptAs("err2", gatewaytest.Turn{Err: &gateway.UpstreamError{Status: 502, Message: "connection refused"}})
	stream := c.Messages.NewStreaming(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 10, Messages: userText("hi")})
	for stream.Next() {
	}
	if !errors.As(stream.Err(), &ae) || ae.StatusCode != 502 || ae.Type() != "api_error" {
		t.Fatalf("streamed upstream error: %v", stream.Err())
	}

	// A failure after the stream began is an error event.
	_, model = e.scriptAs("err3", gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("Running."), gatewaytest.Call("e1", "bash_code_execution", map[string]string{"command": "echo hi"})}},
		gatewaytest.Turn{Err: &gateway.UpstreamError{Status: 529, Type: "overloaded_error", Message: "busy"}})
	stream = c.Messages.NewStreaming(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 10, Messages: userText("hi"), Tools: codeExecTool})
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "overloaded_error") || !strings.Contains(err.Error(), "busy") || len(acc.Content) != 3 {
		t.Fatalf("mid-stream error: %v, %d blocks", err, len(acc.Content))
	}

	_, model = e.scriptAs("ok", gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("x")}})
	valid := fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]`, model)
	manyTools := `[` + strings.Repeat(`{"name":"t","input_schema":{"type":"object"}},`, 10000) + `{"name":"u","input_schema":{"type":"object"}}]`
	deep := strings.Repeat(`[`, 5000) + strings.Repeat(`]`, 5000)
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
		status     int
		typ, msg   string
	}{
		{"no key", valid + "}", map[string]string{}, 401, "authentication_error", "missing API key"},
		{"bad key", valid + "}", map[string]string{"x-api-key": "sk-nope"}, 401, "authentication_error", "invalid"},
		{"not json", `{"model":`, nil, 400, "invalid_request_error", "malformed JSON"},
		{"array body", `[1]`, nil, 400, "invalid_request_error", "expected an object"},
		{"empty", ``, nil, 400, "invalid_request_error", "empty"},
		{"no max_tokens", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model), nil, 400, "invalid_request_error", "max_tokens"},
		{"max_tokens string", fmt.Sprintf(`{"model":%q,"max_tokens":"10","messages":[]}`, model), nil, 400, "invalid_request_error", "max_tokens"},
		{"empty messages", fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[{"role":"user","content":[]}]}`, model), nil, 400, "invalid_request_error", "empty"},
		{"no messages", fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[]}`, model), nil, 400, "invalid_request_error", "messages"},
		{"bad role", fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[{"role":"system","content":"x"}]}`, model), nil, 400, "invalid_request_error", "role"},
		{"content number", fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[{"role":"user","content":5}]}`, model), nil, 400, "invalid_request_error", "content"},
		{"deep nesting", fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[{"role":"user","content":%s}]}`, model, deep), nil, 400, "invalid_request_error", "content"},
		{"10000 tools", valid + `,"tools":` + manyTools + `}`, nil, 400, "invalid_request_error", "at most 256"},
		{"unknown tool type", valid + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, nil, 400, "invalid_request_error", "not supported"},
		{"duplicate tool", valid + `,"tools":[{"type":"code_execution_20250825","name":"code_execution"},{"name":"bash_code_execution","input_schema":{"type":"object"}}]}`, nil, 400, "invalid_request_error", "already defined"},
		{"bash on bad engine", valid + `,"tools":[{"type":"shellgate:bash","parameters":{"engine":"docker"}}]}`, nil, 400, "invalid_request_error", "engine"},
		{"tool_choice unknown", valid + `,"tool_choice":{"type":"tool","name":"nope"}}`, nil, 400, "invalid_request_error", "tool_choice"},
		{"max_tool_calls 0", valid + `,"max_tool_calls":0}`, nil, 400, "invalid_request_error", "max_tool_calls"},
		{"orphan result", fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_x","content":{"type":"bash_code_execution_result","stdout":"","stderr":"","return_code":0,"content":[]}}]}]}`, model), nil, 400, "invalid_request_error", "follows no server_tool_use"},
		{"unanswered server_tool_use", fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_x","name":"bash_code_execution","input":{"command":"ls"}}]}]}`, model), nil, 400, "invalid_request_error", "no result block"},
		{"unknown model provider", `{"model":"nope/m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, nil, 404, "not_found_error", "nope"},
		{"model without provider", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "provider/model"},
		{"unknown upload", fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[{"role":"user","content":[{"type":"container_upload","file_id":"file_nope"},{"type":"text","text":"read it"}]}],"tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`, model), nil, 404, "not_found_error", "file_nope"},
		{"bad image", fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"text/html","data":"eA=="}}]}]}`, model), nil, 400, "invalid_request_error", "media_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := tc.hdr
			if hdr == nil {
				hdr = map[string]string{"x-api-key": e.keyA}
			}
			hdr["anthropic-version"] = "2023-06-01"
			st, body := e.doH("POST", "/v1/messages?beta=true", tc.body, hdr)
			var env anthropicErrorBody
			if err := json.Unmarshal(body, &env); err != nil {
				t.Fatalf("%d %s", st, body)
			}
			if st != tc.status || env.Type != "error" || env.Error.Type != tc.typ || !strings.Contains(env.Error.Message, tc.msg) || env.RequestID == "" {
				t.Fatalf("got %d %s", st, body)
			}
		})
	}
	// Too large a body.
	st, body := e.doH("POST", "/v1/messages", strings.Repeat(" ", 33<<20), map[string]string{"x-api-key": e.keyA})
	if st != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "request_too_large") {
		t.Fatalf("oversized: %d %s", st, body)
	}
}

// anthropicErrorBody is Anthropic's error envelope as a client reads it
// (wire-formats §3.7).
type anthropicErrorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

func TestMessagesConversation(t *testing.T) {
	e := newGatewayEnv(t)
	s, model := e.scriptAs("conv", gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("ok")}, Stop: gateway.StopSequence,
		Usage: gateway.Usage{InputTokens: 100, OutputTokens: 5, CacheReadTokens: 60, CacheWriteTokens: 10}})
	body := fmt.Sprintf(`{"model":%q,"max_tokens":64,"temperature":0.5,"top_p":0.9,"stop_sequences":["END"],"metadata":{"user_id":"u-1"},
		"system":[{"type":"text","text":"one"},{"type":"text","text":"two"}],
		"tools":[{"name":"lookup","description":"d","input_schema":{"type":"object","properties":{"q":{"type":"string"}}}}],
		"tool_choice":{"type":"any","disable_parallel_tool_use":true},
		"thinking":{"type":"disabled"},
		"messages":[
		 {"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},
		 {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"x"},{"type":"text","text":"calling"},{"type":"tool_use","id":"toolu_9","name":"lookup","input":{"q":"x"}}]},
		 {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","is_error":true,"content":[{"type":"text","text":"failed"},{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}]}`, model)
	st, out := e.doH("POST", "/v1/messages", body, map[string]string{"Authorization": "Bearer " + e.keyA})
	if st != 200 {
		t.Fatalf("%d %s", st, out)
	}
	var m anthropic.Message
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m.StopReason != "stop_sequence" || m.StopSequence != "END" || m.Usage.InputTokens != 30 || m.Usage.CacheReadInputTokens != 60 || m.Usage.CacheCreationInputTokens != 10 || m.Container.ID != "" {
		t.Fatalf("%s", out)
	}
	req := s.Requests()[0]
	if req.System != "one\n\ntwo" || req.MaxTokens != 64 || *req.Temperature != 0.5 || *req.TopP != 0.9 || req.Stop[0] != "END" || req.User != "u-1" ||
		req.ToolChoice != (gateway.ToolChoice{Mode: gateway.ChoiceRequired, DisableParallel: true}) || len(req.Tools) != 1 || req.Tools[0].Name != "lookup" {
		t.Fatalf("request %+v", req)
	}
	msgs := req.Messages
	if len(msgs) != 3 || msgs[0].Parts[1].Image.MediaType != "image/png" || len(msgs[1].Parts) != 2 || msgs[1].Parts[1].Call.Arguments != `{"q":"x"}` {
		t.Fatalf("messages %+v", msgs)
	}
	r := msgs[2].Parts[0].Result
	if r.CallID != "toolu_9" || !r.IsError || r.Content != "failed" || len(r.Images) != 1 || r.Images[0].URL != "https://example.com/a.png" {
		t.Fatalf("tool result %+v", r)
	}
}

func TestMessagesLegacyCodeExecution(t *testing.T) {
	e := newGatewayEnv(t)
	_, model := e.scriptAs("legacy", gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("l1", "code_execution", map[string]string{"code": "import sys\nprint('it''s', 6*7)\nsys.exit(2)"})}}, gatewaytest.EchoResult())
	c := e.anthropic(e.keyA)
	m, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 100, Messages: userText("go"),
		Tools: []anthropic.ToolUnionParam{{OfCodeExecutionTool20250522: &anthropic.CodeExecutionTool20250522Param{}}}})
	if err != nil {
		t.Fatal(err)
	}
	bs := blocks(t, m)
	if got := types(bs); !reflect.DeepEqual(got, []string{"server_tool_use", "code_execution_tool_result", "text"}) || bs[0]["name"] != "code_execution" {
		t.Fatalf("blocks %v", bs)
	}
	if gatewaytest.JSONAt(bs[1], "content", "type") != "code_execution_result" || gatewaytest.JSONAt(bs[1], "content", "stdout") != "its 42\n" || gatewaytest.JSONAt(bs[1], "content", "return_code") != 2.0 {
		t.Fatalf("result %v", bs[1])
	}
}

func TestMessagesStreamPing(t *testing.T) {
	e := newGatewayEnv(t)
	defer func(d time.Duration) { messages.PingInterval = d }(messages.PingInterval)
	messages.PingInterval = 100 * time.Millisecond
	_, model := e.scriptAs("ping", gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("p", "bash_code_execution", map[string]string{"command": "sleep 1.5; echo up"})}},
		gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("done")}})
	body := fmt.Sprintf(`{"model":%q,"max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`, model)
	st, out := e.doH("POST", "/v1/messages", body, map[string]string{"x-api-key": e.keyA})
	if st != 200 {
		t.Fatalf("%d %s", st, out)
	}
	// A silent command still keeps the stream alive with pings.
	if n := strings.Count(string(out), "event: ping\ndata: {\"type\":\"ping\"}\n\n"); n < 1 || !strings.Contains(string(out), "event: message_stop") {
		t.Fatalf("%d pings in\n%s", n, out)
	}
}
