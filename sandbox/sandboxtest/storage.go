package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox"
)

// StorageSuite covers the data directory, homes and file copies: what must
// never lose a user's files or leave the host's mount table dirty.
func StorageSuite(t *testing.T, rt string) {
	ctx := context.Background()
	t.Run("01 data directory reached through a symlink", func(t *testing.T) {
		real := t.TempDir()
		link := filepath.Join(t.TempDir(), "data-link")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		real, _ = filepath.EvalSymlinks(real)
		t.Cleanup(func() { forceUnmount(t, real) })
		open := func() *sandbox.Manager {
			m, _ := Open(t, rt, "busybox", func(c *sandbox.Config) { c.DataDir = link })
			return m
		}
		m := open()
		if o := Run(t, m, "keep", "mkdir -p d && echo precious > d/f && echo ok"); o.Stdout != "ok\n" {
			t.Fatalf("write: %+v %q", o.Outcome, o.Stderr)
		}
		Run(t, m, "other", "echo doomed > f")
		if err := m.Sleep(ctx, "keep"); err != nil {
			t.Fatalf("sleep: %v", err)
		}
		if o := Run(t, m, "keep", "cat d/f"); o.Stdout != "precious\n" {
			t.Fatalf("after wake: %+v %q %q", o.Outcome, o.Stdout, o.Stderr)
		}
		if err := m.Destroy(ctx, "other"); err != nil {
			t.Fatalf("destroy: %v", err)
		}
		if err := m.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
		checkNoLeaks(t, real)

		m = open()
		if o := Run(t, m, "keep", "cat d/f"); o.Stdout != "precious\n" {
			t.Fatalf("after reopening: %+v %q %q", o.Outcome, o.Stdout, o.Stderr)
		}
		if err := m.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
		checkNoLeaks(t, real)
	})
	t.Run("02 writes onto a FIFO, socket or device are refused without blocking", func(t *testing.T) {
		m, data := Open(t, rt, "busybox")
		const box = "traps"
		if o := Run(t, m, box, "mkfifo trap && echo made"); o.Stdout != "made\n" {
			t.Fatalf("mkfifo: %+v %q", o.Outcome, o.Stderr)
		}
		homes, _ := filepath.Glob(filepath.Join(data, "run", "sandboxes", "*", "home"))
		if len(homes) != 1 {
			t.Fatalf("mounted homes: %v", homes)
		}
		// The same kinds of file planted on the host side of the home: under
		// runsc a FIFO made inside lives only in gVisor's memory, so this is
		// what reaches the host's file code on every runtime.
		h := homes[0]
		if err := unix.Mkfifo(filepath.Join(h, "host-fifo"), 0o666); err != nil {
			t.Fatal(err)
		}
		// A socket path is limited to 108 bytes: bind through an open
		// descriptor of the home.
		hd, err := os.Open(h)
		if err != nil {
			t.Fatal(err)
		}
		defer hd.Close()
		ln, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/sock", hd.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := unix.Mknod(filepath.Join(h, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		targets := []string{"host-fifo", "sock", "null"}
		if rt != "runsc" {
			targets = append(targets, "trap")
		}
		for _, p := range targets {
			err := writeWithWatchdog(t, m, box, p, filepath.Join(h, p))
			if !errors.Is(err, sandbox.ErrNotRegular) {
				t.Errorf("write onto %s: %v, want ErrNotRegular", p, err)
			}
		}
		// Nothing was replaced, and the sandbox's lock is free.
		for p, want := range map[string]os.FileMode{"host-fifo": os.ModeNamedPipe, "sock": os.ModeSocket, "null": os.ModeDevice | os.ModeCharDevice} {
			if st, err := os.Lstat(filepath.Join(h, p)); err != nil || st.Mode().Type() != want {
				t.Errorf("%s after the write: %v %v", p, st.Mode(), err)
			}
		}
		if o := Run(t, m, box, "test -p trap && echo alive"); o.Stdout != "alive\n" {
			t.Errorf("after the writes: %+v %q %q", o.Outcome, o.Stdout, o.Stderr)
		}
	})
	t.Run("03 file copies stop when their context ends", func(t *testing.T) {
		m, _ := Open(t, rt, "busybox")
		const box = "ctx"
		Run(t, m, box, "true")
		cctx, cancel := context.WithCancel(ctx)
		// An endless reader that cancels the copy after 1 MiB.
		r := &cancelAfter{n: 1 << 20, cancel: cancel}
		if err := m.WriteFile(cctx, box, "endless", r); !errors.Is(err, context.Canceled) {
			t.Errorf("endless write: %v, want context.Canceled", err)
		}
		if err := m.WriteFile(cctx, box, "never", strings.NewReader("x")); !errors.Is(err, context.Canceled) {
			t.Errorf("write with a done context: %v", err)
		}
		if _, err := m.ReadFile(cctx, box, "endless", 1<<30); !errors.Is(err, context.Canceled) {
			t.Errorf("read with a done context: %v", err)
		}
		if o := Run(t, m, box, "ls never 2>/dev/null; echo alive"); o.Stdout != "alive\n" {
			t.Errorf("after cancelled copies: %q %q", o.Stdout, o.Stderr)
		}
	})
}

// writeWithWatchdog runs WriteFile; if it is still blocked after 30 seconds
// (the bug this guards against: open(2) of a FIFO waiting for a reader) it
// unblocks it by opening the host path for reading and reports the hang.
func writeWithWatchdog(t *testing.T, m *sandbox.Manager, box, rel, hostPath string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.WriteFile(context.Background(), box, rel, strings.NewReader("payload")) }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Errorf("WriteFile(%s) blocked", rel)
		if f, err := os.OpenFile(hostPath, os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			defer f.Close()
		}
		return <-done
	}
}

type cancelAfter struct {
	n      int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.cancel()
	}
	c.n -= len(p)
	clear(p)
	return len(p), nil
}

// checkNoLeaks fails t if anything is still mounted below dir or a loop
// device is still backed by a file below it.
func checkNoLeaks(t testing.TB, dir string) {
	t.Helper()
	if left := mountsUnder(dir); len(left) > 0 {
		t.Errorf("mounts left behind: %v", left)
	}
	if loops := loopsUnder(dir); len(loops) > 0 {
		t.Errorf("loop devices left behind: %v", loops)
	}
}

// loopsUnder lists the loop devices backed by a file below dir (what
// `losetup -a` shows).
func loopsUnder(dir string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(string(b), dir+"/") {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f)))+": "+strings.TrimSpace(string(b)))
		}
	}
	return out
}

// forceUnmount detaches whatever a failing case left mounted below dir, so
// one failure does not leak into the host and later tests.
func forceUnmount(t testing.TB, dir string) {
	left := mountsUnder(dir)
	for i := len(left) - 1; i >= 0; i-- {
		if err := exec.Command("umount", "-l", left[i]).Run(); err != nil {
			t.Logf("cleanup: umount %s: %v", left[i], err)
		}
	}
}
