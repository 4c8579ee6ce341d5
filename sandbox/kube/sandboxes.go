package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent"
)

// Sandboxes is sandbox.Backend on a Backend: what `shellgate serve` runs
// its containers on when the config file selects Kubernetes.
//
//   - Create records the name; the pod is made by the first command
//     (Exec wakes a sandbox that has no pod), so creating a container
//     costs no pod start.
//   - Exec runs one command over the pod's authenticated agent connection,
//     output streamed as it comes; commands of one sandbox run one at a
//     time, as on this machine.
//   - Sleep archives the home and deletes the pod (Backend.Sleep); idle
//     sandboxes are put to sleep after IdleTimeout. Without an Archiver a
//     pod's home cannot outlive it, so Sleep is refused (ErrNotSupported)
//     and nothing sleeps when idle: pods live until Destroy.
//   - Destroy deletes the pod and its objects.
//   - The file operations (list, stat, read, write, remove, upload) are
//     requests to the pod's agent, which does them beneath the home as
//     the commands' user (see files.go); they wake a sleeping sandbox.
//
// Any number of Sandboxes (gateway replicas) on one cluster serve the same
// sandboxes: a sandbox with a pod is known from the API server, whichever
// replica started it, and its pod adopted on the first call here (see
// Backend.Wake). A sleeping sandbox has nothing in the cluster: its home is
// in the Archiver, which is how a replica that never saw it (or restarted
// since) knows it exists (Archiver.Has, once per name: a name found there
// is remembered as if created here). Status, file calls, Sleep and
// Destroy then treat it as the replica that put it to sleep does. List
// answers the sandboxes this process knows and those with a pod, not the
// whole archive: the server's container store is the record of which
// containers exist.
// Calls on one sandbox run one at a time in this process; across replicas
// the pod's agent serves every replica's connection at once and runs
// their commands one at a time in the order they reach it, so a command
// sent here while another replica's runs waits for it. Idle sleep counts
// the other replicas' calls (agent.Peers) as use, Sleep holds the pod
// (waiting for one in progress; others' calls meanwhile wait and then run
// in the pod they wake, as on this machine), and Close leaves running the
// pods another replica is connected to. A command whose pod another
// replica destroyed meanwhile is answered Restarted.
type Sandboxes struct {
	b   *Backend
	cfg SandboxesConfig
	log *slog.Logger

	settingsFn atomic.Pointer[sandbox.SettingsFunc]

	mu      sync.Mutex
	known   map[string]*entry
	closed  bool
	stop    chan struct{}
	bg      sync.WaitGroup
	inCalls sync.WaitGroup
}

// SandboxesConfig configures Sandboxes. Zero fields take the defaults.
type SandboxesConfig struct {
	// Shell runs a command line when the command is appended; default
	// /bin/bash -lc (the sandbox image's shell).
	Shell []string
	// IdleTimeout puts a sandbox to sleep after this long without a
	// command (only with an Archiver); default 5 minutes, negative never.
	IdleTimeout time.Duration
}

// entry is one known sandbox: lock serializes its calls (a buffered
// channel, so waiting for it follows a context).
type entry struct {
	lock chan struct{}
	// lastUsed is when a command last ran or ended (UnixNano).
	lastUsed atomic.Int64
	// destroying is set by Destroy: calls holding or waiting for the
	// lock end with sandbox.ErrDestroyed.
	destroying atomic.Bool
}

// NewSandboxes serves sandbox.Backend from b.
func NewSandboxes(b *Backend, cfg SandboxesConfig) *Sandboxes {
	if len(cfg.Shell) == 0 {
		cfg.Shell = []string{"/bin/bash", "-lc"}
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	s := &Sandboxes{b: b, cfg: cfg, log: b.cfg.Logger, known: map[string]*entry{}, stop: make(chan struct{})}
	if cfg.IdleTimeout > 0 && b.cfg.Archiver != nil {
		s.bg.Add(1)
		go s.sleepIdle()
	}
	return s
}

var _ sandbox.Backend = (*Sandboxes)(nil)

// errNoArchive: sleeping a pod would lose its home, as nothing keeps it.
var errNoArchive = fmt.Errorf("kube: sleep needs a home archive (none is configured, so a pod's home would be lost): %w", sandbox.ErrNotSupported)

// Runtime is "kubernetes/" and the pods' RuntimeClass.
func (s *Sandboxes) Runtime() string {
	if s.b.cfg.RuntimeClass == "-" {
		return "kubernetes"
	}
	return "kubernetes/" + s.b.cfg.RuntimeClass
}

// Defaults are the Backend's limits and home size.
func (s *Sandboxes) Defaults() sandbox.Settings {
	return sandbox.Settings{Limits: s.b.cfg.Limits, HomeBytes: s.b.cfg.DiskBytes}
}

// SetSettings makes f the source of each sandbox's settings at its next
// wake; nil goes back to the defaults.
func (s *Sandboxes) SetSettings(f sandbox.SettingsFunc) {
	if f == nil {
		s.settingsFn.Store(nil)
		return
	}
	s.settingsFn.Store(&f)
}

// begin counts a call in flight; it fails once Close began.
func (s *Sandboxes) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return sandbox.ErrClosed
	}
	s.inCalls.Add(1)
	return nil
}

