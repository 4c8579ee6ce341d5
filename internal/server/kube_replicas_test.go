package server

import (
	"net/http"
	"slices"
	"testing"

	"github.com/shellgate/shellgate/internal/store/pgtest"
	"github.com/shellgate/shellgate/internal/store/sqlstore"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
)

// TestKubeReplicas: two gateway replicas on one PostgreSQL database and one
// Kubernetes cluster (fake API server, real agents), homes archived in one
// archiver, no routing between them: 1. a container created and run
// through A is run through B in A's pod (one pod, A's file, a warm start);
// 2. B's file routes reach the same home, and A then sees B's upload;
// 3. both report it running; put to sleep through B's manager, both report
// it sleeping, and A's next call wakes it with its files; 4. asleep
// again, a replica started since (C: never saw it) reports it sleeping,
// and its file routes list and read its files (waking it), not an empty
// home; asleep again, replica D's first command finds the files and is
// billed as a wake, not a new container; 5. deleted through A, its pod
// is gone and B answers 404.
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

	if sa, sb := status(a), status(b); sa != "running" || sb != "running" {
		t.Fatalf("3: status %q on A, %q on B", sa, sb)
	}
	if err := b.mgr.Sleep(ctx, ctr.ID); err != nil {
		t.Fatalf("3: %v", err)
	}
	if sa, sb := status(a), status(b); sa != "sleeping" || sb != "sleeping" || pods() != 0 {
		t.Fatalf("3: status %q on A, %q on B, %d pods", sa, sb, pods())
	}
	if r := a.exec(key, "kube", "cat f in/up.txt"); r.Output[0].Stdout != "from-a\nby-b" || arch.Restores != 1 {
		t.Fatalf("3: woken through A: %+v, %d restores", r.Output[0], arch.Restores)
	}

	if err := a.mgr.Sleep(ctx, ctr.ID); err != nil {
		t.Fatalf("4: %v", err)
	}
	cr := replica()
	if s := status(cr); s != "sleeping" || pods() != 0 {
		t.Fatalf("4: status %q on C, %d pods", s, pods())
	}
	if got := paths(cr.listAll("/api/v1", "kube", 10, "")); !slices.Equal(got, []string{"f", "in/up.txt"}) {
		t.Fatalf("4: list through C: %q", got)
	}
	if st, body, _ := cr.getRaw("/api/v1/containers/"+ctr.ID+"/files/"+CFileID("f")+"/content", key); st != http.StatusOK || string(body) != "from-a\n" {
		t.Fatalf("4: content through C: %d %q", st, body)
	}
	if pods() != 1 || arch.Restores != 2 {
		t.Fatalf("4: %d pods, %d restores after C's file calls", pods(), arch.Restores)
	}
	if err := cr.mgr.Sleep(ctx, ctr.ID); err != nil {
		t.Fatalf("4: %v", err)
	}
	d := replica()
	if r := d.exec(key, "kube", "cat f"); r.Output[0].Stdout != "from-a\n" || r.Usage.ContainerStart != "woken" {
		t.Fatalf("4: through D: %+v %+v", r.Output[0], r.Usage)
	}

	if st, body := a.do("DELETE", "/api/v1/containers/kube", key, nil); st != http.StatusOK {
		t.Fatalf("5: %d %s", st, body)
	}
	if pods() != 0 {
		t.Fatalf("5: %d pods", pods())
	}
	if st, _ := b.do("GET", "/api/v1/containers/kube", key, nil); st != http.StatusNotFound {
		t.Fatalf("5: B answers %d", st)
	}
	if s, _ := b.mgr.Status(ctr.ID); s == sandbox.Running {
		t.Fatal("5: B's manager still runs it")
	}
}
