package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/responses"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
)

// These tests drive POST /v1/responses through the real server (keys,
// SQLite, crun sandboxes on the default image) with the official openai-go
// client, the model being a gatewaytest.Script whose recorded requests
// show what the upstream was sent.

// gwEnv is a server whose model "scripted/…" plays the script of the test
// that set it (one script at a time).
type gwEnv struct {
	*env
	models gatewaytest.Models
}

func newGatewayEnv(t *testing.T) *gwEnv {
	models := gatewaytest.Models{}
	e := newEnv(t, "crun", "default", func(c *Config) { c.Models = models })
	return &gwEnv{env: e, models: models}
}

// script installs the turns as the model "scripted/m" and returns it.
func (g *gwEnv) script(turns ...gatewaytest.Turn) *gatewaytest.Script {
	s := gatewaytest.NewScript(turns...)
	g.models["scripted"] = s
	return s
}

// newResponse sends a request whose body is params plus the raw fields in
// set (tools, session_id, ... as JSON values).
func (g *gwEnv) newResponse(t *testing.T, key string, input any, set map[string]any) (*responses.Response, error) {
	t.Helper()
	c := g.openAI(key)
	return c.Responses.New(t.Context(), responses.ResponseNewParams{Model: "scripted/m"}, jsonSets(input, set)...)
}

// streamResponse is newResponse streamed: its events, each checked to
// decode and to carry its sequence number.
func (g *gwEnv) streamResponse(t *testing.T, key string, input any, set map[string]any) []responses.ResponseStreamEventUnion {
	t.Helper()
	c := g.openAI(key)
	stream := c.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{Model: "scripted/m"}, jsonSets(input, set)...)
	defer stream.Close()
	var events []responses.ResponseStreamEventUnion
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != int64(len(events)) || ev.AsAny() == nil {
			t.Fatalf("event %d: sequence_number %d, decodes %v: %s", len(events), ev.SequenceNumber, ev.AsAny() != nil, ev.RawJSON())
		}
		events = append(events, ev)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

// jsonSets is the request options that set input and the fields in set.
func jsonSets(input any, set map[string]any) []option.RequestOption {
	opts := []option.RequestOption{option.WithJSONSet("input", input)}
	for k, v := range set {
		opts = append(opts, option.WithJSONSet(k, v))
	}
	return opts
}

const sumCommand = `python3 -c "print(sum(range(1,101)))"`

func shellCall(id string, cmds ...string) gateway.Part {
	return gatewaytest.Call(id, "shell", map[string]any{"commands": cmds})
}

// lastResult is the last tool result the model was sent.
func lastResult(req *gateway.Request) (gateway.ToolResult, bool) {
	if r := gatewaytest.LastResult(req); r != nil {
		return *r, true
	}
	return gateway.ToolResult{}, false
}

// checkRequired fails for every field openai-go marks api:"required" that
// the JSON left out, in v and in the present struct fields under it.
func checkRequired(t *testing.T, where string, v any) {
	t.Helper()
	var walk func(where string, v reflect.Value)
	walk = func(where string, v reflect.Value) {
		if v.Kind() != reflect.Struct {
			return
		}
		js := v.FieldByName("JSON")
		if !js.IsValid() {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if f.Name == "JSON" || !f.IsExported() {
				continue
			}
			jf := js.FieldByName(f.Name)
			if !jf.IsValid() {
				continue
			}
			raw := jf.Interface().(respjson.Field).Raw()
			if strings.Contains(f.Tag.Get("api"), "required") && raw == respjson.Omitted {
				t.Errorf("%s.%s: required by openai-go, missing", where, f.Tag.Get("json"))
			}
			if raw == respjson.Omitted || raw == respjson.Null {
				continue
			}
			fv := v.Field(i)
			switch fv.Kind() {
			case reflect.Struct:
				walk(where+"."+f.Name, fv)
			case reflect.Slice:
				for j := 0; j < fv.Len(); j++ {
					walk(fmt.Sprintf("%s.%s[%d]", where, f.Name, j), fv.Index(j))
				}
			}
		}
	}
	walk(where, reflect.ValueOf(v))
}

// checkResponse checks the object and each output item against openai-go.
func checkResponse(t *testing.T, r *responses.Response) {
	t.Helper()
	checkRequired(t, "response", *r)
	if !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.Model != "scripted/m" {
		t.Errorf("id %q object %q model %q", r.ID, r.Object, r.Model)
	}
	for i, it := range r.Output {
		where := fmt.Sprintf("output[%d]", i)
		switch it.Type {
		case "message":
			checkRequired(t, where, it.AsMessage())
		case "function_call":
			checkRequired(t, where, it.AsFunctionCall())
		case "shell_call":
			checkRequired(t, where, it.AsShellCall())
		case "shell_call_output":
			checkRequired(t, where, it.AsShellCallOutput())
		case "local_shell_call":
			checkRequired(t, where, it.AsLocalShellCall())
		case "local_shell_call_output":
			checkRequired(t, where, it.AsLocalShellCallOutput())
		case "code_interpreter_call":
			checkRequired(t, where, it.AsCodeInterpreterCall())
		}
	}
}

func TestResponsesText(t *testing.T) {
	g := newGatewayEnv(t)
	s := g.script(gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("Hello there.")}, Usage: gateway.Usage{InputTokens: 12, OutputTokens: 4, CacheReadTokens: 2}})
	r, err := g.newResponse(t, g.keyA, "Say hello", map[string]any{"instructions": "Be brief.", "temperature": 0.5, "metadata": map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	checkResponse(t, r)
	if r.Status != "completed" || r.OutputText() != "Hello there." || len(r.Output) != 1 {
		t.Fatalf("status %s text %q: %s", r.Status, r.OutputText(), r.RawJSON())
	}
	if u := r.Usage; u.InputTokens != 12 || u.OutputTokens != 4 || u.TotalTokens != 16 || u.InputTokensDetails.CachedTokens != 2 {
		t.Errorf("usage %s", u.RawJSON())
	}
	if r.Temperature != 0.5 || r.Instructions.OfString != "Be brief." || r.Metadata["k"] != "v" || r.MaxToolCalls != 30 {
		t.Errorf("echo: %s", r.RawJSON())
	}
	if strings.Contains(r.RawJSON(), "server_tool_use_details") {
		t.Errorf("server_tool_use_details without a server tool: %s", r.Usage.RawJSON())
	}
	req := s.Requests()[0]
	if req.System != "Be brief." || req.Model != "m" || len(req.Messages) != 1 || req.Messages[0].Parts[0].Text != "Say hello" || *req.Temperature != 0.5 {
		t.Errorf("upstream request %+v", req)
	}
}

var idPattern = regexp.MustCompile(`"(resp|msg|fc|sh|sho|lsh|st_tmp|ci)_[0-9a-f]{48}"`)

// rawUsage is the usage fields openai-go does not type.
type rawUsage struct {
	Usage struct {
		ServerToolUseDetails *struct {
			Requested int `json:"tool_calls_requested"`
			Executed  int `json:"tool_calls_executed"`
		} `json:"server_tool_use_details"`
		CostDetails *struct {
			ServerToolCost float64 `json:"server_tool_cost"`
		} `json:"cost_details"`
	} `json:"usage"`
}

func responseUsage(t *testing.T, r *responses.Response) rawUsage {
	t.Helper()
	var u rawUsage
	if err := json.Unmarshal([]byte(r.RawJSON()), &u); err != nil {
		t.Fatal(err)
	}
	return u
}

// routerItem is the shellgate:shell / openrouter:shell item.
type routerItem struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	CallID      string `json:"call_id"`
	Status      string `json:"status"`
	Arguments   string `json:"arguments"`
	ContainerID string `json:"container_id"`
	Error       string `json:"error"`
	Action      struct {
		Commands []string `json:"commands"`
	} `json:"action"`
	Output []CommandOutputJSON `json:"output"`
}

