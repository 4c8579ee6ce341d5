package sandboxtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/runtime"
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

// BuildCLI returns this module's shellgate command, built once per test
// process (agentbin.BuildCommand): the code under test, never a binary an
// earlier checkout left behind.
func BuildCLI(t testing.TB) string {
	t.Helper()
	bin, err := agentbin.BuildCommand("shellgate", "shellgate")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// EachRuntime runs suite as a subtest per OCI runtime (runtime.Names), the
// one loop the runtime suites share.
func EachRuntime(t *testing.T, suite func(t *testing.T, rt string)) {
	t.Helper()
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { suite(t, rt) })
	}
}
