package agent_test

import (
	"github.com/shellgate/shellgate/testenv"

	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
)

// startAgent runs the real agent binary as PID 1 of a new PID namespace on
// the host (no container runtime), which is enough to test the protocol,
// capping and process-tree kills. args are the agent's flags.
func startAgent(t testing.TB, args ...string) *agent.Client {
	t.Helper()
	testenv.NeedRoot(t, "a PID namespace")
	bin, err := agentbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	return startAgentCmd(t, cmd)
}

// startAgentCmd starts cmd, which runs the agent as PID 1, and dials it.
func startAgentCmd(t testing.TB, cmd *exec.Cmd) *agent.Client {
	t.Helper()
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, outR, inW)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cmd.Wait()
	})
	return c
}

func run(t *testing.T, c *agent.Client, cmd string, timeoutMs int64, maxBytes int) agent.Output {
	t.Helper()
	out, err := c.Exec(context.Background(), agent.ExecRequest{Shell: []string{"/bin/bash", "-c"}, Command: cmd, Dir: "/", TimeoutMs: timeoutMs, MaxBytes: maxBytes}, nil)
	if err != nil {
		t.Fatalf("%q: %v", cmd, err)
	}
	return out
}

func TestAgentProtocol(t *testing.T) {
	c := startAgent(t)
	t.Run("01 exit code and streams apart", func(t *testing.T) {
		out := run(t, c, "echo out; echo err >&2; exit 3", 0, 1024)
		if string(out.Stdout) != "out\n" || string(out.Stderr) != "err\n" || out.ExitCode != 3 {
			t.Fatalf("got %+v stdout=%q stderr=%q", out.ExecResult, out.Stdout, out.Stderr)
		}
	})
	t.Run("02 cap keeps the head and counts the rest", func(t *testing.T) {
		out := run(t, c, "head -c 1000000 /dev/zero | tr '\\0' a", 0, 100)
		if len(out.Stdout) != 100 || out.StdoutBytes != 1000000 {
			t.Fatalf("kept %d of %d", len(out.Stdout), out.StdoutBytes)
		}
	})
	t.Run("03 timeout kills detached descendants", func(t *testing.T) {
		out := run(t, c, "setsid nohup sleep 1000 >/dev/null 2>&1 & (trap '' TERM; sleep 1000) & echo started; sleep 1000", 300, 1024)
		if !out.TimedOut || string(out.Stdout) != "started\n" {
			t.Fatalf("got %+v %q", out.ExecResult, out.Stdout)
		}
		// The agent shares the host's /proc here, so look from the host.
		left, _ := exec.Command("pgrep", "-f", "^sleep 1000$").Output()
		if s := strings.TrimSpace(string(left)); s != "" {
			t.Fatalf("processes left: %s", s)
		}
	})
	t.Run("04 signal exit", func(t *testing.T) {
		out := run(t, c, "kill -9 $$", 0, 100)
		if out.Signal != 9 || out.ExitCode != 137 {
			t.Fatalf("got %+v", out.ExecResult)
		}
	})
	t.Run("05 missing shell", func(t *testing.T) {
		out, err := c.Exec(context.Background(), agent.ExecRequest{Shell: []string{"/nonexistent"}, Command: "true", Dir: "/"}, nil)
		if err != nil || out.Error == "" || out.ExitCode != 127 {
			t.Fatalf("got %+v, %v", out, err)
		}
	})
	t.Run("06 streaming callback sees the output", func(t *testing.T) {
		var seen bytes.Buffer
		_, err := c.Exec(context.Background(), agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "echo a; echo b", Dir: "/", MaxBytes: 10}, func(s byte, d []byte) { seen.Write(d) })
		if err != nil || seen.String() != "a\nb\n" {
			t.Fatalf("seen %q, %v", seen.String(), err)
		}
	})
	t.Run("07 context cancel kills the command", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := c.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "sleep 1000", Dir: "/"}, nil)
		if err == nil {
			t.Fatal("want context error")
		}
		out := run(t, c, "echo next", 0, 100)
		if string(out.Stdout) != "next\n" {
			t.Fatalf("next command: %q", out.Stdout)
		}
	})
}

