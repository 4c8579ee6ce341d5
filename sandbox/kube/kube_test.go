package kube_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

const ns = "shellgate"

func newBackend(t *testing.T, cs *fake.Clientset, mod func(*kube.Config)) *kube.Backend {
	t.Helper()
	cfg := kube.Config{Namespace: ns, Image: "shellgate-sandbox:test", ReadyTimeout: 5 * time.Second, PollInterval: 20 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	b, err := kube.New(cs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// objects counts the sandbox objects left in the namespace.
func objects(t *testing.T, cs *fake.Clientset) (pods, secrets, policies int) {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(p.Items), len(s.Items), len(n.Items)
}

// TestPodSpec: 1. runtime class; 2. limits from the sandbox limits,
// requests the defaults below them (a request above a limit is the
// limit); 3. pod and container security context; 4. no service account
// token; 5. labels and id annotation; 6. the agent entrypoint with its
// credentials mounted read-only.
func TestPodSpec(t *testing.T) {
	b := newBackend(t, fake.NewClientset(), nil)
	lim := runtime.Limits{CPUs: 1.5, MemoryBytes: 2 << 30, Processes: 256, TmpBytes: 64 << 20, ShmBytes: 64 << 20}
	p := b.Pod("Ctr_1", lim, nil, "")
	c := p.Spec.Containers[0]
	if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "gvisor" {
		t.Errorf("1: runtimeClassName %v, want gvisor", p.Spec.RuntimeClassName)
	}
	check := func(what string, rl corev1.ResourceList, cpu, mem int64) {
		if got := rl.Cpu().MilliValue(); got != cpu {
			t.Errorf("2: %s cpu %dm, want %dm", what, got, cpu)
		}
		if got := rl.Memory().Value(); got != mem {
			t.Errorf("2: %s memory %d, want %d", what, got, mem)
		}
		if got := rl.StorageEphemeral().Value(); got != 5<<30 {
			t.Errorf("2: %s ephemeral storage %d, want 5 GiB", what, got)
		}
	}
	check("limits", c.Resources.Limits, 1500, 2<<30)
	check("requests", c.Resources.Requests, 250, 256<<20)
	small := b.Pod("Ctr_1", runtime.Limits{CPUs: 0.1, MemoryBytes: 128 << 20}, nil, "").Spec.Containers[0]
	check("requests under small limits", small.Resources.Requests, 100, 128<<20)
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("3: no container security context")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0:
		t.Error("3: not forced non-root")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("3: privilege escalation allowed")
	case sc.Privileged == nil || *sc.Privileged:
		t.Error("3: privileged")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("3: writable root filesystem")
	case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0:
		t.Errorf("3: capabilities %+v, want drop ALL", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("3: seccomp not RuntimeDefault")
	case p.Spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("3: pod seccomp not RuntimeDefault")
	}
	if p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC || *p.Spec.ShareProcessNamespace {
		t.Error("3: shares a host or pod namespace")
	}
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Error("4: service account token mounted")
	}
	if p.Labels[kube.LabelSandbox] == "" || p.Labels[kube.LabelManagedBy] != "shellgate" || p.Annotations[kube.AnnotationID] != "Ctr_1" {
		t.Errorf("5: labels %v annotations %v", p.Labels, p.Annotations)
	}
	if p.Name != kube.ObjectName("Ctr_1") || strings.ContainsAny(p.Name, "_C") {
		t.Errorf("5: name %q is not a DNS label", p.Name)
	}
	want := []string{"/usr/local/bin/shellgate-agent", "-listen", ":7070", "-credentials", kube.CredentialsDir, "-nproc", "256"}
	if strings.Join(c.Command, " ") != strings.Join(want, " ") {
		t.Errorf("6: command %q, want %q", c.Command, want)
	}
	var credMount bool
	for _, m := range c.VolumeMounts {
		credMount = credMount || (m.MountPath == kube.CredentialsDir && m.ReadOnly)
	}
	if !credMount {
		t.Error("6: credentials not mounted read-only")
	}
	if p.Annotations[kube.AnnotationAllow] != "" {
		t.Error("6: an allowlist annotation on a pod without network")
	}
}

// TestNetworkPolicy: 1. no network: ingress from the gateway to the agent
// port only, no egress at all (no DNS either); 2. an allowlist: egress to
// the egress proxy's pods on its port only, and the allowlist on the pod's
// annotation for the proxy.
func TestNetworkPolicy(t *testing.T) {
	b := newBackend(t, fake.NewClientset(), nil)
	for _, pol := range []*egress.Policy{nil, {Type: egress.Disabled}} {
		np := b.NetworkPolicy("c1", pol)
		if len(np.Spec.PolicyTypes) != 2 {
			t.Errorf("1: policy types %v", np.Spec.PolicyTypes)
		}
		if np.Spec.Egress == nil || len(np.Spec.Egress) != 0 {
			t.Errorf("1: egress %+v, want none", np.Spec.Egress)
		}
		in := np.Spec.Ingress
		if len(in) != 1 || len(in[0].Ports) != 1 || in[0].Ports[0].Port.IntValue() != 7070 || in[0].From[0].PodSelector.MatchLabels[kube.LabelName] != "shellgate" {
			t.Errorf("1: ingress %+v", in)
		}
		if np.Spec.PodSelector.MatchLabels[kube.LabelSandbox] == "" {
			t.Error("1: selects no sandbox")
		}
	}
	pol := &egress.Policy{Type: egress.Allowlist, AllowedDomains: []string{"pypi.org", "*.pythonhosted.org"}}
	np := b.NetworkPolicy("c1", pol)
	if len(np.Spec.Egress) != 1 {
		t.Fatalf("2: egress %+v", np.Spec.Egress)
	}
	e := np.Spec.Egress[0]
	if len(e.To) != 1 || e.To[0].PodSelector.MatchLabels[kube.LabelName] != "shellgate-egress" || e.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != ns || e.To[0].IPBlock != nil {
		t.Errorf("2: egress peers %+v", e.To)
	}
	if len(e.Ports) != 1 || e.Ports[0].Port.IntValue() != 3128 || *e.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("2: egress ports %+v, want TCP 3128 only", e.Ports)
	}
	p := b.Pod("c1", runtime.DefaultLimits(), pol, "http://10.0.0.9:3128")
	if got := p.Annotations[kube.AnnotationAllow]; got != `["pypi.org","*.pythonhosted.org"]` {
		t.Errorf("2: allowlist annotation %q", got)
	}
}

// TestWakeNotReady: a pod that can never start fails the wake at once with
// its reason, one that stays pending fails at ReadyTimeout; either way
// nothing is left behind.
func TestWakeNotReady(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status corev1.PodStatus
		want   string
	}{
		{"1 image not pullable", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "sandbox", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "pull access denied"}}}}}, "ImagePullBackOff"},
		{"2 failed", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}, "Evicted"},
		{"3 pending forever", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes have runtime class gvisor"}}}, "unschedulable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
				p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
				p.Status = tc.status
				return false, nil, nil // the tracker stores it with this status
			})
			b := newBackend(t, cs, func(c *kube.Config) { c.ReadyTimeout = 300 * time.Millisecond })
			err := b.Wake(context.Background(), "c1", kube.Options{})
			if !errors.Is(err, kube.ErrNotReady) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrNotReady naming %q", err, tc.want)
			}
			if p, s, n := objects(t, cs); p+s+n != 0 {
				t.Fatalf("left %d pods, %d secrets, %d policies", p, s, n)
			}
		})
	}
}

