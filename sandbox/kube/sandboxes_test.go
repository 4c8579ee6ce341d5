package kube_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
)

func newSandboxes(t *testing.T, c *kubetest.Cluster, arch kube.Archiver) *kube.Sandboxes {
	t.Helper()
	cfg := c.Config()
	cfg.Archiver = arch
	b, err := kube.New(c.CS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := kube.NewSandboxes(b, kube.SandboxesConfig{Shell: []string{"/bin/sh", "-c"}})
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// TestSandboxesRefuse: what the kube backend cannot do is an error naming
// it, never a silent no-op: 1. bad and unknown names; 2. without an
// Archiver, Sleep is refused and the pod (with its home) is kept; 3. every
// file operation matches sandbox.ErrNotSupported and names itself; 4. after
// Close, calls are ErrClosed and Close keeps pods it could not archive.
func TestSandboxesRefuse(t *testing.T) {
	c := kubetest.NewCluster(t)
	s := newSandboxes(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := s.Status("no/such"); !errors.Is(err, sandbox.ErrBadName) {
		t.Fatalf("1: %v", err)
	}
	if _, err := s.Status("nobody"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("1: %v", err)
	}
	if err := s.Sleep(ctx, "nobody"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("1: %v", err)
	}
	if _, err := s.Exec(ctx, "../x", sandbox.Command{Command: "true"}); !errors.Is(err, sandbox.ErrBadName) {
		t.Fatalf("1: %v", err)
	}

	res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo kept > f && cat f"})
	if err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("2: %+v %v", res, err)
	}
	if err := s.Sleep(ctx, "c1"); !errors.Is(err, sandbox.ErrNotSupported) || !strings.Contains(err.Error(), "home archive") {
		t.Fatalf("2: sleep without an archiver: %v", err)
	}
	if st, _ := s.Status("c1"); st != sandbox.Running {
		t.Fatalf("2: status %v", st)
	}
	if l, err := s.List(); err != nil || len(l) != 1 || l[0].Name != "c1" || l[0].Status != sandbox.Running || time.Since(l[0].LastUsed) > time.Minute {
		t.Fatalf("2: list %+v %v", l, err)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "cat f"}); err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("2: the home after a refused sleep: %+v %v", res, err)
	}

	for op, err := range map[string]error{
		"listing files": func() error { _, err := s.ListFiles(ctx, "c1", sandbox.ListOptions{}); return err }(),
		"stat of f":     func() error { _, err := s.StatFile(ctx, "c1", "f"); return err }(),
		"reading f":     func() error { _, err := s.ReadFile(ctx, "c1", "f", 10); return err }(),
		"writing f":     s.WriteFile(ctx, "c1", "f", strings.NewReader("x")),
		"uploading f":   func() error { _, err := s.PutFile(ctx, "c1", "f", strings.NewReader("x")); return err }(),
		"removing f":    s.RemoveFile(ctx, "c1", "f"),
	} {
		if !errors.Is(err, sandbox.ErrNotSupported) || !strings.Contains(err.Error(), op) || !strings.Contains(err.Error(), "kubernetes") {
			t.Errorf("3: %s: %v", op, err)
		}
	}

	if err := s.Close(ctx); err != nil {
		t.Fatalf("4: %v", err)
	}
	if _, err := s.Exec(ctx, "c1", sandbox.Command{Command: "true"}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("4: %v", err)
	}
	if p, _, _, _ := c.Objects(ctx); p != 1 {
		t.Fatalf("4: %d pods after Close without an archiver, want the pod kept", p)
	}
}

// TestSandboxesLostPod: 1. a pod whose agent dies under a command gives a
// Restarted result saying so, and its objects are gone (archived first
// when possible: here the agent is gone, so deleted); 2. the next command
// runs in a new pod; 3. Destroy deletes it and forgets the name.
func TestSandboxesLostPod(t *testing.T) {
	c := kubetest.NewCluster(t)
	s := newSandboxes(t, c, kubetest.NewTarArchiver())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Create(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		<-started
		c.KillAgents()
	}()
	res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo go; sleep 30", OnOutput: func(byte, []byte) {
		select {
		case <-started:
		default:
			close(started)
		}
	}})
	if err != nil || !res.Restarted || !strings.Contains(string(res.Stderr), "stopped answering") {
		t.Fatalf("1: %+v %v", res, err)
	}
	if p, sec, n, _ := c.Objects(ctx); p+sec+n != 0 {
		t.Fatalf("1: left %d pods, %d secrets, %d policies", p, sec, n)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo again"}); err != nil || string(res.Stdout) != "again\n" {
		t.Fatalf("2: %+v %v", res, err)
	}
	if err := s.Destroy(ctx, "c1"); err != nil {
		t.Fatalf("3: %v", err)
	}
	if _, err := s.Status("c1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("3: %v", err)
	}
	if p, sec, n, _ := c.Objects(ctx); p+sec+n != 0 {
		t.Fatalf("3: left %d pods, %d secrets, %d policies", p, sec, n)
	}
}

// TestSandboxesDestroyCutsShort: Destroy during a long command ends it
// with sandbox.ErrDestroyed at once (not after the command), deletes the
// objects, and the name then starts a new sandbox.
func TestSandboxesDestroyCutsShort(t *testing.T) {
	c := kubetest.NewCluster(t)
	s := newSandboxes(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo go; sleep 50", OnOutput: func(byte, []byte) {
			select {
			case <-started:
			default:
				close(started)
			}
		}})
		done <- err
	}()
	<-started
	if err := s.Destroy(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, sandbox.ErrDestroyed) {
		t.Fatalf("the command's Exec: %v, want ErrDestroyed", err)
	}
	if p, sec, n, _ := c.Objects(ctx); p+sec+n != 0 {
		t.Fatalf("left %d pods, %d secrets, %d policies", p, sec, n)
	}
	if err := s.Destroy(ctx, "c1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("second destroy: %v", err)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "ls | wc -l"}); err != nil || string(res.Stdout) != "0\n" {
		t.Fatalf("a new sandbox: %+v %v", res, err)
	}
}

// TestSandboxesIdleSleep: with an Archiver, a sandbox unused for
// IdleTimeout is put to sleep (archived, objects deleted), and its next
// command wakes it with the files.
func TestSandboxesIdleSleep(t *testing.T) {
	c := kubetest.NewCluster(t)
	cfg := c.Config()
	arch := kubetest.NewTarArchiver()
	cfg.Archiver = arch
	b, err := kube.New(c.CS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := kube.NewSandboxes(b, kube.SandboxesConfig{Shell: []string{"/bin/sh", "-c"}, IdleTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo kept > f"}); err != nil {
		t.Fatal(err)
	}
	for st, _ := s.Status("c1"); st != sandbox.Sleeping; st, _ = s.Status("c1") {
		if ctx.Err() != nil {
			t.Fatal("never slept")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p, sec, n, _ := c.Objects(ctx); p+sec+n != 0 {
		t.Fatalf("left %d pods, %d secrets, %d policies", p, sec, n)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "cat f"}); err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("after the idle sleep: %+v %v", res, err)
	}
}
