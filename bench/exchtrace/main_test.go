package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/trace"
	"strings"
	"testing"
)

// logged is a RoundTripper that marks each exchange's start as the
// benchmark's clockTransport does.
type logged struct {
	rt   http.RoundTripper
	side string
}

func (l logged) RoundTrip(r *http.Request) (*http.Response, error) {
	trace.Log(r.Context(), "exchange", l.side)
	return l.rt.RoundTrip(r)
}

// TestRead traces real loopback exchanges marked like the benchmark's and
// checks that read finds each of them, on its side, with phases that lie
// within the whole.
func TestRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		trace.Log(r.Context(), "scripted", "responses")
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("x", 2000)
	const n = 20
	for _, side := range []string{"gateway", "direct"} {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: logged{tr, side}}
		for range n {
			resp, err := c.Post(srv.URL, "application/json", strings.NewReader(body))
			if err != nil {
				trace.Stop()
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	trace.Stop()

	xs, err := read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	split := map[string]int{}
	for _, x := range xs {
		count[x.side]++
		if x.t1 <= x.t0 || x.handler == x.client {
			t.Fatalf("exchange %+v: bad ends", x)
		}
		ph, ok := x.phases()
		whole := ph[len(ph)-1]
		if whole <= 0 {
			t.Fatalf("whole %v µs", whole)
		}
		if !ok {
			continue
		}
		split[x.side]++
		if len(ph) != len(phases) {
			t.Fatalf("%d phases, want %d", len(ph), len(phases))
		}
		for i, d := range ph[:len(ph)-1] {
			if d < 0 || d > whole {
				t.Fatalf("phase %q: %v µs of a %v µs exchange", phases[i], d, whole)
			}
		}
	}
	for _, side := range []string{"gateway", "direct"} {
		if count[side] != n {
			t.Errorf("%s: %d exchanges found, want %d", side, count[side], n)
		}
		// Most exchanges of a small body are in sequence; all of them
		// overlapping would mean the phases are not found.
		if split[side] == 0 {
			t.Errorf("%s: no exchange split into phases", side)
		}
	}
}
