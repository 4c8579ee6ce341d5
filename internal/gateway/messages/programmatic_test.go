package messages

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
)

// parseBody parses a request body as Serve does.
func parseBody(t *testing.T, body string) (*parsed, error) {
	t.Helper()
	r := httptest.NewRequest("POST", "/v1/messages", strings.NewReader(body))
	req, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return parse(req, r)
}

const progTools = `[{"type":"code_execution_20260120","name":"code_execution"},
	{"name":"get_weather","description":"Weather of a city.","input_schema":{"type":"object","properties":{"city":{"type":"string"}}},"allowed_callers":["code_execution_20260120"]},
	{"name":"both","input_schema":{"type":"object"},"allowed_callers":["direct","code_execution_20260120"]},
	{"name":"direct_only","input_schema":{"type":"object"}}]`

// TestProgrammaticTools: allowed_callers decides who may call a client
// tool: the model (direct), the code of the code execution tool, or both.
func TestProgrammaticTools(t *testing.T) {
	p, err := parseBody(t, `{"model":"p/m","max_tokens":10,"tools":`+progTools+`,"messages":[{"role":"user","content":"hi"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	var direct []string
	for _, f := range p.run.Request.Tools {
		direct = append(direct, f.Name)
	}
	if strings.Join(direct, ",") != "both,direct_only" {
		t.Errorf("the model's own tools: %v, want both,direct_only", direct)
	}
	ct, ok := p.run.ServerTools[gateway.CodeExecution].(gateway.CodeTool)
	if !ok || ct.Programmatic == nil {
		t.Fatalf("no Python code_execution tool: %#v", p.run.ServerTools[gateway.CodeExecution])
	}
	pr := ct.Programmatic
	if len(pr.Tools) != 2 || pr.Tools[0].Name != "get_weather" || pr.Tools[1].Name != "both" || strings.Join(pr.Denied, ",") != "direct_only" || pr.Caller != "code_execution_20260120" {
		t.Errorf("programmatic: %+v", pr)
	}
	desc := ct.Function().Description
	if !strings.Contains(desc, "await get_weather(") || !strings.Contains(desc, `{"type":"object","properties":{"city":{"type":"string"}}}`) {
		t.Errorf("the model is not told how to call the tools: %s", desc)
	}
	for _, k := range []string{gateway.BashCodeExecution, gateway.TextEditorCodeExecution} {
		if p.run.ServerTools[k] == nil {
			t.Errorf("%s is gone", k)
		}
	}

	for body, want := range map[string]string{
		`[{"type":"code_execution_20260120","name":"code_execution"},{"name":"f","input_schema":{"type":"object"},"allowed_callers":["bogus"]}]`:                             "tools.1.allowed_callers.0",
		`[{"name":"f","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120"]}]`:                                                                      "tools.0.allowed_callers: code_execution_20260120 names a code execution tool the request does not have",
		`[{"type":"code_execution_20250825","name":"code_execution"},{"name":"f","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120"]}]`:           "is not the request's code execution tool, code_execution_20250825",
		`[{"type":"code_execution_20260120","name":"code_execution"},{"name":"f","input_schema":{"type":"object"},"allowed_callers":[]}]`:                                    "tools.1.allowed_callers: empty",
		`[{"type":"code_execution_20260120","name":"code_execution"},{"name":"get-weather","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120"]}]`: `tools.1.name: "get-weather" cannot be called from code`,
		`[{"type":"code_execution_20260120","name":"code_execution"},{"name":"class","input_schema":{"type":"object"},"allowed_callers":["code_execution_20260120"]}]`:       `tools.1.name: "class" cannot be called from code`,
	} {
		_, err := parseBody(t, `{"model":"p/m","max_tokens":10,"tools":`+body+`,"messages":[{"role":"user","content":"hi"}]}`)
		var re *reqError
		if !errors.As(err, &re) || re.status != 400 || !strings.Contains(re.msg, want) {
			t.Errorf("%s: %v, want a 400 saying %q", body, err, want)
		}
	}
}

const token = "0123456789abcdef01234567"

// resumeBody is the request that answers a tool_use made by code, with
// extra top-level fields and the content of the final user message.
func resumeBody(extra, answer string) string {
	return `{"model":"p/m","max_tokens":10,"tools":` + progTools + extra + `,"messages":[
		{"role":"user","content":"weather?"},
		{"role":"assistant","content":[{"type":"text","text":"Let me look."},
			{"type":"server_tool_use","id":"srvtoolu_1","name":"code_execution","input":{"code":"print(await get_weather(city='Paris'))"}},
			{"type":"tool_use","id":"toolu_` + token + `","name":"get_weather","input":{"city":"Paris"},"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_1"}}]},
		{"role":"user","content":` + answer + `}]}`
}

// TestProgrammaticResume: the request answering a call made by code
// resumes the paused execution; the model sees its own code_execution
// call, not the client's call and result.
func TestProgrammaticResume(t *testing.T) {
	p, err := parseBody(t, resumeBody(`,"container":"cntr_1"`, `[{"type":"tool_result","tool_use_id":"toolu_`+token+`","content":[{"type":"text","text":"sunny"},{"type":"text","text":"21C"}]},{"type":"text","text":"thanks"}]`))
	if err != nil {
		t.Fatal(err)
	}
	rs := p.run.Resume
	if rs == nil || rs.Call.ID != "srvtoolu_1" || rs.Call.Name != gateway.CodeExecution || !strings.Contains(rs.Call.Arguments, "get_weather") ||
		len(rs.Answers) != 1 || rs.Answers[0].Call != token || rs.Answers[0].Content != "sunny\n21C" || rs.Answers[0].IsError {
		t.Fatalf("resume: %+v", rs)
	}
	// The client's other content stays in the conversation (the loop
	// puts it after the resumed call's result).
	msgs := p.run.Request.Messages
	call, rest := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if len(msgs) != 3 || call.Role != gateway.RoleAssistant || len(call.Parts) != 2 || call.Parts[1].Call == nil || call.Parts[1].Call.ID != "srvtoolu_1" ||
		rest.Role != gateway.RoleUser || len(rest.Parts) != 1 || rest.Parts[0].Text != "thanks" {
		b, _ := json.Marshal(msgs)
		t.Errorf("the model's conversation: %s", b)
	}

	// Calls made together are answered together, in their order.
	const token2 = "76543210fedcba9876543210"
	two := strings.Replace(resumeBody(`,"container":"cntr_1"`, `[{"type":"tool_result","tool_use_id":"toolu_`+token2+`","content":"rainy"},{"type":"tool_result","tool_use_id":"toolu_`+token+`","content":"sunny"}]`),
		`"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_1"}}`,
		`"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_1"}},{"type":"tool_use","id":"toolu_`+token2+`","name":"get_weather","input":{"city":"Oslo"},"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_1"}}`, 1)
	p, err = parseBody(t, two)
	if err != nil {
		t.Fatal(err)
	}
	if a := p.run.Resume.Answers; len(a) != 2 || a[0].Call != token || a[0].Content != "sunny" || a[1].Call != token2 || a[1].Content != "rainy" {
		t.Errorf("two answers: %+v", a)
	}
	one := strings.Replace(two, `{"type":"tool_result","tool_use_id":"toolu_`+token2+`","content":"rainy"},`, "", 1)
	if _, err := parseBody(t, one); err == nil || !strings.Contains(err.Error(), `tool_use "toolu_`+token2+`" (called by the code of server_tool_use "srvtoolu_1") needs its tool_result`) {
		t.Errorf("one of two answered: %v", err)
	}

	// Bad input: each a 400 naming what is wrong.
	for name, c := range map[string]struct{ body, want string }{
		"no container":   {resumeBody(``, `[{"type":"tool_result","tool_use_id":"toolu_`+token+`","content":"x"}]`), "container_id is required when there are pending tool uses generated by code execution with tools: send \"container\""},
		"no tool_result": {resumeBody(`,"container":"cntr_1"`, `"hello"`), `tool_use "toolu_` + token + `" (called by the code of server_tool_use "srvtoolu_1") needs its tool_result`},
		"an id Shellgate did not make": {strings.Replace(resumeBody(`,"container":"cntr_1"`, `[{"type":"tool_result","tool_use_id":"toolu_x","content":"x"}]`), "toolu_"+token, "toolu_x", 1),
			"is not the id of a tool call made by Shellgate's code execution"},
		"a caller naming no server_tool_use": {strings.Replace(resumeBody(`,"container":"cntr_1"`, `[{"type":"tool_result","tool_use_id":"toolu_`+token+`","content":"x"}]`), `"tool_id":"srvtoolu_1"`, `"tool_id":"srvtoolu_9"`, 1),
			`caller.tool_id: "srvtoolu_9" names no code_execution server_tool_use`},
		"a caller that is not code execution": {strings.Replace(resumeBody(`,"container":"cntr_1"`, `[{"type":"tool_result","tool_use_id":"toolu_`+token+`","content":"x"}]`), `"type":"code_execution_20260120","tool_id"`, `"type":"web_search","tool_id"`, 1),
			`caller.type: "web_search" is not direct or one of`},
		"images for code": {resumeBody(`,"container":"cntr_1"`, `[{"type":"tool_result","tool_use_id":"toolu_`+token+`","content":[{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]`),
			"images cannot be handed to code"},
		"tools without allowed_callers": {strings.NewReplacer(`"allowed_callers":["code_execution_20260120"]`, `"allowed_callers":["direct"]`, `"allowed_callers":["direct","code_execution_20260120"]`, `"allowed_callers":["direct"]`).Replace(resumeBody(`,"container":"cntr_1"`, `[{"type":"tool_result","tool_use_id":"toolu_`+token+`","content":"x"}]`)),
			"send the tools of the request that made the call"},
	} {
		_, err := parseBody(t, c.body)
		var re *reqError
		if !errors.As(err, &re) || re.status != 400 || !strings.Contains(re.msg, c.want) {
			t.Errorf("%s: %v, want a 400 saying %q", name, err, c.want)
		}
	}
}

// TestProgrammaticRender: a step paused on a client call renders its
// server_tool_use and the client's tool_use with the code's caller; the
// resumed step renders its result alone.
func TestProgrammaticRender(t *testing.T) {
	rd := &renderer{kinds: map[string]toolKind{gateway.CodeExecution: {kind: "codeexec", typ: "code_execution_20260120"}}}
	step := &gateway.Step{Call: gateway.ToolCall{ID: "call_7", Name: gateway.CodeExecution, Arguments: `{"code":"await get_weather(city='Paris')"}`},
		Result: gateway.StepResult{Paused: []gateway.ToolCall{{ID: token, Name: "get_weather", Arguments: `{"city":"Paris"}`}}}}
	call := step.Result.Paused[0]
	call.Caller = step.Call.ID
	m := rd.message(&gateway.Result{Stop: gateway.StopToolUse, Items: []gateway.Item{{Kind: gateway.ItemStep, Step: step}, {Kind: gateway.ItemClientCall, Call: &call, Step: step}}})
	got, _ := json.Marshal(m.Content)
	want := `[{"type":"server_tool_use","id":"srvtoolu_call_7","name":"code_execution","input":{"code":"await get_weather(city='Paris')"}},` +
		`{"type":"tool_use","id":"toolu_` + token + `","name":"get_weather","input":{"city":"Paris"},"caller":{"type":"code_execution_20260120","tool_id":"srvtoolu_call_7"}}]`
	if string(got) != want || *m.StopReason != "tool_use" {
		t.Errorf("paused:\n got %s\nwant %s (stop %s)", got, want, *m.StopReason)
	}

	zero := 0
	resumed := &gateway.Step{Call: gateway.ToolCall{ID: "srvtoolu_call_7", Name: gateway.CodeExecution}, Resumed: true,
		Result: gateway.StepResult{Detail: &gateway.CodeExecDetail{Content: &gateway.BashResult{Type: "code_execution_result", Stdout: "sunny\n", ReturnCode: zero, Content: []gateway.OutputFile{}}}}}
	m = rd.message(&gateway.Result{Stop: gateway.StopEnd, Items: []gateway.Item{{Kind: gateway.ItemStep, Step: resumed}, {Kind: gateway.ItemText, Text: "It is sunny."}}})
	got, _ = json.Marshal(m.Content)
	want = `[{"type":"code_execution_tool_result","tool_use_id":"srvtoolu_call_7","content":{"type":"code_execution_result","stdout":"sunny\n","stderr":"","return_code":0,"content":[]}},{"type":"text","text":"It is sunny."}]`
	if string(got) != want {
		t.Errorf("resumed:\n got %s\nwant %s", got, want)
	}
}
