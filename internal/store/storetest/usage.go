package storetest

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// Usage is the conformance suite of store.Usage.
func Usage(t *testing.T, f Factory) {
	midnight := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	ev := func(sc store.Scope, container string, at time.Time, cost int64) store.UsageEvent {
		return store.UsageEvent{Scope: sc, ContainerID: container, At: at, MeteredMillis: cost * 10, BilledMillis: cost * 10, CostMicroUSD: cost, Kind: "exec"}
	}
	// A ledger across a UTC midnight and two containers; one event is
	// given in another zone (00:30 at UTC+2 is still Dec 1 in UTC).
	ledger := []store.UsageEvent{
		ev(scopeA, "cntr_a", midnight.Add(-10*time.Hour), 3000),
		ev(scopeA, "cntr_b", midnight.Add(-time.Millisecond), 200),
		ev(scopeA, "cntr_a", time.Date(2026, 12, 2, 0, 30, 0, 0, time.FixedZone("UTC+2", 2*3600)), 5),
		ev(scopeA, "cntr_a", midnight, 40),
		ev(scopeA, "cntr_b", midnight.Add(26*time.Hour), 1),
		ev(scopeB, "cntr_a", midnight, 999_999), // another tenant, same container id
		ev(scopeC, "cntr_z", midnight, 777),
	}
	record := func(t *testing.T, s store.Store) {
		t.Helper()
		for _, e := range ledger {
			if err := s.Usage().Record(t.Context(), e); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantDays := []store.UsageTotal{
		{Day: "2026-12-01", Events: 3, MeteredMillis: 32050, BilledMillis: 32050, CostMicroUSD: 3205},
		{Day: "2026-12-02", Events: 1, MeteredMillis: 400, BilledMillis: 400, CostMicroUSD: 40},
		{Day: "2026-12-03", Events: 1, MeteredMillis: 10, BilledMillis: 10, CostMicroUSD: 1},
	}
	wantContainers := []store.UsageTotal{
		{ContainerID: "cntr_a", Events: 3, MeteredMillis: 30450, BilledMillis: 30450, CostMicroUSD: 3045},
		{ContainerID: "cntr_b", Events: 2, MeteredMillis: 2010, BilledMillis: 2010, CostMicroUSD: 201},
	}
	check := func(t *testing.T, s store.Store, from, to time.Time, days, containers []store.UsageTotal) {
		t.Helper()
		d, err := s.Usage().ByDay(t.Context(), scopeA, from, to)
		if err != nil || !reflect.DeepEqual(d, days) {
			t.Fatalf("ByDay(%v, %v) = %+v, %v\nwant %+v", from, to, d, err, days)
		}
		c, err := s.Usage().ByContainer(t.Context(), scopeA, from, to)
		if err != nil || !reflect.DeepEqual(c, containers) {
			t.Fatalf("ByContainer(%v, %v) = %+v, %v\nwant %+v", from, to, c, err, containers)
		}
	}
	t.Run("01 totals by UTC day and by container, scoped", func(t *testing.T) {
		s := open(t, f(t))
		record(t, s)
		check(t, s, time.Time{}, time.Time{}, wantDays, wantContainers)
		// Another account's workspace of the same name sees only its own.
		d, err := s.Usage().ByDay(t.Context(), scopeC, time.Time{}, time.Time{})
		if err != nil || !reflect.DeepEqual(d, []store.UsageTotal{{Day: "2026-12-02", Events: 1, MeteredMillis: 7770, BilledMillis: 7770, CostMicroUSD: 777}}) {
			t.Fatalf("scope C by day: %+v, %v", d, err)
		}
		if c, err := s.Usage().ByContainer(t.Context(), store.Scope{Account: "nobody", Workspace: "w"}, time.Time{}, time.Time{}); err != nil || len(c) != 0 {
			t.Fatalf("a scope without events: %+v, %v", c, err)
		}
	})
	t.Run("02 from is inclusive, to exclusive", func(t *testing.T) {
		s := open(t, f(t))
		record(t, s)
		check(t, s, midnight, midnight.Add(26*time.Hour),
			[]store.UsageTotal{{Day: "2026-12-02", Events: 1, MeteredMillis: 400, BilledMillis: 400, CostMicroUSD: 40}},
			[]store.UsageTotal{{ContainerID: "cntr_a", Events: 1, MeteredMillis: 400, BilledMillis: 400, CostMicroUSD: 40}})
		check(t, s, midnight.Add(time.Hour), midnight.Add(2*time.Hour), nil, nil)
	})
	t.Run("03 recording an id twice bills once; ids are per scope", func(t *testing.T) {
		s := open(t, f(t))
		e := ev(scopeA, "cntr_a", midnight, 100)
		e.ID = "use_retry"
		for range 3 {
			if err := s.Usage().Record(t.Context(), e); err != nil {
				t.Fatal(err)
			}
		}
		other := ev(scopeB, "cntr_a", midnight, 100)
		other.ID = "use_retry"
		if err := s.Usage().Record(t.Context(), other); err != nil {
			t.Fatal(err)
		}
		for _, sc := range []store.Scope{scopeA, scopeB} {
			c, err := s.Usage().ByContainer(t.Context(), sc, time.Time{}, time.Time{})
			if err != nil || len(c) != 1 || c[0].Events != 1 || c[0].CostMicroUSD != 100 {
				t.Fatalf("%+v: %+v, %v", sc, c, err)
			}
		}
	})
	t.Run("04 invalid events", func(t *testing.T) {
		s := open(t, f(t))
		for name, e := range map[string]store.UsageEvent{
			"no scope":      {ContainerID: "c", CostMicroUSD: 1},
			"negative cost": {Scope: scopeA, ContainerID: "c", CostMicroUSD: -1},
			"negative time": {Scope: scopeA, ContainerID: "c", MeteredMillis: -5},
		} {
			wantErr(t, s.Usage().Record(t.Context(), e), store.ErrInvalid, name)
		}
		if d, err := s.Usage().ByDay(t.Context(), scopeA, time.Time{}, time.Time{}); err != nil || len(d) != 0 {
			t.Fatalf("invalid events were recorded: %+v, %v", d, err)
		}
	})
	t.Run("05 restart keeps the ledger", func(t *testing.T) {
		o := f(t)
		s := open(t, o)
		record(t, s)
		s = reopen(t, s, o)
		check(t, s, time.Time{}, time.Time{}, wantDays, wantContainers)
	})
	t.Run("06 concurrent writers on two handles lose nothing", func(t *testing.T) {
		o := f(t)
		handles := []store.Store{open(t, o), open(t, o)}
		const writers, each = 4, 25
		var wg sync.WaitGroup
		errs := make(chan error, 2*writers*each)
		for _, st := range handles {
			for range writers {
				wg.Go(func() {
					for range each {
						if err := st.Usage().Record(t.Context(), ev(scopeA, "cntr_hot", midnight, 3)); err != nil {
							errs <- err
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		c, err := handles[0].Usage().ByContainer(t.Context(), scopeA, time.Time{}, time.Time{})
		const n = 2 * writers * each
		if err != nil || len(c) != 1 || c[0].Events != n || c[0].CostMicroUSD != 3*n {
			t.Fatalf("after %d concurrent records: %+v, %v", n, c, err)
		}
	})
}
