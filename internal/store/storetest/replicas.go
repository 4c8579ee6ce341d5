package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// Replicas races two independent handles on one database, as two gateway
// replicas (or the CLI and the server) would, on the same rows: one
// container name, one idempotent usage id, one container's touches and
// its expiry. Each race is run many times, with several writers per
// handle released at once, and must always end the same way.
func Replicas(t *testing.T, f Factory) {
	const rounds, perHandle = 20, 4
	t.Run("01 one name: exactly one create wins, the others conflict", func(t *testing.T) {
		o := f(t)
		handles := []store.Store{open(t, o), open(t, o)}
		for r := range rounds {
			name := fmt.Sprintf("shared-%d", r)
			var mu sync.Mutex
			var wins []string
			var errs []error
			raceHandles(handles, perHandle, func(st store.Store, _ int) {
				c, err := st.Containers().Create(t.Context(), sampleContainer(scopeA, name))
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					wins = append(wins, c.ID)
				} else if !errors.Is(err, store.ErrConflict) {
					errs = append(errs, err)
				}
			})
			if len(errs) > 0 || len(wins) != 1 {
				t.Fatalf("round %d: %d creates of %q won (want 1), errors other than a conflict: %v", r, len(wins), name, errs)
			}
			for _, st := range handles {
				if c, err := st.Containers().GetByName(t.Context(), scopeA, name); err != nil || c.ID != wins[0] {
					t.Fatalf("round %d: the name answers %+v, %v; want the winner %s", r, c, err, wins[0])
				}
			}
		}
	})
	t.Run("02 one usage id is recorded once", func(t *testing.T) {
		o := f(t)
		handles := []store.Store{open(t, o), open(t, o)}
		at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
		for r := range rounds {
			id := fmt.Sprintf("use_retry_%d", r)
			var mu sync.Mutex
			var errs []error
			raceHandles(handles, perHandle, func(st store.Store, i int) {
				// Every retry carries the same id and charge.
				err := st.Usage().Record(t.Context(), store.UsageEvent{ID: id, Scope: scopeA, ContainerID: "cntr_hot", At: at,
					MeteredMillis: 1000, BilledMillis: 1000, CostMicroUSD: 7, Kind: "exec"})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
			if len(errs) > 0 {
				t.Fatal(errs)
			}
		}
		for _, st := range handles {
			c, err := st.Usage().ByContainer(t.Context(), scopeA, time.Time{}, time.Time{})
			if err != nil || len(c) != 1 || c[0].Events != rounds || c[0].CostMicroUSD != 7*rounds || c[0].BilledMillis != 1000*rounds {
				t.Fatalf("after %d rounds of %d writers retrying one id: %+v, %v; want %d events", rounds, 2*perHandle, c, err, rounds)
			}
		}
	})
	t.Run("03 concurrent touches: the latest wins and the own expiry moves with it", func(t *testing.T) {
		o := f(t)
		handles := []store.Store{open(t, o), open(t, o)}
		c, err := handles[0].Containers().Create(t.Context(), sampleContainer(scopeA, "touched")) // last active t0+1m, expires t0+30d
		if err != nil {
			t.Fatal(err)
		}
		allowance := c.ExpiresAt.Sub(c.LastActiveAt)
		last := c.LastActiveAt
		for r := range rounds {
			base := last
			var mu sync.Mutex
			var errs []error
			raceHandles(handles, perHandle, func(st store.Store, i int) {
				// Distinct times, in no order across the writers.
				at := base.Add(time.Duration((i*5)%(2*perHandle)+1) * time.Second)
				if err := st.Containers().Touch(t.Context(), scopeA, c.ID, at); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			last = base.Add(2 * perHandle * time.Second)
			got, err := handles[r%2].Containers().Get(t.Context(), scopeA, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !got.LastActiveAt.Equal(last) || got.ExpiresAt.Sub(got.LastActiveAt) != allowance {
				t.Fatalf("round %d: last active %v (want %v), expiry %v after it (want %v): a touch was lost or applied to a stale row",
					r, got.LastActiveAt, last, got.ExpiresAt.Sub(got.LastActiveAt), allowance)
			}
		}
	})
	t.Run("04 touch against expire: never an expired container with a newer use", func(t *testing.T) {
		o := f(t)
		handles := []store.Store{open(t, o), open(t, o)}
		outcomes := map[string]int{}
		for r := range rounds {
			c, err := handles[0].Containers().Create(t.Context(), sampleContainer(scopeA, fmt.Sprintf("sweep-%d", r)))
			if err != nil {
				t.Fatal(err)
			}
			use := c.LastActiveAt.Add(time.Hour)
			var expired, touchErr error
			var marked bool
			var wg sync.WaitGroup
			start := make(chan struct{})
			// Replica A's sweep read c and expires it; replica B uses it.
			wg.Go(func() { <-start; marked, expired = handles[0].Containers().Expire(t.Context(), c.ID, c.LastActiveAt) })
			wg.Go(func() { <-start; touchErr = handles[1].Containers().Touch(t.Context(), scopeA, c.ID, use) })
			close(start)
			wg.Wait()
			if expired != nil || touchErr != nil {
				t.Fatal(expired, touchErr)
			}
			got, err := handles[r%2].Containers().Get(t.Context(), scopeA, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case marked && got.Status == store.StatusExpired && got.LastActiveAt.Equal(c.LastActiveAt):
				outcomes["expired first"]++
			case !marked && got.Status == c.Status && got.LastActiveAt.Equal(use):
				outcomes["touched first"]++
			default:
				t.Fatalf("round %d: Expire said %v, the row is %s last active %v (read %v, touched at %v)",
					r, marked, got.Status, got.LastActiveAt, c.LastActiveAt, use)
			}
		}
		t.Logf("outcomes over %d rounds: %v", rounds, outcomes)
	})
}

// raceHandles runs fn on perHandle goroutines per handle, released
// together, each with its own i (0 to len(handles)*perHandle-1), and waits
// for them all.
func raceHandles(handles []store.Store, perHandle int, fn func(st store.Store, i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for h, st := range handles {
		for w := range perHandle {
			wg.Go(func() {
				<-start
				fn(st, h*perHandle+w)
			})
		}
	}
	close(start)
	wg.Wait()
}
