package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shellgate/shellgate/internal/cluster"
	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/sandbox"
)

// A hostile or broken owner node: what remoteFiles makes of answers a
// Shellgate node would never send (the well-behaved path is
// TestReplicasGateway's 08 and 09, against a real second replica). Each
// case is a real HTTP server answering one way.
func TestRemoteFilesUntrustedOwner(t *testing.T) {
	var mu sync.Mutex // the test sets the handler, the server records the headers
	var handler http.HandlerFunc
	var seenH http.Header
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenH = r.Header.Clone()
		h := handler
		mu.Unlock()
		io.Copy(io.Discard, r.Body)
		h(w, r)
	}))
	defer ts.Close()
	set := func(h http.HandlerFunc) { mu.Lock(); handler = h; mu.Unlock() }
	seen := func() http.Header { mu.Lock(); defer mu.Unlock(); return seenH }
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "t"})
	rf := remoteFiles{from: "node-a", proxied: counter, key: http.Header{"Authorization": {"Bearer sk-test"}},
		rt: cluster.Route{Node: "node-b", URL: ts.URL, Where: cluster.Proxy}, id: "cntr_1"}
	answer := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			io.WriteString(w, body)
		}
	}
	errBody := func(msg string) string { return fmt.Sprintf(`{"error":{"code":0,"message":%q}}`, msg) }
	ctx := t.Context()

	t.Run("the key and the hop header go along", func(t *testing.T) {
		set(answer(200, `hi`))
		if data, err := rf.readFile(ctx, "a.txt", 10); err != nil || string(data) != "hi" {
			t.Fatalf("%q %v", data, err)
		}
		if seen().Get("Authorization") != "Bearer sk-test" || seen().Get(HopHeader) != "node-a" {
			t.Fatalf("headers %v", seen())
		}
	})

	t.Run("content past the cap, declared or not", func(t *testing.T) {
		set(func(w http.ResponseWriter, r *http.Request) { // endless, chunked
			buf := []byte(strings.Repeat("x", 64<<10))
			for {
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		})
		if _, err := rf.readFile(ctx, "a.txt", 1<<20); !errors.Is(err, sandbox.ErrTooLarge) {
			t.Fatalf("endless body: %v", err)
		}
		set(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5368709120")
			w.WriteHeader(200)
			io.WriteString(w, "short")
		})
		if _, err := rf.readFile(ctx, "a.txt", 1<<20); !errors.Is(err, sandbox.ErrTooLarge) {
			t.Fatalf("5 GiB declared: %v", err)
		}
	})

	t.Run("errors become the sandbox's", func(t *testing.T) {
		for _, c := range []struct {
			status int
			msg    string
			want   func(error) bool
		}{
			{404, `no file "cfile_YQ" in container "x"`, func(err error) bool { return errors.Is(err, sandbox.ErrFileNotFound) }},
			{404, `no container "x"`, func(err error) bool { return err == errGatewayGone }},
			{400, "cfile_YQ is not a regular file: only regular files are served", func(err error) bool { return errors.Is(err, sandbox.ErrNotRegular) }},
			{400, "bad path", func(err error) bool { return errors.Is(err, sandbox.ErrBadPath) }},
			{422, "file too large", func(err error) bool { return errors.Is(err, sandbox.ErrTooLarge) }},
			{409, "container is running another call", func(err error) bool {
				re := (*gateway.RequestError)(nil)
				return errors.As(err, &re) && re.Status == 429 && strings.Contains(re.Message, "node-b")
			}},
			{410, "expired", func(err error) bool {
				re := (*gateway.RequestError)(nil)
				return errors.As(err, &re) && re.Status == 410
			}},
		} {
			set(answer(c.status, errBody(c.msg)))
			if _, err := rf.readFile(ctx, "a.txt", 10); !c.want(err) {
				t.Errorf("%d %q: %v", c.status, c.msg, err)
			}
		}
		// A huge, invalid-UTF-8 error text is cut short and made valid.
		set(answer(500, strings.Repeat("\xff", 1<<20)))
		_, err := rf.readFile(ctx, "a.txt", 10)
		if err == nil || len(err.Error()) > 1200 || !utf8.ValidString(err.Error()) || !strings.Contains(err.Error(), "answered 500") {
			t.Fatalf("%d bytes: %.200q", len(err.Error()), err)
		}
	})

	t.Run("objects, ids and listings are checked", func(t *testing.T) {
		// A write answered with another file than the one written.
		set(answer(200, fmt.Sprintf(`{"id":%q,"object":"container.file","path":"b.txt","bytes":1}`, CFileID("b.txt"))))
		if err := rf.writeFile(ctx, "a.txt", strings.NewReader("x")); err == nil {
			t.Fatal("a write answered for another file succeeded")
		}
		set(answer(200, fmt.Sprintf(`{"id":%q,"object":"container.file","path":"a.txt","bytes":1}`, CFileID("a.txt"))))
		if err := rf.writeFile(ctx, "a.txt", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(seen().Get("Content-Type"), "multipart/form-data") {
			t.Fatalf("upload sent as %q", seen().Get("Content-Type"))
		}
		set(answer(200, `{"id":"../../etc/passwd"}`))
		if _, err := rf.promote(ctx, "a.txt"); err == nil {
			t.Fatal("a bad promoted file id was accepted")
		}
		// Entries whose id and path disagree, or with a negative size,
		// are dropped; an endless listing is an error.
		set(answer(200, fmt.Sprintf(`{"object":"list","data":[{"id":%q,"path":"ok.txt","bytes":3,"created_at":5},`+
			`{"id":%q,"path":"other.txt","bytes":1},{"id":%q,"path":"neg.txt","bytes":-1},{"id":"cfile_Li4vZXRj","path":"../etc","bytes":1}]}`,
			CFileID("ok.txt"), CFileID("lie.txt"), CFileID("neg.txt"))))
		l, err := rf.list(ctx)
		if err != nil || len(l) != 1 || l["ok.txt"] != (remoteEntry{bytes: 3, mtime: 5}) {
			t.Fatalf("%v %v", l, err)
		}
		set(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"data":[`)
			e := fmt.Sprintf(`{"id":%q,"path":"ok.txt","bytes":3},`, CFileID("ok.txt"))
			for {
				if _, err := io.WriteString(w, e); err != nil {
					return
				}
			}
		})
		if _, err := rf.list(ctx); err == nil {
			t.Fatal("an endless listing was accepted")
		}
	})

	t.Run("changed files: new or different, newest first", func(t *testing.T) {
		before := map[string]remoteEntry{"same": {1, 10}, "grew": {1, 10}, "touched": {1, 10}}
		after := map[string]remoteEntry{"same": {1, 10}, "grew": {2, 10}, "touched": {1, 12}, "new": {5, 11}}
		var got []string
		for _, f := range changedSince(before, after) {
			got = append(got, f.Path)
		}
		if fmt.Sprint(got) != "[touched new grew]" {
			t.Fatal(got)
		}
	})
}