// TestAPIErrors: an API error on any create fails the wake with that error
// (still matching apierrors' predicates) and removes what was created.
func TestAPIErrors(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name, verb, resource string
		err                  error
		is                   func(error) bool
	}{
		{"1 pod forbidden", "create", "pods", apierrors.NewForbidden(gr, "x", errors.New("pods is forbidden")), apierrors.IsForbidden},
		{"2 secret conflict", "create", "secrets", apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, "x", errors.New("changed")), apierrors.IsConflict},
		{"3 policy forbidden", "create", "networkpolicies", apierrors.NewForbidden(schema.GroupResource{Group: "networking.k8s.io", Resource: "networkpolicies"}, "x", errors.New("no")), apierrors.IsForbidden},
		{"4 old pod not deletable", "delete", "pods", apierrors.NewForbidden(gr, "x", errors.New("no delete")), apierrors.IsForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			cs.PrependReactor(tc.verb, tc.resource, func(k8stesting.Action) (bool, k8sruntime.Object, error) {
				return true, nil, tc.err
			})
			b := newBackend(t, cs, nil)
			err := b.Wake(context.Background(), "c1", kube.Options{})
			if err == nil || !tc.is(err) {
				t.Fatalf("got %v", err)
			}
			if tc.verb == "create" {
				if p, s, n := objects(t, cs); p+s+n != 0 {
					t.Fatalf("left %d pods, %d secrets, %d policies", p, s, n)
				}
			}
		})
	}
}

