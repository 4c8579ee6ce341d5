package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"modernc.org/sqlite" // also registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"
)

// DBFile is the database's name under the data directory.
const DBFile = "shellgate.db"

// OpenSQLite opens (creating, mode 0600, and migrating) DATA/shellgate.db.
//
// Settings: WAL, so that readers never wait for the writer and processes
// share the file; synchronous=FULL, so that a committed write (a key, a
// usage charge) survives power loss too; a 10 s busy timeout; and
// BEGIN IMMEDIATE for transactions, so a transaction that will write takes
// the write lock first and waits for it, instead of failing on upgrade.
func OpenSQLite(ctx context.Context, dataDir string) (*DB, error) {
	if dataDir == "" || strings.ContainsAny(dataDir, "?#") {
		return nil, fmt.Errorf("sqlstore: unusable data directory %q", dataDir)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("sqlstore: %w", err)
	}
	path := filepath.Join(dataDir, DBFile)
	// Create the file first so it is private (SQLite gives the -wal and
	// -shm files the database's mode). Only a new file is created here: an
	// existing one may be open in SQLite in this process, and closing
	// another descriptor of it would drop SQLite's POSIX locks.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("sqlstore: %w", err)
	}
	dsn := path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: opening %s: %w", path, err)
	}
	// A bounded pool: SQLite has one writer at a time, so connections past
	// a few only wait, and each keeps its own page cache (up to 2 MiB) and
	// schema. Unbounded, a burst of 200 concurrent requests left the
	// server's RSS higher after each burst (TestServeUnderAbuse).
	db.SetMaxOpenConns(maxSQLiteConns)
	return newDB(ctx, db, sqliteDialect, "database "+path)
}

// maxSQLiteConns bounds one SQLite handle's connections.
const maxSQLiteConns = 4

var sqliteDialect = dialect{
	name: "sqlite",
	isBusy: func(err error) bool {
		c, ok := sqliteCode(err)
		return ok && (c&0xff == sqlite3.SQLITE_BUSY || c&0xff == sqlite3.SQLITE_LOCKED)
	},
	isUnique: func(err error) bool {
		c, ok := sqliteCode(err)
		return ok && (c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
	},
}

func sqliteCode(err error) (int, bool) {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return 0, false
	}
	return se.Code(), true
}
