// Package sandboxtest is the conformance suite every sandbox runtime must
// pass, run against each OCI runtime that works on the host (the way
// containerd runs one suite against every snapshotter). It drives the real
// runtime through sandbox.Manager and needs root and an installed image.
package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// ImagesDir is where the suite finds images: $SHELLGATE_TEST_IMAGES, else
// the default data directory's.
func ImagesDir() string {
	if d := os.Getenv("SHELLGATE_TEST_IMAGES"); d != "" {
		return d
	}
	return "/var/lib/shellgate/images"
}

// Limits are small on purpose: the limit cases hit them quickly.
var Limits = runtime.Limits{CPUs: 1, MemoryBytes: 256 << 20, Processes: 64, TmpBytes: 32 << 20, ShmBytes: 16 << 20}

// HomeBytes is the suite's home quota.
const HomeBytes = 64 << 20

// Skip skips t unless the suite can run here with runtime rt and image img.
func Skip(t testing.TB, rt, img string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("sandbox tests need root")
	}
	r, err := runtime.New(rt, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(context.Background()); err != nil {
		t.Skipf("runtime %s does not work here: %v", rt, err)
	}
	if _, err := os.Stat(filepath.Join(ImagesDir(), img, "rootfs")); err != nil {
		t.Skipf("image %s is not built (run `shellgate image build`): %v", img, err)
	}
}

// Open starts a manager over a fresh data directory for runtime rt.
func Open(t testing.TB, rt, img string, mut ...func(*sandbox.Config)) (*sandbox.Manager, string) {
	t.Helper()
	Skip(t, rt, img)
	agent, err := agentbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	data := DataDir(t)
	cfg := sandbox.Config{
		DataDir: data, Runtime: rt, Image: img, Images: ImagesDir(), Agent: agent,
		Limits: Limits, HomeBytes: HomeBytes, LayerBytes: 64 << 20, IdleTimeout: -1,
	}
	for _, f := range mut {
		f(&cfg)
	}
	m, err := sandbox.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		if left := mountsUnder(data); len(left) > 0 {
			t.Errorf("mounts left behind: %v", left)
		}
	})
	return m, data
}

func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir) {
			out = append(out, f[4])
		}
	}
	return out
}

