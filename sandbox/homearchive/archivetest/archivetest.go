// Package archivetest is the conformance suite of homearchive over any
// Objects (a local directory, an S3 bucket): each test gets empty storage
// from open, and stands in for two nodes with two image paths.
package archivetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shellgate/shellgate/sandbox/homearchive"
)

const (
	mib  = 1 << 20
	size = 64 * mib
)

// Run runs the suite.
func Run(t *testing.T, open func(t *testing.T) homearchive.Objects) {
	t.Run("round trip to another node, sparse", func(t *testing.T) {
		a := homearchive.New(open(t))
		img := newImage(t, t.TempDir())
		if err := a.Archive(t.Context(), "box1", img); err != nil {
			t.Fatal(err)
		}
		st := a.Stats()
		// 3 written regions, one of them straddling two chunks; the rest is
		// holes or zeros, not sent.
		if st.ChunksPut != 4 {
			t.Fatalf("first archive put %d chunks, want 4", st.ChunksPut)
		}
		other := filepath.Join(t.TempDir(), "box1.img")
		if err := a.Restore(t.Context(), "box1", other); err != nil {
			t.Fatal(err)
		}
		sameFile(t, img, other)
		if got := a.Stats().ChunksGot; got != 4 {
			t.Fatalf("restore got %d chunks, want 4", got)
		}
		if alloc := allocated(t, other); alloc > 4*homearchive.ChunkBytes {
			t.Fatalf("restored image takes %d bytes on disk: not sparse", alloc)
		}
		// Waking again where it was restored moves nothing.
		before := a.Stats()
		if err := a.Restore(t.Context(), "box1", other); err != nil {
			t.Fatal(err)
		}
		if err := a.Archive(t.Context(), "box1", other); err != nil {
			t.Fatal(err)
		}
		if d := diff(before, a.Stats()); d.ChunksGot != 0 || d.ChunksPut != 0 {
			t.Fatalf("unchanged image moved chunks: %+v", d)
		}
	})
	t.Run("one changed byte moves one chunk each way", func(t *testing.T) {
		a := homearchive.New(open(t))
		img, imgB := restoredCopy(t, a, "box2")
		// B changes one byte and archives: one chunk up.
		writeAt(t, imgB, 40*mib+5, []byte{0xEE})
		before := a.Stats()
		must(t, a.Archive(t.Context(), "box2", imgB))
		if d := diff(before, a.Stats()); d.ChunksPut != 1 || d.BytesPut != homearchive.ChunkBytes {
			t.Fatalf("re-archive of one changed byte: %+v", d)
		}
		// A still has the old image: its wake fetches the one chunk.
		before = a.Stats()
		must(t, a.Restore(t.Context(), "box2", img))
		if d := diff(before, a.Stats()); d.ChunksGot != 1 {
			t.Fatalf("wake with a stale local copy: %+v", d)
		}
		sameFile(t, img, imgB)
	})
	t.Run("a write after a restore is archived even with the same size and mtime", func(t *testing.T) {
		a := homearchive.New(open(t))
		img, other := restoredCopy(t, a, "box8")
		st, err := os.Stat(other)
		must(t, err)
		// As a write within the same timestamp tick would look.
		writeAt(t, other, 10*mib, []byte("changed"))
		must(t, os.Chtimes(other, st.ModTime(), st.ModTime()))
		archiveChange(t, a, "box8", img, other, "archive after a same-mtime write")
	})
	t.Run("changes not yet archived survive a wake on the same node", func(t *testing.T) {
		// A sleep whose archive failed, or a crash while awake: the image
		// changed here since the bucket's newest version.
		a := homearchive.New(open(t))
		img, other := restoredCopy(t, a, "box9")
		writeAt(t, other, 20*mib, []byte("not archived yet"))
		sum := fileSum(t, other)
		must(t, a.Restore(t.Context(), "box9", other))
		if fileSum(t, other) != sum {
			t.Fatal("a wake reverted changes that were not archived yet")
		}
		// The image deleted, its record left: a full restore.
		gone := filepath.Join(t.TempDir(), "box9.img")
		must(t, a.Restore(t.Context(), "box9", gone))
		must(t, os.Remove(gone))
		must(t, a.Restore(t.Context(), "box9", gone))
		sameFile(t, img, gone)
		archiveChange(t, a, "box9", img, other, "the next archive")
	})
	t.Run("a stale local copy loses data the archive no longer has", func(t *testing.T) {
		a := homearchive.New(open(t))
		img, imgB := restoredCopy(t, a, "box3")
		writeAt(t, imgB, 10*mib, make([]byte, mib)) // zero the region at 10 MiB
		must(t, a.Archive(t.Context(), "box3", imgB))
		must(t, a.Restore(t.Context(), "box3", img))
		sameFile(t, img, imgB)
	})
	t.Run("a corrupted chunk fails the wake, image untouched", func(t *testing.T) {
		obj := open(t)
		a := homearchive.New(obj)
		img := newImage(t, t.TempDir())
		must(t, a.Archive(t.Context(), "box4", img))
		keys, err := obj.List(t.Context(), "box4/chunks/")
		if err != nil || len(keys) == 0 {
			t.Fatal(keys, err)
		}
		// Every chunk, so that whichever one a restore needs is bad.
		bad := bytes.Repeat([]byte{7}, homearchive.ChunkBytes)
		for _, k := range keys {
			must(t, obj.Put(t.Context(), k, bytes.NewReader(bad), int64(len(bad))))
		}
		other := filepath.Join(t.TempDir(), "box4.img")
		err = a.Restore(t.Context(), "box4", other)
		if !errors.Is(err, homearchive.ErrCorrupt) || !strings.Contains(err.Error(), "hash") {
			t.Fatalf("restore of a corrupted chunk: %v", err)
		}
		if _, err := os.Stat(other); !os.IsNotExist(err) {
			t.Fatalf("a failed restore left an image: %v", err)
		}
		// A stale local copy is left as it was too.
		stale := filepath.Join(t.TempDir(), "box4.img")
		copyFile(t, img, stale)
		writeAt(t, stale, 0, []byte("stale"))
		sum := fileSum(t, stale)
		if err := a.Restore(t.Context(), "box4", stale); !errors.Is(err, homearchive.ErrCorrupt) {
			t.Fatalf("restore over a stale copy: %v", err)
		}
		if fileSum(t, stale) != sum {
			t.Fatal("a failed restore changed the local image")
		}
		// A missing chunk is as clear. Every chunk goes: a restore fetches
		// chunks in parallel and fails with the first error, so one missing
		// among corrupted ones could come second.
		for _, k := range keys {
			must(t, obj.Delete(t.Context(), k))
		}
		if err := a.Restore(t.Context(), "box4", other); !errors.Is(err, homearchive.ErrCorrupt) || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("restore with a missing chunk: %v", err)
		}
	})
	t.Run("hostile manifests are refused", func(t *testing.T) {
		obj := open(t)
		a := homearchive.New(obj)
		h := strings.Repeat("a", 64)
		for name, m := range map[string]string{
			"huge":       `{"format":1,"name":"box5","id":"` + strings.Repeat("0", 32) + `","version":1,"image_bytes":1152921504606846976,"chunk_bytes":4194304,"chunks":[]}`,
			"dotdot":     `{"format":1,"name":"box5","id":"` + strings.Repeat("0", 32) + `","version":1,"image_bytes":67108864,"chunk_bytes":4194304,"chunks":[{"i":0,"sha256":"../../../etc/passwd"}]}`,
			"badhash":    `{"format":1,"name":"box5","id":"` + strings.Repeat("0", 32) + `","version":1,"image_bytes":67108864,"chunk_bytes":4194304,"chunks":[{"i":0,"sha256":"` + strings.ToUpper(h) + `"}]}`,
			"beyond":     `{"format":1,"name":"box5","id":"` + strings.Repeat("0", 32) + `","version":1,"image_bytes":67108864,"chunk_bytes":4194304,"chunks":[{"i":16,"sha256":"` + h + `"}]}`,
			"negative":   `{"format":1,"name":"box5","id":"` + strings.Repeat("0", 32) + `","version":1,"image_bytes":67108864,"chunk_bytes":4194304,"chunks":[{"i":-1,"sha256":"` + h + `"}]}`,
			"repeated":   `{"format":1,"name":"box5","id":"` + strings.Repeat("0", 32) + `","version":1,"image_bytes":67108864,"chunk_bytes":4194304,"chunks":[{"i":1,"sha256":"` + h + `"},{"i":1,"sha256":"` + h + `"}]}`,
			"chunksize":  `{"format":1,"name":"box5","id":"` + strings.Repeat("0", 32) + `","version":1,"image_bytes":67108864,"chunk_bytes":1073741824,"chunks":[]}`,
			"othername":  `{"format":1,"name":"../x","id":"` + strings.Repeat("0", 32) + `","version":1,"image_bytes":67108864,"chunk_bytes":4194304,"chunks":[]}`,
			"extrafield": `{"format":1,"name":"box5","id":"` + strings.Repeat("0", 32) + `","version":1,"image_bytes":67108864,"chunk_bytes":4194304,"chunks":[],"key":"../x"}`,
			"notjson":    `{"format":1,`,
			"oversized":  `{"format":1,"name":"box5","pad":"` + strings.Repeat("x", 30<<20) + `"}`,
		} {
			must(t, obj.Put(t.Context(), "box5/manifest.json", strings.NewReader(m), int64(len(m))))
			img := filepath.Join(t.TempDir(), "box5.img")
			err := a.Restore(t.Context(), "box5", img)
			if !errors.Is(err, homearchive.ErrCorrupt) {
				t.Errorf("%s manifest: %v", name, err)
			}
			if _, err := os.Stat(img); !os.IsNotExist(err) {
				t.Errorf("%s manifest left an image", name)
			}
		}
		// Names are checked before any key is built.
		for _, bad := range []string{"../box5", "a/b", "", strings.Repeat("x", 41)} {
			if err := a.Restore(t.Context(), bad, filepath.Join(t.TempDir(), "x.img")); err == nil {
				t.Errorf("restore of %q accepted", bad)
			}
			if err := a.Archive(t.Context(), bad, filepath.Join(t.TempDir(), "x.img")); err == nil {
				t.Errorf("archive of %q accepted", bad)
			}
		}
	})
	t.Run("with a key, a forged or unsigned manifest is refused", func(t *testing.T) {
		obj := open(t)
		a := homearchive.New(obj)
		a.Key = []byte(strings.Repeat("k", 32))
		img, other := restoredCopy(t, a, "box7")
		sameFile(t, img, other)
		// Someone with write access to the bucket but not the key: an
		// archive of their own image (unsigned), then one signed with
		// another key.
		forged := newImage(t, t.TempDir())
		writeAt(t, forged, 0, []byte("evil superblock"))
		for _, key := range [][]byte{nil, []byte(strings.Repeat("x", 32))} {
			f := homearchive.New(obj)
			f.Key = key
			must(t, f.Archive(t.Context(), "box7", forged))
			fresh := filepath.Join(t.TempDir(), "box7.img")
			err := a.Restore(t.Context(), "box7", fresh)
			if !errors.Is(err, homearchive.ErrCorrupt) || !strings.Contains(err.Error(), "signature") {
				t.Fatalf("forged manifest (key %q): %v", key, err)
			}
			if _, err := os.Stat(fresh); !os.IsNotExist(err) {
				t.Fatal("a forged manifest left an image")
			}
		}
	})
	t.Run("delete, then nothing to restore", func(t *testing.T) {
		obj := open(t)
		a := homearchive.New(obj)
		img := newImage(t, t.TempDir())
		must(t, a.Archive(t.Context(), "box6", img))
		// Another home's objects are not touched.
		must(t, a.Archive(t.Context(), "box6b", img))
		must(t, a.Delete(t.Context(), "box6", img))
		if keys, _ := obj.List(t.Context(), "box6/"); len(keys) != 0 {
			t.Fatalf("left after delete: %v", keys)
		}
		if err := a.Restore(t.Context(), "box6", filepath.Join(t.TempDir(), "x.img")); !errors.Is(err, homearchive.ErrNotArchived) {
			t.Fatalf("restore after delete: %v", err)
		}
		if err := a.Delete(t.Context(), "box6", img); !errors.Is(err, homearchive.ErrNotArchived) {
			t.Fatalf("second delete: %v", err)
		}
		other := filepath.Join(t.TempDir(), "box6b.img")
		must(t, a.Restore(t.Context(), "box6b", other))
		sameFile(t, img, other)
	})
}