// TestAllowlistNeedsProxy: a sandbox with network cannot start when the
// egress proxy's Service is missing; one with a Service gets its address.
func TestAllowlistNeedsProxy(t *testing.T) {
	cs := fake.NewClientset()
	b := newBackend(t, cs, nil)
	pol := &egress.Policy{Type: egress.Allowlist, AllowedDomains: []string{"pypi.org"}}
	err := b.Wake(context.Background(), "c1", kube.Options{Network: pol})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "egress proxy service") {
		t.Fatalf("got %v", err)
	}
	if p, s, n := objects(t, cs); p+s+n != 0 {
		t.Fatalf("left %d pods, %d secrets, %d policies", p, s, n)
	}

	// With the Service: the pod gets the proxy's cluster IP (no DNS) and
	// the allowlist (captured as created; this pod then fails to start).
	cs.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "shellgate-egress", Namespace: ns},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.9"},
	}, metav1.CreateOptions{})
	var created *corev1.Pod
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		created = a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("stop here"))
	})
	if err := b.Wake(context.Background(), "c1", kube.Options{Network: pol}); !apierrors.IsForbidden(err) {
		t.Fatalf("got %v", err)
	}
	env := map[string]string{}
	for _, e := range created.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["HTTPS_PROXY"] != "http://10.96.0.9:3128" || env["http_proxy"] != "http://10.96.0.9:3128" || created.Annotations[kube.AnnotationAllow] != `["pypi.org"]` {
		t.Fatalf("proxy env %v, annotations %v", env, created.Annotations)
	}
}

// failingArchiver is kubetest's archiver that can be made to fail and
// records how many pods were in the namespace at each Archive.
type failingArchiver struct {
	*kubetest.TarArchiver
	c        *kubetest.Cluster
	mu       sync.Mutex
	fail     error
	podsSeen []int
}

func (a *failingArchiver) Archive(ctx context.Context, id string, h kube.Home) error {
	pods, _, _, err := a.c.Objects(ctx)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.podsSeen = append(a.podsSeen, pods)
	fail := a.fail
	a.mu.Unlock()
	if fail != nil {
		return fail
	}
	return a.TarArchiver.Archive(ctx, id, h)
}

