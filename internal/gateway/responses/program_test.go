package responses

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
)

func readBody(t *testing.T, body string) (*parsed, error) {
	t.Helper()
	return readRequest(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/responses", strings.NewReader(body)))
}

const progTools = `"tools":[{"type":"programmatic_tool_calling"},{"type":"function","name":"get_weather","description":"Weather of a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"allowed_callers":["programmatic"]},{"type":"function","name":"ask","allowed_callers":["direct","programmatic"]},{"type":"function","name":"delete_all"}]`

// TestProgramTools: programmatic_tool_calling makes the program function;
// a tool only programs may call is not offered to the model directly.
func TestProgramTools(t *testing.T) {
	p, err := readBody(t, `{"model":"p/m","input":"hi",`+progTools+`,"tool_choice":{"type":"programmatic_tool_calling"}}`)
	if err != nil {
		t.Fatal(err)
	}
	var direct []string
	for _, tl := range p.req.Tools {
		direct = append(direct, tl.Name)
	}
	if strings.Join(direct, ",") != "ask,delete_all" || !p.programmatic || len(p.programTools) != 2 || p.programTools[0].Name != "get_weather" ||
		strings.Join(p.programDenied, ",") != "delete_all" || p.req.ToolChoice.Name != gateway.ProgramFunction {
		t.Fatalf("direct %v, parsed %+v", direct, p)
	}
	desc := gateway.ProgramTool{Tools: p.programTools}.Function().Description
	if !strings.Contains(desc, "tools.get_weather: Weather of a city. Input schema: {\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}") {
		t.Fatalf("description: %s", desc)
	}
}

func TestProgramToolsBadInput(t *testing.T) {
	fn := func(name, callers string) string {
		return `{"type":"function","name":"` + name + `","allowed_callers":` + callers + `}`
	}
	for _, c := range []struct{ tools, param, says string }{
		{fn("f", `["programmatic"]`), "tools[0].allowed_callers", "programmatic_tool_calling"},
		{`{"type":"programmatic_tool_calling"},` + fn("f", `[]`), "tools[1].allowed_callers", "empty"},
		{`{"type":"programmatic_tool_calling"},` + fn("f", `["model"]`), "tools[1].allowed_callers[0]", "model"},
		{`{"type":"programmatic_tool_calling"},` + fn("my-tool", `["programmatic"]`), "tools[1].name", "JavaScript identifier"},
		{`{"type":"programmatic_tool_calling"},` + fn("then", `["programmatic"]`), "tools[1].name", "not then"},
		{`{"type":"programmatic_tool_calling"},` + fn("f", `["direct"]`), "tools[0]", "needs a function tool"},
		{`{"type":"programmatic_tool_calling"},{"type":"programmatic_tool_calling"},` + fn("f", `["programmatic"]`), "tools[1].type", "Only one"},
		{`{"type":"programmatic_tool_calling"},` + fn("program", `["programmatic"]`), "tools", `named "program"`},
		{`{"type":"programmatic_tool_calling"},{"type":"shell","allowed_callers":["programmatic"]},` + fn("f", `["programmatic"]`), "tools[1].allowed_callers", "only function tools"},
	} {
		_, err := readBody(t, `{"model":"p/m","input":"hi","tools":[`+c.tools+`]}`)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != c.param || !strings.Contains(ae.Message, c.says) {
			t.Errorf("%s: got %v (%+v), want 400 on %s saying %q", c.tools, err, ae, c.param, c.says)
		}
	}
}

// TestProgramRoundTrip: a paused program's rendered items, replayed with
// the outputs of its calls, resume it; the model sees the program call
// but not the calls its code made. A finished program replays as the
// call and its output.
func TestProgramRoundTrip(t *testing.T) {
	step := &gateway.Step{Call: gateway.ToolCall{ID: "call_p", Name: gateway.ProgramFunction, Arguments: `{"code":"return await tools.get_weather({city:'Paris'})"}`},
		Result: gateway.StepResult{State: "FP1", Paused: []gateway.ToolCall{{ID: "interrupt-1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}}}
	c := step.Result.Paused[0]
	c.Caller = "call_p"
	m := newMeta(&parsed{model: "p/m"}, "")
	items := m.renderOutput(&gateway.Result{Items: []gateway.Item{{Kind: gateway.ItemStep, Step: step}, {Kind: gateway.ItemClientCall, Call: &c, Step: step}}})
	if len(items) != 2 {
		t.Fatalf("items: %s", items)
	}
	var prog programItem
	var fc functionCallItem
	json.Unmarshal(items[0], &prog)
	json.Unmarshal(items[1], &fc)
	if prog.Type != "program" || prog.CallID != "call_p" || prog.Fingerprint != "FP1" || prog.Code != "return await tools.get_weather({city:'Paris'})" ||
		fc.CallID != "call_p.interrupt-1" || fc.Caller == nil || fc.Caller.Type != "program" || fc.Caller.CallerID != "call_p" || fc.Name != "get_weather" {
		t.Fatalf("items: %s", items)
	}
	input := `[{"role":"user","content":"weather?"},` + string(items[0]) + `,` + string(items[1]) + `,{"type":"function_call_output","call_id":"call_p.interrupt-1","output":"sunny"}]`
	p, err := readBody(t, `{"model":"p/m","input":`+input+`,`+progTools+`}`)
	if err != nil {
		t.Fatal(err)
	}
	rs := p.resume
	if rs == nil || rs.Call.ID != "call_p" || rs.State != "FP1" || len(rs.Answers) != 1 || rs.Answers[0].Call != "interrupt-1" || rs.Answers[0].Content != "sunny" {
		t.Fatalf("resume: %+v", rs)
	}
	msgs := p.req.Messages
	if len(msgs) != 2 || len(msgs[1].Parts) != 1 || msgs[1].Parts[0].Call.Name != gateway.ProgramFunction || msgs[1].Parts[0].Call.Arguments != step.Call.Arguments {
		t.Fatalf("messages: %+v", msgs)
	}

	// The program ends: the resumed step shows only its program_output.
	step.Resumed, step.Result = true, gateway.StepResult{Content: "sunny"}
	out := m.renderOutput(&gateway.Result{Items: []gateway.Item{{Kind: gateway.ItemStep, Step: step}}})
	var po programOutputItem
	if len(out) != 1 || json.Unmarshal(out[0], &po) != nil || po.Type != "program_output" || po.CallID != "call_p" || po.Result != "sunny" || po.Status != "completed" {
		t.Fatalf("output: %s", out)
	}
	input = strings.TrimSuffix(input, "]") + `,` + string(out[0]) + `,{"role":"assistant","content":"Sunny."},{"role":"user","content":"thanks"}]`
	p, err = readBody(t, `{"model":"p/m","input":`+input+`,`+progTools+`}`)
	if err != nil {
		t.Fatal(err)
	}
	msgs = p.req.Messages
	if p.resume != nil || len(msgs) != 5 || msgs[2].Parts[0].Result.CallID != "call_p" || msgs[2].Parts[0].Result.Content != "sunny" {
		t.Fatalf("replayed: %+v %+v", p.resume, msgs)
	}
}

func TestProgramReplayBadInput(t *testing.T) {
	prog := `{"type":"program","id":"prog_1","call_id":"call_p","code":"x","fingerprint":"FP"}`
	call := `{"type":"function_call","call_id":"call_p.interrupt-1","name":"get_weather","arguments":"{}","caller":{"type":"program","caller_id":"call_p"}}`
	out := `{"type":"function_call_output","call_id":"call_p.interrupt-1","output":"r"}`
	for _, c := range []struct{ input, tools, param, says string }{
		{prog + `,` + call, progTools, "input", "No tool output found for function call call_p.interrupt-1 (called by program call_p)"},
		{prog, progTools, "input", "No program_output found for program call_p"},
		{`{"type":"program","call_id":"call_p","code":"x"}`, progTools, "input[0].fingerprint", "fingerprint"},
		{prog + `,` + strings.Replace(call, `"caller_id":"call_p"`, `"caller_id":"call_q"`, 1), progTools, "input[1].caller.caller_id", "call_q"},
		{prog + `,` + strings.Replace(call, `call_p.interrupt-1`, `call_9`, 1), progTools, "input[1].call_id", "call_9"},
		{prog + `,` + strings.Replace(call, `"type":"program"`, `"type":"robot"`, 1), progTools, "input[1].caller.type", "robot"},
		{`{"type":"program_output","call_id":"call_p","result":"r","status":"completed"}`, progTools, "input", "No program found"},
		{prog + `,` + call + `,` + out, `"tools":[{"type":"function","name":"get_weather"}]`, "tools", "resumes the program call_p"},
		{prog + `,` + call + `,` + out + `,{"role":"user","content":"u"},{"role":"assistant","content":"later"}`, progTools, "input", "must end with"},
	} {
		_, err := readBody(t, `{"model":"p/m","input":[`+c.input+`],`+c.tools+`}`)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != c.param || !strings.Contains(ae.Message, c.says) {
			t.Errorf("%s: got %v (%+v), want 400 on %s saying %q", c.input, err, ae, c.param, c.says)
		}
	}
}
