package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/shellgate/shellgate/sandbox"
)

// Per-workspace quotas (issue 29, SPEC "Sharing one server safely"), each
// counted per account + workspace:
//
//	quota                      default   flag                        over it
//	containers that exist      100       --max-containers            403 (delete one)
//	containers awake at once   10        --max-awake                 the least recently used idle one sleeps; 429 if all are busy
//	bytes of workspace files   10 GiB    --max-workspace-files-mb    403 (delete files)
//	requests in flight         64        --max-concurrent            429 (one ends)
//
// Every refusal is in the route's own envelope, with code
// "quota_exceeded" where the envelope has a code, and a message that
// names the quota, its value and the flag that raises it.
//
// Containers and file bytes are counted by the database in the same
// transaction as the insert (store CreateWithin), so they hold across
// replicas sharing it. Awake containers and requests in flight are
// counted by each replica in memory: they bound what a workspace takes
// of one machine.
const (
	DefaultMaxContainers         = 100
	DefaultMaxAwake              = 10
	DefaultMaxWorkspaceFileBytes = 10 << 30
	DefaultMaxConcurrent         = 64
	codeQuota                    = "quota_exceeded"
	flagMaxContainers            = "--max-containers"
	flagMaxAwake                 = "--max-awake"
	flagMaxWorkspaceFiles        = "--max-workspace-files-mb"
	flagMaxConcurrent            = "--max-concurrent"
	flagMaxBodyInFlight          = "--max-inflight-body-mb"
	quotaRaise                   = "the server's operator raises it with `shellgate serve %s`"
)

