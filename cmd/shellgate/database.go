package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/shellgate/shellgate/internal/store/sqlstore"
)

// databaseEnv names the environment variable --database defaults to; the
// environment keeps a password off the command line (and out of ps).
const databaseEnv = "SHELLGATE_DATABASE"

// databaseFlag adds the shared --database flag to a subcommand's flag set.
// Its default is not shown in the usage: it may hold a password.
func databaseFlag(fs *flag.FlagSet) *string {
	return fs.String("database", "", "the state's database: empty for SQLite in DATA/shellgate.db, or postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=... to share PostgreSQL among replicas (env "+databaseEnv+")")
}

// openStore opens the store --database (else $SHELLGATE_DATABASE) names,
// or SQLite under dataDir, and says which for the logs (no password).
func openStore(ctx context.Context, database, dataDir string) (*sqlstore.DB, string, error) {
	if database == "" {
		database = os.Getenv(databaseEnv)
	}
	if database == "" {
		st, err := sqlstore.OpenSQLite(ctx, dataDir)
		return st, "sqlite " + filepath.Join(dataDir, sqlstore.DBFile), err
	}
	u, err := url.Parse(database)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// Not echoed: it may carry a password.
		return nil, "", fmt.Errorf("--database (or $%s): want a postgres:// or postgresql:// URL", databaseEnv)
	}
	st, err := sqlstore.OpenPostgres(ctx, database)
	return st, "postgres " + u.Host + "/" + strings.TrimPrefix(u.Path, "/"), err
}
