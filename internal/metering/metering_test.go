package metering

import (
	"math"
	"testing"
	"time"
)

func TestCharge(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		first, end  time.Time
		start       Start
		wantMetered int64
		wantBilled  int64
		wantCost    int64
	}{
		{"01 new container, short request: the 30 s minimum", t0, t0.Add(2 * time.Second), New, 2000, 30_000, 3000},
		{"02 woken container, short request: the 30 s minimum", t0, t0.Add(2 * time.Second), Woken, 2000, 30_000, 3000},
		{"03 warm container: metered time only", t0, t0.Add(2 * time.Second), Warm, 2000, 2000, 200},
		{"04 cold request longer than the minimum pays its time", t0, t0.Add(45 * time.Second), New, 45_000, 45_000, 4500},
		{"05 cold request of exactly 30 s", t0, t0.Add(30 * time.Second), Woken, 30_000, 30_000, 3000},
		{"06 warm request of 2.345 s: 235 started micro-dollars", t0, t0.Add(2345 * time.Millisecond), Warm, 2345, 2345, 235},
		{"07 one nanosecond is one started millisecond and one micro-dollar", t0, t0.Add(time.Nanosecond), Warm, 1, 1, 1},
		{"08 10 ms is exactly 1 micro-dollar", t0, t0.Add(10 * time.Millisecond), Warm, 10, 10, 1},
		{"09 10 ms and 1 ns is 11 started ms, 2 micro-dollars", t0, t0.Add(10*time.Millisecond + 1), Warm, 11, 11, 2},
		{"10 no command ran: free even on a new container", time.Time{}, t0, New, 0, 0, 0},
		{"11 zero-length warm request is free", t0, t0, Warm, 0, 0, 0},
		{"12 zero-length cold request still pays the minimum", t0, t0, New, 0, 30_000, 3000},
		{"13 end before first (clock stepped back) meters zero", t0, t0.Add(-time.Hour), Warm, 0, 0, 0},
		{"14 one hour warm: $0.36", t0, t0.Add(time.Hour), Warm, 3_600_000, 3_600_000, 360_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := Charge(c.first, c.end, c.start)
			if b.MeteredMillis != c.wantMetered || b.BilledMillis != c.wantBilled || b.CostMicroUSD != c.wantCost || b.Start != c.start {
				t.Fatalf("Charge = %+v, want metered %d billed %d cost %d", b, c.wantMetered, c.wantBilled, c.wantCost)
			}
		})
	}
}

// Idle time between requests is free: a container used by two warm
// requests an hour apart pays for the two requests only.
func TestIdleIsFree(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	first := Charge(t0, t0.Add(3*time.Second), New)
	second := Charge(t0.Add(time.Hour), t0.Add(time.Hour+4*time.Second), Warm)
	if got := Add(first.CostMicroUSD, second.CostMicroUSD); got != 3000+400 {
		t.Fatalf("two requests an hour apart cost %d µ$, want 3400", got)
	}
	whole := Charge(t0, t0.Add(time.Hour+4*time.Second), Warm)
	if whole.CostMicroUSD <= 3400 {
		t.Fatalf("the span including idle time should cost more than the two requests: %d", whole.CostMicroUSD)
	}
}

func TestOverflowSafe(t *testing.T) {
	maxD := time.Duration(math.MaxInt64)
	b := ChargeDuration(maxD, Warm)
	wantMs := int64(maxD/time.Millisecond) + 1 // 9223372036854 ms and a part
	if b.MeteredMillis != wantMs || b.CostMicroUSD != (wantMs+9)/10 || b.CostMicroUSD <= 0 {
		t.Fatalf("ChargeDuration(max) = %+v", b)
	}
	if got := CostMillis(math.MaxInt64); got != math.MaxInt64/10+1 {
		t.Fatalf("CostMillis(MaxInt64) = %d", got)
	}
	if got := CostMillis(-5); got != 0 {
		t.Fatalf("CostMillis(-5) = %d", got)
	}
	if got := Add(math.MaxInt64-1, 5); got != math.MaxInt64 {
		t.Fatalf("Add did not saturate: %d", got)
	}
	if got := Add(1, -7, 2); got != 3 {
		t.Fatalf("Add(1, -7, 2) = %d, want 3 (negative amounts ignored)", got)
	}
	// The minimum is consistent with the price.
	if MinColdMicroUSD != 3000 || CostMillis(MinColdMillis) != MinColdMicroUSD {
		t.Fatalf("minimum %d µ$, CostMillis(30 s) = %d", MinColdMicroUSD, CostMillis(MinColdMillis))
	}
}

func TestUSD(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{
		{0, "0.000000"},
		{1, "0.000001"},
		{3000, "0.003000"},
		{1_234_567, "1.234567"},
		{-100, "-0.000100"},
		{math.MinInt64, "-9223372036854.775808"},
		{math.MaxInt64, "9223372036854.775807"},
	} {
		if got := USD(c.in); got != c.want {
			t.Errorf("USD(%d) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestStart(t *testing.T) {
	for _, c := range []struct {
		s    Start
		cold bool
		name string
	}{{Warm, false, "warm"}, {New, true, "new"}, {Woken, true, "woken"}, {Start(9), false, "unknown"}} {
		if c.s.Cold() != c.cold || c.s.String() != c.name {
			t.Errorf("%d: Cold %v String %q", c.s, c.s.Cold(), c.s.String())
		}
	}
}
