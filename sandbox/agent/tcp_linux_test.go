package agent_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
	return startTCPAgentIn(t, creds, nil, args...)
}

// startTCPAgentIn is startTCPAgent with the agent started by wrap (its
// command line before the agent's), which makes the PID namespace, when
// set.
func startTCPAgentIn(t testing.TB, creds agent.Credentials, wrap []string, args ...string) (string, <-chan error) {
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
	argv := append(append(append([]string(nil), wrap...), bin, "-listen", "127.0.0.1:0", "-credentials", dir), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if wrap != nil {
		cmd.SysProcAttr.Cloneflags = 0
	}
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

	// 6. A second host with the credentials is served beside the first,
	// in the same sandbox.
	shared := filepath.Join(t.TempDir(), "shared")
	if _, err := c.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "echo first > " + shared, Dir: "/"}, nil); err != nil {
		t.Fatal(err)
	}
	c2, err := agent.DialTCP(ctx, addr, creds)
	if err != nil {
		t.Fatalf("6: %v", err)
	}
	out, err = c2.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "cat " + shared + "; echo second >> " + shared, Dir: "/"}, nil)
	if err != nil || string(out.Stdout) != "first\n" {
		t.Fatalf("6: the second host: %q %v", out.Stdout, err)
	}
	out, err = c.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "cat " + shared, Dir: "/"}, nil)
	if err != nil || string(out.Stdout) != "first\nsecond\n" {
		t.Fatalf("6: the first host after the second: %q %v", out.Stdout, err)
	}

	// 7. The agent ends when the last host served closes, as closing
	// stdin ends it, not before.
	c.Close()
	if out, err := c2.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "echo still", Dir: "/"}, nil); err != nil || string(out.Stdout) != "still\n" {
		t.Fatalf("7: the second host after the first closed: %q %v", out.Stdout, err)
	}
	c2.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("7: agent exited with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("7: agent still running after the last host closed")
	}
}