func asRouter(t *testing.T, it responses.ResponseOutputItemUnion) routerItem {
	t.Helper()
	var ri routerItem
	if err := json.Unmarshal([]byte(it.RawJSON()), &ri); err != nil {
		t.Fatal(err)
	}
	return ri
}

// echoedContainer is the container_reference the response's tools show.
func echoedContainer(t *testing.T, r *responses.Response) string {
	t.Helper()
	var v struct {
		Tools []struct {
			Environment *struct {
				Type        string `json:"type"`
				ContainerID string `json:"container_id"`
			} `json:"environment"`
			Parameters *struct {
				Environment *struct {
					Type        string `json:"type"`
					ContainerID string `json:"container_id"`
				} `json:"environment"`
			} `json:"parameters"`
		} `json:"tools"`
	}
	json.Unmarshal([]byte(r.RawJSON()), &v)
	for _, tl := range v.Tools {
		env := tl.Environment
		if tl.Parameters != nil {
			env = tl.Parameters.Environment
		}
		if env != nil && env.Type == "container_reference" {
			return env.ContainerID
		}
	}
	return ""
}

// TestResponsesShellLoop runs the model's shell call in the sandbox for
// each shell tool type, feeds the result back, and shows the step in the
// type's own items.
func TestResponsesShellLoop(t *testing.T) {
	g := newGatewayEnv(t)
	cases := []struct {
		name  string
		tool  map[string]any
		check func(t *testing.T, r *responses.Response, cid string)
	}{
		{"1 shell", map[string]any{"type": "shell", "environment": map[string]any{"type": "container_auto"}}, func(t *testing.T, r *responses.Response, cid string) {
			sc, so := r.Output[0].AsShellCall(), r.Output[1].AsShellCallOutput()
			if !strings.HasPrefix(sc.ID, "sh_") || sc.CallID != "call_1" || sc.Status != "completed" || len(sc.Action.Commands) != 1 || sc.Action.Commands[0] != sumCommand {
				t.Errorf("shell_call %s", sc.RawJSON())
			}
			if sc.Environment.Type != "container_reference" || sc.Environment.ContainerID != cid || sc.Action.JSON.TimeoutMs.Raw() != "null" {
				t.Errorf("shell_call environment/action %s", sc.RawJSON())
			}
			if !strings.HasPrefix(so.ID, "sho_") || so.CallID != "call_1" || so.Status != "completed" || len(so.Output) != 1 ||
				so.Output[0].Stdout != "5050\n" || so.Output[0].Outcome.Type != "exit" || so.Output[0].Outcome.ExitCode != 0 || !so.Output[0].Outcome.JSON.ExitCode.Valid() {
				t.Errorf("shell_call_output %s", so.RawJSON())
			}
		}},
		{"2 local_shell", map[string]any{"type": "local_shell"}, func(t *testing.T, r *responses.Response, cid string) {
			lc, lo := r.Output[0].AsLocalShellCall(), r.Output[1].AsLocalShellCallOutput()
			if lc.CallID != "call_1" || lc.Status != "completed" || !reflect.DeepEqual(lc.Action.Command, []string{"bash", "-lc", sumCommand}) {
				t.Errorf("local_shell_call %s", lc.RawJSON())
			}
			if lo.ID != "call_1" || !strings.Contains(lo.Output, `"stdout":"5050\n"`) || !strings.Contains(lo.Output, cid) {
				t.Errorf("local_shell_call_output %s", lo.RawJSON())
			}
		}},
		{"3 shellgate:shell", map[string]any{"type": "shellgate:shell"}, func(t *testing.T, r *responses.Response, cid string) {
			ri := asRouter(t, r.Output[0])
			if ri.Type != "shellgate:shell" || ri.CallID != "call_1" || ri.Status != "completed" || ri.ContainerID != cid ||
				len(ri.Output) != 1 || ri.Output[0].Stdout != "5050\n" || *ri.Output[0].Outcome.ExitCode != 0 || ri.Action.Commands[0] != sumCommand {
				t.Errorf("router item %s", r.Output[0].RawJSON())
			}
		}},
		{"4 openrouter:shell", map[string]any{"type": "openrouter:shell", "parameters": map[string]any{"engine": "openrouter"}}, func(t *testing.T, r *responses.Response, cid string) {
			ri := asRouter(t, r.Output[0])
			if ri.Type != "openrouter:shell" || ri.Output[0].Stdout != "5050\n" || ri.ContainerID != cid {
				t.Errorf("router item %s", r.Output[0].RawJSON())
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := g.script(gatewaytest.Turn{Parts: []gateway.Part{shellCall("call_1", sumCommand)}}, gatewaytest.EchoResult())
			r, err := g.newResponse(t, g.keyA, "What is 1+2+...+100?", map[string]any{"tools": []any{c.tool}})
			if err != nil {
				t.Fatal(err)
			}
			checkResponse(t, r)
			cid := echoedContainer(t, r)
			if c.tool["type"] != "local_shell" && cid == "" {
				t.Fatalf("tools do not name the container: %s", r.RawJSON())
			}
			if cid == "" {
				cid = "cntr_"
			}
			c.check(t, r, cid)
			last := r.Output[len(r.Output)-1]
			if last.Type != "message" || !strings.Contains(r.OutputText(), `5050`) {
				t.Errorf("answer %s", r.RawJSON())
			}
			reqs := s.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d upstream requests", len(reqs))
			}
			if n := len(reqs[0].Tools); n != 1 || reqs[0].Tools[0].Name != "shell" {
				t.Errorf("the model's tools: %+v", reqs[0].Tools)
			}
			res, ok := lastResult(&reqs[1])
			if !ok || res.CallID != "call_1" || res.IsError || !strings.Contains(res.Content, `"stdout":"5050\n"`) {
				t.Errorf("tool result fed back: %+v", res)
			}
			u := responseUsage(t, r).Usage
			if u.ServerToolUseDetails == nil || u.ServerToolUseDetails.Requested != 1 || u.ServerToolUseDetails.Executed != 1 {
				t.Errorf("server_tool_use_details %s", r.Usage.RawJSON())
			}
			// A new container pays at least 30 s at $0.0001/s.
			if u.CostDetails == nil || u.CostDetails.ServerToolCost < 0.003 {
				t.Errorf("cost_details %s", r.Usage.RawJSON())
			}
		})
	}
}

var nativeShell = map[string]any{"type": "shell"}

