package store_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/sqlstore"
	"github.com/shellgate/shellgate/internal/store/storetest"
)

func TestLocalBlobsConformance(t *testing.T) {
	storetest.Blobs(t, func(t *testing.T) func() store.Blobs {
		dir := t.TempDir()
		return func() store.Blobs {
			b, err := store.OpenLocalBlobs(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}
	})
}

// A symlink planted in the blob directory is not followed out of it, and
// a directory under a blob's name is not served.
func TestLocalBlobsPlantedEntries(t *testing.T) {
	dir := t.TempDir()
	b, err := store.OpenLocalBlobs(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "file_link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "file_dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"file_link", "file_dir"} {
		rc, _, err := b.Open(t.Context(), id)
		if err == nil {
			got, _ := io.ReadAll(rc)
			rc.Close()
			t.Fatalf("Open(%s) served %q", id, got)
		}
	}
	// The blob a reader gets can seek (for HTTP range requests).
	if _, err := b.Put(t.Context(), "file_ok", strings.NewReader("0123456789"), 100); err != nil {
		t.Fatal(err)
	}
	rc, _, err := b.Open(t.Context(), "file_ok")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rs, ok := rc.(io.ReadSeeker)
	if !ok {
		t.Fatal("LocalBlobs' reader is not an io.ReadSeeker")
	}
	if _, err := rs.Seek(7, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(rs); string(rest) != "789" {
		t.Fatalf("after seeking: %q", rest)
	}
	if st, err := os.Stat(filepath.Join(dir, "file_ok")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("blob mode: %v, %v", st.Mode(), err)
	}
}

// Opening removes temporary files left by a crash, once they are old
// enough that no other process can still be writing them.
func TestLocalBlobsLeftoverTemp(t *testing.T) {
	dir := t.TempDir()
	old, fresh := filepath.Join(dir, ".tmp-old"), filepath.Join(dir, ".tmp-fresh")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * store.TempMaxAge)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	b, err := store.OpenLocalBlobs(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("old temporary file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("a temporary file another process may be writing was removed: %v", err)
	}
}

func TestValidBlobID(t *testing.T) {
	for id, want := range map[string]bool{
		"file_0123abcd": true, "a": true, "A-b_c": true, strings.Repeat("x", 128): true,
		"": false, ".tmp-x": false, "-a": false, "_a": false, "a.b": false, "a/b": false, "..": false, strings.Repeat("x", 129): false,
	} {
		if got := store.ValidBlobID(id); got != want {
			t.Errorf("ValidBlobID(%q) = %v", id, got)
		}
	}
}

// SweepBlobs deletes a blob only when it is old and no file record of any
// workspace names it: a young one may be an upload whose record is being
// written, and a recorded one is a file.
func TestSweepBlobs(t *testing.T) {
	dir, b, db := openSweepable(t)
	put := func(id string, age time.Duration) {
		t.Helper()
		if _, err := b.Put(t.Context(), id, strings.NewReader(id), 100); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-age)
		if err := os.Chtimes(filepath.Join(dir, "files", id), old, old); err != nil {
			t.Fatal(err)
		}
	}
	kept := store.NewID("file")
	put(kept, 2*store.OrphanAge)
	recordFile(t, db, kept, "kept.csv", int64(len(kept)))
	orphans := make([]string, 1100) // more than one batch
	for i := range orphans {
		orphans[i] = store.NewID("file")
		put(orphans[i], 2*store.OrphanAge)
	}
	young := store.NewID("file")
	put(young, 0)

	n, err := store.SweepBlobs(t.Context(), b, db.Files(), time.Now().Add(-store.OrphanAge))
	if err != nil || n != len(orphans) {
		t.Fatalf("SweepBlobs = %d, %v; want %d", n, err, len(orphans))
	}
	for _, id := range orphans {
		if _, _, err := b.Open(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("orphan %s is still there: %v", id, err)
		}
	}
	for _, id := range []string{kept, young} {
		rc, _, err := b.Open(t.Context(), id)
		if err != nil {
			t.Fatalf("%s was swept: %v", id, err)
		}
		rc.Close()
	}
	if n, err := store.SweepBlobs(t.Context(), b, db.Files(), time.Now().Add(-store.OrphanAge)); err != nil || n != 0 {
		t.Fatalf("a second sweep = %d, %v", n, err)
	}
}

// openSweepable opens what SweepBlobs works on: local blobs in dir/files
// and a SQLite store in dir, both closed when tb ends.
func openSweepable(tb testing.TB) (dir string, b *store.LocalBlobs, db *sqlstore.DB) {
	dir = tb.TempDir()
	b, err := store.OpenLocalBlobs(filepath.Join(dir, "files"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	db, err = sqlstore.OpenSQLite(tb.Context(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return dir, b, db
}

// recordFile writes the file record that names blob id.
func recordFile(tb testing.TB, db *sqlstore.DB, id, name string, bytes int64) {
	tb.Helper()
	if _, err := db.Files().Create(tb.Context(), store.File{ID: id, Scope: store.Scope{Account: "acme", Workspace: "prod"},
		Name: name, Bytes: bytes, SHA256: strings.Repeat("0", 64), Purpose: "user_data", Source: "upload"}); err != nil {
		tb.Fatal(err)
	}
}
