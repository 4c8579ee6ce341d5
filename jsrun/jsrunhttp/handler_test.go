package jsrunhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/jsrun"
	"github.com/shellgate/shellgate/testenv"
)

// memSandbox is an in-memory Sandbox for tests: files in a map, and "echo X"
// as the only command it understands.
type memSandbox struct {
	mu    sync.Mutex
	files map[string][]byte
	execs int
}

func (m *memSandbox) Exec(_ context.Context, cmds []string, timeoutMs, maxOutput int) ([]CommandResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.execs++
	var out []CommandResult
	for _, c := range cmds {
		if rest, ok := strings.CutPrefix(c, "echo "); ok {
			s := rest + "\n"
			trunc := len(s) > maxOutput
			if trunc {
				s = s[:maxOutput]
			}
			out = append(out, CommandResult{Stdout: s, Truncated: trunc})
			continue
		}
		out = append(out, CommandResult{Stderr: "unknown command\n", ExitCode: 127})
	}
	return out, nil
}

func (m *memSandbox) ReadFile(_ context.Context, p string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.files[p]
	if !ok {
		return nil, fmt.Errorf("open %s: %w", p, fs.ErrNotExist)
	}
	return b, nil
}

func (m *memSandbox) WriteFile(_ context.Context, p string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[p] = append([]byte(nil), data...)
	return nil
}

type testServer struct {
	*httptest.Server
	sb *memSandbox
}

func newServer(t *testing.T, mod ...func(*jsrun.Config)) *testServer {
	t.Helper()
	cfg := jsrun.Config{Secret: []byte(strings.Repeat("s", 32)), Store: jsrun.NewMemoryStore(), Audience: "shellgate-eval", OrderedObjects: true}
	for _, m := range mod {
		m(&cfg)
	}
	runner, err := jsrun.NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sb := &memSandbox{files: map[string][]byte{"data.csv": []byte("a,b\n1,2\n")}}
	h := NewHandler(Config{
		Runner: runner,
		Scope:  func(r *http.Request) string { return r.Header.Get("X-Workspace") },
		Sandboxes: func(_ context.Context, r *http.Request, id string) (Sandbox, error) {
			if id != "ctr_1" || r.Header.Get("X-Workspace") != "ws_a" {
				return nil, fmt.Errorf("container %s: %w", id, ErrSandboxNotFound)
			}
			return sb, nil
		},
	})
	mux := http.NewServeMux()
	mux.Handle("POST /api/v1/eval", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testServer{Server: srv, sb: sb}
}

// approveAnew runs req (for ws_a) from its start again, to a new
// interruption, and sets req to resume that with interrupt-1 approved.
func (s *testServer) approveAnew(t *testing.T, req map[string]any) {
	t.Helper()
	delete(req, "continuation")
	delete(req, "resolutions")
	_, out, _ := s.post(t, "ws_a", req)
	req["continuation"] = out["continuation"]
	req["resolutions"] = []map[string]any{{"interruption_id": "interrupt-1", "value": true}}
}

// refused posts body for workspace and fails t unless the answer is
// status with the error code (the envelope's error.code).
func (s *testServer) refused(t *testing.T, workspace string, body any, status int, code string) {
	t.Helper()
	st, out, raw := s.post(t, workspace, body)
	if e, _ := out["error"].(map[string]any); st != status || e["code"] != code {
		t.Fatalf("%d %s, want %d %s", st, raw, status, code)
	}
}

func (s *testServer) post(t *testing.T, workspace string, body any) (int, map[string]any, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/api/v1/eval", bytes.NewReader(b))
	req.Header.Set("X-Workspace", workspace)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("response is not JSON: %s", raw)
	}
	return resp.StatusCode, out, string(raw)
}

func TestCompletedWithTaggedValue(t *testing.T) {
	s := newServer(t)
	code, out, raw := s.post(t, "ws_a", map[string]any{"source": `console.log('hi'); return {n: 1, u: undefined, big: 10n, d: new Date(0), m: new Map([['k', NaN]])}`})
	if code != 200 || out["status"] != "completed" {
		t.Fatalf("%d %s", code, raw)
	}
	// Keys in the guest's order (issue 10 item 5).
	want := `"value":{"n":1,"u":{"$type":"undefined"},"big":{"$type":"bigint","value":"10"},"d":{"$type":"date","value":"1970-01-01T00:00:00.000Z"},"m":{"$type":"map","entries":[["k",{"$type":"number","value":"NaN"}]]}}`
	if !strings.Contains(raw, want) || out["console"] != "hi\n" {
		t.Fatalf("got %s", raw)
	}
}

