package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestStatusAcrossManagers: another Shellgate (here a second Manager on the
// same data directory, which holds the home's owner lock exactly as another
// process would) keeps a container awake. The API shows it running, an
// exec call answers 409 instead of waiting for the other process, and once
// the other one lets go the container sleeps with every file.
func TestStatusAcrossManagers(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	c := e.create(e.keyA, "shared")
	e.exec(e.keyA, "shared", "echo one > f")
	if err := e.mgr.Sleep(t.Context(), c.ID); err != nil {
		t.Fatal(err)
	}
	agent, err := agentbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	other, err := sandbox.Open(t.Context(), sandbox.Config{
		DataDir: e.data, Runtime: "crun", Image: "busybox", Images: sandboxtest.ImagesDir(), Agent: agent,
		Limits: sandboxtest.Limits, HomeBytes: sandboxtest.HomeBytes, LayerBytes: 64 << 20, IdleTimeout: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(t.Context())
	if res, err := other.Exec(t.Context(), c.ID, sandbox.Command{Command: "echo two >> f", TimeoutMs: 10_000, MaxBytes: 1024}); err != nil || res.ExitCode != 0 {
		t.Fatalf("other manager: %+v %v", res, err)
	}

	var got containerObject
	st, b := e.do("GET", "/api/v1/containers/shared", e.keyA, nil)
	e.must(st, b, &got)
	if got.Status != "running" {
		t.Fatalf("awake in another manager: %+v", got)
	}
	st, b = e.do("POST", "/api/v1/containers/shared/exec", e.keyA, map[string]any{"commands": []string{"cat f"}})
	if st != http.StatusConflict || !strings.Contains(envelope(t, st, b), "another Shellgate process") {
		t.Fatalf("exec while another process holds it: %d %s", st, b)
	}

	if err := other.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	st, b = e.do("GET", "/api/v1/containers/shared", e.keyA, nil)
	e.must(st, b, &got)
	if got.Status != "sleeping" {
		t.Fatalf("after the other manager closed: %+v", got)
	}
	if r := e.exec(e.keyA, "shared", "cat f"); r.Output[0].Stdout != "one\ntwo\n" || r.Usage.ContainerStart != "woken" {
		t.Fatalf("%+v", r)
	}
}
