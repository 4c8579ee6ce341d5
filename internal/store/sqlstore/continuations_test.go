package sqlstore

import (
	"database/sql"
	"errors"
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

// A claim survives closing the database, and two handles on one data
// directory (two processes: the CLI and the server) share the claims: of
// concurrent claims through both, exactly one wins.
func TestContinuationClaimsDurableAndShared(t *testing.T) {
	dir := t.TempDir()
	t0 := storetest.T0
	s, err := OpenSQLite(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Continuations().Claim(t.Context(), "tok", t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.Close()

	a, err := OpenSQLite(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenSQLite(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var used *jsrun.UsedError
	if err := b.Continuations().Claim(t.Context(), "tok", t0.Add(time.Minute), t0.Add(time.Hour)); !errors.As(err, &used) || !used.FirstUse.Equal(t0) {
		t.Fatalf("claim after reopening: %v, want a UsedError naming %s", err, t0)
	}

	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Go(func() { errs[i] = st.Continuations().Claim(t.Context(), "raced", t0, t0.Add(time.Hour)) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, jsrun.ErrContinuationUsed):
			t.Errorf("claim: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d claims through two handles won, want 1", won, n)
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