// hold locks the named sandbox's entry, making it known when create is
// set; without create an unknown name is sandbox.ErrNotFound.
func (s *Sandboxes) hold(ctx context.Context, name string, create bool) (*entry, func(), error) {
	if !sandbox.ValidName(name) {
		return nil, nil, fmt.Errorf("%w: %q", sandbox.ErrBadName, name)
	}
	if err := s.begin(); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	e := s.known[name]
	s.mu.Unlock()
	if e == nil && !create {
		// Another replica's sandbox is known by its pod, or asleep by
		// its archived home.
		has, err := s.exists(ctx, name)
		if err != nil || !has {
			s.inCalls.Done()
			if err != nil {
				return nil, nil, err
			}
			return nil, nil, fmt.Errorf("%w: %s", sandbox.ErrNotFound, name)
		}
	}
	e = s.remember(name, time.Now().UnixNano())
	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		s.inCalls.Done()
		return nil, nil, ctx.Err()
	}
	release := func() { <-e.lock; s.inCalls.Done() }
	if e.destroying.Load() {
		release()
		return nil, nil, sandbox.ErrDestroyed
	}
	return e, release, nil
}

// remember makes name known here, last used at used (UnixNano; 0 for
// unknown) unless it was known.
func (s *Sandboxes) remember(name string, used int64) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.known[name]
	if e == nil {
		e = &entry{lock: make(chan struct{}, 1)}
		e.lastUsed.Store(used)
		s.known[name] = e
	}
	return e
}

// exists reports whether the named sandbox, unknown here, exists in the
// cluster: it has a pod (awake on any replica) or an archived home
// (asleep).
func (s *Sandboxes) exists(ctx context.Context, name string) (bool, error) {
	has, err := s.b.HasPod(ctx, name)
	if err != nil || has {
		return has, err
	}
	return s.archived(ctx, name)
}

// archived reports whether the Archiver holds the named sandbox's home.
func (s *Sandboxes) archived(ctx context.Context, name string) (bool, error) {
	if s.b.cfg.Archiver == nil {
		return false, nil
	}
	has, err := s.b.cfg.Archiver.Has(ctx, name)
	if err != nil {
		return false, fmt.Errorf("kube: sandbox %s: looking for its archived home: %w", name, err)
	}
	return has, nil
}

// Create records the named sandbox; its pod starts with its first command.
func (s *Sandboxes) Create(ctx context.Context, name string) error {
	e, release, err := s.hold(ctx, name, true)
	if err != nil {
		return err
	}
	e.lastUsed.Store(time.Now().UnixNano())
	release()
	return nil
}

// wake starts the named sandbox's pod with its settings, unless it has one.
func (s *Sandboxes) wake(ctx context.Context, name string) error {
	if s.b.Awake(name) {
		return nil
	}
	var f sandbox.SettingsFunc
	if p := s.settingsFn.Load(); p != nil {
		f = *p
	}
	st, err := sandbox.ResolveSettings(ctx, f, s.Defaults(), name)
	if err != nil {
		return err
	}
	return s.b.Wake(ctx, name, Options{Network: st.Network, Limits: &st.Limits, DiskBytes: st.HomeBytes})
}

// hostGrace is how long past a command's own timeout the gateway waits for
// the agent before it gives up on the pod.
const hostGrace = 10 * time.Second

