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
// once a minute, or by Sweep. The server keeps the same claims in a table of
// its own database through NewOn (internal/store/sqlstore).
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

// SweepEvery bounds how often Claim deletes expired claims.
const SweepEvery = time.Minute

// Conn is what a Store runs its statements through. New and OpenSQLite
// use a *sql.DB (retrying a busy SQLite database); a program that keeps
// the claims in a database of its own passes its own Conn to NewOn, with
// that database's locking and retries.
type Conn interface {
	// Exec runs a statement and returns how many rows it affected.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
	// QueryRow runs a query of one row and scans it into dest; no row is
	// sql.ErrNoRows.
	QueryRow(ctx context.Context, q string, args []any, dest ...any) error
}

// Store is a jsrun.ContinuationStore in an SQL database. It is safe for
// concurrent use, also by several processes sharing the database.
type Store struct {
	conn  Conn
	close func() error // nil: the caller closes the database

	claimSQL, firstSQL, releaseSQL, sweepSQL, countSQL string

	mu        sync.Mutex
	lastSweep time.Time
}

var _ jsrun.ContinuationStore = (*Store)(nil)

// NewOn returns a store on the claims table named table, which the caller
// has created with the columns id (TEXT PRIMARY KEY), used_at_ms and
// expires_at_ms (BIGINT NOT NULL, Unix milliseconds), reached through
// conn. Close does nothing.
func NewOn(conn Conn, table string) *Store {
	return &Store{
		conn:       conn,
		claimSQL:   `INSERT INTO ` + table + ` (id, used_at_ms, expires_at_ms) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
		firstSQL:   `SELECT used_at_ms FROM ` + table + ` WHERE id = $1`,
		releaseSQL: `DELETE FROM ` + table + ` WHERE id = $1`,
		sweepSQL:   `DELETE FROM ` + table + ` WHERE expires_at_ms < $1`,
		countSQL:   `SELECT COUNT(*) FROM ` + table,
	}
}

// New creates the table jsrun_continuation_claims in db if it is missing
// and returns a store on it. Close does not close db.
func New(ctx context.Context, db *sql.DB) (*Store, error) {
	for _, q := range schema {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("jsrunsql: creating schema: %w", err)
		}
	}
	return NewOn(dbConn{db}, "jsrun_continuation_claims"), nil
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
			s.close = db.Close
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

// dbConn runs statements on a *sql.DB; a busy SQLite database is tried
// again for up to ten seconds.
type dbConn struct{ db *sql.DB }

func (c dbConn) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	busyUntil := time.Now().Add(10 * time.Second)
	res, err := c.db.ExecContext(ctx, q, args...)
	for err != nil && isBusy(err) && time.Now().Before(busyUntil) && ctx.Err() == nil {
		time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
		res, err = c.db.ExecContext(ctx, q, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c dbConn) QueryRow(ctx context.Context, q string, args []any, dest ...any) error {
	return c.db.QueryRowContext(ctx, q, args...).Scan(dest...)
}

// Claim records the first use of id; a second claim gets a *jsrun.UsedError
// with the time of the first. The insert is one atomic statement, so of any
// number of concurrent claims exactly one succeeds.
func (s *Store) Claim(ctx context.Context, id string, at, expiresAt time.Time) error {
	s.sweepIfDue(ctx, at)
	for range 3 {
		n, err := s.conn.Exec(ctx, s.claimSQL, id, at.UnixMilli(), expiresAt.UnixMilli())
		if err != nil {
			return fmt.Errorf("jsrunsql: claiming continuation: %w", err)
		}
		if n == 1 {
			return nil
		}
		var first int64
		err = s.conn.QueryRow(ctx, s.firstSQL, []any{id}, &first)
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

// Release forgets the claim of id (nothing to forget is not an error).
func (s *Store) Release(ctx context.Context, id string) error {
	if _, err := s.conn.Exec(ctx, s.releaseSQL, id); err != nil {
		return fmt.Errorf("jsrunsql: releasing continuation: %w", err)
	}
	return nil
}

// Sweep deletes the claims that expired before now and returns how many.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int64, error) {
	n, err := s.conn.Exec(ctx, s.sweepSQL, now.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("jsrunsql: sweeping claims: %w", err)
	}
	return n, nil
}

// sweepIfDue sweeps at most once per SweepEvery (and again when the clock
// went back); a failed sweep is retried at the next claim and never fails
// the claim.
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
	err := s.conn.QueryRow(ctx, s.countSQL, nil, &n)
	return n, err
}

// Close closes the database if OpenSQLite opened it.
func (s *Store) Close() error {
	if s.close != nil {
		return s.close()
	}
	return nil
}
