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

// TestProgramStream: streamed, a program item is added when the step
// starts and done with its fingerprint when the step pauses, before the
// function_calls; a resumed step that ends adds only its program_output,
// one that pauses again a new program item.
func TestProgramStream(t *testing.T) {
	call := gateway.ToolCall{ID: "call_p", Name: gateway.ProgramFunction, Arguments: `{"code":"return 1"}`}
	paused := func(step *gateway.Step, fp string) gateway.ToolCall {
		step.Result = gateway.StepResult{State: fp, Paused: []gateway.ToolCall{{ID: "interrupt-1", Name: "g", Arguments: "{}"}}}
		c := step.Result.Paused[0]
		c.Caller = call.ID
		return c
	}
	type ev struct {
		Type string          `json:"type"`
		Item json.RawMessage `json:"item"`
	}
	events := func(w *httptest.ResponseRecorder) []string {
		var out []string
		for _, line := range strings.Split(w.Body.String(), "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			var e ev
			json.Unmarshal([]byte(data), &e)
			if e.Item == nil {
				continue
			}
			var it struct{ Type, Fingerprint, Result, Status string }
			json.Unmarshal(e.Item, &it)
			out = append(out, strings.TrimPrefix(e.Type, "response.output_item.")+" "+it.Type+" "+it.Fingerprint+it.Result)
		}
		return out
	}
	m := newMeta(&parsed{model: "p/m"}, "")
	for _, c := range []struct {
		name    string
		resumed bool
		run     func(s *streamer, step *gateway.Step)
		want    string
	}{
		{"pauses", false, func(s *streamer, step *gateway.Step) {
			s.StepStart(step)
			s.ClientCall(paused(step, "FP1"))
		}, "added program ,done program FP1,added function_call ,done function_call "},
		{"resumed, pauses again", true, func(s *streamer, step *gateway.Step) {
			s.StepStart(step)
			s.ClientCall(paused(step, "FP2"))
		}, "added program FP2,done program FP2,added function_call ,done function_call "},
		{"resumed, ends", true, func(s *streamer, step *gateway.Step) {
			s.StepStart(step)
			step.Result = gateway.StepResult{Content: "1"}
			s.StepDone(step)
		}, "added program_output 1,done program_output 1"},
		{"ends", false, func(s *streamer, step *gateway.Step) {
			s.StepStart(step)
			step.Result = gateway.StepResult{Content: "1"}
			s.StepDone(step)
		}, "added program ,done program ,added program_output 1,done program_output 1"},
	} {
		w := httptest.NewRecorder()
		s := newStreamer(w, m)
		step := &gateway.Step{Call: call, Resumed: c.resumed}
		c.run(s, step)
		if got := strings.Join(events(w), ","); got != c.want {
			t.Errorf("%s: events\n%s\nwant\n%s", c.name, got, c.want)
		}
		// The streamed items are the items the response renders.
		items := []gateway.Item{{Kind: gateway.ItemStep, Step: step}}
		for _, pc := range step.Result.Paused {
			pc.Caller = call.ID
			items = append(items, gateway.Item{Kind: gateway.ItemClientCall, Call: &pc, Step: step})
		}
		want := m.renderOutput(&gateway.Result{Items: items})
		got := s.output()
		if len(got) != len(want) {
			t.Fatalf("%s: streamed %s, rendered %s", c.name, got, want)
		}
		for i := range got {
			var a, b map[string]any
			json.Unmarshal(got[i], &a)
			json.Unmarshal(want[i], &b)
			delete(a, "id")
			delete(b, "id")
			if ja, jb := raw(a), raw(b); string(ja) != string(jb) {
				t.Errorf("%s: item %d streamed %s, rendered %s", c.name, i, ja, jb)
			}
		}
	}
}
