package store_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// BenchmarkSweepBlobs: one sweep of 5,000 local blobs that all have their
// file record (the common case: nothing to delete) against what the sweep
// cannot do with less, listing the blob directory (os.ReadDir with each
// entry's Info): the cost of asking the database about every blob.
func BenchmarkSweepBlobs(b *testing.B) {
	dir, blobs, db := openSweepable(b)
	const n = 5000
	for range n {
		id := store.NewID("file")
		if _, err := blobs.Put(b.Context(), id, strings.NewReader("x"), 1); err != nil {
			b.Fatal(err)
		}
		recordFile(b, db, id, "x", 1)
	}
	cutoff := time.Now().Add(time.Minute) // every blob is old enough
	b.Run("SweepBlobs", func(b *testing.B) {
		for b.Loop() {
			if deleted, err := store.SweepBlobs(b.Context(), blobs, db.Files(), cutoff); err != nil || deleted != 0 {
				b.Fatal(deleted, err)
			}
		}
	})
	b.Run("ReadDir", func(b *testing.B) {
		for b.Loop() {
			entries, err := os.ReadDir(filepath.Join(dir, "files"))
			if err != nil || len(entries) != n {
				b.Fatal(len(entries), err)
			}
			for _, e := range entries {
				if _, err := e.Info(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
