package homefs

import (
	"errors"
	"strings"
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
