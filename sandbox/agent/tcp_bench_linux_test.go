package agent_test

import (
	"context"
	"testing"

	"github.com/shellgate/shellgate/sandbox/agent"
)

// BenchmarkExecTransport: one `true` through the agent over its stdio pipes
// (local runtimes) and over loopback TLS + token (Kubernetes pods): the
// cost of the network mode's encryption and TCP on a warm command.
//
//	go test -run XXX -bench ExecTransport -benchtime 200x ./sandbox/agent/
func BenchmarkExecTransport(b *testing.B) {
	req := agent.ExecRequest{Shell: []string{"/bin/true"}, Dir: "/"}
	run := func(b *testing.B, c *agent.Client) {
		ctx := context.Background()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if out, err := c.Exec(ctx, req, nil); err != nil || out.ExitCode != 0 {
				b.Fatal(err, out.ExitCode)
			}
		}
	}
	b.Run("pipe", func(b *testing.B) {
		c := startAgent(b)
		run(b, c)
	})
	b.Run("tls", func(b *testing.B) {
		creds, err := agent.NewCredentials()
		if err != nil {
			b.Fatal(err)
		}
		addr, _ := startTCPAgent(b, creds)
		c, err := agent.DialTCP(context.Background(), addr, creds)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		run(b, c)
	})
}