// TestResponsesStepErrors: arguments the tool refuses are an error result
// the model reads, and the loop goes on; the item shows the same text.
func TestResponsesStepErrors(t *testing.T) {
	g := newGatewayEnv(t)
	many := make([]string, 101)
	for i := range many {
		many[i] = "true"
	}
	cases := []struct {
		name string
		call gateway.Part
		want string // in the error the model reads
	}{
		{"1 101 commands", shellCall("call_x", many...), "101 commands in one call: at most 100"},
		{"2 arguments not JSON", gatewaytest.Call("call_x", "shell", `{"commands": ["ls"`), "arguments are not a JSON object"},
		{"3 wrong type", gatewaytest.Call("call_x", "shell", `{"commands": "ls"}`), "arguments are not a JSON object"},
		{"4 empty command list", gatewaytest.Call("call_x", "shell", `{"commands": []}`), "commands is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := g.script(gatewaytest.Turn{Parts: []gateway.Part{c.call}}, gatewaytest.EchoResult())
			r, err := g.newResponse(t, g.keyA, "go", map[string]any{"tools": []any{nativeShell}})
			if err != nil {
				t.Fatal(err)
			}
			checkResponse(t, r)
			res, _ := lastResult(&s.Requests()[1])
			if !res.IsError || !strings.Contains(res.Content, c.want) {
				t.Fatalf("the model read %+v", res)
			}
			so := r.Output[1].AsShellCallOutput()
			if so.Status != "incomplete" || len(so.Output) != 1 || so.Output[0].Stderr != res.Content || so.Output[0].Outcome.ExitCode != 1 {
				t.Errorf("shell_call_output %s", so.RawJSON())
			}
			if r.Status != "completed" || !strings.Contains(r.OutputText(), c.want) {
				t.Errorf("the loop did not go on: %s", r.RawJSON())
			}
			if u := responseUsage(t, r).Usage.ServerToolUseDetails; u == nil || u.Requested != 1 || u.Executed != 0 {
				t.Errorf("usage %s", r.Usage.RawJSON())
			}
		})
	}
}

// TestResponsesMaxToolCalls: when the budget is spent the model is asked
// once more with tool_choice none; its further calls do not run.
func TestResponsesMaxToolCalls(t *testing.T) {
	g := newGatewayEnv(t)
	keep := func(i int) gatewaytest.Turn {
		return gatewaytest.Turn{Parts: []gateway.Part{shellCall(fmt.Sprintf("call_%d", i), "echo step >> steps")}}
	}
	cases := []struct {
		name      string
		max       any
		steps     int // steps that run
		echoedMax int64
	}{
		{"1 two", 2, 2, 2},
		{"2 above 30 is clamped", 1000, 30, 30},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var turns []gatewaytest.Turn
			for i := 0; i <= c.steps; i++ {
				turns = append(turns, keep(i))
			}
			s := g.script(turns...)
			r, err := g.newResponse(t, g.keyA, "loop", map[string]any{"tools": []any{nativeShell}, "max_tool_calls": c.max})
			if err != nil {
				t.Fatal(err)
			}
			reqs := s.Requests()
			if len(reqs) != c.steps+1 {
				t.Fatalf("%d upstream requests, want %d", len(reqs), c.steps+1)
			}
			for i, q := range reqs {
				want := gateway.ChoiceAuto
				if i == c.steps {
					want = gateway.ChoiceNone
				}
				if q.ToolChoice.Mode != want {
					t.Errorf("request %d: tool_choice %q, want %q", i, q.ToolChoice.Mode, want)
				}
			}
			calls := 0
			for _, it := range r.Output {
				if it.Type == "shell_call" {
					calls++
				}
			}
			if calls != c.steps || r.MaxToolCalls != c.echoedMax {
				t.Errorf("%d shell calls shown, max_tool_calls %d", calls, r.MaxToolCalls)
			}
			u := responseUsage(t, r).Usage.ServerToolUseDetails
			if u == nil || u.Requested != c.steps+1 || u.Executed != c.steps {
				t.Errorf("usage %s", r.Usage.RawJSON())
			}
			cid := echoedContainer(t, r)
			out := g.exec(g.keyA, cid, "wc -l < steps").Output[0].Stdout
			if strings.TrimSpace(out) != fmt.Sprint(c.steps) {
				t.Errorf("%s steps ran, want %d", out, c.steps)
			}
		})
	}
}

// TestResponsesClientToolReplay: a client function call after a shell step
// ends the response with the shell items and the call; the next request
// replays them (with or without created_by) with the function's output,
// nothing runs again, and the upstream reads the conversation as it was.
func TestResponsesClientToolReplay(t *testing.T) {
	g := newGatewayEnv(t)
	lookup := map[string]any{"type": "function", "name": "lookup", "description": "Look a word up.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"word": map[string]any{"type": "string"}}}}
	const cmd = "echo ran >> /tmp/count; echo hello"
	cases := []struct {
		name      string
		tool      map[string]any
		createdBy string // "": strip created_by; else set it on every replayed item
	}{
		{"1 shell without created_by", nativeShell, ""},
		{"2 shell with created_by", nativeShell, "user_123"},
		{"3 shellgate:shell", map[string]any{"type": "shellgate:shell"}, ""},
		{"4 local_shell", map[string]any{"type": "local_shell"}, "user_123"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := g.script(
				gatewaytest.Turn{Parts: []gateway.Part{shellCall("call_s", cmd)}},
				gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("Looking it up."), gatewaytest.Call("call_f", "lookup", map[string]string{"word": "hello"})}},
				gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("It means hi.")}},
			)
			tools := []any{c.tool, lookup}
			user := map[string]any{"role": "user", "content": "What does the output mean?"}
			r1, err := g.newResponse(t, g.keyA, []any{user}, map[string]any{"tools": tools})
			if err != nil {
				t.Fatal(err)
			}
			checkResponse(t, r1)
			types := []string{}
			for _, it := range r1.Output {
				types = append(types, it.Type)
			}
			n := len(types)
			if n < 3 || types[n-1] != "function_call" || types[n-2] != "message" {
				t.Fatalf("output %v", types)
			}
			fc := r1.Output[n-1].AsFunctionCall()
			if fc.CallID != "call_f" || fc.Name != "lookup" || fc.Arguments != `{"word":"hello"}` || fc.Status != "completed" {
				t.Errorf("function_call %s", fc.RawJSON())
			}
			cid := echoedContainer(t, r1)
			if c.tool["type"] == "local_shell" {
				var named struct {
					ContainerID string `json:"container_id"`
				}
				json.Unmarshal([]byte(r1.Output[1].AsLocalShellCallOutput().Output), &named)
				cid = named.ContainerID
			}

			input := []any{user}
			for _, it := range r1.Output {
				var m map[string]any
				json.Unmarshal([]byte(it.RawJSON()), &m)
				delete(m, "created_by")
				if c.createdBy != "" {
					m["created_by"] = c.createdBy
				}
				input = append(input, m)
			}
			input = append(input, map[string]any{"type": "function_call_output", "call_id": "call_f", "output": "hello: a greeting"})
			r2, err := g.newResponse(t, g.keyA, input, map[string]any{"tools": tools})
			if err != nil {
				t.Fatal(err)
			}
			checkResponse(t, r2)
			if r2.OutputText() != "It means hi." || len(r2.Output) != 1 {
				t.Fatalf("second response %s", r2.RawJSON())
			}
			reqs := s.Requests()
			if len(reqs) != 3 {
				t.Fatalf("%d upstream requests", len(reqs))
			}
			live, _ := lastResult(&reqs[1])
			got := reqs[2].Messages
			// user, assistant shell call, user result, assistant text + lookup call, user result
			if len(got) != 5 || got[1].Role != gateway.RoleAssistant || got[1].Parts[0].Call.ID != "call_s" || got[1].Parts[0].Call.Name != "shell" {
				t.Fatalf("replayed conversation %+v", got)
			}
			var args struct{ Commands []string }
			if json.Unmarshal([]byte(got[1].Parts[0].Call.Arguments), &args); len(args.Commands) != 1 || args.Commands[0] != cmd {
				t.Errorf("replayed shell arguments %s", got[1].Parts[0].Call.Arguments)
			}
			replayed := got[2].Parts[0].Result
			if replayed.CallID != "call_s" || replayed.IsError || !sameShellResult(live.Content, replayed.Content) {
				t.Errorf("replayed result\n %s\nlive\n %s", replayed.Content, live.Content)
			}
			if p := got[3].Parts; len(p) != 2 || p[0].Text != "Looking it up." || p[1].Call.ID != "call_f" {
				t.Errorf("replayed assistant turn %+v", p)
			}
			if p := got[4].Parts; len(p) != 1 || p[0].Result.CallID != "call_f" || p[0].Result.Content != "hello: a greeting" {
				t.Errorf("function output %+v", p)
			}
			if cid2 := echoedContainer(t, r2); c.tool["type"] != "local_shell" && cid2 != cid {
				t.Errorf("the replay ran in container %q, the first request in %q", cid2, cid)
			}
			if out := g.exec(g.keyA, cid, "wc -l < /tmp/count").Output[0].Stdout; strings.TrimSpace(out) != "1" {
				t.Errorf("the command ran %s times", out)
			}
		})
	}
}

