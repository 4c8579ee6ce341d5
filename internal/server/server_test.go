package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/sqlstore"
	"github.com/shellgate/shellgate/jsrun"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
	"github.com/shellgate/shellgate/testenv"
)

// These tests run the server in-process over a real store (SQLite in a
// temporary data directory), real API keys and a real sandbox manager on
// a real OCI runtime, and talk to it over loopback HTTP like curl does.

// env is one server under test.
type env struct {
	t    testing.TB
	srv  *Server
	mgr  sandbox.Backend
	st   *sqlstore.DB
	url  string
	data string // the data directory
	keyA string // account acme, workspace a
	keyB string // account acme, workspace b
	logs *testenv.Buffer
}

// newServer builds a server on runtime rt and image img without serving it.
func newServer(t testing.TB, rt, img string, mut ...func(*Config)) *env {
	t.Helper()
	mgr, data := sandboxtest.Open(t, rt, img)
	return newServerOn(t, mgr, data, mut...)
}

// newServerOn builds a server over a manager the test opened itself.
func newServerOn(t testing.TB, mgr sandbox.Backend, data string, mut ...func(*Config)) *env {
	t.Helper()
	st, err := sqlstore.OpenSQLite(t.Context(), data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newServerOnStore(t, mgr, data, st, mut...)
}

// newServerOnStore builds a server over a manager and a store the test
// opened itself.
func newServerOnStore(t testing.TB, mgr sandbox.Backend, data string, st *sqlstore.DB, mut ...func(*Config)) *env {
	t.Helper()
	logs := &testenv.Buffer{}
	b := StoreBackend{St: st}
	runner, err := jsrun.NewRunner(jsrun.Config{Secret: []byte(strings.Repeat("k", 32)), Store: st.Continuations(), Audience: "shellgate-eval", OrderedObjects: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Close() })
	blobs, err := store.OpenLocalBlobs(filepath.Join(data, store.LocalBlobsDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	cfg := Config{Sandboxes: mgr, Keys: b, Containers: b, Ledger: b, EvalRunner: runner, Guardrails: st.Guardrails(),
		Files: st.Files(), Blobs: blobs, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		// No per-workspace quotas unless a test sets them: the load tests
		// and benchmarks run more of one workspace than the defaults allow
		// (quota_test.go tests them).
		MaxConcurrent: -1, MaxContainers: -1, MaxAwake: -1, MaxWorkspaceFileBytes: -1}
	for _, f := range mut {
		f(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, mgr: mgr, st: st, logs: logs, data: data}
	e.keyA = e.newKey("acme", "a")
	e.keyB = e.newKey("acme", "b")
	return e
}

// newEnv is newServer served by httptest on a loopback port.
func newEnv(t testing.TB, rt, img string, mut ...func(*Config)) *env {
	e := newServer(t, rt, img, mut...)
	newTestServer(t, e)
	return e
}

func newTestServer(t testing.TB, e *env) *httptest.Server {
	ts := httptest.NewServer(e.srv.Handler())
	t.Cleanup(ts.Close)
	e.url = ts.URL
	return ts
}

func (e *env) newKey(account, workspace string) string {
	_, tok, err := e.st.Keys().Create(context.Background(), store.Scope{Account: account, Workspace: workspace})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// do sends one request with the key as a Bearer token; body is sent as is
// when it is a string, else as JSON.
func (e *env) do(method, path, key string, body any) (int, []byte) {
	e.t.Helper()
	return e.doH(method, path, body, map[string]string{"Authorization": "Bearer " + key})
}

func (e *env) doH(method, path string, body any, hdr map[string]string) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		if v != "Bearer " {
			req.Header.Set(k, v)
		}
	}
	st, _, out := roundTrip(e.t, req)
	return st, out
}

// ledgerOf is the usage ledger of the acme account's workspace, all time,
// by container.
func ledgerOf(t testing.TB, st store.Store, workspace string) []store.UsageTotal {
	t.Helper()
	sums, err := st.Usage().ByContainer(t.Context(), store.Scope{Account: "acme", Workspace: workspace}, time.Time{}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// roundTrip sends req and reads its whole answer: status, headers and
// body; a request that gets no answer, or whose body cannot be read,
// fails t.
func roundTrip(t testing.TB, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	b := bodyOf(t, resp, err)
	return resp.StatusCode, resp.Header, b
}

// bodyOf is the whole body of an SDK call's raw answer (resp, err), closed
// after; an error from the call or the read fails t.
func bodyOf(t testing.TB, resp *http.Response, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// must decodes a 200 answer into v.
func (e *env) must(status int, body []byte, v any) {
	e.t.Helper()
	if status != http.StatusOK {
		e.t.Fatalf("status %d: %s", status, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			e.t.Fatalf("%v: %s", err, body)
		}
	}
}

func (e *env) create(key, name string) containerObject {
	e.t.Helper()
	var body any = map[string]string{}
	if name != "" {
		body = map[string]string{"name": name}
	}
	var c containerObject
	st, b := e.do("POST", "/api/v1/containers", key, body)
	e.must(st, b, &c)
	return c
}

func (e *env) exec(key, ref string, cmds ...string) execResponse {
	e.t.Helper()
	var r execResponse
	st, b := e.do("POST", "/api/v1/containers/"+ref+"/exec", key, map[string]any{"commands": cmds})
	e.must(st, b, &r)
	return r
}

// envelope checks that body is the error envelope with the status as its
// code, and returns the message.
func envelope(t *testing.T, status int, body []byte) string {
	t.Helper()
	var eb struct {
		Error *struct {
			Code    *int    `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil || eb.Error.Code == nil || eb.Error.Message == nil {
		t.Fatalf("status %d: not an error envelope: %s", status, body)
	}
	if *eb.Error.Code != status {
		t.Fatalf("envelope code %d, status %d", *eb.Error.Code, status)
	}
	return *eb.Error.Message
}

func TestContainersAPI(t *testing.T) {
	e := newEnv(t, "crun", "busybox")

	named := e.create(e.keyA, "analysis")
	if !strings.HasPrefix(named.ID, "cntr_") || named.Name != "analysis" || named.Object != "container" || named.Status != "running" || named.CreatedAt == 0 {
		t.Fatalf("created: %+v", named)
	}
	anon := e.create(e.keyA, "")
	if anon.Name != anon.ID {
		t.Fatalf("a container without a name is named by its id: %+v", anon)
	}
	st, b := e.do("POST", "/api/v1/containers", e.keyA, map[string]string{"name": "analysis"})
	if st != http.StatusConflict {
		t.Fatalf("second container named analysis: %d %s", st, b)
	}
	envelope(t, st, b)

	t.Run("01 retrieve by id and by name is one container", func(t *testing.T) {
		for _, ref := range []string{named.ID, "analysis"} {
			var c containerObject
			st, b := e.do("GET", "/api/v1/containers/"+ref, e.keyA, nil)
			e.must(st, b, &c)
			if c.ID != named.ID || c.Status != "running" {
				t.Fatalf("GET %s: %+v", ref, c)
			}
		}
	})

	t.Run("02 exec answers per command with outcome and usage; files persist between calls", func(t *testing.T) {
		r := e.exec(e.keyA, "analysis", "echo out; echo err >&2", "printf 'x,y\\n1,2\\n' > data.csv", "exit 7")
		if r.ContainerID != named.ID || len(r.Output) != 3 {
			t.Fatalf("%+v", r)
		}
		if o := r.Output[0]; o.Stdout != "out\n" || o.Stderr != "err\n" || o.Outcome.Type != "exit" || *o.Outcome.ExitCode != 0 {
			t.Fatalf("command 1: %+v", o)
		}
		if o := r.Output[2]; *o.Outcome.ExitCode != 7 {
			t.Fatalf("command 3: %+v", o)
		}
		r = e.exec(e.keyA, named.ID, "cat data.csv")
		if r.Output[0].Stdout != "x,y\n1,2\n" {
			t.Fatalf("file written by the previous call: %q", r.Output[0].Stdout)
		}
	})

	t.Run("03 timeouts and output caps come from internal/tool", func(t *testing.T) {
		var r execResponse
		st, b := e.do("POST", "/api/v1/containers/analysis/exec", e.keyA, map[string]any{
			"commands": []string{"sleep 5", "yes | head -c 5000"}, "timeout_ms": 300, "max_output_length": 100})
		e.must(st, b, &r)
		if r.Output[0].Outcome.Type != "timeout" {
			t.Fatalf("sleep 5 with timeout_ms 300: %+v", r.Output[0])
		}
		if !strings.Contains(r.Output[1].Stdout, "[shellgate: output truncated: showing the first 100 characters") {
			t.Fatalf("max_output_length 100: %q", r.Output[1].Stdout)
		}
	})

	t.Run("04 list pages through the workspace's containers", func(t *testing.T) {
		third := e.create(e.keyA, "third")
		var page listObject
		st, b := e.do("GET", "/api/v1/containers?limit=2&order=asc", e.keyA, nil)
		e.must(st, b, &page)
		if page.Object != "list" || len(page.Data) != 2 || !page.HasMore || page.Data[0].ID != named.ID || page.Data[1].ID != anon.ID || *page.FirstID != named.ID || *page.LastID != anon.ID {
			t.Fatalf("page 1: %s", b)
		}
		st, b = e.do("GET", "/api/v1/containers?limit=2&order=asc&after="+*page.LastID, e.keyA, nil)
		e.must(st, b, &page)
		if len(page.Data) != 1 || page.HasMore || page.Data[0].ID != third.ID {
			t.Fatalf("page 2: %s", b)
		}
		st, b = e.do("GET", "/api/v1/containers", e.keyA, nil)
		e.must(st, b, &page)
		if len(page.Data) != 3 || page.Data[0].ID != third.ID {
			t.Fatalf("default order is newest first: %s", b)
		}
		st, b = e.do("GET", "/api/v1/containers?name=analysis", e.keyA, nil)
		e.must(st, b, &page)
		if len(page.Data) != 1 || page.Data[0].ID != named.ID {
			t.Fatalf("by name: %s", b)
		}
		st, b = e.do("GET", "/api/v1/containers?after=cntr_00000000000000000000000000000000", e.keyA, nil)
		if st != http.StatusBadRequest {
			t.Fatalf("unknown cursor: %d %s", st, b)
		}
		envelope(t, st, b)
	})

	t.Run("05 status is the sandbox's: sleeping after sleep, running after the next call", func(t *testing.T) {
		if err := e.mgr.Sleep(t.Context(), named.ID); err != nil {
			t.Fatal(err)
		}
		var c containerObject
		st, b := e.do("GET", "/api/v1/containers/analysis", e.keyA, nil)
		e.must(st, b, &c)
		if c.Status != "sleeping" {
			t.Fatalf("after Sleep: %+v", c)
		}
		r := e.exec(e.keyA, "analysis", "cat data.csv")
		if r.Output[0].Stdout != "x,y\n1,2\n" {
			t.Fatalf("woken container lost its files: %+v", r.Output[0])
		}
		st, b = e.do("GET", "/api/v1/containers/analysis", e.keyA, nil)
		e.must(st, b, &c)
		if c.Status != "running" || c.LastActiveAt < c.CreatedAt {
			t.Fatalf("after exec: %+v", c)
		}
	})

	t.Run("06 delete removes the record and the sandbox", func(t *testing.T) {
		var d map[string]any
		st, b := e.do("DELETE", "/api/v1/containers/"+anon.ID, e.keyA, nil)
		e.must(st, b, &d)
		if d["deleted"] != true || d["id"] != anon.ID {
			t.Fatalf("%s", b)
		}
		if _, err := e.mgr.Status(anon.ID); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("sandbox after delete: %v", err)
		}
		for _, m := range []string{"GET", "DELETE"} {
			st, b := e.do(m, "/api/v1/containers/"+anon.ID, e.keyA, nil)
			if st != http.StatusNotFound {
				t.Fatalf("%s after delete: %d %s", m, st, b)
			}
		}
		st, b = e.do("POST", "/api/v1/containers/"+anon.ID+"/exec", e.keyA, map[string]any{"commands": []string{"true"}})
		if st != http.StatusNotFound {
			t.Fatalf("exec after delete: %d %s", st, b)
		}
		if _, err := e.mgr.Status(anon.ID); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("exec on a deleted container made a sandbox: %v", err)
		}
	})

	t.Run("07 request logs carry route, status and workspace, never the key", func(t *testing.T) {
		logs := e.logs.String()
		if !strings.Contains(logs, `"route":"POST /api/v1/containers/{id}/exec"`) || !strings.Contains(logs, `"workspace":"a"`) {
			t.Fatalf("logs: %s", logs)
		}
		for _, k := range []string{e.keyA, e.keyB} {
			if strings.Contains(logs, k) || strings.Contains(logs, k[len(k)-20:]) {
				t.Fatal("a key is in the logs")
			}
		}
	})
}

func TestMetering(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	c := e.create(e.keyA, "meter")
	var total int64
	check := func(r execResponse, start string) {
		t.Helper()
		u := r.Usage
		if u.ContainerStart != start || u.MeteredMs <= 0 {
			t.Fatalf("want a %s call: %+v", start, u)
		}
		want := max(u.MeteredMs, 0)
		if start != "warm" {
			want = max(u.MeteredMs, 30_000)
		}
		if u.BilledMs != want || u.CostMicroUSD != (want+9)/10 {
			t.Fatalf("%s call billed wrong: %+v", start, u)
		}
		if got := fmt.Sprintf("%d.%06d", u.CostMicroUSD/1e6, u.CostMicroUSD%1e6); string(u.CostUSD) != got {
			t.Fatalf("cost_usd %s for %d µ$", u.CostUSD, u.CostMicroUSD)
		}
		total += u.CostMicroUSD
	}
	check(e.exec(e.keyA, "meter", "true"), "new")
	check(e.exec(e.keyA, "meter", "true"), "warm")
	if err := e.mgr.Sleep(t.Context(), c.ID); err != nil {
		t.Fatal(err)
	}
	check(e.exec(e.keyA, "meter", "true"), "woken")
	// The ledger write follows each answer; the call has ended once
	// WaitCalls returns.
	if err := e.srv.WaitCalls(t.Context()); err != nil {
		t.Fatal(err)
	}
	if sums := ledgerOf(t, e.st, "a"); len(sums) != 1 || sums[0].ContainerID != c.ID || sums[0].Events != 3 || sums[0].CostMicroUSD != total {
		t.Fatalf("ledger %+v, want 3 events costing %d µ$", sums, total)
	}
}

func TestTenancy(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	a := e.create(e.keyA, "shared-name")
	e.exec(e.keyA, "shared-name", "echo secret-a > note")
	// The same name in another workspace is another container.
	b := e.create(e.keyB, "shared-name")
	if a.ID == b.ID {
		t.Fatal("two workspaces share a container id")
	}
	r := e.exec(e.keyB, "shared-name", "cat note 2>&1; true")
	if strings.Contains(r.Output[0].Stdout, "secret-a") {
		t.Fatal("workspace b reads workspace a's file")
	}

	missing := "cntr_0123456789abcdef0123456789abcdef"
	routes := []struct {
		method, path string
		body         any
	}{
		{"GET", "/api/v1/containers/%s", nil},
		{"DELETE", "/api/v1/containers/%s", nil},
		{"POST", "/api/v1/containers/%s/exec", map[string]any{"commands": []string{"cat note"}}},
		{"POST", "/api/v1/containers/%s/exec", map[string]any{"commands": []string{"cat note"}, "stream": true}},
	}
	for i, rt := range routes {
		t.Run(fmt.Sprintf("%02d %s %s", i+1, rt.method, strings.ReplaceAll(rt.path, "%s", "{id}")), func(t *testing.T) {
			// Another workspace's container answers exactly like one that
			// does not exist, by id and by name.
			stM, bM := e.do(rt.method, fmt.Sprintf(rt.path, missing), e.keyB, rt.body)
			stA, bA := e.do(rt.method, fmt.Sprintf(rt.path, a.ID), e.keyB, rt.body)
			if stM != http.StatusNotFound || stA != stM || strings.ReplaceAll(string(bA), a.ID, missing) != string(bM) {
				t.Fatalf("missing: %d %s\nother workspace's: %d %s", stM, bM, stA, bA)
			}
			envelope(t, stA, bA)
		})
	}
	var page listObject
	st, body := e.do("GET", "/api/v1/containers", e.keyB, nil)
	e.must(st, body, &page)
	if len(page.Data) != 1 || page.Data[0].ID != b.ID {
		t.Fatalf("workspace b lists: %s", body)
	}
	st, body = e.do("GET", "/api/v1/containers?after="+a.ID, e.keyB, nil)
	if st != http.StatusBadRequest {
		t.Fatalf("another workspace's id as a cursor: %d %s", st, body)
	}
	// a is untouched by b's delete.
	if r := e.exec(e.keyA, a.ID, "cat note"); r.Output[0].Stdout != "secret-a\n" {
		t.Fatalf("a after b's calls: %+v", r.Output[0])
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	c := e.create(e.keyA, "authc")
	revoked := e.newKey("acme", "a")
	keys, err := e.st.Keys().List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.Keys().Revoke(t.Context(), keys[len(keys)-1].ID); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		hdr  map[string]string
	}{
		{"01 no key", nil},
		{"02 unknown key", map[string]string{"Authorization": "Bearer sgk_0123456789abcdef_" + strings.Repeat("A", 43)}},
		{"03 garbage key", map[string]string{"x-api-key": "hello"}},
		{"04 not a bearer scheme", map[string]string{"Authorization": "Basic " + e.keyA}},
		{"05 revoked key", map[string]string{"Authorization": "Bearer " + revoked}},
		{"06 two different keys", map[string]string{"Authorization": "Bearer " + e.keyA, "x-api-key": e.keyB}},
		{"07 a valid key with one character changed", map[string]string{"x-api-key": e.keyA[:len(e.keyA)-1] + "x"}},
	}
	routes := [][2]string{
		{"POST", "/api/v1/containers"},
		{"GET", "/api/v1/containers"},
		{"GET", "/api/v1/containers/" + c.ID},
		{"DELETE", "/api/v1/containers/" + c.ID},
		{"POST", "/api/v1/containers/" + c.ID + "/exec"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range routes {
				st, b := e.doH(r[0], r[1], `{"commands":["true"]}`, tc.hdr)
				if st != http.StatusUnauthorized {
					t.Fatalf("%s %s: %d %s", r[0], r[1], st, b)
				}
				envelope(t, st, b)
			}
		})
	}
	t.Run("08 x-api-key alone and both headers agreeing work", func(t *testing.T) {
		for _, h := range []map[string]string{{"x-api-key": e.keyA}, {"x-api-key": e.keyA, "Authorization": "bearer " + e.keyA}} {
			st, b := e.doH("GET", "/api/v1/containers/"+c.ID, nil, h)
			e.must(st, b, nil)
		}
	})
	t.Run("09 health, metrics and the OpenAPI document need no key", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/metrics", "/api/v1/openapi.json"} {
			st, b := e.doH("GET", p, nil, nil)
			e.must(st, b, nil)
		}
	})
	if _, err := e.mgr.Status(c.ID); err != nil {
		t.Fatalf("the container survived unauthenticated deletes: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	c := e.create(e.keyA, "bad")
	ex := "/api/v1/containers/bad/exec"
	hundredOne := make([]string, 101)
	for i := range hundredOne {
		hundredOne[i] = "true"
	}
	cases := []struct {
		name, method, path string
		body               any
		status             int
		msg                string
	}{
		{"01 create: malformed JSON", "POST", "/api/v1/containers", `{"name":`, 400, "malformed JSON"},
		{"02 create: name of the wrong type", "POST", "/api/v1/containers", `{"name":5}`, 400, `field "name": want a string`},
		{"03 create: unknown field", "POST", "/api/v1/containers", `{"name":"x","image":"evil"}`, 400, `unknown field "image"`},
		{"04 create: name with a slash", "POST", "/api/v1/containers", `{"name":"a/b"}`, 400, "want 1-40 letters"},
		{"05 create: name of 41 characters", "POST", "/api/v1/containers", `{"name":"` + strings.Repeat("n", 41) + `"}`, 400, "want 1-40 letters"},
		{"06 create: empty name", "POST", "/api/v1/containers", `{"name":""}`, 400, "want 1-40 letters"},
		{"07 create: an array, not an object", "POST", "/api/v1/containers", `["x"]`, 400, "must be a JSON object"},
		{"08 create: data after the object", "POST", "/api/v1/containers", `{} {}`, 400, "data after the object"},
		{"09 create: body over 64 KiB", "POST", "/api/v1/containers", `{"name":"` + strings.Repeat("n", 70<<10) + `"}`, 413, "larger than"},
		{"10 list: limit 0", "GET", "/api/v1/containers?limit=0", nil, 400, "limit"},
		{"11 list: limit 101", "GET", "/api/v1/containers?limit=101", nil, 400, "limit"},
		{"12 list: limit not a number", "GET", "/api/v1/containers?limit=ten", nil, 400, "limit"},
		{"13 list: order sideways", "GET", "/api/v1/containers?order=sideways", nil, 400, "order"},
		{"14 list: unknown parameter", "GET", "/api/v1/containers?page=2", nil, 400, "unknown query parameter"},
		{"15 list: a cursor that is not an id", "GET", "/api/v1/containers?after=../x", nil, 400, "after"},
		{"16 list: a body on a GET", "GET", "/api/v1/containers", strings.Repeat("x", 8<<10), 413, "larger than"},
		{"17 get: unknown id", "GET", "/api/v1/containers/nope", nil, 404, "no container"},
		{"18 get: an id no container can have", "GET", "/api/v1/containers/" + strings.Repeat("x", 41), nil, 404, "no container"},
		{"19 delete: unknown id", "DELETE", "/api/v1/containers/nope", nil, 404, "no container"},
		{"20 exec: unknown id", "POST", "/api/v1/containers/nope/exec", `{"commands":["true"]}`, 404, "no container"},
		{"21 exec: empty body", "POST", ex, ``, 400, "body is empty"},
		{"22 exec: malformed JSON", "POST", ex, `{"commands":["true"`, 400, "malformed JSON"},
		{"23 exec: commands is a string", "POST", ex, `{"commands":"ls"}`, 400, `field "commands": want an array`},
		{"24 exec: a command is a number", "POST", ex, `{"commands":[1]}`, 400, `want a string`},
		{"25 exec: timeout_ms is a string", "POST", ex, `{"commands":["true"],"timeout_ms":"1s"}`, 400, `field "timeout_ms": want an integer`},
		{"26 exec: timeout_ms is fractional", "POST", ex, `{"commands":["true"],"timeout_ms":1.5}`, 400, `timeout_ms`},
		{"27 exec: stream is a string", "POST", ex, `{"commands":["true"],"stream":"yes"}`, 400, `field "stream": want a boolean`},
		{"28 exec: unknown field", "POST", ex, `{"commands":["true"],"cwd":"/"}`, 400, `unknown field "cwd"`},
		{"29 exec: no commands", "POST", ex, `{"commands":[]}`, 400, "commands is empty"},
		{"30 exec: commands missing", "POST", ex, `{}`, 400, "commands is empty"},
		{"31 exec: a blank command", "POST", ex, `{"commands":["  "]}`, 400, "command 1 is empty"},
		{"32 exec: 101 commands", "POST", ex, map[string]any{"commands": hundredOne}, 400, "at most 100"},
		{"33 exec: negative timeout", "POST", ex, `{"commands":["true"],"timeout_ms":-1}`, 400, "must be a positive"},
		{"34 exec: zero max_output_length", "POST", ex, `{"commands":["true"],"max_output_length":0}`, 400, "must be a positive"},
		{"35 exec: body over 1 MiB", "POST", ex, `{"commands":["` + strings.Repeat("x", 1<<20) + `"]}`, 413, "larger than"},
		{"36 exec: null body", "POST", ex, `null`, 400, "commands is empty"},
		{"37 unknown route under /api/v1", "GET", "/api/v1/nothing", nil, 404, "no route"},
		{"38 wrong method on a route", "PUT", "/api/v1/containers/bad", `{}`, 405, "takes GET, DELETE"},
		// A name of an id's form would address another container (ids are
		// looked up first) or hide behind it.
		{"39 create: named by another container's id", "POST", "/api/v1/containers", `{"name":"` + c.ID + `"}`, 400, "form of a container id"},
		{"40 create: an id's form in upper case", "POST", "/api/v1/containers", `{"name":"` + strings.ToUpper(c.ID) + `"}`, 400, "form of a container id"},
		{"41 list: filtered by a name of an id's form", "GET", "/api/v1/containers?name=" + c.ID, nil, 400, "form of a container id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, b := e.do(tc.method, tc.path, e.keyA, tc.body)
			if st != tc.status {
				t.Fatalf("status %d, want %d: %s", st, tc.status, b)
			}
			if msg := envelope(t, st, b); !strings.Contains(msg, tc.msg) {
				t.Fatalf("message %q does not say %q", msg, tc.msg)
			}
		})
	}
	// OpenAI's create, in OpenAI's envelope, names the field.
	if st, b := e.do("POST", "/v1/containers", e.keyA, `{"name":"cntr_`+strings.Repeat("0", 32)+`"}`); st != 400 ||
		!strings.Contains(string(b), `"param":"name"`) || !strings.Contains(string(b), "form of a container id") {
		t.Fatalf("OpenAI create named by an id: %d %s", st, b)
	}
	// Nothing was lost: the container still works and nothing else exists.
	if r := e.exec(e.keyA, c.ID, "echo ok"); r.Output[0].Stdout != "ok\n" {
		t.Fatalf("%+v", r)
	}
	var page listObject
	st, b := e.do("GET", "/api/v1/containers", e.keyA, nil)
	e.must(st, b, &page)
	if len(page.Data) != 1 {
		t.Fatalf("bad creates made containers: %s", b)
	}
	if strings.Contains(e.logs.String(), `"status":500`) {
		t.Fatalf("bad input answered 500 somewhere: %s", e.logs.String())
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data []byte
}

// readSSE parses an event stream, sending each event to ch until the body
// ends.
func readSSE(body io.Reader, ch chan<- sseEvent) error {
	defer close(ch)
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name != "" || ev.data != nil {
				ch <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if ev.data != nil {
				ev.data = append(ev.data, '\n')
			}
			ev.data = append(ev.data, strings.TrimPrefix(line, "data: ")...)
		case strings.HasPrefix(line, ":"):
		default:
			return fmt.Errorf("not an SSE line: %q", line)
		}
	}
	return sc.Err()
}

// streamExec starts a streamed exec call and returns its events as they
// come.
func (e *env) streamExec(key, ref string, body map[string]any) (<-chan sseEvent, *http.Response) {
	e.t.Helper()
	body["stream"] = true
	j, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", e.url+"/api/v1/containers/"+ref+"/exec", bytes.NewReader(j))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	ch := make(chan sseEvent, 64)
	if resp.StatusCode != http.StatusOK {
		close(ch)
		return ch, resp
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		e.t.Fatalf("content type %q", ct)
	}
	go func() {
		defer resp.Body.Close()
		if err := readSSE(resp.Body, ch); err != nil {
			e.t.Error(err)
		}
	}()
	return ch, resp
}

// waitEvent reads events until one named name.
func waitEvent(t *testing.T, ch <-chan sseEvent, name string) sseEvent {
	t.Helper()
	for ev := range ch {
		if ev.name == name {
			return ev
		}
	}
	t.Fatalf("stream ended before a %s event", name)
	return sseEvent{}
}

func TestStream(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	e.create(e.keyA, "s")
	ch, _ := e.streamExec(e.keyA, "s", map[string]any{"commands": []string{
		"for i in 1 2 3; do echo line$i; echo warn$i >&2; sleep 0.1; done",
		"printf 'caf\\303\\251 %.0s' $(seq 1 50)",
		"exit 4",
	}, "max_output_length": 100})
	var names []string
	var deltas [3][2]strings.Builder
	completed := map[int]CommandOutputJSON{}
	var result execResponse
	for ev := range ch {
		names = append(names, ev.name)
		switch ev.name {
		case "output":
			var d outputDelta
			if err := json.Unmarshal(ev.data, &d); err != nil {
				t.Fatal(err)
			}
			k := 0
			if d.Stream == "stderr" {
				k = 1
			}
			deltas[d.Index][k].WriteString(d.Text)
		case "command.completed":
			var c CommandOutputJSON
			if err := json.Unmarshal(ev.data, &c); err != nil {
				t.Fatal(err)
			}
			completed[c.Index] = c
		case "result":
			if err := json.Unmarshal(ev.data, &result); err != nil {
				t.Fatal(err)
			}
		case "command.started":
		default:
			t.Fatalf("unexpected event %s: %s", ev.name, ev.data)
		}
	}
	if names[0] != "command.started" || names[len(names)-1] != "result" {
		t.Fatalf("events: %v", names)
	}
	if len(result.Output) != 3 || result.Usage.ContainerStart != "new" || result.ContainerID == "" {
		t.Fatalf("result: %+v", result)
	}
	for i, o := range result.Output {
		c := completed[i]
		if c.Stdout != o.Stdout || c.Stderr != o.Stderr || c.Outcome.Type != o.Outcome.Type {
			t.Fatalf("command %d: completed event %+v, result %+v", i, c, o)
		}
	}
	if deltas[0][0].String() != "line1\nline2\nline3\n" || deltas[0][1].String() != "warn1\nwarn2\nwarn3\n" {
		t.Fatalf("command 1 deltas: %q %q", deltas[0][0].String(), deltas[0][1].String())
	}
	// The second command's output is cut at 100 characters in its final
	// form; the deltas carry whole characters only.
	if !strings.HasPrefix(result.Output[1].Stdout, strings.Repeat("café ", 20)) || !strings.Contains(result.Output[1].Stdout, "output truncated") {
		t.Fatalf("command 2: %q", result.Output[1].Stdout)
	}
	if d := deltas[1][0].String(); !strings.HasPrefix(d, strings.Repeat("café ", 20)) || strings.ContainsRune(d, '\uFFFD') {
		t.Fatalf("command 2 deltas: %q", d)
	}
	if *result.Output[2].Outcome.ExitCode != 4 {
		t.Fatalf("command 3: %+v", result.Output[2])
	}
}

// CommandOutputJSON is a command.completed event.
type CommandOutputJSON struct {
	Index   int    `json:"index"`
	Stdout  string `json:"stdout"`
	Stderr  string `json:"stderr"`
	Outcome struct {
		Type     string `json:"type"`
		ExitCode *int   `json:"exit_code"`
	} `json:"outcome"`
}

func TestConcurrentCalls(t *testing.T) {
	e := newEnv(t, "crun", "busybox", func(c *Config) { c.CallWait = 300 * time.Millisecond })
	one := e.create(e.keyA, "one")
	two := e.create(e.keyA, "two")

	t.Run("01 calls on one container run one at a time", func(t *testing.T) {
		// Wider bound for this case: the second call must wait, not fail.
		e.srv.cfg.CallWait = time.Minute
		defer func() { e.srv.cfg.CallWait = 300 * time.Millisecond }()
		var wg sync.WaitGroup
		for _, tag := range []string{"a", "b", "c"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, b := e.do("POST", "/api/v1/containers/one/exec", e.keyA, map[string]any{"commands": []string{
					"echo " + tag + "1 >> log", "sleep 0.2", "echo " + tag + "2 >> log"}})
				if st != http.StatusOK {
					t.Errorf("call %s: %d %s", tag, st, b)
				}
			}()
		}
		wg.Wait()
		log := e.exec(e.keyA, "one", "cat log").Output[0].Stdout
		lines := strings.Fields(log)
		if len(lines) != 6 {
			t.Fatalf("log %q", log)
		}
		for i := 0; i < 6; i += 2 {
			if lines[i][0] != lines[i+1][0] || lines[i][1] != '1' || lines[i+1][1] != '2' {
				t.Fatalf("calls interleaved: %q", log)
			}
		}
	})

	t.Run("02 a call that waits past the bound is 409; other containers are not held up", func(t *testing.T) {
		ch, _ := e.streamExec(e.keyA, "one", map[string]any{"commands": []string{"sleep 60"}})
		waitEvent(t, ch, "command.started")
		st, b := e.do("POST", "/api/v1/containers/one/exec", e.keyA, map[string]any{"commands": []string{"true"}})
		if st != http.StatusConflict {
			t.Fatalf("second call: %d %s", st, b)
		}
		if msg := envelope(t, st, b); !strings.Contains(msg, "one at a time") {
			t.Fatal(msg)
		}
		// Reads never wait behind the running call.
		var c containerObject
		st, b = e.do("GET", "/api/v1/containers/one", e.keyA, nil)
		e.must(st, b, &c)
		if c.Status != "running" {
			t.Fatalf("%+v", c)
		}
		// Another container runs while "one" is busy.
		if r := e.exec(e.keyA, "two", "echo parallel"); r.Output[0].Stdout != "parallel\n" {
			t.Fatalf("%+v", r)
		}

		// Delete cancels the running call: its stream ends with an error
		// that says so and carries what ran.
		st, b = e.do("DELETE", "/api/v1/containers/one", e.keyA, nil)
		e.must(st, b, nil)
		ev := waitEvent(t, ch, "error")
		var eb errorBody
		if err := json.Unmarshal(ev.data, &eb); err != nil {
			t.Fatal(err)
		}
		if eb.Error.Code != http.StatusNotFound || !strings.Contains(eb.Error.Message, "deleted during this call") || eb.Error.Metadata["container_id"] != one.ID {
			t.Fatalf("error event: %s", ev.data)
		}
		if _, err := e.mgr.Status(one.ID); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("sandbox after delete: %v", err)
		}
		if _, err := e.mgr.Status(two.ID); err != nil {
			t.Fatal(err)
		}
	})
}

func TestGracefulShutdown(t *testing.T) {
	serve := func(t *testing.T, grace time.Duration) (*env, context.CancelFunc, <-chan error) {
		e := newServer(t, "crun", "busybox")
		stop, done := serveRun(t, e, grace)
		return e, stop, done
	}

	t.Run("01 a call in flight finishes, then the manager closes", func(t *testing.T) {
		e, stop, done := serve(t, time.Minute)
		e.create(e.keyA, "g")
		ch, _ := e.streamExec(e.keyA, "g", map[string]any{"commands": []string{"sleep 1; echo finished", "echo after"}})
		waitEvent(t, ch, "command.started")
		stop()
		ev := waitEvent(t, ch, "result")
		var r execResponse
		if err := json.Unmarshal(ev.data, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Output) != 2 || r.Output[0].Stdout != "finished\n" || r.Output[1].Stdout != "after\n" {
			t.Fatalf("call in flight at shutdown: %+v", r)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if _, err := e.mgr.Exec(t.Context(), r.ContainerID, sandbox.Command{Command: "true"}); !errors.Is(err, sandbox.ErrClosed) {
			t.Fatalf("manager after Run: %v", err)
		}
		if _, err := http.Get(e.url + "/healthz"); err == nil {
			t.Fatal("still serving after Run returned")
		}
	})

	t.Run("02 a call still running after the grace period is cancelled and reported", func(t *testing.T) {
		e, stop, done := serve(t, 200*time.Millisecond)
		c := e.create(e.keyA, "g")
		ch, _ := e.streamExec(e.keyA, "g", map[string]any{"commands": []string{"echo first > kept", "sleep 120", "echo never"}})
		for {
			ev := waitEvent(t, ch, "command.started")
			if strings.Contains(string(ev.data), "sleep 120") {
				break
			}
		}
		stop()
		ev := waitEvent(t, ch, "error")
		var eb errorBody
		if err := json.Unmarshal(ev.data, &eb); err != nil {
			t.Fatal(err)
		}
		outs, _ := eb.Error.Metadata["output"].([]any)
		if eb.Error.Code != http.StatusServiceUnavailable || !strings.Contains(eb.Error.Message, "shut down during this call; 1 of its commands ran") || len(outs) != 1 {
			t.Fatalf("report: %s", ev.data)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		// The container sleeps with its files for the next server.
		if st, err := e.mgr.Status(c.ID); err != nil || st != sandbox.Sleeping {
			t.Fatalf("after shutdown: %v %v", st, err)
		}
	})
	t.Run("03 an open MCP session does not hold the shutdown", func(t *testing.T) {
		e, stop, done := serve(t, time.Minute)
		a := e.mcpClient(t, e.keyA)
		a.call(t, "exec", map[string]any{"commands": []string{"true"}}, nil)
		stop()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if strings.Contains(e.logs.String(), "requests still running after the grace period") {
			t.Fatalf("the session's stream held the shutdown for its grace period:\n%s", e.logs.String())
		}
	})
}
