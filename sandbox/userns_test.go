package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

func TestUserNS(t *testing.T) {
	sandboxtest.EachRuntime(t, sandboxtest.UserNSSuite)
}

func TestUserNSInotify(t *testing.T) {
	sandboxtest.EachRuntime(t, sandboxtest.InotifySuite)
}

func TestUserNSSlotsAfterCrash(t *testing.T) {
	sandboxtest.EachRuntime(t, sandboxtest.SlotCrashSuite)
}

// A data directory below a directory that other users cannot search is
// refused with a clear reason: the sandboxes' unprivileged ids could not
// reach their root filesystem.
func TestUserNSDataDirMustBeSearchable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	private := t.TempDir() // 0700 parent
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := sandbox.Open(context.Background(), sandbox.Config{DataDir: filepath.Join(private, "data"), IdleTimeout: -1})
	if err == nil || !strings.Contains(err.Error(), "o+x") || !strings.Contains(err.Error(), private) {
		t.Fatalf("Open under a 0700 directory: %v, want an error naming %s and o+x", err, private)
	}
}

// runc takes namespace paths as a comma-separated list: a data directory
// with a comma in its path must still work.
func TestUserNSCommaInDataDir(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) {
			m, _ := sandboxtest.Open(t, rt, "busybox", func(c *sandbox.Config) { c.DataDir = filepath.Join(c.DataDir, "a,b") })
			if o := sandboxtest.Run(t, m, "comma", "echo ok"); o.Stdout != "ok\n" {
				t.Fatalf("%q %q", o.Stdout, o.Stderr)
			}
		})
	}
}
