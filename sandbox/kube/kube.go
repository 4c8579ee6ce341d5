// Package kube runs sandboxes as Kubernetes pods: one pod per awake
// sandbox, under a gVisor RuntimeClass, with the Shellgate agent as the
// container's entrypoint listening on the pod network (agent's TLS + token
// mode: the pod network is not trusted).
//
// For sandbox id, Wake creates three objects, all labelled
// shellgate.dev/sandbox=<hash of id> and named shellgate-<hash>:
//
//   - a Secret with the agent's per-sandbox certificate, key and token
//     (agent.Credentials), mounted read-only into the pod;
//   - a NetworkPolicy: ingress only from the gateway's pods to the agent
//     port; egress nothing, or with an allowlist only the egress proxy's
//     pods on its port (NetworkPolicy.go);
//   - the Pod (pod.go), then waits for it to be Ready, dials its agent and
//     restores the home through the Archiver.
//
// Sleep archives the home through the Archiver and deletes the objects
// only once that succeeded (a failed archive keeps the pod, and the error
// is returned). Wake after Sleep makes a new pod. Destroy deletes without
// archiving.
//
// Example:
//
//	b, _ := kube.New(clientset, kube.Config{Namespace: "shellgate", Image: "registry.example/shellgate-sandbox:1"})
//	_ = b.Wake(ctx, "ctr_1", kube.Options{})
//	out, _ := b.Exec(ctx, "ctr_1", agent.ExecRequest{Shell: []string{"bash", "-lc"}, Command: "ls", Dir: kube.HomeDir})
//	_ = b.Sleep(ctx, "ctr_1")
package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// Labels and annotations on every object of a sandbox.
const (
	LabelSandbox    = "shellgate.dev/sandbox" // hash of the sandbox id
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	LabelName       = "app.kubernetes.io/name"
	AnnotationID    = "shellgate.dev/sandbox-id"
	AnnotationAllow = "shellgate.dev/allowed-domains" // the allowlist, for the egress proxy
	ManagedBy       = "shellgate"
	SandboxApp      = "shellgate-sandbox"
)

// In-pod paths.
const (
	HomeDir        = "/workspace/home"
	CredentialsDir = "/run/shellgate/agent"
)

// Archiver saves and restores sandbox homes across pods: Sleep calls
// Archive before it deletes a pod, Wake calls Restore on the new pod before
// any command, Destroy calls Delete. The home is reached through the pod's
// agent (Home): its file requests, or a command. kubehome.Archiver keeps
// homes in the server's storage.
type Archiver interface {
	Archive(ctx context.Context, id string, home Home) error
	// Restore of a sandbox never archived returns nil and leaves the home
	// empty.
	Restore(ctx context.Context, id string, home Home) error
	// Delete removes the archived home of id; none is not an error.
	Delete(ctx context.Context, id string) error
}

// Home is one awake sandbox's home as an archiver sees it.
type Home interface {
	// Exec runs a command in the pod, like Backend.Exec.
	Exec(ctx context.Context, req agent.ExecRequest) (agent.Output, error)
	// Dir is the home's path in the pod.
	Dir() string
	// Files is the pod's agent, for its file requests beneath Dir.
	Files() *agent.Client
}

// Dialer connects to a pod's agent; agent.DialTCP is the default.
type Dialer func(ctx context.Context, addr string, c agent.Credentials) (*agent.Client, error)

// Config configures a Backend. Namespace and Image are required.
type Config struct {
	Namespace string
	// Image is the sandbox image: its root filesystem and the static
	// agent at AgentPath.
	Image     string
	AgentPath string // default /usr/local/bin/shellgate-agent
	AgentPort int32  // default 7070
	// HomeDir is the home's path in the pod (default /workspace/home).
	HomeDir string
	// RuntimeClass is the pods' runtimeClassName (default "gvisor"); "-"
	// leaves it unset (the node's default runtime: for kind without gVisor
	// only, never production).
	RuntimeClass string
	// UID and GID of the agent and the commands (non-root; default 1000).
	UID, GID int64
	// Limits are the pods' resources (default runtime.DefaultLimits()),
	// DiskBytes the home's size limit (default 5 GiB).
	Limits    runtime.Limits
	DiskBytes int64
	// GatewayLabels select the gateway's pods, the only ingress to the
	// agent port (default app.kubernetes.io/name=shellgate).
	GatewayLabels map[string]string
	// Egress is the proxy DaemonSet that sandboxes with an allowlist reach.
	Egress EgressProxy
	// ReadyTimeout bounds a wake from pod creation to the agent's Ready
	// frame (default 2 minutes).
	ReadyTimeout time.Duration
	// PollInterval is how often a waking pod's status is read (default
	// 500ms).
	PollInterval time.Duration
	Archiver     Archiver // nil: homes are not kept across sleep
	Dial         Dialer   // nil: agent.DialTCP
	Logger       *slog.Logger
}

