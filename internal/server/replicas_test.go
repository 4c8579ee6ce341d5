package server

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/cluster"
	"github.com/shellgate/shellgate/internal/store/pgtest"
	"github.com/shellgate/shellgate/internal/store/sqlstore"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/s3store"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
	"github.com/shellgate/shellgate/testenv"
)

// replica is one gateway replica of a test cluster: its own data
// directory, sandbox manager, database handle and node, on a real
// loopback listener.
type replica struct {
	*env
	node *cluster.Node
	ts   *httptest.Server
	stop context.CancelFunc // ends its heartbeats
	beat sync.WaitGroup
}

// cluster is two or more replicas on one PostgreSQL database, with the
// homes archived in one S3 bucket (versitygw) unless local.
type testCluster struct {
	dsn     string
	objects homearchive.Objects // nil: no archive
	image   string              // the replicas' sandbox image; "" is busybox
	runtime string              // the replicas' runtime; "" is crun
	s3      *s3store.Store      // the bucket of objects; nil: no archive
}

func newTestCluster(t testing.TB, portable bool) *testCluster {
	c := &testCluster{dsn: pgtest.NewDatabase(t)}
	if portable {
		s3 := s3test.Open(t, s3test.NewBucket(t))
		c.objects, c.s3 = s3.Objects("homes"), s3
	}
	return c
}

// Heartbeats every 50 ms; a node silent for 500 ms is dead.
const testHeartbeat, testWindow = 50 * time.Millisecond, 500 * time.Millisecond

func (c *testCluster) replica(t testing.TB, id string, mut ...func(*Config)) *replica {
	t.Helper()
	r := &replica{}
	var h http.Handler = http.NotFoundHandler()
	var hmu sync.Mutex
	r.ts = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		hmu.Lock()
		hh := h
		hmu.Unlock()
		hh.ServeHTTP(w, req)
	}))
	url := "http://" + r.ts.Listener.Addr().String()
	st, err := sqlstore.OpenPostgres(t.Context(), c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r.node, err = cluster.New(t.Context(), cluster.Config{ID: id, URL: url, Nodes: st.Nodes(), Heartbeat: testHeartbeat,
		Window: testWindow, Portable: c.objects != nil})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = func() { cancel(); r.beat.Wait() }
	r.beat.Go(func() { r.node.Run(ctx) })
	t.Cleanup(r.stop)
	var inner sandbox.HomeArchive
	if c.objects != nil {
		inner = homearchive.New(c.objects)
	}
	mgr, data := sandboxtest.Open(t, cmp.Or(c.runtime, "crun"), cmp.Or(c.image, "busybox"), func(cfg *sandbox.Config) { cfg.HomeArchive = r.node.Archive(inner) })
	r.env = newServerOnStore(t, mgr, data, st, append(mut, func(cfg *Config) { cfg.Cluster = r.node })...)
	hmu.Lock()
	h = r.srv.Handler()
	hmu.Unlock()
	r.ts.Start()
	t.Cleanup(r.ts.Close)
	r.url = r.ts.URL
	return r
}

// kill makes the replica dead to the others: its listener closes and its
// heartbeats stop, while its sandboxes stay as they were (a crashed or
// partitioned node).
func (r *replica) kill() {
	r.ts.CloseClientConnections()
	r.ts.Close()
	r.stop()
}