func TestClientFunctionInterruptAndResume(t *testing.T) {
	s := newServer(t)
	src := `const [a, b] = await Promise.all([ui.confirm('delete?'), ui.ask({q: 'name'})]);
		let rejected = null;
		try { await ui.confirm('again?') } catch (e) { rejected = [e.name, e.message, e.code] }
		return {a, b, rejected}`
	req := map[string]any{"source": src, "client_functions": map[string][]string{"ui": {"confirm", "ask"}}, "context": map[string]any{"user": "u1"}}
	code, out, raw := s.post(t, "ws_a", req)
	if code != 200 || out["status"] != "interrupted" {
		t.Fatalf("%d %s", code, raw)
	}
	ints := out["interruptions"].([]any)
	if len(ints) != 2 {
		t.Fatalf("want 2 interruptions: %s", raw)
	}
	first := ints[0].(map[string]any)
	if first["id"] != "interrupt-1" || first["host_function_name"] != "ui.confirm" || fmt.Sprint(first["arguments"]) != "[delete?]" {
		t.Fatalf("interruption %v", first)
	}
	if !strings.Contains(raw, `"arguments":[{"q":"name"}]`) {
		t.Fatalf("arguments not plain JSON: %s", raw)
	}
	// Partial resolution: only the first.
	req["continuation"] = out["continuation"]
	req["resolutions"] = []map[string]any{{"interruption_id": "interrupt-1", "value": true}}
	code, out, raw = s.post(t, "ws_a", req)
	if code != 200 || out["status"] != "interrupted" || len(out["interruptions"].([]any)) != 1 {
		t.Fatalf("%d %s", code, raw)
	}
	req["continuation"] = out["continuation"]
	req["resolutions"] = []map[string]any{{"interruption_id": "interrupt-2", "value": map[string]any{"$type": "undefined"}}}
	code, out, raw = s.post(t, "ws_a", req)
	if code != 200 || out["status"] != "interrupted" {
		t.Fatalf("%d %s", code, raw)
	}
	// Reject the third call.
	req["continuation"] = out["continuation"]
	req["resolutions"] = []map[string]any{{"interruption_id": "interrupt-3", "error": map[string]any{"message": "user said no", "code": "DENIED"}}}
	code, out, raw = s.post(t, "ws_a", req)
	if code != 200 || out["status"] != "completed" {
		t.Fatalf("%d %s", code, raw)
	}
	if !strings.Contains(raw, `"value":{"a":true,"b":{"$type":"undefined"},"rejected":["Error","user said no","DENIED"]}`) {
		t.Fatalf("got %s", raw)
	}
}

func TestContinuationBoundToWorkspaceAndContext(t *testing.T) {
	s := newServer(t)
	req := map[string]any{"source": `return await ui.ok()`, "client_functions": map[string][]string{"ui": {"ok"}}, "context": "c1"}
	_, out, _ := s.post(t, "ws_a", req)
	req["continuation"] = out["continuation"]
	req["resolutions"] = []map[string]any{{"interruption_id": "interrupt-1", "value": 1}}
	code, out2, raw := s.post(t, "ws_b", req)
	if code != 400 || out2["error"].(map[string]any)["code"] != "RUN_PROTOCOL_ERROR" {
		t.Fatalf("other workspace: %d %s", code, raw)
	}
	req["context"] = "c2"
	code, _, raw = s.post(t, "ws_a", req)
	if code != 400 {
		t.Fatalf("other context: %d %s", code, raw)
	}
	req["context"] = "c1"
	code, out2, raw = s.post(t, "ws_a", req)
	if code != 200 || out2["value"] != 1.0 {
		t.Fatalf("%d %s", code, raw)
	}
}

