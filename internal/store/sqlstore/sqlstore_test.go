package sqlstore

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/storetest"
)

func sqliteFactory(t *testing.T) storetest.Opener {
	dir := t.TempDir()
	return func() (store.Store, error) { return OpenSQLite(t.Context(), dir) }
}

// One conformance suite, both implementations.
func TestConformance(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { storetest.Run(t, sqliteFactory) })
	t.Run("postgres", func(t *testing.T) { storetest.Run(t, postgresFactory) })
}

// The database is private, in WAL mode, at the current schema version.
func TestSQLiteFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := OpenSQLite(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := os.Stat(filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %v, want 0600", DBFile, st.Mode().Perm())
	}
	var mode string
	if err := s.db.QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q, %v", mode, err)
	}
	var busy int
	if err := s.db.QueryRowContext(t.Context(), `PRAGMA busy_timeout`).Scan(&busy); err != nil || busy < 1000 {
		t.Fatalf("busy_timeout %d, %v", busy, err)
	}
	if v, err := s.SchemaVersion(t.Context()); err != nil || v != len(migrations) {
		t.Fatalf("schema version %d, %v; want %d", v, err, len(migrations))
	}
}

// Processes (replicas) opening a new database at the same moment all get
// a working store, and the schema is applied once (on PostgreSQL under the
// advisory lock; without it, concurrent CREATE TABLE IF NOT EXISTS fail).
func TestConcurrentFirstOpen(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open := b.factory(t)
			const n = 6
			var wg sync.WaitGroup
			errs := make(chan error, n)
			start := make(chan struct{})
			for range n {
				wg.Go(func() {
					<-start
					s, err := open()
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
			st, err := open()
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			s := st.(*DB)
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
		})
	}
}

// A database migrated by a newer binary is refused, not written to.
func TestNewerSchemaRefused(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open := b.factory(t)
			s, err := open()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.(*DB).db.ExecContext(t.Context(), `INSERT INTO schema_migrations (version, applied_at_ms) VALUES ($1, 0)`, len(migrations)+1); err != nil {
				t.Fatal(err)
			}
			s.Close()
			_, err = open()
			if err == nil || !strings.Contains(err.Error(), "newer than this binary") {
				t.Fatalf("opening a newer schema: %v", err)
			}
		})
	}
}

// Only the hash of a key's secret is stored: the token appears nowhere in
// the database file or its WAL.
func TestKeySecretNotStored(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSQLite(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	_, token, err := s.Keys().Create(t.Context(), store.Scope{Account: "a", Workspace: "w"})
	if err != nil {
		t.Fatal(err)
	}
	// The secret is the token's last 43 characters (base64url, which has
	// '_' in its alphabet: cutting at the last '_' could leave a few
	// characters that any file may contain).
	secret := token[len(token)-43:]
	if _, _, ok := store.ParseToken(token); !ok || strings.Count(token, "_") < 2 {
		t.Fatalf("token %q is not shaped as expected", token)
	}
	var stored string
	if err := s.db.QueryRowContext(t.Context(), `SELECT secret_sha256 FROM api_keys`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) != 64 || strings.Contains(stored, secret) {
		t.Fatalf("stored %q", stored)
	}
	s.Close()
	for _, name := range []string{DBFile, DBFile + "-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secret) {
			t.Fatalf("the key's secret is in %s", name)
		}
	}
}

func TestUnusableDataDir(t *testing.T) {
	for _, d := range []string{"", "/tmp/x?mode=ro", "/tmp/a#b"} {
		if _, err := OpenSQLite(t.Context(), d); err == nil {
			t.Errorf("OpenSQLite(%q) succeeded", d)
		}
	}
}
