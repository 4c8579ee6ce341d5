// Package sandbox manages Shellgate's sandboxes: which sandbox a name
// means, and its lifecycle (create, exec, sleep, wake, destroy), on top of
// an OCI runtime (package runtime), a root filesystem image (package image),
// a disk-capped home (package home) and the in-sandbox agent (package
// agent).
//
// A sandbox is named by its caller (the gateway uses container ids). Awake,
// it is a running container; asleep, it is only its home image on disk. Any
// Exec on a sleeping or new sandbox wakes it: a fresh container over the
// same home. New sandboxes are taken from a warm pool when one is
// configured.
//
// Layout under the data directory:
//
//	images/NAME/rootfs           shared read-only root filesystems
//	homes/NAME.img, NAME.lock    each sandbox's home (sparse ext4) and its owner lock
//	homes/.pool/CID.img          homes of pooled sandboxes not yet named
//	run/sandboxes/CID/           a running container: bundle, mounts, owner lock
//	run/runtime/RUNTIME/         the OCI runtime's own state
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/home"
	"github.com/shellgate/shellgate/sandbox/image"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// Config configures a Manager. Zero fields take the defaults.
type Config struct {
	DataDir string
	// Runtime is "runsc", "crun" or "runc"; empty picks the strongest one
	// that works here.
	Runtime string
	// Image names the root filesystem; default "default".
	Image string
	// Images is the image store's directory; default DATA/images.
	Images string
	// Agent is the static shellgate-agent binary; empty finds it next to
	// the executable.
	Agent  string
	Limits runtime.Limits
	// HomeBytes caps /workspace/home; default 5 GiB.
	HomeBytes int64
	// LayerBytes caps the writable layer over the image (thrown away at
	// sleep); default 1 GiB.
	LayerBytes int64
	// PoolSize is the number of started sandboxes kept ready for new
	// names; 0 disables the pool.
	PoolSize int
	// IdleTimeout puts a sandbox to sleep after this long without a
	// command; default 5 minutes, negative never.
	IdleTimeout time.Duration
	Logger      *slog.Logger
	// SharedHostUser runs every sandbox without a user namespace of its
	// own, as host uid 1000 shared by all (the engine before per-sandbox
	// namespaces). Weaker isolation: it exists to measure what the
	// namespace costs; no command-line flag sets it.
	SharedHostUser bool
}

// Status of a named sandbox.
type Status string

const (
	Running  Status = "running"
	Sleeping Status = "sleeping"
)

