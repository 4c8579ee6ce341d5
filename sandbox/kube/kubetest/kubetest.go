// Package kubetest runs package kube's sandboxes in tests without a
// cluster: client-go's fake clientset is the API server, and a pod created
// in it starts the real Shellgate agent on loopback TCP (TLS + token, as in
// a pod), with the pod's Secret as its credentials. Only the API server is
// fake; the agent and every command are real.
package kubetest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/testenv"
)

// Namespace is the namespace of a Cluster's sandboxes.
const Namespace = "shellgate"

// Cluster plays the kubelet for a fake clientset. Each sandbox pod created
// gets the agent started from the pod's own command line (its -listen
// moved to 127.0.0.1:Port) in a PID and mount namespace of its own (its
// own /proc), with a new empty directory bound over HomeDir: like a pod's emptyDir, a pod's
// home starts empty and is gone with the pod. The pod is then Ready at
// 127.0.0.1. Every pod listens on Port, so one pod runs at a time.
// Deleting a pod kills its agent, as the kubelet would, so every gateway
// connection to it breaks; any number of kube.Backends (gateway
// replicas) may share one Cluster.
type Cluster struct {
	CS      *fake.Clientset
	Port    int32
	HomeDir string

	t    testing.TB
	mu   sync.Mutex
	cmds []*agentProc
	pods map[string]*agentProc // each pod's agent, by pod name
}

// agentProc is one pod's agent process; done is closed once it has exited
// (and so no longer holds the cluster's one agent port).
type agentProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// kill ends the agent (PID 1 of its namespace: the whole pod) and waits
// until it has exited, so that the next pod can listen on the port.
func (a *agentProc) kill() {
	a.cmd.Process.Kill()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
	}
}

// Config is a kube.Config for the cluster's pods.
func (c *Cluster) Config() kube.Config {
	return kube.Config{Namespace: Namespace, Image: "shellgate-sandbox:test", AgentPort: c.Port, HomeDir: c.HomeDir,
		ReadyTimeout: 10 * time.Second, PollInterval: 20 * time.Millisecond}
}

// NewCluster starts a fake cluster for t; it needs root (the agent runs
// as PID 1 of its namespace and the home is a bind mount).
func NewCluster(t testing.TB) *Cluster {
	testenv.NeedRoot(t, "the agent runs as PID 1 of a PID namespace over a bind-mounted home")
	bin, err := agentbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	c := &Cluster{t: t, CS: fake.NewClientset(), Port: port, HomeDir: t.TempDir(), pods: map[string]*agentProc{}}
	c.CS.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		if err := c.start(bin, p); err != nil {
			return true, nil, err
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		return false, nil, nil
	})
	c.CS.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		// The object goes first, then the agent, as on a cluster (the
		// API server marks the pod deleted before the kubelet kills
		// it): a gateway whose connection breaks then finds the pod gone.
		name := a.(k8stesting.DeleteAction).GetName()
		err := c.CS.Tracker().Delete(a.GetResource(), a.GetNamespace(), name)
		c.mu.Lock()
		if ap := c.pods[name]; ap != nil {
			ap.kill()
			delete(c.pods, name)
		}
		c.mu.Unlock()
		return true, nil, err
	})
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, ap := range c.cmds {
			ap.kill()
		}
	})
	return c
}

// start runs pod p's agent.
func (c *Cluster) start(bin string, p *corev1.Pod) error {
	sec, err := c.CS.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace, p.Name)
	if err != nil {
		return err
	}
	creds := c.t.TempDir()
	for k, v := range sec.(*corev1.Secret).Data {
		if err := os.WriteFile(filepath.Join(creds, k), v, 0o600); err != nil {
			return err
		}
	}
	args := append([]string(nil), p.Spec.Containers[0].Command[1:]...)
	for i := range args {
		switch args[i] {
		case "-listen":
			args[i+1] = "127.0.0.1" + args[i+1]
		case "-credentials":
			args[i+1] = creds
		}
	}
	podHome := c.t.TempDir()
	// sh binds the pod's home, mounts the pod's own /proc (the agent
	// counts and kills the pod's processes by it, as in a pod; the host's
	// would show the host's) and then becomes the agent (PID 1).
	sh := append([]string{"-c", `mount --bind "$1" "$2" && mount -t proc proc /proc && shift 2 && exec "$@"`, "sh", podHome, c.HomeDir, bin}, args...)
	cmd := exec.Command("/bin/sh", sh...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(stderr)
	var lines []string
	listening := false
	for !listening && sc.Scan() {
		listening = strings.Contains(sc.Text(), "listening on")
		lines = append(lines, sc.Text())
	}
	ap := &agentProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		io.Copy(io.Discard, stderr)
		cmd.Wait()
		close(ap.done)
	}()
	c.mu.Lock()
	c.cmds = append(c.cmds, ap)
	c.pods[p.Name] = ap
	c.mu.Unlock()
	if !listening {
		return errors.New("agent did not start: " + strings.Join(lines, "\n"))
	}
	return nil
}

