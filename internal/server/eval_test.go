package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/jsrun/jsrunhttp"
)

// evalReq sends one POST /api/v1/eval with key and decodes the answer.
func (e *env) evalReq(key string, req map[string]any) (int, jsrunhttp.Response, string) {
	e.t.Helper()
	st, b := e.do("POST", "/api/v1/eval", key, req)
	var out jsrunhttp.Response
	if err := json.Unmarshal(b, &out); err != nil {
		e.t.Fatalf("%d: not JSON: %s", st, b)
	}
	return st, out, string(b)
}

// completed sends a request that must complete and returns its value.
func (e *env) completed(key string, req map[string]any) string {
	e.t.Helper()
	st, out, raw := e.evalReq(key, req)
	if st != http.StatusOK || out.Status != "completed" {
		e.t.Fatalf("want a completed run: %d %s", st, raw)
	}
	return string(out.Value)
}

// evalError checks an error answer with status and code.
func evalError(t *testing.T, st int, out jsrunhttp.Response, raw string, status int, code string) {
	t.Helper()
	if st != status || out.Status != "error" || out.Error == nil || out.Error.Code != code {
		t.Fatalf("want %d %s: %d %s", status, code, st, raw)
	}
}

func (e *env) ledger(workspace, id string) store.UsageTotal {
	e.t.Helper()
	if err := e.srv.WaitCalls(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
	for _, s := range ledgerOf(e.t, e.st, workspace) {
		if s.ContainerID == id {
			return s
		}
	}
	return store.UsageTotal{ContainerID: id}
}

func TestEval(t *testing.T) {
	e := newEnv(t, "crun", "busybox")

	t.Run("01 interrupt and resume with a key; a continuation resumes once, in its own workspace", func(t *testing.T) {
		req := map[string]any{"source": `const n = await ui.ask('n?'); return n * 2`, "client_functions": map[string][]string{"ui": {"ask"}}}
		st, out, raw := e.evalReq(e.keyA, req)
		if st != http.StatusOK || out.Status != "interrupted" || len(out.Interruptions) != 1 || out.Continuation == "" ||
			out.Interruptions[0].HostFunctionName != "ui.ask" || string(out.Interruptions[0].Arguments[0]) != `"n?"` {
			t.Fatalf("want one interruption: %d %s", st, raw)
		}
		req["continuation"] = out.Continuation
		req["resolutions"] = []map[string]any{{"interruption_id": out.Interruptions[0].ID, "value": 21}}
		// Workspace b (same account) cannot resume a's token, and trying
		// does not use it up.
		st, out, raw = e.evalReq(e.keyB, req)
		evalError(t, st, out, raw, http.StatusBadRequest, "RUN_PROTOCOL_ERROR")
		st, out, raw = e.evalReq(e.newKey("other", "a"), req)
		evalError(t, st, out, raw, http.StatusBadRequest, "RUN_PROTOCOL_ERROR")
		if v := e.completed(e.keyA, req); v != "42" {
			t.Fatalf("resumed to %s", v)
		}
		st, out, raw = e.evalReq(e.keyA, req)
		evalError(t, st, out, raw, http.StatusConflict, "RUN_CONTINUATION_USED")
		if _, ok := out.Error.Details["first_used_at"]; !ok {
			t.Fatalf("no first use: %s", raw)
		}
		// Another key of the same workspace is the same caller: the token
		// is used up for it too.
		st, out, raw = e.evalReq(e.newKey("acme", "a"), req)
		evalError(t, st, out, raw, http.StatusConflict, "RUN_CONTINUATION_USED")
	})

	t.Run("02 the route takes a key", func(t *testing.T) {
		st, b := e.do("POST", "/api/v1/eval", "", map[string]any{"source": "return 1"})
		if st != http.StatusUnauthorized {
			t.Fatalf("no key: %d %s", st, b)
		}
		envelope(t, st, b)
		st, b = e.do("POST", "/api/v1/eval", "sg_bogus", map[string]any{"source": "return 1"})
		if st != http.StatusUnauthorized {
			t.Fatalf("bad key: %d %s", st, b)
		}
	})

	box := e.create(e.keyA, "box")
	before := e.exec(e.keyA, "box", "echo from-exec > note")

	t.Run("03 built-ins act on the caller's container and sandbox.exec is metered", func(t *testing.T) {
		src := `const [r] = await sandbox.exec('cat note; echo x > made-by-eval');
			const t = await sandbox.readFile('note');
			await sandbox.writeFile('w.txt', 'hi');
			return {out: r.stdout, code: r.exit_code, t}`
		for i, ref := range []string{"box", box.ID} {
			v := e.completed(e.keyA, map[string]any{"source": src, "sandbox": map[string]any{"container_id": ref}})
			if v != `{"out":"from-exec\n","code":0,"t":"from-exec\n"}` { // the guest's key order
				t.Fatalf("run %d by %s: %s", i+1, ref, v)
			}
		}
		if r := e.exec(e.keyA, "box", "cat made-by-eval w.txt"); r.Output[0].Stdout != "x\nhi" {
			t.Fatalf("the exec route sees %q", r.Output[0].Stdout)
		}
		// The ledger has the first exec call, two evals (one sandbox.exec
		// each, on a warm container: metered time only) and the last exec.
		sum := e.ledger("a", box.ID)
		if sum.Events != 4 {
			t.Fatalf("ledger %+v: want 4 charges", sum)
		}
		// A container's first use through eval pays the new-container
		// minimum like an exec call.
		fresh := e.create(e.keyA, "fresh")
		e.completed(e.keyA, map[string]any{"source": `return (await sandbox.exec('true'))[0].exit_code`, "sandbox": map[string]any{"container_id": "fresh"}})
		f := e.ledger("a", fresh.ID)
		if f.Events != 1 || f.BilledMillis < 30_000 || f.MeteredMillis <= 0 || f.CostMicroUSD != (f.BilledMillis+9)/10 {
			t.Fatalf("a new container's eval charge: %+v", f)
		}
		// GET /api/v1/usage shows the eval charges with the exec ones.
		u := e.getUsage(e.keyA, "")
		for _, c := range u.ByContainer {
			if (c.ContainerID == box.ID && c.Events != 4) || (c.ContainerID == fresh.ID && c.CostMicroUSD != f.CostMicroUSD) {
				t.Fatalf("usage route: %+v", u.ByContainer)
			}
		}
		if before.Usage.ContainerStart != "new" {
			t.Fatalf("first exec: %+v", before.Usage)
		}
	})

	t.Run("04 built-ins cannot reach another workspace's container", func(t *testing.T) {
		missing := "cntr_0123456789abcdef0123456789abcdef"
		src := `return await sandbox.readFile('note')`
		for _, ref := range []string{box.ID, "box", missing} {
			st, out, raw := e.evalReq(e.keyB, map[string]any{"source": src, "sandbox": map[string]any{"container_id": ref}})
			evalError(t, st, out, raw, http.StatusNotFound, jsrunhttp.CodeSandboxNotFound)
			if strings.Contains(raw, "from-exec") {
				t.Fatalf("leak: %s", raw)
			}
		}
		// b's own container of the same name is another sandbox.
		e.create(e.keyB, "box")
		v := e.completed(e.keyB, map[string]any{"source": `try { return await sandbox.readFile('note') } catch (e) { return e.code }`,
			"sandbox": map[string]any{"container_id": "box"}})
		if v != `"ENOENT"` {
			t.Fatalf("b's box: %s", v)
		}
	})

	t.Run("05 a container deleted before a resume is not found", func(t *testing.T) {
		e.create(e.keyA, "gone")
		req := map[string]any{"source": `await ui.go(); return (await sandbox.exec('echo hi'))[0].stdout`,
			"client_functions": map[string][]string{"ui": {"go"}}, "sandbox": map[string]any{"container_id": "gone"}}
		st, out, raw := e.evalReq(e.keyA, req)
		if st != http.StatusOK || out.Status != "interrupted" {
			t.Fatalf("%d %s", st, raw)
		}
		if st, b := e.do("DELETE", "/api/v1/containers/gone", e.keyA, nil); st != http.StatusOK {
			t.Fatalf("delete: %d %s", st, b)
		}
		req["continuation"] = out.Continuation
		req["resolutions"] = []map[string]any{{"interruption_id": out.Interruptions[0].ID, "value": true}}
		st, out, raw = e.evalReq(e.keyA, req)
		evalError(t, st, out, raw, http.StatusNotFound, jsrunhttp.CodeSandboxNotFound)
	})
}