// TestTCPHostsShareOneQueue: two hosts (two gateway replicas) served at
// once by one agent. 1. A command sent by B while A's runs waits for it
// and then runs: both succeed, in the order they were sent, and B is told
// A is busy meanwhile (Peers). 2. Commands sent by both at once all run,
// each host's in its own order. 3. A host that closes takes only its own
// work with it: its running command and its resident process are killed,
// its queued command never runs, and B's command, queued behind them,
// runs. 4. A host that holds the sandbox (as a gateway archiving it before
// the pod goes) gets it once another host's running command ended; the
// other host's commands and file requests are then refused without
// running (ErrHeld) until the hold is released. The
// agent runs with -nproc, as in pods, and a /proc of its own (it tells a
// resident's tree from the rest by /proc).
func TestTCPHostsShareOneQueue(t *testing.T) {
	creds := newCreds(t)
	addr, _ := startTCPAgentIn(t, creds, []string{"unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"}, "-nproc", "1000")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func() *agent.Client {
		t.Helper()
		c, err := agent.DialTCP(ctx, addr, creds)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	sh := func(cmd string) agent.ExecRequest {
		return agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: cmd, Dir: "/"}
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	a, b := dial(), dial()

	// 1.
	started := make(chan struct{})
	var once sync.Once
	first := make(chan error, 1)
	go func() {
		out, err := a.Exec(ctx, sh("echo go; sleep 1; echo a >> "+f), func(byte, []byte) { once.Do(func() { close(started) }) })
		if err == nil && out.ExitCode != 0 {
			err = fmt.Errorf("exit %d", out.ExitCode)
		}
		first <- err
	}()
	<-started
	if !testenv.Eventually(10*time.Second, func() bool { p, _ := b.Peers(); return p.Busy && p.Hosts == 1 }) {
		p, _ := b.Peers()
		t.Fatalf("1: B is told %+v while A's command runs", p)
	}
	if out, err := b.Exec(ctx, sh("echo b >> "+f), nil); err != nil || out.ExitCode != 0 {
		t.Fatalf("1: B's command: %+v %v", out.ExecResult, err)
	}
	if err := <-first; err != nil {
		t.Fatalf("1: A's command: %v", err)
	}
	if got, _ := os.ReadFile(f); string(got) != "a\nb\n" {
		t.Fatalf("1: f reads %q, want A's line then B's", got)
	}

	// 2.
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for tag, c := range map[string]*agent.Client{"A": a, "B": b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				out, err := c.Exec(ctx, sh(fmt.Sprintf("echo %s%d >> %s/g", tag, i, dir)), nil)
				if err == nil && out.ExitCode != 0 {
					err = fmt.Errorf("exit %d", out.ExitCode)
				}
				if err != nil {
					errs <- fmt.Errorf("%s%d: %w", tag, i, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("2: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "g"))
	next := map[byte]int{}
	for _, line := range strings.Fields(string(got)) {
		if want := fmt.Sprintf("%c%d", line[0], next[line[0]]); line != want {
			t.Fatalf("2: %q where %q was due, in %q", line, want, got)
		}
		next[line[0]]++
	}
	if next['A'] != n || next['B'] != n {
		t.Fatalf("2: %d of A's and %d of B's commands ran, want %d each", next['A'], next['B'], n)
	}

	// 3.
	alive := func(pattern string) bool { return exec.Command("pgrep", "-f", "^sleep "+pattern+"$").Run() == nil }
	if out, err := a.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "exec sleep 1003", Dir: "/", Resident: true}, nil); err != nil || out.ExitCode != 0 {
		t.Fatalf("3: A's resident: %+v %v", out.ExecResult, err)
	}
	started = make(chan struct{})
	once = sync.Once{}
	gone := make(chan error, 2)
	go func() {
		_, err := a.Exec(ctx, sh("echo go; sleep 1004"), func(byte, []byte) { once.Do(func() { close(started) }) })
		gone <- err
	}()
	<-started
	go func() { // queued behind A's running command
		_, err := a.Exec(ctx, sh("touch "+dir+"/queued-by-a"), nil)
		gone <- err
	}()
	time.Sleep(100 * time.Millisecond) // A's queued command reaches the agent first
	queued := make(chan error, 1)
	go func() {
		out, err := b.Exec(ctx, sh("echo b"), nil)
		if err == nil && string(out.Stdout) != "b\n" {
			err = fmt.Errorf("%q exit %d", out.Stdout, out.ExitCode)
		}
		queued <- err
	}()
	if !testenv.Eventually(10*time.Second, func() bool { p, _ := a.Peers(); return p.Hosts == 1 }) || !alive("1003") || !alive("1004") {
		t.Fatal("3: the setup did not come up")
	}
	time.Sleep(100 * time.Millisecond) // B's command reaches the agent
	a.Close()
	for range 2 {
		if err := <-gone; !errors.Is(err, agent.ErrClosed) {
			t.Fatalf("3: A's command ended with %v, want ErrClosed", err)
		}
	}
	if err := <-queued; err != nil {
		t.Fatalf("3: B's queued command: %v", err)
	}
	if alive("1003") || alive("1004") {
		t.Fatalf("3: A's resident (%v) or command (%v) outlived A", alive("1003"), alive("1004"))
	}
	if _, err := os.Stat(filepath.Join(dir, "queued-by-a")); err == nil {
		t.Fatal("3: the command A had queued ran after A left")
	}
	if !testenv.Eventually(10*time.Second, func() bool { p, _ := b.Peers(); return p == agent.Peers{} }) {
		p, _ := b.Peers()
		t.Fatalf("3: B is told %+v after A left", p)
	}

	// 4.
	c := dial()
	h := filepath.Join(dir, "h")
	started = make(chan struct{})
	once = sync.Once{}
	go func() {
		_, err := c.Exec(ctx, sh("echo go; sleep 1; echo x >> "+h), func(byte, []byte) { once.Do(func() { close(started) }) })
		first <- err
	}()
	<-started
	if err := b.Hold(ctx); err != nil {
		t.Fatalf("4: hold: %v", err)
	}
	if got, _ := os.ReadFile(h); string(got) != "x\n" {
		t.Fatalf("4: held while the other host's command ran: h reads %q", got)
	}
	if err := <-first; err != nil {
		t.Fatalf("4: the command the hold waited for: %v", err)
	}
	if _, err := c.Exec(ctx, sh("echo y >> "+h), nil); !errors.Is(err, agent.ErrHeld) {
		t.Fatalf("4: a command of the other host while held: %v, want ErrHeld", err)
	}
	if _, err := c.StatFile(ctx, dir, "h"); !errors.Is(err, agent.ErrHeld) {
		t.Fatalf("4: a file request of the other host while held: %v, want ErrHeld", err)
	}
	if out, err := b.Exec(ctx, sh("cat "+h), nil); err != nil || string(out.Stdout) != "x\n" {
		t.Fatalf("4: the holder's command: %q %v (the other host's must not have run)", out.Stdout, err)
	}
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	// The release has no answer: a command of B's after it is answered
	// once the agent took the release.
	if _, err := b.Exec(ctx, sh("true"), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Exec(ctx, sh("echo y >> "+h+"; cat "+h), nil); err != nil || string(out.Stdout) != "x\ny\n" {
		t.Fatalf("4: the other host's command after the release: %q %v", out.Stdout, err)
	}
}

// TestTCPHostLeavesMidWrite: a write of a host still streaming when that
// host closes is canceled, and leaves nothing in the home (not even its
// temporary file), as another host's command then sees.
func TestTCPHostLeavesMidWrite(t *testing.T) {
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
	other, err := agent.DialTCP(ctx, addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
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
	c.Close()
	pw.Close() // the host's last bytes: its connection is gone
	if err := <-put; err == nil {
		t.Fatal("the write of the host that left succeeded")
	}
	if !testenv.Eventually(10*time.Second, func() bool {
		out, err := other.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "ls -A " + home, Dir: "/"}, nil)
		return err == nil && out.ExitCode == 0 && len(out.Stdout) == 0
	}) {
		t.Fatalf("left in the home: %q", listDir(t, home))
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