// quotaOr is a Config quota with the default for zero; negative (no
// quota) becomes 0.
func quotaOr[T int | int64](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// positiveOr is a Config setting with the default for zero or negative.
func positiveOr[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func quotaError(status int, flag, format string, a ...any) *apiError {
	e := errorf(status, format+"; "+fmt.Sprintf(quotaRaise, flag), a...)
	e.code = codeQuota
	return e
}

func containersQuota(max int) *apiError {
	return quotaError(http.StatusForbidden, flagMaxContainers,
		"this workspace has %d containers, its quota of containers that exist (expired ones do not count): delete one to create another", max)
}

func awakeQuota(max int) *apiError {
	return quotaError(http.StatusTooManyRequests, flagMaxAwake,
		"this workspace has %d containers awake on this server, its quota of containers awake at once, and each of them has a call in progress: retry when one ends (an idle one is then put to sleep for the new one)", max)
}

func fileBytesQuota(max, used int64) *apiError {
	now := ""
	if used >= 0 {
		now = fmt.Sprintf("; they hold %d bytes now", used)
	}
	return quotaError(http.StatusForbidden, flagMaxWorkspaceFiles,
		"this file would take the workspace's files over their quota of %d bytes (%d MiB%s): delete files to make room", max, max>>20, now)
}

// awakeCounter is the sandbox manager as the server uses it, with the
// awake quota on what wakes a sandbox (Create, and Exec on one that is
// not awake): a container of a workspace that already has max containers
// counted awake here is refused with awakeQuota instead.
//
// A container is counted from its admission until the manager no longer
// reports it running (the idle sweep slept it, a delete destroyed it)
// and no Create or Exec on it is in progress; the counts are pruned
// lazily, at the next admission that finds its workspace at the quota.
// The count and the reservation are one step under mu, so wakes racing
// in one workspace never go over it. The count is this process's: each
// replica has its own sandboxes.
//
// At the quota the workspace's least recently used container with no
// call in progress is put to sleep for the new one (its files are kept;
// what ran in it in the background ends, as at an idle sleep), so a
// workspace whose requests each start a container (a stateless client)
// keeps working; only when every counted container has a call in
// progress is the new one refused with awakeQuota.
type awakeCounter struct {
	sandbox.Backend
	max int
	// owner is the workspace of a container id; false for a sandbox that
	// is no container (not counted).
	owner func(ctx context.Context, id string) (Principal, bool, error)

	mu   sync.Mutex
	byID map[string]*awakeEntry
	ws   map[Principal]int // entries per workspace
}

type awakeEntry struct {
	p       Principal
	pending int       // Creates and Execs in progress
	last    time.Time // when the last of them ended
}

func newAwakeCounter(b sandbox.Backend, max int, owner func(ctx context.Context, id string) (Principal, bool, error)) *awakeCounter {
	return &awakeCounter{Backend: b, max: max, owner: owner, byID: map[string]*awakeEntry{}, ws: map[Principal]int{}}
}

func (a *awakeCounter) Create(ctx context.Context, name string) error {
	release, err := a.admit(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	return a.Backend.Create(ctx, name)
}

func (a *awakeCounter) Exec(ctx context.Context, name string, cmd sandbox.Command) (sandbox.Result, error) {
	release, err := a.admit(ctx, name)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer release()
	return a.Backend.Exec(ctx, name, cmd)
}

// admit counts name as awake for the call that is about to wake or use
// it, or refuses it; release ends the call's hold on the count.
func (a *awakeCounter) admit(ctx context.Context, name string) (release func(), err error) {
	if a.max <= 0 {
		return func() {}, nil
	}
	a.mu.Lock()
	e := a.byID[name]
	if e != nil {
		e.pending++
		a.mu.Unlock()
		return a.releaser(e), nil
	}
	a.mu.Unlock()
	p, ok, err := a.owner(ctx, name)
	if err != nil || !ok {
		return func() {}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.byID[name]; e != nil { // admitted meanwhile
		e.pending++
		return a.releaser(e), nil
	}
	// Forget p's containers that went to sleep: this keeps what is
	// tracked to at most max per workspace.
	a.pruneLocked(p)
	var victim string
	if a.ws[p] >= a.max {
		if victim = a.idlestLocked(p); victim == "" {
			return nil, awakeQuota(a.max)
		}
		// Its place is this call's from now: a call that begins on it
		// meanwhile is admitted afresh, against the quota.
		delete(a.byID, victim)
		a.ws[p]--
	}
	e = &awakeEntry{p: p, pending: 1}
	a.byID[name] = e
	a.ws[p]++
	release = a.releaser(e)
	if victim != "" {
		a.mu.Unlock()
		err := a.Backend.Sleep(context.WithoutCancel(ctx), victim)
		a.mu.Lock()
		if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			if a.byID[name] == e {
				delete(a.byID, name)
				if a.ws[p]--; a.ws[p] <= 0 {
					delete(a.ws, p)
				}
			}
			return nil, fmt.Errorf("putting container %s to sleep for %s (the workspace's quota of containers awake at once): %w", victim, name, err)
		}
	}
	return release, nil
}

// idlestLocked is p's counted container with no call in progress that
// was used least recently; "" when every one has a call in progress.
func (a *awakeCounter) idlestLocked(p Principal) string {
	var id string
	var last time.Time
	for k, e := range a.byID {
		if e.p == p && e.pending == 0 && (id == "" || e.last.Before(last)) {
			id, last = k, e.last
		}
	}
	return id
}

func (a *awakeCounter) releaser(e *awakeEntry) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			e.pending--
			e.last = time.Now()
			a.mu.Unlock()
		})
	}
}

// pruneLocked forgets p's containers that are no longer running and have
// no call in progress. Status never waits for a command.
func (a *awakeCounter) pruneLocked(p Principal) {
	for id, e := range a.byID {
		if e.p != p || e.pending > 0 {
			continue
		}
		if st, err := a.Backend.Status(id); err == nil && st == sandbox.Running {
			continue
		}
		delete(a.byID, id)
		if a.ws[p]--; a.ws[p] <= 0 {
			delete(a.ws, p)
		}
	}
}

// awake is the number of p's containers counted awake.
func (a *awakeCounter) awake(p Principal) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ws[p]
}

// containerOwner is awakeCounter's owner: the container record's
// workspace.
func (s *Server) containerOwner(ctx context.Context, id string) (Principal, bool, error) {
	c, err := s.cfg.Containers.Find(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Principal{}, false, nil
	}
	if err != nil {
		return Principal{}, false, fmt.Errorf("finding the workspace of container %s: %w", id, err)
	}
	return c.Owner, true, nil
}

func isQuota(err error) (*apiError, bool) {
	var ae *apiError
	return ae, errors.As(err, &ae) && ae.code == codeQuota
}