// EgressProxy names the egress proxy's pods and Service.
type EgressProxy struct {
	Namespace string            // default: Config.Namespace
	Labels    map[string]string // default app.kubernetes.io/name=shellgate-egress
	Service   string            // default shellgate-egress
	Port      int32             // default 3128
}

// Options are one sandbox's settings at wake.
type Options struct {
	// Network is the sandbox's egress policy, fixed for the pod's life;
	// nil or disabled: no network.
	Network *egress.Policy
	// Limits override Config.Limits when non-zero.
	Limits *runtime.Limits
	// DiskBytes overrides Config.DiskBytes (the home's size limit) when
	// positive.
	DiskBytes int64
}

// Errors.
var (
	ErrNotAwake = errors.New("kube: sandbox is not awake")
	ErrNotReady = errors.New("kube: sandbox pod did not become ready")
	ErrBadID    = errors.New("kube: bad sandbox id")
	ErrArchive  = errors.New("kube: archiving the home failed; the pod is kept")
	ErrAwake    = errors.New("kube: sandbox is already awake")
	// ErrBusy: another Wake, Sleep or Destroy of the same sandbox is under
	// way in this backend; lifecycle steps of one sandbox never overlap
	// (an overlapping Wake would otherwise delete the other's objects).
	ErrBusy = errors.New("kube: sandbox is busy with another lifecycle step")
)

// Backend runs sandboxes as pods in one namespace.
type Backend struct {
	cs  kubernetes.Interface
	cfg Config

	mu    sync.Mutex
	awake map[string]*pod
	busy  map[string]bool // ids in Wake, Sleep or Destroy
}

// claim marks id busy for one lifecycle step; release undoes it.
func (b *Backend) claim(id string) (release func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.busy[id] {
		return nil, fmt.Errorf("%w: %s", ErrBusy, id)
	}
	b.busy[id] = true
	return func() {
		b.mu.Lock()
		delete(b.busy, id)
		b.mu.Unlock()
	}, nil
}

type pod struct {
	name   string
	client *agent.Client
}

// New returns a backend using cs.
func New(cs kubernetes.Interface, cfg Config) (*Backend, error) {
	if cfg.Namespace == "" || cfg.Image == "" {
		return nil, errors.New("kube: Namespace and Image are required")
	}
	if cfg.AgentPath == "" {
		cfg.AgentPath = "/usr/local/bin/shellgate-agent"
	}
	if cfg.HomeDir == "" {
		cfg.HomeDir = HomeDir
	}
	if cfg.AgentPort == 0 {
		cfg.AgentPort = 7070
	}
	if cfg.RuntimeClass == "" {
		cfg.RuntimeClass = "gvisor"
	}
	if cfg.UID == 0 {
		cfg.UID = 1000
	}
	if cfg.GID == 0 {
		cfg.GID = 1000
	}
	if cfg.Limits == (runtime.Limits{}) {
		cfg.Limits = runtime.DefaultLimits()
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("kube: limits: %w", err)
	}
	if cfg.DiskBytes == 0 {
		cfg.DiskBytes = 5 << 30
	}
	if cfg.GatewayLabels == nil {
		cfg.GatewayLabels = map[string]string{LabelName: "shellgate"}
	}
	if cfg.Egress.Namespace == "" {
		cfg.Egress.Namespace = cfg.Namespace
	}
	if cfg.Egress.Labels == nil {
		cfg.Egress.Labels = map[string]string{LabelName: "shellgate-egress"}
	}
	if cfg.Egress.Service == "" {
		cfg.Egress.Service = "shellgate-egress"
	}
	if cfg.Egress.Port == 0 {
		cfg.Egress.Port = 3128
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.Dial == nil {
		cfg.Dial = agent.DialTCP
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{cs: cs, cfg: cfg, awake: map[string]*pod{}, busy: map[string]bool{}}, nil
}

// ObjectName is the name of sandbox id's Pod, Secret and NetworkPolicy:
// ids allow characters Kubernetes names do not, so the name is a hash.
func ObjectName(id string) string { return "shellgate-" + idHash(id) }

func idHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:10])
}

func checkID(id string) error {
	if len(id) < 1 || len(id) > 40 {
		return fmt.Errorf("%w: %q", ErrBadID, id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("%w: %q", ErrBadID, id)
		}
	}
	return nil
}

func (b *Backend) labels(id string) map[string]string {
	return map[string]string{LabelSandbox: idHash(id), LabelManagedBy: ManagedBy, LabelName: SandboxApp}
}

func (b *Backend) meta(id string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: ObjectName(id), Namespace: b.cfg.Namespace,
		Labels: b.labels(id), Annotations: map[string]string{AnnotationID: id},
	}
}