// sameShellResult compares what the model read for a shell step: the same
// container and command outputs.
func sameShellResult(a, b string) bool {
	type res struct {
		ContainerID string            `json:"container_id"`
		Output      []json.RawMessage `json:"output"`
	}
	var x, y res
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y) && len(x.Output) > 0
}

// openAIError decodes OpenAI's error envelope, failing unless it has all
// four keys.
func openAIError(t *testing.T, status int, body []byte) (msg, typ string, param, code *string) {
	t.Helper()
	var eb struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &eb); err != nil || len(eb.Error) != 4 {
		t.Fatalf("status %d: not OpenAI's error envelope: %s", status, body)
	}
	json.Unmarshal(eb.Error["message"], &msg)
	json.Unmarshal(eb.Error["type"], &typ)
	json.Unmarshal(eb.Error["param"], &param)
	json.Unmarshal(eb.Error["code"], &code)
	return
}

// statusCodeError reads OpenAI's error envelope as /api/v1 writes it:
// its code the HTTP status, a number.
func statusCodeError(t *testing.T, status int, body []byte) (msg, typ string, code int) {
	t.Helper()
	var eb struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &eb); err != nil || len(eb.Error) != 4 || json.Unmarshal(eb.Error["code"], &code) != nil {
		t.Fatalf("status %d: not the envelope with a numeric code: %s", status, body)
	}
	json.Unmarshal(eb.Error["message"], &msg)
	json.Unmarshal(eb.Error["type"], &typ)
	return
}

// TestResponsesOrphans: an output without its call, or a call without its
// output, is OpenAI's exact 400.
func TestResponsesOrphans(t *testing.T) {
	g := newGatewayEnv(t)
	s := g.script()
	user := map[string]any{"role": "user", "content": "hi"}
	shellCallItem := map[string]any{"type": "shell_call", "call_id": "call_abc", "status": "completed",
		"action":      map[string]any{"commands": []string{"ls"}, "timeout_ms": nil, "max_output_length": nil},
		"environment": map[string]any{"type": "container_reference", "container_id": "cntr_x"}}
	shellOut := map[string]any{"type": "shell_call_output", "call_id": "call_abc", "output": []any{map[string]any{"stdout": "", "stderr": "", "outcome": map[string]any{"type": "exit", "exit_code": 0}}}}
	fnCall := map[string]any{"type": "function_call", "call_id": "call_abc", "name": "lookup", "arguments": "{}"}
	fnOut := map[string]any{"type": "function_call_output", "call_id": "call_abc", "output": "x"}
	cases := []struct {
		name  string
		input []any
		msg   string
	}{
		{"1 shell output without call", []any{user, shellOut}, "No tool call found for shell call output with call_id call_abc."},
		{"2 shell call without output", []any{user, shellCallItem}, "No tool output found for shell call call_abc."},
		{"3 function output without call", []any{user, fnOut}, "No tool call found for function call output with call_id call_abc."},
		{"4 function call without output", []any{user, fnCall}, "No tool output found for function call call_abc."},
		{"5 shell output answering a function call", []any{user, fnCall, shellOut}, "No tool call found for shell call output with call_id call_abc."},
		{"6 output before its call", []any{user, shellOut, shellCallItem}, "No tool call found for shell call output with call_id call_abc."},
		{"7 local shell output without call", []any{user, map[string]any{"type": "local_shell_call_output", "id": "call_abc", "output": "{}"}}, "No tool call found for local shell call output with call_id call_abc."},
		{"8 router item without output", []any{user, map[string]any{"type": "shellgate:shell", "call_id": "call_abc", "status": "completed", "arguments": `{"commands":["ls"]}`}}, "No tool output found for shell call call_abc."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, body := g.do("POST", "/v1/responses", g.keyA, map[string]any{"model": "scripted/m", "input": c.input, "tools": []any{nativeShell}})
			want := fmt.Sprintf(`{"error":{"message":%q,"type":"invalid_request_error","param":"input","code":null}}`, c.msg)
			if st != http.StatusBadRequest || strings.TrimSpace(string(body)) != want {
				t.Fatalf("%d %s\nwant %s", st, body, want)
			}
		})
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("the model was called %d times", n)
	}
}

