package agent_test

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
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
		c := startPipeAgent(b)
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

func startPipeAgent(b *testing.B) *agent.Client {
	b.Helper()
	bin, err := agentbin.Build()
	if err != nil {
		b.Fatal(err)
	}
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	cmd := exec.Command(bin)
	cmd.Stdin, cmd.Stdout = inR, outW
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	inR.Close()
	outW.Close()
	c, err := agent.Dial(context.Background(), outR, inW)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		cmd.Wait()
	})
	return c
}
