package sqlstore

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/jsrun"
	"github.com/shellgate/shellgate/jsrun/storetest"
)

// The continuation store on the server's database passes jsrun's
// conformance suite, on both databases.
func TestContinuationStoreConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) jsrun.ContinuationStore {
				s, err := b.factory(t)()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s.(*DB).Continuations()
			})
		})
	}
}

// A claim survives closing the database (a restart), and two handles on
// one database (two processes: the CLI and the server, or two replicas)
// share the claims: of concurrent claims through both, exactly one wins,
// round after round.
func TestContinuationClaimsDurableAndShared(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open := b.factory(t)
			t0 := storetest.T0
			first, err := open()
			if err != nil {
				t.Fatal(err)
			}
			if err := first.(*DB).Continuations().Claim(t.Context(), "tok", t0, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			first.Close()

			handles := make([]*DB, 2)
			for i := range handles {
				s, err := open()
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				handles[i] = s.(*DB)
			}
			var used *jsrun.UsedError
			if err := handles[1].Continuations().Claim(t.Context(), "tok", t0.Add(time.Minute), t0.Add(time.Hour)); !errors.As(err, &used) || !used.FirstUse.Equal(t0) {
				t.Fatalf("claim after reopening: %v, want a UsedError naming %s", err, t0)
			}

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
					t.Fatalf("round %d: %d of %d claims through two handles won, want 1", r, won, len(errs))
				}
			}
			handles[0].Close()
			s, err := open()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.(*DB).Continuations().Claim(t.Context(), "nonce-0", t0.Add(time.Minute), t0.Add(time.Hour)); !errors.Is(err, jsrun.ErrContinuationUsed) {
				t.Fatalf("claim after a handle restarted: %v", err)
			}
		})
	}
}

// A database made before the continuation table (schema version 1) is
// migrated on open: its rows stay and claims work.
func TestContinuationsMigrateFromVersion1(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	stmts := append([]string{`CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at_ms BIGINT NOT NULL)`,
		`INSERT INTO schema_migrations (version, applied_at_ms) VALUES (1, 0)`}, migrations[0]...)
	for _, q := range stmts {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			db.Close()
			t.Fatal(err)
		}
	}
	db.Close()
	s, err := OpenSQLite(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.SchemaVersion(t.Context()); err != nil || v != len(migrations) || v < 2 {
		t.Fatalf("schema version %d, %v", v, err)
	}
	c := s.Continuations()
	if err := c.Claim(t.Context(), "tok", storetest.T0, storetest.T0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := c.Claim(t.Context(), "tok", storetest.T0, storetest.T0.Add(time.Hour)); !errors.Is(err, jsrun.ErrContinuationUsed) {
		t.Fatalf("second claim after migrating: %v", err)
	}
}
