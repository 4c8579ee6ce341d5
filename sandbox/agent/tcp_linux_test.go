package agent_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/homefs"
	"github.com/shellgate/shellgate/testenv"
)

// startTCPAgent runs the real agent binary in network mode as PID 1 of a new
// PID namespace, listening on loopback with creds written to a directory as
// a mounted Secret would hold them. It returns the address and a channel
// that gets the agent's exit.
func startTCPAgent(t testing.TB, creds agent.Credentials, args ...string) (string, <-chan error) {
	t.Helper()
	testenv.NeedRoot(t, "a PID namespace")
	bin, err := agentbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{agent.CertFile: creds.CertPEM, agent.KeyFile: creds.KeyPEM, agent.TokenFile: creds.Token} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, append([]string{"-listen", "127.0.0.1:0", "-credentials", dir}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	addr := ""
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "shellgate-agent: listening on "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("agent did not say where it listens")
	}
	go io.Copy(io.Discard, stderr) // refusal log lines
	exited := make(chan error, 1)
	waited := make(chan struct{})
	go func() {
		exited <- cmd.Wait()
		close(waited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-waited
	})
	return addr, exited
}

func newCreds(t testing.TB) agent.Credentials {
	t.Helper()
	c, err := agent.NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTCPRefusesWithoutCredentials: on a network that is not trusted, a
// peer with the wrong token, no token, or a host pinning another
// certificate gets no Ready frame and runs nothing; the agent then still
// serves the right host.
func TestTCPRefusesWithoutCredentials(t *testing.T) {
	creds := newCreds(t)
	addr, exited := startTCPAgent(t, creds)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// 1. Right certificate, wrong token: closed before Ready.
	wrong := creds
	wrong.Token = newCreds(t).Token
	if c, err := agent.DialTCP(ctx, addr, wrong); err == nil {
		c.Close()
		t.Fatal("1: a wrong token was accepted")
	} else if !strings.Contains(err.Error(), "did not start") {
		t.Fatalf("1: want the agent to close before Ready, got %v", err)
	}

	// 2. A peer that speaks TLS but sends a frame that is not the token.
	cfg, err := creds.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte{2, 0, 0, 0, 1, 0, 0, 0, 2, '{', '}'}) // an exec frame
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	if n, err := conn.Read(make([]byte, 64)); err == nil || n > 0 {
		t.Fatalf("2: an exec frame without the token got %d bytes back (err %v)", n, err)
	}
	conn.Close()

	// 3. Plain TCP, no TLS: closed, never a frame.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	raw.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	raw.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, _ := io.ReadAll(raw)
	raw.Close()
	if strings.Contains(string(b), `"version"`) {
		t.Fatalf("3: plain TCP got a Ready frame: %q", b)
	}

	// 4. The host pins another sandbox's certificate: it refuses the agent,
	// so it never sends this sandbox's token to an impostor.
	other := newCreds(t)
	other.Token = creds.Token
	if c, err := agent.DialTCP(ctx, addr, other); err == nil {
		c.Close()
		t.Fatal("4: a host pinning another certificate connected")
	} else {
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &verr) {
			t.Fatalf("4: want a certificate error, got %v", err)
		}
	}

	// 5. The right host is served after all of that.
	c, err := agent.DialTCP(ctx, addr, creds)
	if err != nil {
		t.Fatalf("5: %v", err)
	}
	out, err := c.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "echo $((6*7))", Dir: "/"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Stdout) != "42\n" || out.ExitCode != 0 {
		t.Fatalf("5: got %q exit %d", out.Stdout, out.ExitCode)
	}

	// 6. A second host with the credentials takes over: the first one's
	// connection is closed (a command it starts fails with ErrClosed) and
	// the second one is served, in the same sandbox.
	taken := filepath.Join(t.TempDir(), "taken")
	if _, err := c.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "echo first > " + taken, Dir: "/"}, nil); err != nil {
		t.Fatal(err)
	}
	c2, err := agent.DialTCP(ctx, addr, creds)
	if err != nil {
		t.Fatalf("6: %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("6: the first host's connection is still open after a takeover")
	}
	if _, err := c.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "true", Dir: "/"}, nil); !errors.Is(err, agent.ErrClosed) {
		t.Fatalf("6: the first host after the takeover: %v", err)
	}
	out, err = c2.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "cat " + taken, Dir: "/"}, nil)
	if err != nil || string(out.Stdout) != "first\n" {
		t.Fatalf("6: the second host: %q %v", out.Stdout, err)
	}

	// 7. The host served closing ends the agent, as closing stdin does.
	c2.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("7: agent exited with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("7: agent still running after the host closed")
	}
}

