package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
)

// newKubeEnv is a server whose sandboxes are package kube's pods: the API
// server is client-go's fake clientset, each pod the real agent over
// loopback TLS with a home of its own (kubetest), homes kept across
// sleep by an archiver that tars them through the agent.
func newKubeEnv(t *testing.T) (*env, *kubetest.Cluster, *kubetest.TarArchiver) {
	t.Helper()
	c := kubetest.NewCluster(t)
	arch := kubetest.NewTarArchiver()
	_, sbx := c.Sandboxes(t, arch, -1)
	e := newServerOn(t, sbx, t.TempDir())
	newTestServer(t, e)
	return e, c, arch
}

// TestKubeBackend runs the containers API on the Kubernetes backend:
// 1. create records the container and starts no pod; 2. exec starts one
// pod and runs commands with outcomes (exit codes, stderr, a timeout);
// 3. a streamed exec delivers output as it comes; 4. sleep archives the
// home, then deletes pod, secret and policy; 5. the next exec wakes a new
// pod (its own, empty home) with the files restored; 6. the file routes
// (upload, list, download, promote, delete) and the gateway's changed-files
// listing work through the pod's agent, refusing symlinks, FIFOs and
// directories; 7. delete removes the
// pod and its objects; 8. /healthz names the runtime.
func TestKubeBackend(t *testing.T) {
	e, c, arch := newKubeEnv(t)
	ctx := t.Context()
	objects := func() (int, int, int) {
		t.Helper()
		p, s, n, err := c.Objects(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p, s, n
	}

	ctr := e.create(e.keyA, "kube")
	if p, _, _ := objects(); p != 0 || ctr.Status != "sleeping" {
		t.Fatalf("1: after create: %d pods, status %q", p, ctr.Status)
	}

	r := e.exec(e.keyA, "kube", "echo kept > data.txt && cat data.txt", "echo oops >&2; exit 7", "pwd")
	if o := r.Output[0]; o.Stdout != "kept\n" || *o.Outcome.ExitCode != 0 {
		t.Fatalf("2: %+v", o)
	}
	if o := r.Output[1]; o.Stderr != "oops\n" || *o.Outcome.ExitCode != 7 {
		t.Fatalf("2: %+v", o)
	}
	if o := r.Output[2]; o.Stdout != c.HomeDir+"\n" {
		t.Fatalf("2: commands run in the home: %+v", o)
	}
	if p, s, n := objects(); p != 1 || s != 3 || n != 1 { // the credentials, the pod's copy and the restored mark
		t.Fatalf("2: %d pods, %d secrets, %d policies", p, s, n)
	}
	var got containerObject
	st, b := e.do("GET", "/api/v1/containers/kube", e.keyA, nil)
	if e.must(st, b, &got); got.Status != "running" {
		t.Fatalf("2: status %q", got.Status)
	}
	var tr execResponse
	st, b = e.do("POST", "/api/v1/containers/kube/exec", e.keyA, map[string]any{"commands": []string{"sleep 5"}, "timeout_ms": 300})
	if e.must(st, b, &tr); tr.Output[0].Outcome.Type != "timeout" {
		t.Fatalf("2: timeout: %+v", tr.Output[0])
	}

	ch, _ := e.streamExec(e.keyA, "kube", map[string]any{"commands": []string{"for i in 1 2 3; do echo line$i; sleep 0.05; done"}})
	var deltas strings.Builder
	var events int
	for ev := range ch {
		if ev.name == "output" {
			var d outputDelta
			if err := json.Unmarshal(ev.data, &d); err != nil {
				t.Fatal(err)
			}
			deltas.WriteString(d.Text)
			events++
		}
	}
	if deltas.String() != "line1\nline2\nline3\n" || events < 2 {
		t.Fatalf("3: %d output events: %q", events, deltas.String())
	}

	if err := e.mgr.Sleep(ctx, ctr.ID); err != nil {
		t.Fatalf("4: %v", err)
	}
	if p, s, n := objects(); p+s+n != 0 || arch.Archives != 1 {
		t.Fatalf("4: left %d pods, %d secrets, %d policies; %d archives", p, s, n, arch.Archives)
	}
	if s, err := e.mgr.Status(ctr.ID); s != sandbox.Sleeping || err != nil {
		t.Fatalf("4: status %v %v", s, err)
	}

	r = e.exec(e.keyA, "kube", "cat data.txt", "ls -a | wc -l")
	if r.Output[0].Stdout != "kept\n" || arch.Restores != 1 {
		t.Fatalf("5: restored %+v, %d restores", r.Output[0], arch.Restores)
	}
	if p, _, _ := objects(); p != 1 {
		t.Fatalf("5: %d pods", p)
	}

	// 6. The file routes, through the pod's agent.
	var up ContainerFile
	st, b = e.upload("/api/v1/containers/kube/files", e.keyA, part{name: "path", content: "in/"}, part{name: "file", filename: "up.csv", content: "a,b\n1,2\n"})
	if e.must(st, b, &up); up.Path != "in/up.csv" || up.Bytes != 8 {
		t.Fatalf("6: upload: %s", b)
	}
	if r := e.exec(e.keyA, "kube", "cat in/up.csv"); r.Output[0].Stdout != "a,b\n1,2\n" {
		t.Fatalf("6: the command sees the upload: %+v", r.Output[0])
	}
	if got := paths(e.listAll("/api/v1", "kube", 1, "")); !slices.Equal(got, []string{"data.txt", "in/up.csv"}) {
		t.Fatalf("6: list: %q", got)
	}
	st, b, h := e.getRaw("/api/v1/containers/kube/files/"+CFileID("data.txt")+"/content", e.keyA)
	if st != http.StatusOK || string(b) != "kept\n" || h.Get("Content-Length") != "5" {
		t.Fatalf("6: download: %d %q %v", st, b, h)
	}
	pf, b := e.promote("kube", "in/up.csv")
	if pf.SizeBytes != 8 || pf.Filename != "up.csv" {
		t.Fatalf("6: promote: %s", b)
	}
	st, b, _ = e.getRaw("/api/v1/files/"+pf.ID+"/content", e.keyA)
	if st != http.StatusOK || string(b) != "a,b\n1,2\n" {
		t.Fatalf("6: promoted content: %d %q", st, b)
	}
	e.exec(e.keyA, "kube", "ln -s /etc/passwd link && mkfifo fifo")
	for _, rel := range []string{"link", "fifo", "in"} {
		st, b, _ := e.getRaw("/api/v1/containers/kube/files/"+CFileID(rel)+"/content", e.keyA)
		if st < 400 || st >= 500 || strings.Contains(string(b), "root:") {
			t.Fatalf("6: download of %s: %d %.200s", rel, st, b)
		}
	}
	st, b = e.do("DELETE", "/api/v1/containers/kube/files/"+CFileID("data.txt"), e.keyA, nil)
	e.must(st, b, nil)
	if got := paths(e.listAll("/api/v1", "kube", 10, "")); !slices.Equal(got, []string{"in/up.csv"}) {
		t.Fatalf("6: list after delete: %q", got)
	}
	// The gateway's changed-files listing of a call.
	since := time.Now().Add(-time.Second)
	e.exec(e.keyA, "kube", "echo new > new.txt")
	gb := &gatewayBox{s: e.srv}
	if ch := gb.changed(ctx, ctr.ID, since); len(ch) == 0 || ch[0].Path != "new.txt" || ch[0].Bytes != 4 {
		t.Fatalf("6: changed files %+v", ch)
	}

	st, b = e.do("DELETE", "/api/v1/containers/kube", e.keyA, nil)
	if st != http.StatusOK {
		t.Fatalf("7: %d %s", st, b)
	}
	if p, s, n := objects(); p+s+n != 0 {
		t.Fatalf("7: left %d pods, %d secrets, %d policies", p, s, n)
	}

	st, b = e.do("GET", "/healthz", "", nil)
	if st != http.StatusOK || !strings.Contains(string(b), `"runtime":"kubernetes/gvisor"`) {
		t.Fatalf("8: %d %s", st, b)
	}
}