// TestResponsesBadRequests: hostile and invalid bodies are 4xx in OpenAI's
// envelope, never a 500, and the model is never called.
func TestResponsesBadRequests(t *testing.T) {
	g := newGatewayEnv(t)
	s := g.script()
	many := make([]any, 10_000)
	for i := range many {
		many[i] = map[string]any{"type": "function", "name": fmt.Sprintf("f%d", i)}
	}
	deep := strings.Repeat("[", 20_000) + strings.Repeat("]", 20_000)
	body := func(extra map[string]any) map[string]any {
		b := map[string]any{"model": "scripted/m", "input": "hi"}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	cases := []struct {
		name   string
		body   any
		status int
		param  string
		msg    string
	}{
		{"01 not JSON", `{"model":`, 400, "", "could not parse the JSON"},
		{"02 an array", `[1,2]`, 400, "", "Invalid type"},
		{"03 empty body", ``, 400, "", "empty"},
		{"04 no model", map[string]any{"input": "hi"}, 400, "model", "'model'"},
		{"05 no input", map[string]any{"model": "scripted/m"}, 400, "input", "'input'"},
		{"06 model a number", map[string]any{"model": 5, "input": "hi"}, 400, "model", "Invalid type for 'model'"},
		{"07 input a number", body(map[string]any{"input": 5}), 400, "input", "Invalid type for 'input'"},
		{"08 10,000 tools", body(map[string]any{"tools": many}), 400, "tools", "maximum length 128"},
		{"09 deep nesting", `{"model":"scripted/m","input":` + deep + `}`, 400, "", "could not parse"},
		{"10 bash on responses", body(map[string]any{"tools": []any{map[string]any{"type": "shellgate:bash"}}}), 400, "tools[0].type", "Messages API only"},
		{"11 openrouter bash", body(map[string]any{"tools": []any{map[string]any{"type": "openrouter:bash"}}}), 400, "tools[0].type", "Messages API only"},
		{"12 web_search", body(map[string]any{"tools": []any{map[string]any{"type": "web_search"}}}), 400, "tools[0].type", `"web_search" is not supported`},
		{"13 code_interpreter with a bad container", body(map[string]any{"tools": []any{map[string]any{"type": "code_interpreter", "container": "cntr x/../y"}}}), 400, "tools[0].container", "not a container id"},
		{"14 two shell tools", body(map[string]any{"tools": []any{nativeShell, map[string]any{"type": "local_shell"}}}), 400, "tools[1].type", "Only one shell tool"},
		{"15 function named shell beside the shell tool", body(map[string]any{"tools": []any{nativeShell, map[string]any{"type": "function", "name": "shell"}}}), 400, "tools", `named "shell"`},
		{"16 bad function name", body(map[string]any{"tools": []any{map[string]any{"type": "function", "name": "a b"}}}), 400, "tools[0].name", "does not match"},
		{"17 local environment", body(map[string]any{"tools": []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "local"}}}}), 400, "tools[0].environment.type", "runs on the client"},
		{"18 bad memory limit", body(map[string]any{"tools": []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_auto", "memory_limit": "2g"}}}}), 400, "tools[0].environment.memory_limit", "1g, 4g"},
		{"19 reference too long", body(map[string]any{"tools": []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_reference", "container_id": strings.Repeat("c", 41)}}}}), 400, "container_reference", "1-40"},
		{"20 temperature out of range", body(map[string]any{"temperature": 3}), 400, "temperature", "between 0 and 2"},
		{"21 max_tool_calls zero", body(map[string]any{"max_tool_calls": 0}), 400, "max_tool_calls", ">= 1"},
		{"22 max_tool_calls a string", body(map[string]any{"max_tool_calls": "5"}), 400, "max_tool_calls", "Invalid type for 'max_tool_calls'"},
		{"23 previous_response_id", body(map[string]any{"previous_response_id": "resp_1"}), 400, "previous_response_id", "stores no responses"},
		{"24 tool_choice unknown function", body(map[string]any{"tool_choice": map[string]any{"type": "function", "name": "nope"}}), 400, "tool_choice.name", "not found"},
		{"25 input_file part", body(map[string]any{"input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_file", "file_id": "file_1"}}}}}), 400, "input[0].content[0].type", "input_file"},
		{"26 bad image url", body(map[string]any{"input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_image", "image_url": "ftp://x"}}}}}), 400, "input[0].content[0].image_url", "data: or http"},
		{"27 unknown item type", body(map[string]any{"input": []any{map[string]any{"type": "computer_call"}}}), 400, "input[0].type", "not supported"},
		{"28 role tool", body(map[string]any{"input": []any{map[string]any{"role": "tool", "content": "x"}}}), 400, "input[0].role", "Invalid value"},
		{"29 too much metadata", body(map[string]any{"metadata": map[string]any{"a": strings.Repeat("v", 513)}}), 400, "metadata", "longer than 512"},
		{"30 metadata values not strings", body(map[string]any{"metadata": map[string]any{"a": 1}}), 400, "metadata", "Invalid type"},
		{"31 json_schema output", body(map[string]any{"text": map[string]any{"format": map[string]any{"type": "json_schema"}}}), 400, "text.format.type", "not supported"},
		{"32 unknown provider", body(map[string]any{"model": "nope/m"}), 404, "model", ""},
		{"33 model without provider", body(map[string]any{"model": "m"}), 400, "model", "provider/model"},
		{"34 oversized body", `{"model":"scripted/m","input":"` + strings.Repeat("x", 33<<20) + `"}`, 413, "", "larger than"},
		{"36 unknown file id", body(map[string]any{"tools": []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_auto", "file_ids": []string{"file_nope"}}}}}), 404, "file_id", "file_nope"},
		{"37 code_interpreter memory_limit", body(map[string]any{"tools": []any{map[string]any{"type": "code_interpreter", "container": map[string]any{"type": "auto", "memory_limit": "2g"}}}}), 400, "tools[0].container.memory_limit", "1g, 4g"},
		{"38 code_interpreter container type", body(map[string]any{"tools": []any{map[string]any{"type": "code_interpreter", "container": map[string]any{"type": "container_auto"}}}}), 400, "tools[0].container.type", "expected auto"},
		{"39 code_interpreter container a number", body(map[string]any{"tools": []any{map[string]any{"type": "code_interpreter", "container": 5}}}), 400, "tools[0].container", "Invalid type"},
		{"40 function named code_interpreter beside the tool", body(map[string]any{"tools": []any{map[string]any{"type": "code_interpreter"}, map[string]any{"type": "function", "name": "code_interpreter"}}}), 400, "tools", `named "code_interpreter"`},
		{"41 shell and code_interpreter on different containers", body(map[string]any{"tools": []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_reference", "container_id": "cntr_a"}}, map[string]any{"type": "code_interpreter", "container": "cntr_b"}}}), 400, "tools[1].container", "share one container"},
		{"42 code_interpreter file_ids not a list", body(map[string]any{"tools": []any{map[string]any{"type": "code_interpreter", "container": map[string]any{"type": "auto", "file_ids": "file_1"}}}}), 400, "tools[0].container.file_ids", "Invalid type"},
		{"35 shell_call_output output not a list", body(map[string]any{"input": []any{map[string]any{"type": "shell_call_output", "call_id": "c", "output": "x"}}}), 400, "input[0].output", "Invalid type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, b := g.do("POST", "/v1/responses", g.keyA, c.body)
			msg, typ, param, _ := openAIError(t, st, b)
			if st != c.status || typ != "invalid_request_error" || !strings.Contains(msg, c.msg) {
				t.Fatalf("%d %s", st, b)
			}
			if got := ""; param != nil {
				if got = *param; got != c.param {
					t.Errorf("param %q, want %q", got, c.param)
				}
			} else if c.param != "" {
				t.Errorf("param null, want %q", c.param)
			}
		})
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("the model was called %d times", n)
	}
}

// TestResponsesContainers: session_id (body or header) and
// container_reference pick the container; another workspace's container is
// a 404 before the model is called.
func TestResponsesContainers(t *testing.T) {
	g := newGatewayEnv(t)
	write := gatewaytest.Turn{Parts: []gateway.Part{shellCall("call_w", "echo kept > note.txt")}}
	read := gatewaytest.Turn{Parts: []gateway.Part{shellCall("call_r", "cat /mnt/data/note.txt || cat note.txt")}}
	cases := []struct {
		name string
		set  map[string]any
		opts []option.RequestOption
	}{
		{"1 session_id", map[string]any{"session_id": "sess-abc"}, nil},
		{"2 x-session-id", nil, []option.RequestOption{option.WithHeader("x-session-id", "hdr-1")}},
		{"3 prompt_cache_key", map[string]any{"prompt_cache_key": "cache_key_1"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cids []string
			for i, turn := range []gatewaytest.Turn{write, read} {
				g.script(turn, gatewaytest.EchoResult())
				set := map[string]any{"tools": []any{nativeShell}}
				for k, v := range c.set {
					set[k] = v
				}
				opts := append([]option.RequestOption{option.WithJSONSet("input", "go")}, c.opts...)
				for k, v := range set {
					opts = append(opts, option.WithJSONSet(k, v))
				}
				cl := g.openAI(g.keyA)
				r, err := cl.Responses.New(t.Context(), responses.ResponseNewParams{Model: "scripted/m"}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				cids = append(cids, echoedContainer(t, r))
				if i == 1 && r.Output[1].AsShellCallOutput().Output[0].Stdout != "kept\n" {
					t.Fatalf("the second request did not see the first one's file: %s", r.Output[1].RawJSON())
				}
			}
			if cids[0] == "" || cids[0] != cids[1] {
				t.Errorf("containers %v", cids)
			}
		})
	}

	t.Run("4 container_reference", func(t *testing.T) {
		mine := g.create(g.keyA, "")
		g.exec(g.keyA, mine.ID, "echo mine > who")
		g.script(gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "cat who")}}, gatewaytest.EchoResult())
		tool := map[string]any{"type": "shell", "environment": map[string]any{"type": "container_reference", "container_id": mine.ID}}
		r, err := g.newResponse(t, g.keyA, "go", map[string]any{"tools": []any{tool}})
		if err != nil {
			t.Fatal(err)
		}
		if echoedContainer(t, r) != mine.ID || r.Output[1].AsShellCallOutput().Output[0].Stdout != "mine\n" {
			t.Fatalf("%s", r.RawJSON())
		}
	})

	t.Run("5 another workspace's container", func(t *testing.T) {
		theirs := g.create(g.keyB, "")
		s := g.script(gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "ls")}}, gatewaytest.EchoResult())
		tool := map[string]any{"type": "shell", "environment": map[string]any{"type": "container_reference", "container_id": theirs.ID}}
		_, err := g.newResponse(t, g.keyA, "go", map[string]any{"tools": []any{tool}})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Type != "invalid_request_error" {
			t.Fatalf("%v", err)
		}
		if len(s.Requests()) != 0 {
			t.Errorf("the model was called")
		}
	})
}