// KillAgents kills every agent started so far, as a pod's sandbox dying
// would (their gateway connections break), after counting a restart of
// each pod's container, as the kubelet would (the agent is not started
// again). The count comes first so that a gateway looking at the pod when
// its connection breaks sees the restart.
func (c *Cluster) KillAgents() {
	pods, err := c.CS.CoreV1().Pods(Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		c.t.Error(err)
	}
	for _, p := range pods.Items {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sandbox", RestartCount: 1}}
		if _, err := c.CS.CoreV1().Pods(Namespace).UpdateStatus(context.Background(), &p, metav1.UpdateOptions{}); err != nil {
			c.t.Error(err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ap := range c.cmds {
		ap.kill()
	}
}

// Objects counts the sandbox objects in the namespace.
func (c *Cluster) Objects(ctx context.Context) (pods, secrets, policies int, err error) {
	p, err := c.CS.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, 0, err
	}
	s, err := c.CS.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, 0, err
	}
	n, err := c.CS.NetworkingV1().NetworkPolicies(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, 0, err
	}
	return len(p.Items), len(s.Items), len(n.Items), nil
}

// TarArchiver keeps homes in memory as base64 tar streams, read and
// written through the pod's agent: what an archiver sees of a pod.
type TarArchiver struct {
	mu    sync.Mutex
	saved map[string]string
	// Archives and Restores count the calls that moved a home.
	Archives, Restores int
}

func NewTarArchiver() *TarArchiver { return &TarArchiver{saved: map[string]string{}} }

var _ kube.Archiver = (*TarArchiver)(nil)

func (a *TarArchiver) Archive(ctx context.Context, id string, h kube.Home) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	out, err := h.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "tar -C " + h.Dir() + " -cf - . | base64 -w0", Dir: "/", MaxBytes: 16 << 20})
	if err != nil {
		return err
	}
	if out.ExitCode != 0 || out.StdoutBytes != int64(len(out.Stdout)) {
		return errors.New("archive: " + string(out.Stderr))
	}
	a.saved[id] = string(out.Stdout)
	a.Archives++
	return nil
}

func (a *TarArchiver) Delete(ctx context.Context, id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.saved, id)
	return nil
}

func (a *TarArchiver) Has(ctx context.Context, id string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.saved[id]
	return ok, nil
}

func (a *TarArchiver) Restore(ctx context.Context, id string, h kube.Home) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.saved[id]
	if !ok {
		return nil
	}
	out, err := h.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "echo " + s + " | base64 -d | tar -C " + h.Dir() + " -xf -", Dir: "/"})
	if err == nil && out.ExitCode != 0 {
		err = errors.New("restore: " + string(out.Stderr))
	}
	if err == nil {
		a.Restores++
	}
	return err
}

// Sandboxes is a kube.Backend on c, keeping homes with arch (nil: none),
// and the Sandboxes on it (shell /bin/sh -c; idle is
// SandboxesConfig.IdleTimeout: 0 the default, negative never), closed
// when t ends.
func (c *Cluster) Sandboxes(t testing.TB, arch kube.Archiver, idle time.Duration) (*kube.Backend, *kube.Sandboxes) {
	t.Helper()
	cfg := c.Config()
	cfg.Archiver = arch
	b, err := kube.New(c.CS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := kube.NewSandboxes(b, kube.SandboxesConfig{Shell: []string{"/bin/sh", "-c"}, IdleTimeout: idle})
	t.Cleanup(func() { s.Close(context.Background()) })
	return b, s
}
