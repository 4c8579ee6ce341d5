package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestNodeMCP runs the official MCP TypeScript SDK, unchanged, against the
// real binary on the default image (mcp.mjs): streamable HTTP at /mcp with
// two workspaces' keys (tools and their output schemas, progress, cancel,
// python, eval's interrupt and resume, files, containers, resources and
// list_changed, isolation), then the same
// tools through `shellgate mcp --url` over stdio.
func TestNodeMCP(t *testing.T) {
	node, dir := nodeClients(t, "@modelcontextprotocol/sdk")
	bin, data, env := serveBinary(t)
	sandboxtest.Skip(t, "crun", "default")
	base, _, _, logs := startServe(t, bin, data, env, "--image", "default")
	out, err := exec.Command(bin, "keys", "create", "--account", "acme", "--workspace", "other", "--data-dir", data).Output()
	if err != nil {
		t.Fatal(err)
	}
	keyB := lastLine(strings.TrimSpace(string(out)))
	runNode(t, node, dir, "mcp.mjs", base, keyFor(t, bin, data), logs, 9, "SHELLGATE_KEY_B="+keyB, "SHELLGATE_BIN="+bin)
}

// TestMCPLocal runs `shellgate mcp --local` as an MCP client launches it
// (the Go SDK's CommandTransport): the server in the same process, on its
// own data directory, its tools over stdio.
func TestMCPLocal(t *testing.T) {
	bin, data, env := serveBinary(t)
	cmd := exec.Command(bin, "mcp", "--local", "--", "--data-dir", data, "--runtime", "crun", "--image", "busybox", "--pool", "0")
	cmd.Env = append(env, "SHELLGATE_API_KEY="+keyFor(t, bin, data))
	var logs bytes.Buffer
	cmd.Stderr = &logs
	client := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, &logs)
	}
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"commands": []string{"echo local; cat /etc/os-release | head -1"}}})
	if err != nil || res.IsError {
		t.Fatalf("exec: %v %+v\n%s", err, res, &logs)
	}
	out, _ := json.Marshal(res.StructuredContent)
	if !bytes.Contains(out, []byte(`"stdout":"local\n`)) || !bytes.Contains(out, []byte(`"container_id":"cntr_`)) {
		t.Fatalf("exec: %s", out)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("close: %v\n%s", err, &logs)
	}
	if !strings.Contains(logs.String(), "serving") {
		t.Fatalf("the server's log is not on stderr:\n%s", &logs)
	}
}
