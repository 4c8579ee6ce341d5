package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/responses"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
)

// These tests drive OpenAI's code_interpreter tool through the real server
// (crun sandboxes on the default image, whose kernel runs the code) with
// openai-go, the model being a gatewaytest.Script.

var (
	interpAuto    = map[string]any{"type": "code_interpreter", "container": map[string]any{"type": "auto"}}
	includeCI     = []string{"code_interpreter_call.outputs"}
	interpDefault = map[string]any{"tools": []any{interpAuto}, "include": includeCI}
)

func ciCall(id, code string) gateway.Part {
	return gatewaytest.Call(id, "code_interpreter", map[string]any{"code": code})
}

// interpCalls are the response's code_interpreter_call items.
func interpCalls(r *responses.Response) []responses.ResponseCodeInterpreterToolCall {
	var out []responses.ResponseCodeInterpreterToolCall
	for _, it := range r.Output {
		if it.Type == "code_interpreter_call" {
			out = append(out, it.AsCodeInterpreterCall())
		}
	}
	return out
}

// interpOnce sends a request (key A, the automatic container, session)
// whose model runs code once in the interpreter, then answers; it returns
// the request's one code_interpreter_call and the model's script.
func (g *gwEnv) interpOnce(t *testing.T, session, code string) (responses.ResponseCodeInterpreterToolCall, *gatewaytest.Script) {
	t.Helper()
	s := g.script(gatewaytest.Turn{Parts: []gateway.Part{ciCall("call_1", code)}}, gatewaytest.EchoResult())
	r, err := g.newResponse(t, g.keyA, "go", map[string]any{"tools": []any{interpAuto}, "include": includeCI, "session_id": session})
	if err != nil {
		t.Fatal(err)
	}
	c := interpCalls(r)
	if len(c) != 1 {
		t.Fatalf("output %s", r.RawJSON())
	}
	return c[0], s
}

// logsOf joins a call's logs outputs.
func logsOf(c responses.ResponseCodeInterpreterToolCall) string {
	var b strings.Builder
	for _, o := range c.Outputs {
		if o.Type == "logs" {
			b.WriteString(o.Logs)
		}
	}
	return b.String()
}

