// Package jsrunsql keeps jsrun's single-use continuation claims in an SQL
// database, so that a continuation resumes at most once across restarts and
// across processes sharing the database: SQLite (modernc.org/sqlite, WAL)
// under the data directory for the CLI and a one-machine server, and any
// database/sql database that speaks the same portable SQL (PostgreSQL) for
// the scale-out.
//
//	store, err := jsrunsql.OpenSQLite(ctx, filepath.Join(dataDir, "eval", "continuations.db"))
//	runner, err := jsrun.NewRunner(jsrun.Config{Secret: secret, Store: store})
//
// The table holds one row per resumed token: its ID (the token's nonce), when
// it was first resumed and until when the claim must be kept (the token's
// expiry plus the clock skew). Rows past that are deleted by Claim, at most
// once a minute, or by Sweep.
package jsrunsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/shellgate/shellgate/jsrun"
	"modernc.org/sqlite" // also registers the "sqlite" driver
)

// The SQL is kept to what SQLite and PostgreSQL share: $N placeholders
// (SQLite binds $N by position), BIGINT milliseconds rather than timestamp
// types, and INSERT ... ON CONFLICT DO NOTHING as the atomic claim.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS jsrun_continuation_claims (
		id            TEXT PRIMARY KEY,
		used_at_ms    BIGINT NOT NULL,
		expires_at_ms BIGINT NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS jsrun_continuation_claims_expiry ON jsrun_continuation_claims (expires_at_ms)`,
}

const (
	claimSQL   = `INSERT INTO jsrun_continuation_claims (id, used_at_ms, expires_at_ms) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`
	firstSQL   = `SELECT used_at_ms FROM jsrun_continuation_claims WHERE id = $1`
	releaseSQL = `DELETE FROM jsrun_continuation_claims WHERE id = $1`
	sweepSQL   = `DELETE FROM jsrun_continuation_claims WHERE expires_at_ms < $1`
)

// SweepEvery bounds how often Claim deletes expired claims.
const SweepEvery = time.Minute

// Store is a jsrun.ContinuationStore in an SQL database. It is safe for
// concurrent use, also by several processes sharing the database.
type Store struct {
	db  *sql.DB
	own bool

	mu        sync.Mutex
	lastSweep time.Time
}

var _ jsrun.ContinuationStore = (*Store)(nil)

// New creates the table in db if it is missing and returns a store on it.
// Close does not close db.
func New(ctx context.Context, db *sql.DB) (*Store, error) {
	for _, q := range schema {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("jsrunsql: creating schema: %w", err)
		}
	}
	return &Store{db: db}, nil
}

// OpenSQLite opens (creating if needed, mode 0600) the SQLite database at
// path in WAL mode, with a busy timeout so that processes claiming at the
// same moment wait for each other, and synchronous=FULL so that a claim is
// on disk before the resume it guards has any effect.
func OpenSQLite(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("jsrunsql: unusable database path %q", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("jsrunsql: %w", err)
	}
	// Create the file first so that it is private (SQLite gives the -wal and
	// -shm files the database's mode). Only a new file is opened here: an
	// existing one may be open in SQLite in this process, and closing another
	// descriptor of it would drop SQLite's POSIX locks.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("jsrunsql: %w", err)
	}
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, fmt.Errorf("jsrunsql: opening %s: %w", path, err)
	}
	// Switching a new database to WAL and creating the table take locks
	// for which SQLite does not always wait (its busy handler is skipped
	// where waiting could deadlock), so processes opening a new database at
	// the same moment retry here.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := New(ctx, db)
		if err == nil {
			s.own = true
			return s, nil
		}
		if !isBusy(err) || time.Now().After(deadline) || ctx.Err() != nil {
			db.Close()
			return nil, fmt.Errorf("%w (database %s)", err, path)
		}
		time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
	}
}

// isBusy reports SQLITE_BUSY or SQLITE_LOCKED (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == 5 || c == 6
}

// Claim records the first use of id; a second claim gets a *jsrun.UsedError
// with the time of the first. The insert is one atomic statement, so of any
// number of concurrent claims exactly one succeeds.
func (s *Store) Claim(ctx context.Context, id string, at, expiresAt time.Time) error {
	s.sweepIfDue(ctx, at)
	busyUntil := time.Now().Add(10 * time.Second)
	for range 3 {
		res, err := s.db.ExecContext(ctx, claimSQL, id, at.UnixMilli(), expiresAt.UnixMilli())
		for err != nil && isBusy(err) && time.Now().Before(busyUntil) && ctx.Err() == nil {
			time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
			res, err = s.db.ExecContext(ctx, claimSQL, id, at.UnixMilli(), expiresAt.UnixMilli())
		}
		if err != nil {
			return fmt.Errorf("jsrunsql: claiming continuation: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("jsrunsql: claiming continuation: %w", err)
		} else if n == 1 {
			return nil
		}
		var first int64
		err = s.db.QueryRowContext(ctx, firstSQL, id).Scan(&first)
		if errors.Is(err, sql.ErrNoRows) {
			continue // released (or swept) in between: claim again
		}
		if err != nil {
			return fmt.Errorf("jsrunsql: reading continuation claim: %w", err)
		}
		return &jsrun.UsedError{FirstUse: time.UnixMilli(first).UTC()}
	}
	return fmt.Errorf("jsrunsql: continuation claim of %s keeps changing", id)
}

// Release forgets the claim of id.
func (s *Store) Release(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, releaseSQL, id); err != nil {
		return fmt.Errorf("jsrunsql: releasing continuation: %w", err)
	}
	return nil
}

// Sweep deletes the claims that expired before now and returns how many.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, sweepSQL, now.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("jsrunsql: sweeping claims: %w", err)
	}
	return res.RowsAffected()
}

// sweepIfDue sweeps at most once per SweepEvery; a failed sweep is retried
// at the next claim and never fails the claim.
func (s *Store) sweepIfDue(ctx context.Context, now time.Time) {
	s.mu.Lock()
	due := s.lastSweep.IsZero() || now.Sub(s.lastSweep) >= SweepEvery || now.Before(s.lastSweep)
	if due {
		s.lastSweep = now
	}
	s.mu.Unlock()
	if due {
		if _, err := s.Sweep(ctx, now); err != nil {
			s.mu.Lock()
			s.lastSweep = time.Time{}
			s.mu.Unlock()
		}
	}
}

// Count returns the number of claims held (expired ones until swept).
func (s *Store) Count(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM jsrun_continuation_claims`).Scan(&n)
	return n, err
}

// Close closes the database if OpenSQLite opened it.
func (s *Store) Close() error {
	if s.own {
		return s.db.Close()
	}
	return nil
}
