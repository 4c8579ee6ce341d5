package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellgate/shellgate/internal/mcp"
)

func init() {
	register("mcp", "serve a server's MCP tools over stdio, for clients that launch local processes", runMCP)
}

func runMCP(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: shellgate mcp --url URL

Serves, over stdin and stdout, the MCP server of the Shellgate server at
URL (its base URL, or the /mcp endpoint itself): tools exec, python, eval,
files and containers, and the containers' files as resources, in the
workspace of the key in $SHELLGATE_API_KEY. For MCP clients that only
launch local processes (docs/mcp.md); clients that speak streamable HTTP
can use URL/mcp directly.`)
		fs.PrintDefaults()
	}
	url := fs.String("url", os.Getenv("SHELLGATE_URL"), "the server's base URL (default $SHELLGATE_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key := os.Getenv("SHELLGATE_API_KEY")
	switch {
	case *url == "":
		return errors.New("mcp: --url (or $SHELLGATE_URL) is required")
	case key == "":
		return errors.New("mcp: $SHELLGATE_API_KEY is not set (make a key with `shellgate keys create`)")
	case fs.NArg() > 0:
		return fmt.Errorf("mcp: unexpected arguments %q", fs.Args())
	}
	endpoint := strings.TrimRight(*url, "/")
	if !strings.HasSuffix(endpoint, "/mcp") {
		endpoint += "/mcp"
	}
	return mcp.Bridge(ctx, endpoint, mcp.KeyClient(key), &sdk.StdioTransport{}, "1")
}
