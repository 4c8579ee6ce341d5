// Package sqlstore implements store.Store on database/sql with SQL that
// SQLite and PostgreSQL share (see schema.go). OpenSQLite opens the
// embedded default, DATA/shellgate.db (modernc.org/sqlite, no cgo);
// OpenPostgres opens a PostgreSQL database (jackc/pgx/v5) that several
// gateway replicas share, and runs the same statements.
//
//	st, err := sqlstore.OpenSQLite(ctx, dataDir) // or OpenPostgres(ctx, "postgres://...")
//	defer st.Close()
//	key, token, err := st.Keys().Create(ctx, store.Scope{Account: "acme", Workspace: "prod"})
//
// Several processes may use one data directory at once (the CLI and the
// server): SQLite runs in WAL mode, writers wait for each other (busy
// timeout, write transactions take the lock up front), and statements
// that still meet a busy database are retried for a bounded time.
//
// # SQLite and PostgreSQL
//
//   - `internal/store/sqlstore` implements `Store` with SQL that SQLite and
//     PostgreSQL share: TEXT and BIGINT columns, times as unix milliseconds UTC,
//     money as integer micro-dollars, `$N` placeholders, versioned migrations
//     (`schema.go`, append-only, applied in one transaction; a newer schema is
//     refused). `OpenSQLite` opens `DATA/shellgate.db` (modernc.org/sqlite) in
//     WAL mode with `synchronous=FULL`, a busy timeout, `BEGIN IMMEDIATE` and a
//     bounded retry on busy, so the CLI and the server share it; a process
//     queues its own writes on a mutex, so that concurrent writers wait in order
//     instead of polling in SQLite's busy handler (which starved some for
//     seconds under 100 concurrent exec sessions). `OpenPostgres` runs the same
//     statements on PostgreSQL through `jackc/pgx/v5`'s `database/sql` driver
//     (`postgres.go`: 23505 is a conflict, 40001/40P01 are retried like a busy
//     SQLite, at most 16 connections a handle; the write mutex is SQLite-only),
//     for several gateway replicas on one database (`serve --database` or
//     `$SHELLGATE_DATABASE`). Its migration first takes
//     `pg_advisory_xact_lock`, so replicas starting at once migrate once (two
//     concurrent `CREATE TABLE IF NOT EXISTS` can both fail on PostgreSQL).
//   - Replicas racing for one row lose nothing, and no statement needed a
//     change for it, because every write is one statement whose outcome the
//     database decides: a container name and a usage id are unique keys (the
//     loser gets `ErrConflict`; `ON CONFLICT DO NOTHING` keeps the first usage
//     event); a continuation claim is `INSERT ... ON CONFLICT DO NOTHING` (one
//     row, one winner); `Touch` and `Expire` are conditional `UPDATE`s (`WHERE
//     last use < t`, `WHERE last_active_at_ms = what the sweep read`), and at
//     READ COMMITTED PostgreSQL takes the row lock, then re-evaluates the WHERE
//     and the SET expressions on the newest row version, so two touches never
//     both apply to the old row and a touch and an expiry never both win.
//     `Update` writes the whole record (last writer wins, by contract); the
//     server uses it only to rename a container it has just created, before
//     its id is known to anyone. `storetest.Replicas` races each of these
//     through two handles on both databases.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// DB is a store.Store on an SQL database. It is safe for concurrent use.
type DB struct {
	db      *sql.DB
	dialect dialect
	// wmu queues this process's writes on SQLite, which allows one writer
	// at a time: without it, concurrent writers on the pool's connections
	// wait in SQLite's busy handler, which sleeps and polls, and under
	// load some wait seconds while others get through (writes from other
	// processes still meet the busy timeout).
	wmu sync.Mutex
}

var _ store.Store = (*DB)(nil)

// dialect is what differs between databases: how they report a busy
// database and a uniqueness violation, and how the migration keeps other
// processes out.
type dialect struct {
	name     string
	isBusy   func(error) bool
	isUnique func(error) bool
	// isGone, when set, reports an error of a connection the server
	// ended (a restart, a failover, pg_terminate_backend): the pool's
	// other idle connections are most likely dead too.
	isGone func(error) bool
	// migrateLock, when set, is the first statement of the migration's
	// transaction: it waits for any other process's migration to commit.
	// SQLite needs none: its transactions take the write lock up front.
	migrateLock string
	// scopeLock, when set, is the first statement of a scope's capped
	// write (scopeTx), with the scope's lock key as $1: it waits for the
	// scope's other capped writes to commit. SQLite needs none, for the
	// same reason.
	scopeLock string
}

