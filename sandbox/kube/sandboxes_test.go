package kube_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
)

func newSandboxes(t *testing.T, c *kubetest.Cluster, arch kube.Archiver) *kube.Sandboxes {
	t.Helper()
	_, s := newBackendSandboxes(t, c, arch)
	return s
}

// newBackendSandboxes is c's Backend and the Sandboxes on it, closed when
// t ends.
func newBackendSandboxes(t testing.TB, c *kubetest.Cluster, arch kube.Archiver) (*kube.Backend, *kube.Sandboxes) {
	t.Helper()
	b, s := c.Sandboxes(t, arch, 0)
	return b, s
}

// TestSandboxesRefuse: what the kube backend cannot do is an error naming
// it, never a silent no-op: 1. bad and unknown names; 2. without an
// Archiver, Sleep is refused and the pod (with its home) is kept; 3. file
// calls on an unknown sandbox or a path out of the home are refused; 4. after
// Close, calls are ErrClosed and Close keeps pods it could not archive.
func TestSandboxesRefuse(t *testing.T) {
	c := kubetest.NewCluster(t)
	s := newSandboxes(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := s.Status("no/such"); !errors.Is(err, sandbox.ErrBadName) {
		t.Fatalf("1: %v", err)
	}
	if _, err := s.Status("nobody"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("1: %v", err)
	}
	if err := s.Sleep(ctx, "nobody"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("1: %v", err)
	}
	if _, err := s.Exec(ctx, "../x", sandbox.Command{Command: "true"}); !errors.Is(err, sandbox.ErrBadName) {
		t.Fatalf("1: %v", err)
	}

	res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo kept > f && cat f"})
	if err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("2: %+v %v", res, err)
	}
	if err := s.Sleep(ctx, "c1"); !errors.Is(err, sandbox.ErrNotSupported) || !strings.Contains(err.Error(), "home archive") {
		t.Fatalf("2: sleep without an archiver: %v", err)
	}
	if st, _ := s.Status("c1"); st != sandbox.Running {
		t.Fatalf("2: status %v", st)
	}
	if l, err := s.List(); err != nil || len(l) != 1 || l[0].Name != "c1" || l[0].Status != sandbox.Running || time.Since(l[0].LastUsed) > time.Minute {
		t.Fatalf("2: list %+v %v", l, err)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "cat f"}); err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("2: the home after a refused sleep: %+v %v", res, err)
	}

	if _, err := s.ListFiles(ctx, "nobody", sandbox.ListOptions{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("3: files of an unknown sandbox: %v", err)
	}
	if _, err := s.ReadFile(ctx, "c1", "../etc/passwd", 1<<20); !errors.Is(err, sandbox.ErrBadPath) {
		t.Fatalf("3: %v", err)
	}

	if err := s.Close(ctx); err != nil {
		t.Fatalf("4: %v", err)
	}
	if _, err := s.Exec(ctx, "c1", sandbox.Command{Command: "true"}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("4: %v", err)
	}
	if p, _, _, _ := c.Objects(ctx); p != 1 {
		t.Fatalf("4: %d pods after Close without an archiver, want the pod kept", p)
	}
}

// TestSandboxesLostPod: 1. a pod whose agent dies under a command gives a
// Restarted result saying so, and its objects are gone (archived first
// when possible: here the agent is gone, so deleted); 2. the next command
// runs in a new pod, with the home its last sleep archived (the lost
// pod's delete keeps it); 3. Destroy deletes it and forgets the name.
func TestSandboxesLostPod(t *testing.T) {
	c := kubetest.NewCluster(t)
	s := newSandboxes(t, c, kubetest.NewTarArchiver())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Create(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo kept > f"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if err := s.Sleep(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		<-started
		c.KillAgents()
	}()
	res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo go; sleep 30", OnOutput: func(byte, []byte) {
		select {
		case <-started:
		default:
			close(started)
		}
	}})
	if err != nil || !res.Restarted || !strings.Contains(string(res.Stderr), "stopped answering") {
		t.Fatalf("1: %+v %v", res, err)
	}
	if p, sec, n, _ := c.Objects(ctx); p+sec+n != 0 {
		t.Fatalf("1: left %d pods, %d secrets, %d policies", p, sec, n)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "cat f"}); err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("2: %+v %v", res, err)
	}
	if err := s.Destroy(ctx, "c1"); err != nil {
		t.Fatalf("3: %v", err)
	}
	if _, err := s.Status("c1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("3: %v", err)
	}
	if p, sec, n, _ := c.Objects(ctx); p+sec+n != 0 {
		t.Fatalf("3: left %d pods, %d secrets, %d policies", p, sec, n)
	}
}

