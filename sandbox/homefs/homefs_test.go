package homefs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shellgate/shellgate/sandbox/runtime"
)

// Errors name the home as the sandbox sees it, on every backend.
func TestCleanRelErrorsNameTheHome(t *testing.T) {
	if homeDir != runtime.HomeDir {
		t.Fatalf("homeDir %q, the runtime's HomeDir %q", homeDir, runtime.HomeDir)
	}
	for _, p := range []string{"../../etc/x", "..", "/etc/passwd", ""} {
		_, err := CleanRel(p)
		if !errors.Is(err, ErrBadPath) || !strings.Contains(err.Error(), runtime.HomeDir) {
			t.Errorf("CleanRel(%q) = %v, want ErrBadPath naming %s", p, err, runtime.HomeDir)
		}
	}
	if got, err := CleanRel("a/./b/../c.csv"); err != nil || got != "a/c.csv" {
		t.Errorf("CleanRel = %q, %v", got, err)
	}
}

// TestWriteBeneathPerm: 1. the file gets exactly the bits asked for,
// whatever the umask; 2. 0 keeps the default; 3. bits past 0777 (setuid,
// setgid, sticky) are refused and nothing is written.
func TestWriteBeneathPerm(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, tc := range []struct {
		perm, want fs.FileMode
	}{{0o755, 0o755}, {0o640, 0o640}, {0o000 | 0o111, 0o111}, {0, 0o600}} {
		if err := WriteBeneathPerm(dir, "a/f", strings.NewReader("x"), -1, -1, tc.perm); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(dir, "a/f"))
		if err != nil || st.Mode().Perm() != tc.want {
			t.Fatalf("perm %o: got %v %v, want %o", tc.perm, st.Mode(), err, tc.want)
		}
	}
	if err := WriteBeneathPerm(dir, "s", strings.NewReader("x"), -1, -1, 0o4755); !errors.Is(err, ErrBadPath) {
		t.Fatalf("3: setuid: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "s")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("3: %v", err)
	}
}
