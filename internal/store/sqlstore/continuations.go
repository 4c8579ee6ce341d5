package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shellgate/shellgate/jsrun"
)

// Continuations is jsrun's single-use continuation store in the server's
// own database (table continuation_claims, schema step 2), so that a
// continuation the server issued resumes at most once across restarts and
// across processes sharing the data directory, with no second database to
// keep. It has the semantics of jsrun/jsrunsql: one row per resumed token
// (its nonce), when it was first resumed and until when the claim must be
// kept; rows past that are deleted by Claim, at most once a minute.
type Continuations struct {
	s *DB

	mu        sync.Mutex
	lastSweep time.Time
}

var _ jsrun.ContinuationStore = (*Continuations)(nil)

// Continuations returns the continuation store on this database. Close the
// DB, not the store.
func (s *DB) Continuations() *Continuations { return &Continuations{s: s} }

// sweepClaimsEvery bounds how often Claim deletes expired claims.
const sweepClaimsEvery = time.Minute

// Claim records the first use of id; a second claim gets a *jsrun.UsedError
// with the time of the first. The insert is one atomic statement, so of any
// number of concurrent claims exactly one succeeds.
func (c *Continuations) Claim(ctx context.Context, id string, at, expiresAt time.Time) error {
	c.sweepIfDue(ctx, at)
	for range 3 {
		n, err := c.s.exec(ctx, `INSERT INTO continuation_claims (id, used_at_ms, expires_at_ms) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
			id, at.UnixMilli(), expiresAt.UnixMilli())
		if err != nil {
			return fmt.Errorf("claiming continuation: %w", err)
		}
		if n == 1 {
			return nil
		}
		var first int64
		err = c.s.queryRow(ctx, `SELECT used_at_ms FROM continuation_claims WHERE id = $1`, []any{id}, &first)
		if errors.Is(err, sql.ErrNoRows) {
			continue // released (or swept) in between: claim again
		}
		if err != nil {
			return fmt.Errorf("reading continuation claim: %w", err)
		}
		return &jsrun.UsedError{FirstUse: time.UnixMilli(first).UTC()}
	}
	return fmt.Errorf("continuation claim of %s keeps changing", id)
}

// Release forgets the claim of id (nothing to forget is not an error).
func (c *Continuations) Release(ctx context.Context, id string) error {
	if _, err := c.s.exec(ctx, `DELETE FROM continuation_claims WHERE id = $1`, id); err != nil {
		return fmt.Errorf("releasing continuation: %w", err)
	}
	return nil
}

// Sweep deletes the claims that expired before now and returns how many.
func (c *Continuations) Sweep(ctx context.Context, now time.Time) (int64, error) {
	n, err := c.s.exec(ctx, `DELETE FROM continuation_claims WHERE expires_at_ms < $1`, now.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("sweeping continuation claims: %w", err)
	}
	return n, nil
}

// sweepIfDue sweeps at most once per sweepClaimsEvery (and again when the
// clock went back); a failed sweep is retried at the next claim and never
// fails the claim.
func (c *Continuations) sweepIfDue(ctx context.Context, now time.Time) {
	c.mu.Lock()
	due := c.lastSweep.IsZero() || now.Sub(c.lastSweep) >= sweepClaimsEvery || now.Before(c.lastSweep)
	if due {
		c.lastSweep = now
	}
	c.mu.Unlock()
	if due {
		if _, err := c.Sweep(ctx, now); err != nil {
			c.mu.Lock()
			c.lastSweep = time.Time{}
			c.mu.Unlock()
		}
	}
}
