package testenv

import (
	"sync"
	"testing"
	"time"
)

// TestAtOnce: every f runs, and all at the same time (each waits for the
// others to have started, which would hang if they ran one by one).
func TestAtOnce(t *testing.T) {
	const n = 8
	var started sync.WaitGroup
	started.Add(n)
	ran := make([]bool, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		AtOnce(n, func(i int) {
			started.Done()
			started.Wait()
			ran[i] = true
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("AtOnce did not run its calls side by side")
	}
	for i, ok := range ran {
		if !ok {
			t.Errorf("f(%d) did not run", i)
		}
	}
}
