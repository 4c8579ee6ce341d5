package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// Nodes is the conformance suite of store.Nodes: heartbeats, and the
// claim of a container's location, which two handles (two replicas) race
// for and exactly one wins.
func Nodes(t *testing.T, f Factory) {
	live := t0.Add(-10 * time.Second) // heartbeats after this are live
	t.Run("01 heartbeat round trip, list, restart", func(t *testing.T) {
		o := f(t)
		s := open(t, o)
		ns := s.Nodes()
		if _, err := ns.Get(t.Context(), "a"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown node: %v", err)
		}
		if err := ns.Heartbeat(t.Context(), "", "http://x", t0); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("empty id: %v", err)
		}
		for _, id := range []string{"b", "a"} {
			if err := ns.Heartbeat(t.Context(), id, "http://"+id+":1", t0); err != nil {
				t.Fatal(err)
			}
		}
		if err := ns.Heartbeat(t.Context(), "a", "http://a:2", t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		s = reopen(t, s, o)
		got, err := s.Nodes().Get(t.Context(), "a")
		if err != nil || got.URL != "http://a:2" || !got.HeartbeatAt.Equal(store.Truncate(t0.Add(time.Second))) || got.HeartbeatAt.Location() != time.UTC {
			t.Fatalf("node a: %+v %v", got, err)
		}
		list, err := s.Nodes().List(t.Context())
		if err != nil || len(list) != 2 || list[0].ID != "a" || list[1].ID != "b" {
			t.Fatalf("list: %+v %v", list, err)
		}
	})
	t.Run("02 claim, refuse while the holder lives, release, take over from a dead holder", func(t *testing.T) {
		s := open(t, f(t))
		ns := s.Nodes()
		c := created(t, s.Containers().Create, sampleContainer(scopeA, "located"))
		if loc, err := ns.Location(t.Context(), c.ID); err != nil || loc != (store.Node{}) {
			t.Fatalf("new container's location: %+v %v", loc, err)
		}
		if _, err := ns.Location(t.Context(), "cntr_missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown container: %v", err)
		}
		if _, err := ns.Claim(t.Context(), "cntr_missing", "a", live); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("claim of an unknown container: %v", err)
		}
		ns.Heartbeat(t.Context(), "a", "http://a", t0)
		ns.Heartbeat(t.Context(), "b", "http://b", t0)
		claim := func(node, want string) {
			t.Helper()
			if h, err := ns.Claim(t.Context(), c.ID, node, live); err != nil || h != want {
				t.Fatalf("claim by %s: holder %q, %v; want %q", node, h, err, want)
			}
		}
		claim("a", "a")
		claim("a", "a") // again: still a's
		claim("b", "a") // a is live
		loc, err := ns.Location(t.Context(), c.ID)
		if err != nil || loc.ID != "a" || loc.URL != "http://a" || !loc.HeartbeatAt.Equal(store.Truncate(t0)) {
			t.Fatalf("location: %+v %v", loc, err)
		}
		if err := ns.Release(t.Context(), c.ID, "b"); err != nil { // not b's: no effect
			t.Fatal(err)
		}
		claim("b", "a")
		if err := ns.Release(t.Context(), c.ID, "a"); err != nil {
			t.Fatal(err)
		}
		claim("b", "b")
		// b stops beating: a takes over once b's heartbeat is stale.
		claim("a", "b")
		ns.Heartbeat(t.Context(), "a", "http://a", t0.Add(time.Minute))
		if h, err := ns.Claim(t.Context(), c.ID, "a", t0.Add(30*time.Second)); err != nil || h != "a" {
			t.Fatalf("take over from a dead holder: %q %v", h, err)
		}
		// A holder that is no node at all is dead too.
		ns.Release(t.Context(), c.ID, "a")
		if h, err := ns.Claim(t.Context(), c.ID, "ghost", live); err != nil || h != "ghost" {
			t.Fatalf("%q %v", h, err)
		}
		if h, err := ns.Claim(t.Context(), c.ID, "a", live); err != nil || h != "a" {
			t.Fatalf("take over from a node with no heartbeat: %q %v", h, err)
		}
		if err := s.Containers().Delete(t.Context(), scopeA, c.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := ns.Location(t.Context(), c.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted container's location: %v", err)
		}
	})
	t.Run("03 two replicas race to wake one container: exactly one holds it", func(t *testing.T) {
		o := f(t)
		handles := []store.Store{open(t, o), open(t, o)}
		for i, h := range handles {
			if err := h.Nodes().Heartbeat(t.Context(), fmt.Sprint("n", i), "http://n", t0); err != nil {
				t.Fatal(err)
			}
		}
		for r := range 20 {
			c, err := handles[0].Containers().Create(t.Context(), sampleContainer(scopeA, fmt.Sprint("race-", r)))
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			won := map[string]int{}
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 8 {
				node := fmt.Sprint("n", i%2)
				st := handles[i%2]
				wg.Go(func() {
					<-start
					h, err := st.Nodes().Claim(t.Context(), c.ID, node, live)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						t.Errorf("claim: %v", err)
					}
					if h == node {
						won[node]++
					}
				})
			}
			close(start)
			wg.Wait()
			if len(won) != 1 {
				t.Fatalf("round %d: winners %v; want one node", r, won)
			}
		}
	})
}
