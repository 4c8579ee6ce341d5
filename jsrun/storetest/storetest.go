// Package storetest is the conformance suite of jsrun.ContinuationStore: run
// it against every implementation (the in-memory store, and the server's
// store on SQLite and on PostgreSQL).
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) jsrun.ContinuationStore { return jsrun.NewMemoryStore() })
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shellgate/shellgate/jsrun"
	"github.com/shellgate/shellgate/testenv"
)

// T0 is the clock the suite starts from; claims are made at T0 and later.
var T0 = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)

// Run runs every case on a fresh store from newStore.
func Run(t *testing.T, newStore func(t *testing.T) jsrun.ContinuationStore) {
	ctx := context.Background()
	t.Run("01 the first claim wins and later ones name it", func(t *testing.T) {
		s := newStore(t)
		first := T0.Add(1234 * time.Millisecond)
		if err := s.Claim(ctx, "tok", first, T0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 2; i++ {
			err := s.Claim(ctx, "tok", first.Add(time.Duration(i)*time.Minute), T0.Add(time.Hour))
			var used *jsrun.UsedError
			if !errors.As(err, &used) || !errors.Is(err, jsrun.ErrContinuationUsed) || !used.FirstUse.Equal(first) {
				t.Fatalf("claim %d: %v, want a UsedError naming %s", i+1, err, first)
			}
		}
		if err := s.Claim(ctx, "other", first, T0.Add(time.Hour)); err != nil {
			t.Fatalf("another ID: %v", err)
		}
	})
	t.Run("02 a released claim can be made again", func(t *testing.T) {
		s := newStore(t)
		if err := s.Claim(ctx, "tok", T0, T0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, "tok"); err != nil {
			t.Fatal(err)
		}
		if err := s.Claim(ctx, "tok", T0.Add(time.Second), T0.Add(time.Hour)); err != nil {
			t.Fatalf("claim after release: %v", err)
		}
		if err := s.Release(ctx, "never-claimed"); err != nil {
			t.Fatalf("releasing an unknown ID: %v", err)
		}
	})
	t.Run("03 of concurrent claims exactly one wins", func(t *testing.T) {
		s := newStore(t)
		const n = 32
		errs := make([]error, n)
		testenv.AtOnce(n, func(i int) {
			errs[i] = s.Claim(ctx, "raced", T0.Add(time.Duration(i)*time.Millisecond), T0.Add(time.Hour))
		})
		won, used := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.Is(err, jsrun.ErrContinuationUsed):
				used++
			default:
				t.Errorf("claim: %v", err)
			}
		}
		if won != 1 || used != n-1 {
			t.Fatalf("%d claims won, %d were refused; want 1 and %d", won, used, n-1)
		}
	})
	t.Run("04 claims are kept until they expire and dropped after", func(t *testing.T) {
		s := newStore(t)
		for i, exp := range []time.Duration{time.Hour, 3 * time.Hour} {
			if err := s.Claim(ctx, fmt.Sprint("t", i), T0, T0.Add(exp)); err != nil {
				t.Fatal(err)
			}
		}
		// Just before its expiry a claim still holds.
		if err := s.Claim(ctx, "t0", T0.Add(59*time.Minute), T0.Add(2*time.Hour)); !errors.Is(err, jsrun.ErrContinuationUsed) {
			t.Fatalf("t0 before expiry: %v", err)
		}
		// Well past it (and past any sweep interval) the store has dropped
		// it: the ID is free again, while the unexpired claim holds.
		later := T0.Add(2 * time.Hour)
		if err := s.Claim(ctx, "t0", later, later.Add(time.Hour)); err != nil {
			t.Fatalf("t0 after expiry: %v (expired claims are not swept)", err)
		}
		if err := s.Claim(ctx, "t1", later, later.Add(time.Hour)); !errors.Is(err, jsrun.ErrContinuationUsed) {
			t.Fatalf("t1 before expiry: %v", err)
		}
	})
}
