package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store/pgtest"
	"github.com/shellgate/shellgate/internal/store/sqlstore"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
	"github.com/shellgate/shellgate/testenv"
)

// TestKubeReplicas: two gateway replicas on one PostgreSQL database and one
// Kubernetes cluster (fake API server, real agents), homes archived in one
// archiver, no routing between them: 1. a container created and run
// through A is run through B in A's pod (one pod, A's file, a warm start);
// 2. B's file routes reach the same home, and A then sees B's upload;
// 3. calls through both at once all answer 200 and run in order: a long
// command through A and, while it runs, one through B (which waits for
// it: the file A's command writes reads A's line, then B's), then
// interleaved calls from both; 4. both report it running; put to sleep
// through B's manager, both report it sleeping, and A's next call wakes
// it with its files; 5. asleep again, a replica started since (C: never
// saw it) reports it sleeping, and its file routes list and read its
// files (waking it), not an empty home; asleep again, replica D's first
// command finds the files and is billed as a wake, not a new container;
// 6. deleted through A, its pod is gone and B answers 404.
func TestKubeReplicas(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	c := kubetest.NewCluster(t)
	arch := kubetest.NewTarArchiver()
	replica := func() *env {
		_, sbx := c.Sandboxes(t, arch, -1)
		st, err := sqlstore.OpenPostgres(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		e := newServerOnStore(t, sbx, t.TempDir(), st)
		newTestServer(t, e)
		return e
	}
	a, b := replica(), replica()
	key := a.keyA // one database: B knows A's keys
	ctx := t.Context()
	pods := func() int {
		t.Helper()
		p, _, _, err := c.Objects(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	status := func(e *env) string {
		t.Helper()
		var got containerObject
		st, body := e.do("GET", "/api/v1/containers/kube", key, nil)
		e.must(st, body, &got)
		return got.Status
	}

	ctr := a.create(key, "kube")
	if r := a.exec(key, "kube", "echo from-a > f"); *r.Output[0].Outcome.ExitCode != 0 {
		t.Fatalf("1: %+v", r.Output[0])
	}
	r := b.exec(key, "kube", "cat f")
	if r.Output[0].Stdout != "from-a\n" || r.Usage.ContainerStart != "warm" || pods() != 1 {
		t.Fatalf("1: through B: %+v %+v, %d pods", r.Output[0], r.Usage, pods())
	}

	var up ContainerFile
	st, body := b.upload("/api/v1/containers/kube/files", key, part{name: "path", content: "in/"}, part{name: "file", filename: "up.txt", content: "by-b"})
	if b.must(st, body, &up); up.Path != "in/up.txt" {
		t.Fatalf("2: upload through B: %s", body)
	}
	if got := paths(b.listAll("/api/v1", "kube", 10, "")); !slices.Equal(got, []string{"f", "in/up.txt"}) {
		t.Fatalf("2: list through B: %q", got)
	}
	if r := a.exec(key, "kube", "cat in/up.txt"); r.Output[0].Stdout != "by-b" {
		t.Fatalf("2: A sees %+v", r.Output[0])
	}

	exec := func(e *env, cmd string) error {
		st, body := e.do("POST", "/api/v1/containers/kube/exec", key, map[string]any{"commands": []string{cmd}})
		var r execResponse
		if err := json.Unmarshal(body, &r); st != http.StatusOK || err != nil || len(r.Output) != 1 || *r.Output[0].Outcome.ExitCode != 0 {
			return fmt.Errorf("%q: %d %s", cmd, st, body)
		}
		return nil
	}
	first := make(chan error, 1)
	go func() { first <- exec(a, "touch started; sleep 1; echo a >> f2") }()
	if !testenv.Eventually(30*time.Second, func() bool {
		st, _, _ := b.getRaw("/api/v1/containers/"+ctr.ID+"/files/"+CFileID("started")+"/content", key)
		return st == http.StatusOK
	}) {
		t.Fatal("3: A's command did not start")
	}
	if err := exec(b, "echo b >> f2"); err != nil {
		t.Fatalf("3: through B while A's runs: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("3: through A: %v", err)
	}
	if r := a.exec(key, "kube", "cat f2"); r.Output[0].Stdout != "a\nb\n" {
		t.Fatalf("3: f2 reads %q, want A's line then B's", r.Output[0].Stdout)
	}
	const n = 8
	errs := make(chan error, 2*n)
	for i := range n {
		for _, e := range []*env{a, b} {
			go func() { errs <- exec(e, fmt.Sprintf("echo %d >> f3", i)) }()
		}
	}
	for range 2 * n {
		if err := <-errs; err != nil {
			t.Errorf("3: interleaved: %v", err)
		}
	}
	if r := a.exec(key, "kube", "wc -l < f3"); r.Output[0].Stdout != fmt.Sprintf("%d\n", 2*n) || pods() != 1 {
		t.Fatalf("3: %q lines in f3 after %d calls, %d pods", r.Output[0].Stdout, 2*n, pods())
	}
	a.exec(key, "kube", "rm started f2 f3")

	if sa, sb := status(a), status(b); sa != "running" || sb != "running" {
		t.Fatalf("4: status %q on A, %q on B", sa, sb)
	}
	if err := b.mgr.Sleep(ctx, ctr.ID); err != nil {
		t.Fatalf("4: %v", err)
	}
	// A's connection to the deleted pod ends as the pod goes, a moment
	// after B's sleep returned.
	testenv.Eventually(10*time.Second, func() bool { return status(a) == "sleeping" })
	if sa, sb := status(a), status(b); sa != "sleeping" || sb != "sleeping" || pods() != 0 {
		t.Fatalf("4: status %q on A, %q on B, %d pods", sa, sb, pods())
	}
	if r := a.exec(key, "kube", "cat f in/up.txt"); r.Output[0].Stdout != "from-a\nby-b" || arch.Restores != 1 {
		t.Fatalf("4: woken through A: %+v, %d restores", r.Output[0], arch.Restores)
	}

	if err := a.mgr.Sleep(ctx, ctr.ID); err != nil {
		t.Fatalf("5: %v", err)
	}
	cr := replica()
	if s := status(cr); s != "sleeping" || pods() != 0 {
		t.Fatalf("5: status %q on C, %d pods", s, pods())
	}
	if got := paths(cr.listAll("/api/v1", "kube", 10, "")); !slices.Equal(got, []string{"f", "in/up.txt"}) {
		t.Fatalf("5: list through C: %q", got)
	}
	if st, body, _ := cr.getRaw("/api/v1/containers/"+ctr.ID+"/files/"+CFileID("f")+"/content", key); st != http.StatusOK || string(body) != "from-a\n" {
		t.Fatalf("5: content through C: %d %q", st, body)
	}
	if pods() != 1 || arch.Restores != 2 {
		t.Fatalf("5: %d pods, %d restores after C's file calls", pods(), arch.Restores)
	}
	if err := cr.mgr.Sleep(ctx, ctr.ID); err != nil {
		t.Fatalf("5: %v", err)
	}
	d := replica()
	if r := d.exec(key, "kube", "cat f"); r.Output[0].Stdout != "from-a\n" || r.Usage.ContainerStart != "woken" {
		t.Fatalf("5: through D: %+v %+v", r.Output[0], r.Usage)
	}

	if st, body := a.do("DELETE", "/api/v1/containers/kube", key, nil); st != http.StatusOK {
		t.Fatalf("6: %d %s", st, body)
	}
	if pods() != 0 {
		t.Fatalf("6: %d pods", pods())
	}
	if st, _ := b.do("GET", "/api/v1/containers/kube", key, nil); st != http.StatusNotFound {
		t.Fatalf("6: B answers %d", st)
	}
	if s, _ := b.mgr.Status(ctr.ID); s == sandbox.Running {
		t.Fatal("6: B's manager still runs it")
	}
}
