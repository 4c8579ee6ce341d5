package kube_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	k8stesting "k8s.io/client-go/testing"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/kube/kubehome"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
	"github.com/shellgate/shellgate/testenv"
)

// Several gateway replicas on one cluster: each test's replicas are
// kube.Sandboxes of their own (own Backend, own memory) sharing only the
// fake API server, the pods' real agents and, when set, one Archiver (the
// shared S3 of a real deployment).

// newReplica is one more gateway replica on c, closed when t ends.
func newReplica(t testing.TB, c *kubetest.Cluster, arch kube.Archiver, idle time.Duration) *kube.Sandboxes {
	t.Helper()
	_, s := c.Sandboxes(t, arch, idle)
	return s
}

// twoReplicas is a cluster and replicas A and B of it sharing arch (nil:
// none) and idle.
func twoReplicas(t testing.TB, arch kube.Archiver, idle time.Duration) (*kubetest.Cluster, *kube.Sandboxes, *kube.Sandboxes) {
	t.Helper()
	c := kubetest.NewCluster(t)
	return c, newReplica(t, c, arch, idle), newReplica(t, c, arch, idle)
}

// podCreates counts the pods created in c so far.
func podCreates(c *kubetest.Cluster) int {
	n := 0
	for _, a := range c.CS.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok && a.GetVerb() == "create" && a.GetResource().Resource == "pods" && ca.GetSubresource() == "" {
			n++
		}
	}
	return n
}

// gatedArchiver is an Archiver whose Archive, while gate is set, says it
// began (entered) and waits for gate to close.
type gatedArchiver struct {
	kube.Archiver
	gate, entered chan struct{}
}

func (g *gatedArchiver) Archive(ctx context.Context, id string, h kube.Home) error {
	if g.gate != nil {
		close(g.entered)
		<-g.gate
	}
	return g.Archiver.Archive(ctx, id, h)
}

func mustExec(t *testing.T, s *kube.Sandboxes, name, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Exec(ctx, name, sandbox.Command{Command: command})
	if err != nil || res.ExitCode != 0 || res.Restarted {
		t.Fatalf("%q: %+v %v", command, res, err)
	}
	return string(res.Stdout)
}

