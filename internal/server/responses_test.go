package server

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

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

func (g *gwEnv) client(key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(g.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// newResponse sends a request whose body is params plus the raw fields in
// set (tools, session_id, ... as JSON values).
func (g *gwEnv) newResponse(t *testing.T, key string, input any, set map[string]any) (*responses.Response, error) {
	t.Helper()
	opts := []option.RequestOption{option.WithJSONSet("input", input)}
	for k, v := range set {
		opts = append(opts, option.WithJSONSet(k, v))
	}
	c := g.client(key)
	return c.Responses.New(t.Context(), responses.ResponseNewParams{Model: "scripted/m"}, opts...)
}

const sumCommand = `python3 -c "print(sum(range(1,101)))"`

func shellCall(id string, cmds ...string) gateway.Part {
	return gatewaytest.Call(id, "shell", map[string]any{"commands": cmds})
}

// lastResult is the content of the last tool result the model was sent.
func lastResult(req *gateway.Request) (gateway.ToolResult, bool) {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		ps := req.Messages[i].Parts
		for j := len(ps) - 1; j >= 0; j-- {
			if ps[j].Kind == gateway.PartToolResult {
				return *ps[j].Result, true
			}
		}
	}
	return gateway.ToolResult{}, false
}

// echoResult is a turn that answers with the last tool result's text.
func echoResult() gatewaytest.Turn {
	return gatewaytest.Turn{Reply: func(req *gateway.Request) *gateway.Turn {
		r, _ := lastResult(req)
		return &gateway.Turn{Parts: []gateway.Part{gatewaytest.Text("result: " + r.Content)}, Usage: gateway.Usage{InputTokens: 10, OutputTokens: 3}}
	}}
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

var idPattern = regexp.MustCompile(`"(resp|msg|fc|sh|sho|lsh|st_tmp)_[0-9a-f]{48}"`)

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
	Output []struct {
		Stdout  string `json:"stdout"`
		Stderr  string `json:"stderr"`
		Outcome struct {
			Type     string `json:"type"`
			ExitCode *int   `json:"exit_code"`
		} `json:"outcome"`
	} `json:"output"`
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
			s := g.script(gatewaytest.Turn{Parts: []gateway.Part{shellCall("call_1", sumCommand)}}, echoResult())
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
