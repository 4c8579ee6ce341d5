package sandboxtest

import (
	"os"
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