// TestResponsesUpstreamErrors: an upstream failure is the client's error
// with the upstream's status and message; streamed, it is response.failed.
func TestResponsesUpstreamErrors(t *testing.T) {
	g := newGatewayEnv(t)
	cases := []struct {
		name   string
		err    *gateway.UpstreamError
		status int
		typ    string
	}{
		{"1 rate limited", &gateway.UpstreamError{Status: 429, Type: "rate_limit_error", Message: "slow down"}, 429, "rate_limit_error"},
		{"2 bad request", &gateway.UpstreamError{Status: 400, Message: "context too long"}, 400, "invalid_request_error"},
		{"3 connection failed", &gateway.UpstreamError{Status: 502, Message: "upstream connection refused"}, 502, "server_error"},
		{"4 timeout", &gateway.UpstreamError{Status: 504, Message: "upstream timed out after 60s"}, 504, "server_error"},
		{"5 overloaded", &gateway.UpstreamError{Status: 529, Type: "overloaded_error", Message: "overloaded"}, 529, "overloaded_error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The error comes after a shell step: what ran is still billed.
			g.script(gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "echo hi")}}, gatewaytest.Turn{Err: c.err})
			req := map[string]any{"model": "scripted/m", "input": "hi", "tools": []any{nativeShell}}
			st, b := g.do("POST", "/v1/responses", g.keyA, req)
			msg, typ, _, _ := openAIError(t, st, b)
			if st != c.status || msg != c.err.Message || typ != c.typ {
				t.Fatalf("%d %s", st, b)
			}

			g.script(gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "echo hi")}}, gatewaytest.Turn{Err: c.err})
			cl := g.openAI(g.keyA)
			stream := cl.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{Model: "scripted/m"},
				option.WithJSONSet("input", "hi"), option.WithJSONSet("tools", []any{nativeShell}))
			defer stream.Close()
			var last responses.ResponseStreamEventUnion
			for stream.Next() {
				last = stream.Current()
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if last.Type != "response.failed" || last.Response.Status != "failed" || last.Response.Error.Message != c.err.Message {
				t.Fatalf("last event %s", last.RawJSON())
			}
			if n := len(last.Response.Output); n != 2 {
				t.Errorf("the failed response holds %d items, want the shell call and output", n)
			}
		})
	}
}

// TestResponsesAuthAndConfig: key failures are 401 in OpenAI's envelope on
// both paths, its code "invalid_api_key" on /v1 and the status, a number,
// on OpenRouter's /api/v1 (its SDK requires one), as for a request the
// frontend refuses; a server without models says so.
func TestResponsesAuthAndConfig(t *testing.T) {
	g := newGatewayEnv(t)
	g.script(gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("ok")}})
	req := map[string]any{"model": "scripted/m", "input": "hi"}
	st, b := g.doH("POST", "/v1/responses", req, nil)
	msg, typ, _, code := openAIError(t, st, b)
	if st != 401 || typ != "invalid_request_error" || code == nil || *code != "invalid_api_key" || !strings.Contains(msg, "missing API key") {
		t.Errorf("/v1/responses without a key: %d %s", st, b)
	}
	st, b = g.do("POST", "/v1/responses", "sg_not_a_key", req)
	if _, _, _, code := openAIError(t, st, b); st != 401 || *code != "invalid_api_key" {
		t.Errorf("/v1/responses with a bad key: %d %s", st, b)
	}
	st, b = g.doH("POST", "/api/v1/responses", req, nil)
	if msg, typ, code := statusCodeError(t, st, b); st != 401 || typ != "invalid_request_error" || code != 401 || !strings.Contains(msg, "missing API key") {
		t.Errorf("/api/v1/responses without a key: %d %s", st, b)
	}
	st, b = g.do("POST", "/api/v1/responses", "sg_not_a_key", req)
	if _, _, code := statusCodeError(t, st, b); st != 401 || code != 401 {
		t.Errorf("/api/v1/responses with a bad key: %d %s", st, b)
	}
	bad := map[string]any{"model": "scripted/m", "input": "hi", "temperature": 7}
	st, b = g.do("POST", "/api/v1/responses", g.keyA, bad)
	if msg, _, code := statusCodeError(t, st, b); st != 400 || code != 400 || !strings.Contains(msg, "temperature") {
		t.Errorf("/api/v1/responses with temperature 7: %d %s", st, b)
	}
	st, b = g.do("POST", "/v1/responses", g.keyA, bad)
	if _, _, _, code := openAIError(t, st, b); st != 400 || code != nil {
		t.Errorf("/v1/responses with temperature 7: %d %s", st, b)
	}
	st, b = g.doH("POST", "/api/v1/responses", req, map[string]string{"x-api-key": g.keyA})
	if st != 200 || !strings.Contains(string(b), `"text":"ok"`) {
		t.Errorf("/api/v1/responses with x-api-key: %d %s", st, b)
	}

	bare := newEnv(t, "crun", "busybox")
	st, b = bare.do("POST", "/v1/responses", bare.keyA, req)
	if msg, _, _, _ := openAIError(t, st, b); st != 503 || !strings.Contains(msg, "No models are configured") {
		t.Errorf("without models: %d %s", st, b)
	}
}

