// Package testenv decides what a test does when the machine lacks
// something it needs.
//
// Outside `make test` a missing runtime, image or privilege is a skip, said
// loudly. Under `make test` and in CI the Makefile sets SHELLGATE_TEST_STRICT=1:
// the setup installed every runtime and built every image the tests need,
// so anything missing is a failure, never a silent skip.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// StrictVar is the environment variable that turns skips into failures.
const StrictVar = "SHELLGATE_TEST_STRICT"

// Strict reports whether missing prerequisites must fail tests.
func Strict() bool { return os.Getenv(StrictVar) == "1" }

// Missing skips t because something it needs is missing here, or fails it
// when Strict.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Strict() {
		t.Fatalf("%s (%s=1: the setup must provide this, so this is a failure, not a skip)", msg, StrictVar)
	}
	t.Skipf("SKIPPED, NOT TESTED: %s", msg)
}

// NeedRoot skips or fails t unless it runs as root.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root: %s", why)
	}
}
