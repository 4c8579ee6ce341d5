package server

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/identity"
	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
)

// BenchmarkReplicas measures routing across two replicas on one
// PostgreSQL and one S3 bucket (versitygw), side by side with one
// replica doing the same alone:
//
//   - wake/local: a container slept on A woken through A (the archive's
//     manifest is checked, the local image is used as it is);
//   - wake/moved: slept on A, woken through B (restored from S3: the
//     home's chunks are fetched) — the price of "any replica";
//   - exec/local vs exec/proxied: a warm exec sent to the container's
//     node vs to the other replica, which proxies it;
//   - load: 200 execs at concurrency 8 over 8 containers: all on one
//     replica; 4 awake on each of two, each request sent to its
//     container's replica (direct) or alternately to either (any: half
//     proxied). Both replicas share this machine's cores.
//
// go test ./internal/server -run '^$' -bench BenchmarkReplicas -benchtime 20x
func BenchmarkReplicas(b *testing.B) {
	cl := newTestCluster(b, true)
	a, bb := cl.replica(b, "node-a"), cl.replica(b, "node-b")
	key := a.keyA
	c := a.create(key, "bench")
	a.exec(key, "bench", "head -c 1048576 /dev/urandom > data")
	wake := func(b *testing.B, via *replica) {
		for b.Loop() {
			b.StopTimer()
			if err := errors.Join(ignoreNotFound(a.mgr.Sleep(b.Context(), c.ID)), ignoreNotFound(bb.mgr.Sleep(b.Context(), c.ID))); err != nil {
				b.Fatal(err)
			}
			// The next wake through A is local; sleeping on A after one
			// through B makes A's copy older than the bucket's.
			a.exec(key, "bench", "true")
			if err := a.mgr.Sleep(b.Context(), c.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if r := via.exec(key, "bench", "true"); r.Usage.ContainerStart != "woken" {
				b.Fatalf("%+v", r.Usage)
			}
		}
	}
	b.Run("wake/local", func(b *testing.B) { wake(b, a) })
	b.Run("wake/moved", func(b *testing.B) { wake(b, bb) })
	ignoreNotFound(a.mgr.Sleep(b.Context(), c.ID))
	ignoreNotFound(bb.mgr.Sleep(b.Context(), c.ID))
	a.exec(key, "bench", "true") // awake on A
	b.Run("exec/local", func(b *testing.B) {
		for b.Loop() {
			a.exec(key, "bench", "true")
		}
	})
	b.Run("exec/proxied", func(b *testing.B) {
		for b.Loop() {
			bb.exec(key, "bench", "true")
		}
	})
	// Database writes per warm exec, local and proxied: PostgreSQL's own
	// row counters (flushed by each backend within its idle interval).
	writes := func(b *testing.B, via *replica, n int) float64 {
		conn, err := pgx.Connect(b.Context(), cl.dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(b.Context())
		count := func() int64 {
			time.Sleep(11 * time.Second) // PGSTAT_IDLE_INTERVAL: every backend has flushed
			conn.Exec(b.Context(), `SELECT pg_stat_clear_snapshot()`)
			var w int64
			if err := conn.QueryRow(b.Context(), `SELECT COALESCE(SUM(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables WHERE relname <> 'nodes'`).Scan(&w); err != nil {
				b.Fatal(err)
			}
			return w
		}
		before := count()
		for range n {
			via.exec(key, "bench", "true")
			time.Sleep(10 * time.Millisecond)
		}
		return float64(count()-before) / float64(n)
	}
	b.Run("db-writes-per-exec", func(b *testing.B) {
		// Once, whatever -benchtime: each count waits for the flush.
		local, proxied := writes(b, a, 50), writes(b, bb, 50)
		for b.Loop() {
		}
		b.ReportMetric(local, "writes/exec-local")
		b.ReportMetric(proxied, "writes/exec-proxied")
	})
	// Load: 8 containers, awake on one replica, or 4 on each.
	const containers, total, conc = 8, 200, 8
	for i := range containers {
		a.create(key, fmt.Sprint("load-", i))
	}
	// place wakes container i on home(i), sleeping it elsewhere first.
	place := func(b *testing.B, home func(i int) *replica) {
		for i := range containers {
			name := fmt.Sprint("load-", i)
			lc, err := a.srv.cfg.Containers.Lookup(b.Context(), Principal{Account: "acme", Workspace: "a"}, name)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range []*replica{a, bb} {
				if r != home(i) {
					if err := ignoreNotFound(r.mgr.Sleep(b.Context(), lc.ID)); err != nil {
						b.Fatal(err)
					}
				}
			}
			home(i).exec(key, name, "true")
		}
	}
	load := func(b *testing.B, target func(j int) *replica) {
		for b.Loop() {
			jobs := make(chan int)
			var wg sync.WaitGroup
			start := time.Now()
			for range conc {
				wg.Go(func() {
					for j := range jobs {
						st, body := target(j).do("POST", fmt.Sprintf("/api/v1/containers/load-%d/exec", j%containers), key, map[string]any{"commands": []string{"true"}})
						if st != http.StatusOK {
							b.Errorf("%d %s", st, body)
						}
					}
				})
			}
			for j := range total {
				jobs <- j
			}
			close(jobs)
			wg.Wait()
			b.ReportMetric(float64(total)/time.Since(start).Seconds(), "req/s")
		}
	}
	onA := func(int) *replica { return a }
	split := func(i int) *replica { return []*replica{a, bb}[i%2] }
	b.Run("load/1-replica", func(b *testing.B) {
		place(b, onA)
		b.ResetTimer()
		load(b, onA)
	})
	b.Run("load/2-replicas-direct", func(b *testing.B) {
		place(b, split)
		b.ResetTimer()
		load(b, func(j int) *replica { return split(j % containers) })
	})
	b.Run("load/2-replicas-any", func(b *testing.B) {
		place(b, split)
		b.ResetTimer()
		// Each container's requests alternate between the replicas: half
		// are proxied.
		load(b, func(j int) *replica { return split(j / containers) })
	})
}

// BenchmarkReplicasGateway: a Responses request (one shell call, `true`,
// then the answer; a scripted model in-process) on a container awake on
// A, sent to A (local) and to B, which replays the whole request to A
// before the model is called (forwarded): the price of gateway routing.
//
// go test ./internal/server -run '^$' -bench BenchmarkReplicasGateway -benchtime 20x
func BenchmarkReplicasGateway(b *testing.B) {
	cl := newTestCluster(b, false)
	ma, mb := gatewaytest.Models{}, gatewaytest.Models{}
	a := cl.replica(b, "node-a", func(c *Config) { c.Models = ma })
	bb := cl.replica(b, "node-b", func(c *Config) { c.Models = mb })
	key := a.keyA
	c := a.create(key, "gwbench")
	a.exec(key, "gwbench", "true") // awake on A
	var turns []gatewaytest.Turn
	for range 1000 {
		turns = append(turns, gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "true")}}, gatewaytest.EchoResult())
	}
	ma["s"], mb["s"] = gatewaytest.NewScript(turns...), gatewaytest.NewScript(turns...)
	req := map[string]any{"model": "s/m", "input": "go", "tools": []any{map[string]any{"type": "shell",
		"environment": map[string]any{"type": "container_reference", "container_id": c.ID}}}}
	run := func(b *testing.B, via *replica) {
		for b.Loop() {
			if st, body := via.do("POST", "/v1/responses", key, req); st != http.StatusOK {
				b.Fatalf("%d %s", st, body)
			}
		}
	}
	b.Run("responses/local", func(b *testing.B) { run(b, a) })
	b.Run("responses/forwarded", func(b *testing.B) { run(b, bb) })
	if n := len(mb["s"].(*gatewaytest.Script).Requests()); n != 0 {
		b.Fatalf("B called the model %d times", n)
	}
}