// TestTCPTakeoverMidCommand: a host that takes over while the one before
// it runs a command gets the sandbox to itself. The old command is killed,
// and nothing of the old connection touches the new host's commands: a
// command the old host had queued never runs (it would kill every process
// of the sandbox when it ended), nor does the old worker's end of the
// killed command. The agent runs with -nproc, as in pods, so the old
// worker also counts processes before its kill.
func TestTCPTakeoverMidCommand(t *testing.T) {
	creds := newCreds(t)
	addr, _ := startTCPAgent(t, creds, "-nproc", "1000")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh := func(cmd string) agent.ExecRequest {
		return agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: cmd, Dir: "/"}
	}
	marker := filepath.Join(t.TempDir(), "queued-ran")
	c, err := agent.DialTCP(ctx, addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		started := make(chan struct{})
		var once sync.Once
		old := make(chan error, 2)
		go func() {
			_, err := c.Exec(ctx, sh("sleep 30 & sleep 30 & echo go; wait"), func(byte, []byte) { once.Do(func() { close(started) }) })
			old <- err
		}()
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatalf("round %d: the first command did not start", round)
		}
		go func() { // queued behind the running one
			_, err := c.Exec(ctx, sh("touch "+marker), nil)
			old <- err
		}()
		time.Sleep(100 * time.Millisecond) // the queued command reaches the agent first
		next, err := agent.DialTCP(ctx, addr, creds)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, cmd := range []string{"sleep 0.3; echo ok", "echo ok", "echo ok"} {
			out, err := next.Exec(ctx, sh(cmd), nil)
			if err != nil || string(out.Stdout) != "ok\n" || out.ExitCode != 0 {
				t.Fatalf("round %d, command %d of the new host: %q exit %d signal %d, %v", round, i, out.Stdout, out.ExitCode, out.Signal, err)
			}
		}
		for range 2 {
			if err := <-old; !errors.Is(err, agent.ErrClosed) {
				t.Fatalf("round %d: the old host's command ended with %v, want ErrClosed", round, err)
			}
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("round %d: the command the old host had queued ran after the takeover", round)
		}
		c.Close()
		c = next
	}
	c.Close()
}

// TestTCPTakeoverMidWrite: a write of the old host still streaming when a
// new host takes over is canceled before the new host is served, and
// leaves nothing in the home (not even its temporary file).
func TestTCPTakeoverMidWrite(t *testing.T) {
	creds := newCreds(t)
	addr, _ := startTCPAgent(t, creds)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	home := t.TempDir()
	c, err := agent.DialTCP(ctx, addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	put := make(chan error, 1)
	go func() {
		_, err := c.PutFile(ctx, home, "up.bin", pr, 0)
		put <- err
	}()
	if _, err := pw.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if !testenv.Eventually(10*time.Second, func() bool {
		names := listDir(t, home)
		return len(names) == 1 && strings.HasPrefix(names[0], homefs.UploadTempPrefix)
	}) {
		t.Fatalf("the write did not start: %q", listDir(t, home))
	}
	next, err := agent.DialTCP(ctx, addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	out, err := next.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "ls -A " + home, Dir: "/"}, nil)
	if err != nil || out.ExitCode != 0 || len(out.Stdout) != 0 {
		t.Fatalf("the new host's first command sees %q in the home (exit %d, %v), want nothing", out.Stdout, out.ExitCode, err)
	}
	pw.Close() // the old host ends its upload: its connection is gone
	if err := <-put; err == nil {
		t.Fatal("the old host's write succeeded")
	}
	if names := listDir(t, home); len(names) != 0 {
		t.Fatalf("left in the home: %q", names)
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}
