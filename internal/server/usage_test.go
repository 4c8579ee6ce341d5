package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// getUsage reads GET /api/v1/usage with query q (may be empty).
func (e *env) getUsage(key, q string) usageResponse {
	e.t.Helper()
	var u usageResponse
	st, b := e.do("GET", "/api/v1/usage"+q, key, nil)
	e.must(st, b, &u)
	return u
}

// sumOf adds up exec answers' usage as the ledger should.
func sumOf(rs ...execResponse) usageTotal {
	var t usageTotal
	for _, r := range rs {
		t.Events++
		t.MeteredMs += r.Usage.MeteredMs
		t.BilledMs += r.Usage.BilledMs
		t.CostMicroUSD += r.Usage.CostMicroUSD
	}
	return t
}

func checkTotal(t *testing.T, what string, got, want usageTotal) {
	t.Helper()
	if got.Events != want.Events || got.MeteredMs != want.MeteredMs || got.BilledMs != want.BilledMs || got.CostMicroUSD != want.CostMicroUSD {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
	if usd := fmt.Sprintf("%d.%06d", got.CostMicroUSD/1e6, got.CostMicroUSD%1e6); string(got.CostUSD) != usd {
		t.Fatalf("%s: cost_usd %s for %d µ$", what, got.CostUSD, got.CostMicroUSD)
	}
}

func TestUsageAPI(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	e.create(e.keyA, "u1")
	e.create(e.keyA, "u2")
	e.create(e.keyB, "u1")
	r1 := e.exec(e.keyA, "u1", "true")            // new: at least 30 s
	r2 := e.exec(e.keyA, "u1", "echo hi", "true") // warm
	r3 := e.exec(e.keyA, "u2", "true")            // new
	rb := e.exec(e.keyB, "u1", "true", "true")    // workspace b's
	if r1.Usage.ContainerStart != "new" || r2.Usage.ContainerStart != "warm" || r3.Usage.ContainerStart != "new" {
		t.Fatalf("starts: %s %s %s", r1.Usage.ContainerStart, r2.Usage.ContainerStart, r3.Usage.ContainerStart)
	}
	// The ledger write follows each answer; the calls have ended once
	// WaitCalls returns.
	if err := e.srv.WaitCalls(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A deleted container keeps its lines in the ledger.
	if st, b := e.do("DELETE", "/api/v1/containers/u2", e.keyA, nil); st != http.StatusOK {
		t.Fatalf("delete: %d %s", st, b)
	}

	today := time.Now().UTC()
	day := func(d int) string { return today.AddDate(0, 0, d).Format(time.DateOnly) }

	t.Run("01 the ledger matches the exec answers, by container and by day", func(t *testing.T) {
		u := e.getUsage(e.keyA, "")
		if u.Object != "usage" || u.To != today.Format(time.DateOnly) || u.From != day(-29) {
			t.Fatalf("default range: %+v", u)
		}
		checkTotal(t, "total", u.Total, sumOf(r1, r2, r3))
		if len(u.ByContainer) != 2 {
			t.Fatalf("by_container: %+v", u.ByContainer)
		}
		want := map[string]usageTotal{r1.ContainerID: sumOf(r1, r2), r3.ContainerID: sumOf(r3)}
		for _, c := range u.ByContainer {
			w, ok := want[c.ContainerID]
			if !ok {
				t.Fatalf("a line for container %s: %+v", c.ContainerID, u.ByContainer)
			}
			checkTotal(t, c.ContainerID, c, w)
			if c.Day != "" {
				t.Fatalf("a container line with a day: %+v", c)
			}
		}
		// Calls made around midnight UTC fall on two days; the days
		// together are the total either way.
		var days usageTotal
		for _, d := range u.ByDay {
			if (d.Day != day(0) && d.Day != day(-1)) || d.ContainerID != "" {
				t.Fatalf("day line %+v", d)
			}
			days.Events += d.Events
			days.MeteredMs += d.MeteredMs
			days.BilledMs += d.BilledMs
			days.CostMicroUSD += d.CostMicroUSD
		}
		days.CostUSD = u.Total.CostUSD
		checkTotal(t, "days", days, u.Total)
	})

	t.Run("02 another workspace's usage is never visible", func(t *testing.T) {
		u := e.getUsage(e.keyB, "")
		checkTotal(t, "workspace b", u.Total, sumOf(rb))
		if len(u.ByContainer) != 1 || u.ByContainer[0].ContainerID != rb.ContainerID {
			t.Fatalf("workspace b sees %+v", u.ByContainer)
		}
		// A workspace with no charges has an empty ledger, not an error.
		u = e.getUsage(e.newKey("acme", "c"), "")
		if u.Total.Events != 0 || u.Total.CostUSD != "0.000000" || len(u.ByDay) != 0 || len(u.ByContainer) != 0 {
			t.Fatalf("a new workspace: %+v", u)
		}
	})

	t.Run("03 from and to select whole UTC days, both included", func(t *testing.T) {
		u := e.getUsage(e.keyA, "?from="+day(-1)+"&to="+day(1))
		if u.From != day(-1) || u.To != day(1) {
			t.Fatalf("range echoed as %s..%s", u.From, u.To)
		}
		checkTotal(t, "around today", u.Total, sumOf(r1, r2, r3))
		u = e.getUsage(e.keyA, "?from="+day(1)+"&to="+day(2))
		if u.To != day(2) || u.Total.Events != 0 || len(u.ByDay) != 0 || len(u.ByContainer) != 0 {
			t.Fatalf("tomorrow only: %+v", u)
		}
		u = e.getUsage(e.keyA, "?from=2020-01-01&to=2020-12-31")
		if u.Total.Events != 0 || len(u.ByDay) != 0 {
			t.Fatalf("2020: %+v", u)
		}
	})

	t.Run("04 bad parameters are 400 in the envelope", func(t *testing.T) {
		for _, c := range []struct{ q, msg string }{
			{"?from=2026-13-01", "YYYY-MM-DD"},
			{"?to=2026/12/01", "YYYY-MM-DD"},
			{"?from=yesterday", "YYYY-MM-DD"},
			{"?from=2026-12-01T00:00:00Z", "YYYY-MM-DD"},
			{"?from=" + day(0) + "&to=" + day(-1), "after"},
			{"?from=2024-01-01&to=2025-01-01", "at most 366"},
			{"?from=" + day(0) + "&from=" + day(-1), "2 times"},
			{"?day=" + day(0), "unknown query parameter"},
		} {
			st, b := e.do("GET", "/api/v1/usage"+c.q, e.keyA, nil)
			if st != http.StatusBadRequest {
				t.Fatalf("%s: %d %s", c.q, st, b)
			}
			if m := envelope(t, st, b); !strings.Contains(m, c.msg) {
				t.Fatalf("%s: message %q, want it to say %q", c.q, m, c.msg)
			}
		}
		// 366 days, both ends included, is the largest range.
		e.getUsage(e.keyA, "?from=2024-01-01&to=2024-12-31")
		st, b := e.do("GET", "/api/v1/usage", "", nil)
		if st != http.StatusUnauthorized {
			t.Fatalf("no key: %d %s", st, b)
		}
		envelope(t, st, b)
		st, b = e.do("POST", "/api/v1/usage", e.keyA, nil)
		if st != http.StatusMethodNotAllowed {
			t.Fatalf("POST: %d %s", st, b)
		}
		envelope(t, st, b)
	})
}