// normalize strips what differs between two runs of the same script: ids,
// times, container ids and the metered cost.
func normalize(t *testing.T, raw string, containers ...string) string {
	t.Helper()
	s := idPattern.ReplaceAllString(raw, `"ID"`)
	s = regexp.MustCompile(`"(created_at|completed_at)":\d+`).ReplaceAllString(s, `"$1":0`)
	s = regexp.MustCompile(`"server_tool_cost":[0-9.e-]+`).ReplaceAllString(s, `"server_tool_cost":0`)
	for _, c := range containers {
		if c != "" {
			s = strings.ReplaceAll(s, c, "CNTR")
		}
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	b, _ := json.MarshalIndent(v, "", " ")
	return string(b)
}

// TestResponsesStreaming: every event decodes with an increasing
// sequence_number, shell events come in the live API's order, command
// output streams while the command runs, and response.completed is the
// non-streamed response for the same script.
func TestResponsesStreaming(t *testing.T) {
	g := newGatewayEnv(t)
	lookup := map[string]any{"type": "function", "name": "lookup", "parameters": map[string]any{"type": "object"}}
	const cmd = "echo one; sleep 1; echo two; echo err >&2"
	turns := func() []gatewaytest.Turn {
		return []gatewaytest.Turn{
			{Parts: []gateway.Part{gatewaytest.Text("Let me run that."), shellCall("call_1", cmd, "exit 3")}, Usage: gateway.Usage{InputTokens: 5, OutputTokens: 5}},
			{Parts: []gateway.Part{gatewaytest.Text("Now the lookup."), gatewaytest.Call("call_2", "lookup", map[string]string{"q": "x"})}, Usage: gateway.Usage{InputTokens: 7, OutputTokens: 2}},
		}
	}
	tools := []any{nativeShell, lookup}

	g.script(turns()...)
	plain, err := g.newResponse(t, g.keyA, "go", map[string]any{"tools": tools})
	if err != nil {
		t.Fatal(err)
	}

	g.script(turns()...)
	events := g.streamResponse(t, g.keyA, "go", map[string]any{"tools": tools})
	var types []string
	done := map[int64]string{} // output_index → item of output_item.done
	var deltas []string        // command 0's stdout deltas, until its done
	cmdDone := false
	for _, ev := range events {
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_item.done":
			done[ev.OutputIndex] = ev.Item.RawJSON()
		case "response.shell_call_command.added", "response.shell_call_command.delta", "response.shell_call_command.done":
			if strings.Contains(ev.RawJSON(), "item_id") {
				t.Errorf("%s carries item_id: %s", ev.Type, ev.RawJSON())
			}
		case "response.shell_call_output_content.delta":
			if e := ev.AsResponseShellCallOutputContentDelta(); e.CommandIndex == 0 && !cmdDone && e.Delta.Stdout != "" {
				deltas = append(deltas, e.Delta.Stdout)
			}
		case "response.shell_call_output_content.done":
			if ev.AsResponseShellCallOutputContentDone().CommandIndex == 0 {
				cmdDone = true
			}
		}
	}
	// Output produced before the sleep arrives before output produced after it.
	if len(deltas) < 2 || deltas[0] != "one\n" || strings.Join(deltas, "") != "one\ntwo\n" {
		t.Errorf("command 0 streamed %q", deltas)
	}
	wantOrder := []string{
		"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", // shell_call in_progress
		"response.shell_call_command.added", "response.shell_call_command.delta", "response.shell_call_command.done",
		"response.shell_call_command.added", "response.shell_call_command.delta", "response.shell_call_command.done",
		"response.output_item.done",  // shell_call completed
		"response.output_item.added", // shell_call_output, completed, empty
		"response.shell_call_output_content.delta",
		"response.shell_call_output_content.done", "response.shell_call_output_content.done",
		"response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed",
	}
	if got := compact(types); !reflect.DeepEqual(got, wantOrder) {
		t.Errorf("events (repeats collapsed)\n %v\nwant\n %v", got, wantOrder)
	}
	for _, ev := range events {
		if ev.Type == "response.output_item.added" && ev.Item.Type == "shell_call_output" {
			if o := ev.Item.AsShellCallOutput(); o.Status != "completed" || len(o.Output) != 0 {
				t.Errorf("shell_call_output added %s", ev.Item.RawJSON())
			}
		}
		if ev.Type == "response.output_item.added" && ev.Item.Type == "shell_call" {
			if c := ev.Item.AsShellCall(); c.Status != "in_progress" || len(c.Action.Commands) != 0 || c.Environment.ContainerID == "" {
				t.Errorf("shell_call added %s", ev.Item.RawJSON())
			}
		}
	}
	final := events[len(events)-1].Response
	checkResponse(t, &final)
	for i, it := range final.Output {
		if done[int64(i)] != it.RawJSON() {
			t.Errorf("output[%d] differs from its output_item.done:\n%s\n%s", i, it.RawJSON(), done[int64(i)])
		}
	}
	if events[0].Response.Status != "in_progress" || echoedContainer(t, &events[0].Response) != echoedContainer(t, &final) {
		t.Errorf("response.created does not name the container: %s", events[0].RawJSON())
	}
	a := normalize(t, plain.RawJSON(), echoedContainer(t, plain))
	b := normalize(t, final.RawJSON(), echoedContainer(t, &final))
	if a != b {
		t.Errorf("streamed response differs from the plain one:\n%s\n---\n%s", b, a)
	}
	so := final.Output[2].AsShellCallOutput()
	if len(so.Output) != 2 || so.Output[0].Stdout != "one\ntwo\n" || so.Output[0].Stderr != "err\n" || so.Output[1].Outcome.ExitCode != 3 {
		t.Errorf("shell_call_output %s", so.RawJSON())
	}
}

// compact collapses runs of the same event type.
func compact(types []string) []string {
	var out []string
	for _, s := range types {
		if len(out) == 0 || out[len(out)-1] != s || s == "response.output_item.added" || s == "response.output_item.done" ||
			strings.HasPrefix(s, "response.shell_call_command.") || s == "response.shell_call_output_content.done" {
			out = append(out, s)
		}
	}
	return out
}