// Exec runs one command in the named sandbox, starting its pod first when
// it has none.
func (s *Sandboxes) Exec(ctx context.Context, name string, cmd sandbox.Command) (sandbox.Result, error) {
	e, release, err := s.hold(ctx, name, true)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer release()
	e.lastUsed.Store(time.Now().UnixNano())
	defer func() { e.lastUsed.Store(time.Now().UnixNano()) }()
	req := agent.ExecRequest{
		Shell: s.cfg.Shell, Command: cmd.Command, Dir: s.b.cfg.HomeDir,
		TimeoutMs: cmd.TimeoutMs, MaxBytes: cmd.MaxBytes, Resident: cmd.Resident,
	}
	var out agent.Output
	var late bool
	var tries retries
	for {
		if err := s.wake(ctx, name); err != nil {
			return sandbox.Result{}, err
		}
		out, late, err = s.execOnce(ctx, name, req, cmd.OnOutput)
		if again, werr := s.again(ctx, name, err, &tries); werr != nil {
			return sandbox.Result{}, werr
		} else if !again {
			break
		}
	}
	switch {
	case err == nil:
	case e.destroying.Load():
		return sandbox.Result{}, sandbox.ErrDestroyed
	case errors.Is(err, agent.ErrClosed) && s.b.Ended(context.WithoutCancel(ctx), name):
		// Another replica put the sandbox to sleep (its home archived)
		// or destroyed it: the command went with the pod, and what is
		// left is that replica's to clean.
		return sandbox.Result{ExitCode: 137, Restarted: true,
			Stderr: []byte("shellgate: the sandbox was put to sleep or deleted through another gateway replica during this command, which was stopped; the next command wakes it with the files its sleep kept\n")}, nil
	case errors.Is(err, agent.ErrClosed) || late:
		// The pod's agent went away or missed the timeout: the pod is
		// given up and the next command starts a new one.
		res := sandbox.Result{ExitCode: 137, Restarted: true}
		why := "the sandbox's pod stopped answering during this command"
		if !errors.Is(err, agent.ErrClosed) {
			res = sandbox.Result{ExitCode: -1, TimedOut: true, Restarted: true}
			why = "the sandbox's pod did not end the command at its timeout"
		}
		s.log.Warn("sandbox pod lost during a command", "sandbox", name, "err", err)
		kept := "files in /workspace/home are kept"
		serr := errors.New("the connection to its agent is gone")
		if s.b.Awake(name) {
			serr = s.sleepPod(context.WithoutCancel(ctx), name)
		}
		if serr != nil {
			s.log.Warn("sandbox pod could not be archived; deleting it", "sandbox", name, "err", serr)
			kept = "files written since the sandbox last slept are lost"
			if derr := s.b.remove(context.WithoutCancel(ctx), name, false); derr != nil {
				s.log.Error("deleting a lost sandbox pod failed", "sandbox", name, "err", derr)
			}
		}
		res.Stderr = []byte("shellgate: " + why + "; " + kept + " and the next command runs in a new pod\n")
		return res, nil
	default:
		return sandbox.Result{}, err
	}
	res := sandbox.Result{
		Stdout: out.Stdout, Stderr: out.Stderr,
		StdoutBytes: out.StdoutBytes, StderrBytes: out.StderrBytes,
		ExitCode: out.ExitCode, TimedOut: out.TimedOut,
	}
	if out.Error != "" {
		res.Notes = append(res.Notes, "shellgate: "+out.Error+"\n"...)
	}
	if out.ProcessLimit {
		res.ProcessLimit = true
		res.Notes = append(res.Notes, "shellgate: the command reached the sandbox's process limit; creating more processes failed with EAGAIN\n"...)
	}
	return res, nil
}

// execOnce runs req in the named sandbox's pod, bounded by its timeout
// and hostGrace; late tells whether that bound, not ctx, ended it.
func (s *Sandboxes) execOnce(ctx context.Context, name string, req agent.ExecRequest, onOutput agent.OutputFunc) (out agent.Output, late bool, err error) {
	hostCtx, cancel := ctx, context.CancelFunc(func() {})
	if req.TimeoutMs > 0 {
		hostCtx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond+hostGrace)
	}
	defer cancel()
	out, err = s.b.Exec(hostCtx, name, req, onOutput)
	return out, ctx.Err() == nil && hostCtx.Err() != nil, err
}

// retries is what again knows of one call's tries.
type retries struct {
	// readOnly: the call changes nothing in the pod (a list, a stat, the
	// opening of a read), so one that met the end of its connection may
	// be made again whatever it did.
	readOnly bool
	unsent   int  // tries that ended before they were sent (or did nothing)
	held     bool // a try met another replica's hold
}

