package sandboxtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