// TestResponsesClientDisconnect: a client that goes away mid-command
// cancels the loop and kills the command; the usage ledger still records
// the request.
func TestResponsesClientDisconnect(t *testing.T) {
	g := newGatewayEnv(t)
	s := g.script(gatewaytest.Turn{Parts: []gateway.Part{shellCall("call_1", "echo started; sleep 4; touch /workspace/home/late")}}, gatewaytest.EchoResult())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cl := g.openAI(g.keyA)
	stream := cl.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "scripted/m"},
		option.WithJSONSet("input", "go"), option.WithJSONSet("tools", []any{nativeShell}), option.WithJSONSet("session_id", "gone-away"))
	var cid string
	for stream.Next() {
		ev := stream.Current()
		if ev.Type == "response.created" {
			cid = echoedContainer(t, &ev.Response)
		}
		if ev.Type == "response.shell_call_output_content.delta" {
			cancel() // the command is running: it printed
			break
		}
	}
	stream.Close()
	if cid == "" {
		t.Fatalf("no output delta seen: %v", stream.Err())
	}
	// The exec route waits for the container's call lock, which the
	// cancelled command holds until it is killed.
	if out := g.exec(g.keyA, cid, "test -e late && echo yes || echo no").Output[0].Stdout; out != "no\n" {
		t.Fatalf("late: %q", out)
	}
	// Had it lived, the command would have made the file by now.
	time.Sleep(5 * time.Second)
	if out := g.exec(g.keyA, cid, "test -e late && echo yes || echo no").Output[0].Stdout; out != "no\n" {
		t.Fatalf("the command was not killed: late exists")
	}
	if n := len(s.Requests()); n != 1 {
		t.Errorf("the model was called %d times after the client left", n)
	}
	// The request's bill: kind "response" in the ledger, beside the two
	// exec calls above.
	var u struct {
		ByContainer []struct {
			ContainerID  string `json:"container_id"`
			Events       int64  `json:"events"`
			CostMicroUSD int64  `json:"cost_micro_usd"`
		} `json:"by_container"`
	}
	// (An exec call records its bill just after its answer: poll.)
	for range 100 {
		g.must2(t, "GET", "/api/v1/usage", &u)
		for _, c := range u.ByContainer {
			if c.ContainerID == cid && c.Events == 3 && c.CostMicroUSD >= 3000 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("ledger %+v, want 3 events on %s", u.ByContainer, cid)
}

func (g *gwEnv) must2(t *testing.T, method, path string, v any) {
	t.Helper()
	st, b := g.do(method, path, g.keyA, nil)
	g.must(st, b, v)
}

// TestResponsesTranslation: what the client sent reaches the model in the
// neutral conversation: system and developer messages, images, assistant
// turns, tool choice and limits.
func TestResponsesTranslation(t *testing.T) {
	g := newGatewayEnv(t)
	s := g.script(gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("ok")}})
	const png = "iVBORw0KGgo="
	input := []any{
		map[string]any{"role": "developer", "content": "Answer in French."},
		map[string]any{"type": "message", "role": "user", "content": []any{
			map[string]any{"type": "input_text", "text": "What is this?"},
			map[string]any{"type": "input_image", "image_url": "data:image/png;base64," + png, "detail": "auto"},
			map[string]any{"type": "input_image", "image_url": "https://example.com/cat.jpg"},
		}},
		map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "A cat.", "annotations": []any{}}}},
		map[string]any{"type": "reasoning", "id": "rs_1", "summary": []any{}},
		map[string]any{"role": "user", "content": "Sure?"},
	}
	r, err := g.newResponse(t, g.keyA, input, map[string]any{"instructions": "Be brief.", "max_output_tokens": 100, "top_p": 0.5,
		"parallel_tool_calls": false, "tools": []any{nativeShell}, "tool_choice": map[string]any{"type": "shell"}, "user": "u-1"})
	if err != nil {
		t.Fatal(err)
	}
	checkResponse(t, r)
	q := s.Requests()[0]
	if q.System != "Be brief.\n\nAnswer in French." || q.MaxTokens != 100 || *q.TopP != 0.5 || q.User != "u-1" {
		t.Errorf("request %+v", q)
	}
	if q.ToolChoice != (gateway.ToolChoice{Mode: gateway.ChoiceTool, Name: "shell", DisableParallel: true}) {
		t.Errorf("tool choice %+v", q.ToolChoice)
	}
	if len(q.Messages) != 3 || len(q.Messages[0].Parts) != 3 || q.Messages[1].Role != gateway.RoleAssistant || q.Messages[2].Parts[0].Text != "Sure?" {
		t.Fatalf("messages %+v", q.Messages)
	}
	img, url := q.Messages[0].Parts[1].Image, q.Messages[0].Parts[2].Image
	if img == nil || img.MediaType != "image/png" || img.Data != png || url == nil || url.URL != "https://example.com/cat.jpg" {
		t.Errorf("images %+v %+v", img, url)
	}
	if r.ParallelToolCalls || r.TopP != 0.5 || r.MaxOutputTokens != 100 || r.User != "u-1" {
		t.Errorf("echo %s", r.RawJSON())
	}
}

// TestResponsesItemShapesStreamed: for each shell tool type, the streamed
// response.completed holds the items of its output_item.done events and
// equals the plain response; a step refused for the budget shows the text
// the model read.
func TestResponsesItemShapesStreamed(t *testing.T) {
	g := newGatewayEnv(t)
	turns := func() []gatewaytest.Turn {
		// max_tool_calls is 1: the second call of the turn is refused.
		return []gatewaytest.Turn{{Parts: []gateway.Part{shellCall("call_1", "echo a"), shellCall("call_2", "echo b")}}, gatewaytest.EchoResult()}
	}
	for _, typ := range []string{"shell", "local_shell", "shellgate:shell"} {
		t.Run(typ, func(t *testing.T) {
			set := map[string]any{"tools": []any{map[string]any{"type": typ}}, "max_tool_calls": 1}
			s := g.script(turns()...)
			plain, err := g.newResponse(t, g.keyA, "go", set)
			if err != nil {
				t.Fatal(err)
			}
			res, _ := lastResult(&s.Requests()[1])
			if !res.IsError || !strings.Contains(res.Content, "limit of 1 tool calls") {
				t.Fatalf("the model read %+v", res)
			}
			if !strings.Contains(plain.Output[len(plain.Output)-2].RawJSON(), jsonEscaped(res.Content)) {
				t.Errorf("the refused step does not show what the model read: %s", plain.Output[len(plain.Output)-2].RawJSON())
			}
			g.script(turns()...)
			cl := g.openAI(g.keyA)
			opts := []option.RequestOption{option.WithJSONSet("input", "go")}
			for k, v := range set {
				opts = append(opts, option.WithJSONSet(k, v))
			}
			stream := cl.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{Model: "scripted/m"}, opts...)
			defer stream.Close()
			done := map[int64]string{}
			var final responses.Response
			for stream.Next() {
				ev := stream.Current()
				if ev.AsAny() == nil {
					t.Fatalf("event does not decode: %s", ev.RawJSON())
				}
				switch ev.Type {
				case "response.output_item.done":
					done[ev.OutputIndex] = ev.Item.RawJSON()
				case "response.completed":
					final = ev.Response
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			checkResponse(t, &final)
			if len(final.Output) != len(done) {
				t.Fatalf("%d items, %d done events", len(final.Output), len(done))
			}
			for i, it := range final.Output {
				if done[int64(i)] != it.RawJSON() {
					t.Errorf("output[%d] differs from its output_item.done", i)
				}
			}
			cp, cf := containerOf(plain), containerOf(&final)
			if a, b := normalize(t, plain.RawJSON(), cp), normalize(t, final.RawJSON(), cf); a != b {
				t.Errorf("streamed response differs from the plain one:\n%s\n---\n%s", b, a)
			}
		})
	}
}

// containerOf finds the container a response's steps ran in.
func containerOf(r *responses.Response) string {
	m := regexp.MustCompile(`(?:container_id\\?"\s*:\s*\\?")([A-Za-z0-9_-]+)`).FindStringSubmatch(r.RawJSON())
	if m == nil {
		return ""
	}
	return m[1]
}

func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return strings.Trim(string(b), `"`)
}