func (r *replica) location(t testing.TB, id string) string {
	t.Helper()
	loc, err := r.st.Nodes().Location(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return loc.ID
}

// On gVisor a container put to sleep through one replica wakes through
// the other with its running state: the checkpoint travels in S3 with the
// home (/tmp lives in the sandbox's memory, so only a restore brings it).
func TestReplicasCheckpoint(t *testing.T) {
	cl := newTestCluster(t, true)
	cl.runtime = "runsc"
	a, b := cl.replica(t, "node-a"), cl.replica(t, "node-b")
	key := a.keyA
	c := a.create(key, "roam")
	a.exec(key, "roam", "echo 41 > /tmp/x")
	st, body := a.do("POST", "/api/v1/containers/roam/sleep", key, nil)
	var slept containerObject
	a.must(st, body, &slept)
	if slept.Status != "sleeping" {
		t.Fatalf("sleep through A: %s", body)
	}
	res := b.exec(key, "roam", "echo $(( $(cat /tmp/x) + 1 ))")
	if res.Output[0].Stdout != "42\n" || res.Output[0].Stderr != "" {
		t.Fatalf("woken through B: %+v", res.Output[0])
	}
	if loc := b.location(t, c.ID); loc != "node-b" {
		t.Fatalf("woken on %q, not B", loc)
	}
}

// A container used through either of two replicas: proxied while it is
// awake on the other, moved (woken from S3) while it sleeps or its node
// is dead, with every file intact and every call billed once.
func TestReplicas(t *testing.T) {
	cl := newTestCluster(t, true)
	a, b := cl.replica(t, "node-a"), cl.replica(t, "node-b")
	key := a.keyA // one database: B knows A's keys
	calls := 0    // exec calls answered 200: each is one usage row
	exec := func(r *replica, cmds ...string) execResponse {
		t.Helper()
		calls++
		return r.exec(key, "work", cmds...)
	}
	c := a.create(key, "work")
	sums := map[string]string{} // file → sha256, what the home must hold
	write := func(r *replica, name string, kib int) {
		t.Helper()
		res := exec(r, fmt.Sprintf("head -c %d /dev/urandom > %s && sha256sum %s", kib<<10, name, name))
		sums[name] = strings.Fields(res.Output[0].Stdout)[0]
	}
	verify := func(r *replica) execResponse {
		t.Helper()
		var cmd strings.Builder
		for name := range sums {
			fmt.Fprintf(&cmd, "sha256sum %s; ", name)
		}
		res := exec(r, cmd.String())
		got := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(res.Output[0].Stdout), "\n") {
			if f := strings.Fields(l); len(f) == 2 {
				got[f[1]] = f[0]
			}
		}
		for name, sum := range sums {
			if got[name] != sum {
				t.Fatalf("through %s: %s has sha256 %q, want %q (stderr %q)", r.node.ID(), name, got[name], sum, res.Output[0].Stderr)
			}
		}
		return res
	}
	write(a, "created-on-a", 512)
	exec(a, "echo from-a > /tmp/only-here") // the sandbox's own layer: not in the home
	if loc := a.location(t, c.ID); loc != "node-a" {
		t.Fatalf("awake on A, located at %q", loc)
	}

	t.Run("01 an exec through B for a container awake on A is proxied to A", func(t *testing.T) {
		res := exec(b, "cat /tmp/only-here")
		if res.Output[0].Stdout != "from-a\n" || res.Usage.ContainerStart != "warm" {
			t.Fatalf("answer not from A's sandbox: %+v", res)
		}
		if st, _ := b.mgr.Status(c.ID); st == sandbox.Running {
			t.Fatal("B woke the container too")
		}
		var got containerObject
		st, body := b.do("GET", "/api/v1/containers/work", key, nil)
		b.must(st, body, &got)
		if got.Status != "running" {
			t.Fatalf("GET through B: %+v", got)
		}
		// A request is logged when its handler returns, which may be
		// after the client has the whole answer.
		logged := func() bool {
			return strings.Contains(b.logs.String(), `"path":"/api/v1/containers/work/exec"`) && strings.Contains(a.logs.String(), `"path":"/api/v1/containers/work/exec"`)
		}
		if !testenv.Eventually(5*time.Second, logged) {
			t.Fatal("the proxied exec is not in both replicas' logs")
		}
	})

	t.Run("01b a file uploaded through B lands in A's sandbox", func(t *testing.T) {
		st, body := b.upload("/api/v1/containers/work/files", key, part{name: "file", filename: "via-b.txt", content: "uploaded through b\n"})
		if st != http.StatusOK {
			t.Fatalf("%d %s", st, body)
		}
		if r := exec(a, "cat via-b.txt"); r.Output[0].Stdout != "uploaded through b\n" {
			t.Fatalf("%+v", r)
		}
		if st, _ := b.mgr.Status(c.ID); st == sandbox.Running {
			t.Fatal("B woke the container for the upload")
		}
	})

	t.Run("02 a streamed exec through the proxy is flushed as it is produced", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		body := `{"commands":["echo first; sleep 20; echo second"],"timeout_ms":30000,"stream":true}`
		req, _ := http.NewRequestWithContext(ctx, "POST", b.url+"/api/v1/containers/work/exec", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%d %v", resp.StatusCode, resp.Header)
		}
		// "first" must arrive while the command still sleeps: the proxy
		// does not hold the stream back. The bound is far below the sleep.
		got := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "data: ") && strings.Contains(sc.Text(), `"text":"first\n"`) {
					got <- "first"
					return
				}
			}
			got <- "stream ended: " + fmt.Sprint(sc.Err())
		}()
		select {
		case s := <-got:
			if s != "first" {
				t.Fatal(s)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("no output event through the proxy while the command ran")
		}
		cancel() // the client goes away: the call on A ends (and is billed)
		resp.Body.Close()
		calls++
		// The next call waits for that one to end on A.
		if r := exec(b, "echo after"); r.Output[0].Stdout != "after\n" {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("03 a proxied request is never proxied again", func(t *testing.T) {
		st, body := b.doH("POST", "/api/v1/containers/work/exec", map[string]any{"commands": []string{"true"}},
			map[string]string{"Authorization": "Bearer " + key, HopHeader: "node-x"})
		if st != http.StatusConflict || !strings.Contains(envelope(t, st, body), "another Shellgate process") {
			t.Fatalf("a request marked proxied for a container awake on A, at B: %d %s", st, body)
		}
		if loc := a.location(t, c.ID); loc != "node-a" {
			t.Fatalf("located at %q", loc)
		}
	})

	t.Run("04 slept on A, woken through B with its files", func(t *testing.T) {
		if err := a.mgr.Sleep(t.Context(), c.ID); err != nil {
			t.Fatal(err)
		}
		if loc := a.location(t, c.ID); loc != "" {
			t.Fatalf("asleep and archived, still located at %q", loc)
		}
		res := verify(b)
		if res.Usage.ContainerStart != "woken" {
			t.Fatalf("%+v", res.Usage)
		}
		if loc := a.location(t, c.ID); loc != "node-b" {
			t.Fatalf("woken through B, located at %q", loc)
		}
		if r := exec(a, "cat /tmp/only-here 2>&1; true"); !strings.Contains(r.Output[0].Stdout, "No such file") {
			t.Fatalf("the old sandbox's layer survived a move: %+v", r)
		}
	})

	t.Run("05 sleep/wake cycles across the replicas lose and corrupt nothing", func(t *testing.T) {
		// SHELLGATE_REPLICA_CYCLES sets the count (the 1,000:
		// BENCHMARKS.md); the default, 12, is six moves each way, which
		// fits half a minute under -race.
		cycles := testenv.Count(t, "SHELLGATE_REPLICA_CYCLES", 12)
		// A few files of a few sizes, one of them rewritten each cycle,
		// every one checked by sha256 after each wake and each write.
		sizes := []int{1, 64, 1024} // KiB
		rs := []*replica{a, b}
		start := time.Now()
		for n := range cycles {
			// Wake on one (through the other, half the time: proxied
			// from the other once it is awake), write, verify, sleep.
			r := rs[n%2]
			via := rs[(n/2)%2]
			if loc := r.location(t, c.ID); loc != "" {
				holder := map[string]*replica{"node-a": a, "node-b": b}[loc]
				if err := holder.mgr.Sleep(t.Context(), c.ID); err != nil {
					t.Fatalf("cycle %d: %v", n, err)
				}
			}
			if res := verify(via); res.Usage.ContainerStart != "woken" {
				t.Fatalf("cycle %d: %+v", n, res.Usage)
			}
			k := n % len(sizes)
			write(rs[(n+1)%2], fmt.Sprintf("cycle-%d", k), sizes[k]) // awake on via: proxied or local
			verify(rs[(n+1)%2])
		}
		el := time.Since(start)
		t.Logf("%d sleep/wake cycles across 2 replicas in %s (%s per cycle), %d files verified by sha256 after each wake and write, 0 lost or corrupted",
			cycles, el.Round(time.Second), (el / time.Duration(cycles)).Round(time.Millisecond), len(sums))
	})

	t.Run("06 every call is billed once, on the replica that ran it", func(t *testing.T) {
		// The streamed call ends when the client leaves: its row is
		// written as it ends, so wait for the rows to settle.
		if events := waitRows(t, a, c.ID, calls); events != calls {
			t.Fatalf("%d usage rows for %d calls", events, calls)
		}
	})

	t.Run("07 A dies with the container awake, mid-request: B takes it over from the archive", func(t *testing.T) {
		if loc := a.location(t, c.ID); loc != "" {
			holder := map[string]*replica{"node-a": a, "node-b": b}[loc]
			if err := holder.mgr.Sleep(t.Context(), c.ID); err != nil {
				t.Fatal(err)
			}
		}
		verify(a) // archived, now awake on A
		exec(a, "echo lost > unarchived")
		if loc := a.location(t, c.ID); loc != "node-a" {
			t.Fatalf("%q", loc)
		}
		// A dies in the middle of a streamed exec proxied through B: the
		// client's stream ends without a result.
		req, _ := http.NewRequestWithContext(t.Context(), "POST", b.url+"/api/v1/containers/work/exec",
			strings.NewReader(`{"commands":["echo started; sleep 20"],"timeout_ms":30000,"stream":true}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && !strings.Contains(sc.Text(), `"text":"started\n"`) {
		}
		a.kill()
		var rest strings.Builder
		for sc.Scan() {
			rest.WriteString(sc.Text() + "\n")
		}
		if strings.Contains(rest.String(), "event: result") {
			t.Fatalf("a result after the node died: %s", rest.String())
		}
		// While A's heartbeat is fresh B proxies to it and gets no answer.
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, body := b.do("POST", "/api/v1/containers/work/exec", key, map[string]any{"commands": []string{"ls"}})
			if st == http.StatusOK {
				calls++
				break
			}
			if st != http.StatusBadGateway || time.Now().After(deadline) {
				t.Fatalf("while A is dying: %d %s", st, body)
			}
			time.Sleep(testHeartbeat)
		}
		if loc := b.location(t, c.ID); loc != "node-b" {
			t.Fatalf("taken over, located at %q", loc)
		}
		verify(b) // the archived version: everything but what A wrote since it woke
		if r := exec(b, "cat unarchived 2>&1; true"); !strings.Contains(r.Output[0].Stdout, "No such file") {
			t.Fatalf("%+v", r)
		}
		// A's manager closing (its process restarting) does not archive its
		// stale copy over B's.
		if err := a.mgr.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := b.mgr.Sleep(t.Context(), c.ID); err != nil {
			t.Fatal(err)
		}
		write(b, "after-takeover", 8)
		verify(b)
	})

	t.Run("08 delete through either replica", func(t *testing.T) {
		st, body := b.do("DELETE", "/api/v1/containers/work", key, nil)
		if st != http.StatusOK {
			t.Fatalf("%d %s", st, body)
		}
		if _, err := b.st.Nodes().Location(t.Context(), c.ID); err == nil {
			t.Fatal("a deleted container still has a location")
		}
	})
}

// Without an archive a container stays on the node that has its home:
// requests elsewhere are proxied to it, and are 503 once it is dead.
func TestReplicasWithoutArchive(t *testing.T) {
	cl := newTestCluster(t, false)
	a, b := cl.replica(t, "node-a"), cl.replica(t, "node-b")
	key := a.keyA
	c := a.create(key, "local")
	a.exec(key, "local", "echo kept > f")
	if err := a.mgr.Sleep(t.Context(), c.ID); err != nil {
		t.Fatal(err)
	}
	if loc := a.location(t, c.ID); loc != "node-a" {
		t.Fatalf("asleep without an archive: located at %q, want its home's node", loc)
	}
	if r := b.exec(key, "local", "cat f"); r.Output[0].Stdout != "kept\n" || r.Usage.ContainerStart != "woken" {
		t.Fatalf("through B: %+v", r)
	}
	if st, _ := b.mgr.Status(c.ID); st == sandbox.Running {
		t.Fatal("B has a sandbox for it")
	}
	a.kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, body := b.do("POST", "/api/v1/containers/local/exec", key, map[string]any{"commands": []string{"cat f"}})
		if st == http.StatusServiceUnavailable {
			if msg := envelope(t, st, body); !strings.Contains(msg, "node-a") || !strings.Contains(msg, "archive") {
				t.Fatalf("%s", msg)
			}
			break
		}
		if st != http.StatusBadGateway || time.Now().After(deadline) {
			t.Fatalf("home on a dead node: %d %s", st, body)
		}
		time.Sleep(testHeartbeat)
	}
}