// Wake starts sandbox id in a new pod and restores its home. Objects left
// by an earlier gateway that died are replaced.
func (b *Backend) Wake(ctx context.Context, id string, opts Options) (err error) {
	if err := checkID(id); err != nil {
		return err
	}
	if opts.Network != nil {
		if err := opts.Network.Validate(); err != nil {
			return err
		}
	}
	lim := b.cfg.Limits
	if opts.Limits != nil {
		lim = *opts.Limits
		if err := lim.Validate(); err != nil {
			return fmt.Errorf("kube: limits: %w", err)
		}
	}
	disk := b.cfg.DiskBytes
	if opts.DiskBytes > 0 {
		disk = opts.DiskBytes
	}
	release, err := b.claim(id)
	if err != nil {
		return err
	}
	defer release()
	b.mu.Lock()
	if b.awake[id] != nil {
		b.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrAwake, id)
	}
	b.mu.Unlock()
	creds, err := agent.NewCredentials()
	if err != nil {
		return err
	}
	proxy := ""
	if opts.Network.Enabled() {
		svc, err := b.cs.CoreV1().Services(b.cfg.Egress.Namespace).Get(ctx, b.cfg.Egress.Service, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("kube: egress proxy service %s/%s: %w", b.cfg.Egress.Namespace, b.cfg.Egress.Service, err)
		}
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return fmt.Errorf("kube: egress proxy service %s/%s has no cluster IP", b.cfg.Egress.Namespace, b.cfg.Egress.Service)
		}
		proxy = "http://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(b.cfg.Egress.Port)))
	}
	// Leftovers of a gateway that died mid-sandbox: replaced, never reused
	// (their credentials are gone with that gateway).
	if err := b.deleteObjects(ctx, id); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// A cancelled ctx must not leave a pod running.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if derr := b.deleteObjects(cctx, id); derr != nil {
				err = errors.Join(err, fmt.Errorf("kube: cleanup of %s: %w", ObjectName(id), derr))
			}
		}
	}()
	if _, err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Create(ctx, b.secret(id, creds), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kube: create secret %s: %w", ObjectName(id), err)
	}
	if _, err := b.cs.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Create(ctx, b.NetworkPolicy(id, opts.Network), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kube: create network policy %s: %w", ObjectName(id), err)
	}
	if _, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Create(ctx, b.pod(id, lim, disk, opts.Network, proxy), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kube: create pod %s: %w", ObjectName(id), err)
	}
	wctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	ip, err := b.waitReady(wctx, id)
	if err != nil {
		return err
	}
	client, err := b.dialAgent(wctx, net.JoinHostPort(ip, strconv.Itoa(int(b.cfg.AgentPort))), creds)
	if err != nil {
		return fmt.Errorf("kube: agent of pod %s: %w", ObjectName(id), err)
	}
	p := &pod{name: ObjectName(id), client: client}
	if b.cfg.Archiver != nil {
		if err := b.cfg.Archiver.Restore(ctx, id, home{b, p}); err != nil {
			client.Close()
			return fmt.Errorf("kube: restore home of %s: %w", id, err)
		}
	}
	b.mu.Lock()
	b.awake[id] = p
	b.mu.Unlock()
	b.cfg.Logger.Info("sandbox pod awake", "sandbox", id, "pod", p.name, "ip", ip)
	return nil
}

// waitReady polls the pod until it is Ready and has an IP, failing fast
// when it can never be (failed, image not pullable, container crashing).
func (b *Backend) waitReady(ctx context.Context, id string) (string, error) {
	name := ObjectName(id)
	last := "not created"
	t := time.NewTicker(b.cfg.PollInterval)
	defer t.Stop()
	for {
		p, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			ready, why, stuck := podState(p)
			if ready && p.Status.PodIP != "" {
				return p.Status.PodIP, nil
			}
			last = why
			if stuck {
				return "", fmt.Errorf("%w: pod %s: %s", ErrNotReady, name, why)
			}
		case apierrors.IsNotFound(err):
			return "", fmt.Errorf("%w: pod %s was deleted while starting", ErrNotReady, name)
		case ctx.Err() == nil:
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w: pod %s within %s: %s", ErrNotReady, name, b.cfg.ReadyTimeout, last)
		case <-t.C:
		}
	}
}

// podState tells whether p is ready, a description of where it is, and
// whether it is stuck for good.
func podState(p *corev1.Pod) (ready bool, why string, stuck bool) {
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, fmt.Sprintf("phase %s: %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message), true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff", "RunContainerError":
				return false, fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message), true
			}
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			why = "unschedulable: " + c.Message
		}
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true, "ready", false
		}
	}
	if why == "" {
		why = "phase " + string(p.Status.Phase)
	}
	return false, why, false
}