// TestSleepWake, with the real agent over TLS: 1. wake, run a command that
// writes a file; 2. a failing archive keeps the pod and the sandbox awake;
// 3. sleep archives while the pod exists, then deletes pod, secrets and
// policy; 4. exec while asleep is ErrNotAwake; 5. wake makes a new pod with
// the file restored, which mounts a copy of the credentials under a name
// the first pod's did not have (the kubelet keeps an immutable Secret it
// read as long as a pod refers to it).
func TestSleepWake(t *testing.T) {
	c := kubetest.NewCluster(t)
	home := c.HomeDir // each pod gets a new empty one (an emptyDir)
	arch := &failingArchiver{TarArchiver: kubetest.NewTarArchiver(), c: c}
	b := newBackend(t, c.CS, func(cfg *kube.Config) {
		cfg.AgentPort = c.Port
		cfg.HomeDir = home
		cfg.Archiver = arch
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh := func(cmd string) agent.Output {
		t.Helper()
		out, err := b.Exec(ctx, "c1", agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: cmd, Dir: home}, nil)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return out
	}
	mounted := func() string {
		t.Helper()
		kp, err := c.CS.CoreV1().Pods(kubetest.Namespace).Get(ctx, kube.ObjectName("c1"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range kp.Spec.Volumes {
			if v.Secret != nil {
				copy, err := c.CS.CoreV1().Secrets(kubetest.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
				lock, lerr := c.CS.CoreV1().Secrets(kubetest.Namespace).Get(ctx, kube.ObjectName("c1"), metav1.GetOptions{})
				if err != nil || lerr != nil || v.Secret.SecretName == lock.Name || string(copy.Data[agent.TokenFile]) != string(lock.Data[agent.TokenFile]) {
					t.Fatalf("the pod mounts %q (%v %v), not a copy of the credentials", v.Secret.SecretName, err, lerr)
				}
				return v.Secret.SecretName
			}
		}
		t.Fatal("no credentials volume")
		return ""
	}
	if err := b.Wake(ctx, "c1", kube.Options{}); err != nil {
		t.Fatalf("1: %v", err)
	}
	first := mounted()
	if out := sh("echo kept > data.txt && echo ok"); string(out.Stdout) != "ok\n" {
		t.Fatalf("1: %q %q", out.Stdout, out.Stderr)
	}

	arch.mu.Lock()
	arch.fail = errors.New("bucket unreachable")
	arch.mu.Unlock()
	if err := b.Sleep(ctx, "c1"); !errors.Is(err, kube.ErrArchive) {
		t.Fatalf("2: got %v, want ErrArchive", err)
	}
	if p, s, n := objects(t, c.CS); p != 1 || s != 3 || n != 1 || !b.Awake("c1") { // the credentials, the pod's copy and the restored mark
		t.Fatalf("2: after a failed archive: %d pods, %d secrets, %d policies, awake %v", p, s, n, b.Awake("c1"))
	}
	sh("true") // still served
	arch.mu.Lock()
	arch.fail = nil
	arch.mu.Unlock()

	if err := b.Sleep(ctx, "c1"); err != nil {
		t.Fatalf("3: %v", err)
	}
	if got := arch.podsSeen; len(got) != 2 || got[1] != 1 || arch.Archives != 1 {
		t.Fatalf("3: pods when archiving: %v, want the pod there", got)
	}
	if p, s, n := objects(t, c.CS); p+s+n != 0 {
		t.Fatalf("3: left %d pods, %d secrets, %d policies", p, s, n)
	}
	if _, err := b.Exec(ctx, "c1", agent.ExecRequest{Shell: []string{"/bin/true"}}, nil); !errors.Is(err, kube.ErrNotAwake) {
		t.Fatalf("4: got %v", err)
	}

	if err := b.Wake(ctx, "c1", kube.Options{}); err != nil {
		t.Fatalf("5: %v", err)
	}
	if out := sh("cat data.txt"); string(out.Stdout) != "kept\n" {
		t.Fatalf("5: restored %q %q", out.Stdout, out.Stderr)
	}
	if second := mounted(); second == first {
		t.Fatalf("5: the new pod mounts %q again", second)
	}
	if err := b.Destroy(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if p, s, n := objects(t, c.CS); p+s+n != 0 {
		t.Fatalf("destroy left %d pods, %d secrets, %d policies", p, s, n)
	}
}

// TestOverlappingWake: a second Wake of a sandbox whose first Wake is
// still waiting for its pod fails with ErrBusy and deletes nothing of the
// first's; the first then ends (here: not ready) and cleans up its own.
func TestOverlappingWake(t *testing.T) {
	cs := fake.NewClientset()
	b := newBackend(t, cs, func(c *kube.Config) { c.ReadyTimeout = 2 * time.Second })
	first := make(chan error, 1)
	go func() { first <- b.Wake(context.Background(), "c1", kube.Options{}) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if p, _, _ := objects(t, cs); p == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("first wake made no pod")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.Wake(context.Background(), "c1", kube.Options{}); !errors.Is(err, kube.ErrBusy) {
		t.Fatalf("second wake: %v, want ErrBusy", err)
	}
	if p, s, n := objects(t, cs); p != 1 || s != 2 || n != 1 { // the credentials and the pod's copy
		t.Fatalf("the second wake touched the first's objects: %d pods, %d secrets, %d policies", p, s, n)
	}
	if err := <-first; !errors.Is(err, kube.ErrNotReady) {
		t.Fatalf("first wake: %v, want ErrNotReady (no kubelet here)", err)
	}
	if p, s, n := objects(t, cs); p+s+n != 0 {
		t.Fatalf("left %d pods, %d secrets, %d policies", p, s, n)
	}
}