var (
	// ErrNotFound: no sandbox of that name exists.
	ErrNotFound = errors.New("sandbox not found")
	// ErrBusy: another Shellgate process holds the sandbox awake.
	ErrBusy = errors.New("sandbox is in use by another shellgate process")
	// ErrBadName: the name is not 1–40 letters, digits, '_' or '-'.
	ErrBadName = errors.New("sandbox name must be 1-40 characters of letters, digits, '_' and '-'")
	// ErrClosed: the manager was closed.
	ErrClosed = errors.New("sandbox manager is closed")
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

// ValidName reports whether name can name a sandbox.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Manager runs the sandboxes of one data directory. Several processes may
// share a data directory: a sandbox is awake in at most one of them.
type Manager struct {
	cfg    Config
	rt     runtime.Runtime
	img    *image.Image
	imgErr error
	log    *slog.Logger
	dirs   dirs
	agent  string
	// agentSum names this agent build in the agent tmpfs.
	agentSum string
	// hostIDs are ids of host accounts that no sandbox's range may cover.
	hostIDs hostIDs

	mu     sync.Mutex
	boxes  map[string]*box
	closed bool

	pool     chan *instance
	stop     chan struct{}
	bg       sync.WaitGroup
	poolFail chan error
}

type dirs struct{ homes, pool, run, runtimeState string }

// box is one named sandbox known to this process.
type box struct {
	name string
	mu   sync.Mutex // held by every lifecycle step and command
	inst *instance  // nil while asleep
	// lockRelease releases the home's owner lock, held while awake.
	lockRelease func()
	lastUsed    time.Time
}

// Open prepares the data directory, removes what a crashed Shellgate left
// (containers, mounts, half-made pool homes; never a named home), and
// starts the warm pool.
func Open(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("sandbox: no data directory")
	}
	if cfg.Image == "" {
		cfg.Image = "default"
	}
	if cfg.Limits == (runtime.Limits{}) {
		cfg.Limits = runtime.DefaultLimits()
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox limits: %w", err)
	}
	if cfg.HomeBytes == 0 {
		cfg.HomeBytes = 5 << 30
	}
	if cfg.LayerBytes == 0 {
		cfg.LayerBytes = 1 << 30
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	data, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:   cfg,
		log:   cfg.Logger,
		boxes: map[string]*box{},
		stop:  make(chan struct{}),
		dirs: dirs{
			homes:        filepath.Join(data, "homes"),
			pool:         filepath.Join(data, "homes", ".pool"),
			run:          filepath.Join(data, "run", "sandboxes"),
			runtimeState: filepath.Join(data, "run", "runtime"),
		},
	}
	for _, d := range []string{m.dirs.homes, m.dirs.pool, m.dirs.run, m.dirs.runtimeState} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := m.prepareUserNS(); err != nil {
		return nil, err
	}
	if cfg.Runtime == "" {
		rt, why, err := runtime.Best(ctx, m.dirs.runtimeState)
		if err != nil {
			return nil, err
		}
		for _, w := range why {
			m.log.Info("runtime passed over", "reason", w)
		}
		m.rt = rt
	} else {
		rt, err := runtime.New(cfg.Runtime, m.dirs.runtimeState)
		if err != nil {
			return nil, err
		}
		if err := rt.Check(ctx); err != nil {
			return nil, fmt.Errorf("runtime %s does not work here: %w", cfg.Runtime, err)
		}
		m.rt = rt
	}
	if cfg.Images == "" {
		cfg.Images = filepath.Join(data, "images")
	}
	store, err := image.Open(cfg.Images)
	if err != nil {
		return nil, err
	}
	// A missing image is reported when a sandbox must start, so that
	// listing and removing sandboxes works without one.
	m.img, m.imgErr = store.Get(cfg.Image)
	if m.agent = cfg.Agent; m.agent == "" {
		if m.agent, err = agentbin.Find(); err != nil {
			return nil, err
		}
	}
	if m.agentSum, err = hashAgent(m.agent); err != nil {
		return nil, err
	}
	if err := m.cleanOrphans(ctx); err != nil {
		return nil, fmt.Errorf("clean up after a previous run: %w", err)
	}
	if cfg.PoolSize > 0 {
		m.pool = make(chan *instance, cfg.PoolSize)
		m.poolFail = make(chan error, 1)
		m.bg.Add(1)
		go m.fillPool()
	}
	if cfg.IdleTimeout > 0 {
		m.bg.Add(1)
		go m.sleepIdle()
	}
	return m, nil
}

// Runtime is the name of the OCI runtime in use.
func (m *Manager) Runtime() string { return m.rt.Name() }

// Image is the root filesystem sandboxes start from, or the error that
// says why it is missing.
func (m *Manager) Image() (*image.Image, error) { return m.img, m.imgErr }

// Command is one command to run in a sandbox.
type Command struct {
	Command   string
	TimeoutMs int64
	// MaxBytes is kept per stream; the rest is counted and dropped.
	MaxBytes int
	// OnOutput, if set, sees output as it is produced.
	OnOutput agent.OutputFunc
}

// Result is one command's output and outcome.
type Result struct {
	Stdout, Stderr           []byte
	StdoutBytes, StderrBytes int64 // everything written, kept or not
	ExitCode                 int
	TimedOut                 bool
	// OOMKilled is set when the kernel's out-of-memory killer ended the
	// command at the sandbox's memory limit (crun, runc; under gVisor the
	// whole sandbox stops instead, see Restarted).
	OOMKilled bool
	// Restarted is set when the sandbox itself died during the command
	// (for example gVisor ends the whole sandbox when its memory limit is
	// hit). The home is intact; the next command runs in a fresh sandbox.
	Restarted bool
}

// hostGrace is how long past a command's own timeout the host waits for the
// agent before it gives up on the sandbox.
const hostGrace = 10 * time.Second