// TestReplicasAcross: a container created through replica A is served by
// replica B from its pod and Secret in the API server: 1. B knows it (Status,
// List) though it never saw it; 2. B's command sees A's file, in A's pod
// (no second pod); 3. B's file calls reach the same home; 4. A, still
// connected beside B, sees B's writes.
func TestReplicasAcross(t *testing.T) {
	c, a, b := twoReplicas(t, nil, -1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Create(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, a, "c1", "echo from-a > f")

	if st, err := b.Status("c1"); err != nil || st != sandbox.Running {
		t.Fatalf("1: status on B %v %v", st, err)
	}
	if l, err := b.List(); err != nil || len(l) != 1 || l[0].Name != "c1" || l[0].Status != sandbox.Running {
		t.Fatalf("1: list on B %+v %v", l, err)
	}
	if got := mustExec(t, b, "c1", "cat f; echo from-b > g"); got != "from-a\n" {
		t.Fatalf("2: B read %q", got)
	}
	if n := podCreates(c); n != 1 {
		t.Fatalf("2: %d pods created, want A's only", n)
	}
	if data, err := b.ReadFile(ctx, "c1", "g", 1<<20); err != nil || string(data) != "from-b\n" {
		t.Fatalf("3: %q %v", data, err)
	}
	if _, err := b.PutFile(ctx, "c1", "up", strings.NewReader("put-by-b")); err != nil {
		t.Fatalf("3: %v", err)
	}
	if got := mustExec(t, a, "c1", "cat g up"); got != "from-b\nput-by-b" {
		t.Fatalf("4: A read %q", got)
	}
	if n := podCreates(c); n != 1 {
		t.Fatalf("4: %d pods created", n)
	}
}

// TestReplicasSleepWake: 1. B puts A's container to sleep (B adopts the pod
// to archive through its own connection; the objects are deleted); 2. A
// sees it sleeping (once its own connection ended with the pod); 3. A's next command wakes it in a new pod with the
// files.
func TestReplicasSleepWake(t *testing.T) {
	arch := kubetest.NewTarArchiver()
	c, a, b := twoReplicas(t, arch, -1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mustExec(t, a, "c1", "echo kept > f")
	if err := b.Sleep(ctx, "c1"); err != nil {
		t.Fatalf("1: %v", err)
	}
	if p, sec, n, _ := c.Objects(ctx); p+sec+n != 0 || arch.Archives != 1 {
		t.Fatalf("1: left %d pods, %d secrets, %d policies; %d archives", p, sec, n, arch.Archives)
	}
	// A's connection to the deleted pod ends as the pod goes, a moment
	// after B's Sleep returned.
	if !testenv.Eventually(10*time.Second, func() bool { st, err := a.Status("c1"); return err == nil && st == sandbox.Sleeping }) {
		st, err := a.Status("c1")
		t.Fatalf("2: %v %v", st, err)
	}
	if got := mustExec(t, a, "c1", "cat f"); got != "kept\n" {
		t.Fatalf("3: %q", got)
	}
	if n := podCreates(c); n != 2 || arch.Restores != 1 {
		t.Fatalf("3: %d pods created, %d restores", n, arch.Restores)
	}
}

// TestReplicasWakeRace: A and B wake the same sleeping container at the
// same moment, several times over: each round ends with exactly one pod
// (one restore), whose home both then use.
func TestReplicasWakeRace(t *testing.T) {
	arch := kubetest.NewTarArchiver()
	c, a, b := twoReplicas(t, arch, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mustExec(t, a, "c1", "echo 0 > n")
	if err := a.Sleep(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	// A sleeping sandbox has nothing in the cluster: B knows the name as
	// the server's store tells it (Create), not from A.
	if err := b.Create(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	const rounds = 3
	for i := range rounds {
		before, restores := podCreates(c), arch.Restores
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, s := range []*kube.Sandboxes{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A file call wakes without running a command: the two
				// wakes meet, and both then reach the one pod.
				_, errs[j] = s.StatFile(ctx, "c1", "n")
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if p, _, _, _ := c.Objects(ctx); p != 1 || podCreates(c)-before != 1 || arch.Restores-restores != 1 {
			t.Fatalf("round %d: %d pods, %d created, %d restores; want 1 each", i, p, podCreates(c)-before, arch.Restores-restores)
		}
		mustExec(t, a, "c1", "echo $(( $(cat n) + 1 )) > n")
		mustExec(t, b, "c1", "echo $(( $(cat n) + 1 )) > n")
		if err := b.Sleep(ctx, "c1"); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	if got := mustExec(t, b, "c1", "cat n"); got != "6\n" {
		t.Fatalf("after %d rounds n = %q, want 6", rounds, got)
	}
}

// TestReplicasDestroy: a container destroyed through A, while B has a
// connection to its pod: 1. its objects are gone and B's connection
// breaks (the pod's agent dies with the pod); 2. B no longer reports it
// running; 3. B's next command starts a new, empty sandbox; 4. B's
// Destroy of a container only A ever saw, awake, deletes its pod.
func TestReplicasDestroy(t *testing.T) {
	c, a, b := twoReplicas(t, nil, -1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mustExec(t, a, "c1", "echo x > f")
	mustExec(t, b, "c1", "cat f")
	if err := a.Destroy(ctx, "c1"); err != nil {
		t.Fatalf("1: %v", err)
	}
	if p, sec, n, _ := c.Objects(ctx); p+sec+n != 0 {
		t.Fatalf("1: left %d pods, %d secrets, %d policies", p, sec, n)
	}
	for st, _ := b.Status("c1"); st == sandbox.Running; st, _ = b.Status("c1") {
		if ctx.Err() != nil {
			t.Fatal("2: B still says running")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := mustExec(t, b, "c1", "ls | wc -l"); got != "0\n" {
		t.Fatalf("3: %q", got)
	}

	if err := b.Destroy(ctx, "c1"); err != nil { // kubetest runs one pod at a time
		t.Fatal(err)
	}
	mustExec(t, a, "c2", "true") // B never saw c2
	if err := b.Destroy(ctx, "c2"); err != nil {
		t.Fatalf("4: %v", err)
	}
	if has, _ := b.Status("c2"); has == sandbox.Running {
		t.Fatal("4: c2 still running")
	}
}

// TestReplicasIdle: A's idle sleeper never puts to sleep the pod B keeps
// using: A's connection stays open, and the pod's agent tells A of B's
// calls (agent.Peers), so A counts them as use; once B stops, a sleeper
// does it. The busy phase spans many of A's idle timeouts.
func TestReplicasIdle(t *testing.T) {
	arch := kubetest.NewTarArchiver()
	// Long enough that B's first exec (lookups, TLS, token; under -race
	// on a loaded machine) reaches the pod before A's sleeper may act,
	// and that B's gaps never reach it.
	const idle = time.Second
	c, a, b := twoReplicas(t, arch, idle)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mustExec(t, a, "c1", "echo 0 > n")
	for range 20 { // 20 × idle/4: five idle timeouts of A
		mustExec(t, b, "c1", "echo $(( $(cat n) + 1 )) > n")
		time.Sleep(idle / 4)
	}
	if n := podCreates(c); n != 1 || arch.Archives != 0 {
		t.Fatalf("%d pods created, %d archives while B used the pod: A slept it", n, arch.Archives)
	}
	for st, _ := b.Status("c1"); st != sandbox.Sleeping; st, _ = b.Status("c1") {
		if ctx.Err() != nil {
			t.Fatal("B's idle sleeper never slept it")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := mustExec(t, a, "c1", "cat n"); got != "20\n" {
		t.Fatalf("after the idle sleep: %q", got)
	}
}

// TestReplicasConcurrent: calls through A and B on one pod at once all
// run, one at a time in the order they reached the pod's agent: 1. B's
// command sent while A's runs waits for it, and both succeed, A's line
// first; nothing is deleted (one pod); 2. commands sent by both at once
// all succeed, each replica's in its own order; 3. B putting the sandbox
// to sleep during A's command holds the pod, which waits for that command
// (the home is archived through file requests, which do not wait in the
// queue): A's command ends as it would have, and what it wrote last is in
// the home A's next command wakes with; and a command through A sent
// while B archives is not run in the held pod but waits, and runs once in
// the pod it then wakes (as a call waits for a sleep under way on one
// machine); 4. B destroying the sandbox during A's command ends A's with
// a Restarted result that says another replica did it, and A's next
// command starts a new sandbox.
func TestReplicasConcurrent(t *testing.T) {
	obj, err := homearchive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	arch := &gatedArchiver{Archiver: kubehome.New(obj)}
	c, a, b := twoReplicas(t, arch, -1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mustExec(t, a, "c1", "true")
	mustExec(t, b, "c1", "true") // B connected too

	done := startCommand(ctx, a, "c1", "echo go; sleep 1; echo a >> f")
	mustExec(t, b, "c1", "echo b >> f")
	if err := <-done; err != nil {
		t.Fatalf("1: A's command: %v", err)
	}
	if got := mustExec(t, a, "c1", "cat f"); got != "a\nb\n" {
		t.Fatalf("1: f reads %q, want A's line then B's", got)
	}
	if p, sec, n, _ := c.Objects(ctx); p != 1 || sec != 3 || n != 1 || podCreates(c) != 1 {
		t.Fatalf("1: %d pods, %d secrets, %d policies, %d pods created", p, sec, n, podCreates(c))
	}

	const n = 10
	var wg sync.WaitGroup
	for tag, s := range map[string]*kube.Sandboxes{"A": a, "B": b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				res, err := s.Exec(ctx, "c1", sandbox.Command{Command: fmt.Sprintf("echo %s%d >> g", tag, i)})
				if err != nil || res.ExitCode != 0 || res.Restarted {
					t.Errorf("2: %s%d: %+v %v", tag, i, res, err)
				}
			}
		}()
	}
	wg.Wait()
	next := map[byte]int{}
	got := mustExec(t, a, "c1", "cat g")
	for _, line := range strings.Fields(got) {
		if want := fmt.Sprintf("%c%d", line[0], next[line[0]]); line != want {
			t.Fatalf("2: %q where %q was due, in %q", line, want, got)
		}
		next[line[0]]++
	}
	if next['A'] != n || next['B'] != n || podCreates(c) != 1 {
		t.Fatalf("2: %d of A's and %d of B's commands ran, want %d each; %d pods created", next['A'], next['B'], n, podCreates(c))
	}

	done = startCommand(ctx, a, "c1", "echo go; sleep 1; echo late > late")
	if err := b.Sleep(ctx, "c1"); err != nil {
		t.Fatalf("3: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("3: A's command during B's sleep: %v", err)
	}
	if p, _, _, _ := c.Objects(ctx); p != 0 {
		t.Fatalf("3: %d pods after the sleep", p)
	}
	// A's connection to the deleted pod ends as the pod goes, a moment
	// after B's Sleep returned (a command sent on it before that would be
	// answered Restarted).
	if !testenv.Eventually(10*time.Second, func() bool { st, err := a.Status("c1"); return err == nil && st == sandbox.Sleeping }) {
		t.Fatal("3: A still sees the pod")
	}
	if got := mustExec(t, a, "c1", "cat late"); got != "late\n" {
		t.Fatalf("3: woken through A: %q", got)
	}

	arch.gate = make(chan struct{})
	arch.entered = make(chan struct{})
	slept := make(chan error, 1)
	go func() { slept <- b.Sleep(ctx, "c1") }()
	<-arch.entered // B holds the pod and archives
	before := podCreates(c)
	during := make(chan string, 1)
	go func() {
		res, err := a.Exec(ctx, "c1", sandbox.Command{Command: "echo during >> late; cat late"})
		if err != nil || res.ExitCode != 0 || res.Restarted {
			t.Errorf("3: A's command sent during B's sleep: %+v %v", res, err)
		}
		during <- string(res.Stdout)
	}()
	time.Sleep(100 * time.Millisecond) // A's command reaches the held pod
	close(arch.gate)
	if err := <-slept; err != nil {
		t.Fatalf("3: %v", err)
	}
	arch.gate = nil
	if got := <-during; got != "late\nduring\n" || podCreates(c) != before+1 {
		t.Fatalf("3: A's command sent during B's sleep: %q, %d pods created since; want it run once, in the woken pod", got, podCreates(c)-before)
	}

	ended := startExec(ctx, a, "c1", "echo go; sleep 30")
	if err := b.Destroy(ctx, "c1"); err != nil {
		t.Fatalf("4: %v", err)
	}
	if end := <-ended; end.err != nil || !end.res.Restarted || !strings.Contains(string(end.res.Stderr), "through another gateway replica") {
		t.Fatalf("4: A's command: %+v %q %v", end.res, end.res.Stderr, end.err)
	}
	if got := mustExec(t, a, "c1", "ls | wc -l"); got != "0\n" {
		t.Fatalf("4: A's next command sees %q files", got)
	}
}

// TestReplicasAsleepUnseen: a container A created, wrote to and put to
// sleep is found by replicas that never saw it (B, and C: a gateway
// restarted, a new Sandboxes on the same cluster and archive), as A knows
// it: 1. Status sleeping, with no pod made; 2. a file call wakes it with
// A's file (stat, list, read), and it is then listed; 3. on C a write
// wakes it too, and A's next command sees it; 4. a name never created
// stays not found on B (Status, file calls, Sleep, Destroy); 5. asleep
// again, destroyed through D, a replica that never saw it: its archive is
// deleted and new replicas no longer find it.
func TestReplicasAsleepUnseen(t *testing.T) {
	arch := kubetest.NewTarArchiver()
	c, a, b := twoReplicas(t, arch, -1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Create(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, a, "c1", "mkdir d && echo kept > d/f")
	if err := a.Sleep(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	// C starts after the sleep, as a gateway restarted since.
	cr := newReplica(t, c, arch, -1)
	created := podCreates(c)

	for i, s := range []*kube.Sandboxes{b, cr} {
		if st, err := s.Status("c1"); err != nil || st != sandbox.Sleeping {
			t.Fatalf("1: replica %d: status %q %v", i, st, err)
		}
		if l, err := s.List(); err != nil || len(l) != 1 || l[0].Name != "c1" || l[0].Status != sandbox.Sleeping || !l[0].LastUsed.IsZero() {
			t.Fatalf("1: replica %d: list %+v %v", i, l, err)
		}
	}
	if n := podCreates(c); n != created {
		t.Fatalf("1: status made %d pods", n-created)
	}

	fi, err := b.StatFile(ctx, "c1", "d/f")
	if err != nil || fi.Size != 5 {
		t.Fatalf("2: stat on B: %+v %v", fi, err)
	}
	l, err := b.ListFiles(ctx, "c1", sandbox.ListOptions{})
	if err != nil || len(l.Files) != 1 || l.Files[0].Path != "d/f" {
		t.Fatalf("2: files on B: %+v %v", l, err)
	}
	if got, err := b.ReadFile(ctx, "c1", "d/f", 1<<20); err != nil || string(got) != "kept\n" {
		t.Fatalf("2: read on B: %q %v", got, err)
	}
	if st, err := b.Status("c1"); err != nil || st != sandbox.Running || podCreates(c) != created+1 || arch.Restores != 1 {
		t.Fatalf("2: after B's file calls: %q %v, %d pods created, %d restores", st, err, podCreates(c)-created, arch.Restores)
	}
	if err := b.Sleep(ctx, "c1"); err != nil {
		t.Fatalf("2: %v", err)
	}

	if err := cr.WriteFile(ctx, "c1", "d/g", strings.NewReader("by-c")); err != nil {
		t.Fatalf("3: write on C: %v", err)
	}
	if err := cr.RemoveFile(ctx, "c1", "d/f"); err != nil {
		t.Fatalf("3: remove on C: %v", err)
	}
	if got := mustExec(t, a, "c1", "ls d; cat d/g"); got != "g\nby-c" {
		t.Fatalf("3: A sees %q", got)
	}

	if _, err := b.Status("never"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("4: status of a name never created: %v", err)
	}
	if _, err := b.ListFiles(ctx, "never", sandbox.ListOptions{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("4: files of a name never created: %v", err)
	}
	if err := b.Sleep(ctx, "never"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("4: sleep of a name never created: %v", err)
	}
	if err := b.Destroy(ctx, "never"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("4: destroy of a name never created: %v", err)
	}

	if err := a.Sleep(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	d := newReplica(t, c, arch, -1) // knows nothing yet
	if err := d.Destroy(ctx, "c1"); err != nil {
		t.Fatalf("5: destroy of a sleeping container on a replica that never saw it: %v", err)
	}
	if has, _ := arch.Has(ctx, "c1"); has {
		t.Fatal("5: archive kept")
	}
	if _, err := newReplica(t, c, arch, -1).Status("c1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("5: status after destroy: %v", err)
	}
	if _, err := newReplica(t, c, arch, -1).StatFile(ctx, "c1", "d/g"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("5: stat after destroy: %v", err)
	}
}