// TestResponsesCodeInterpreter: code_interpreter calls run on the
// container's kernel, state carries from call to call and from request to
// request, and the steps show as code_interpreter_call items.
func TestResponsesCodeInterpreter(t *testing.T) {
	g := newGatewayEnv(t)

	t.Run("1 state across two calls", func(t *testing.T) {
		s := g.script(gatewaytest.Turn{Parts: []gateway.Part{ciCall("call_1", "x = 41")}},
			gatewaytest.Turn{Parts: []gateway.Part{ciCall("call_2", "print(x + 1)")}}, gatewaytest.EchoResult())
		r, err := g.newResponse(t, g.keyA, "What is 41+1?", interpDefault)
		if err != nil {
			t.Fatal(err)
		}
		checkResponse(t, r)
		calls := interpCalls(r)
		if len(calls) != 2 || len(r.Output) != 3 || r.Output[2].Type != "message" {
			t.Fatalf("output %s", r.RawJSON())
		}
		for i, c := range calls {
			if !strings.HasPrefix(c.ID, "ci_") || c.Status != "completed" || !strings.HasPrefix(c.ContainerID, "cntr_") || c.ContainerID != calls[0].ContainerID {
				t.Errorf("call %d: %s", i, c.RawJSON())
			}
		}
		if calls[0].Code != "x = 41" || len(calls[0].Outputs) != 0 || !calls[0].JSON.Outputs.Valid() {
			t.Errorf("first call %s", calls[0].RawJSON())
		}
		if calls[1].Code != "print(x + 1)" || len(calls[1].Outputs) != 1 || calls[1].Outputs[0].Type != "logs" || calls[1].Outputs[0].Logs != "42\n" {
			t.Errorf("second call %s", calls[1].RawJSON())
		}
		reqs := s.Requests()
		if len(reqs) != 3 {
			t.Fatalf("%d upstream requests", len(reqs))
		}
		if n := len(reqs[0].Tools); n != 1 || reqs[0].Tools[0].Name != "code_interpreter" || !strings.Contains(string(reqs[0].Tools[0].Parameters), `"code"`) {
			t.Errorf("the model's tools: %+v", reqs[0].Tools)
		}
		res, _ := lastResult(&reqs[2])
		var read struct {
			Stdout *string `json:"stdout"`
			Stderr *string `json:"stderr"`
		}
		if err := json.Unmarshal([]byte(res.Content), &read); err != nil || res.IsError || read.Stdout == nil || *read.Stdout != "42\n" || read.Stderr == nil || *read.Stderr != "" {
			t.Errorf("the model read %+v", res)
		}
		if !strings.Contains(r.OutputText(), `42`) {
			t.Errorf("answer %q", r.OutputText())
		}
		u := responseUsage(t, r).Usage
		if u.ServerToolUseDetails == nil || u.ServerToolUseDetails.Requested != 2 || u.ServerToolUseDetails.Executed != 2 {
			t.Errorf("usage %s", r.Usage.RawJSON())
		}
	})

	t.Run("2 state across two requests on one container", func(t *testing.T) {
		var cids []string
		for i, code := range []string{"y = 41", "print(y + 1)"} {
			c, _ := g.interpOnce(t, "ci-two-requests", code)
			cids = append(cids, c.ContainerID)
			if i == 1 && logsOf(c) != "42\n" {
				t.Fatalf("the second request did not see the first one's variable: %s", c.RawJSON())
			}
		}
		if cids[0] != cids[1] {
			t.Errorf("containers %v", cids)
		}
		// The container's id given as the tool's container runs there too.
		g.script(gatewaytest.Turn{Parts: []gateway.Part{ciCall("call_1", "print(y * 2)")}}, gatewaytest.EchoResult())
		r, err := g.newResponse(t, g.keyA, "go", map[string]any{"tools": []any{map[string]any{"type": "code_interpreter", "container": cids[0]}}, "include": includeCI})
		if err != nil {
			t.Fatal(err)
		}
		if c := interpCalls(r); len(c) != 1 || c[0].ContainerID != cids[0] || logsOf(c[0]) != "82\n" {
			t.Errorf("container %q: %s", cids[0], r.RawJSON())
		}
	})

	t.Run("3 outputs are null without the include", func(t *testing.T) {
		g.script(gatewaytest.Turn{Parts: []gateway.Part{ciCall("call_1", "print('hi')")}}, gatewaytest.EchoResult())
		r, err := g.newResponse(t, g.keyA, "go", map[string]any{"tools": []any{map[string]any{"type": "code_interpreter"}}})
		if err != nil {
			t.Fatal(err)
		}
		checkResponse(t, r)
		c := interpCalls(r)
		if len(c) != 1 || c[0].Status != "completed" || c[0].JSON.Outputs.Raw() != "null" || !strings.Contains(r.OutputText(), `hi\n`) {
			t.Errorf("output %s", r.RawJSON())
		}
	})

	t.Run("4 a plot is an image output", func(t *testing.T) {
		s := g.script(gatewaytest.Turn{Parts: []gateway.Part{ciCall("call_1", "import matplotlib.pyplot as plt; plt.plot([1,2]); plt.show()")}}, gatewaytest.EchoResult())
		r, err := g.newResponse(t, g.keyA, "plot", interpDefault)
		if err != nil {
			t.Fatal(err)
		}
		c := interpCalls(r)
		if len(c) != 1 || c[0].Status != "completed" {
			t.Fatalf("output %s", r.RawJSON())
		}
		var images int
		for _, o := range c[0].Outputs {
			if o.Type != "image" {
				continue
			}
			images++
			data, ok := strings.CutPrefix(o.URL, "data:image/png;base64,")
			png, err := base64.StdEncoding.DecodeString(data)
			if !ok || err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
				t.Errorf("image url %.80s…", o.URL)
			}
		}
		if images != 1 {
			t.Errorf("%d images: %.2000s", images, c[0].RawJSON())
		}
		// The model sees the figure with the result.
		if res, _ := lastResult(&s.Requests()[1]); len(res.Images) != 1 || res.Images[0].MediaType != "image/png" {
			t.Errorf("the model was given %d images", len(res.Images))
		}
	})

	t.Run("5 a written file is cited and downloads", func(t *testing.T) {
		const answer = "Here is the file: [report.csv](sandbox:/mnt/data/report.csv). Done — ✓."
		g.script(gatewaytest.Turn{Parts: []gateway.Part{ciCall("call_1", "open('/mnt/data/report.csv', 'w').write('a,b\\n1,2\\n')")}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text(answer)}})
		r, err := g.newResponse(t, g.keyA, "write a csv", interpDefault)
		if err != nil {
			t.Fatal(err)
		}
		checkResponse(t, r)
		c := interpCalls(r)
		msg := r.Output[len(r.Output)-1].AsMessage()
		if len(c) != 1 || len(msg.Content) != 1 || len(msg.Content[0].Annotations) != 1 {
			t.Fatalf("output %s", r.RawJSON())
		}
		a := msg.Content[0].Annotations[0].AsContainerFileCitation()
		const link = "sandbox:/mnt/data/report.csv"
		start := len([]rune(answer[:strings.Index(answer, link)]))
		if a.Type != "container_file_citation" || a.ContainerID != c[0].ContainerID || !strings.HasPrefix(a.FileID, "cfile_") || a.Filename != "report.csv" ||
			a.StartIndex != int64(start) || a.EndIndex != int64(start+len(link)) {
			t.Errorf("annotation %s", a.RawJSON())
		}
		st, body, _ := g.getRaw("/v1/containers/"+a.ContainerID+"/files/"+a.FileID+"/content", g.keyA)
		if st != 200 || string(body) != "a,b\n1,2\n" {
			t.Errorf("download: %d %q", st, body)
		}
	})

	t.Run("6 an exception and bad arguments", func(t *testing.T) {
		s := g.script(gatewaytest.Turn{Parts: []gateway.Part{ciCall("call_1", "1/0"), gatewaytest.Call("call_2", "code_interpreter", `{"code": 5}`)}}, gatewaytest.EchoResult())
		r, err := g.newResponse(t, g.keyA, "go", interpDefault)
		if err != nil {
			t.Fatal(err)
		}
		checkResponse(t, r)
		c := interpCalls(r)
		if len(c) != 2 {
			t.Fatalf("output %s", r.RawJSON())
		}
		if c[0].Status != "completed" || !strings.Contains(logsOf(c[0]), "ZeroDivisionError") {
			t.Errorf("exception: %s", c[0].RawJSON())
		}
		if c[1].Status != "failed" || !strings.Contains(logsOf(c[1]), "error: ") {
			t.Errorf("bad arguments: %s", c[1].RawJSON())
		}
		q := s.Requests()[1]
		results := q.Messages[len(q.Messages)-1].Parts
		if len(results) != 2 || results[0].Result.IsError || !strings.Contains(results[0].Result.Content, "ZeroDivisionError") ||
			!results[1].Result.IsError || results[1].Result.Content != logsOf(c[1]) {
			t.Errorf("the model read %+v", results)
		}
	})

	t.Run("7 beside shell and a client function, then replayed", func(t *testing.T) {
		lookup := map[string]any{"type": "function", "name": "lookup", "parameters": map[string]any{"type": "object"}}
		tools := []any{nativeShell, interpAuto, lookup}
		s := g.script(gatewaytest.Turn{Parts: []gateway.Part{ciCall("call_1", "z = 7; print(z)"), shellCall("call_2", "echo from-shell")}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("call_3", "lookup", map[string]string{"q": "x"})}})
		r, err := g.newResponse(t, g.keyA, "go", map[string]any{"tools": tools, "include": includeCI})
		if err != nil {
			t.Fatal(err)
		}
		checkResponse(t, r)
		var types []string
		for _, it := range r.Output {
			types = append(types, it.Type)
		}
		if want := []string{"code_interpreter_call", "shell_call", "shell_call_output", "function_call"}; !reflect.DeepEqual(types, want) {
			t.Fatalf("items %v: %s", types, r.RawJSON())
		}
		ci, so := r.Output[0].AsCodeInterpreterCall(), r.Output[2].AsShellCallOutput()
		if logsOf(ci) != "7\n" || so.Output[0].Stdout != "from-shell\n" || r.Output[1].AsShellCall().Environment.ContainerID != ci.ContainerID {
			t.Errorf("steps %s", r.RawJSON())
		}
		var names []string
		for _, tl := range s.Requests()[0].Tools {
			names = append(names, tl.Name)
		}
		if len(names) != 3 {
			t.Errorf("the model's tools %v", names)
		}

		// The next request replays the items with the function's output:
		// nothing runs again, the model reads the code and its logs, and
		// the conversation's container is used.
		input := []any{map[string]any{"role": "user", "content": "go"}}
		for _, it := range r.Output {
			var v any
			json.Unmarshal([]byte(it.RawJSON()), &v)
			input = append(input, v)
		}
		input = append(input, map[string]any{"type": "function_call_output", "call_id": "call_3", "output": "found"})
		s = g.script(gatewaytest.Turn{Parts: []gateway.Part{ciCall("call_4", "print(z * 6)")}}, gatewaytest.EchoResult())
		r2, err := g.newResponse(t, g.keyA, input, map[string]any{"tools": tools, "include": includeCI})
		if err != nil {
			t.Fatal(err)
		}
		c2 := interpCalls(r2)
		if len(c2) != 1 || logsOf(c2[0]) != "42\n" || c2[0].ContainerID != ci.ContainerID {
			t.Errorf("after the replay: %s", r2.RawJSON())
		}
		q := s.Requests()[0]
		var call *gateway.ToolCall
		var result *gateway.ToolResult
		for _, m := range q.Messages {
			for _, p := range m.Parts {
				if p.Kind == gateway.PartToolCall && p.Call.Name == "code_interpreter" {
					call = p.Call
				}
				if p.Kind == gateway.PartToolResult && call != nil && p.Result.CallID == call.ID && result == nil {
					result = p.Result
				}
			}
		}
		if call == nil || call.ID != ci.ID || call.Arguments != `{"code":"z = 7; print(z)"}` || result == nil || !strings.Contains(result.Content, `"stdout":"7\n"`) {
			t.Errorf("the replayed call read as %+v / %+v", call, result)
		}
	})
}

