package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/store/s3blobs"
	"github.com/shellgate/shellgate/sandbox"
)

// Gateway and eval requests through B for a container awake on A: the
// whole request is replayed to A before any model call, so the commands
// run in A's sandbox, the model is called by A only, and the request is
// billed once. The official SDKs are the clients; each replica has its
// own scripted models, so a model call on the wrong replica shows.
func TestReplicasGateway(t *testing.T) {
	cl := newTestCluster(t, true)
	cl.image = "default" // python3, for Gemini's code execution
	ma, mb := gatewaytest.Models{}, gatewaytest.Models{}
	// Workspace files in the bucket, as --storage s3://… keeps them: one
	// uploaded through a replica is copied in on another.
	a := cl.replica(t, "node-a", func(c *Config) { c.Models, c.Blobs = ma, s3blobs.New(cl.s3) })
	b := cl.replica(t, "node-b", func(c *Config) { c.Models, c.Blobs = mb, s3blobs.New(cl.s3) })
	key := a.keyA
	c := a.create(key, "gw")
	a.exec(key, "gw", "echo only-on-a > /tmp/only-here") // A's sandbox's own layer
	billed := 1                                          // requests that ran a command: one usage row each
	// script registers the same turns under name on both replicas.
	script := func(name string, turns ...gatewaytest.Turn) (onA, onB *gatewaytest.Script) {
		onA, onB = gatewaytest.NewScript(turns...), gatewaytest.NewScript(turns...)
		ma[name], mb[name] = onA, onB
		return onA, onB
	}
	servedByA := func(t *testing.T, onA, onB *gatewaytest.Script) {
		t.Helper()
		if n, m := len(onA.Requests()), len(onB.Requests()); n != 2 || m != 0 {
			t.Fatalf("model calls: %d on A, %d on B; want 2 on A only", n, m)
		}
		if st, _ := b.mgr.Status(c.ID); st == sandbox.Running {
			t.Fatal("B woke the container")
		}
		if loc := a.location(t, c.ID); loc != "node-a" {
			t.Fatalf("located at %q", loc)
		}
		billed++
	}
	shellTool := []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_reference", "container_id": c.ID}}}
	oc := openAIAt(b.url, key)
	ac := anthropicAt(b.url, key)
	shellTurns := []gatewaytest.Turn{{Parts: []gateway.Part{shellCall("c1", "cat /tmp/only-here")}}, gatewaytest.EchoResult()}
	bashTurns := []gatewaytest.Turn{{Parts: []gateway.Part{gatewaytest.Call("toolu_1", "bash_code_execution", map[string]string{"command": "cat /tmp/only-here"})}}, gatewaytest.EchoResult()}

	t.Run("01 Responses through B runs in A's sandbox", func(t *testing.T) {
		onA, onB := script("r1", shellTurns...)
		resp, err := oc.Responses.New(t.Context(), responses.ResponseNewParams{Model: "r1/m"},
			option.WithJSONSet("input", "go"), option.WithJSONSet("tools", shellTool))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != "completed" || !strings.Contains(resp.OutputText(), "only-on-a") {
			t.Fatalf("%s", resp.RawJSON())
		}
		servedByA(t, onA, onB)
	})

	t.Run("02 Responses streamed through B", func(t *testing.T) {
		onA, onB := script("r2", shellTurns...)
		stream := oc.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{Model: "r2/m"},
			option.WithJSONSet("input", "go"), option.WithJSONSet("tools", shellTool))
		defer stream.Close()
		var types []string
		var delta, last string
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			if ev.Type == "response.shell_call_output_content.delta" {
				delta += ev.RawJSON()
			}
			last = ev.Type
			if ev.Type == "response.completed" && !strings.Contains(ev.Response.OutputText(), "only-on-a") {
				t.Fatalf("completed: %s", ev.RawJSON())
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if last != "response.completed" || !strings.Contains(delta, "only-on-a") {
			t.Fatalf("events %v, output deltas %s", types, delta)
		}
		servedByA(t, onA, onB)
	})

	t.Run("03 Messages through B, by container and by x-session-id", func(t *testing.T) {
		onA, onB := script("m1", bashTurns...)
		params := anthropic.MessageNewParams{Model: "m1/m", MaxTokens: 1000, Messages: userText("go"), Tools: codeExecTool}
		m, err := ac.Messages.New(t.Context(), params, aoption.WithJSONSet("container", c.ID))
		if err != nil {
			t.Fatal(err)
		}
		bs := blocks(t, m)
		if len(bs) < 2 || gatewaytest.JSONAt(bs[1], "content", "stdout") != "only-on-a\n" || m.Container.ID != c.ID {
			t.Fatalf("%s", m.RawJSON())
		}
		servedByA(t, onA, onB)

		onA, onB = script("m2", bashTurns...)
		params.Model = "m2/m"
		acc, events := streamed(t, ac, params, aoption.WithHeader("x-session-id", "gw"))
		if events[len(events)-1] != "message_stop" || acc.Container.ID != c.ID {
			t.Fatalf("events %v container %+v", events, acc.Container)
		}
		if r := acc.Content[1].AsBashCodeExecutionToolResult(); r.Content.Stdout != "only-on-a\n" {
			t.Fatalf("%+v", acc.Content)
		}
		servedByA(t, onA, onB)
	})

	t.Run("04 eval through B on a container awake on A", func(t *testing.T) {
		st, body := b.do("POST", "/api/v1/eval", key, map[string]any{
			"source":  `return (await sandbox.exec('cat /tmp/only-here'))[0].stdout`,
			"sandbox": map[string]any{"container_id": "gw"}})
		var out struct {
			Status string          `json:"status"`
			Value  json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(body, &out); err != nil || st != http.StatusOK || out.Status != "completed" || string(out.Value) != `"only-on-a\n"` {
			t.Fatalf("%d %s", st, body)
		}
		if s, _ := b.mgr.Status(c.ID); s == sandbox.Running {
			t.Fatal("B woke the container")
		}
		billed++
	})

	t.Run("04b Gemini through B by x-session-id, streamed and not", func(t *testing.T) {
		// Gemini names its container by session only (x-session-id).
		gc, err := genai.NewClient(t.Context(), &genai.ClientConfig{APIKey: key, Backend: genai.BackendGeminiAPI,
			HTTPOptions: genai.HTTPOptions{BaseURL: b.url + "/", Headers: http.Header{"X-Session-Id": {"gw"}}}})
		if err != nil {
			t.Fatal(err)
		}
		cfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{CodeExecution: &genai.ToolCodeExecution{}}}}
		pyTurns := []gatewaytest.Turn{{Parts: []gateway.Part{gatewaytest.Call("c1", "code_execution",
			map[string]string{"code": "print(open('/tmp/only-here').read(), end='')"})}}, gatewaytest.EchoResult()}
		want := "[code:PYTHON result:OUTCOME_OK text]"

		onA, onB := script("g1", pyTurns...)
		resp, err := gc.Models.GenerateContent(t.Context(), "g1/m", genai.Text("go"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		kinds, text := partKinds(resp.Candidates[0].Content.Parts)
		if fmt.Sprint(kinds) != want || !strings.Contains(text, "only-on-a") {
			t.Fatalf("parts %v, text %q", kinds, text)
		}
		servedByA(t, onA, onB)

		onA, onB = script("g2", pyTurns...)
		var parts []*genai.Part
		for chunk, err := range gc.Models.GenerateContentStream(t.Context(), "g2/m", genai.Text("go"), cfg) {
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, chunk.Candidates[0].Content.Parts...)
		}
		if kinds, text := partKinds(parts); fmt.Sprint(kinds) != want || !strings.Contains(text, "only-on-a") {
			t.Fatalf("streamed parts %v, text %q", kinds, text)
		}
		servedByA(t, onA, onB)
	})

	t.Run("05 billed once each, no 429", func(t *testing.T) {
		events := waitRows(t, a, c.ID, billed)
		if events != billed {
			t.Fatalf("%d usage rows for %d billed requests", events, billed)
		}
		if strings.Contains(b.logs.String(), `"status":429`) || strings.Contains(a.logs.String(), `"status":429`) {
			t.Fatal("a 429 in the replicas' logs")
		}
	})

	t.Run("06 a sleeping container wakes where the request arrives", func(t *testing.T) {
		if err := a.mgr.Sleep(t.Context(), c.ID); err != nil {
			t.Fatal(err)
		}
		onA, onB := script("r3", gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "cat /tmp/only-here 2>&1; true")}}, gatewaytest.EchoResult())
		resp, err := oc.Responses.New(t.Context(), responses.ResponseNewParams{Model: "r3/m"},
			option.WithJSONSet("input", "go"), option.WithJSONSet("tools", shellTool))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(resp.OutputText(), "No such file") || len(onA.Requests()) != 0 || len(onB.Requests()) != 2 {
			t.Fatalf("A %d B %d: %s", len(onA.Requests()), len(onB.Requests()), resp.RawJSON())
		}
		if loc := b.location(t, c.ID); loc != "node-b" {
			t.Fatalf("woken through B, located at %q", loc)
		}
	})

	t.Run("07 a container that wakes on the other replica mid-request: the call runs there through its exec API", func(t *testing.T) {
		if err := b.mgr.Sleep(t.Context(), c.ID); err != nil {
			t.Fatal(err)
		}
		billed = countRows(t, a, c.ID)
		// Asleep when the request reaches A (served there); while the
		// model thinks, another request wakes it on B.
		woke := gatewaytest.Turn{Reply: func(*gateway.Request) *gateway.Turn {
			if st, body := b.do("POST", "/api/v1/containers/gw/exec", key, map[string]any{"commands": []string{"echo woke-on-b > /tmp/only-b"}}); st != 200 {
				t.Errorf("waking on B: %d %s", st, body)
			}
			return &gateway.Turn{Parts: []gateway.Part{shellCall("c1", "cat /tmp/only-b")}}
		}}
		onA, _ := script("r4", woke, gatewaytest.EchoResult())
		oa := openAIAt(a.url, key)
		stream := oa.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{Model: "r4/m"},
			option.WithJSONSet("input", "go"), option.WithJSONSet("tools", shellTool))
		defer stream.Close()
		var delta, last string
		for stream.Next() {
			ev := stream.Current()
			if ev.Type == "response.shell_call_output_content.delta" {
				delta += ev.RawJSON()
			}
			last = ev.Type
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if last != "response.completed" || !strings.Contains(delta, "woke-on-b") || len(onA.Requests()) != 2 {
			t.Fatalf("last %s, output deltas %s, %d model calls", last, delta, len(onA.Requests()))
		}
		if st, _ := a.mgr.Status(c.ID); st == sandbox.Running {
			t.Fatal("A woke the container too")
		}
		if loc := a.location(t, c.ID); loc != "node-b" {
			t.Fatalf("located at %q", loc)
		}
		// Two rows: the exec that woke it, and the call run on B for A's
		// request; A bills nothing for it.
		deadline := time.Now().Add(5 * time.Second)
		for countRows(t, a, c.ID) != billed+2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if n := countRows(t, a, c.ID); n != billed+2 {
			t.Fatalf("%d usage rows, want %d", n, billed+2)
		}
	})

	// moveMidRequest sleeps the container everywhere, so that a request
	// reaching A is served there; the script's first turn then wakes it
	// on B (an exec through B, which leaves /tmp/only-b in B's sandbox)
	// before it asks for first.
	moveMidRequest := func(t *testing.T, first gateway.Part) gatewaytest.Turn {
		t.Helper()
		for _, r := range []*replica{a, b} {
			if err := ignoreNotFound(r.mgr.Sleep(t.Context(), c.ID)); err != nil {
				t.Fatal(err)
			}
		}
		billed = countRows(t, a, c.ID)
		return gatewaytest.Turn{Reply: func(*gateway.Request) *gateway.Turn {
			if st, body := b.do("POST", "/api/v1/containers/gw/exec", key, map[string]any{"commands": []string{"echo woke-on-b > /tmp/only-b"}}); st != 200 {
				t.Errorf("waking on B: %d %s", st, body)
			}
			return &gateway.Turn{Parts: []gateway.Part{first}}
		}}
	}
	// stayedOnB checks that A never woke the container and that the
	// request's command ran on B, billed there once (with the exec that
	// woke it: two rows); A bills nothing for the request.
	stayedOnB := func(t *testing.T) {
		t.Helper()
		if st, _ := a.mgr.Status(c.ID); st == sandbox.Running {
			t.Fatal("A woke the container")
		}
		if loc := a.location(t, c.ID); loc != "node-b" {
			t.Fatalf("located at %q", loc)
		}
		if n := waitRows(t, a, c.ID, billed+2); n != billed+2 {
			t.Fatalf("%d usage rows, want %d", n, billed+2)
		}
		if strings.Contains(b.logs.String(), `"status":429`) || strings.Contains(a.logs.String(), `"status":429`) {
			t.Fatal("a 429 in the replicas' logs")
		}
	}

	t.Run("08 Messages: the file steps of a container that moved mid-request run on its new node", func(t *testing.T) {
		up := struct {
			ID string `json:"id"`
		}{}
		st, body := a.upload("/api/v1/files", key, part{name: "file", filename: "in.csv", content: "x,y\n1,2\n"}, part{name: "purpose", content: "user_data"})
		if err := json.Unmarshal(body, &up); st != 200 || err != nil {
			t.Fatalf("%d %s", st, body)
		}
		editor := func(id string, args map[string]any) gateway.Part {
			return gatewaytest.Call(id, "text_editor_code_execution", args)
		}
		onA, onB := script("m3",
			moveMidRequest(t, editor("t1", map[string]any{"command": "create", "path": "notes/moved.txt", "file_text": "alpha\nbeta\n"})),
			gatewaytest.Turn{Parts: []gateway.Part{editor("t2", map[string]any{"command": "view", "path": "/workspace/home/notes/moved.txt"})}},
			gatewaytest.Turn{Parts: []gateway.Part{editor("t3", map[string]any{"command": "str_replace", "path": "notes/moved.txt", "old_str": "beta", "new_str": "BETA"})}},
			gatewaytest.Turn{Parts: []gateway.Part{editor("t4", map[string]any{"command": "view", "path": "missing.txt"})}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("t5", "bash_code_execution", map[string]string{
				"command": `cat notes/moved.txt "$INPUT_DIR/in.csv" /tmp/only-b && cp notes/moved.txt out.txt`})}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("done")}})
		ca := anthropicAt(a.url, key)
		m, err := ca.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "m3/m", MaxTokens: 1000, Tools: codeExecTool,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("edit"), anthropic.NewContainerUploadBlock(up.ID))}},
			aoption.WithJSONSet("container", c.ID))
		if err != nil {
			t.Fatal(err)
		}
		bs := blocks(t, m)
		if len(bs) != 11 || bs[10]["text"] != "done" {
			t.Fatalf("%d blocks: %s", len(bs), m.RawJSON())
		}
		content := func(i int) map[string]any { c, _ := bs[2*i+1]["content"].(map[string]any); return c }
		for i, w := range []map[string]any{
			{"type": "text_editor_code_execution_create_result", "is_file_update": false},
			{"type": "text_editor_code_execution_view_result", "content": "alpha\nbeta", "file_type": "text", "num_lines": 2.0, "start_line": 1.0, "total_lines": 2.0},
			{"type": "text_editor_code_execution_str_replace_result", "old_start": 2.0, "old_lines": 1.0, "new_start": 2.0, "new_lines": 1.0, "lines": []any{"-beta", "+BETA"}},
			{"type": "text_editor_code_execution_tool_result_error", "error_code": "file_not_found", "error_message": "missing.txt does not exist"},
		} {
			if got := content(i); !reflect.DeepEqual(got, w) {
				t.Errorf("step %d: got %v\nwant %v", i+1, got, w)
			}
		}
		bash := content(4)
		outs, _ := bash["content"].([]any)
		if bash["stdout"] != "alpha\nBETA\nx,y\n1,2\nwoke-on-b\n" || len(outs) != 1 {
			t.Fatalf("bash step: %v", bash)
		}
		if n, m := len(onA.Requests()), len(onB.Requests()); n != 6 || m != 0 {
			t.Fatalf("model calls: %d on A, %d on B; want 6 on A only", n, m)
		}
		// The files are in the home on B; the output file was promoted
		// there into the shared workspace files.
		if st, body := b.do("GET", "/api/v1/containers/gw/files/"+CFileID("notes/moved.txt")+"/content", key, nil); st != 200 || string(body) != "alpha\nBETA\n" {
			t.Fatalf("notes/moved.txt on B: %d %q", st, body)
		}
		id, _ := outs[0].(map[string]any)["file_id"].(string)
		if st, body := a.do("GET", "/api/v1/files/"+id+"/content", key, nil); st != 200 || string(body) != "alpha\nBETA\n" {
			t.Fatalf("promoted output file %q: %d %q", id, st, body)
		}
		stayedOnB(t)
	})

	t.Run("09 Responses: the changed files of a call on a container that moved mid-request", func(t *testing.T) {
		onA, onB := script("r5", moveMidRequest(t, shellCall("c1", "mkdir -p out && printf report > out/report.txt && printf abc > out.txt")), gatewaytest.EchoResult())
		oa := openAIAt(a.url, key)
		resp, err := oa.Responses.New(t.Context(), responses.ResponseNewParams{Model: "r5/m"},
			option.WithJSONSet("input", "go"), option.WithJSONSet("tools", shellTool))
		if err != nil {
			t.Fatal(err)
		}
		// The new file and the rewritten one; not the files left as they were.
		text := resp.OutputText()
		if !strings.Contains(text, `{"path":"/workspace/home/out/report.txt","bytes":6}`) || !strings.Contains(text, `{"path":"/workspace/home/out.txt","bytes":3}`) ||
			strings.Contains(text, "notes/moved.txt") || strings.Count(text, `"path"`) != 2 {
			t.Fatalf("%s", resp.RawJSON())
		}
		if n, m := len(onA.Requests()), len(onB.Requests()); n != 2 || m != 0 {
			t.Fatalf("model calls: %d on A, %d on B", n, m)
		}
		stayedOnB(t)
	})
}

// waitRows waits up to 5 s for container id to have want usage rows (a
// row is written as its call ends) and returns how many it has.
func waitRows(t *testing.T, r *replica, id string, want int) int {
	t.Helper()
	n := countRows(t, r, id)
	for i := 0; i < 100 && n != want; i++ {
		time.Sleep(50 * time.Millisecond)
		n = countRows(t, r, id)
	}
	return n
}

// countRows is the number of usage rows of container id.
func countRows(t *testing.T, r *replica, id string) int {
	t.Helper()
	n := 0
	for _, u := range ledgerOf(t, r.st, "a") {
		if u.ContainerID == id {
			n += int(u.Events)
		}
	}
	return n
}
