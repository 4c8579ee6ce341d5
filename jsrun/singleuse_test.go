package jsrun

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/testenv"
)

// effects returns a host namespace whose approve interrupts and, once
// resumed with an approval, performs its effect (counted).
func effects(n *atomic.Int64) map[string]Namespace {
	return map[string]Namespace{"tools": {
		"approve": Async(func(ctx context.Context, args []any) (any, error) {
			r := ResumeFrom(ctx)
			if r == nil {
				return nil, Interrupt(ctx, args[0])
			}
			if r.Resolution == true {
				n.Add(1) // the approved effect
			}
			return r.Resolution, nil
		}),
	}}
}

// TestContinuationResumesOnce is issue 6 item 14: resuming one token three
// times ran its approved host call three times.
func TestContinuationResumesOnce(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	r := newTestRunner(t, func(c *Config) { c.Now = clock })
	var done atomic.Int64
	hf := effects(&done)
	src := `const ok = await tools.approve('delete 3 rows'); return ok ? 'deleted' : 'kept'`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	if res.Status != StatusInterrupted {
		t.Fatalf("got %+v", res)
	}
	resume := func(rs []Resolution, ctxVal any) (*Result, error) {
		return r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: rs, Context: ctxVal})
	}
	// Resumes rejected before any effect do not use the token up.
	_, err := resume([]Resolution{{InterruptionID: "interrupt-9", Value: true}}, nil)
	wantCode(t, err, CodeProtocol)
	_, err = resume(resolveAll(res, true), "another tenant")
	wantCode(t, err, CodeProtocol)

	advance(5 * time.Second)
	firstUse := clock()
	out, err := resume(resolveAll(res, true), nil)
	if err != nil || out.Value != "deleted" {
		t.Fatalf("first resume: %+v %v", out, err)
	}
	for i := 0; i < 2; i++ {
		advance(time.Minute)
		_, err := resume(resolveAll(res, true), nil)
		e := wantCode(t, err, CodeContinuationUsed)
		if e.Details["first_used_at"] != "2026-12-01T03:00:05.000Z" || !errors.Is(err, ErrContinuationUsed) {
			t.Fatalf("resume %d: details %v, error %v", i+2, e.Details, err)
		}
		var used *UsedError
		if !errors.As(err, &used) || !used.FirstUse.Equal(firstUse) {
			t.Fatalf("resume %d: %v", i+2, err)
		}
	}
	if n := done.Load(); n != 1 {
		t.Fatalf("the approved call ran %d times, want once", n)
	}
}

// TestConcurrentResumesOneWins resumes one token from many goroutines at
// once: exactly one runs the approved call.
func TestConcurrentResumesOneWins(t *testing.T) {
	r := newTestRunner(t)
	var done atomic.Int64
	hf := effects(&done)
	src := `return await tools.approve('go')`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	const n = 16
	errs := make([]error, n)
	testenv.AtOnce(n, func(i int) {
		_, errs[i] = r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	})
	won, used := 0, 0
	for _, err := range errs {
		switch ErrorCode(err) {
		case "":
			won++
		case CodeContinuationUsed:
			used++
		default:
			t.Errorf("unexpected error %v", err)
		}
	}
	if won != 1 || used != n-1 || done.Load() != 1 {
		t.Fatalf("%d resumes won, %d were refused, the effect ran %d times; want 1, %d, 1", won, used, done.Load(), n-1)
	}
}

// TestFailedResumeWithoutEffectGivesTokenBack: a resume that fails before
// any host function ran releases its claim; one that failed after an effect
// keeps it.
func TestFailedResumeWithoutEffectGivesTokenBack(t *testing.T) {
	r := newTestRunner(t)
	var done atomic.Int64
	hf := effects(&done)
	// The guest recurses ~2,000 frames before it reaches the approval: fine
	// with the default stack, an overflow with 64 KiB.
	src := `function deep(n) { return n === 0 ? 0 : 1 + deep(n - 1) }
		const ok = await tools.approve(deep(2000))
		if (ok === 'fail') throw new Error('failed after the effect')
		return ok`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	_, err := r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation,
		Resolutions: resolveAll(res, true), Limits: Limits{StackBytes: 64 << 10}})
	wantCode(t, err, CodeStackOverflow)
	out := mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	if out.Value != true || done.Load() != 1 {
		t.Fatalf("got %+v, effect ran %d times", out, done.Load())
	}

	// A resume whose approved call ran and then failed keeps its claim.
	res = mustRun(t, r, Input{Source: src, HostFunctions: hf})
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, "fail")})
	wantCode(t, err, CodeUserSourceError)
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeContinuationUsed)
	if done.Load() != 1 {
		t.Fatalf("effect ran %d times", done.Load())
	}
}

// failingStore fails every claim: the resume must not run.
type failingStore struct{}

func (failingStore) Claim(context.Context, string, time.Time, time.Time) error {
	return errors.New("disk I/O error")
}
func (failingStore) Release(context.Context, string) error { return nil }

func TestSingleUseIsRequiredAndFailsClosed(t *testing.T) {
	if _, err := NewRunner(Config{Secret: testSecret}); err == nil {
		t.Fatal("a runner with a secret and no store was accepted")
	}
	r := newTestRunner(t, func(c *Config) { c.Store = failingStore{} })
	var done atomic.Int64
	hf := effects(&done)
	res := mustRun(t, r, Input{Source: `return await tools.approve(1)`, HostFunctions: hf})
	_, err := r.Run(context.Background(), Input{Source: `return await tools.approve(1)`, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeInternal)
	if done.Load() != 0 {
		t.Fatal("the approved call ran although the claim failed")
	}
}