func TestSandboxBuiltins(t *testing.T) {
	s := newServer(t)
	src := `const csv = await sandbox.readFile('data.csv');
		await sandbox.writeFile('/workspace/home/out/rows.txt', String(csv.trim().split('\n').length - 1));
		const [r] = await sandbox.exec('echo hello', {max_output_length: 3});
		let missing; try { await sandbox.readFile('nope.txt') } catch (e) { missing = e.code }
		let escape; try { await sandbox.readFile('../../etc/passwd') } catch (e) { escape = e.code }
		let abs; try { await sandbox.readFile('/etc/passwd') } catch (e) { abs = e.code }
		const bytes = await sandbox.readFileBytes('out/rows.txt');
		return {stdout: r.stdout, truncated: r.truncated, missing, escape, abs, bytes: bytes[0]}`
	code, out, raw := s.post(t, "ws_a", map[string]any{"source": src, "sandbox": map[string]any{"container_id": "ctr_1"}})
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	v := out["value"].(map[string]any)
	if v["stdout"] != "hel" || v["truncated"] != true || v["missing"] != "ENOENT" || v["escape"] != "EVAL_BAD_ARGUMENT" || v["abs"] != "EVAL_BAD_ARGUMENT" || v["bytes"] != float64('1') {
		t.Fatalf("got %s", raw)
	}
	if string(s.sb.files["out/rows.txt"]) != "1" {
		t.Fatalf("file %q", s.sb.files["out/rows.txt"])
	}
	// Another workspace cannot reach the container.
	s.refused(t, "ws_b", map[string]any{"source": `return 1`, "sandbox": map[string]any{"container_id": "ctr_1"}}, 404, CodeSandboxNotFound)
}

func TestSandboxApproval(t *testing.T) {
	s := newServer(t)
	src := `const [r] = await sandbox.exec('echo approved'); return r.stdout`
	req := map[string]any{"source": src, "sandbox": map[string]any{"container_id": "ctr_1", "require_approval": []string{"exec"}}}
	code, out, raw := s.post(t, "ws_a", req)
	if code != 200 || out["status"] != "interrupted" || !strings.Contains(raw, `"payload":{"function":"sandbox.exec","kind":"approval"}`) {
		t.Fatalf("%d %s", code, raw)
	}
	if s.sb.execs != 0 {
		t.Fatal("command ran before approval")
	}
	tok := out["continuation"]
	// Dropping the approval requirement on resume is a binding mismatch.
	bad := map[string]any{"source": src, "sandbox": map[string]any{"container_id": "ctr_1"}, "continuation": tok,
		"resolutions": []map[string]any{{"interruption_id": "interrupt-1", "value": true}}}
	if code, _, raw := s.post(t, "ws_a", bad); code != 400 {
		t.Fatalf("approval requirement dropped: %d %s", code, raw)
	}
	req["continuation"] = tok
	req["resolutions"] = []map[string]any{{"interruption_id": "interrupt-1", "value": false}}
	s.refused(t, "ws_a", req, 422, CodeNotApproved)
	if s.sb.execs != 0 {
		t.Fatalf("denied: %d execs", s.sb.execs)
	}
	// The denial was the answer to that token: it cannot be approved after.
	req["resolutions"] = []map[string]any{{"interruption_id": "interrupt-1", "value": true}}
	s.refused(t, "ws_a", req, 409, "RUN_CONTINUATION_USED")
	if s.sb.execs != 0 {
		t.Fatalf("approval after a denial: %d execs", s.sb.execs)
	}
	s.approveAnew(t, req)
	code, out, raw = s.post(t, "ws_a", req)
	if code != 200 || out["value"] != "approved\n" || s.sb.execs != 1 {
		t.Fatalf("approved: %d %s", code, raw)
	}
}