// TestSandboxesPodDeleted: a pod deleted by someone else than a replica
// (an eviction, kubectl delete) during a command is a lost pod, not
// another replica's sleep: the command answers Restarted saying the next
// command runs in a new pod, and it does.
func TestSandboxesPodDeleted(t *testing.T) {
	c := kubetest.NewCluster(t)
	s := newSandboxes(t, c, kubetest.NewTarArchiver())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := startExec(ctx, s, "c1", "echo go; sleep 30")
	if err := c.CS.CoreV1().Pods(kubetest.Namespace).Delete(ctx, kube.ObjectName("c1"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if end := <-done; end.err != nil || !end.res.Restarted || !strings.Contains(string(end.res.Stderr), "the next command runs in a new pod") {
		t.Fatalf("%+v %q %v", end.res, end.res.Stderr, end.err)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo after"}); err != nil || string(res.Stdout) != "after\n" {
		t.Fatalf("next: %+v %v", res, err)
	}
}

// TestSandboxesDestroyCutsShort: Destroy during a long command ends it
// with sandbox.ErrDestroyed at once (not after the command), deletes the
// objects, and the name then starts a new sandbox.
func TestSandboxesDestroyCutsShort(t *testing.T) {
	c := kubetest.NewCluster(t)
	s := newSandboxes(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := startCommand(ctx, s, "c1", "echo go; sleep 50")
	if err := s.Destroy(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, sandbox.ErrDestroyed) {
		t.Fatalf("the command's Exec: %v, want ErrDestroyed", err)
	}
	if p, sec, n, _ := c.Objects(ctx); p+sec+n != 0 {
		t.Fatalf("left %d pods, %d secrets, %d policies", p, sec, n)
	}
	if err := s.Destroy(ctx, "c1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("second destroy: %v", err)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "ls | wc -l"}); err != nil || string(res.Stdout) != "0\n" {
		t.Fatalf("a new sandbox: %+v %v", res, err)
	}
}

// TestSandboxesIdleSleep: with an Archiver, a sandbox unused for
// IdleTimeout is put to sleep (archived, objects deleted), and its next
// command wakes it with the files.
func TestSandboxesIdleSleep(t *testing.T) {
	c := kubetest.NewCluster(t)
	arch := kubetest.NewTarArchiver()
	_, s := c.Sandboxes(t, arch, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo kept > f"}); err != nil {
		t.Fatal(err)
	}
	// Status says Sleeping as soon as the pod is let go, just before its
	// objects are deleted: wait for both.
	for st, _ := s.Status("c1"); st != sandbox.Sleeping; st, _ = s.Status("c1") {
		if ctx.Err() != nil {
			t.Fatal("never slept")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for p, sec, n, _ := c.Objects(ctx); p+sec+n != 0; p, sec, n, _ = c.Objects(ctx) {
		if ctx.Err() != nil {
			t.Fatalf("left %d pods, %d secrets, %d policies", p, sec, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "cat f"}); err != nil || string(res.Stdout) != "kept\n" {
		t.Fatalf("after the idle sleep: %+v %v", res, err)
	}
}

// TestSandboxesFiles: the file calls reach the pod's home through its
// agent: 1. what a command wrote reads back, an upload is what the next
// command sees, and the listing has both; 2. symlinks out of the home,
// FIFOs and directories are refused, and a file over the cap is
// ErrTooLarge; 3. remove; 4. a file call on a sleeping sandbox wakes it
// with its home.
func TestSandboxesFiles(t *testing.T) {
	c := kubetest.NewCluster(t)
	s := newSandboxes(t, c, kubetest.NewTarArchiver())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "echo from-cmd > f && mkdir d && ln -s /etc/passwd link && ln -s / root && mkfifo fifo"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if b, err := s.ReadFile(ctx, "c1", "f", 1<<20); err != nil || string(b) != "from-cmd\n" {
		t.Fatalf("1: read %q %v", b, err)
	}
	fi, err := s.PutFile(ctx, "c1", "d/up.txt", strings.NewReader("uploaded"))
	if err != nil || fi.Path != "d/up.txt" || fi.Size != 8 {
		t.Fatalf("1: put %+v %v", fi, err)
	}
	if res, err := s.Exec(ctx, "c1", sandbox.Command{Command: "cat d/up.txt"}); err != nil || string(res.Stdout) != "uploaded" {
		t.Fatalf("1: the command sees %+v %v", res, err)
	}
	l, err := s.ListFiles(ctx, "c1", sandbox.ListOptions{})
	if err != nil || len(l.Files) != 2 || l.Files[0].Path != "d/up.txt" || l.Files[1].Path != "f" || l.More {
		t.Fatalf("1: list %+v %v", l, err)
	}
	if l, err := s.ListFiles(ctx, "c1", sandbox.ListOptions{Limit: 1, Desc: true}); err != nil || len(l.Files) != 1 || l.Files[0].Path != "f" || !l.More || l.Next != "f" {
		t.Fatalf("1: page %+v %v", l, err)
	}

	for path, want := range map[string]error{
		"link": sandbox.ErrNotRegular, "fifo": sandbox.ErrNotRegular, "d": sandbox.ErrNotRegular,
		"root/etc/passwd": sandbox.ErrBadPath, "nothing": sandbox.ErrFileNotFound,
	} {
		if _, err := s.ReadFile(ctx, "c1", path, 1<<20); !errors.Is(err, want) {
			t.Errorf("2: read %s: %v, want %v", path, err, want)
		}
		if _, err := s.StatFile(ctx, "c1", path); !errors.Is(err, want) {
			t.Errorf("2: stat %s: %v, want %v", path, err, want)
		}
	}
	if _, err := s.OpenFile(ctx, "c1", "f", 3); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("2: %v", err)
	}

	if err := s.RemoveFile(ctx, "c1", "f"); err != nil {
		t.Fatalf("3: %v", err)
	}
	if _, err := s.StatFile(ctx, "c1", "f"); !errors.Is(err, sandbox.ErrFileNotFound) {
		t.Fatalf("3: %v", err)
	}

	if err := s.Sleep(ctx, "c1"); err != nil {
		t.Fatalf("4: %v", err)
	}
	if b, err := s.ReadFile(ctx, "c1", "d/up.txt", 1<<20); err != nil || string(b) != "uploaded" {
		t.Fatalf("4: read after sleep %q %v", b, err)
	}
	if st, _ := s.Status("c1"); st != sandbox.Running {
		t.Fatalf("4: status %v", st)
	}
}

// startCommand runs command in sandbox name in the background and returns
// once it has written its first output; the channel gets Exec's error
// when it ends.
func startCommand(ctx context.Context, s *kube.Sandboxes, name, command string) <-chan error {
	errs := make(chan error, 1)
	ended := startExec(ctx, s, name, command)
	go func() { errs <- (<-ended).err }()
	return errs
}

// execEnd is how a command started by startExec ended.
type execEnd struct {
	res sandbox.Result
	err error
}

// startExec is startCommand with the command's result.
func startExec(ctx context.Context, s *kube.Sandboxes, name, command string) <-chan execEnd {
	started := make(chan struct{})
	done := make(chan execEnd, 1)
	go func() {
		res, err := s.Exec(ctx, name, sandbox.Command{Command: command, OnOutput: func(byte, []byte) {
			select {
			case <-started:
			default:
				close(started)
			}
		}})
		done <- execEnd{res, err}
	}()
	select {
	case <-started:
	case end := <-done:
		done <- end // ended before any output: the caller sees why
	}
	return done
}
