// Package testenv decides what a test does when the machine lacks
// something it needs.
//
// Outside `make test` a missing runtime, image or privilege is a skip, said
// loudly. Under `make test` and in CI the Makefile sets SHELLGATE_TEST_STRICT=1:
// the setup installed every runtime and built every image the tests need,
// so anything missing is a failure, never a silent skip.
package testenv

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// StrictVar is the environment variable that turns skips into failures.
const StrictVar = "SHELLGATE_TEST_STRICT"

// Strict reports whether missing prerequisites must fail tests.
func Strict() bool { return os.Getenv(StrictVar) == "1" }

// ImagesDir is the image store the tests use: setup's (make images), or
// SHELLGATE_TEST_IMAGES.
func ImagesDir() string {
	if d := os.Getenv("SHELLGATE_TEST_IMAGES"); d != "" {
		return d
	}
	return "/var/lib/shellgate/images"
}

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

// RunCheckingLeaks runs a package's tests (call it from TestMain) and fails
// the package if goroutines outlive them by more than grace: a handle not
// closed, a writer, call or stream still running. before runs first once
// the tests passed (e.g. closing idle HTTP connections).
func RunCheckingLeaks(m *testing.M, grace time.Duration, before func()) {
	base := runtime.NumGoroutine()
	code := m.Run()
	// Under go test -fuzz the fuzzing engine's own signal handler outlives
	// the tests.
	fuzzing := flag.Lookup("test.fuzz") != nil && flag.Lookup("test.fuzz").Value.String() != ""
	if code == 0 && !fuzzing {
		if before != nil {
			before()
		}
		deadline := time.Now().Add(grace)
		for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > base {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Printf("leaked goroutines (%d, %d before the tests):\n%s\n", n, base, buf)
			code = 1
		}
	}
	os.Exit(code)
}

// Eventually calls ok every 10 ms until it holds or d has passed, and
// reports whether it held. It is for what a server does after its client
// has the answer (a log line, a metric, a record written when a handler
// returns): read once, such a check fails on a slow machine.
func Eventually(d time.Duration, ok func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// AtOnce runs f(0), ..., f(n-1), each in a goroutine of its own, released
// together so that they race, and returns when all have returned.
func AtOnce(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// Count is how many rounds a long-running case makes: def, or the positive
// integer in the environment variable name (to run an issue's full count,
// e.g. SHELLGATE_NETWORK_CYCLES=200). A bad value fails the test.
func Count(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}