// busyFor bounds how long a statement is retried while the database is busy.
const busyFor = 15 * time.Second

// newDB migrates db to the current schema and returns a store on it. On
// failure it closes db and says where (which database) it failed.
func newDB(ctx context.Context, db *sql.DB, d dialect, where string) (*DB, error) {
	s := &DB{db: db, dialect: d}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w (%s)", err, where)
	}
	return s, nil
}

func (s *DB) Keys() store.Keys             { return keys{s} }
func (s *DB) Containers() store.Containers { return containers{s} }
func (s *DB) Files() store.Files           { return files{s} }
func (s *DB) Usage() store.Usage           { return usage{s} }
func (s *DB) Guardrails() store.Guardrails { return guardrails{s} }
func (s *DB) Logs() store.Logs             { return logs{s} }
func (s *DB) Nodes() store.Nodes           { return nodes{s} }

// Close closes the database.
func (s *DB) Close() error { return s.db.Close() }

// SchemaVersion returns the schema version the database is at.
func (s *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

// migrate applies the pending steps of migrations in one transaction, so
// that of several processes opening a new database at once one migrates
// and the others find it done (on PostgreSQL under an advisory lock, since
// two concurrent CREATE TABLE IF NOT EXISTS can both fail there).
func (s *DB) migrate(ctx context.Context) error {
	err := s.retry(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if d := s.dialect.migrateLock; d != "" {
			if _, err := tx.ExecContext(ctx, d); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version       BIGINT PRIMARY KEY,
			applied_at_ms BIGINT NOT NULL
		)`); err != nil {
			return err
		}
		var v int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
			return err
		}
		if v > len(migrations) {
			return fmt.Errorf("the database's schema is version %d, newer than this binary's %d: upgrade shellgate", v, len(migrations))
		}
		if v == len(migrations) {
			return nil
		}
		for i := v; i < len(migrations); i++ {
			for _, q := range migrations[i] {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return fmt.Errorf("schema step %d: %w", i+1, err)
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at_ms) VALUES ($1, $2)`, i+1, time.Now().UnixMilli()); err != nil {
				return err
			}
		}
		return tx.Commit()
	})
	if err != nil {
		return fmt.Errorf("sqlstore: migrating the schema: %w", err)
	}
	return nil
}

// retry runs f again while the database reports itself busy (another
// process holds the write lock longer than the busy timeout, or SQLite
// refused to wait where waiting could deadlock), for at most busyFor.
//
// A connection the server ended empties the pool of its idle connections
// (they are most likely dead too; the next statements open new ones), and
// f runs again on a new one: retry serves reads and idempotent writes.
func (s *DB) retry(ctx context.Context, f func() error) error { return s.retryOn(ctx, true, f) }

// maxGone bounds how often one statement is run again after its
// connection was lost.
const maxGone = 3

// retryOn is retry; again false: f is not run again after its connection
// was lost (a write that may have committed before the server ended the
// connection), its error is returned.
func (s *DB) retryOn(ctx context.Context, again bool, f func() error) error {
	deadline := time.Now().Add(busyFor)
	gone := 0
	for {
		err := f()
		if err != nil && s.dialect.isGone != nil && s.dialect.isGone(err) {
			s.dropIdle()
			if !again || gone >= maxGone || ctx.Err() != nil {
				return err
			}
			gone++
			continue
		}
		if err == nil || !s.dialect.isBusy(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(5+rand.IntN(20)) * time.Millisecond):
		}
	}
}

// dropIdle closes the pool's idle connections.
func (s *DB) dropIdle() {
	s.db.SetMaxIdleConns(0)
	s.db.SetMaxIdleConns(maxPGConns)
}

// exec runs one statement with retry and returns the rows it affected.
// A statement whose connection was lost is not run again: it may have
// committed (execIdempotent runs it again).
func (s *DB) exec(ctx context.Context, q string, args ...any) (int64, error) {
	return s.execOn(ctx, false, q, args...)
}

// execIdempotent is exec for a statement that running twice leaves as
// running once (an INSERT … ON CONFLICT DO NOTHING of a fixed id).
func (s *DB) execIdempotent(ctx context.Context, q string, args ...any) (int64, error) {
	return s.execOn(ctx, true, q, args...)
}

