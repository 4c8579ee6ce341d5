package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A box is one named sandbox known to this process, and every call on it
// is an operation (op) of the manager:
//
//   - begin registers the op (refusing once the manager is closed) with a
//     context that Destroy and Close can cancel, and counts it in flight;
//     Close waits for every op in flight before it stops anything.
//   - The op then takes the box's lock, which serializes lifecycle steps and
//     commands. Waiting for it honours the op's context.
//   - end forgets the box if nothing uses it and it is asleep: m.boxes holds
//     only awake boxes and boxes in use, never one for a name that was only
//     asked about.
//
// Status and List never take the box's lock: they read box.awake.
type box struct {
	name string
	// lock is held by every lifecycle step and command; a channel so that
	// waiting for it can end with a context.
	lock chan struct{}

	// Under lock.
	inst *instance // nil while asleep
	// lockRelease releases the home's owner lock, held while awake.
	lockRelease func()
	// lastUsed is when the box last woke, ran a command or served a file
	// call while awake: the idle sweep puts it to sleep IdleTimeout later.
	lastUsed time.Time
	// lostState says why the last wake lost the running state its
	// checkpoint held; the next command's result tells (checkpoint.go).
	lostState string

	// awake mirrors inst != nil for readers that must not wait for a
	// command.
	awake atomic.Bool
	// homeOnly is set while a file call has the sleeping box's home
	// mounted without a container (files.go): the home's owner lock is
	// held by this process then, but the sandbox is asleep.
	homeOnly atomic.Bool

	// Under Manager.mu.
	refs int // ops holding or waiting for lock
	// destroying is set while Destroy runs and closed when it ends; ops
	// that begin meanwhile wait for it and then start over on a new box.
	destroying chan struct{}
}

func newBox(name string) *box { return &box{name: name, lock: make(chan struct{}, 1)} }

// lockCtx takes b's lock, giving up when ctx ends. A free lock is taken
// even when ctx has already ended: teardown with a cancelled context still
// runs (see cleanupContext).
func (b *box) lockCtx(ctx context.Context) error {
	select {
	case b.lock <- struct{}{}:
		return nil
	default:
	}
	select {
	case b.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (b *box) tryLock() bool {
	select {
	case b.lock <- struct{}{}:
		return true
	default:
		return false
	}
}

func (b *box) unlock() { <-b.lock }

// setInst records the box's running container (nil: asleep). A box's idle
// clock starts when it becomes awake: a container created or woken and not
// yet used sleeps IdleTimeout later, not at the next sweep.
func (b *box) setInst(inst *instance) {
	b.inst = inst
	if inst != nil {
		b.lastUsed = time.Now()
	}
	b.awake.Store(inst != nil)
}

// op is one call in flight on a box.
type op struct {
	box    *box
	cancel context.CancelCauseFunc
}

// begin registers an op on the named box. A box being destroyed is waited
// for first, so that a call made after Destroy began sees its outcome.
func (m *Manager) begin(ctx context.Context, name string) (*op, context.Context, error) {
	if !ValidName(name) {
		return nil, nil, fmt.Errorf("%w: %q", ErrBadName, name)
	}
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, nil, ErrClosed
		}
		b := m.boxes[name]
		if b != nil && b.destroying != nil {
			wait := b.destroying
			m.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		if b == nil {
			b = newBox(name)
			m.boxes[name] = b
		}
		b.refs++
		opCtx, cancel := context.WithCancelCause(ctx)
		o := &op{box: b, cancel: cancel}
		m.ops[o] = struct{}{}
		m.inflight.Add(1)
		m.mu.Unlock()
		return o, opCtx, nil
	}
}

// end unregisters an op.
func (m *Manager) end(o *op) {
	o.cancel(nil)
	m.mu.Lock()
	delete(m.ops, o)
	o.box.refs--
	m.forgetLocked(o.box)
	m.mu.Unlock()
	m.inflight.Done()
}

// forgetLocked drops b from m.boxes when nothing uses it and it is asleep.
// Caller holds m.mu.
func (m *Manager) forgetLocked(b *box) {
	if b.refs == 0 && b.destroying == nil && !b.awake.Load() && m.boxes[b.name] == b {
		delete(m.boxes, b.name)
	}
}

// stoppedBy tells whether Destroy or Close ended the op's context, and
// returns that cause.
func stoppedBy(opCtx context.Context) error {
	cause := context.Cause(opCtx)
	if errors.Is(cause, ErrDestroyed) || errors.Is(cause, ErrClosed) {
		return cause
	}
	return nil
}

// withBox runs fn as one op holding the named box's lock. fn gets the op's
// context, which Destroy (of this box) and Close cancel; an op ended that
// way returns ErrDestroyed or ErrClosed rather than the context's error.
func (m *Manager) withBox(ctx context.Context, name string, fn func(context.Context, *box) error) error {
	b, opCtx, release, err := m.hold(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	err = fn(opCtx, b)
	if cause := stoppedBy(opCtx); err != nil && cause != nil && ctx.Err() == nil {
		return cause
	}
	return err
}

// hold begins an op on the named box and takes its lock, for a call that
// outlives one function (OpenFile's reader); release unlocks and ends the
// op. The op's context is cancelled by Destroy and Close like withBox's.
func (m *Manager) hold(ctx context.Context, name string) (b *box, opCtx context.Context, release func(), err error) {
	o, opCtx, err := m.begin(ctx, name)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := o.box.lockCtx(opCtx); err != nil {
		m.end(o)
		if cause := stoppedBy(opCtx); cause != nil {
			return nil, nil, nil, cause
		}
		return nil, nil, nil, err
	}
	release = func() {
		o.box.unlock()
		m.end(o)
	}
	if cause := stoppedBy(opCtx); cause != nil {
		release()
		return nil, nil, nil, cause
	}
	return o.box, opCtx, release, nil
}

// cleanupTimeout bounds one teardown: deleting a container, unmounting its
// layers and home.
const cleanupTimeout = 60 * time.Second

// cleanupContext is the context teardown runs with: detached from the
// caller's cancellation (a container must be deleted before its directory
// is removed, whatever the caller does meanwhile), and bounded.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// homeLockHeld reports whether some process holds the named home's owner
// lock, read from /proc/locks without taking it (taking it, even briefly,
// would make another process's wake fail with ErrBusy).
func (m *Manager) homeLockHeld(name string) bool {
	held, err := heldFlocks()
	if err != nil {
		return false
	}
	return held[m.homeLockKey(name)]
}

// homeLockKey is how /proc/locks names the home's lock file: MAJ:MIN:INODE
// (device numbers in hex), or "" if it does not exist.
func (m *Manager) homeLockKey(name string) string {
	var st unix.Stat_t
	if err := unix.Stat(m.homeLockPath(name), &st); err != nil {
		return ""
	}
	dev := uint64(st.Dev)
	return fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), st.Ino)
}

// heldFlocks returns the MAJ:MIN:INODE of every file some process holds a
// flock on (as /proc/locks shows them: waiters, marked "->", excluded).
func heldFlocks() (map[string]bool, error) {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	held := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 24188 fe:00:9982768 0 EOF
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		held[fields[5]] = true
	}
	return held, sc.Err()
}

func (m *Manager) homeLockPath(name string) string {
	return filepath.Join(m.dirs.homes, name+".lock")
}
