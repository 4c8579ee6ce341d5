package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestCopyInSpecialFiles: --copy-in onto a FIFO the sandbox made in its home
// (crun and runc; under runsc a FIFO made inside exists only in gVisor's
// memory) or from a FIFO on the host fails at once with a clear error,
// instead of blocking in open(2) with the sandbox held.
func TestCopyInSpecialFiles(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data.csv")
	os.WriteFile(src, []byte("a,b\n"), 0o644)
	for _, rt := range []string{"crun", "runc"} {
		t.Run(rt, func(t *testing.T) {
			sandboxtest.Skip(t, rt, "busybox")
			run := cli(t)
			base := []string{"exec", "--image", "busybox", "--runtime", rt, "--sandbox", "trap"}
			if _, stderr, code := run(append(base, "--", "mkfifo trap")...); code != 0 {
				t.Fatalf("mkfifo: exit %d %s", code, stderr)
			}
			_, stderr, code := run(append(base, "--copy-in", src+":trap", "--", "echo ran")...)
			if code == 0 || !strings.Contains(stderr, "write trap: not a regular file (a FIFO)") {
				t.Fatalf("copy-in onto a FIFO: exit %d, stderr %q", code, stderr)
			}
			if out, stderr, code := run(append(base, "--copy-in", src+":ok.csv", "--", "test -p trap && cat ok.csv")...); code != 0 || out != "a,b\n" {
				t.Fatalf("next call: exit %d %q %q", code, out, stderr)
			}
		})
	}
	t.Run("host FIFO", func(t *testing.T) {
		sandboxtest.Skip(t, "runc", "busybox")
		run := cli(t)
		fifo := filepath.Join(t.TempDir(), "fifo")
		if err := unix.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, stderr, code := run("exec", "--image", "busybox", "--runtime", "runc", "--copy-in", fifo, "--", "true"); code == 0 || !strings.Contains(stderr, "not a regular file") {
			t.Fatalf("copy-in of a host FIFO: exit %d, stderr %q", code, stderr)
		}
	})
}

// TestDiskReserve: a reserve above the host's free space refuses a new
// sandbox with a clear error and leaves none behind.
func TestDiskReserve(t *testing.T) {
	sandboxtest.Skip(t, "runc", "busybox")
	run := cli(t)
	_, stderr, code := run("exec", "--image", "busybox", "--runtime", "runc", "--disk-reserve-mb", "1000000000", "--", "true")
	if code == 0 || !strings.Contains(stderr, "below the reserve kept free of sandbox homes") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if out, _, code := run("sandbox", "list"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("sandboxes after a refused exec: exit %d\n%s", code, out)
	}
}