// TestAgentTimesOutQueuedCommand: the host times a command from when it
// sends it, so a command can be out of time while it still waits behind
// another: it is reported timed out and never starts.
func TestAgentTimesOutQueuedCommand(t *testing.T) {
	c := startAgent(t)
	first := make(chan agent.Output, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		out, err := c.Exec(context.Background(), agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "echo x; sleep 1000", Dir: "/", TimeoutMs: 1500},
			func(byte, []byte) { once.Do(func() { close(started) }) })
		if err != nil {
			t.Error(err)
		}
		first <- out
	}()
	// Sent while the first runs; its 100 ms are up long before that ends.
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first command did not start")
	}
	second := run(t, c, "echo ran", 100, 100)
	if !second.TimedOut || len(second.Stdout) != 0 {
		t.Errorf("queued command: %+v %q, want timed out without running", second.ExecResult, second.Stdout)
	}
	if out := <-first; !out.TimedOut {
		t.Errorf("first command: %+v, want timed out", out.ExecResult)
	}
	// The agent still runs the next one, untimed.
	if out := run(t, c, "echo next", 0, 100); string(out.Stdout) != "next\n" {
		t.Errorf("next command: %+v %q", out.ExecResult, out.Stdout)
	}
}

func TestAgentExitsWhenHostGoesAway(t *testing.T) {
	c := startAgent(t)
	c.Close()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("agent did not exit after stdin closed")
	}
}

// TestAgentResident: a resident process (the Python kernel's driver)
// outlives the commands, whose leftovers still die, and the next resident
// replaces it with its descendants. The agent here has a /proc of its own
// (unshare --mount-proc), as in a sandbox: it tells a resident's tree from
// the rest by the parents /proc gives.
func TestAgentResident(t *testing.T) {
	testenv.NeedRoot(t, "a PID namespace")
	bin, err := agentbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	c := startAgentCmd(t, exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", bin))
	resident := func(tag string) {
		t.Helper()
		// The resident and a child of it, as a kernel's driver has.
		out, err := c.Exec(context.Background(), agent.ExecRequest{Shell: []string{"/bin/bash", "-c"}, Command: "sleep 1001" + tag + " & exec sleep 1002" + tag, Dir: "/", Resident: true}, nil)
		if err != nil || out.ExitCode != 0 {
			t.Fatalf("start: %+v %v", out, err)
		}
	}
	alive := func(pattern string) bool {
		return exec.Command("pgrep", "-f", "^sleep "+pattern+"$").Run() == nil
	}
	resident("1")
	// A command's leftovers (detached or not) die at its end; the
	// resident's tree does not.
	run(t, c, "setsid sleep 1000 & sleep 1000 & sleep 0.1", 0, 100)
	out := run(t, c, "sleep 1000 & sleep 0.1", 0, 100)
	if alive("1000") || !alive("10011") || !alive("10021") || out.TimedOut {
		t.Fatalf("after commands: leftovers %v, resident %v %v, %+v", alive("1000"), alive("10011"), alive("10021"), out.ExecResult)
	}
	resident("2")
	if alive("10011") || alive("10021") || !alive("10012") || !alive("10022") {
		t.Fatalf("a new resident must replace the old one with its children: old %v %v, new %v %v", alive("10011"), alive("10021"), alive("10012"), alive("10022"))
	}
	// A resident that exits is reaped and the next command's kill is
	// the plain one again.
	run(t, c, "pkill -f '^sleep 1002'; pkill -f '^sleep 1001'; sleep 0.2", 0, 100)
	if alive("10012") || alive("10022") {
		t.Fatal("resident left after kill")
	}
	if out := run(t, c, "echo after", 0, 100); string(out.Stdout) != "after\n" {
		t.Fatalf("%q", out.Stdout)
	}
}