// TestResponsesCodeInterpreterStreamed: the code_interpreter events come
// in the live API's order, a written file's citation is announced before
// the text is done, and response.completed is the non-streamed response.
func TestResponsesCodeInterpreterStreamed(t *testing.T) {
	g := newGatewayEnv(t)
	const answer = "Saved to sandbox:/mnt/data/out.txt"
	turns := func() []gatewaytest.Turn {
		return []gatewaytest.Turn{
			{Parts: []gateway.Part{gatewaytest.Text("Let me compute."), ciCall("call_1", "v = 6 * 7\nprint(v)")}},
			{Parts: []gateway.Part{ciCall("call_2", "open('out.txt', 'w').write(str(v))")}},
			{Parts: []gateway.Part{gatewaytest.Text(answer)}},
		}
	}
	set := map[string]any{"tools": []any{interpAuto}, "include": includeCI}
	g.script(turns()...)
	plain, err := g.newResponse(t, g.keyA, "go", set)
	if err != nil {
		t.Fatal(err)
	}

	g.script(turns()...)
	events := g.streamResponse(t, g.keyA, "go", set)
	var types []string
	done := map[int64]string{}
	for _, ev := range events {
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_item.done":
			done[ev.OutputIndex] = ev.Item.RawJSON()
		case "response.output_item.added":
			if ev.Item.Type == "code_interpreter_call" {
				if c := ev.Item.AsCodeInterpreterCall(); c.Status != "in_progress" || c.Code != "" || c.JSON.Outputs.Raw() != "[]" || !strings.HasPrefix(c.ContainerID, "cntr_") {
					t.Errorf("added %s", ev.Item.RawJSON())
				}
			}
		case "response.code_interpreter_call_code.delta", "response.code_interpreter_call_code.done",
			"response.code_interpreter_call.in_progress", "response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed":
			if !strings.HasPrefix(ev.ItemID, "ci_") {
				t.Errorf("%s without its item: %s", ev.Type, ev.RawJSON())
			}
			if ev.Type == "response.code_interpreter_call_code.done" && ev.Code != "v = 6 * 7\nprint(v)" && ev.Code != "open('out.txt', 'w').write(str(v))" {
				t.Errorf("code.done %s", ev.RawJSON())
			}
		case "response.output_text.annotation.added":
			a := ev.AsResponseOutputTextAnnotationAdded()
			if a.AnnotationIndex != 0 || !strings.Contains(a.RawJSON(), `"filename":"out.txt"`) || !strings.Contains(a.RawJSON(), `"start_index":9`) {
				t.Errorf("annotation %s", ev.RawJSON())
			}
		}
	}
	ci := []string{
		"response.output_item.added", "response.code_interpreter_call.in_progress",
		"response.code_interpreter_call_code.delta", "response.code_interpreter_call_code.done",
		"response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed", "response.output_item.done",
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done"}
	want = append(append(want, ci...), ci...)
	want = append(want, "response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.annotation.added", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.completed")
	if got := compact(types); !reflect.DeepEqual(got, want) {
		t.Errorf("events (repeats collapsed)\n %v\nwant\n %v", got, want)
	}
	final := events[len(events)-1].Response
	checkResponse(t, &final)
	for i, it := range final.Output {
		if done[int64(i)] != it.RawJSON() {
			t.Errorf("output[%d] differs from its output_item.done:\n%s\n%s", i, it.RawJSON(), done[int64(i)])
		}
	}
	if c := interpCalls(&final); len(c) != 2 || logsOf(c[0]) != "42\n" {
		t.Errorf("calls %s", final.RawJSON())
	}
	a := normalize(t, plain.RawJSON(), containerOf(plain))
	b := normalize(t, final.RawJSON(), containerOf(&final))
	if a != b {
		t.Errorf("streamed response differs from the plain one:\n%s\n---\n%s", b, a)
	}
}

// TestResponsesCodeInterpreterSleep: on gVisor a container put to sleep
// through POST …/sleep keeps its Python kernel — `x = 41` before, `print(x
// + 1)` is 42 after — and reports its checkpoint; a checkpoint that cannot
// be restored wakes the container from its files and the model is told.
func TestResponsesCodeInterpreterSleep(t *testing.T) {
	models := gatewaytest.Models{}
	g := &gwEnv{env: newEnv(t, "runsc", "default", func(c *Config) { c.Models = models }), models: models}
	run := func(t *testing.T, code string) (string, *gatewaytest.Script) {
		t.Helper()
		c, s := g.interpOnce(t, "ci-sleep", code)
		if code == "x = 41" {
			return c.ContainerID, s
		}
		return logsOf(c), s
	}
	cid, _ := run(t, "x = 41")
	var obj containerObject
	sleep := func(t *testing.T) {
		t.Helper()
		st, body := g.do("POST", "/api/v1/containers/"+cid+"/sleep", g.keyA, nil)
		if st != 200 || json.Unmarshal(body, &obj) != nil || obj.Status != "sleeping" {
			t.Fatalf("sleep: %d %s", st, body)
		}
	}
	t.Run("1 the kernel's variables survive sleep", func(t *testing.T) {
		sleep(t)
		if obj.CheckpointBytes == nil || *obj.CheckpointBytes < 1<<20 || obj.DiskBytes == nil || *obj.DiskBytes < *obj.CheckpointBytes {
			t.Fatalf("checkpoint not reported: %+v", obj)
		}
		if out, _ := run(t, "print(x + 1)"); out != "42\n" {
			t.Fatalf("after sleep: %q", out)
		}
		if st, body := g.do("GET", "/api/v1/containers/"+cid, g.keyA, nil); st != 200 || !strings.Contains(string(body), `"checkpoint_bytes":0`) {
			t.Errorf("awake: %d %s", st, body)
		}
	})
	t.Run("2 a lost running state is told to the model", func(t *testing.T) {
		sleep(t)
		if err := os.WriteFile(filepath.Join(g.data, "homes", cid+".ckpt", "checkpoint.img"), []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, s := run(t, "print('x' in globals())")
		res, _ := lastResult(&s.Requests()[1])
		if !strings.HasPrefix(out, "False\n") || !strings.Contains(res.Content, "running state") || strings.Contains(res.Content, "sg-") {
			t.Fatalf("after a corrupt checkpoint: %q, the model read %s", out, res.Content)
		}
	})
	t.Run("3 unknown and other workspaces' containers are 404", func(t *testing.T) {
		for _, k := range []string{g.keyA, g.keyB} {
			id := "cntr_nope"
			if k == g.keyB {
				id = cid
			}
			if st, body := g.do("POST", "/api/v1/containers/"+id+"/sleep", k, nil); st != 404 || !strings.Contains(string(body), `"code":404`) {
				t.Errorf("%s: %d %s", id, st, body)
			}
		}
	})
}
