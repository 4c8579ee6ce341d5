package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
)

func init() {
	register("scripted-upstream", "a scripted model speaking Chat Completions, Responses, Messages and the Gemini API, for demos and tests: scripted-upstream [--addr 127.0.0.1:9999] [--script FILE]", runScripted)
}

// runScripted serves the scripted upstream model (package
// internal/gateway/scripted) until SIGINT/SIGTERM. Without --script it
// plays the demo model, which answers the CSV question and says that it
// is scripted.
func runScripted(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("scripted-upstream", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9999", "HOST:PORT to listen on")
	scriptPath := fs.String("script", "", "script file (YAML or JSON; see package internal/gateway/scripted); default: the built-in demo model")
	setUsage(fs, "usage: shellgate scripted-upstream [flags]\n\nServes POST /v1/chat/completions, /v1/responses, /v1/messages and\n/v1beta/models/MODEL:generateContent, answering from a script instead of a model.\nPoint a provider of `shellgate serve --config` at http://ADDR/v1 (gemini: http://ADDR/v1beta).")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	script := scripted.Demo()
	if *scriptPath != "" {
		var err error
		if script, err = scripted.LoadScript(*scriptPath); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: scripted.New(script), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "scripted upstream on http://%s/v1 (script: %s)\n", ln.Addr(), map[bool]string{true: "built-in demo model", false: *scriptPath}[*scriptPath == ""])
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		if errors.Is(err, context.DeadlineExceeded) {
			err = srv.Close() // hanging turns end here
		}
		<-done
		return err
	}
}
