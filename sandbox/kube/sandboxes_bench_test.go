package kube_test

import (
	"context"
	"testing"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
)

// BenchmarkSandboxesExec: one `sh -c "exec /bin/true"` per op in one awake pod (the
// real agent over loopback TLS), through kube.Sandboxes.Exec (what the
// server calls: the sandbox's lock, the awake check, the result's
// translation) or straight through Backend.Exec: the cost of the
// sandbox.Backend layer.
func BenchmarkSandboxesExec(b *testing.B) {
	c := kubetest.NewCluster(b)
	be, err := kube.New(c.CS, c.Config())
	if err != nil {
		b.Fatal(err)
	}
	s := kube.NewSandboxes(be, kube.SandboxesConfig{Shell: []string{"/bin/sh", "-c"}})
	b.Cleanup(func() { s.Close(context.Background()) })
	ctx := context.Background()
	if _, err := s.Exec(ctx, "bench", sandbox.Command{Command: "true"}); err != nil {
		b.Fatal(err)
	}
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
