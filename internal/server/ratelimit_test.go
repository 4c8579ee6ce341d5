package server

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// doHeaders is do that also returns the answer's headers.
func (e *env) doHeaders(method, path, key string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	return roundTrip(e.t, req)
}

// TestRateLimit: a burst of requests from one workspace gets exactly its
// bucket's worth of answers and 429s for the rest, in each API's
// envelope with Retry-After; another workspace has its own bucket. The
// rate is so slow that no token comes back during the test.
func TestRateLimit(t *testing.T) {
	e := newEnv(t, "crun", "busybox", func(c *Config) { c.RateLimit = 0.001; c.RateBurst = 5 })
	count := func(key, path string, n int) (ok, limited int) {
		for range n {
			st, h, b := e.doHeaders("GET", path, key)
			switch st {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				limited++
				ra, err := strconv.Atoi(h.Get("Retry-After"))
				if err != nil || ra < 1 {
					t.Fatalf("Retry-After %q", h.Get("Retry-After"))
				}
				if path[:4] == "/v1/" {
					if d := openAIEnvelope(t, st, b); d.Type != "rate_limit_error" || d.Code == nil || *d.Code != "rate_limit_exceeded" {
						t.Fatalf("%s", b)
					}
				} else {
					envelope(t, st, b)
				}
			default:
				t.Fatalf("%d %s", st, b)
			}
		}
		return ok, limited
	}
	if ok, limited := count(e.keyA, "/api/v1/containers", 20); ok != 5 || limited != 15 {
		t.Fatalf("workspace a: %d answered, %d limited; want 5 and 15", ok, limited)
	}
	// The bucket is the workspace's, whichever API shape it calls.
	if ok, limited := count(e.keyA, "/v1/containers", 3); ok != 0 || limited != 3 {
		t.Fatalf("workspace a on /v1: %d answered, %d limited", ok, limited)
	}
	if ok, limited := count(e.keyB, "/v1/containers", 8); ok != 5 || limited != 3 {
		t.Fatalf("workspace b: %d answered, %d limited; want 5 and 3", ok, limited)
	}
	// Routes without a key are not counted.
	for range 10 {
		if st, _ := e.doH("GET", "/healthz", nil, nil); st != 200 {
			t.Fatalf("healthz: %d", st)
		}
	}
}

// TestConcurrencyLimit: with two calls of a workspace in flight, every
// further request of that workspace is 429 until one ends; another
// workspace is unaffected.
func TestConcurrencyLimit(t *testing.T) {
	e := newEnv(t, "crun", "busybox", func(c *Config) { c.MaxConcurrent = 2 })
	one := e.create(e.keyA, "one")
	// Two exec calls are admitted and then wait for the container's call
	// lock, which the test holds: they stay in flight until it lets go.
	release, ok := e.srv.calls.tryAcquire(one.ID)
	if !ok {
		t.Fatal("call lock busy")
	}
	var wg sync.WaitGroup
	statuses := make(chan int, 2)
	for range 2 {
		wg.Go(func() {
			st, _ := e.do("POST", "/api/v1/containers/"+one.ID+"/exec", e.keyA, map[string]any{"commands": []string{"true"}})
			statuses <- st
		})
	}
	pa := Principal{Account: "acme", Workspace: "a"}
	for i := 0; e.srv.limits.held(pa).inflight < 2; i++ {
		if i > 3000 {
			t.Fatal("the two calls never got in flight")
		}
		time.Sleep(10 * time.Millisecond)
	}
	limited := 0
	for _, path := range []string{"/api/v1/containers", "/api/v1/containers/one", "/v1/containers", "/api/v1/usage", "/v1/containers/" + one.ID} {
		st, h, b := e.doHeaders("GET", path, e.keyA)
		if st == http.StatusTooManyRequests && h.Get("Retry-After") == "1" {
			limited++
			if !strings.Contains(string(b), "shellgate serve --max-concurrent") {
				t.Errorf("%s: the 429 does not name the flag that raises the quota: %s", path, b)
			}
		} else {
			t.Errorf("%s: %d %s", path, st, b)
		}
	}
	if limited != 5 {
		t.Fatalf("%d of 5 requests over the concurrency limit were 429", limited)
	}
	if st, b := e.do("GET", "/api/v1/containers", e.keyB, nil); st != http.StatusOK {
		t.Fatalf("workspace b: %d %s", st, b)
	}
	release()
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != http.StatusOK {
			t.Fatalf("a held call answered %d", st)
		}
	}
	// An exec handler ends a moment after its answer (the ledger write
	// follows it); then its place is free.
	for i := 0; e.srv.limits.held(pa).inflight > 0; i++ {
		if i > 3000 {
			t.Fatalf("%d requests still counted in flight", e.srv.limits.held(pa).inflight)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, b := e.do("GET", "/api/v1/containers", e.keyA, nil); st != http.StatusOK {
		t.Fatalf("after the calls ended: %d %s", st, b)
	}
}
