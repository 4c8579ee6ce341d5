package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
)

// countedBody counts the bytes a handler read of a request body.
type countedBody struct {
	r io.Reader
	n *atomic.Int64
}

func (c countedBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countedBody) Close() error { return nil }

// newBodyEnv is a server over the Kubernetes backend's fakes: these tests
// run no command, so they need no runtime or image.
func newBodyEnv(t *testing.T, mut ...func(*Config)) *env {
	t.Helper()
	_, sbx := kubetest.NewCluster(t).Sandboxes(t, kubetest.NewTarArchiver(), -1)
	e := newServerOn(t, sbx, t.TempDir(), mut...)
	newTestServer(t, e)
	return e
}

// Issue 29 item 3: a Content-Length over a route's cap is refused, in the
// route's envelope, before a byte of the body is read.
func TestBodyContentLengthOverCap(t *testing.T) {
	e := newBodyEnv(t)
	for _, tc := range []struct {
		path string
		cap  int64
	}{
		{"/api/v1/eval", maxEvalBody},
		{"/v1/responses", 32 << 20},
		{"/v1/messages", 32 << 20},
		{"/v1/chat/completions", maxChatBody},
		{"/api/v1/containers/c1/exec", maxExecBody},
		{"/api/v1/containers", maxCreateBody},
	} {
		t.Run(tc.path, func(t *testing.T) {
			var read atomic.Int64
			req := httptest.NewRequest(http.MethodPost, tc.path, countedBody{strings.NewReader(strings.Repeat("x", int(tc.cap)+1)), &read})
			req.ContentLength = tc.cap + 1
			req.Header.Set("Authorization", "Bearer "+e.keyA)
			rec := httptest.NewRecorder()
			e.srv.Handler().ServeHTTP(rec, req)
			if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), `"error"`) {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if n := read.Load(); n != 0 {
				t.Fatalf("%d bytes were read before the body was refused", n)
			}
		})
	}
}

// Issue 29 item 3: one workspace's bodies in flight are bounded. While
// workspace a holds a 6 MiB eval body, its next 3 MiB body would pass the
// 8 MiB bound and is refused with a 429 naming the flag; a small one still
// fits, workspace b's 3 MiB body is served, and once a's request ends its
// bytes are given back.
func TestBodyBytesInFlight(t *testing.T) {
	e := newBodyEnv(t, func(c *Config) { c.MaxBodyBytesInFlight = 8 << 20 })
	body := func(n int) string {
		head, tail := `{"source":"return 1","context":"`, `"}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}

	// Workspace a's held request: its handler has read the first bytes of
	// a 6 MiB body when the pipe's Write returns.
	pr, pw := io.Pipe()
	held := httptest.NewRequest(http.MethodPost, "/api/v1/eval", pr)
	held.ContentLength = 6 << 20
	held.Header.Set("Authorization", "Bearer "+e.keyA)
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.srv.Handler().ServeHTTP(rec, held)
	}()
	full := body(6 << 20)
	if _, err := pw.Write([]byte(full[:1024])); err != nil {
		t.Fatal(err)
	}

	st, b := e.do("POST", "/api/v1/eval", e.keyA, body(3<<20))
	if st != http.StatusTooManyRequests || !strings.Contains(string(b), "--max-inflight-body-mb") || !strings.Contains(string(b), "limit of 8388608") {
		t.Fatalf("a's second body: %d %s", st, b)
	}
	envelope(t, st, b)
	if st, b := e.do("POST", "/api/v1/eval", e.keyA, body(1<<10)); st != http.StatusOK {
		t.Fatalf("a's small body: %d %s", st, b)
	}
	if st, b := e.do("POST", "/api/v1/eval", e.keyB, body(3<<20)); st != http.StatusOK {
		t.Fatalf("b's body: %d %s", st, b)
	}

	if _, err := pw.Write([]byte(full[1024:])); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	<-done
	if rec.Code != http.StatusOK {
		t.Fatalf("a's held request: %d %s", rec.Code, rec.Body)
	}
	if n := e.srv.limits.held(Principal{Account: "acme", Workspace: "a"}).bodyBytes; n != 0 {
		t.Fatalf("%d bytes still reserved after a's requests ended", n)
	}
	if st, b := e.do("POST", "/api/v1/eval", e.keyA, body(3<<20)); st != http.StatusOK {
		t.Fatalf("a's body after its held one ended: %d %s", st, b)
	}
}