func (s *DB) execOn(ctx context.Context, again bool, q string, args ...any) (int64, error) {
	var n int64
	err := s.retryOn(ctx, again, func() error {
		if s.dialect.name == "sqlite" {
			s.wmu.Lock()
			defer s.wmu.Unlock()
		}
		res, err := s.db.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// scopeTx runs f in one write transaction that no other capped write of
// the same scope overlaps (a quota: count the scope's rows, then insert,
// as one decision). On PostgreSQL, at READ COMMITTED, it first takes a
// transaction-scoped advisory lock keyed by the scope, so every statement
// after it sees what the scope's previous capped writes committed, across
// all processes on the database; on SQLite the transaction takes the
// database's write lock up front (BEGIN IMMEDIATE). A transaction whose
// connection was lost is not run again (it may have committed).
func (s *DB) scopeTx(ctx context.Context, scope store.Scope, f func(tx *sql.Tx) error) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	return s.retryOn(ctx, false, func() error {
		if s.dialect.name == "sqlite" {
			s.wmu.Lock()
			defer s.wmu.Unlock()
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if q := s.dialect.scopeLock; q != "" {
			if _, err := tx.ExecContext(ctx, q, scopeLockKey(scope)); err != nil {
				return err
			}
		}
		if err := f(tx); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// insertWithin runs insert with args: alone when check is nil, else in a
// scopeTx after check, which refuses with store.ErrQuota when the row
// would take the scope over its cap. A quota error comes back as check
// made it; a unique violation is store.ErrConflict after conflict's words;
// any other error is wrapped after what's.
func (s *DB) insertWithin(ctx context.Context, scope store.Scope, check func(tx *sql.Tx) error, insert string, args []any, conflict, what string) error {
	var err error
	if check == nil {
		_, err = s.exec(ctx, insert, args...)
	} else {
		err = s.scopeTx(ctx, scope, func(tx *sql.Tx) error {
			if err := check(tx); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, insert, args...)
			return err
		})
	}
	switch {
	case err == nil || errors.Is(err, store.ErrQuota):
		return err
	case s.dialect.isUnique(err):
		return fmt.Errorf("%s: %w", conflict, store.ErrConflict)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// scopeLockKey is the advisory lock of a scope's capped writes: 64 bits
// of FNV-1a over the scope (two scopes that collide only wait for each
// other).
func scopeLockKey(scope store.Scope) int64 {
	h := fnv.New64a()
	h.Write([]byte("shellgate-scope\x00" + scope.Account + "\x00" + scope.Workspace))
	return int64(h.Sum64())
}

// queryRow scans one row with retry; sql.ErrNoRows passes through.
func (s *DB) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	return s.retry(ctx, func() error {
		return s.db.QueryRowContext(ctx, q, args...).Scan(dest...)
	})
}

// query runs q and calls each for every row. A busy database is retried
// only before the first row, so each never sees a row twice.
func (s *DB) query(ctx context.Context, q string, args []any, each func(*sql.Rows) error) error {
	var seen bool
	return s.retry(ctx, func() error {
		rows, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			seen = true
			if err := each(rows); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil && seen {
			return fmt.Errorf("reading rows: %v", err) // not retried: rows were delivered
		}
		return rows.Err()
	})
}

// notFound maps sql.ErrNoRows to store.ErrNotFound with what was looked for.
func notFound(err error, what, id string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %s: %w", what, id, store.ErrNotFound)
	}
	return fmt.Errorf("%s %s: %w", what, id, err)
}

// deleteScoped deletes the row of table with id in scope; what names the
// record in errors ("container"): store.ErrNotFound when the scope has no
// such row.
func (s *DB) deleteScoped(ctx context.Context, table, what string, scope store.Scope, id string) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	n, err := s.exec(ctx, `DELETE FROM `+table+` WHERE account = $1 AND workspace = $2 AND id = $3`, scope.Account, scope.Workspace, id)
	if err != nil {
		return fmt.Errorf("deleting %s %s: %w", what, id, err)
	}
	if n == 0 {
		return fmt.Errorf("%s %s: %w", what, id, store.ErrNotFound)
	}
	return nil
}

// getScoped reads the row of table whose col is v in scope, with its cols
// scanned by scan; what names the record in errors ("container"):
// store.ErrNotFound when the scope has no such row.
func getScoped[T any](ctx context.Context, s *DB, table, cols, what string, scan func(scanner) (T, error), scope store.Scope, col, v string) (T, error) {
	var x T
	if err := scope.Validate(); err != nil {
		return x, err
	}
	err := s.retry(ctx, func() error {
		var err error
		x, err = scan(s.db.QueryRowContext(ctx, `SELECT `+cols+` FROM `+table+` WHERE account = $1 AND workspace = $2 AND `+col+` = $3`,
			scope.Account, scope.Workspace, v))
		return err
	})
	if err != nil {
		var zero T
		return zero, notFound(err, what, v)
	}
	return x, nil
}