// TestApprovedCallRunsOnce is issue 6 item 14 over HTTP: resuming the same
// continuation three times ran its approved command three times.
func TestApprovedCallRunsOnce(t *testing.T) {
	s := newServer(t)
	src := `const [r] = await sandbox.exec('echo approved'); return r.stdout`
	req := map[string]any{"source": src, "sandbox": map[string]any{"container_id": "ctr_1", "require_approval": []string{"exec"}}}
	_, out, raw := s.post(t, "ws_a", req)
	if out["status"] != "interrupted" {
		t.Fatal(raw)
	}
	req["continuation"] = out["continuation"]
	req["resolutions"] = []map[string]any{{"interruption_id": "interrupt-1", "value": true}}
	if code, _, raw := s.post(t, "ws_a", req); code != 200 {
		t.Fatalf("first resume: %d %s", code, raw)
	}
	var first string
	for i := 2; i <= 3; i++ {
		code, out, raw := s.post(t, "ws_a", req)
		e, _ := out["error"].(map[string]any)
		if code != 409 || e == nil || e["code"] != "RUN_CONTINUATION_USED" {
			t.Fatalf("resume %d: %d %s", i, code, raw)
		}
		at, _ := e["details"].(map[string]any)["first_used_at"].(string)
		if _, err := time.Parse(time.RFC3339, at); err != nil || !strings.Contains(e["message"].(string), at) {
			t.Fatalf("resume %d does not name the first use: %s", i, raw)
		}
		if first != "" && at != first {
			t.Fatalf("first use moved from %s to %s", first, at)
		}
		first = at
	}
	if s.sb.execs != 1 {
		t.Fatalf("the approved command ran %d times, want once", s.sb.execs)
	}

	// Concurrent resumes of one token: exactly one runs.
	s.approveAnew(t, req)
	const n = 8
	codes := make([]int, n)
	testenv.AtOnce(n, func(i int) { codes[i], _, _ = s.post(t, "ws_a", req) })
	ok, conflict := 0, 0
	for _, c := range codes {
		switch c {
		case 200:
			ok++
		case 409:
			conflict++
		}
	}
	if ok != 1 || conflict != n-1 || s.sb.execs != 2 {
		t.Fatalf("%d resumes succeeded, %d conflicted (codes %v), commands run %d; want 1, %d, 2", ok, conflict, codes, s.sb.execs, n-1)
	}
}

// TestRequestLimitsCappedAtServer is issue 6 item 15 over HTTP: request
// limits were capped at jsrun's defaults, not at the server's runner, so a
// request lifted a 200 ms server timeout to 30 s.
func TestRequestLimitsCappedAtServer(t *testing.T) {
	// The timeout is checked on a server of its own, so that a slow machine
	// cannot turn another case into a timeout.
	quick := newServer(t, func(c *jsrun.Config) { c.Limits = jsrun.Limits{Timeout: 200 * time.Millisecond} })
	s := newServer(t, func(c *jsrun.Config) {
		c.Limits = jsrun.Limits{Timeout: 20 * time.Second, MemoryBytes: 8 << 20, StackBytes: 256 << 10,
			ResultBytes: 1000, SourceBytes: 1000, HostCalls: 3, InFlightHostCalls: 2, ConsoleBytes: 100,
			HostArgumentsBytes: 1000, HostOutputBytes: 1000}
	})
	raise := map[string]any{"timeout_ms": 30000, "memory_bytes": 64 << 20, "stack_bytes": 2 << 20, "max_source_bytes": 256 << 10,
		"max_result_bytes": 1 << 20, "max_host_calls": 256, "max_in_flight_calls": 32, "max_console_bytes": 64 << 10,
		"max_arguments_bytes": 1 << 20, "max_host_output_bytes": 4 << 20}
	sb := map[string]any{"container_id": "ctr_1"}
	s.sb.files["big.txt"] = bytes.Repeat([]byte("y"), 2000)
	cases := []struct {
		name, src, code, message string
		sandbox                  bool
	}{
		{"time", `while (true) {}`, "RUN_TIMEOUT", "200ms", false},
		{"memory", `const a = []; for (let i = 0; i < 24; i++) a.push('x'.repeat(1 << 20) + i); return a.length`, "RUN_MEMORY_LIMIT", "", false},
		{"stack", `function deep(n) { return n === 0 ? 0 : 1 + deep(n - 1) } return deep(5000)`, "RUN_STACK_OVERFLOW", "", false},
		{"result", `return 'x'.repeat(2000)`, "RUN_RESULT_TOO_LARGE", "limit of 1000", false},
		{"source", `return 1 // ` + strings.Repeat("x", 1000), "RUN_SOURCE_TOO_LARGE", "limit of 1000", false},
		{"host calls", `for (let i = 0; i < 4; i++) await sandbox.exec('echo ' + i); return 1`, "RUN_BRIDGE_LIMIT", "more than 3 host calls", true},
		{"in flight", `return await Promise.all([sandbox.exec('echo 1'), sandbox.exec('echo 2'), sandbox.exec('echo 3')])`, "RUN_BRIDGE_LIMIT", "more than 2 host calls in flight", true},
		{"arguments", `return await sandbox.writeFile('f', 'x'.repeat(2000))`, "RUN_BRIDGE_LIMIT", "the 1000 byte size limit", true},
		{"host output", `return (await sandbox.readFile('big.txt')).length`, "RUN_BRIDGE_LIMIT", "the 1000 byte size limit", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := map[string]any{"source": c.src, "limits": raise}
			if c.sandbox {
				body["sandbox"] = sb
			}
			srv := s
			if c.code == "RUN_TIMEOUT" {
				srv = quick
			}
			code, out, raw := srv.post(t, "ws_a", body)
			e, _ := out["error"].(map[string]any)
			if e == nil || e["code"] != c.code || !strings.Contains(e["message"].(string), c.message) {
				t.Fatalf("want %s naming %q: %d %s", c.code, c.message, code, raw)
			}
		})
	}
	t.Run("console", func(t *testing.T) {
		_, out, raw := s.post(t, "ws_a", map[string]any{"source": `console.log('x'.repeat(500)); return 1`, "limits": raise})
		if c, _ := out["console"].(string); out["console_truncated"] != true || len(c) > 100 {
			t.Fatalf("console not held to the server's 100 bytes: %s", raw)
		}
	})
	t.Run("lowering", func(t *testing.T) {
		_, out, raw := quick.post(t, "ws_a", map[string]any{"source": `while (true) {}`, "limits": map[string]any{"timeout_ms": 50}})
		if e, _ := out["error"].(map[string]any); e == nil || !strings.Contains(e["message"].(string), "50ms") {
			t.Fatalf("lowered timeout: %s", raw)
		}
		_, out, raw = s.post(t, "ws_a", map[string]any{"source": `return 1`, "limits": map[string]any{"timeout_ms": 1 << 62}})
		if out["value"] != 1.0 {
			t.Fatalf("a huge limit is the server's limit, not an error: %s", raw)
		}
	})
}

