package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

type usage struct{ s *DB }

func (u usage) Record(ctx context.Context, e store.UsageEvent) error {
	if err := e.Prepare(time.Now()); err != nil {
		return err
	}
	if e.ID == "" {
		e.ID = store.NewID("use")
	}
	// Idempotent by its id: run again when its connection was lost.
	_, err := u.s.execIdempotent(ctx, `INSERT INTO usage_events (account, workspace, id, container_id, at_ms, day, kind, metered_ms, billed_ms, cost_micro_usd)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (account, workspace, id) DO NOTHING`,
		e.Scope.Account, e.Scope.Workspace, e.ID, e.ContainerID, store.Millis(e.At), store.Day(e.At), e.Kind,
		e.MeteredMillis, e.BilledMillis, e.CostMicroUSD)
	if err != nil {
		return fmt.Errorf("recording usage %s: %w", e.ID, err)
	}
	return nil
}

func (u usage) ByDay(ctx context.Context, scope store.Scope, from, to time.Time) ([]store.UsageTotal, error) {
	return u.totals(ctx, scope, from, to, "day", func(t *store.UsageTotal) *string { return &t.Day })
}

func (u usage) ByContainer(ctx context.Context, scope store.Scope, from, to time.Time) ([]store.UsageTotal, error) {
	return u.totals(ctx, scope, from, to, "container_id", func(t *store.UsageTotal) *string { return &t.ContainerID })
}

// totals groups the scope's events with from <= at < to by col (a zero
// from or to leaves that end open). The sums are cast to BIGINT because
// PostgreSQL's SUM of BIGINT is NUMERIC.
func (u usage) totals(ctx context.Context, scope store.Scope, from, to time.Time, col string, key func(*store.UsageTotal) *string) ([]store.UsageTotal, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if !from.IsZero() {
		lo = from.UnixMilli()
	}
	if !to.IsZero() {
		hi = to.UnixMilli()
	}
	q := `SELECT ` + col + `, COUNT(*), CAST(SUM(metered_ms) AS BIGINT), CAST(SUM(billed_ms) AS BIGINT), CAST(SUM(cost_micro_usd) AS BIGINT)
		FROM usage_events WHERE account = $1 AND workspace = $2 AND at_ms >= $3 AND at_ms < $4
		GROUP BY ` + col + ` ORDER BY ` + col
	var out []store.UsageTotal
	err := u.s.query(ctx, q, []any{scope.Account, scope.Workspace, lo, hi}, func(r *sql.Rows) error {
		var t store.UsageTotal
		if err := r.Scan(key(&t), &t.Events, &t.MeteredMillis, &t.BilledMillis, &t.CostMicroUSD); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("usage by %s: %w", col, err)
	}
	return out, nil
}
