package upstream

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestWatch: calls sharing one watch are cancelled with errTimeout once
// their own deadline passes (never before), a touch pushes a deadline
// back, a removed call is never cancelled, and the watch keeps working
// after it emptied (its timer left armed for a deadline that is gone).
func TestWatch(t *testing.T) {
	// Long enough that a loaded machine oversleeping the test's own
	// sleeps (a third of it) does not reorder the events.
	const limit = time.Second
	w := &watch{limit: limit}
	start := func() *call {
		c := &call{limit: limit, w: w}
		c.ctx, c.cancel = context.WithCancelCause(context.Background())
		w.add(c)
		return c
	}
	type outcome struct {
		started time.Time
		ended   time.Time
	}
	wait := func(c *call, started time.Time) outcome {
		<-c.ctx.Done()
		if !errors.Is(context.Cause(c.ctx), errTimeout) {
			t.Errorf("cause %v, want errTimeout", context.Cause(c.ctx))
		}
		return outcome{started, time.Now()}
	}

	// Round 1: three calls; the second is touched twice, the third removed.
	t0 := time.Now()
	a, b, gone := start(), start(), start()
	w.remove(gone)
	var wg sync.WaitGroup
	var oa, ob outcome
	wg.Add(2)
	go func() { defer wg.Done(); oa = wait(a, t0) }()
	go func() { defer wg.Done(); ob = wait(b, t0) }()
	time.Sleep(limit / 3)
	w.touch(b)
	time.Sleep(limit / 3)
	touched := time.Now()
	w.touch(b)
	wg.Wait()
	if d := oa.ended.Sub(oa.started); d < limit {
		t.Errorf("a was cancelled after %v, before its %v", d, limit)
	}
	if d := ob.ended.Sub(touched); d < limit {
		t.Errorf("b was cancelled %v after its last touch, before its %v", d, limit)
	}
	if gone.ctx.Err() != nil {
		t.Error("a removed call was cancelled")
	}
	// A touch after the cancellation changes nothing.
	w.touch(a)
	w.mu.Lock()
	empty := w.head == nil && w.tail == nil
	w.mu.Unlock()
	if !empty {
		t.Fatal("the watch still lists calls after all ended")
	}

	// Round 2: the watch emptied; a call removed just after starting
	// leaves the timer armed for its deadline, and a later call must
	// still be cancelled on time.
	early := start()
	w.remove(early)
	time.Sleep(limit / 2)
	t1 := time.Now()
	late := start()
	o := wait(late, t1)
	if d := o.ended.Sub(o.started); d < limit {
		t.Errorf("late call cancelled after %v, before its %v", d, limit)
	}
	if d := o.ended.Sub(o.started); d > limit+2*time.Second {
		t.Errorf("late call cancelled only after %v", d)
	}
	if early.ctx.Err() != nil {
		t.Error("a removed call was cancelled")
	}
}

// TestWatchShared: calls of one duration share a watch; another duration
// has its own.
func TestWatchShared(t *testing.T) {
	if watchFor(time.Minute) != watchFor(time.Minute) {
		t.Error("two watches for one duration")
	}
	if watchFor(time.Minute) == watchFor(2*time.Minute) {
		t.Error("one watch for two durations")
	}
}
