package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellgate/shellgate/internal/mcp"
)

func init() {
	register("mcp", "serve a server's MCP tools over stdio, for clients that launch local processes", runMCP)
}

func runMCP(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	setUsage(fs, `usage: shellgate mcp --url URL
       shellgate mcp --local [-- SERVE FLAGS]

Serves, over stdin and stdout, the MCP server of the Shellgate server at
URL (its base URL, or the /mcp endpoint itself): tools exec, python, eval,
files and containers, and the containers' files as resources, in the
workspace of the key in $SHELLGATE_API_KEY. For MCP clients that only
launch local processes (docs/mcp.md); clients that speak streamable HTTP
can use URL/mcp directly.

With --local, the server is this process: shellgate serve with the flags
after -- (--data-dir, --runtime, --image, ...) on a loopback port of its
own, its log on stderr; the key must be one of its data directory
(shellgate keys create).`)
	url := fs.String("url", os.Getenv("SHELLGATE_URL"), "the server's base URL (default $SHELLGATE_URL)")
	local := fs.Bool("local", false, "run the server in this process, on this machine's own sandboxes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key := os.Getenv("SHELLGATE_API_KEY")
	urlSet := false
	fs.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "url" })
	switch {
	case *local && urlSet:
		return errors.New("mcp: --local and --url: give one (the server here, or the one at URL)")
	case !*local && *url == "":
		return errors.New("mcp: --url (or $SHELLGATE_URL) is required, or --local")
	case key == "":
		return errors.New("mcp: $SHELLGATE_API_KEY is not set (make a key with `shellgate keys create`)")
	case !*local && fs.NArg() > 0:
		return fmt.Errorf("mcp: unexpected arguments %q", fs.Args())
	}
	if *local {
		return mcpLocal(ctx, key, fs.Args())
	}
	return bridge(ctx, *url, key)
}

func bridge(ctx context.Context, url, key string) error {
	endpoint := strings.TrimRight(url, "/")
	if !strings.HasSuffix(endpoint, "/mcp") {
		endpoint += "/mcp"
	}
	return mcp.Bridge(ctx, endpoint, mcp.KeyClient(key), &sdk.StdioTransport{}, "1")
}

// mcpLocal runs serve with serveArgs on a free loopback port and bridges
// stdio to it; when the client goes away the server shuts down as serve
// does (its sandboxes sleep).
func mcpLocal(ctx context.Context, key string, serveArgs []string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close() // serve binds it again: the port is free for the moment between
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- runServe(ctx, append([]string{"--addr", addr}, serveArgs...)) }()
	base := "http://" + addr
	for ready := false; !ready; {
		select {
		case err := <-served:
			return fmt.Errorf("mcp --local: the server ended before it served: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
	}
	err = bridge(ctx, base, key)
	stop()
	return errors.Join(err, <-served)
}