func TestErrors(t *testing.T) {
	s := newServer(t)
	cases := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"01 bad JSON", `{`, 400, CodeBadRequest},
		{"02 unknown field", `{"source":"1","nope":1}`, 400, CodeBadRequest},
		{"03 guest error", `{"source":"throw new TypeError('bad')"}`, 422, "RUN_USER_SOURCE_ERROR"},
		{"04 timeout", `{"source":"while(true){}","limits":{"timeout_ms":100}}`, 422, "RUN_TIMEOUT"},
		{"05 tampered continuation", `{"source":"1","continuation":"abc.def","resolutions":[{"interruption_id":"interrupt-1","value":1}]}`, 400, "RUN_PROTOCOL_ERROR"},
		{"06 reserved namespace", `{"source":"1","client_functions":{"Math":["x"]}}`, 400, "RUN_INVALID_INPUT"},
		{"07 sandbox namespace taken", `{"source":"1","client_functions":{"sandbox":["x"]},"sandbox":{"container_id":"ctr_1"}}`, 400, CodeBadRequest},
		{"08 bad tagged value", `{"source":"1","context":{"$type":"nope"}}`, 400, CodeBadRequest},
		{"09 non-serializable result", `{"source":"return () => 1"}`, 422, "RUN_SERIALIZATION_ERROR"},
		{"10 limits cannot be raised", `{"source":"return 'x'.repeat(2000000)","limits":{"max_result_bytes":100000000}}`, 422, "RUN_RESULT_TOO_LARGE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(s.URL+"/api/v1/eval", "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var out Response
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.status || out.Status != "error" || out.Error == nil || out.Error.Code != c.code {
				t.Fatalf("got %d %s", resp.StatusCode, raw)
			}
		})
	}
	resp, err := http.Get(s.URL + "/api/v1/eval")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
}

// Issue 10 item 5: a client's resolution reaches the guest with its keys in
// the order of the request, and the result keeps the guest's order.
func TestKeyOrderThroughHTTP(t *testing.T) {
	s := newServer(t)
	src := `const r = await ui.ask(); return {keys: Object.keys(r).join(), r}`
	req := map[string]any{"source": src, "client_functions": map[string][]string{"ui": {"ask"}}}
	code, out, raw := s.post(t, "ws_a", req)
	if code != 200 || out["status"] != "interrupted" {
		t.Fatalf("%d %s", code, raw)
	}
	req["continuation"] = out["continuation"]
	req["resolutions"] = []map[string]any{{"interruption_id": "interrupt-1",
		"value": json.RawMessage(`{"zeta":1,"alpha":{"y":2,"x":3},"10":4,"2":5,"$type_not":6}`)}}
	code, _, raw = s.post(t, "ws_a", req)
	want := `"value":{"keys":"2,10,zeta,alpha,$type_not","r":{"2":5,"10":4,"zeta":1,"alpha":{"y":2,"x":3},"$type_not":6}}`
	if code != 200 || !strings.Contains(raw, want) {
		t.Fatalf("%d %s\nwant %s", code, raw, want)
	}
}

