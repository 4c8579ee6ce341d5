package storetest

import (
	"encoding/json"
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

// t0 is the suites' clock: fixed, in a non-UTC zone, with sub-millisecond
// digits, so that normalisation to UTC milliseconds is tested too.
var t0 = time.Date(2026, 12, 1, 9, 30, 0, 123_456_789, time.FixedZone("UTC+2", 2*3600))

func sampleContainer(scope store.Scope, name string) store.Container {
	return store.Container{
		Scope:         scope,
		Name:          name,
		Image:         "default",
		Limits:        store.Limits{CPUMillis: 1000, MemoryBytes: 5 << 30, Processes: 512, DiskBytes: 5 << 30},
		NetworkPolicy: json.RawMessage(`{"type":"allowlist","allowed_domains":["pypi.org","*.pythonhosted.org"]}`),
		Status:        store.StatusRunning,
		CreatedAt:     t0,
		LastActiveAt:  t0.Add(time.Minute),
		ExpiresAt:     t0.Add(30 * 24 * time.Hour),
	}
}

// Containers is the conformance suite of store.Containers.
func Containers(t *testing.T, f Factory) {
	t.Run("01 create, get and get by name round trip", func(t *testing.T) {
		s := open(t, f(t))
		in := sampleContainer(scopeA, "analysis")
		in.ID = "cntr_chosen_by_caller"
		c := created(t, s.Containers().Create, in)
		if !strings.HasPrefix(c.ID, "cntr_") || c.ID == in.ID || len(c.ID) > 40 {
			t.Fatalf("id %q: want a new cntr_ id of at most 40 characters", c.ID)
		}
		if c.CreatedAt.Location() != time.UTC || !c.CreatedAt.Equal(t0.Truncate(time.Millisecond)) {
			t.Fatalf("created_at %v: want %v in UTC at ms precision", c.CreatedAt, t0)
		}
		got, err := s.Containers().Get(t.Context(), scopeA, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("Get = %+v\nCreate returned %+v", got, c)
		}
		byName, err := s.Containers().GetByName(t.Context(), scopeA, "analysis")
		if err != nil || !reflect.DeepEqual(byName, c) {
			t.Fatalf("GetByName = %+v, %v", byName, err)
		}
		// Defaults: no policy, status sleeping, created now, no expiry.
		d := created(t, s.Containers().Create, store.Container{Scope: scopeA, Name: "bare"})
		if d.NetworkPolicy != nil || d.Status != store.StatusSleeping || time.Since(d.CreatedAt) > time.Minute || !d.ExpiresAt.IsZero() || !d.LastActiveAt.IsZero() {
			t.Fatalf("defaults: %+v", d)
		}
		if got, err := s.Containers().Get(t.Context(), scopeA, d.ID); err != nil || !reflect.DeepEqual(got, d) {
			t.Fatalf("Get of defaults = %+v, %v; want %+v", got, err, d)
		}
	})
	t.Run("02 names are unique within a scope only", func(t *testing.T) {
		s := open(t, f(t))
		created(t, s.Containers().Create, sampleContainer(scopeA, "x"))
		_, err := s.Containers().Create(t.Context(), sampleContainer(scopeA, "x"))
		wantErr(t, err, store.ErrConflict, "second container named x")
		for _, sc := range []store.Scope{scopeB, scopeC} {
			if _, err := s.Containers().Create(t.Context(), sampleContainer(sc, "x")); err != nil {
				t.Fatalf("name x in %+v: %v", sc, err)
			}
		}
	})
	t.Run("03 another scope's container answers like a missing one", func(t *testing.T) {
		s := open(t, f(t))
		a := created(t, s.Containers().Create, sampleContainer(scopeA, "secret"))
		othersSeeNothing(t, s.Containers(), a, a.ID, store.NewID("cntr"), func(sc store.Scope, missing string) {
			_, ef := s.Containers().GetByName(t.Context(), sc, "secret")
			_, em := s.Containers().GetByName(t.Context(), sc, "nosuch")
			sameAsMissing(t, ef, "secret", em, "nosuch", "GetByName")
			u := a
			u.Scope, u.Status = sc, store.StatusExpired
			_, ef = s.Containers().Update(t.Context(), u)
			u.ID = missing
			_, em = s.Containers().Update(t.Context(), u)
			sameAsMissing(t, ef, a.ID, em, missing, "Update")
			if p, err := s.Containers().List(t.Context(), sc, store.ListOptions{Limit: 10, Name: "secret"}); err != nil || len(p.Items) != 0 {
				t.Fatalf("%+v lists by A's name: %+v, %v", sc, p, err)
			}
		})
	})
	t.Run("04 update", func(t *testing.T) {
		s := open(t, f(t))
		c := created(t, s.Containers().Create, sampleContainer(scopeA, "u"))
		other := created(t, s.Containers().Create, sampleContainer(scopeA, "taken"))
		u := c
		u.Name, u.Image, u.Status = "u2", "busybox", store.StatusSleeping
		u.Limits.MemoryBytes = 1 << 30
		u.NetworkPolicy = nil
		u.LastActiveAt = t0.Add(time.Hour)
		u.ExpiresAt = time.Time{}
		u.CreatedAt = t0.Add(99 * time.Hour) // not updatable
		got, err := s.Containers().Update(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		want := u
		want.CreatedAt = c.CreatedAt
		want.LastActiveAt = store.Truncate(u.LastActiveAt)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Update = %+v\nwant %+v", got, want)
		}
		if _, err := s.Containers().GetByName(t.Context(), scopeA, "u"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("old name still found: %v", err)
		}
		u.Name = other.Name
		_, err = s.Containers().Update(t.Context(), u)
		wantErr(t, err, store.ErrConflict, "renaming onto a taken name")
		u.Name, u.Status = "u3", "exploded"
		_, err = s.Containers().Update(t.Context(), u)
		wantErr(t, err, store.ErrInvalid, "unknown status")
	})
	t.Run("05 delete", func(t *testing.T) {
		s := open(t, f(t))
		c := created(t, s.Containers().Create, sampleContainer(scopeA, "d"))
		deleteOnce(t, s.Containers(), c.ID)
		if _, err := s.Containers().Create(t.Context(), sampleContainer(scopeA, "d")); err != nil {
			t.Fatalf("the name of a deleted container is not free: %v", err)
		}
	})
	t.Run("06 invalid containers", func(t *testing.T) {
		s := open(t, f(t))
		for name, mod := range map[string]func(*store.Container){
			"no scope":        func(c *store.Container) { c.Scope = store.Scope{} },
			"bad workspace":   func(c *store.Container) { c.Scope.Workspace = "../x" },
			"empty name":      func(c *store.Container) { c.Name = "" },
			"name too long":   func(c *store.Container) { c.Name = strings.Repeat("n", store.MaxName+1) },
			"policy not JSON": func(c *store.Container) { c.NetworkPolicy = json.RawMessage(`{"type":`) },
			"unknown status":  func(c *store.Container) { c.Status = "paused" },
			"negative memory": func(c *store.Container) { c.Limits.MemoryBytes = -1 },
		} {
			c := sampleContainer(scopeA, "v")
			mod(&c)
			_, err := s.Containers().Create(t.Context(), c)
			wantErr(t, err, store.ErrInvalid, name)
		}
		if p, err := s.Containers().List(t.Context(), scopeA, store.ListOptions{Limit: 10}); err != nil || len(p.Items) != 0 {
			t.Fatalf("invalid creates left rows: %+v, %v", p, err)
		}
		_, err := s.Containers().Get(t.Context(), store.Scope{}, "cntr_x")
		wantErr(t, err, store.ErrInvalid, "Get without a scope")
	})
	t.Run("07 pagination", func(t *testing.T) {
		s := open(t, f(t))
		checkPages(t, nil, func(o store.ListOptions) (store.Page[store.Container], error) {
			return s.Containers().List(t.Context(), scopeA, o)
		}, func(c store.Container) string { return c.ID })
		var rows []listed
		// 25 containers, three per millisecond, created out of order, so
		// that ties on created_at are broken by id.
		for _, i := range []int{12, 3, 24, 0, 7, 19, 1, 2, 4, 5, 6, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 20, 21, 22, 23} {
			c := sampleContainer(scopeA, fmt.Sprintf("p%02d", i))
			c.CreatedAt = t0.Add(time.Duration(i/3) * time.Millisecond)
			c = created(t, s.Containers().Create, c)
			rows = append(rows, listed{c.CreatedAt, c.ID})
			created(t, s.Containers().Create, sampleContainer(scopeB, fmt.Sprintf("p%02d", i)))
		}
		checkPages(t, listOrder(rows), func(o store.ListOptions) (store.Page[store.Container], error) {
			return s.Containers().List(t.Context(), scopeA, o)
		}, func(c store.Container) string { return c.ID })
		p, err := s.Containers().List(t.Context(), scopeA, store.ListOptions{Limit: 10, Name: "p07"})
		if err != nil || len(p.Items) != 1 || p.Items[0].Name != "p07" || p.Items[0].Scope != scopeA || p.HasMore {
			t.Fatalf("List by name: %+v, %v", p, err)
		}
	})
	t.Run("08 restart keeps everything", func(t *testing.T) {
		o := f(t)
		s := open(t, o)
		var made []store.Container
		for i := range 5 {
			c := created(t, s.Containers().Create, sampleContainer(scopeA, fmt.Sprintf("r%d", i)))
			made = append(made, c)
		}
		if err := s.Containers().Delete(t.Context(), scopeA, made[4].ID); err != nil {
			t.Fatal(err)
		}
		made = made[:4]
		u := made[1]
		u.Status = store.StatusExpired
		if _, err := s.Containers().Update(t.Context(), u); err != nil {
			t.Fatal(err)
		}
		made[1] = u
		s = reopen(t, s, o)
		p, err := s.Containers().List(t.Context(), scopeA, store.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		sortByID := func(cs []store.Container) {
			slices.SortFunc(cs, func(a, b store.Container) int { return strings.Compare(a.ID, b.ID) })
		}
		sortByID(made)
		sortByID(p.Items)
		if !reflect.DeepEqual(p.Items, made) {
			t.Fatalf("after reopening:\n got %+v\nwant %+v", p.Items, made)
		}
	})
	t.Run("09 concurrent writers on two handles", func(t *testing.T) {
		o := f(t)
		handles := []store.Store{open(t, o), open(t, o)}
		const perWriter, writers = 10, 4
		var wg sync.WaitGroup
		errs := make(chan error, 2*writers*perWriter+2*writers)
		for h, st := range handles {
			for w := range writers {
				wg.Go(func() {
					for i := range perWriter {
						if _, err := st.Containers().Create(t.Context(), sampleContainer(scopeA, fmt.Sprintf("h%d-w%d-%d", h, w, i))); err != nil {
							errs <- err
						}
					}
				})
			}
		}
		// Everyone races for one name: exactly one wins.
		var won sync.WaitGroup
		wins := make(chan string, 2*writers)
		for _, st := range handles {
			for range writers {
				won.Go(func() {
					c, err := st.Containers().Create(t.Context(), sampleContainer(scopeA, "contended"))
					switch {
					case err == nil:
						wins <- c.ID
					case !errors.Is(err, store.ErrConflict):
						errs <- err
					}
				})
			}
		}
		wg.Wait()
		won.Wait()
		close(errs)
		close(wins)
		for err := range errs {
			t.Fatal(err)
		}
		if n := len(wins); n != 1 {
			t.Fatalf("%d creates of one name succeeded, want 1", n)
		}
		p, err := handles[1].Containers().List(t.Context(), scopeA, store.ListOptions{Limit: store.MaxPageSize})
		if err != nil || len(p.Items) != 2*writers*perWriter+1 {
			t.Fatalf("listed %d containers, want %d (%v)", len(p.Items), 2*writers*perWriter+1, err)
		}
	})

	t.Run("10 touch moves last use and an own expiry together", func(t *testing.T) {
		s := open(t, f(t))
		cs := s.Containers()
		own := sampleContainer(scopeA, "own") // LastActiveAt t0+1m, ExpiresAt t0+30d
		own, err := cs.Create(t.Context(), own)
		if err != nil {
			t.Fatal(err)
		}
		plain := sampleContainer(scopeA, "plain")
		plain.ExpiresAt, plain.LastActiveAt = time.Time{}, time.Time{}
		if plain, err = cs.Create(t.Context(), plain); err != nil {
			t.Fatal(err)
		}
		at := t0.Add(2 * time.Hour)
		for _, id := range []string{own.ID, plain.ID} {
			if err := cs.Touch(t.Context(), scopeA, id, at); err != nil {
				t.Fatal(err)
			}
		}
		got, _ := cs.Get(t.Context(), scopeA, own.ID)
		allowance := own.ExpiresAt.Sub(own.LastActiveAt)
		if !got.LastActiveAt.Equal(store.Truncate(at)) || got.ExpiresAt.Sub(got.LastActiveAt) != allowance {
			t.Fatalf("after touch: last active %v, expires %v; want %v and an allowance of %v", got.LastActiveAt, got.ExpiresAt, at, allowance)
		}
		gotPlain, _ := cs.Get(t.Context(), scopeA, plain.ID)
		if !gotPlain.LastActiveAt.Equal(store.Truncate(at)) || !gotPlain.ExpiresAt.IsZero() {
			t.Fatalf("plain after touch: %+v", gotPlain)
		}
		// An earlier time never moves it back.
		if err := cs.Touch(t.Context(), scopeA, own.ID, t0); err != nil {
			t.Fatal(err)
		}
		if again, _ := cs.Get(t.Context(), scopeA, own.ID); !reflect.DeepEqual(again, got) {
			t.Fatalf("an earlier touch changed %+v to %+v", got, again)
		}
		wantErr(t, cs.Touch(t.Context(), scopeB, own.ID, at.Add(time.Hour)), store.ErrNotFound, "touch in another scope")
		wantErr(t, cs.Touch(t.Context(), scopeA, "cntr_missing", at), store.ErrNotFound, "touch of a missing container")
	})

	t.Run("11 expiring, expire and find across scopes", func(t *testing.T) {
		s := open(t, f(t))
		cs := s.Containers()
		mk := func(scope store.Scope, name string, lastUse, expires time.Time) store.Container {
			c := sampleContainer(scope, name)
			c.CreatedAt, c.LastActiveAt, c.ExpiresAt = t0, lastUse, expires
			c, err := cs.Create(t.Context(), c)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		now := t0.Add(40 * 24 * time.Hour)
		idleBefore := now.Add(-30 * 24 * time.Hour) // t0 + 10 days
		dueOwn := mk(scopeA, "due-own", t0.Add(time.Hour), now.Add(-time.Minute))
		mk(scopeB, "not-due-own", t0.Add(time.Hour), now.Add(time.Minute))
		dueIdle := mk(scopeC, "due-idle", t0.Add(24*time.Hour), time.Time{})
		neverUsed := mk(scopeA, "never-used", time.Time{}, time.Time{}) // last use = created = t0
		mk(scopeB, "recent", now.Add(-time.Hour), time.Time{})
		ids := func(cs []store.Container) []string {
			var out []string
			for _, c := range cs {
				out = append(out, c.Name)
			}
			slices.Sort(out)
			return out
		}
		got, err := cs.Expiring(t.Context(), now, idleBefore, 100)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"due-idle", "due-own", "never-used"}; !slices.Equal(ids(got), want) {
			t.Fatalf("expiring %v, want %v", ids(got), want)
		}
		if page, err := cs.Expiring(t.Context(), now, idleBefore, 2); err != nil || len(page) != 2 {
			t.Fatalf("limit 2: %d, %v", len(page), err)
		}
		if _, err := cs.Expiring(t.Context(), now, idleBefore, 0); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("limit 0: %v", err)
		}
		found, err := cs.Find(t.Context(), dueIdle.ID)
		if err != nil || !reflect.DeepEqual(found, dueIdle) {
			t.Fatalf("Find = %+v, %v; want %+v", found, err, dueIdle)
		}
		_, err = cs.Find(t.Context(), "cntr_missing")
		wantErr(t, err, store.ErrNotFound, "find of a missing container")

		// A use since the read wins over the expiry.
		if err := cs.Touch(t.Context(), scopeA, dueOwn.ID, now); err != nil {
			t.Fatal(err)
		}
		if ok, err := cs.Expire(t.Context(), dueOwn.ID, dueOwn.LastActiveAt); err != nil || ok {
			t.Fatalf("expire after a touch: %v, %v; want false", ok, err)
		}
		for _, c := range []store.Container{dueIdle, neverUsed} {
			if ok, err := cs.Expire(t.Context(), c.ID, c.LastActiveAt); err != nil || !ok {
				t.Fatalf("expire %s: %v, %v", c.Name, ok, err)
			}
			if ok, err := cs.Expire(t.Context(), c.ID, c.LastActiveAt); err != nil || ok {
				t.Fatalf("expire %s twice: %v, %v", c.Name, ok, err)
			}
		}
		got, err = cs.Expiring(t.Context(), now, idleBefore, 100)
		if err != nil || len(got) != 0 {
			t.Fatalf("expiring after expiry: %v, %v", ids(got), err)
		}
		gone, _ := cs.Get(t.Context(), scopeC, dueIdle.ID)
		if gone.Status != store.StatusExpired {
			t.Fatalf("status %q, want expired", gone.Status)
		}
		// An expired container is not touched back to life.
		if err := cs.Touch(t.Context(), scopeC, dueIdle.ID, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if still, _ := cs.Get(t.Context(), scopeC, dueIdle.ID); !reflect.DeepEqual(still, gone) {
			t.Fatalf("touch changed an expired container: %+v", still)
		}
	})
}
