package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/homearchive"
)

// ArchiveSuite runs two managers over separate data directories — two
// nodes — sharing one home archive over the Objects that open returns, on
// runtime rt: a sandbox slept on one node wakes on the other with its
// files, a changed file moves only changed chunks, and a corrupted archive
// fails the wake clearly.
func ArchiveSuite(t *testing.T, rt string, open func(t *testing.T) homearchive.Objects) {
	ctx := context.Background()
	obj := open(t)
	ar := homearchive.New(obj)
	// A 5 GiB home (sparse): one edited file must not move 5 GiB.
	const homeBytes = 5 << 30
	withArchive := func(c *sandbox.Config) { c.HomeArchive, c.HomeBytes = ar, homeBytes }
	mA, dataA := Open(t, rt, "busybox", withArchive)
	mB, dataB := Open(t, rt, "busybox", withArchive)
	const box = "roamer"
	// 24 MiB of random bytes and small files, with their sums.
	write := `head -c 25165824 /dev/urandom > big && echo "hello from A" > note && mkdir -p d && seq 1 5000 > d/seq && sha256sum big note d/seq`
	o := Run(t, mA, box, write)
	if o.Outcome.Type != "exit" || exitCode(o) != 0 {
		t.Fatalf("write on A: %+v %q", o.Outcome, o.Stderr)
	}
	sums := o.Stdout
	check := func(m *sandbox.Manager, what string) {
		t.Helper()
		o := Run(t, m, box, "sha256sum big note d/seq")
		if o.Stdout != sums {
			t.Fatalf("%s: files differ:\n%s\nwant\n%s\n%s", what, o.Stdout, sums, o.Stderr)
		}
	}
	if err := mA.Sleep(ctx, box); err != nil {
		t.Fatalf("sleep on A: %v", err)
	}
	first := ar.Stats()
	if first.ChunksPut == 0 {
		t.Fatal("sleep archived nothing")
	}
	if _, err := os.Stat(filepath.Join(dataB, "homes", box+".img")); !os.IsNotExist(err) {
		t.Fatalf("B has a home before waking: %v", err)
	}

	t.Run("01 wake on another node from the archive", func(t *testing.T) {
		check(mB, "woken on B")
		if err := mB.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("02 local image deleted: woken from the archive", func(t *testing.T) {
		img := filepath.Join(dataA, "homes", box+".img")
		before := ar.Stats()
		if err := os.Remove(img); err != nil {
			t.Fatal(err)
		}
		check(mA, "woken on A after its image was deleted")
		d := diffStats(before, ar.Stats())
		if d.ChunksGot == 0 {
			t.Fatal("restored without fetching")
		}
		t.Logf("full restore: %d chunks, %d MiB", d.ChunksGot, d.BytesGot>>20)
	})
	t.Run("03 a changed file moves only changed chunks", func(t *testing.T) {
		// A is awake (02). Change a few bytes of one file, sleep.
		if o := Run(t, mA, box, `echo "edited on A" > note && sha256sum big note d/seq`); exitCode(o) != 0 {
			t.Fatalf("%+v %q", o.Outcome, o.Stderr)
		} else {
			sums = o.Stdout
		}
		before := ar.Stats()
		if err := mA.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		up := diffStats(before, ar.Stats())
		t.Logf("re-archive after a one-line edit: %d chunks, %d KiB (first archive: %d chunks)", up.ChunksPut, up.BytesPut>>10, first.ChunksPut)
		// The file's block, its inode, the journal, the superblock: a few
		// chunks, not the home.
		if up.ChunksPut == 0 || up.ChunksPut > 6 || up.ChunksPut*2 > first.ChunksPut || up.BytesPut*100 > homeBytes {
			t.Fatalf("a one-line edit re-archived %d chunks of %d", up.ChunksPut, first.ChunksPut)
		}
		// B still has the image it slept with: its wake fetches only what changed.
		before = ar.Stats()
		check(mB, "woken on B with a stale local copy")
		down := diffStats(before, ar.Stats())
		t.Logf("wake with a stale local copy: %d chunks, %d KiB", down.ChunksGot, down.BytesGot>>10)
		if down.ChunksGot == 0 || down.ChunksGot > up.ChunksPut+1 {
			t.Fatalf("wake of a one-line edit fetched %d chunks (%d were archived)", down.ChunksGot, up.ChunksPut)
		}
		if err := mB.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("04 a corrupted chunk fails the wake clearly", func(t *testing.T) {
		keys, err := obj.List(ctx, box+"/chunks/")
		if err != nil || len(keys) == 0 {
			t.Fatal(keys, err)
		}
		// Flip one byte in every chunk, keeping a copy to put back.
		orig := map[string][]byte{}
		for _, k := range keys {
			rc, err := obj.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			b.ReadFrom(rc)
			rc.Close()
			orig[k] = bytes.Clone(b.Bytes())
			bad := b.Bytes()
			bad[len(bad)/2] ^= 0xff
			if err := obj.Put(ctx, k, bytes.NewReader(bad), int64(len(bad))); err != nil {
				t.Fatal(err)
			}
		}
		img := filepath.Join(dataA, "homes", box+".img")
		os.Remove(img)
		err = mA.Create(ctx, box)
		if !errors.Is(err, homearchive.ErrCorrupt) || !strings.Contains(err.Error(), "restoring its home") {
			t.Fatalf("wake from a corrupted archive: %v", err)
		}
		if _, err := os.Stat(img); !os.IsNotExist(err) {
			t.Fatalf("a failed restore left an image: %v", err)
		}
		for k, b := range orig {
			if err := obj.Put(ctx, k, bytes.NewReader(b), int64(len(b))); err != nil {
				t.Fatal(err)
			}
		}
		check(mA, "woken on A once the archive was repaired")
	})
	t.Run("05 a file written into a sleeping sandbox reaches the other node", func(t *testing.T) {
		if err := mA.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		// B's copy is stale: the file call restores it, writes, archives.
		if err := mB.WriteFile(ctx, box, "posted.txt", strings.NewReader("written while asleep\n")); err != nil {
			t.Fatal(err)
		}
		if st, err := mB.Status(box); err != nil || st != sandbox.Sleeping {
			t.Fatalf("status on B: %v %v", st, err)
		}
		if o := Run(t, mA, box, "cat posted.txt && sha256sum big note d/seq"); o.Stdout != "written while asleep\n"+sums {
			t.Fatalf("on A: %q %q", o.Stdout, o.Stderr)
		}
	})
	t.Run("06 destroy removes the archive", func(t *testing.T) {
		if err := mA.Destroy(ctx, box); err != nil {
			t.Fatal(err)
		}
		if keys, _ := obj.List(ctx, box+"/"); len(keys) != 0 {
			t.Fatalf("archive left after destroy: %v", keys)
		}
		// A name with neither a home nor an archive is not found.
		if err := mA.Sleep(ctx, "never-made"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("sleep of an unknown name: %v", err)
		}
		if err := mA.Destroy(ctx, "never-made"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("destroy of an unknown name: %v", err)
		}
	})
}

func diffStats(a, b homearchive.Stats) homearchive.Stats {
	return homearchive.Stats{ChunksPut: b.ChunksPut - a.ChunksPut, BytesPut: b.BytesPut - a.BytesPut,
		ChunksGot: b.ChunksGot - a.ChunksGot, BytesGot: b.BytesGot - a.BytesGot, Heads: b.Heads - a.Heads}
}