// restoredCopy archives a new image as box on one node and restores it on
// another: the two images' paths.
func restoredCopy(t *testing.T, a *homearchive.Archive, box string) (img, other string) {
	t.Helper()
	img = newImage(t, t.TempDir())
	must(t, a.Archive(t.Context(), box, img))
	other = filepath.Join(t.TempDir(), box+".img")
	must(t, a.Restore(t.Context(), box, other))
	return img, other
}

// archiveChange archives box from other, which changed in one chunk since
// img was archived: one chunk goes up, and a restore brings img to the same
// content.
func archiveChange(t *testing.T, a *homearchive.Archive, box, img, other, what string) {
	t.Helper()
	before := a.Stats()
	must(t, a.Archive(t.Context(), box, other))
	if d := diff(before, a.Stats()); d.ChunksPut != 1 {
		t.Fatalf("%s: %+v", what, d)
	}
	must(t, a.Restore(t.Context(), box, img))
	sameFile(t, img, other)
}

// newImage makes a sparse 64 MiB image in dir with random data at 1 MiB
// (1 KiB), 10 MiB (1 MiB) and across the 4 MiB boundary at 40 MiB, and
// 2 MiB of written zeros at 50 MiB.
func newImage(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "home.img")
	f, err := os.Create(p)
	must(t, err)
	must(t, f.Truncate(size))
	must(t, f.Close())
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	writeAt(t, p, 1*mib, rnd(1024))
	writeAt(t, p, 10*mib, rnd(mib))
	writeAt(t, p, 44*mib-1000, rnd(2000))
	writeAt(t, p, 50*mib, make([]byte, 2*mib))
	return p
}

func writeAt(t *testing.T, p string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	_, err = f.WriteAt(b, off)
	must(t, err)
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	must(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	must(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	if x, y := fileSum(t, a), fileSum(t, b); x != y {
		t.Fatalf("%s and %s differ", a, b)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, b, 0o600))
}

func allocated(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	must(t, syscall.Stat(p, &st))
	return st.Blocks * 512
}

func diff(a, b homearchive.Stats) homearchive.Stats {
	return homearchive.Stats{ChunksPut: b.ChunksPut - a.ChunksPut, BytesPut: b.BytesPut - a.BytesPut,
		ChunksGot: b.ChunksGot - a.ChunksGot, BytesGot: b.BytesGot - a.BytesGot, Heads: b.Heads - a.Heads}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