// again tells whether a call that failed with err did not run in the pod
// and is to be made again, after a wake: another replica holds the pod to
// put it to sleep (agent.ErrHeld; as on this machine, where a call waits
// for a sleep under way and then wakes the sandbox), or the connection
// had ended before the call was sent (agent.ErrUnsent; a few times), or
// ended after a try met the hold (the held agent refuses what it gets
// until its pod is deleted, and a deleted pod's runs nothing), or the call
// changes nothing (retries.readOnly; its connection may have ended with a
// pod another replica deleted a moment before). While the
// hold lasts it waits a poll interval between tries, or until the
// connection ends with the pod.
func (s *Sandboxes) again(ctx context.Context, name string, err error, r *retries) (bool, error) {
	switch {
	case errors.Is(err, agent.ErrUnsent) || (r.held || r.readOnly) && errors.Is(err, agent.ErrClosed):
		if r.unsent++; r.unsent > maxUnsentTries {
			return false, nil
		}
	case errors.Is(err, agent.ErrHeld):
		r.held = true
	default:
		return false, nil
	}
	// Until the connection has ended (so that the next wake adopts the
	// pod anew) or, while it lasts, a poll interval.
	var gone <-chan struct{}
	if c, err := s.b.Agent(name); err == nil {
		gone = c.Done()
	}
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-gone:
	case <-time.After(s.b.cfg.PollInterval):
	}
	return true, nil
}

// maxUnsentTries bounds the calls made again because the connection had
// ended before they were sent: each try wakes (adopts) first.
const maxUnsentTries = 3

// sleepPod archives and deletes the named sandbox's pod, if this process
// has a connection to it.
func (s *Sandboxes) sleepPod(ctx context.Context, name string) error {
	if !s.b.Awake(name) {
		return nil
	}
	if s.b.cfg.Archiver == nil {
		return errNoArchive
	}
	return s.b.Sleep(ctx, name)
}

// statusTimeout bounds the API server lookups of Status and List.
const statusTimeout = 10 * time.Second

// Status is Running while the sandbox has a pod, whichever replica started
// it, else Sleeping; sandbox.ErrNotFound for a name with no pod and no
// archived home that this process does not know. A sandbox this process
// has no open connection to costs one GET of its pod; one unknown here
// with no pod also one Archiver.Has, the first time only (a name found
// archived is remembered).
func (s *Sandboxes) Status(name string) (sandbox.Status, error) {
	if !sandbox.ValidName(name) {
		return "", sandbox.ErrBadName
	}
	if s.b.Awake(name) {
		return sandbox.Running, nil
	}
	s.mu.Lock()
	e := s.known[name]
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	has, err := s.b.HasPod(ctx, name)
	switch {
	case err != nil:
		return "", err
	case has:
		return sandbox.Running, nil
	case e != nil:
		return sandbox.Sleeping, nil
	}
	switch asleep, err := s.archived(ctx, name); {
	case err != nil:
		return "", err
	case asleep:
		// Last use unknown, as for another replica's sandbox in List.
		s.remember(name, 0)
		return sandbox.Sleeping, nil
	}
	return "", fmt.Errorf("%w: %s", sandbox.ErrNotFound, name)
}

// List returns the sandboxes this process knows and those with a pod
// (started by any replica: one LIST of the namespace's sandbox pods), by
// name. QuotaBytes is the default home size limit and LastUsed the last
// command's time through this process (zero for another replica's); disk
// use is not measured. A sleeping sandbox this process never used is
// listed once a call or Status found its archived home; the archive is
// not listed.
func (s *Sandboxes) List() ([]sandbox.Info, error) {
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	pods, err := s.b.Pods(ctx)
	if err != nil {
		return nil, err
	}
	running := map[string]bool{}
	used := map[string]time.Time{}
	for _, n := range pods {
		running[n] = true
		used[n] = time.Time{}
	}
	s.mu.Lock()
	for n, e := range s.known {
		if u := e.lastUsed.Load(); u != 0 {
			used[n] = time.Unix(0, u)
		} else {
			used[n] = time.Time{}
		}
	}
	s.mu.Unlock()
	names := slices.Sorted(maps.Keys(used))
	out := make([]sandbox.Info, 0, len(names))
	for _, n := range names {
		st := sandbox.Sleeping
		if running[n] || s.b.Awake(n) {
			st = sandbox.Running
		}
		out = append(out, sandbox.Info{Name: n, Status: st, QuotaBytes: s.b.cfg.DiskBytes, LastUsed: used[n]})
	}
	return out, nil
}

// Sleep archives the home and deletes the pod; a sandbox without a pod is
// a no-op. Without an Archiver it is refused (the home would be lost).
func (s *Sandboxes) Sleep(ctx context.Context, name string) error {
	_, release, err := s.hold(ctx, name, false)
	if err != nil {
		return err
	}
	defer release()
	if !s.b.Awake(name) {
		// Another replica's pod, if any: Backend.Sleep adopts it.
		if has, err := s.b.HasPod(ctx, name); err != nil || !has {
			return err
		}
		if s.b.cfg.Archiver == nil {
			return errNoArchive
		}
		return s.b.Sleep(ctx, name)
	}
	return s.sleepPod(ctx, name)
}

