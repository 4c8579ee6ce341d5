package sqlstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// OpenPostgres opens the store on the PostgreSQL database dsn names (a
// postgres:// URL or a "host=... dbname=..." string, as libpq takes them,
// including the PG* environment variables for what it leaves out) and
// migrates it. Any number of processes (gateway replicas) may open one
// database: the migration runs under a transaction-scoped advisory lock,
// so of replicas starting at once one migrates and the others wait and
// find it done, and every write is one statement whose outcome PostgreSQL
// decides under its row locks (see docs/ARCHITECTURE.md, "Scale-out").
//
// It uses pgx's database/sql driver with the statement cache, at most
// maxPGConns connections per handle.
func OpenPostgres(ctx context.Context, dsn string) (*DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message may quote the DSN, password included.
		return nil, errors.New("sqlstore: unusable PostgreSQL DSN (want postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=... or key=value pairs)")
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(maxPGConns)
	db.SetMaxIdleConns(maxPGConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	where := fmt.Sprintf("database %s on %s:%d", cfg.Database, cfg.Host, cfg.Port)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlstore: connecting to PostgreSQL (%s): %w", where, err)
	}
	return newDB(ctx, db, postgresDialect, "PostgreSQL "+where)
}

// maxPGConns bounds one handle's connections: PostgreSQL's default
// max_connections is 100, shared by every replica.
const maxPGConns = 16

// migrationLockKey is the advisory lock the migration holds (any constant
// the application owns; "shellgat" in ASCII).
const migrationLockKey int64 = 0x7368656c6c676174

var postgresDialect = dialect{
	name: "postgres",
	// Serialization failures and deadlocks are retried like SQLite's busy
	// database; at READ COMMITTED, which the store uses, the single
	// statements it runs meet them only in the migration.
	isBusy:   func(err error) bool { return pgCode(err) == "40001" || pgCode(err) == "40P01" },
	isUnique: func(err error) bool { return pgCode(err) == "23505" },
	// 57P01-03: the server ended the session (terminated, crashed, not
	// yet accepting); class 08: the connection failed; or pgx closed it
	// (a read or write on it failed).
	isGone: func(err error) bool {
		c := pgCode(err)
		return c == "57P01" || c == "57P02" || c == "57P03" || strings.HasPrefix(c, "08") ||
			errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
	},
	migrateLock: `SELECT pg_advisory_xact_lock(` + fmt.Sprint(migrationLockKey) + `)`,
	scopeLock:   `SELECT pg_advisory_xact_lock($1)`,
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
