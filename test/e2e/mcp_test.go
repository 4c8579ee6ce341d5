package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestNodeMCP runs the official MCP TypeScript SDK, unchanged, against the
// real binary on the default image (mcp.mjs): streamable HTTP at /mcp with
// two workspaces' keys (tools and their output schemas, progress, cancel,
// python, files, resources and list_changed, isolation), then the same
// tools through `shellgate mcp --url` over stdio.
func TestNodeMCP(t *testing.T) {
	node, dir := nodeClients(t)
	bin, data, env := serveBinary(t)
	sandboxtest.Skip(t, "crun", "default")
	base, _, _, logs := startServe(t, bin, data, env, "--image", "default")
	out, err := exec.Command(bin, "keys", "create", "--account", "acme", "--workspace", "other", "--data-dir", data).Output()
	if err != nil {
		t.Fatal(err)
	}
	keyB := lastLine(strings.TrimSpace(string(out)))
	runNode(t, node, dir, "mcp.mjs", base, keyFor(t, bin, data), logs, 8, "SHELLGATE_KEY_B="+keyB, "SHELLGATE_BIN="+bin)
}
