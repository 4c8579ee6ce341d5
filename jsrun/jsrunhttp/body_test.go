package jsrunhttp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shellgate/shellgate/jsrun"
)

// sourceBody streams {"source":"xxx…"} of n bytes in all without holding
// it: what a client sends to exhaust the server's memory.
type sourceBody struct {
	n, off int64
}

const sourceHead, sourceTail = `{"source":"`, `"}`

func (b *sourceBody) Read(p []byte) (int, error) {
	if b.off >= b.n {
		return 0, io.EOF
	}
	i := 0
	for ; i < len(p) && b.off < b.n; i, b.off = i+1, b.off+1 {
		switch {
		case b.off < int64(len(sourceHead)):
			p[i] = sourceHead[b.off]
		case b.off >= b.n-int64(len(sourceTail)):
			p[i] = sourceTail[b.off-(b.n-int64(len(sourceTail)))]
		default:
			p[i] = 'x'
		}
	}
	return i, nil
}

// countingBody counts the bytes the handler read of a request body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func newRunner(t *testing.T) *jsrun.Runner {
	t.Helper()
	runner, err := jsrun.NewRunner(jsrun.Config{Secret: []byte(strings.Repeat("s", 32)), Store: jsrun.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	return runner
}

// Issue 29 item 3: eight parallel requests of 39 MiB each, their source
// far over its 256 KiB limit, took the server from 80 MB to 1.4 GB: the
// handler read each body whole (io.ReadAll, then a decoder's copy) before
// any check. Now the source is refused once its limit has arrived, so the
// server reads and allocates a small fraction of what was sent.
func TestBodyHugeSourceRefusedWhileRead(t *testing.T) {
	h := NewHandler(Config{Runner: newRunner(t)})
	var read atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = countingBody{r.Body, &read}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()

	const parallel, size = 8, 39 << 20
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	codes := make([]string, parallel)
	for i := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, &sourceBody{n: size})
			req.ContentLength = size
			resp, err := srv.Client().Do(req)
			if err != nil {
				codes[i] = "error: " + err.Error()
				return
			}
			defer resp.Body.Close()
			var out Response
			json.NewDecoder(resp.Body).Decode(&out)
			if out.Error != nil {
				codes[i] = out.Error.Code
			}
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	for i, c := range codes {
		if c != string(jsrun.CodeSourceTooLarge) {
			t.Errorf("request %d: got %q, want %s", i, c, jsrun.CodeSourceTooLarge)
		}
	}
	sent := int64(parallel * size)
	t.Logf("sent %d bytes; the handler read %d and the process allocated %d", sent, read.Load(), after.TotalAlloc-before.TotalAlloc)
	// Each request is read to its source's limit plus the chunk it came
	// in; before, each was read whole.
	if got := read.Load(); got > parallel*(1<<20) {
		t.Errorf("the handler read %d bytes of %d sent; want at most 1 MiB a request", got, sent)
	}
	if alloc := int64(after.TotalAlloc - before.TotalAlloc); alloc > sent/20 {
		t.Errorf("serving %d bytes of requests allocated %d bytes; want under 1/20 of them", sent, alloc)
	}
}

// A Content-Length over the cap is refused before a byte is read.
func TestBodyContentLengthOverCapNotRead(t *testing.T) {
	h := NewHandler(Config{Runner: newRunner(t), MaxBodyBytes: 1 << 20})
	var read atomic.Int64
	req := httptest.NewRequest(http.MethodPost, "/api/v1/eval", countingBody{io.NopCloser(&sourceBody{n: 2 << 20}), &read})
	req.ContentLength = 2 << 20
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), CodeBodyTooLarge) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if n := read.Load(); n != 0 {
		t.Fatalf("%d bytes of the body were read before it was refused", n)
	}
}

// Each field is held to the most a legal request has there, measured as
// decoded: escaping makes no legal value too large, and a key spelled
// another way gets no larger cap.
func TestBodyFieldCaps(t *testing.T) {
	s := newServer(t)
	esc := strings.Repeat(`\u0078`, 200<<10) // 200 KiB of x, 1.2 MiB of JSON
	for _, tc := range []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"1 escaped source under its limit runs", `{"source":"return 1 // ` + esc + `"}`, 200, "", ""},
		{"2 source over its limit", `{"source":"` + strings.Repeat("x", 256<<10+1) + `"}`, 400, "RUN_SOURCE_TOO_LARGE", "over the limit of 262144"},
		{"3 escaped key gets the small cap", `{"sourc\u0065":"return 1 // ` + strings.Repeat("x", 100<<10) + `"}`, 413, CodeBodyTooLarge, "larger than 65536"},
		{"4 unknown field", `{"junk":"` + strings.Repeat("x", 100<<10) + `"}`, 413, CodeBodyTooLarge, `field "junk"`},
		{"5 small unknown field keeps its message", `{"junk":1}`, 400, CodeBadRequest, `unknown field "junk"`},
		{"6 not an object", `"` + strings.Repeat("x", 1<<20) + `"`, 400, CodeBadRequest, "must be a JSON object"},
		{"7 whitespace is not counted against a field", `{"source":"return 1","limits":{"timeout_ms":10000` + strings.Repeat(" ", 70<<10) + `}}`, 200, "", ""},
		{"8 case-folded key has the field's cap", `{"SOURCE":"` + strings.Repeat("x", 256<<10+1) + `"}`, 400, "RUN_SOURCE_TOO_LARGE", ""},
		{"9 continuation over its limit", `{"source":"return 1","continuation":"` + strings.Repeat("a", 32<<20+1) + `"}`, 400, "RUN_PROTOCOL_ERROR", "invalid continuation: over the limit of 33554432"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, s.URL+"/api/v1/eval", strings.NewReader(tc.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out Response
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %+v", resp.StatusCode, tc.status, out.Error)
			}
			if tc.code != "" && (out.Error == nil || out.Error.Code != tc.code || !strings.Contains(out.Error.Message, tc.msg)) {
				t.Fatalf("got %+v, want %s %q", out.Error, tc.code, tc.msg)
			}
		})
	}
}