// Issue 10 item 10: the console output before a failure is in the error
// response.
func TestConsoleInErrorResponse(t *testing.T) {
	s := newServer(t)
	code, out, raw := s.post(t, "ws_a", map[string]any{"source": `console.log('step 1'); console.error('bad'); throw new Error('boom')`})
	e, _ := out["error"].(map[string]any)
	if code != 422 || e == nil || e["message"] != "boom" || out["console"] != "step 1\n[stderr] bad\n" {
		t.Fatalf("%d %s", code, raw)
	}
}

// Issue 10 item 6 over HTTP: views over one buffer come back sharing it.
func TestViewsOverHTTP(t *testing.T) {
	s := newServer(t)
	code, _, raw := s.post(t, "ws_a", map[string]any{"source": `const b = new Uint8Array([1, 2, 3, 4]).buffer; return [new Uint8Array(b, 1, 2), new DataView(b), new Uint8Array([7])]`})
	want := `"value":[{"$type":"typedarray","base64":"AgM=","buffer":{"$id":1,"$type":"arraybuffer","base64":"AQIDBA=="},"byte_offset":1,"kind":"Uint8Array"},` +
		`{"$type":"typedarray","base64":"AQIDBA==","buffer":{"$type":"ref","id":1},"byte_offset":0,"kind":"DataView"},{"$type":"typedarray","base64":"Bw==","kind":"Uint8Array"}]`
	if code != 200 || !strings.Contains(raw, want) {
		t.Fatalf("%d %s\nwant %s", code, raw, want)
	}
}

func TestTypeScriptRequest(t *testing.T) {
	s := newServer(t)
	code, out, raw := s.post(t, "ws_a", map[string]any{"language": "typescript",
		"source": "interface R { n: number }\nconst r: R = { n: 2 };\nreturn r.n * 21 as number;"})
	if code != 200 || out["value"] != 42.0 {
		t.Fatalf("%d %s", code, raw)
	}
	// A TypeScript syntax error: 422 with the position in the TypeScript.
	code, out, raw = s.post(t, "ws_a", map[string]any{"language": "typescript", "source": "const a = 1;\nconst b: number = ;"})
	e, _ := out["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	if code != 422 || e["code"] != "RUN_USER_SOURCE_ERROR" || e["name"] != "SyntaxError" || d["line"] != 2.0 || d["column"] != 19.0 {
		t.Fatalf("%d %s", code, raw)
	}
	// A runtime error's stack points into the TypeScript.
	code, out, raw = s.post(t, "ws_a", map[string]any{"language": "typescript",
		"source": "type T = string;\n\nconst t: T = 'x';\nthrow new Error(t);"})
	e, _ = out["error"].(map[string]any)
	if code != 422 || !strings.Contains(fmt.Sprint(e["stack"]), "<source>:4:") {
		t.Fatalf("%d %s", code, raw)
	}
	s.refused(t, "ws_a", map[string]any{"language": "rust", "source": "1"}, 400, "RUN_INVALID_INPUT")
}

func TestGuestCode(t *testing.T) {
	s := newServer(t)
	code, out, raw := s.post(t, "ws_a", map[string]any{"source": "const e = new Error('no'); e.code = 'E_DENIED'; throw e"})
	e, _ := out["error"].(map[string]any)
	if code != 422 || e["code"] != "RUN_USER_SOURCE_ERROR" || e["guest_code"] != "E_DENIED" {
		t.Fatalf("%d %s", code, raw)
	}
}

func TestSynchronousBuiltins(t *testing.T) {
	s := newServer(t)
	code, out, raw := s.post(t, "ws_a", map[string]any{
		"source": `sandbox.writeFile('out.txt', 'hello');
const text = sandbox.readFile('out.txt');
let missing;
try { sandbox.readFile('nope.txt') } catch (e) { missing = e.code }
const [r] = await sandbox.exec('echo hi');
return {text, missing, kind: typeof text, out: r.stdout}`,
		"sandbox": map[string]any{"container_id": "ctr_1", "synchronous": []string{"readFile", "writeFile"}},
	})
	v, _ := out["value"].(map[string]any)
	if code != 200 || v["text"] != "hello" || v["missing"] != "ENOENT" || v["kind"] != "string" || v["out"] != "hi\n" {
		t.Fatalf("%d %s", code, raw)
	}
	for _, bad := range []map[string]any{
		{"container_id": "ctr_1", "functions": []string{"exec"}, "synchronous": []string{"readFile"}},
		{"container_id": "ctr_1", "require_approval": []string{"exec"}, "synchronous": []string{"exec"}},
	} {
		s.refused(t, "ws_a", map[string]any{"source": "1", "sandbox": bad}, 400, CodeBadRequest)
	}
}

