package responses

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
)

// TestCiteFiles: a file the message names is cited where it names it
// (sandbox: link first), counted in characters; one it does not name is
// cited at the end, zero wide; a file written twice is cited once; the
// next message cites only what was written after the last one.
func TestCiteFiles(t *testing.T) {
	var c citer
	c.add(&gateway.Step{Result: gateway.StepResult{Detail: &gateway.InterpreterDetail{Changed: []gateway.ChangedFile{
		{ID: "cfile_b", Path: "out/b.png"}, {ID: "cfile_a", Path: "a.csv"}}}}})
	c.add(&gateway.Step{Result: gateway.StepResult{Detail: &gateway.InterpreterDetail{Changed: []gateway.ChangedFile{{ID: "cfile_a", Path: "a.csv"}}}}})
	c.add(&gateway.Step{Result: gateway.StepResult{Detail: &gateway.ShellDetail{}}})
	text := "Résumé: [a](sandbox:/mnt/data/a.csv), also /mnt/data/a.csv"
	got := c.cite(text, "cntr_1")
	b, _ := json.Marshal(got)
	want := `[{"type":"container_file_citation","container_id":"cntr_1","file_id":"cfile_a","filename":"a.csv","start_index":12,"end_index":35},` +
		`{"type":"container_file_citation","container_id":"cntr_1","file_id":"cfile_b","filename":"b.png","start_index":58,"end_index":58}]`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	if rs := []rune(text); string(rs[12:35]) != "sandbox:/mnt/data/a.csv" || len(rs) != 58 {
		t.Errorf("indices do not count characters: %q", string(rs[12:35]))
	}
	if again := c.cite(text, "cntr_1"); again != nil {
		t.Errorf("cited twice: %v", again)
	}
}

// TestInterpItems: a step that ran, one interrupted at its timeout and one
// refused show completed, incomplete and failed; outputs are null without
// the include; a refused step replayed reads as the error the model read.
func TestInterpItems(t *testing.T) {
	ran := &gateway.Step{Call: gateway.ToolCall{ID: "call_1", Name: interpFunction, Arguments: `{"code":"print(1)"}`},
		Result: gateway.StepResult{Content: `{"stdout":"1\n","stderr":""}`, Detail: &gateway.InterpreterDetail{Code: "print(1)", Ran: true}}}
	ran.Result.Detail.(*gateway.InterpreterDetail).Output.Stdout = "1\n"
	ran.Result.Detail.(*gateway.InterpreterDetail).Output.Outcome.Type = "exit"
	late := &gateway.Step{Call: gateway.ToolCall{ID: "call_2", Name: interpFunction, Arguments: `{"code":"while True: pass"}`},
		Result: gateway.StepResult{Detail: &gateway.InterpreterDetail{Code: "while True: pass", Ran: true}}}
	late.Result.Detail.(*gateway.InterpreterDetail).Output.Outcome.Type = "timeout"
	refused := &gateway.Step{Call: gateway.ToolCall{ID: "call_3", Name: interpFunction, Arguments: `{"code":""}`},
		Result: gateway.StepResult{IsError: true, Content: `error: "code" is missing or empty`, Detail: &gateway.InterpreterDetail{Error: "x"}}}
	res := &gateway.Result{Items: []gateway.Item{{Kind: gateway.ItemStep, Step: ran}, {Kind: gateway.ItemStep, Step: late}, {Kind: gateway.ItemStep, Step: refused}}}
	for _, include := range []bool{false, true} {
		m := newMeta(&parsed{interp: true, ciOutputs: include, model: "p/m"}, "cntr_1")
		items := m.renderOutput(res)
		var got []interpItem
		for _, it := range items {
			var v interpItem
			json.Unmarshal(it, &v)
			got = append(got, v)
		}
		if got[0].Status != "completed" || got[1].Status != "incomplete" || got[2].Status != "failed" || got[0].Code != "print(1)" || got[0].ContainerID != "cntr_1" {
			t.Errorf("include %v: %s", include, items)
		}
		if !include {
			if !strings.Contains(string(items[0]), `"outputs":null`) {
				t.Errorf("outputs without include: %s", items[0])
			}
			continue
		}
		if !strings.Contains(string(items[0]), `"outputs":[{"type":"logs","logs":"1\n"}]`) {
			t.Errorf("outputs: %s", items[0])
		}
		body := `{"model":"p/m","input":[` + string(items[2]) + `]}`
		p, err := readRequest(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/responses", strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		msgs := p.req.Messages
		if len(msgs) != 2 || msgs[0].Parts[0].Call.Name != interpFunction || msgs[1].Parts[0].Result.Content != refused.Result.Content || !msgs[1].Parts[0].Result.IsError ||
			p.sel.ConversationContainerIDs[0] != "cntr_1" {
			t.Errorf("replayed: %+v", msgs)
		}
	}
}

// TestParseInterpreterTool: the tool's container maps onto the request's
// one container as the shell's environment does, shared with the shell
// tool; tool_choice and include name it.
func TestParseInterpreterTool(t *testing.T) {
	read := func(body string) (*parsed, error) {
		return readRequest(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/responses", strings.NewReader(body)))
	}
	p, err := read(`{"model":"p/m","input":"hi","tools":[{"type":"code_interpreter","container":"cntr_abc"}],"tool_choice":{"type":"code_interpreter"},"include":["code_interpreter_call.outputs"]}`)
	if err != nil {
		t.Fatal(err)
	}
	if !p.interp || !p.ciOutputs || p.sel.ContainerReference != "cntr_abc" || p.req.ToolChoice.Mode != gateway.ChoiceTool || p.req.ToolChoice.Name != interpFunction {
		t.Errorf("parsed %+v", p)
	}
	if _, ok := p.serverTools()[interpFunction].(gateway.InterpreterTool); !ok || len(p.serverTools()) != 1 {
		t.Errorf("server tools %v", p.serverTools())
	}
	p, err = read(`{"model":"p/m","input":"hi","tools":[{"type":"shell","environment":{"type":"container_auto","memory_limit":"4g","file_ids":["file_1"]}},` +
		`{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g","file_ids":["file_2"]}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if p.open.MemoryLimit != "4g" || len(p.uploads) != 2 || p.ciOutputs || len(p.serverTools()) != 2 {
		t.Errorf("parsed %+v", p)
	}
	_, err = read(`{"model":"p/m","input":"hi","tools":[{"type":"shell","environment":{"type":"container_auto","memory_limit":"4g"}},{"type":"code_interpreter","container":{"type":"auto","memory_limit":"16g"}}]}`)
	if ae, ok := err.(*apiError); !ok || ae.Param != "tools[1].container" || !strings.Contains(ae.Message, "memory limits") {
		t.Errorf("conflicting memory limits: %v", err)
	}
}
