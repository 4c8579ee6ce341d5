package jsrun

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestTSWorkerSurvivesEsbuild: sources that end esbuild — nesting past the
// worker's stack (a Go stack overflow, which no recover catches) and a shape
// that takes esbuild minutes — are given to the transform directly, past the
// nesting scan that would refuse them first. The test process lives on, each
// answers with a limit error, and the next source is transformed by a new
// worker.
func TestTSWorkerSurvivesEsbuild(t *testing.T) {
	if tsInProcess() {
		t.Fatal("the TypeScript worker could not be started from this executable")
	}
	ok := func() {
		t.Helper()
		p, err := transformTypeScript(t.Context(), "const x: number = 1; return x + 1", time.Minute)
		if err != nil || !strings.Contains(p.js, "return x + 1") {
			t.Fatalf("a plain source after the failure: %v", err)
		}
	}
	ok()
	starts := tsw.starts

	deep := strings.Repeat("(", 200_000) + "1" + strings.Repeat(")", 200_000)
	_, err := transformTypeScript(t.Context(), "return "+deep, time.Minute)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeSourceTooLarge {
		t.Fatalf("200,000 nested parentheses: %v, want %s", err, CodeSourceTooLarge)
	}
	ok()
	if tsw.starts != starts+1 {
		t.Fatalf("workers started: %d, want %d (one restart)", tsw.starts, starts+1)
	}

	// Chained arrow functions: esbuild's cost grows far faster than their
	// size (4,000 of them take minutes).
	arrows := strings.Repeat("(a) => ", 4000) + "0"
	_, err = transformTypeScript(t.Context(), "return "+arrows, 300*time.Millisecond)
	if !errors.As(err, &e) || e.Code != CodeTimeout {
		t.Fatalf("4,000 chained arrows with 300 ms: %v, want %s", err, CodeTimeout)
	}
	ok()
	if tsw.starts != starts+2 {
		t.Fatalf("workers started: %d, want %d", tsw.starts, starts+2)
	}
}

// TestTSWorkerRunCancelled: a caller's cancellation stops the transform.
func TestTSWorkerRunCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := transformTypeScript(ctx, "return "+strings.Repeat("(a) => ", 4000)+"0", time.Minute)
	if err == nil || !errors.Is(err, ctx.Err()) {
		t.Fatalf("cancelled transform: %v", err)
	}
}
