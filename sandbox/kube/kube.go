// Package kube runs sandboxes as Kubernetes pods: one pod per awake
// sandbox, under a gVisor RuntimeClass, with the Shellgate agent as the
// container's entrypoint listening on the pod network (agent's TLS + token
// mode: the pod network is not trusted).
//
// For sandbox id, Wake creates three objects, all labelled
// shellgate.dev/sandbox=<hash of id> and named shellgate-<hash>:
//
//   - a Secret with the agent's per-sandbox certificate, key and token
//     (agent.Credentials), and a copy of it under a name new with each
//     wake (shellgate-<hash>-<8 hex>, owned by the first), mounted
//     read-only into the pod: the kubelet keeps an immutable Secret it has
//     read while any pod on the node refers to it, so a name used again
//     could hand the new pod the last wake's credentials;
//   - a NetworkPolicy: ingress only from the gateway's pods to the agent
//     port; egress nothing, or with an allowlist only the egress proxy's
//     pods on its port (NetworkPolicy.go);
//   - the Pod (pod.go), then waits for it to be Ready, dials its agent and
//     restores the home through the Archiver.
//
// and then an empty Secret shellgate-<hash>-restored marking the home
// restored.
//
// Sleep archives the home through the Archiver and deletes the objects
// only once that succeeded (a failed archive keeps the pod, and the error
// is returned). Wake after Sleep makes a new pod. Destroy deletes without
// archiving.
//
// Any number of Backends (gateway replicas) share one namespace: Wake of a
// sandbox whose pod another Backend started adopts that pod (its Secret
// holds the agent's credentials), and of two Backends waking one sandbox
// at once the first to create its Secret starts the pod and the other
// adopts it. The agent serves every replica's connection at once, their
// commands one at a time in the order they reach it.
//
// Example:
//
//	b, _ := kube.New(clientset, kube.Config{Namespace: "shellgate", Image: "registry.example/shellgate-sandbox:1"})
//	_ = b.Wake(ctx, "ctr_1", kube.Options{})
//	out, _ := b.Exec(ctx, "ctr_1", agent.ExecRequest{Shell: []string{"bash", "-lc"}, Command: "ls", Dir: kube.HomeDir})
//	_ = b.Sleep(ctx, "ctr_1")
//
// # How it works
//
// A second backend beside `sandbox/runtime`. The server does not take
// `*sandbox.Manager` but `sandbox.Backend` (`sandbox/backend.go`: lifecycle,
// exec, the file operations, settings, Close; the warm pool's and the egress
// engine's metrics are optional interfaces), which the Manager satisfies
// unchanged and `kube.Sandboxes` implements on `kube.Backend`; `serve
// --config` with `runtime: {backend: kubernetes}` picks it
// (`cmd/shellgate/serveconfig.go`, which also takes `database:` and
// `storage:`, each below its flag and environment variable). `kube.Sandboxes`: Create records the
// name (the pod starts with the first command); Exec takes the sandbox's
// lock (commands of one sandbox run one at a time, as on the host), wakes
// with its settings (`sandbox.ResolveSettings`: limits, home size, network)
// and streams through the agent; a connection lost mid-command is a
// `Restarted` result and the pod is archived if it can be, else deleted;
// Destroy cuts a running command short (closing the pod's connection makes
// the agent kill it; the Exec returns `ErrDestroyed`, as on the host);
// Status and List come from this process's connections and, for pods it
// has none to, the API server (any replica's pods; see "Replicas" below); the file operations are agent requests (below);
// without an Archiver Sleep
// is refused the same way and nothing sleeps when idle (deleting the pod
// would lose the home). `Backend.Wake(id)` creates, all named
// `shellgate-<sha256(id)[:20 hex]>` and labelled `shellgate.dev/sandbox`:
// a Secret with `agent.NewCredentials()` (self-signed P-256 certificate, key,
// 32-byte token), a NetworkPolicy (`pod.go`), and the Pod whose entrypoint is
// `shellgate-agent -listen :7070 -credentials /run/shellgate/agent`. It polls
// the pod until Ready (failing at once on ImagePullBackOff, CrashLoopBackOff,
// Failed...), dials the agent with `agent.DialTCP` (TLS 1.3 pinned to that
// certificate, then the token as the first frame; the agent answers Ready only
// after it), and calls `Archiver.Restore`. Any failure deletes the three
// objects. `Sleep` calls `Archiver.Archive` while the pod runs and deletes the
// objects only if it succeeded. The agent serves every authenticated
// connection at once (`agent.ServeTLS`): their commands go through one queue
// and run one at a time in the order they arrived, so a call through one
// replica waits for another replica's running command instead of stopping
// it; file requests run beside them, each on its own. A connection that ends
// takes only its own work: its queued commands are dropped, its running
// command and resident process killed and reaped, its file requests
// canceled (an unfinished upload leaves no temporary file) before anything
// else of it could run. Each connection is told of the others (`agent.Peers`:
// how many, and whether one has a call in progress). The agent exits when
// the last connection ends; `restartPolicy: Always` restarts it with the
// same Secret, so a pod whose gateway died is adopted with its home by the
// next Wake (a dead gateway's half-open connection is found out by TCP
// keepalive within about half a minute, its command then killed).
//
// Replicas: every `kube.Backend` on one cluster serves every sandbox.
// `Wake(id)` first adopts: the pod named from the id, once Ready and marked
// restored (an empty Secret `shellgate-<hash>-restored`, created after
// `Archiver.Restore`; the gateway's role only creates and deletes, never
// patches), is dialled with the credentials from its Secret. Without a pod it
// creates the objects; the Secret create decides between racing replicas
// (AlreadyExists: adopt the winner's pod, polling until it is restored).
// Leftovers that never became a usable pod within ReadyTimeout are deleted.
// `Awake` means an open connection here (no API call while it stays open);
// one that ended is dropped and the next call adopts again. A connection
// that ends during a command whose pod is gone, being deleted or replaced
// (`Ended`: another replica's Sleep or Destroy) is answered `Restarted`
// saying so, touching nothing; else the pod is lost as before (archived if
// it can be, else its objects deleted, its archived home kept). A dial
// whose handshake was cut short (an agent exiting as its last connection
// ended) is made again up to five times. `Sleep` adopts first when needed,
// so any replica can archive and delete, and holds the pod while it
// archives (`agent.Client.Hold`: it waits for another replica's call in
// progress; then the agent refuses the others' commands and file requests
// without running them, `agent.ErrHeld`, until the pod is gone or the hold
// released; `Sandboxes` waits and makes them again in the pod it then
// wakes, but an upload, whose bytes went, is `sandbox.ErrBusy`; a request
// the connection never sent, `agent.ErrUnsent`, is made again too). Idle
// sleep counts the other replicas' calls as use (the agent's Peers: none
// in progress, the last one begun or ended IdleTimeout ago), and a
// replica shutting down leaves running the pods another replica is
// connected to. A sleeping sandbox has no pod: a replica that does not
// know a name with no pod asks `Archiver.Has` (kubehome: `Exists` of the manifest
// key); an archived name is remembered as if created there (Status
// sleeping; file calls, Sleep and Destroy proceed, file calls waking it),
// neither pod nor archive is `sandbox.ErrNotFound`. An archive whose
// `Delete` failed keeps the name sleeping until a Destroy succeeds. `kubetest` kills a deleted pod's agent, so other replicas'
// connections break as on a cluster. The credentials are readable by the sandbox's own commands (same
// uid); they authenticate that sandbox only, which its commands already
// control.
package kube

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
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
	AnnotationMount = "shellgate.dev/mount-secret"    // on the Secret: the name of the copy its pod mounts
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
	// Has reports whether id has an archived home, cheaply (no home is
	// read): how a gateway replica that never saw a sleeping sandbox
	// knows it exists. A home whose Delete failed is still archived.
	Has(ctx context.Context, id string) (bool, error)
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
	// CPURequest and MemoryRequest are what a pod asks the scheduler for,
	// each at most its limit (default 250m and 256Mi): a sandbox is idle
	// most of the time, and a request equal to its limit would let a
	// 2-core node hold one sandbox. A request equal to the limit
	// (`requests:` in the config file) makes the pods Guaranteed.
	CPURequest, MemoryRequest resource.Quantity
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

