package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox"
)

// quotaRefusal checks an answer over a quota: the status, and the route's
// envelope — OpenRouter's {"error":{"code":status,"message"}}, or OpenAI's
// with type and code "quota_exceeded" — with a message naming the flag.
func quotaRefusal(t *testing.T, what string, st int, body []byte, want int, openAI bool, flag string) {
	t.Helper()
	var eb struct {
		Error struct {
			Code    any    `json:"code"`
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &eb); err != nil || st != want {
		t.Fatalf("%s: %d %s, want %d in an error envelope", what, st, body, want)
	}
	wantType := "invalid_request_error"
	if want == http.StatusTooManyRequests {
		wantType = "rate_limit_error"
	}
	switch {
	case !strings.Contains(eb.Error.Message, "shellgate serve "+flag):
		t.Errorf("%s: message %q does not name %s", what, eb.Error.Message, flag)
	case openAI && (eb.Error.Code != codeQuota || eb.Error.Type != wantType):
		t.Errorf("%s: OpenAI envelope %s, want code %q and type %q", what, body, codeQuota, wantType)
	case !openAI && eb.Error.Code != float64(want):
		t.Errorf("%s: OpenRouter envelope %s, want code %d", what, body, want)
	}
}

// TestWorkspaceQuotas: each per-workspace quota refuses what would go over
// it, in the route's envelope, naming the flag that raises it; another
// workspace is unaffected; deleting (or sleeping) frees a place; creates
// racing in one workspace end with exactly the quota.
func TestWorkspaceQuotas(t *testing.T) {
	e := newEnv(t, "crun", "busybox", func(c *Config) {
		c.MaxContainers = 5
		c.MaxWorkspaceFileBytes = 1000
	})
	count := func(key string) int {
		t.Helper()
		var l listObject
		st, b := e.do("GET", "/api/v1/containers?limit=100", key, nil)
		e.must(st, b, &l)
		return len(l.Data)
	}

	t.Run("01 containers that exist: 30 racing creates, quota 5", func(t *testing.T) {
		key := e.newKey("acme", "race")
		var mu sync.Mutex
		statuses := map[int]int{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 30 {
			wg.Go(func() {
				<-start
				st, b := e.do("POST", "/api/v1/containers", key, map[string]string{"name": fmt.Sprint("r", i)})
				if st == http.StatusForbidden {
					quotaRefusal(t, "a racing create", st, b, http.StatusForbidden, false, "--max-containers")
				}
				mu.Lock()
				statuses[st]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if statuses[http.StatusOK] != 5 || statuses[http.StatusForbidden] != 25 || count(key) != 5 {
			t.Fatalf("statuses %v, %d containers; want 5 created and 25 refused with 403", statuses, count(key))
		}
		// OpenAI's containers API: its envelope.
		st, b := e.do("POST", "/v1/containers", key, map[string]string{"name": "openai"})
		quotaRefusal(t, "POST /v1/containers over the quota", st, b, http.StatusForbidden, true, "--max-containers")
		// Another workspace is unaffected.
		e.create(e.keyB, "other")
		// Deleting frees a place, for one create.
		var l listObject
		st, b = e.do("GET", "/api/v1/containers", key, nil)
		e.must(st, b, &l)
		st, b = e.do("DELETE", "/api/v1/containers/"+l.Data[0].ID, key, nil)
		e.must(st, b, nil)
		e.create(key, "after-delete")
		st, b = e.do("POST", "/api/v1/containers", key, map[string]string{"name": "over"})
		quotaRefusal(t, "a create at the quota again", st, b, http.StatusForbidden, false, "--max-containers")
	})

	t.Run("02 bytes of workspace files: 1000", func(t *testing.T) {
		key := e.newKey("acme", "files")
		blobs := func() int {
			n := 0
			e.srv.cfg.Blobs.Walk(t.Context(), func(string, time.Time) error { n++; return nil })
			return n
		}
		var f orFile
		st, b := e.upload("/api/v1/files", key, part{"file", "a.txt", strings.Repeat("a", 600)})
		e.must(st, b, &f)
		before := blobs()
		st, b = e.upload("/api/v1/files", key, part{"file", "b.txt", strings.Repeat("b", 401)})
		quotaRefusal(t, "an upload past the quota", st, b, http.StatusForbidden, false, "--max-workspace-files-mb")
		st, b = e.upload("/v1/files", key, part{"purpose", "", "assistants"}, part{"file", "b.txt", strings.Repeat("b", 401)})
		quotaRefusal(t, "an OpenAI upload past the quota", st, b, http.StatusForbidden, true, "--max-workspace-files-mb")
		// Nothing of the refused uploads is kept: no record, no blob.
		var l struct {
			Data []orFile `json:"data"`
		}
		st, b = e.do("GET", "/api/v1/files", key, nil)
		e.must(st, b, &l)
		if len(l.Data) != 1 || blobs() != before {
			t.Fatalf("after the refused uploads: %d files, %d blobs (were %d); want 1 file and no new blob", len(l.Data), blobs(), before)
		}
		// The rest of the quota is usable, exactly.
		st, b = e.upload("/api/v1/files", key, part{"file", "c.txt", strings.Repeat("c", 400)})
		e.must(st, b, nil)
		// Another workspace has its own.
		st, b = e.upload("/api/v1/files", e.keyB, part{"file", "d.txt", strings.Repeat("d", 1000)})
		e.must(st, b, nil)
		// Deleting frees room.
		st, b = e.do("DELETE", "/api/v1/files/"+f.ID, key, nil)
		e.must(st, b, nil)
		st, b = e.upload("/api/v1/files", key, part{"file", "b.txt", strings.Repeat("b", 600)})
		e.must(st, b, nil)
	})

	t.Run("03 containers awake at once: 2", func(t *testing.T) {
		// A second server on the same manager and store, with the awake
		// quota (the first has none, so that 01 can start 5 at once).
		w := newServerOnStore(t, e.mgr, e.data, e.st, func(c *Config) { c.MaxAwake = 2 })
		newTestServer(t, w)
		key, other := w.newKey("acme", "awake"), w.newKey("acme", "awake-other")
		p := Principal{"acme", "awake"}
		x1, x2 := w.create(key, "x1"), w.create(key, "x2")
		w.exec(key, "x2", "true") // x1 is now the least recently used
		// At the quota, the least recently used idle container sleeps for
		// the new one: a stateless client (a new container per request)
		// keeps working.
		x3 := w.create(key, "x3")
		if st, _ := e.mgr.Status(x1.ID); st != sandbox.Sleeping {
			t.Fatalf("x1 is %s, want put to sleep for x3", st)
		}
		if n := w.srv.awake.awake(p); n != 2 {
			t.Fatalf("%d containers counted awake, want 2", n)
		}
		if r := w.exec(key, "x1", "echo back"); r.Output[0].Stdout != "back\n" {
			t.Fatalf("x1 after its sleep: %+v", r)
		}
		if st, _ := e.mgr.Status(x2.ID); st != sandbox.Sleeping {
			t.Fatalf("x2 is %s, want put to sleep for x1", st)
		}
		// With every counted container busy, the next is refused.
		ch1, _ := w.streamExec(key, "x1", map[string]any{"commands": []string{"sleep 3"}})
		ch3, _ := w.streamExec(key, "x3", map[string]any{"commands": []string{"sleep 3"}})
		waitEvent(t, ch1, "command.started")
		waitEvent(t, ch3, "command.started")
		st, b := w.do("POST", "/api/v1/containers", key, map[string]string{"name": "x4"})
		quotaRefusal(t, "a create while all are busy", st, b, http.StatusTooManyRequests, false, "--max-awake")
		st, b = w.do("POST", "/v1/containers", key, map[string]string{"name": "x4"})
		quotaRefusal(t, "a create on /v1 while all are busy", st, b, http.StatusTooManyRequests, true, "--max-awake")
		st, b = w.do("POST", "/api/v1/containers/x2/exec", key, map[string]any{"commands": []string{"true"}})
		quotaRefusal(t, "an exec that wakes a third while all are busy", st, b, http.StatusTooManyRequests, false, "--max-awake")
		// Another workspace is unaffected.
		w.create(other, "y1")
		waitEvent(t, ch1, "result")
		waitEvent(t, ch3, "result")
		var l listObject
		st, b = w.do("GET", "/api/v1/containers", key, nil)
		w.must(st, b, &l)
		if len(l.Data) != 3 {
			t.Fatalf("a create refused by the awake quota left its record: %d containers", len(l.Data))
		}
		// The refused exec on x2 was not billed: x2 has its one exec.
		for _, c := range w.getUsage(key, "").ByContainer {
			if c.ContainerID == x2.ID && c.Events != 1 {
				t.Fatalf("x2's usage %+v, want the one exec that ran", c)
			}
		}
		_ = x3
	})
}