// Shell runs one shell call through the tool layer, as the gateway does.
func Shell(t testing.TB, m *sandbox.Manager, name string, args tool.ShellArgs) []tool.CommandOutput {
	t.Helper()
	p, err := args.Plan()
	if err != nil {
		t.Fatal(err)
	}
	out, err := tool.RunShell(context.Background(), m, name, p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Run runs one command with default limits and returns its output.
func Run(t testing.TB, m *sandbox.Manager, name, cmd string) tool.CommandOutput {
	t.Helper()
	return Shell(t, m, name, tool.ShellArgs{Commands: []string{cmd}})[0]
}

func exitCode(o tool.CommandOutput) int {
	if o.Outcome.Type != "exit" || o.Outcome.ExitCode == nil {
		return -1000
	}
	return *o.Outcome.ExitCode
}

func i64(v int64) *int64 { return &v }

// Suite runs every conformance case against runtime rt with the busybox
// image (fast) and, where a case needs it, the Debian image.
func Suite(t *testing.T, rt string) {
	m, data := Open(t, rt, "busybox")
	const box = "conf"

	t.Run("01 exit codes", func(t *testing.T) {
		for _, c := range []int{0, 1, 3, 42, 255} {
			if o := Run(t, m, box, fmt.Sprintf("exit %d", c)); exitCode(o) != c {
				t.Errorf("exit %d: got %+v", c, o.Outcome)
			}
		}
	})
	t.Run("02 stdout and stderr kept apart", func(t *testing.T) {
		o := Run(t, m, box, "echo out; echo err >&2; echo out2")
		if o.Stdout != "out\nout2\n" || o.Stderr != "err\n" {
			t.Fatalf("stdout %q stderr %q", o.Stdout, o.Stderr)
		}
	})
	t.Run("03 unicode and non-UTF-8 output", func(t *testing.T) {
		o := Run(t, m, box, `printf 'héllo 世界 🎉\n'; printf 'a\377b\n' >&2`)
		if o.Stdout != "héllo 世界 🎉\n" {
			t.Errorf("unicode: %q", o.Stdout)
		}
		if o.Stderr != "a\uFFFDb\n" {
			t.Errorf("invalid UTF-8 should become U+FFFD: %q", o.Stderr)
		}
	})
	t.Run("04 runs in home as the sandbox user with a clean environment", func(t *testing.T) {
		os.Setenv("SHELLGATE_HOST_SECRET", "leak-me")
		defer os.Unsetenv("SHELLGATE_HOST_SECRET")
		o := Run(t, m, box, "pwd; id -u; env")
		lines := strings.SplitN(o.Stdout, "\n", 3)
		if lines[0] != runtime.HomeDir || lines[1] != "1000" {
			t.Errorf("pwd/uid: %q", o.Stdout)
		}
		if strings.Contains(o.Stdout, "SHELLGATE_HOST_SECRET") || strings.Contains(o.Stdout, "leak-me") {
			t.Errorf("host environment visible: %s", o.Stdout)
		}
	})
	t.Run("05 timeout kills the whole tree", func(t *testing.T) {
		cmd := `setsid nohup sleep 1000 >/dev/null 2>&1 &
(sleep 1000 &) ; (trap '' TERM; sleep 1000) &
sh -c 'trap "" TERM HUP INT; while :; do sleep 1; done' &
echo started; sleep 1000`
		o := Shell(t, m, box, tool.ShellArgs{Commands: []string{cmd}, TimeoutMs: i64(500)})[0]
		if o.Outcome.Type != "timeout" {
			t.Fatalf("outcome %+v", o.Outcome)
		}
		if o.Stdout != "started\n" {
			t.Errorf("output before the timeout lost: %q", o.Stdout)
		}
		// Only the agent and this command's own processes may be left.
		// busybox starts applets through /proc/self/exe: the looking
		// pipeline's own processes may show as [exe].
		ps := Run(t, m, box, "ps -o pid,args | grep -v -e 'ps -o' -e grep -e PID -e shellgate-agent -e '[0-9] sh -lc' -e '[0-9] bash -lc' -e '\\[exe\\]' || true")
		if strings.TrimSpace(ps.Stdout) != "" {
			t.Errorf("processes left after the timeout:\n%s", ps.Stdout)
		}
	})
	t.Run("06 output flood is capped and marked", func(t *testing.T) {
		o := Shell(t, m, box, tool.ShellArgs{Commands: []string{"yes", "yes >&2"}, TimeoutMs: i64(1000), MaxOutputLength: i64(1000)})
		for i, c := range o {
			s := c.Stdout
			if i == 1 {
				s = c.Stderr
			}
			if !strings.HasPrefix(s, strings.Repeat("y\n", 500)) || !strings.Contains(s, tool.TruncationMarker) {
				t.Errorf("command %d: not capped and marked: %.80q… (%d chars)", i, s, len(s))
			}
		}
	})
	t.Run("07 a 1 GB line without newline", func(t *testing.T) {
		o := Shell(t, m, box, tool.ShellArgs{Commands: []string{"head -c 1000000000 /dev/zero | tr '\\0' x"}, TimeoutMs: i64(120000)})[0]
		if exitCode(o) != 0 || !strings.HasPrefix(o.Stdout, strings.Repeat("x", tool.DefaultMaxOutput)) || !strings.Contains(o.Stdout, "954 MiB") {
			t.Errorf("outcome %+v, stdout %d chars, tail %q", o.Outcome, len(o.Stdout), o.Stdout[max(0, len(o.Stdout)-100):])
		}
	})
	t.Run("08 memory limit", func(t *testing.T) {
		// tail keeps the whole "line" of zeros in memory.
		o := Shell(t, m, box, tool.ShellArgs{Commands: []string{"echo keep > mem-marker", "tail /dev/zero"}, TimeoutMs: i64(60000)})[1]
		if o.Outcome.Type == "timeout" || exitCode(o) == 0 {
			t.Errorf("memory bomb: %+v %q", o.Outcome, o.Stderr)
		}
		// The result says why: the OOM killer (crun, runc) or the whole
		// sandbox stopped (gVisor).
		if !strings.Contains(o.Stderr, "out-of-memory killer") && !strings.Contains(o.Stderr, "memory limit exceeded?") {
			t.Errorf("memory bomb result does not say why: %q", o.Stderr)
		}
		if next := Run(t, m, box, "cat mem-marker"); next.Stdout != "keep\n" {
			t.Errorf("after OOM: %+v %q %q", next.Outcome, next.Stdout, next.Stderr)
		}
	})
	t.Run("09 process limit", func(t *testing.T) {
		// A shell may exit when fork fails: spawn from a subshell, then
		// count with builtins only (a glob over /proc).
		o := Shell(t, m, box, tool.ShellArgs{Commands: []string{`(i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done) 2>/dev/null; set -- /proc/[0-9]*; echo spawned $#`}, TimeoutMs: i64(20000)})[0]
		if o.Outcome.Type == "timeout" {
			t.Fatalf("fork loop timed out: %q", o.Stderr)
		}
		var n int
		fmt.Sscanf(strings.TrimPrefix(o.Stdout, "spawned "), "%d", &n)
		// /proc also lists the agent, which the limit counts too.
		if n == 0 || n > int(Limits.Processes)+1 {
			t.Errorf("spawned %d background processes, limit %d: %q %q", n, Limits.Processes, o.Stdout, o.Stderr)
		}
		bomb := Shell(t, m, box, tool.ShellArgs{Commands: []string{`bomb() { bomb | bomb & }; bomb`}, TimeoutMs: i64(3000)})[0]
		_ = bomb // a timeout or an exit: either way it must end and be gone
		if next := Run(t, m, box, "echo alive"); next.Stdout != "alive\n" {
			t.Errorf("after fork bomb: %+v %q", next.Outcome, next.Stderr)
		}
	})
	t.Run("10 disk limit", func(t *testing.T) {
		o := Run(t, m, box, fmt.Sprintf("dd if=/dev/zero of=big bs=1M count=%d", HomeBytes>>20+16))
		if exitCode(o) == 0 || !strings.Contains(o.Stderr, "No space left") {
			t.Errorf("disk fill: %+v %q", o.Outcome, o.Stderr)
		}
		if next := Run(t, m, box, "rm big && echo small > ok.txt && cat ok.txt"); next.Stdout != "small\n" {
			t.Errorf("after disk full: %+v %q", next.Outcome, next.Stderr)
		}
		tmp := Run(t, m, box, fmt.Sprintf("dd if=/dev/zero of=/tmp/big bs=1M count=%d; rm -f /tmp/big", Limits.TmpBytes>>20+8))
		if !strings.Contains(tmp.Stderr, "No space left") {
			t.Errorf("/tmp is not capped: %q", tmp.Stderr)
		}
	})
	t.Run("11 files persist across sleep and wake, system changes do not", func(t *testing.T) {
		Run(t, m, box, "mkdir -p d && echo persisted > d/f && echo gone > /tmp/t")
		ctx := context.Background()
		for i := 0; i < 3; i++ {
			if err := m.Sleep(ctx, box); err != nil {
				t.Fatal(err)
			}
			if st, _ := m.Status(box); st != sandbox.Sleeping {
				t.Fatalf("status after sleep: %s", st)
			}
			o := Run(t, m, box, "cat d/f; cat /tmp/t 2>&1 || true")
			if o.Stdout != "persisted\ncat: can't open '/tmp/t': No such file or directory\n" && o.Stdout != "persisted\ncat: /tmp/t: No such file or directory\n" {
				t.Fatalf("round %d after wake: %q", i, o.Stdout)
			}
		}
	})
	t.Run("12 nothing of the host is visible", func(t *testing.T) {
		secret := filepath.Join(data, "host-secret.txt")
		os.WriteFile(secret, []byte("s3cret"), 0o600)
		o := Run(t, m, box, fmt.Sprintf("ls %s 2>&1; cat /proc/1/environ | tr '\\0' '\\n'; ls /var/lib/shellgate 2>&1; hostname", data))
		if strings.Contains(o.Stdout, "host-secret") || strings.Contains(o.Stdout, "s3cret") {
			t.Errorf("host data directory visible: %q", o.Stdout)
		}
		agent, _ := agentbin.Build()
		if mi := Run(t, m, box, "cat /proc/self/mountinfo"); strings.Contains(mi.Stdout, data) || strings.Contains(mi.Stdout, filepath.Dir(agent)) {
			t.Errorf("mountinfo names host paths (data %s, agent %s):\n%s", data, agent, mi.Stdout)
		}
		if !strings.HasSuffix(o.Stdout, "sandbox\n") {
			t.Errorf("hostname: %q", o.Stdout)
		}
		caps := Run(t, m, box, "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; grep NoNewPrivs /proc/self/status")
		for _, line := range strings.Split(strings.TrimSpace(caps.Stdout), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && strings.HasPrefix(f[0], "Cap") && strings.Trim(f[1], "0") != "" {
				t.Errorf("capabilities not dropped: %s", line)
			}
			if len(f) == 2 && f[0] == "NoNewPrivs:" && f[1] != "1" {
				t.Errorf("no_new_privs not set: %s", line)
			}
		}
		if w := Run(t, m, box, "echo 1 > /proc/sys/kernel/sysrq 2>&1 || echo denied; cat /proc/kcore 2>/dev/null | head -c 1 | wc -c"); !strings.HasPrefix(w.Stdout, "denied") || !strings.HasSuffix(w.Stdout, "0\n") {
			t.Errorf("/proc not protected: %q %q", w.Stdout, w.Stderr)
		}
	})
	t.Run("13 loopback is the only network interface", func(t *testing.T) {
		o := Run(t, m, box, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
		if o.Stdout != "lo\n" {
			t.Errorf("interfaces: %q", o.Stdout)
		}
		if n := Run(t, m, box, "wget -q -T 2 -O- http://10.0.0.1/ 2>&1 || echo unreachable"); !strings.Contains(n.Stdout, "unreachable") {
			t.Errorf("network reachable: %q", n.Stdout)
		}
	})
	t.Run("14 concurrent commands on one sandbox are serialized", func(t *testing.T) {
		done := make(chan tool.CommandOutput, 4)
		for i := 0; i < 4; i++ {
			go func(i int) {
				p, _ := tool.ShellArgs{Commands: []string{fmt.Sprintf("echo %d", i)}}.Plan()
				out, err := tool.RunShell(context.Background(), m, box, p)
				if err != nil {
					t.Error(err)
				}
				done <- out[0]
			}(i)
		}
		for i := 0; i < 4; i++ {
			if o := <-done; exitCode(o) != 0 {
				t.Errorf("concurrent: %+v", o)
			}
		}
	})
	t.Run("16 privileged operations are denied", func(t *testing.T) {
		o := Run(t, m, box, "mkdir -p /tmp/m; mount -t tmpfs x /tmp/m 2>&1 && echo MOUNTED; mknod /tmp/null c 1 3 2>&1 && echo MKNOD; chroot / true 2>&1 && echo CHROOT; cat /sys/fs/cgroup/release_agent 2>&1 | grep -v -e 'No such' -e 'can.t open' -e 'Permission' ; true")
		for _, bad := range []string{"MOUNTED", "MKNOD", "CHROOT"} {
			if strings.Contains(o.Stdout, bad) {
				t.Errorf("%s succeeded: %q", bad, o.Stdout)
			}
		}
	})
	t.Run("17 files in and out of the home, path-safe", func(t *testing.T) {
		ctx := context.Background()
		if err := m.WriteFile(ctx, box, "in/data.csv", strings.NewReader("a,b\n1,2\n")); err != nil {
			t.Fatal(err)
		}
		if o := Run(t, m, box, "stat -c '%u %s' in/data.csv && ln -sf /etc/passwd in/link && ln -sf ../.. in/up && mkfifo in/fifo && echo made"); !strings.HasPrefix(o.Stdout, "1000 8\n") {
			t.Fatalf("uploaded file: %q %q", o.Stdout, o.Stderr)
		}
		if b, err := m.ReadFile(ctx, box, "in/data.csv", 1<<20); err != nil || string(b) != "a,b\n1,2\n" {
			t.Fatalf("read back: %q %v", b, err)
		}
		if _, err := m.ReadFile(ctx, box, "in/data.csv", 3); !errors.Is(err, sandbox.ErrTooLarge) {
			t.Errorf("size cap: %v", err)
		}
		for _, p := range []string{"../x", "/etc/passwd", "in/link", "in/up/etc/passwd", "in/fifo", "in", "a\x00b"} {
			if b, err := m.ReadFile(ctx, box, p, 1<<20); err == nil {
				t.Errorf("read %q: got %d bytes, want an error", p, len(b))
			}
		}
		for _, p := range []string{"../x", "in/up/escape", "in/link"} {
			if err := m.WriteFile(ctx, box, p, strings.NewReader("x")); err == nil {
				t.Errorf("write %q succeeded", p)
			}
		}
	})
	t.Run("15 destroy removes the home", func(t *testing.T) {
		ctx := context.Background()
		Run(t, m, "doomed", "echo x > f")
		if err := m.Destroy(ctx, "doomed"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Status("doomed"); err == nil {
			t.Fatal("destroyed sandbox still has a status")
		}
		if o := Run(t, m, "doomed", "ls"); o.Stdout != "lost+found\n" && o.Stdout != "" {
			t.Errorf("new sandbox of the same name sees old files: %q", o.Stdout)
		}
	})
}

// LifecycleSuite covers the warm pool and idle sleep.
func LifecycleSuite(t *testing.T, rt string) {
	ctx := context.Background()
	t.Run("01 a new name takes a pooled sandbox", func(t *testing.T) {
		m, data := Open(t, rt, "busybox", func(c *sandbox.Config) { c.PoolSize = 1 })
		deadline := time.Now().Add(60 * time.Second)
		for m.PoolReady() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("pool never filled")
			}
			time.Sleep(10 * time.Millisecond)
		}
		pooled, _ := filepath.Glob(filepath.Join(data, "homes", ".pool", "*.img"))
		if len(pooled) != 1 {
			t.Fatalf("pool homes: %v", pooled)
		}
		if o := Run(t, m, "fresh", "echo kept > f; ls"); o.Stdout != "f\nlost+found\n" && o.Stdout != "f\n" {
			t.Fatalf("pooled sandbox home not fresh: %q", o.Stdout)
		}
		if _, err := os.Stat(pooled[0]); !os.IsNotExist(err) {
			t.Errorf("pooled home %s was not renamed to the sandbox's", pooled[0])
		}
		if err := m.Sleep(ctx, "fresh"); err != nil {
			t.Fatal(err)
		}
		if o := Run(t, m, "fresh", "cat f"); o.Stdout != "kept\n" {
			t.Errorf("pooled sandbox's home lost at wake: %q", o.Stdout)
		}
	})
	t.Run("02 idle sandboxes sleep and wake with their files", func(t *testing.T) {
		m, _ := Open(t, rt, "busybox", func(c *sandbox.Config) { c.IdleTimeout = 300 * time.Millisecond })
		Run(t, m, "idle", "echo still-here > f")
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, _ := m.Status("idle")
			if st == sandbox.Sleeping {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("idle sandbox never slept")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if o := Run(t, m, "idle", "cat f"); o.Stdout != "still-here\n" {
			t.Errorf("after idle sleep: %q", o.Stdout)
		}
	})
}

// CrashSuite kills a Shellgate process (the real CLI binary, built from
// this module) with SIGKILL in the middle of a command and checks that the
// next manager to open the data directory cleans up its containers and
// mounts and loses no home.
func CrashSuite(t *testing.T, rt string) {
	Skip(t, rt, "busybox")
	agent, err := agentbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	cli := filepath.Join(filepath.Dir(agent), "shellgate")
	if _, err := os.Stat(cli); err != nil {
		if out, err := exec.Command("go", "build", "-o", cli, "github.com/shellgate/shellgate/cmd/shellgate").CombinedOutput(); err != nil {
			t.Fatalf("build shellgate: %v\n%s", err, out)
		}
	}
	data := DataDir(t)
	os.Symlink(ImagesDir(), filepath.Join(data, "images"))
	cmd := exec.Command(cli, "exec", "--data-dir", data, "--runtime", rt, "--image", "busybox", "--sandbox", "crashy", "--",
		"echo precious > keep.txt && sync && echo ready && sleep 1000")
	cmd.Env = append(os.Environ(), "SHELLGATE_AGENT="+agent)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The CLI prints output after the command, so watch the file instead:
	// its content, since the shell creates it before writing to it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		runDirs, _ := filepath.Glob(filepath.Join(data, "run", "sandboxes", "*", "home", "keep.txt"))
		if len(runDirs) > 0 {
			if b, _ := os.ReadFile(runDirs[0]); string(b) == "precious\n" {
				break
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("sandbox never wrote keep.txt")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	_ = stdout
	if len(mountsUnder(filepath.Join(data, "run"))) == 0 {
		t.Fatal("expected the killed process to leave mounts behind")
	}

	m, _ := Open(t, rt, "busybox", func(c *sandbox.Config) { c.DataDir = data })
	if left := mountsUnder(filepath.Join(data, "run")); len(left) > 0 {
		t.Errorf("mounts left after cleanup: %v", left)
	}
	r, _ := runtime.New(rt, filepath.Join(data, "run", "runtime"))
	if ids, err := r.List(context.Background()); err != nil || len(ids) > 0 {
		t.Errorf("containers left after cleanup: %v %v", ids, err)
	}
	if o := Run(t, m, "crashy", "cat keep.txt"); o.Stdout != "precious\n" {
		t.Errorf("home lost after crash: %+v %q %q", o.Outcome, o.Stdout, o.Stderr)
	}
}