// Destroy deletes the named sandbox's pod and objects and forgets it; an
// unknown name is sandbox.ErrNotFound (its objects, if a gateway that died
// left some, are deleted all the same). A running command is cut short
// (its Exec returns sandbox.ErrDestroyed: closing the pod's connection
// makes the agent kill it), and so are calls waiting for the sandbox;
// calls made after Destroy returned see a new sandbox. The Archiver's copy
// of the home is deleted too.
func (s *Sandboxes) Destroy(ctx context.Context, name string) error {
	if !sandbox.ValidName(name) {
		return fmt.Errorf("%w: %q", sandbox.ErrBadName, name)
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.inCalls.Done()
	dctx := context.WithoutCancel(ctx)
	s.mu.Lock()
	e := s.known[name]
	s.mu.Unlock()
	if e == nil {
		has, herr := s.exists(dctx, name)
		if err := s.b.Destroy(dctx, name); err != nil {
			return err
		}
		if herr != nil || !has {
			// Unknown here, no pod and no archived home: nothing to
			// destroy.
			return fmt.Errorf("%w: %s", sandbox.ErrNotFound, name)
		}
		return nil
	}
	if !e.destroying.CompareAndSwap(false, true) {
		// Another Destroy is under way: wait for it.
		select {
		case e.lock <- struct{}{}:
			<-e.lock
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	// Cut a running command short; a wake under way makes this ErrBusy,
	// and the delete below, once the lock is ours, does it.
	_ = s.b.Destroy(dctx, name)
	e.lock <- struct{}{}
	defer func() { <-e.lock }()
	err := s.b.Destroy(dctx, name)
	s.mu.Lock()
	if s.known[name] == e {
		delete(s.known, name)
	}
	s.mu.Unlock()
	return err
}

// Close refuses new calls, waits for those in flight and puts every pod to
// sleep (archive, then delete) but those another replica is connected to
// (it sleeps them when idle). Without an Archiver the pods are left
// running, disconnected: deleting them would lose their homes.
func (s *Sandboxes) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	names := make([]string, 0, len(s.known))
	for n := range s.known {
		names = append(names, n)
	}
	s.mu.Unlock()
	close(s.stop)
	s.bg.Wait()
	s.inCalls.Wait()
	var errs []error
	if s.b.cfg.Archiver != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		for _, n := range names {
			if s.shared(n) {
				continue
			}
			if err := s.sleepPod(ctx, n); err != nil {
				errs = append(errs, fmt.Errorf("sandbox %s: %w", n, err))
			}
		}
	}
	errs = append(errs, s.b.Close())
	return errors.Join(errs...)
}

// idle tells whether the named sandbox, awake here, has been unused for
// IdleTimeout, through this replica and, as its pod's agent says (Peers),
// through the others connected to the pod: none has a call in progress,
// and the last one's began or ended that long ago.
func (s *Sandboxes) idle(name string, e *entry) bool {
	last := time.Unix(0, e.lastUsed.Load())
	if c, err := s.b.Agent(name); err == nil {
		p, at := c.Peers()
		if p.Busy {
			return false
		}
		if at.After(last) {
			last = at
		}
	}
	return time.Since(last) >= s.cfg.IdleTimeout
}

// shared tells whether another replica is connected to the named
// sandbox's pod: that one sleeps it when it is idle, so this one leaves
// it running when it shuts down.
func (s *Sandboxes) shared(name string) bool {
	c, err := s.b.Agent(name)
	if err != nil {
		return false
	}
	p, _ := c.Peers()
	return p.Hosts > 0
}

// sleepIdle puts sandboxes unused for IdleTimeout to sleep.
func (s *Sandboxes) sleepIdle() {
	defer s.bg.Done()
	every := min(s.cfg.IdleTimeout/4, time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		var idle []*entry
		var names []string
		for n, e := range s.known {
			idle, names = append(idle, e), append(names, n)
		}
		s.mu.Unlock()
		for i, e := range idle {
			select {
			case e.lock <- struct{}{}:
			default:
				continue // in use
			}
			s.mu.Lock()
			current := s.known[names[i]] == e && !e.destroying.Load()
			s.mu.Unlock()
			if current && s.b.Awake(names[i]) && s.idle(names[i], e) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				if err := s.b.Sleep(ctx, names[i]); err != nil {
					s.log.Warn("idle sandbox could not sleep", "sandbox", names[i], "err", err)
				}
				cancel()
			}
			<-e.lock
		}
	}
}
