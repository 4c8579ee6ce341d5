package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellgate/shellgate/testenv"
)

// TestServeProviders runs the binary as the README's Providers section
// does: `shellgate scripted-upstream` (the built-in demo model), a
// provider config naming it, `shellgate serve --config`, then the Chat
// Completions pass-through and the model list over HTTP; and a second
// scripted upstream playing a provider that runs its hosted shell itself,
// declared with native_tools (engine auto).
func TestServeProviders(t *testing.T) {
	bin, data, env := serveBinary(t)
	dir := t.TempDir()
	upAddr, upLogs := scriptedUpstream(t, bin)
	script := filepath.Join(dir, "hosted.yaml")
	os.WriteFile(script, []byte(`turns: [{hosted: [{code: "echo native", stdout: "native\n"}], text: "It printed native."}]`+"\n"), 0o600)
	nativeAddr, _ := scriptedUpstream(t, bin, "--script", script)

	cfg := filepath.Join(dir, "providers.yaml")
	os.WriteFile(cfg, []byte("providers:\n  demo: {api: chat_completions, base_url: http://"+upAddr+"/v1, models: [csv-analyst]}\n"+
		"  hosted: {api: responses, base_url: http://"+nativeAddr+"/v1, native_tools: [shell]}\n"), 0o600)
	base, _, _, logs := startServe(t, bin, data, env, "--config", cfg)
	key := keyFor(t, bin, data)
	call := apiCaller(t, base, key)

	st, v := call("GET", "/v1/models", "")
	if st != 200 || !strings.Contains(toJSON(v), `"id":"demo/csv-analyst"`) {
		t.Fatalf("models: %d %v\n%s", st, v, logs)
	}
	st, v = call("POST", "/v1/chat/completions", `{"model":"demo/csv-analyst","messages":[{"role":"user","content":"What is the total revenue of the north region?"}],
		"tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object"}}}]}`)
	if st != 200 || !strings.Contains(toJSON(v), `"name":"shell"`) || !strings.Contains(toJSON(v), "pandas") {
		t.Fatalf("chat: %d %v\nupstream: %s", st, v, upLogs.String())
	}
	st, v = call("POST", "/v1/chat/completions", `{"model":"demo/csv-analyst","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"shell"}]}`)
	if st != 400 || !strings.Contains(toJSON(v), "Responses API") {
		t.Errorf("shell tool: %d %v", st, v)
	}
	// The provider ran the shell: its shell_call and output come back.
	st, v = call("POST", "/v1/responses", `{"model":"hosted/m","input":"Say it.","tools":[{"type":"shell","environment":{"type":"container_auto"}}]}`)
	if out := toJSON(v["output"]); st != 200 || !strings.Contains(out, `"type":"shell_call"`) || !strings.Contains(out, `"stdout":"native\n"`) ||
		!strings.Contains(out, "It printed native.") {
		t.Errorf("native shell: %d %v", st, v)
	}

	// A config mistake stops serve with the field named.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("providers:\n  x: {api: chat, base_url: http://127.0.0.1:1/v1}\n"), 0o600)
	out, err := exec.Command(bin, "serve", "--data-dir", data, "--config", bad, "--addr", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "providers.x.api") {
		t.Errorf("bad config: %v %s", err, out)
	}
}

// scriptedUpstream starts `shellgate scripted-upstream` with args, stopped
// when t ends, and returns its address and its log.
func scriptedUpstream(t *testing.T, bin string, args ...string) (string, *testenv.Buffer) {
	t.Helper()
	// The model listens on a port of its own choosing and prints it, so
	// no other process can take it between choosing and binding.
	up := exec.Command(bin, append([]string{"scripted-upstream", "--addr", "127.0.0.1:0"}, args...)...)
	stderr, err := up.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stderr)
	first, err := r.ReadString('\n')
	m := regexp.MustCompile(`on http://(127\.0\.0\.1:\d+)/v1`).FindStringSubmatch(first)
	if m == nil {
		up.Process.Kill()
		t.Fatalf("scripted-upstream's first line: %q (%v)", first, err)
	}
	var upLogs testenv.Buffer
	go io.Copy(&upLogs, r)
	upDone := make(chan error, 1)
	go func() { upDone <- up.Wait() }()
	t.Cleanup(func() {
		up.Process.Signal(syscall.SIGTERM)
		select {
		case <-upDone:
		case <-time.After(30 * time.Second):
			up.Process.Kill()
			t.Error("scripted-upstream did not stop on SIGTERM")
		}
	})
	return m[1], &upLogs
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