// Exec runs one command in the named sandbox, waking or creating it first.
func (m *Manager) Exec(ctx context.Context, name string, cmd Command) (Result, error) {
	b, err := m.box(name)
	if err != nil {
		return Result{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := m.wakeLocked(ctx, b); err != nil {
		return Result{}, err
	}
	b.lastUsed = time.Now()
	defer func() { b.lastUsed = time.Now() }()

	hostCtx, cancel := ctx, context.CancelFunc(func() {})
	if cmd.TimeoutMs > 0 {
		hostCtx, cancel = context.WithTimeout(ctx, time.Duration(cmd.TimeoutMs)*time.Millisecond+hostGrace)
	}
	defer cancel()
	out, err := b.inst.client.Exec(hostCtx, agent.ExecRequest{
		Shell:     m.img.Shell,
		Command:   cmd.Command,
		Dir:       runtime.HomeDir,
		TimeoutMs: cmd.TimeoutMs,
		MaxBytes:  cmd.MaxBytes,
	}, cmd.OnOutput)
	switch {
	case err == nil:
	case errors.Is(err, agent.ErrClosed):
		// The sandbox died under the command. Report it as the command's
		// result; the next command wakes a fresh sandbox.
		m.log.Warn("sandbox died during a command", "sandbox", name, "container", b.inst.cid)
		m.sleepLocked(context.WithoutCancel(ctx), b)
		return Result{ExitCode: 137, Restarted: true, Stderr: []byte("shellgate: the sandbox was stopped during this command (memory limit exceeded?); files in /workspace/home are kept and the next command runs in a fresh sandbox\n")}, nil
	case ctx.Err() == nil && hostCtx.Err() != nil:
		// The agent did not end the command in time: give up on this
		// sandbox rather than on the caller.
		m.log.Warn("agent missed a command timeout", "sandbox", name, "container", b.inst.cid)
		m.sleepLocked(context.WithoutCancel(ctx), b)
		return Result{ExitCode: -1, TimedOut: true, Restarted: true}, nil
	default:
		return Result{}, err
	}
	if out.Error != "" {
		out.Stderr = append(out.Stderr, []byte("shellgate: "+out.Error+"\n")...)
	}
	res := Result{
		Stdout: out.Stdout, Stderr: out.Stderr,
		StdoutBytes: out.StdoutBytes, StderrBytes: out.StderrBytes,
		ExitCode: out.ExitCode, TimedOut: out.TimedOut,
	}
	if out.Signal == 9 && !out.TimedOut && b.inst.newOOMKill() {
		res.OOMKilled = true
		res.Stderr = append(res.Stderr, fmt.Sprintf("shellgate: killed by the out-of-memory killer: the sandbox's memory limit is %d MiB\n", m.cfg.Limits.MemoryBytes>>20)...)
	}
	return res, nil
}

// Create makes the named sandbox exist and be awake (a no-op when it is).
func (m *Manager) Create(ctx context.Context, name string) error {
	return m.withBox(name, func(b *box) error { return m.wakeLocked(ctx, b) })
}

// Sleep stops the named sandbox's processes and drops its writable layer;
// its home stays. Sleeping a sleeping sandbox is a no-op.
func (m *Manager) Sleep(ctx context.Context, name string) error {
	return m.withBox(name, func(b *box) error { return m.sleepLocked(ctx, b) })
}

// Destroy stops the named sandbox and deletes its home.
func (m *Manager) Destroy(ctx context.Context, name string) error {
	return m.withBox(name, func(b *box) error { return m.destroyLocked(ctx, b) })
}

func (m *Manager) destroyLocked(ctx context.Context, b *box) error {
	name := b.name
	if err := m.sleepLocked(ctx, b); err != nil {
		return err
	}
	unlock, err := m.lockHome(name)
	if err != nil {
		return err
	}
	defer unlock()
	err = os.Remove(m.homePath(name))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	m.mu.Lock()
	delete(m.boxes, name)
	m.mu.Unlock()
	return err
}

// Status tells whether the named sandbox is awake (in this process) or
// asleep; ErrNotFound when it has no home.
func (m *Manager) Status(name string) (Status, error) {
	if !ValidName(name) {
		return "", ErrBadName
	}
	m.mu.Lock()
	b := m.boxes[name]
	m.mu.Unlock()
	if b != nil {
		b.mu.Lock()
		awake := b.inst != nil
		b.mu.Unlock()
		if awake {
			return Running, nil
		}
	}
	if _, err := os.Stat(m.homePath(name)); err != nil {
		return "", fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return Sleeping, nil
}

// Info describes one sandbox of the data directory.
type Info struct {
	Name   string
	Status Status
	// DiskBytes is what the home takes on the host's disk (the image is
	// sparse); QuotaBytes is its size, the most it can hold.
	DiskBytes, QuotaBytes int64
	// LastUsed is when its home was last written.
	LastUsed time.Time
}

// List returns every sandbox with a home in the data directory, by name.
func (m *Manager) List() ([]Info, error) {
	entries, err := os.ReadDir(m.dirs.homes)
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".img")
		if !ok || !ValidName(name) || !e.Type().IsRegular() {
			continue
		}
		st, err := m.Status(name)
		if err != nil {
			continue // destroyed meanwhile
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		inf := Info{Name: name, Status: st, QuotaBytes: fi.Size(), LastUsed: fi.ModTime()}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			inf.DiskBytes = sys.Blocks * 512
		}
		out = append(out, inf)
	}
	return out, nil
}

// Close puts every awake sandbox to sleep and empties the pool.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	boxes := make([]*box, 0, len(m.boxes))
	for _, b := range m.boxes {
		boxes = append(boxes, b)
	}
	m.mu.Unlock()
	close(m.stop)
	m.bg.Wait()
	var errs []error
	for _, b := range boxes {
		b.mu.Lock()
		errs = append(errs, m.sleepLocked(ctx, b))
		b.mu.Unlock()
	}
	if m.pool != nil {
		for {
			select {
			case inst := <-m.pool:
				errs = append(errs, m.stopInstance(ctx, inst), os.Remove(inst.home))
				continue
			default:
			}
			break
		}
	}
	errs = append(errs, m.dropRuntimeMounts(ctx), m.dropAgentTmpfs())
	return errors.Join(errs...)
}

