package kube_test

import (
	"context"
	"testing"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
)

// benchBox is a cluster, its Backend and the Sandboxes on it with sandbox
// "bench" awake, after setup (a command line) ran in it.
func benchBox(b *testing.B, setup string) (*kubetest.Cluster, *kube.Backend, *kube.Sandboxes) {
	b.Helper()
	c := kubetest.NewCluster(b)
	be, s := newBackendSandboxes(b, c, nil)
	if _, err := s.Exec(context.Background(), "bench", sandbox.Command{Command: setup}); err != nil {
		b.Fatal(err)
	}
	return c, be, s
}

// BenchmarkSandboxesExec: one `sh -c "exec /bin/true"` per op in one awake pod (the
// real agent over loopback TLS), through kube.Sandboxes.Exec (what the
// server calls: the sandbox's lock, the awake check, the result's
// translation) or straight through Backend.Exec: the cost of the
// sandbox.Backend layer.
func BenchmarkSandboxesExec(b *testing.B) {
	c, be, s := benchBox(b, "true")
	ctx := context.Background()
	b.Run("Backend.Exec", func(b *testing.B) {
		for b.Loop() {
			if out, err := be.Exec(ctx, "bench", agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "exec /bin/true", Dir: c.HomeDir}, nil); err != nil || out.ExitCode != 0 {
				b.Fatal(out, err)
			}
		}
	})
	b.Run("Sandboxes.Exec", func(b *testing.B) {
		for b.Loop() {
			if res, err := s.Exec(ctx, "bench", sandbox.Command{Command: "exec /bin/true"}); err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
		}
	})
}

// BenchmarkSandboxesReadFile: reading a 1 MiB file of an awake pod's home
// through the agent's file requests (Sandboxes.ReadFile: 64 KiB Data
// frames, the size checked against the cap) against what a caller without
// them does, `cat` through Exec with a 2 MiB output cap.
func BenchmarkSandboxesReadFile(b *testing.B) {
	_, _, s := benchBox(b, "head -c 1048576 /dev/urandom > f")
	ctx := context.Background()
	b.Run("ReadFile", func(b *testing.B) {
		b.SetBytes(1 << 20)
		for b.Loop() {
			if data, err := s.ReadFile(ctx, "bench", "f", 2<<20); err != nil || len(data) != 1<<20 {
				b.Fatal(len(data), err)
			}
		}
	})
	b.Run("Exec-cat", func(b *testing.B) {
		b.SetBytes(1 << 20)
		for b.Loop() {
			if res, err := s.Exec(ctx, "bench", sandbox.Command{Command: "cat f", MaxBytes: 2 << 20}); err != nil || len(res.Stdout) != 1<<20 {
				b.Fatal(len(res.Stdout), err)
			}
		}
	})
}

// BenchmarkReplicasExec: one `exec /bin/true` per op in a pod started by
// replica A, through A (its own connection: what a single replica does),
// through B warm (B's connection, adopted before the loop) and through B
// first (each op B adopts the pod anew after dropping its connection,
// untimed: a GET of the pod, of its restored mark and of its Secret, and
// a TLS dial).
func BenchmarkReplicasExec(b *testing.B) {
	c := kubetest.NewCluster(b)
	ra := newReplica(b, c, nil, -1)
	bk, rb := c.Sandboxes(b, nil, -1)
	ctx := context.Background()
	run := func(b *testing.B, s *kube.Sandboxes) {
		if res, err := s.Exec(ctx, "bench", sandbox.Command{Command: "exec /bin/true"}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
	run(b, ra)
	b.Run("creator", func(b *testing.B) {
		for b.Loop() {
			run(b, ra)
		}
	})
	b.Run("other-warm", func(b *testing.B) {
		run(b, rb)
		for b.Loop() {
			run(b, rb)
		}
	})
	b.Run("other-first", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			bk.Close() // B's connection goes; A's keeps the agent up
			b.StartTimer()
			run(b, rb)
		}
	})
}