// awakePod is sandbox id's pod this backend has a connection to, or nil.
func (b *Backend) awakePod(id string) *pod {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.awake[id]
}

type pod struct {
	name   string
	client *agent.Client
	// uid is the pod's: a connection that ends while another pod (or
	// none) has the name went with its pod (Ended).
	uid string
}

// live tells whether p's connection is still open.
func (p *pod) live() bool {
	select {
	case <-p.client.Done():
		return false
	default:
		return true
	}
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
	if cfg.CPURequest.IsZero() {
		cfg.CPURequest = resource.MustParse(DefaultCPURequest)
	}
	if cfg.MemoryRequest.IsZero() {
		cfg.MemoryRequest = resource.MustParse(DefaultMemoryRequest)
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

// The default requests of a sandbox pod (Config.CPURequest, MemoryRequest).
const (
	DefaultCPURequest    = "250m"
	DefaultMemoryRequest = "256Mi"
)

// ObjectName is the name of sandbox id's Pod, Secret and NetworkPolicy:
// ids allow characters Kubernetes names do not, so the name is a hash.
func ObjectName(id string) string { return "shellgate-" + idHash(id) }

// mountName is the name of the copy of sandbox id's Secret that one wake's
// pod mounts: gen is new each wake, so no name is used twice.
func mountName(id, gen string) string { return ObjectName(id) + "-" + gen }

// RestoredName is the name of the empty Secret that marks sandbox id's pod
// as restored: made once the home is in the pod, it tells other replicas
// they may adopt the pod (their connection would cut a restore short).
// Marks are Secrets because the gateway's role creates and deletes its
// objects but never updates or patches them.
func RestoredName(id string) string { return ObjectName(id) + "-restored" }

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

// Wake connects this backend to sandbox id's pod: the pod another replica
// (or an earlier life of this gateway) started, once Ready with its home
// restored, with the credentials in its Secret; else a new pod, whose home
// it restores. Any number of replicas may wake one sandbox at once: the
// objects' names are the id's, so exactly one creates them (its Secret
// create succeeds) and the others adopt its pod. Leftovers that never
// became a usable pod within ReadyTimeout are deleted and replaced. Opts
// apply to a new pod only.
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
	if p := b.awake[id]; p != nil {
		if p.live() {
			b.mu.Unlock()
			return fmt.Errorf("%w: %s", ErrAwake, id)
		}
		delete(b.awake, id) // ended: look again
	}
	b.mu.Unlock()
	// Another replica may have the pod, or be starting it: the pod's name
	// is the id's, so of two replicas waking one sandbox at once one
	// creates the objects and the other meets AlreadyExists and adopts.
	for attempt := 0; ; attempt++ {
		p, err := b.adopt(ctx, id)
		if err == nil {
			b.keep(id, p)
			return nil
		}
		if !errors.Is(err, errNoPod) || attempt == 2 {
			return err
		}
		p, err = b.create(ctx, id, opts, lim, disk)
		switch {
		case errors.Is(err, errExists):
			continue
		case err != nil:
			return err
		}
		b.keep(id, p)
		return nil
	}
}

// keep records p as sandbox id's connection.
func (b *Backend) keep(id string, p *pod) {
	b.mu.Lock()
	if old := b.awake[id]; old != nil && old != p {
		old.client.Close()
	}
	b.awake[id] = p
	b.mu.Unlock()
}

// errNoPod: sandbox id has no pod (nor one being started) to adopt;
// errExists: another replica created its objects first.
var (
	errNoPod  = errors.New("kube: no pod to adopt")
	errExists = errors.New("kube: objects created by another replica")
)

// adopt connects to the pod another replica (or an earlier life of this
// gateway) started for id, waiting while it starts: until it is Ready with
// its home restored. errNoPod when there is none: no pod and no Secret, or
// leftovers older than ReadyTimeout that never became a usable pod, which
// it deletes.
func (b *Backend) adopt(ctx context.Context, id string) (*pod, error) {
	name := ObjectName(id)
	deadline := time.Now().Add(b.cfg.ReadyTimeout)
	t := time.NewTicker(b.cfg.PollInterval)
	defer t.Stop()
	last := ""
	for {
		kp, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			sec, err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, errNoPod
			}
			if err != nil {
				return nil, fmt.Errorf("kube: get secret %s: %w", name, err)
			}
			// Another replica's wake is between its Secret and its pod;
			// a Secret older than a whole wake is a leftover (else, the
			// deadline below says so).
			if created := sec.CreationTimestamp.Time; !created.IsZero() && time.Since(created) > b.cfg.ReadyTimeout {
				return nil, b.stale(ctx, id, "a secret without a pod")
			}
			last = "a secret, no pod yet"
		case err != nil:
			return nil, fmt.Errorf("kube: get pod %s: %w", name, err)
		case kp.DeletionTimestamp != nil:
			last = "being deleted"
		default:
			ready, why, stuck := podState(kp)
			if stuck {
				return nil, b.stale(ctx, id, why)
			}
			last = why
			if ready && kp.Status.PodIP != "" {
				_, err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Get(ctx, RestoredName(id), metav1.GetOptions{})
				switch {
				case err == nil:
					return b.attach(ctx, id, kp)
				case !apierrors.IsNotFound(err):
					return nil, fmt.Errorf("kube: get secret %s: %w", RestoredName(id), err)
				}
				last = "home not restored yet"
			}
		}
		if time.Now().After(deadline) {
			return nil, b.stale(ctx, id, last)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// stale deletes sandbox id's objects that never became a usable pod.
func (b *Backend) stale(ctx context.Context, id, why string) error {
	b.cfg.Logger.Warn("deleting a sandbox's objects that never became a usable pod", "sandbox", id, "state", why)
	if err := b.deleteObjects(ctx, id); err != nil {
		return err
	}
	return errNoPod
}

// attach dials the agent of kp, sandbox id's ready pod, with the
// credentials in its Secret.
func (b *Backend) attach(ctx context.Context, id string, kp *corev1.Pod) (*pod, error) {
	name := ObjectName(id)
	sec, err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("kube: credentials of pod %s: %w", name, err)
	}
	creds := agent.Credentials{CertPEM: sec.Data[agent.CertFile], KeyPEM: sec.Data[agent.KeyFile], Token: sec.Data[agent.TokenFile]}
	wctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	client, err := b.dialAgent(wctx, net.JoinHostPort(kp.Status.PodIP, strconv.Itoa(int(b.cfg.AgentPort))), creds)
	if err != nil {
		return nil, fmt.Errorf("kube: agent of pod %s: %w", name, err)
	}
	b.cfg.Logger.Info("sandbox pod adopted", "sandbox", id, "pod", name, "ip", kp.Status.PodIP)
	return &pod{name: name, client: client, uid: string(kp.UID)}, nil
}

// create makes sandbox id's objects, waits for the pod, restores its home
// and marks it restored. errExists when another replica's objects are
// there first.
func (b *Backend) create(ctx context.Context, id string, opts Options, lim runtime.Limits, disk int64) (p *pod, err error) {
	creds, err := agent.NewCredentials()
	if err != nil {
		return nil, err
	}
	proxy := ""
	if opts.Network.Enabled() {
		svc, err := b.cs.CoreV1().Services(b.cfg.Egress.Namespace).Get(ctx, b.cfg.Egress.Service, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("kube: egress proxy service %s/%s: %w", b.cfg.Egress.Namespace, b.cfg.Egress.Service, err)
		}
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return nil, fmt.Errorf("kube: egress proxy service %s/%s has no cluster IP", b.cfg.Egress.Namespace, b.cfg.Egress.Service)
		}
		proxy = "http://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(b.cfg.Egress.Port)))
	}
	// The Secret decides which replica starts the pod: the first to
	// create it. The pod mounts a copy under a name of its own (mountName):
	// the kubelet keeps an immutable Secret it has read for as long as a
	// pod on the node refers to it, so a pod started while the last wake's
	// pod was still going away got the last wake's credentials when both
	// used one name (seen on a real cluster).
	gen := make([]byte, 4)
	crand.Read(gen)
	lock := b.secret(id, creds)
	lock.Annotations[AnnotationMount] = mountName(id, hex.EncodeToString(gen))
	made, err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Create(ctx, lock, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, errExists
		}
		return nil, fmt.Errorf("kube: create secret %s: %w", ObjectName(id), err)
	}
	defer func() {
		if err != nil && !errors.Is(err, errExists) {
			// A cancelled ctx must not leave a pod running.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if derr := b.deleteObjects(cctx, id); derr != nil {
				err = errors.Join(err, fmt.Errorf("kube: cleanup of %s: %w", ObjectName(id), derr))
			}
		}
	}()
	// A restored mark or network policy left by a replica that died
	// mid-sleep is not this pod's: deleted first (the gateway may not
	// update objects, only create and delete them).
	grace := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Delete(ctx, RestoredName(id), del); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("kube: delete secret %s: %w", RestoredName(id), err)
	}
	mount := b.secret(id, creds)
	mount.Name = lock.Annotations[AnnotationMount]
	if made.UID != "" { // a real API server's: the copy goes with the Secret
		mount.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: made.Name, UID: made.UID}}
	}
	if _, err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Create(ctx, mount, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("kube: create secret %s: %w", mount.Name, err)
	}
	np := b.NetworkPolicy(id, opts.Network)
	_, err = b.cs.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Create(ctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if err = b.cs.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Delete(ctx, np.Name, del); err == nil || apierrors.IsNotFound(err) {
			_, err = b.cs.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Create(ctx, np, metav1.CreateOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kube: create network policy %s: %w", ObjectName(id), err)
	}
	kp, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Create(ctx, b.pod(id, mount.Name, lim, disk, opts.Network, proxy), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A pod left without its Secret (a replica died mid-sleep): its
		// credentials are gone, so it is deleted with ours and the wake
		// starts over.
		if derr := b.deleteObjects(ctx, id); derr != nil {
			return nil, derr
		}
		return nil, errExists
	}
	if err != nil {
		return nil, fmt.Errorf("kube: create pod %s: %w", ObjectName(id), err)
	}
	wctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	ip, err := b.waitReady(wctx, id)
	if err != nil {
		return nil, err
	}
	client, err := b.dialAgent(wctx, net.JoinHostPort(ip, strconv.Itoa(int(b.cfg.AgentPort))), creds)
	if err != nil {
		return nil, fmt.Errorf("kube: agent of pod %s: %w", ObjectName(id), err)
	}
	p = &pod{name: ObjectName(id), client: client, uid: string(kp.UID)}
	if b.cfg.Archiver != nil {
		if err := b.cfg.Archiver.Restore(ctx, id, home{b, p}); err != nil {
			client.Close()
			return nil, fmt.Errorf("kube: restore home of %s: %w", id, err)
		}
	}
	mark := &corev1.Secret{ObjectMeta: b.meta(id), Type: corev1.SecretTypeOpaque}
	mark.Name = RestoredName(id)
	if _, err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Create(ctx, mark, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		client.Close()
		return nil, fmt.Errorf("kube: mark pod %s restored: %w", p.name, err)
	}
	b.cfg.Logger.Info("sandbox pod awake", "sandbox", id, "pod", p.name, "ip", ip)
	return p, nil
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

// dialAgent retries until the agent listens (Ready means the container
// started, not that the agent's socket is open yet) and, a few times, a
// handshake cut short: the agent exits when the last host it serves
// leaves, and the pod starts it again.
func (b *Backend) dialAgent(ctx context.Context, addr string, c agent.Credentials) (*agent.Client, error) {
	for cuts := 0; ; {
		client, err := b.cfg.Dial(ctx, addr, c)
		if err == nil {
			return client, nil
		}
		var ne *net.OpError
		switch {
		case errors.As(err, &ne) && ne.Op == "dial":
			// not listening yet: wait for it
		case cutShort(err) && cuts < maxHandshakeCuts:
			cuts++
		default:
			return nil, err // reached something that refused us: no retry
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(b.cfg.PollInterval):
		}
	}
}

// maxHandshakeCuts is how many times a connection to an agent that ended
// during its handshake is made again: enough for an agent exiting as this
// one connects, not so many that an agent refusing the credentials (it
// closes the connection too) is retried for long.
const maxHandshakeCuts = 5

// cutShort tells whether err ended a connection that the peer closed.
func cutShort(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// Exec runs one command in sandbox id's pod.
func (b *Backend) Exec(ctx context.Context, id string, req agent.ExecRequest, onOutput agent.OutputFunc) (agent.Output, error) {
	p := b.awakePod(id)
	if p == nil {
		return agent.Output{}, fmt.Errorf("%w: %s", ErrNotAwake, id)
	}
	return p.client.Exec(ctx, req, onOutput)
}

// Agent is the agent connection of sandbox id's pod.
func (b *Backend) Agent(id string) (*agent.Client, error) {
	p := b.awakePod(id)
	if p == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotAwake, id)
	}
	return p.client, nil
}

// Awake tells whether this backend has an open connection to sandbox
// id's pod: it started or adopted the pod, and no other replica took the
// agent over since.
func (b *Backend) Awake(id string) bool {
	p := b.awakePod(id)
	return p != nil && p.live()
}

// HasPod asks the API server whether sandbox id has a pod that is not
// being deleted (started by any replica): one GET.
func (b *Backend) HasPod(ctx context.Context, id string) (bool, error) {
	kp, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Get(ctx, ObjectName(id), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("kube: get pod %s: %w", ObjectName(id), err)
	}
	return kp.DeletionTimestamp == nil, nil
}

// Pods lists the sandbox ids that have a pod not being deleted, whichever
// replica started it: one LIST.
func (b *Backend) Pods(ctx context.Context) ([]string, error) {
	l, err := b.cs.CoreV1().Pods(b.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelName + "=" + SandboxApp + "," + LabelManagedBy + "=" + ManagedBy})
	if err != nil {
		return nil, fmt.Errorf("kube: list pods: %w", err)
	}
	var ids []string
	for _, kp := range l.Items {
		if id := kp.Annotations[AnnotationID]; kp.DeletionTimestamp == nil && checkID(id) == nil && kp.Name == ObjectName(id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Ended forgets sandbox id's connection after it ended during a call and
// tells whether its pod went with it by another replica's hand: the pod
// is replaced by another, or gone or being deleted with its restored mark
// deleted first (a Sleep or Destroy through that replica), rather than
// lost (its agent died in a pod still there, or the pod was deleted by
// someone else: an eviction, kubectl). The agent serves every replica at once, so a
// connection never ends because another replica connected.
func (b *Backend) Ended(ctx context.Context, id string) bool {
	p := b.awakePod(id)
	if p != nil && p.live() {
		// The caller saw the connection end; its reader may not have
		// finished closing it yet.
		select {
		case <-p.client.Done():
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	b.mu.Lock()
	if p != nil && !p.live() && b.awake[id] == p {
		delete(b.awake, id)
	}
	b.mu.Unlock()
	if p == nil || p.live() {
		return false
	}
	kp, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Get(ctx, ObjectName(id), metav1.GetOptions{})
	switch {
	case err == nil && string(kp.UID) != p.uid:
		return true // another replica woke it again since
	case err == nil && kp.DeletionTimestamp == nil, err != nil && !apierrors.IsNotFound(err):
		return false
	}
	// The pod is going or gone: by a replica's Sleep or Destroy when its
	// restored mark went first (deleteObjects), else by someone else (an
	// eviction, kubectl delete), which is a lost pod.
	_, err = b.cs.CoreV1().Secrets(b.cfg.Namespace).Get(ctx, RestoredName(id), metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// Sleep archives sandbox id's home and then deletes its pod, whichever
// replica started it (Sleep adopts it first). It holds the pod first
// (agent.Client.Hold): it waits for another replica's call in progress, and
// the agent then refuses another replica's calls without running them
// until the pod is deleted. When the archive fails the pod is kept (still
// awake, the hold released) and the error matches ErrArchive: deleting it
// would lose the files.
func (b *Backend) Sleep(ctx context.Context, id string) error {
	release, err := b.claim(id)
	if err != nil {
		return err
	}
	defer release()
	p := b.awakePod(id)
	if p == nil || !p.live() {
		// Started by another replica, or our connection ended: the
		// archive goes through a connection of our own.
		var err error
		if p, err = b.adopt(ctx, id); errors.Is(err, errNoPod) {
			return fmt.Errorf("%w: %s", ErrNotAwake, id)
		} else if err != nil {
			return err
		}
		b.keep(id, p)
	}
	// Held, the pod runs nothing of another replica's until it is
	// deleted (or, when the archive fails, this connection is closed).
	if err := p.client.Hold(ctx); err != nil {
		p.client.Release() // a hold answered late ends too
		return fmt.Errorf("kube: sleep %s: %w", id, err)
	}
	if b.cfg.Archiver != nil {
		if err := b.cfg.Archiver.Archive(ctx, id, home{b, p}); err != nil {
			p.client.Release()
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
	return b.remove(ctx, id, true)
}

// remove disconnects from sandbox id's pod and deletes its objects, and
// its archived home too when home is set.
func (b *Backend) remove(ctx context.Context, id string, home bool) error {
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
	if home && b.cfg.Archiver != nil {
		if err := b.cfg.Archiver.Delete(ctx, id); err != nil {
			return fmt.Errorf("kube: destroy %s: archived home: %w", id, err)
		}
	}
	return nil
}

// deleteObjects deletes sandbox id's restored mark, pod, network policy
// and secret;
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
		// The restored mark first: once it is gone no replica adopts.
		{"secret", func() error { return b.cs.CoreV1().Secrets(b.cfg.Namespace).Delete(ctx, RestoredName(id), del) }},
		{"pod", func() error { return b.cs.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, name, del) }},
		{"network policy", func() error {
			return b.cs.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Delete(ctx, name, del)
		}},
		{"secret", func() error { // the pod's copy, named in the Secret
			sec, err := b.cs.CoreV1().Secrets(b.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil || sec.Annotations[AnnotationMount] == "" {
				return err
			}
			return b.cs.CoreV1().Secrets(b.cfg.Namespace).Delete(ctx, sec.Annotations[AnnotationMount], del)
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
