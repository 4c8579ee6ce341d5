package server

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// fakeClock is the server's clock in the retention tests: it moves only
// when the test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestRetention(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	e := newEnv(t, "crun", "busybox", func(c *Config) { c.Now = clock.Now })
	if e.srv.cfg.Retention != 30*24*time.Hour {
		t.Fatalf("default retention %v", e.srv.cfg.Retention)
	}
	sweep := func(t *testing.T, want int) {
		t.Helper()
		n, err := e.srv.Sweep(t.Context())
		if err != nil || n != want {
			t.Fatalf("sweep expired %d (%v), want %d", n, err, want)
		}
	}
	get := func(ref string) containerObject {
		var c containerObject
		st, b := e.do("GET", "/api/v1/containers/"+ref, e.keyA, nil)
		e.must(st, b, &c)
		return c
	}
	own := func(name string, minutes int) containerObject {
		var c containerObject
		st, b := e.do("POST", "/api/v1/containers", e.keyA, map[string]any{"name": name,
			"expires_after": map[string]any{"anchor": "last_active_at", "minutes": minutes}})
		e.must(st, b, &c)
		return c
	}

	long := e.create(e.keyA, "long") // the server's 30 days
	used := e.create(e.keyA, "used") // 30 days, used on day 20
	short := own("short", 10)        // its own 10 minutes
	sliding := own("sliding", 10)    // 10 minutes, used at minute 5
	for _, c := range []containerObject{long, used, short, sliding} {
		e.exec(e.keyA, c.ID, "echo kept > note")
	}
	if c := get("short"); c.ExpiresAfter.Minutes != 10 || c.ExpiresAt != c.LastActiveAt+600 {
		t.Fatalf("own expiry: %+v", c)
	}

	t.Run("01 nothing is due at first", func(t *testing.T) {
		sweep(t, 0)
	})

	t.Run("02 a use slides the container's own expiry", func(t *testing.T) {
		clock.Add(5 * time.Minute)
		before := get("sliding")
		e.exec(e.keyA, "sliding", "cat note")
		after := get("sliding")
		if after.LastActiveAt != before.LastActiveAt+300 || after.ExpiresAt != after.LastActiveAt+600 {
			t.Fatalf("before %+v\nafter %+v", before, after)
		}
	})

	t.Run("03 its own expires_after: expired 10 minutes after its last use", func(t *testing.T) {
		clock.Add(6 * time.Minute) // minute 11: short is due, sliding (used at 5) is not
		sweep(t, 1)
		c := get("short")
		if c.Status != "expired" {
			t.Fatalf("short: %+v", c)
		}
		if get("sliding").Status == "expired" {
			t.Fatal("sliding expired 6 minutes after its last use")
		}
		if _, err := e.mgr.Status(short.ID); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("the expired container's home is still there: %v", err)
		}
		clock.Add(5 * time.Minute) // minute 16
		sweep(t, 1)
		if get("sliding").Status != "expired" {
			t.Fatal("sliding did not expire 11 minutes after its last use")
		}
	})

	t.Run("04 an expired container answers as expired, not as missing", func(t *testing.T) {
		st, b := e.do("POST", "/api/v1/containers/short/exec", e.keyA, map[string]any{"commands": []string{"cat note"}})
		if msg := envelope(t, st, b); st != http.StatusGone || !strings.Contains(msg, "expired") {
			t.Fatalf("exec: %d %s", st, b)
		}
		st, b = e.do("GET", "/v1/containers/"+short.ID, e.keyA, nil)
		var c containerObject
		e.must(st, b, &c)
		if c.Status != "expired" {
			t.Fatalf("/v1: %s", b)
		}
		var page listObject
		st, b = e.do("GET", "/api/v1/containers?name=short", e.keyA, nil)
		e.must(st, b, &page)
		if len(page.Data) != 1 || page.Data[0].Status != "expired" {
			t.Fatalf("list: %s", b)
		}
		// Another workspace still sees nothing at all.
		if st, b := e.do("GET", "/api/v1/containers/"+short.ID, e.keyB, nil); st != http.StatusNotFound {
			t.Fatalf("workspace b: %d %s", st, b)
		}
		// Expiry is final: a later use does not bring it back.
		sweep(t, 0)
		if get("short").Status != "expired" {
			t.Fatal("expired container came back")
		}
	})

	t.Run("05 a container in use is not expired under its call", func(t *testing.T) {
		clock.Add(20*24*time.Hour - 16*time.Minute) // day 20
		e.exec(e.keyA, "used", "cat note")
		clock.Add(10*24*time.Hour + time.Minute) // day 30 + 1 minute: long is due, used is not
		release, ok := e.srv.calls.tryAcquire(long.ID)
		if !ok {
			t.Fatal("call lock busy")
		}
		sweep(t, 0)
		release()
		sweep(t, 1)
		if get("long").Status != "expired" || get("used").Status == "expired" {
			t.Fatalf("long %+v, used %+v", get("long"), get("used"))
		}
		r := e.exec(e.keyA, "used", "cat note")
		if r.Output[0].Stdout != "kept\n" {
			t.Fatalf("used lost its files: %+v", r.Output[0])
		}
	})

	t.Run("06 a crash between marking and deleting is finished by the next sweep", func(t *testing.T) {
		victim := e.create(e.keyA, "victim")
		e.exec(e.keyA, victim.ID, "echo x > f")
		c, err := e.srv.cfg.Containers.Find(t.Context(), victim.ID)
		if err != nil {
			t.Fatal(err)
		}
		// As a process killed right after Expire would leave it.
		if ok, err := e.srv.cfg.Containers.Expire(t.Context(), victim.ID, c.LastActiveAt); !ok || err != nil {
			t.Fatalf("%v %v", ok, err)
		}
		if _, err := e.mgr.Status(victim.ID); err != nil {
			t.Fatalf("home before the sweep: %v", err)
		}
		sweep(t, 0)
		if _, err := e.mgr.Status(victim.ID); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("home of an expired container after the sweep: %v", err)
		}
	})

	t.Run("07 an expired container can be deleted", func(t *testing.T) {
		st, b := e.do("DELETE", "/api/v1/containers/short", e.keyA, nil)
		e.must(st, b, nil)
		if st, _ := e.do("GET", "/api/v1/containers/short", e.keyA, nil); st != http.StatusNotFound {
			t.Fatalf("after delete: %d", st)
		}
	})

	t.Run("08 the sweep leaves sandboxes that are not containers alone", func(t *testing.T) {
		if err := e.mgr.Create(t.Context(), "cli-box"); err != nil {
			t.Fatal(err)
		}
		sweep(t, 0)
		if _, err := e.mgr.Status("cli-box"); err != nil {
			t.Fatalf("a CLI sandbox after the sweep: %v", err)
		}
	})
}

// TestIdleSleep: a container sleeps once idle for the manager's idle time
// (serve's --idle-sleep), keeps its files, and the next call wakes it and
// pays as woken; sleeping is not expiry.
func TestIdleSleep(t *testing.T) {
	mgr, data := sandboxtest.Open(t, "crun", "busybox", func(c *sandbox.Config) { c.IdleTimeout = 200 * time.Millisecond })
	e := newServerOn(t, mgr, data)
	newTestServer(t, e)
	c := e.create(e.keyA, "idle")
	e.exec(e.keyA, "idle", "echo kept > note")
	var got containerObject
	for i := 0; ; i++ {
		st, b := e.do("GET", "/api/v1/containers/idle", e.keyA, nil)
		e.must(st, b, &got)
		if got.Status == "sleeping" {
			break
		}
		if i > 1000 {
			t.Fatalf("never slept: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := e.exec(e.keyA, c.ID, "cat note")
	if r.Output[0].Stdout != "kept\n" || r.Usage.ContainerStart != "woken" {
		t.Fatalf("after idle sleep: %+v", r)
	}
	if n, err := e.srv.Sweep(t.Context()); n != 0 || err != nil {
		t.Fatalf("sweep after a sleep: %d %v", n, err)
	}
}