// BenchmarkReplicasFileStep: a gateway file step — the text editor's
// view of a 64 KiB file (gatewayBox.ReadFile, what view calls) — on a
// container awake on B, from a request served by B (local: the home is
// read here) and from one served by A, where the container woke on B
// after the request was routed (moved: the step goes to B's file API,
// node to node). Beside them, what a model would otherwise do for the same
// bytes: `cat` the file through the shell (bash-cat/local, a warm exec on
// B; 64 KiB is the shell tool's output cap, so it is all shown).
//
// go test ./internal/server -run '^$' -bench BenchmarkReplicasFileStep -benchtime 200x
func BenchmarkReplicasFileStep(b *testing.B) {
	cl := newTestCluster(b, true)
	a, bb := cl.replica(b, "node-a"), cl.replica(b, "node-b")
	key := a.keyA
	c := a.create(key, "fstep")
	a.exec(key, "fstep", "head -c 65536 /dev/urandom | base64 -w 76 | head -c 65536 > view.txt")
	if err := a.mgr.Sleep(b.Context(), c.ID); err != nil {
		b.Fatal(err)
	}
	bb.exec(key, "fstep", "true") // moved: awake on B
	p := Principal{Account: "acme", Workspace: "a"}
	hdr := http.Header{"Authorization": {"Bearer " + key}}
	step := func(b *testing.B, via *replica) {
		sb, err := gatewaySandboxes{s: via.srv, p: p, key: hdr}.Open(b.Context(), identity.Request{ContainerReference: c.ID}, gateway.OpenOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close()
		for b.Loop() {
			data, err := sb.ReadFile(b.Context(), "view.txt", gateway.MaxEditorFile)
			if err != nil || len(data) != 65536 {
				b.Fatalf("%d bytes, %v", len(data), err)
			}
		}
	}
	b.Run("view-64KiB/local", func(b *testing.B) { step(b, bb) })
	b.Run("view-64KiB/moved", func(b *testing.B) { step(b, a) })
	b.Run("bash-cat/local", func(b *testing.B) {
		sb, err := gatewaySandboxes{s: bb.srv, p: p, key: hdr}.Open(b.Context(), identity.Request{ContainerReference: c.ID}, gateway.OpenOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close()
		for b.Loop() {
			res, err := sb.Exec(b.Context(), tool.Plan{Commands: []string{"cat view.txt"}, TimeoutMs: tool.DefaultTimeoutMs, MaxOutputLength: 65536}, nil)
			if err != nil || len(res.Outputs) != 1 || len(res.Outputs[0].Stdout) != 65536 {
				b.Fatalf("%v %v", res.Outputs, err)
			}
		}
	})
	if st, _ := a.mgr.Status(c.ID); st == sandbox.Running {
		b.Fatal("A woke the container")
	}
}
