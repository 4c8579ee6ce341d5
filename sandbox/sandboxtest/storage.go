package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/testenv"
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
		homes, _ := filepath.Glob(filepath.Join(data, "run", "sandboxes", "*", "private", "home"))
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
	t.Run("04 space freed in a home goes back to the host", func(t *testing.T) {
		m, data := Open(t, rt, "busybox", func(c *sandbox.Config) { c.HomeBytes = 256 << 20 })
		const box = "shrink"
		Run(t, m, box, "true")
		img := filepath.Join(data, "homes", box+".img")
		// Online discard while awake: deletes give space back at once.
		homes := 0
		for _, mi := range mountinfoLines(filepath.Join(data, "run")) {
			if !strings.HasSuffix(strings.Fields(mi)[4], "/home") {
				continue
			}
			homes++
			_, super, _ := strings.Cut(mi, " - ") // fstype source super-options
			if f := strings.Fields(super); len(f) < 3 || !slices.Contains(strings.Split(f[2], ","), "discard") {
				t.Errorf("home mounted without discard: %s", mi)
			}
		}
		if homes != 1 {
			t.Errorf("%d home mounts", homes)
		}
		baseline := allocated(t, data, img)
		if o := Run(t, m, box, "dd if=/dev/zero of=big bs=1M count=200 2>&1 && echo wrote"); !strings.HasSuffix(o.Stdout, "wrote\n") {
			t.Fatalf("write: %+v %q", o.Outcome, o.Stdout)
		}
		full := allocated(t, data, img)
		if full-baseline < 190<<20 {
			t.Fatalf("200 MB written took %d bytes on the host: the measurement does not see the writes", full-baseline)
		}
		Run(t, m, box, "rm big")
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		after := allocated(t, data, img)
		t.Logf("home image on the host: %d KiB empty, %d KiB with 200 MB, %d KiB after deleting it", baseline>>10, full>>10, after>>10)
		if after-baseline > 16<<20 {
			t.Errorf("deleting 200 MB gave back only %d of %d KiB", (full-after)>>10, (full-baseline)>>10)
		}
	})
	t.Run("05 a disk reserve above the free space refuses new sandboxes and leaves nothing", func(t *testing.T) {
		m, data := Open(t, rt, "busybox", func(c *sandbox.Config) { c.DiskReserve = 1 << 50 })
		_, err := m.Exec(ctx, "new", sandbox.Command{Command: "true", TimeoutMs: 10000, MaxBytes: 1024})
		if !errors.Is(err, sandbox.ErrDiskReserve) || !strings.Contains(err.Error(), "the reserve is 1.0 PiB") {
			t.Errorf("exec on a new sandbox: %v, want ErrDiskReserve naming the reserve", err)
		}
		if err := m.Create(ctx, "new2"); !errors.Is(err, sandbox.ErrDiskReserve) {
			t.Errorf("create: %v, want ErrDiskReserve", err)
		}
		left, _ := filepath.Glob(filepath.Join(data, "homes", "*.img"))
		running, _ := filepath.Glob(filepath.Join(data, "run", "sandboxes", "*"))
		if infos, _ := m.List(); len(left)+len(running)+len(infos) > 0 {
			t.Errorf("left behind: homes %v, sandboxes %v, listed %v", left, running, infos)
		}
		checkNoLeaks(t, data)
	})
	t.Run("06 below the reserve commands and copies are refused, reads and destroy work", func(t *testing.T) {
		// The data directory on a file system of its own, so that its
		// free space is the test's alone.
		testenv.NeedRoot(t, "a loop-mounted file system")
		fsDir := t.TempDir()
		fsImg, data := filepath.Join(fsDir, "fs.img"), filepath.Join(fsDir, "data")
		for _, c := range [][]string{
			{"truncate", "-s", "640M", fsImg},
			{"mkfs.ext4", "-q", "-m", "0", fsImg},
			{"mkdir", data},
			{"mount", "-o", "loop,discard", fsImg, data},
		} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v %s", c, err, out)
			}
		}
		t.Cleanup(func() { forceUnmount(t, data); exec.Command("umount", data).Run() })
		m, _ := Open(t, rt, "busybox", func(c *sandbox.Config) {
			c.DataDir, c.HomeBytes, c.DiskReserve = data, 512<<20, 256<<20
		})
		const box = "grow"
		// 400 MB leaves about 200 MB free: below the reserve.
		o := Shell(t, m, box, Call{Commands: []string{"echo kept > f && dd if=/dev/zero of=big bs=1M count=400 conv=fsync 2>/dev/null && echo wrote"}, TimeoutMs: i64(120000)})[0]
		if o.Stdout != "wrote\n" || !strings.Contains(o.Stderr, "fell below its reserve during this command") {
			t.Fatalf("growing past the reserve: %+v %q %q", o.Outcome, o.Stdout, o.Stderr)
		}
		if _, err := m.Exec(ctx, box, sandbox.Command{Command: "rm big", TimeoutMs: 10000, MaxBytes: 1024}); !errors.Is(err, sandbox.ErrDiskReserve) {
			t.Errorf("exec below the reserve: %v", err)
		}
		if err := m.WriteFile(ctx, box, "more", strings.NewReader("x")); !errors.Is(err, sandbox.ErrDiskReserve) {
			t.Errorf("write below the reserve: %v", err)
		}
		if err := m.Create(ctx, "other"); !errors.Is(err, sandbox.ErrDiskReserve) {
			t.Errorf("create below the reserve: %v", err)
		}
		if b, err := m.ReadFile(ctx, box, "f", 1024); err != nil || string(b) != "kept\n" {
			t.Errorf("read below the reserve: %q %v", b, err)
		}
		if err := m.Destroy(ctx, box); err != nil {
			t.Fatalf("destroy below the reserve: %v", err)
		}
		if o := Run(t, m, "other", "echo ok"); o.Stdout != "ok\n" {
			t.Errorf("after freeing space: %+v %q %q", o.Outcome, o.Stdout, o.Stderr)
		}
	})
}

// mountinfoLines returns the lines of /proc/self/mountinfo whose mount
// point is below dir.
func mountinfoLines(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, line)
		}
	}
	return out
}

// allocated is what the home image takes on the host's disk, with the
// mounted home (if any) flushed first.
func allocated(t testing.TB, data, img string) int64 {
	t.Helper()
	homes, _ := filepath.Glob(filepath.Join(data, "run", "sandboxes", "*", "private", "home"))
	for _, h := range homes {
		if f, err := os.Open(h); err == nil {
			unix.Syncfs(int(f.Fd()))
			f.Close()
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
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
