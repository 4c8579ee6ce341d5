package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/shellgate/shellgate/internal/metering"
)

// The usage route's range: whole UTC days, both ends included.
const (
	// defaultUsageDays is the range without from: the 30 days ending with to.
	defaultUsageDays = 30
	// maxUsageDays bounds one request's range.
	maxUsageDays = 366
)

// usageTotal is one line of the ledger: a day's or a container's totals.
type usageTotal struct {
	Day          string      `json:"day,omitempty"`
	ContainerID  string      `json:"container_id,omitempty"`
	Events       int64       `json:"events"`
	MeteredMs    int64       `json:"metered_ms"`
	BilledMs     int64       `json:"billed_ms"`
	CostMicroUSD int64       `json:"cost_micro_usd"`
	CostUSD      json.Number `json:"cost_usd"`
}

type usageResponse struct {
	Object      string       `json:"object"` // "usage"
	From        string       `json:"from"`
	To          string       `json:"to"`
	Total       usageTotal   `json:"total"`
	ByDay       []usageTotal `json:"by_day"`
	ByContainer []usageTotal `json:"by_container"`
}

func totalOf(t UsageTotal) usageTotal {
	return usageTotal{Day: t.Day, ContainerID: t.ContainerID, Events: t.Events, MeteredMs: t.MeteredMillis,
		BilledMs: t.BilledMillis, CostMicroUSD: t.CostMicroUSD, CostUSD: json.Number(metering.USD(t.CostMicroUSD))}
}

// usageRange reads ?from=YYYY-MM-DD&to=YYYY-MM-DD (UTC days, both
// included; to defaults to today, from to 29 days before to) and returns
// the half-open time range [from 00:00, the day after to 00:00).
func usageRange(r *http.Request, now time.Time) (from, to time.Time, err error) {
	q := r.URL.Query()
	for k, v := range q {
		switch k {
		case "from", "to":
			if len(v) > 1 {
				return from, to, errorf(http.StatusBadRequest, "query parameter %q given %d times", k, len(v))
			}
		default:
			return from, to, errorf(http.StatusBadRequest, "unknown query parameter %q (want from, to)", k)
		}
	}
	day := func(name string) (time.Time, bool, error) {
		v := q.Get(name)
		if v == "" {
			return time.Time{}, false, nil
		}
		t, err := time.Parse(time.DateOnly, v)
		if err != nil {
			return time.Time{}, false, errorf(http.StatusBadRequest, "%s %q: want a UTC date YYYY-MM-DD", name, v)
		}
		return t, true, nil
	}
	last, ok, err := day("to")
	if err != nil {
		return from, to, err
	}
	if !ok {
		last, _ = time.Parse(time.DateOnly, now.UTC().Format(time.DateOnly))
	}
	first, ok, err := day("from")
	if err != nil {
		return from, to, err
	}
	if !ok {
		first = last.AddDate(0, 0, -(defaultUsageDays - 1))
	}
	if first.After(last) {
		return from, to, errorf(http.StatusBadRequest, "from %s is after to %s", first.Format(time.DateOnly), last.Format(time.DateOnly))
	}
	if days := int(last.Sub(first).Hours()/24) + 1; days > maxUsageDays {
		return from, to, errorf(http.StatusBadRequest, "from %s to %s is %d days: at most %d per request",
			first.Format(time.DateOnly), last.Format(time.DateOnly), days, maxUsageDays)
	}
	return first, last.AddDate(0, 0, 1), nil
}

// usage answers the caller's workspace ledger over a range of UTC days:
// totals, by day (oldest first) and by container (by id). Only the key's
// workspace is read; containers deleted since keep their lines.
func (s *Server) usage(w http.ResponseWriter, r *http.Request, p Principal) error {
	from, to, err := usageRange(r, time.Now())
	if err != nil {
		return err
	}
	if s.cfg.Ledger == nil {
		return errorf(http.StatusNotFound, "this server keeps no usage ledger")
	}
	byDay, byContainer, err := s.cfg.Ledger.Totals(r.Context(), p, from, to)
	if err != nil {
		return fmt.Errorf("reading usage: %w", err)
	}
	out := usageResponse{Object: "usage", From: from.Format(time.DateOnly), To: to.AddDate(0, 0, -1).Format(time.DateOnly),
		ByDay: make([]usageTotal, 0, len(byDay)), ByContainer: make([]usageTotal, 0, len(byContainer))}
	var sum UsageTotal
	for _, t := range byDay {
		out.ByDay = append(out.ByDay, totalOf(t))
		sum.Events += t.Events
		sum.MeteredMillis = metering.Add(sum.MeteredMillis, t.MeteredMillis)
		sum.BilledMillis = metering.Add(sum.BilledMillis, t.BilledMillis)
		sum.CostMicroUSD = metering.Add(sum.CostMicroUSD, t.CostMicroUSD)
	}
	for _, t := range byContainer {
		out.ByContainer = append(out.ByContainer, totalOf(t))
	}
	out.Total = totalOf(sum)
	writeJSON(w, http.StatusOK, out)
	return nil
}
