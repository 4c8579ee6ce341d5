package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// Quotas is the conformance suite of the capped creates
// (Containers.CreateWithin, Files.CreateWithin, Files.Used): what counts,
// that a refused create stores nothing, that other scopes are unaffected,
// and that creates racing on two handles never go over the cap.
func Quotas(t *testing.T, f Factory) {
	t.Run("01 containers: the cap counts the scope's containers that are not expired", func(t *testing.T) {
		s := open(t, f(t))
		cs := s.Containers()
		var ids []string
		for i := range 3 {
			c, err := cs.CreateWithin(t.Context(), sampleContainer(scopeA, fmt.Sprint("c", i)), 3)
			if err != nil {
				t.Fatalf("create %d of 3: %v", i, err)
			}
			ids = append(ids, c.ID)
		}
		_, err := cs.CreateWithin(t.Context(), sampleContainer(scopeA, "over"), 3)
		wantErr(t, err, store.ErrQuota, "the 4th create under a cap of 3")
		if _, err := cs.GetByName(t.Context(), scopeA, "over"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused container was stored: %v", err)
		}
		// Other scopes have caps of their own; an uncapped create ignores it.
		for _, sc := range []store.Scope{scopeB, scopeC} {
			if _, err := cs.CreateWithin(t.Context(), sampleContainer(sc, "over"), 3); err != nil {
				t.Fatalf("scope %v: %v", sc, err)
			}
		}
		// An expired container does not count; a deleted one is gone.
		c, err := cs.Get(t.Context(), scopeA, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := cs.Expire(t.Context(), c.ID, c.LastActiveAt); !ok || err != nil {
			t.Fatalf("expire: %v %v", ok, err)
		}
		if _, err := cs.CreateWithin(t.Context(), sampleContainer(scopeA, "after-expiry"), 3); err != nil {
			t.Fatalf("create after an expiry: %v", err)
		}
		_, err = cs.CreateWithin(t.Context(), sampleContainer(scopeA, "over"), 3)
		wantErr(t, err, store.ErrQuota, "a create at the cap again")
		if err := cs.Delete(t.Context(), scopeA, ids[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CreateWithin(t.Context(), sampleContainer(scopeA, "after-delete"), 3); err != nil {
			t.Fatalf("create after a delete: %v", err)
		}
		// A taken name is still a conflict under the cap.
		if err := cs.Delete(t.Context(), scopeA, ids[2]); err != nil {
			t.Fatal(err)
		}
		_, err = cs.CreateWithin(t.Context(), sampleContainer(scopeA, "after-delete"), 3)
		wantErr(t, err, store.ErrConflict, "a taken name under the cap")
	})
	t.Run("02 files: the cap counts the scope's bytes", func(t *testing.T) {
		s := open(t, f(t))
		fs := s.Files()
		file := func(sc store.Scope, name string, n int64) store.File {
			x := sampleFile(sc, name)
			x.Bytes = n
			return x
		}
		if used, err := fs.Used(t.Context(), scopeA); err != nil || used != 0 {
			t.Fatalf("Used of an empty scope = %d, %v", used, err)
		}
		a, err := fs.CreateWithin(t.Context(), file(scopeA, "a", 600), 1000)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.CreateWithin(t.Context(), file(scopeA, "b", 400), 1000); err != nil {
			t.Fatalf("a file that fills the cap exactly: %v", err)
		}
		_, err = fs.CreateWithin(t.Context(), file(scopeA, "c", 1), 1000)
		wantErr(t, err, store.ErrQuota, "one byte over the cap")
		if used, err := fs.Used(t.Context(), scopeA); err != nil || used != 1000 {
			t.Fatalf("Used = %d, %v; want 1000 (the refused file not stored)", used, err)
		}
		if _, err := fs.CreateWithin(t.Context(), file(scopeB, "c", 1000), 1000); err != nil {
			t.Fatalf("another scope: %v", err)
		}
		if err := fs.Delete(t.Context(), scopeA, a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := fs.CreateWithin(t.Context(), file(scopeA, "c", 600), 1000); err != nil {
			t.Fatalf("after a delete: %v", err)
		}
	})
	t.Run("03 creates racing on two handles never go over the cap", func(t *testing.T) {
		o := f(t)
		handles := []store.Store{open(t, o), open(t, o)}
		const perHandle, max = 8, 5
		race := func(fn func(st store.Store, i int) error) (won int, errs []error) {
			var mu sync.Mutex
			raceHandles(handles, perHandle, func(st store.Store, i int) {
				err := fn(st, i)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case !errors.Is(err, store.ErrQuota):
					errs = append(errs, err)
				}
			})
			return won, errs
		}
		for r := range 5 {
			sc := store.Scope{Account: "race", Workspace: fmt.Sprint("w", r)}
			won, errs := race(func(st store.Store, i int) error {
				_, err := st.Containers().CreateWithin(t.Context(), sampleContainer(sc, fmt.Sprint("c", i)), max)
				return err
			})
			if won != max || len(errs) > 0 {
				t.Fatalf("round %d: %d of %d container creates won under a cap of %d; other errors: %v", r, won, 2*perHandle, max, errs)
			}
			won, errs = race(func(st store.Store, i int) error {
				x := sampleFile(sc, fmt.Sprint("f", i))
				x.Bytes = 100
				x.CreatedAt = time.Time{}
				_, err := st.Files().CreateWithin(t.Context(), x, 100*max)
				return err
			})
			if won != max || len(errs) > 0 {
				t.Fatalf("round %d: %d of %d file creates won under a cap of %d files' bytes; other errors: %v", r, won, 2*perHandle, max, errs)
			}
		}
	})
}