func TestModulesRequest(t *testing.T) {
	s := newServer(t)
	mods := map[string]string{
		"lib/math.ts": "export const twice = (n: number): number => n * 2;",
		"util.js":     "import {twice} from './lib/math.ts'; export default function (n) { return twice(n) + 1 }",
	}
	// A module source: static imports, its value undefined, console kept.
	code, out, raw := s.post(t, "ws_a", map[string]any{"modules": mods,
		"source": "import f from './util.js'; console.log(f(20));"})
	if code != 200 || out["status"] != "completed" || out["console"] != "41\n" || !strings.Contains(raw, `"value":{"$type":"undefined"}`) {
		t.Fatalf("%d %s", code, raw)
	}
	// A function body imports dynamically and returns a value.
	code, out, raw = s.post(t, "ws_a", map[string]any{"modules": mods, "source_type": "function-body",
		"source": "const {default: f} = await import('./util.js'); return f(1)"})
	if code != 200 || out["value"] != 3.0 {
		t.Fatalf("%d %s", code, raw)
	}
	// A missing module names itself to the guest.
	code, out, raw = s.post(t, "ws_a", map[string]any{"modules": mods, "source": "import './nope.js'"})
	e, _ := out["error"].(map[string]any)
	if code != 422 || e["code"] != "RUN_USER_SOURCE_ERROR" || !strings.Contains(fmt.Sprint(e["message"]), `module "nope.js" not found`) {
		t.Fatalf("%d %s", code, raw)
	}
	// Limits: module requests.
	code, out, raw = s.post(t, "ws_a", map[string]any{"modules": mods, "source": "import './util.js'",
		"limits": map[string]any{"max_module_requests": 3}})
	e, _ = out["error"].(map[string]any)
	if code != 422 || e["code"] != "RUN_BRIDGE_LIMIT" {
		t.Fatalf("%d %s", code, raw)
	}
	// Bad requests.
	for _, body := range []map[string]any{
		{"modules": map[string]string{"../x.js": ""}, "source": "1"},
		{"limits": map[string]any{"max_module_bytes": -1}, "source": "1"},
	} {
		s.refused(t, "ws_a", body, 400, "EVAL_BAD_REQUEST")
	}
	s.refused(t, "ws_a", map[string]any{"source_type": "script", "source": "1"}, 400, "RUN_INVALID_INPUT")
}

func TestModulesResumeBoundToSources(t *testing.T) {
	s := newServer(t)
	mods := map[string]string{"ask.js": "export const ask = (q) => ui.confirm(q);"}
	req := map[string]any{"modules": mods, "client_functions": map[string][]string{"ui": {"confirm"}},
		"source": "import {ask} from './ask.js'; console.log('ok', await ask('deploy?'));"}
	code, out, raw := s.post(t, "ws_a", req)
	if code != 200 || out["status"] != "interrupted" {
		t.Fatalf("%d %s", code, raw)
	}
	resume := func(m map[string]string) (int, map[string]any, string) {
		r := map[string]any{}
		for k, v := range req {
			r[k] = v
		}
		r["modules"] = m
		r["continuation"] = out["continuation"]
		r["resolutions"] = []map[string]any{{"interruption_id": "interrupt-1", "value": true}}
		return s.post(t, "ws_a", r)
	}
	// Other code behind the same name does not resume (and the token stays
	// usable: nothing ran).
	c2, o2, raw2 := resume(map[string]string{"ask.js": "export const ask = (q) => ui.confirm(q + '!');"})
	if c2 != 400 || o2["error"].(map[string]any)["code"] != "RUN_PROTOCOL_ERROR" || !strings.Contains(raw2, "changed since the continuation was made") {
		t.Fatalf("%d %s", c2, raw2)
	}
	c3, o3, raw3 := resume(mods)
	if c3 != 200 || o3["status"] != "completed" || o3["console"] != "ok true\n" {
		t.Fatalf("%d %s", c3, raw3)
	}
}
