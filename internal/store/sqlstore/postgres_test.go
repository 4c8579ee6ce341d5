package sqlstore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/pgtest"
	"github.com/shellgate/shellgate/internal/store/storetest"
)

// postgresFactory gives each test its own database on the test binary's
// PostgreSQL server; each Opener call is a new handle (its own pool).
func postgresFactory(t *testing.T) storetest.Opener {
	dsn := pgtest.NewDatabase(t)
	return func() (store.Store, error) { return OpenPostgres(t.Context(), dsn) }
}

var backends = []struct {
	name    string
	factory storetest.Factory
}{{"sqlite", sqliteFactory}, {"postgres", postgresFactory}}

// Bad DSNs and unreachable servers are clear errors that never echo the
// password.
func TestPostgresBadDSN(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, dsn := range []string{
		"postgres://u:sekrit@127.0.0.1:notaport/db",
		"postgres://postgres:sekrit@127.0.0.1:" + fmt.Sprint(srv.Port) + "/postgres?sslmode=disable&connect_timeout=5", // wrong password
		"host=/nonexistent-dir user=x password=sekrit dbname=y connect_timeout=2",
	} {
		_, err := OpenPostgres(t.Context(), dsn)
		if err == nil {
			t.Fatalf("OpenPostgres(%q) succeeded", dsn)
		}
		if strings.Contains(err.Error(), "sekrit") {
			t.Fatalf("the error shows the password: %v", err)
		}
		t.Logf("%s: %v", dsn, err)
	}
}
