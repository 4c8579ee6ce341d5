package sandboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// DataDir returns a fresh data directory for a test. Sandboxes run as
// unprivileged host ids that must search every directory above their root
// filesystem; t.TempDir's parent is 0700, so it becomes 0711 (searchable,
// not listable).
func DataDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// DataDirWithImages is a fresh data directory (DataDir) whose images are
// the suite's (ImagesDir): for a shellgate process the test runs itself.
func DataDirWithImages(t testing.TB) string {
	t.Helper()
	data := DataDir(t)
	if err := os.Symlink(ImagesDir(), filepath.Join(data, "images")); err != nil {
		t.Fatal(err)
	}
	return data
}

// BuildCLI builds this module's shellgate command into the test's own
// directory and returns its path. It is built every time (the build cache
// makes it quick): one left beside the agent by an earlier checkout at the
// same path may speak an older protocol.
func BuildCLI(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shellgate")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/shellgate/shellgate/cmd/shellgate").CombinedOutput(); err != nil {
		t.Fatalf("build shellgate: %v\n%s", err, out)
	}
	return bin
}
