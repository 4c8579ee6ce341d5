package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

type evalError struct {
	Status string `json:"status"`
	Error  struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

// TestEvalContinuationResumesOnce is issue 6 item 14 from the shell:
// resuming one continuation three times ran its approved command three
// times. Two `shellgate eval` processes race to resume the same token, then
// a third tries again: the command runs exactly once, and the others fail
// with RUN_CONTINUATION_USED naming the first use.
func TestEvalContinuationResumesOnce(t *testing.T) {
	sandboxtest.Skip(t, "runc", "busybox")
	run := cli(t)
	script := filepath.Join(t.TempDir(), "append.js")
	os.WriteFile(script, []byte(`
const ok = await ui.confirm("append a line to runs.txt?");
if (!ok) return "declined";
const [r] = await sandbox.exec(["echo approved >> runs.txt && wc -l < runs.txt"]);
return r.stdout.trim();
`), 0o644)
	base := []string{"eval", script, "--client-functions", "ui.confirm", "--sandbox", "evalonce", "--image", "busybox", "--runtime", "runc"}
	out, stderr, code := run(base...)
	var first struct {
		Status       string `json:"status"`
		Continuation string `json:"continuation"`
	}
	if err := json.Unmarshal([]byte(out), &first); err != nil || code != 3 || first.Status != "interrupted" {
		t.Fatalf("first run: exit %d %v: %s %s", code, err, out, stderr)
	}
	resume := append(base, "--continuation", first.Continuation, "--resolve", "interrupt-1=true")

	type result struct {
		out, stderr string
		code        int
	}
	var results [2]result
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, e, c := run(resume...)
			results[i] = result{o, e, c}
		}()
	}
	wg.Wait()
	won, refusedAt := 0, ""
	for _, r := range results {
		switch r.code {
		case 0:
			won++
			if strings.TrimSpace(r.out) != `{"status":"completed","value":"1"}` {
				t.Fatalf("winning resume: %s %s", r.out, r.stderr)
			}
		case 1:
			var e evalError
			if err := json.Unmarshal([]byte(r.out), &e); err != nil || e.Error.Code != "RUN_CONTINUATION_USED" {
				t.Fatalf("losing resume: %v %s %s", err, r.out, r.stderr)
			}
			refusedAt, _ = e.Error.Details["first_used_at"].(string)
		default:
			t.Fatalf("resume: exit %d %s %s", r.code, r.out, r.stderr)
		}
	}
	if won != 1 || refusedAt == "" {
		t.Fatalf("%d of 2 racing resumes won (want 1): %+v", won, results)
	}
	if _, err := time.Parse(time.RFC3339, refusedAt); err != nil {
		t.Fatalf("first_used_at %q: %v", refusedAt, err)
	}

	// A third resume, later, names the same first use.
	out, _, code = run(resume...)
	var e evalError
	if err := json.Unmarshal([]byte(out), &e); err != nil || code != 1 || e.Error.Code != "RUN_CONTINUATION_USED" ||
		e.Error.Details["first_used_at"] != refusedAt || !strings.Contains(e.Error.Message, refusedAt) {
		t.Fatalf("third resume: exit %d %s", code, out)
	}

	// The approved command ran once.
	out, stderr, code = run("exec", "--sandbox", "evalonce", "--image", "busybox", "--runtime", "runc", "--", "cat runs.txt")
	if code != 0 || out != "approved\n" {
		t.Fatalf("runs.txt after three resumes: exit %d %q %s", code, out, stderr)
	}
}

// TestEvalTypeScriptFile: `shellgate eval FILE.ts` strips the types (by the
// extension; --language for stdin), and errors point into the TypeScript.
func TestEvalTypeScriptFile(t *testing.T) {
	run := cli(t)
	dir := t.TempDir()
	ok := filepath.Join(dir, "plan.ts")
	os.WriteFile(ok, []byte("interface Plan { steps: string[] }\nconst plan: Plan = { steps: ['a', 'b'] };\nreturn plan.steps.length as number;\n"), 0o644)
	if out, stderr, code := run("eval", ok); code != 0 || strings.TrimSpace(out) != `{"status":"completed","value":2}` {
		t.Fatalf("exit %d: %s %s", code, out, stderr)
	}
	bad := filepath.Join(dir, "bad.ts")
	os.WriteFile(bad, []byte("type T = number;\n\nconst n: T = 1;\nthrow new Error('n is ' + n);\n"), 0o644)
	out, stderr, code := run("eval", bad)
	var e struct {
		Error struct {
			Code, Stack string
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &e); err != nil || code != 1 || e.Error.Code != "RUN_USER_SOURCE_ERROR" || !strings.Contains(e.Error.Stack, "(<source>:4:") {
		t.Fatalf("exit %d %v: %s %s", code, err, out, stderr)
	}
	// The same TypeScript named .js is JavaScript: a syntax error.
	js := filepath.Join(dir, "plan.js")
	os.WriteFile(js, []byte("const n: number = 1; return n"), 0o644)
	if out, _, code := run("eval", js); code != 1 || !strings.Contains(out, `"SyntaxError"`) {
		t.Fatalf("exit %d: %s", code, out)
	}
	if out, _, code := run("eval", js, "--language", "typescript"); code != 0 || strings.TrimSpace(out) != `{"status":"completed","value":1}` {
		t.Fatalf("exit %d: %s", code, out)
	}
}

// TestEvalModuleFile: `shellgate eval FILE.mjs` runs an ES module whose
// imports load from FILE's directory and never from outside it.
func TestEvalModuleFile(t *testing.T) {
	run := cli(t)
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	os.MkdirAll(filepath.Join(app, "lib"), 0o755)
	os.WriteFile(filepath.Join(dir, "secret.mjs"), []byte("export const secret = 'outside'\n"), 0o644)
	os.WriteFile(filepath.Join(app, "lib", "greet.mts"), []byte("import {name} from '../name.mjs';\nexport const greet = (g: string): string => g + ', ' + name;\n"), 0o644)
	os.WriteFile(filepath.Join(app, "name.mjs"), []byte("export const name = 'world';\n"), 0o644)
	main := filepath.Join(app, "main.mjs")
	os.WriteFile(main, []byte("import {greet} from './lib/greet.mts';\nconsole.log(greet('hello'));\n"), 0o644)
	out, stderr, code := run("eval", main)
	if code != 0 || strings.TrimSpace(out) != `{"status":"completed","value":{"$type":"undefined"},"console":"hello, world\n"}` {
		t.Fatalf("exit %d: %s %s", code, out, stderr)
	}
	escape := filepath.Join(app, "escape.mjs")
	os.WriteFile(escape, []byte("import {secret} from '../secret.mjs';\nconsole.log(secret);\n"), 0o644)
	out, _, code = run("eval", escape)
	if code != 1 || !strings.Contains(out, `leaves the module root`) || strings.Contains(out, "outside\\n") {
		t.Fatalf("exit %d: %s", code, out)
	}
	// A .js file is a function body: return works, and import() has no loader.
	js := filepath.Join(app, "body.js")
	os.WriteFile(js, []byte("try { await import('./name.mjs') } catch (e) { return e.message }"), 0o644)
	if out, _, code := run("eval", js); code != 0 || !strings.Contains(out, "could not load module") {
		t.Fatalf("exit %d: %s", code, out)
	}
	if out, _, code := run("eval", js, "--source-type", "module"); code != 1 || !strings.Contains(out, `"SyntaxError"`) {
		t.Fatalf("exit %d: %s", code, out)
	}
}
