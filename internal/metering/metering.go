// Package metering is the billing arithmetic of SPEC §5, in integer
// micro-dollars (µ$; 1 USD = 1,000,000 µ$). Floats never touch money.
//
// Sandbox time costs $0.0001 per second, that is 100 µ$ per second or
// 0.1 µ$ per millisecond. A request is metered from its first sandbox
// command to the end of its response; a request with no command costs
// nothing, and time between requests (an idle container) is never
// metered. A request that had to start its container (new, or woken from
// sleep) pays at least 30 seconds (3,000 µ$); one that found it warm pays
// only its metered time.
//
// Rounding, always up so a request never pays for less than it used:
// metered time is counted in started milliseconds (1 ns → 1 ms), and the
// cost in started micro-dollars, one per started 10 ms. The largest
// overcharge is therefore under 1.1 µ$ per request.
//
// For example, a warm request whose first command starts at 12:00:00.000
// and whose response ends at 12:00:02.345 is metered 2,345 ms and costs
// 235 µ$; the same span on a woken container costs the 3,000 µ$ minimum.
package metering

import (
	"fmt"
	"math"
	"time"
)

const (
	// MicroUSDPerSecond is the price of one second of sandbox time.
	MicroUSDPerSecond = 100
	// MinColdMillis is the least time billed to a request that starts a
	// new or sleeping container.
	MinColdMillis = 30_000
	// MinColdMicroUSD is what MinColdMillis costs: $0.003.
	MinColdMicroUSD = MinColdMillis * MicroUSDPerSecond / 1000
)

// Start says what a request found when its first command ran.
type Start int

const (
	// Warm: the container was running; only metered time is billed.
	Warm Start = iota
	// New: the request created the container.
	New
	// Woken: the container was sleeping and the request woke it.
	Woken
)

// Cold reports whether the request started its container.
func (s Start) Cold() bool { return s == New || s == Woken }

func (s Start) String() string {
	switch s {
	case Warm:
		return "warm"
	case New:
		return "new"
	case Woken:
		return "woken"
	}
	return "unknown"
}

// Bill is the charge of one request on one container.
type Bill struct {
	MeteredMillis int64 // sandbox time measured, in started milliseconds
	BilledMillis  int64 // time charged: MeteredMillis, or the cold minimum
	CostMicroUSD  int64
	Start         Start
}

// Charge bills a request whose first command started at first and whose
// response ended at end. A zero first means no command ran: nothing is
// billed, whatever the start. An end before first (a clock step back)
// meters zero.
func Charge(first, end time.Time, start Start) Bill {
	if first.IsZero() {
		return Bill{Start: start}
	}
	return ChargeDuration(end.Sub(first), start)
}

// ChargeDuration bills d of metered time for a request that found its
// container in the given state.
func ChargeDuration(d time.Duration, start Start) Bill {
	ms := Millis(d)
	billed := ms
	if start.Cold() && billed < MinColdMillis {
		billed = MinColdMillis
	}
	return Bill{MeteredMillis: ms, BilledMillis: billed, CostMicroUSD: CostMillis(billed), Start: start}
}

// Millis is d in started milliseconds; negative durations are zero.
func Millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// CostMillis is the price of ms milliseconds in started micro-dollars:
// ceil(ms / 10). It cannot overflow for any non-negative int64.
func CostMillis(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	const msPerMicro = 1000 / MicroUSDPerSecond // 10
	return ms/msPerMicro + min(ms%msPerMicro, 1)
}

// Add sums micro-dollar amounts, saturating at math.MaxInt64 instead of
// wrapping, for ledger totals. Negative amounts are not money here and are
// ignored.
func Add(amounts ...int64) int64 {
	var sum int64
	for _, a := range amounts {
		if a <= 0 {
			continue
		}
		if sum > math.MaxInt64-a {
			return math.MaxInt64
		}
		sum += a
	}
	return sum
}

// USD formats micro-dollars as dollars with six decimal places
// ("0.003000"), for wire formats that carry cost_usd, without a float.
func USD(micro int64) string {
	sign, u := "", uint64(micro)
	if micro < 0 {
		sign, u = "-", -u // exact for math.MinInt64 too
	}
	return fmt.Sprintf("%s%d.%06d", sign, u/1_000_000, u%1_000_000)
}
