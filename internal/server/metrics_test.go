package server

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
	"github.com/shellgate/shellgate/testenv"
)

func TestMetrics(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	e.create(e.keyA, "m1")
	e.create(e.keyA, "m2")
	e.exec(e.keyA, "m1", "true", "exit 1")
	e.do("GET", "/api/v1/containers/nope", e.keyA, nil)
	e.doH("GET", "/nothing-here", nil, nil)
	if err := e.mgr.Sleep(t.Context(), mustLookup(t, e, "m2")); err != nil {
		t.Fatal(err)
	}

	want := map[string]float64{
		`shellgate_http_requests_total{code="200",route="POST /api/v1/containers"}`:           2,
		`shellgate_http_requests_total{code="200",route="POST /api/v1/containers/{id}/exec"}`: 1,
		`shellgate_http_requests_total{code="404",route="GET /api/v1/containers/{id}"}`:       1,
		`shellgate_http_requests_total{code="404",route="unmatched"}`:                         1,
		`shellgate_command_duration_seconds_count{outcome="exit"}`:                            2,
		`shellgate_sandboxes{state="running"}`:                                                1,
		`shellgate_sandboxes{state="sleeping"}`:                                               1,
		`shellgate_pool_ready`:                                                                0,
		`shellgate_exec_calls_in_flight`:                                                      0,
		// No container here has a network allowlist: nothing went through.
		`shellgate_egress_connections_total{kind="tls",verdict="allowed"}`: 0,
		`shellgate_egress_dns_queries_total{verdict="denied"}`:             0,
	}
	// A request is counted when its handler returns, which may be after
	// its client has the answer: scrape until every series is as wanted.
	var text string
	var wrong []string
	testenv.Eventually(5*time.Second, func() bool {
		st, body := e.doH("GET", "/metrics", nil, nil)
		if st != http.StatusOK {
			t.Fatalf("GET /metrics: %d", st)
		}
		text, wrong = string(body), nil
		for series, v := range want {
			re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
			m := re.FindStringSubmatch(text)
			if m == nil {
				t.Fatalf("no series %s in\n%s", series, text)
			}
			if got, err := strconv.ParseFloat(m[1], 64); err != nil || got != v {
				wrong = append(wrong, fmt.Sprintf("%s = %s, want %v", series, m[1], v))
			}
		}
		return len(wrong) == 0
	})
	for _, w := range wrong {
		t.Error(w)
	}
	if !strings.Contains(text, "go_goroutines") || !strings.Contains(text, "process_resident_memory_bytes") {
		t.Error("Go and process metrics missing")
	}
}

func mustLookup(t *testing.T, e *env, ref string) string {
	t.Helper()
	c, err := e.srv.cfg.Containers.Lookup(t.Context(), Principal{Account: "acme", Workspace: "a"}, ref)
	if err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// TestPanicRecovered: a handler that panics answers 500 in the envelope,
// is logged with its stack, and the server goes on serving.
func TestPanicRecovered(t *testing.T) {
	e := newServer(t, "crun", "busybox")
	e.srv.handle("GET /api/v1/test-panic", maxEmptyBody, true, func(w http.ResponseWriter, r *http.Request, p Principal) error {
		var m map[string]int
		m["boom"]++ // nil map write
		return nil
	})
	newTestServer(t, e)
	st, body := e.do("GET", "/api/v1/test-panic", e.keyA, nil)
	if st != http.StatusInternalServerError {
		t.Fatalf("%d %s", st, body)
	}
	if msg := envelope(t, st, body); msg != "internal error" {
		t.Fatalf("a panic's text reached the client: %q", msg)
	}
	if !strings.Contains(e.logs.String(), `"msg":"handler panicked"`) || !strings.Contains(e.logs.String(), "assignment to entry in nil map") {
		t.Fatalf("logs: %s", e.logs.String())
	}
	st, body = e.doH("GET", "/healthz", nil, nil)
	if st != http.StatusOK {
		t.Fatalf("after a panic: %d %s", st, body)
	}
}

// TestPoolMetrics: /metrics counts new containers that took a pooled
// sandbox (hits) and those that started cold (misses: the pool is empty,
// or the container's limits are not the pool's defaults).
func TestPoolMetrics(t *testing.T) {
	mgr, data := sandboxtest.Open(t, "crun", "busybox", func(c *sandbox.Config) { c.PoolSize = 1 })
	e := newServerOn(t, mgr, data)
	newTestServer(t, e)
	waitPool := func() {
		for i := 0; mgr.PoolReady() < 1; i++ {
			if i > 6000 {
				t.Fatal("the pool never filled")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitPool()
	e.create(e.keyA, "pooled") // the defaults: takes the pooled sandbox
	var own containerObject
	st, b := e.do("POST", "/api/v1/containers", e.keyA, map[string]any{"name": "own", "limits": map[string]any{"memory_mb": 64}})
	e.must(st, b, &own) // its own limits: starts cold
	waitPool()
	e.create(e.keyA, "pooled-2")

	st, body := e.doH("GET", "/metrics", nil, nil)
	if st != http.StatusOK {
		t.Fatalf("GET /metrics: %d", st)
	}
	text := string(body)
	for series, want := range map[string]float64{
		"shellgate_pool_size":                   1,
		"shellgate_pool_hits_total":             2,
		"shellgate_pool_misses_total":           1,
		`shellgate_sandboxes{state="running"}`:  3,
		`shellgate_sandboxes{state="sleeping"}`: 0,
		"shellgate_containers_expired_total":    0,
	} {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
		m := re.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no series %s in\n%s", series, text)
		}
		if got, _ := strconv.ParseFloat(m[1], 64); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
