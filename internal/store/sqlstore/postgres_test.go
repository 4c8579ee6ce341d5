package sqlstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/pgtest"
	"github.com/shellgate/shellgate/internal/store/storetest"
	"github.com/shellgate/shellgate/jsrun"
	jsstoretest "github.com/shellgate/shellgate/jsrun/storetest"
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

// Replicas starting at once on a new database all get a working store,
// and the schema is applied once (under the advisory lock; without it,
// concurrent CREATE TABLE IF NOT EXISTS fail on PostgreSQL).
func TestPostgresConcurrentFirstOpen(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			s, err := OpenPostgres(t.Context(), dsn)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			if _, _, err := s.Keys().Create(t.Context(), store.Scope{Account: "a", Workspace: "w"}); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s, err := OpenPostgres(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var steps int
	if err := s.db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM schema_migrations`).Scan(&steps); err != nil || steps != len(migrations) {
		t.Fatalf("%d schema steps recorded, want %d (%v)", steps, len(migrations), err)
	}
	if v, err := s.SchemaVersion(t.Context()); err != nil || v != len(migrations) {
		t.Fatalf("schema version %d, %v", v, err)
	}
	if keys, err := s.Keys().List(t.Context()); err != nil || len(keys) != n {
		t.Fatalf("%d keys, want %d (%v)", len(keys), n, err)
	}
}

// A database migrated by a newer binary is refused, not written to.
func TestPostgresNewerSchemaRefused(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	s, err := OpenPostgres(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(t.Context(), `INSERT INTO schema_migrations (version, applied_at_ms) VALUES ($1, 0)`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = OpenPostgres(t.Context(), dsn)
	if err == nil || !strings.Contains(err.Error(), "newer than this binary") {
		t.Fatalf("OpenPostgres on a newer schema: %v", err)
	}
}

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

// Two replicas on one database race to resume one continuation: exactly
// one claim wins, round after round, and a claim is durable across a
// replica's restart.
func TestPostgresContinuationClaimsAcrossReplicas(t *testing.T) {
	open := postgresFactory(t)
	handles := make([]*DB, 2)
	for i := range handles {
		s, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		handles[i] = s.(*DB)
	}
	t0 := jsstoretest.T0
	const rounds, perHandle = 20, 4
	for r := range rounds {
		tok := fmt.Sprintf("nonce-%d", r)
		errs := make([]error, 2*perHandle)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range errs {
			st := handles[i%2]
			wg.Go(func() {
				<-start
				errs[i] = st.Continuations().Claim(t.Context(), tok, t0.Add(time.Duration(i)*time.Millisecond), t0.Add(time.Hour))
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, jsrun.ErrContinuationUsed):
				t.Fatalf("claim: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d of %d claims through two replicas won, want 1", r, won, len(errs))
		}
	}
	handles[0].Close()
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.(*DB).Continuations().Claim(t.Context(), "nonce-0", t0.Add(time.Minute), t0.Add(time.Hour)); !errors.Is(err, jsrun.ErrContinuationUsed) {
		t.Fatalf("claim after a replica restarted: %v", err)
	}
}