// withBox runs fn holding the named sandbox's lock.
func (m *Manager) withBox(name string, fn func(*box) error) error {
	b, err := m.box(name)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return fn(b)
}

func (m *Manager) box(name string) (*box, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("%w: %q", ErrBadName, name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	b := m.boxes[name]
	if b == nil {
		b = &box{name: name}
		m.boxes[name] = b
	}
	return b, nil
}

func (m *Manager) homePath(name string) string { return filepath.Join(m.dirs.homes, name+".img") }

// wakeLocked starts the box's container if it is asleep. A new name takes a
// pooled sandbox when there is one.
func (m *Manager) wakeLocked(ctx context.Context, b *box) error {
	if b.inst != nil {
		select {
		case <-b.inst.client.Done():
			// Died while idle (killed from outside): start afresh.
			m.sleepLocked(ctx, b)
		default:
			return nil
		}
	}
	if m.img == nil {
		return m.imgErr
	}
	unlock, err := m.lockHome(b.name)
	if err != nil {
		return err
	}
	home := m.homePath(b.name)
	_, statErr := os.Stat(home)
	var inst *instance
	if errors.Is(statErr, os.ErrNotExist) {
		if inst = m.fromPool(); inst != nil {
			if err := os.Rename(inst.home, home); err != nil {
				m.stopInstance(ctx, inst)
				unlock()
				return err
			}
			inst.home = home
		} else if err := m.newHome(home); err != nil {
			unlock()
			return err
		}
	}
	if inst == nil {
		if inst, err = m.startInstance(ctx, newID(), home); err != nil {
			unlock()
			return err
		}
	}
	b.inst, b.lockRelease = inst, unlock
	m.log.Debug("sandbox awake", "sandbox", b.name, "container", inst.cid)
	return nil
}

func (m *Manager) newHome(path string) error {
	return home.Create(path, m.cfg.HomeBytes, runtime.UID, runtime.GID)
}

func (m *Manager) sleepLocked(ctx context.Context, b *box) error {
	if b.inst == nil {
		return nil
	}
	err := m.stopInstance(ctx, b.inst)
	b.inst = nil
	if b.lockRelease != nil {
		b.lockRelease()
		b.lockRelease = nil
	}
	m.log.Debug("sandbox asleep", "sandbox", b.name)
	return err
}

// sleepIdle puts sandboxes to sleep once idle for IdleTimeout.
func (m *Manager) sleepIdle() {
	defer m.bg.Done()
	every := min(m.cfg.IdleTimeout/4, 30*time.Second)
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.Lock()
		boxes := make([]*box, 0, len(m.boxes))
		for _, b := range m.boxes {
			boxes = append(boxes, b)
		}
		m.mu.Unlock()
		for _, b := range boxes {
			if !b.mu.TryLock() {
				continue // a command is running: not idle
			}
			if b.inst != nil && time.Since(b.lastUsed) >= m.cfg.IdleTimeout {
				if err := m.sleepLocked(context.Background(), b); err != nil {
					m.log.Warn("idle sleep", "sandbox", b.name, "err", err)
				}
			}
			b.mu.Unlock()
		}
	}
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return "sg-" + hex.EncodeToString(b[:])
}