// dialAgent retries until the agent listens: Ready means the container
// started, not that the agent's socket is open yet.
func (b *Backend) dialAgent(ctx context.Context, addr string, c agent.Credentials) (*agent.Client, error) {
	for {
		client, err := b.cfg.Dial(ctx, addr, c)
		if err == nil {
			return client, nil
		}
		var ne *net.OpError
		if !errors.As(err, &ne) || ne.Op != "dial" {
			return nil, err // reached something that refused us: no retry
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(b.cfg.PollInterval):
		}
	}
}

// Exec runs one command in sandbox id's pod.
func (b *Backend) Exec(ctx context.Context, id string, req agent.ExecRequest, onOutput agent.OutputFunc) (agent.Output, error) {
	b.mu.Lock()
	p := b.awake[id]
	b.mu.Unlock()
	if p == nil {
		return agent.Output{}, fmt.Errorf("%w: %s", ErrNotAwake, id)
	}
	return p.client.Exec(ctx, req, onOutput)
}

// Agent is the agent connection of sandbox id's pod.
func (b *Backend) Agent(id string) (*agent.Client, error) {
	b.mu.Lock()
	p := b.awake[id]
	b.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotAwake, id)
	}
	return p.client, nil
}

// Awake tells whether sandbox id has a pod served by this backend.
func (b *Backend) Awake(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.awake[id] != nil
}

// Sleep archives sandbox id's home and then deletes its pod. When the
// archive fails the pod is kept (still awake) and the error matches
// ErrArchive: deleting it would lose the files.
func (b *Backend) Sleep(ctx context.Context, id string) error {
	release, err := b.claim(id)
	if err != nil {
		return err
	}
	defer release()
	b.mu.Lock()
	p := b.awake[id]
	b.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%w: %s", ErrNotAwake, id)
	}
	if b.cfg.Archiver != nil {
		if err := b.cfg.Archiver.Archive(ctx, id, home{b, p}); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrArchive, id, err)
		}
	}
	b.mu.Lock()
	delete(b.awake, id)
	b.mu.Unlock()
	p.client.Close()
	if err := b.deleteObjects(ctx, id); err != nil {
		return fmt.Errorf("kube: sleep %s: %w", id, err)
	}
	b.cfg.Logger.Info("sandbox pod deleted after archive", "sandbox", id, "pod", p.name)
	return nil
}

// Destroy deletes sandbox id's objects without archiving, then its
// archived home (Archiver.Delete).
func (b *Backend) Destroy(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	release, err := b.claim(id)
	if err != nil {
		return err
	}
	defer release()
	b.mu.Lock()
	p := b.awake[id]
	delete(b.awake, id)
	b.mu.Unlock()
	if p != nil {
		p.client.Close()
	}
	if err := b.deleteObjects(ctx, id); err != nil {
		return err
	}
	if b.cfg.Archiver != nil {
		if err := b.cfg.Archiver.Delete(ctx, id); err != nil {
			return fmt.Errorf("kube: destroy %s: archived home: %w", id, err)
		}
	}
	return nil
}

// deleteObjects deletes sandbox id's pod, network policy and secret;
// objects already gone are not an error.
func (b *Backend) deleteObjects(ctx context.Context, id string) error {
	name := ObjectName(id)
	grace := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	var errs []error
	for _, d := range []struct {
		kind string
		fn   func() error
	}{
		{"pod", func() error { return b.cs.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, name, del) }},
		{"network policy", func() error {
			return b.cs.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Delete(ctx, name, del)
		}},
		{"secret", func() error { return b.cs.CoreV1().Secrets(b.cfg.Namespace).Delete(ctx, name, del) }},
	} {
		if err := d.fn(); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", d.kind, name, err))
		}
	}
	return errors.Join(errs...)
}

// Close disconnects from every pod, leaving them running (a restarted
// gateway replaces them on the next wake).
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, p := range b.awake {
		p.client.Close()
		delete(b.awake, id)
	}
	return nil
}

type home struct {
	b *Backend
	p *pod
}

func (h home) Exec(ctx context.Context, req agent.ExecRequest) (agent.Output, error) {
	return h.p.client.Exec(ctx, req, nil)
}
func (h home) Dir() string          { return h.b.cfg.HomeDir }
func (h home) Files() *agent.Client { return h.p.client }

func (b *Backend) secret(id string, c agent.Credentials) *corev1.Secret {
	immutable := true
	return &corev1.Secret{
		ObjectMeta: b.meta(id),
		Type:       corev1.SecretTypeOpaque,
		Immutable:  &immutable,
		Data:       map[string][]byte{agent.CertFile: c.CertPEM, agent.KeyFile: c.KeyPEM, agent.TokenFile: c.Token},
	}
}
