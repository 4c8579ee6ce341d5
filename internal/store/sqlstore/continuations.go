package sqlstore

import (
	"context"

	"github.com/shellgate/shellgate/jsrun/jsrunsql"
)

// Continuations returns jsrun's single-use continuation store in the
// server's own database (table continuation_claims, schema step 2), so that
// a continuation the server issued resumes at most once across restarts and
// across processes sharing the data directory, with no second database to
// keep. It is jsrunsql's store, run through this database's write lock and
// retries. Close the DB, not the store.
func (s *DB) Continuations() *jsrunsql.Store {
	return jsrunsql.NewOn(claimsConn{s}, "continuation_claims")
}

// claimsConn is the jsrunsql.Conn of the continuation store.
type claimsConn struct{ s *DB }

func (c claimsConn) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return c.s.exec(ctx, q, args...)
}

func (c claimsConn) QueryRow(ctx context.Context, q string, args []any, dest ...any) error {
	return c.s.queryRow(ctx, q, args, dest...)
}
