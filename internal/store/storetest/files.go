package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

func sampleFile(scope store.Scope, name string) store.File {
	return store.File{
		Scope:     scope,
		Name:      name,
		Bytes:     1234,
		SHA256:    strings.Repeat("ab", 32),
		CreatedAt: t0,
		Purpose:   "user_data",
		Source:    "upload",
	}
}

// Files is the conformance suite of store.Files.
func Files(t *testing.T, f Factory) {
	t.Run("01 create and get round trip", func(t *testing.T) {
		s := open(t, f(t))
		in := sampleFile(scopeA, "sales.csv")
		in.ID = "file_chosen_by_caller"
		got := created(t, s.Files().Create, in)
		if !strings.HasPrefix(got.ID, "file_") || got.ID == in.ID || !store.ValidBlobID(got.ID) {
			t.Fatalf("id %q: want a new file_ id that can name a blob", got.ID)
		}
		want := in
		want.ID, want.CreatedAt = got.ID, t0.Truncate(time.Millisecond).UTC()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Create = %+v, want %+v", got, want)
		}
		if g, err := s.Files().Get(t.Context(), scopeA, got.ID); err != nil || !reflect.DeepEqual(g, got) {
			t.Fatalf("Get = %+v, %v", g, err)
		}
		// A well-formed id the caller made is kept (the server writes the
		// blob first under it); taken, it is a conflict.
		own := sampleFile(scopeA, "own.csv")
		own.ID = store.NewID("file")
		if got, err := s.Files().Create(t.Context(), own); err != nil || got.ID != own.ID {
			t.Fatalf("Create with a well-formed id = %q, %v; want %q", got.ID, err, own.ID)
		}
		if _, err := s.Files().Create(t.Context(), own); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("Create with a taken id: %v, want ErrConflict", err)
		}
		// The same name twice is two files.
		created(t, s.Files().Create, sampleFile(scopeA, "sales.csv"))
	})
	t.Run("02 another scope's file answers like a missing one", func(t *testing.T) {
		s := open(t, f(t))
		a := created(t, s.Files().Create, sampleFile(scopeA, "secret.txt"))
		othersSeeNothing(t, s.Files(), a, a.ID, store.NewID("file"), nil)
	})
	t.Run("03 delete", func(t *testing.T) {
		s := open(t, f(t))
		a := created(t, s.Files().Create, sampleFile(scopeA, "x"))
		deleteOnce(t, s.Files(), a.ID)
	})
	t.Run("04 invalid files", func(t *testing.T) {
		s := open(t, f(t))
		for name, mod := range map[string]func(*store.File){
			"no scope":          func(f *store.File) { f.Scope = store.Scope{} },
			"empty name":        func(f *store.File) { f.Name = "" },
			"negative size":     func(f *store.File) { f.Bytes = -1 },
			"short sha256":      func(f *store.File) { f.SHA256 = "abcd" },
			"upper-case sha256": func(f *store.File) { f.SHA256 = strings.Repeat("AB", 32) },
			"purpose too long":  func(f *store.File) { f.Purpose = strings.Repeat("p", store.MaxText+1) },
		} {
			in := sampleFile(scopeA, "v")
			mod(&in)
			_, err := s.Files().Create(t.Context(), in)
			wantErr(t, err, store.ErrInvalid, name)
		}
		_, err := s.Files().List(t.Context(), scopeA, store.ListOptions{Limit: 10, Name: "v"})
		wantErr(t, err, store.ErrInvalid, "listing files by name")
	})
	t.Run("05 pagination", func(t *testing.T) {
		s := open(t, f(t))
		var rows []listed
		for i := range 23 {
			in := sampleFile(scopeA, fmt.Sprintf("f%d", i))
			in.CreatedAt = t0.Add(time.Duration((i*7)%5) * time.Millisecond)
			got := created(t, s.Files().Create, in)
			rows = append(rows, listed{got.CreatedAt, got.ID})
			created(t, s.Files().Create, sampleFile(scopeC, "noise"))
		}
		checkPages(t, listOrder(rows), func(o store.ListOptions) (store.Page[store.File], error) {
			return s.Files().List(t.Context(), scopeA, o)
		}, func(f store.File) string { return f.ID })
	})
	t.Run("06 restart and concurrent writers", func(t *testing.T) {
		o := f(t)
		handles := []store.Store{open(t, o), open(t, o)}
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for h, st := range handles {
			for w := range 4 {
				wg.Go(func() {
					for i := range 5 {
						if _, err := st.Files().Create(t.Context(), sampleFile(scopeA, fmt.Sprintf("h%d-%d-%d", h, w, i))); err != nil {
							errs <- err
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		before, err := handles[0].Files().List(t.Context(), scopeA, store.ListOptions{Limit: 100})
		if err != nil || len(before.Items) != 40 {
			t.Fatalf("listed %d files, want 40 (%v)", len(before.Items), err)
		}
		handles[1].Close()
		s := reopen(t, handles[0], o)
		after, err := s.Files().List(t.Context(), scopeA, store.ListOptions{Limit: 100})
		if err != nil || !reflect.DeepEqual(after, before) {
			t.Fatalf("after reopening: %d files (%v), want the same 40", len(after.Items), err)
		}
	})
	t.Run("07 missing: which ids no file of any scope has", func(t *testing.T) {
		s := open(t, f(t))
		a := created(t, s.Files().Create, sampleFile(scopeA, "a.csv"))
		b := created(t, s.Files().Create, sampleFile(scopeB, "b.csv"))
		if got, err := s.Files().Missing(t.Context(), nil); err != nil || len(got) != 0 {
			t.Fatalf("Missing(nil) = %v, %v", got, err)
		}
		ids := []string{"file_gone", a.ID, b.ID, "file_never", "x'); DROP TABLE files; --"}
		got, err := s.Files().Missing(t.Context(), ids)
		if want := []string{"file_gone", "file_never", "x'); DROP TABLE files; --"}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("Missing = %v, %v; want %v", got, err, want)
		}
		// As many ids as a sweep asks about at once, and more.
		many := make([]string, 1200)
		for i := range many {
			many[i] = fmt.Sprintf("file_%d", i)
		}
		many[700] = a.ID
		if got, err := s.Files().Missing(t.Context(), many); err != nil || len(got) != len(many)-1 || slices.Contains(got, a.ID) {
			t.Fatalf("Missing of %d ids: %d missing, %v", len(many), len(got), err)
		}
		if _, err := s.Files().Get(t.Context(), scopeA, a.ID); err != nil {
			t.Fatalf("the files are still there: %v", err)
		}
	})
}
