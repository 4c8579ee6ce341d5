package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// Blobs is the conformance suite of store.Blobs. open returns a blob store
// on empty storage; called twice in one test it returns a second handle on
// the same storage.
func Blobs(t *testing.T, open func(t *testing.T) func() store.Blobs) {
	t.Run("01 put, open, delete", func(t *testing.T) {
		b := open(t)()
		data := []byte("region,revenue\nnorth,37.5\n")
		info, err := b.Put(t.Context(), "file_1", bytes.NewReader(data), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if info.Bytes != int64(len(data)) || info.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("Put = %+v", info)
		}
		if got := read(t, b, "file_1"); !bytes.Equal(got, data) {
			t.Fatalf("read back %q", got)
		}
		if err := b.Delete(t.Context(), "file_1"); err != nil {
			t.Fatal(err)
		}
		_, _, err = b.Open(t.Context(), "file_1")
		wantErr(t, err, store.ErrNotFound, "Open after Delete")
		wantErr(t, b.Delete(t.Context(), "file_1"), store.ErrNotFound, "second Delete")
	})
	t.Run("02 empty blob and exactly the cap", func(t *testing.T) {
		b := open(t)()
		if info, err := b.Put(t.Context(), "empty", strings.NewReader(""), 0); err != nil || info.Bytes != 0 {
			t.Fatalf("empty Put = %+v, %v", info, err)
		}
		if got := read(t, b, "empty"); len(got) != 0 {
			t.Fatalf("empty blob reads %q", got)
		}
		if _, err := b.Put(t.Context(), "cap", strings.NewReader("12345"), 5); err != nil {
			t.Fatalf("a blob of exactly the cap: %v", err)
		}
	})
	t.Run("03 over the cap: ErrTooLarge and nothing kept", func(t *testing.T) {
		b := open(t)()
		_, err := b.Put(t.Context(), "big", strings.NewReader("123456"), 5)
		wantErr(t, err, store.ErrTooLarge, "Put over the cap")
		_, _, err = b.Open(t.Context(), "big")
		wantErr(t, err, store.ErrNotFound, "Open of a refused blob")
		if _, err := b.Put(t.Context(), "big", strings.NewReader("12345"), 5); err != nil {
			t.Fatalf("the id of a refused blob is not free: %v", err)
		}
	})
	t.Run("04 a failing reader keeps nothing", func(t *testing.T) {
		b := open(t)()
		boom := errors.New("connection reset")
		_, err := b.Put(t.Context(), "half", io.MultiReader(strings.NewReader("partial"), errReader{boom}), 1<<20)
		wantErr(t, err, boom, "Put from a failing reader")
		_, _, err = b.Open(t.Context(), "half")
		wantErr(t, err, store.ErrNotFound, "Open of a failed Put")
	})
	t.Run("05 an existing id is a conflict, first blob kept", func(t *testing.T) {
		b := open(t)()
		if _, err := b.Put(t.Context(), "dup", strings.NewReader("first"), 100); err != nil {
			t.Fatal(err)
		}
		_, err := b.Put(t.Context(), "dup", strings.NewReader("second"), 100)
		wantErr(t, err, store.ErrConflict, "second Put")
		if got := read(t, b, "dup"); string(got) != "first" {
			t.Fatalf("dup reads %q", got)
		}
	})
	t.Run("06 ids that are not names", func(t *testing.T) {
		b := open(t)()
		for _, id := range []string{"", ".", "..", "../x", "a/b", "/etc/passwd", ".tmp-x", "-x", "_x", "a\x00b", "a b", strings.Repeat("x", 129)} {
			_, err := b.Put(t.Context(), id, strings.NewReader("x"), 10)
			wantErr(t, err, store.ErrInvalid, "Put "+id)
			_, _, err = b.Open(t.Context(), id)
			wantErr(t, err, store.ErrNotFound, "Open "+id)
			wantErr(t, b.Delete(t.Context(), id), store.ErrNotFound, "Delete "+id)
		}
	})
	t.Run("07 a cancelled context stops the copy", func(t *testing.T) {
		b := open(t)()
		ctx, cancel := contextWithCancel(t)
		r := &cancelAfter{n: 3, cancel: cancel}
		_, err := b.Put(ctx, "slow", r, 1<<30)
		if err == nil {
			t.Fatal("Put went on after its context ended")
		}
		_, _, err = b.Open(t.Context(), "slow")
		wantErr(t, err, store.ErrNotFound, "Open of a cancelled Put")
	})
	t.Run("08 streamed: a large blob is never held in memory", func(t *testing.T) {
		b := open(t)()
		const size = 64 << 20
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		info, err := b.Put(t.Context(), "large", io.LimitReader(pattern{}, size), size)
		if err != nil {
			t.Fatal(err)
		}
		rc, n, err := b.Open(t.Context(), "large")
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		copied, err := io.Copy(h, rc)
		rc.Close()
		runtime.ReadMemStats(&after)
		if err != nil || n != size || copied != size || info.Bytes != size || hex.EncodeToString(h.Sum(nil)) != info.SHA256 {
			t.Fatalf("large blob: size %d, copied %d, info %+v, %v", n, copied, info, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/4 {
			t.Fatalf("putting and reading %d MiB allocated %d MiB", size>>20, alloc>>20)
		}
	})
	t.Run("09 concurrent puts of one id: one wins whole", func(t *testing.T) {
		o := open(t)
		handles := []store.Blobs{o(), o()}
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i := range 8 {
			wg.Go(func() {
				body := strings.Repeat(string(rune('a'+i)), 100_000)
				_, err := handles[i%2].Put(t.Context(), "race", strings.NewReader(body), 1<<20)
				if err == nil {
					mu.Lock()
					wins++
					mu.Unlock()
				} else if !errors.Is(err, store.ErrConflict) {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got := read(t, handles[0], "race")
		if wins != 1 || len(got) != 100_000 || strings.Count(string(got), string(got[0])) != len(got) {
			t.Fatalf("%d puts won; the blob has %d bytes, mixed: %v", wins, len(got), strings.Count(string(got), string(got[:1])) != len(got))
		}
	})
	t.Run("10 walk lists every complete blob once, with when it was stored", func(t *testing.T) {
		handle := open(t)
		b := handle()
		before := time.Now().Add(-2 * time.Second) // S3 keeps whole seconds
		want := map[string]bool{}
		for _, id := range []string{"file_a", "file_b", "file_c"} {
			if _, err := b.Put(t.Context(), id, strings.NewReader(id), 100); err != nil {
				t.Fatal(err)
			}
			want[id] = true
		}
		if err := b.Delete(t.Context(), "file_b"); err != nil {
			t.Fatal(err)
		}
		delete(want, "file_b")
		// A refused Put leaves nothing a walk would see.
		if _, err := b.Put(t.Context(), "file_big", strings.NewReader("123456"), 5); !errors.Is(err, store.ErrTooLarge) {
			t.Fatalf("Put over the cap: %v", err)
		}
		after := time.Now().Add(2 * time.Second)
		got := map[string]bool{}
		err := handle().Walk(t.Context(), func(id string, stored time.Time) error {
			if got[id] {
				t.Errorf("%s walked twice", id)
			}
			got[id] = true
			if stored.Before(before) || stored.After(after) {
				t.Errorf("%s stored at %v, want between %v and %v", id, stored, before, after)
			}
			return nil
		})
		if err != nil || !maps.Equal(got, want) {
			t.Fatalf("Walk saw %v (%v), want %v", got, err, want)
		}
		stop := errors.New("enough")
		n := 0
		if err := b.Walk(t.Context(), func(string, time.Time) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
			t.Fatalf("a walk whose callback fails: %v after %d calls, want its error after 1", err, n)
		}
	})
}

func read(t *testing.T, b store.Blobs, id string) []byte {
	t.Helper()
	rc, n, err := b.Open(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != n {
		t.Fatalf("Open said %d bytes, read %d", n, len(got))
	}
	return got
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// pattern is an endless reader of non-zero bytes.
type pattern struct{}

func (pattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i%251 + 1)
	}
	return len(p), nil
}

// cancelAfter reads n chunks, then cancels its context and keeps reading.
type cancelAfter struct {
	n      int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return pattern{}.Read(p)
}
