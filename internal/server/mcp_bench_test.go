package server

import (
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellgate/shellgate/internal/mcp"
)

// BenchmarkMCPExec is one exec of `true` on a warm container through the
// MCP server (the Go SDK's client, streamable HTTP, one session: a
// tools/call answered as an SSE stream) and through POST
// /api/v1/containers/{id}/exec, the route a script would otherwise call,
// interleaved; it reports both medians, what MCP adds and the ratio.
func BenchmarkMCPExec(b *testing.B) {
	e := newEnv(b, "crun", "busybox")
	c := e.create(e.keyA, "bench")
	client := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := client.Connect(b.Context(), &sdk.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: mcp.KeyClient(e.keyA), MaxRetries: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	viaMCP := func() {
		res, err := cs.CallTool(b.Context(), &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"commands": []string{"true"}, "container": c.ID}})
		if err != nil || res.IsError {
			b.Fatalf("mcp exec: %v %v", err, res)
		}
	}
	viaHTTP := e.execTrue(b, c.ID)
	viaMCP() // warm
	viaHTTP()
	sideBySide(b, "ms", "mcp", viaMCP, "http", viaHTTP)
}
