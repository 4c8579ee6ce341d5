package jsrun

import (
	"time"

	"modernc.org/quickjs"
)

// hardened is a context that has run the prelude (intrinsics frozen,
// dynamic code blocked, bridge ready) but no run yet. Each is used by exactly
// one run and then closed: a run never shares a context.
type hardened struct {
	vm      *quickjs.VM
	bridge  quickjs.Value
	methods map[string]quickjs.Value
}

var bridgeMethods = []string{"init", "start", "poll", "settle", "finish", "console", "detached"}

// newHardened creates and hardens a context within timeout.
func newHardened(bc []byte, timeout time.Duration) (h *hardened, err error) {
	vm, err := quickjs.NewVM()
	if err != nil {
		return nil, err
	}
	h = &hardened{vm: vm, methods: map[string]quickjs.Value{}}
	defer func() {
		if p := recover(); p != nil {
			_ = vm.Close()
			h, err = nil, newError(CodeInternal, "engine panic while hardening: %v", p)
		}
	}()
	vm.SetWTF8(true)
	vm.SetMemoryLimit(uintptr(DefaultLimits.MemoryBytes))
	if timeout <= 0 {
		_ = vm.Close()
		return nil, newError(CodeTimeout, "no time left to prepare a context")
	}
	_ = vm.SetEvalTimeout(timeout)
	vm.SetGCThreshold(hardeningGCThreshold)
	fn, err := vm.EvalBytecodeValue(bc)
	if err != nil {
		_ = vm.Close()
		return nil, err
	}
	bridge, err := fn.CallValue(quickjs.UndefinedValue, false)
	fn.Free()
	if err != nil {
		_ = vm.Close()
		return nil, err
	}
	h.bridge = bridge
	// From here on QuickJS collects as if it had just collected the
	// hardened heap (see preludeGCThreshold).
	vm.SetGCThreshold(preludeGCThreshold)
	for _, name := range bridgeMethods {
		atom, err := vm.NewAtom(name)
		if err != nil {
			h.close()
			return nil, err
		}
		m, err := bridge.GetPropertyValue(atom)
		if err != nil {
			h.close()
			return nil, err
		}
		h.methods[name] = m
	}
	return h, nil
}

func (h *hardened) close() {
	for _, v := range h.methods {
		v.Free()
	}
	h.bridge.Free()
	_ = h.vm.Close()
}

// takeHardened returns a prewarmed context, or nil when none is ready (the
// run then hardens its own: a run never waits for the pool).
func (r *Runner) takeHardened() *hardened {
	if r.pool == nil {
		return nil
	}
	select {
	case h := <-r.pool:
		return h
	default:
		return nil
	}
}

// retiredQueue bounds the used contexts waiting for the prewarm goroutine
// to close them; past it a context is closed on a goroutine of its own.
const retiredQueue = 64

// retire frees a used context off the result path. With a prewarm pool the
// prewarm goroutine closes it, so background work (closing and hardening)
// occupies at most one core and runs in progress keep the other; without a
// pool (or once the queue is full or the Runner closed) it is closed on a
// goroutine of its own.
func (r *Runner) retire(h *hardened) {
	if r.retired != nil {
		r.retireMu.Lock()
		queued := false
		if !r.closed {
			select {
			case r.retired <- h:
				queued = true
			default:
			}
		}
		r.retireMu.Unlock()
		if queued {
			return
		}
	}
	go h.close()
}

// Background work waits up to quietWait, polling every quietPoll, for runs
// in progress to finish: on a small machine, hardening the next context
// (a few ms of CPU) competes with the run it is meant to speed up. Under
// sustained load it goes ahead anyway, at most quietWait later.
const (
	quietWait = 2 * time.Millisecond
	quietPoll = 200 * time.Microsecond
)

// quiet waits for runs in progress to finish, at most quietWait; false when
// the Runner is closing.
func (r *Runner) quiet() bool {
	for waited := time.Duration(0); waited < quietWait && r.running.Load() > 0; waited += quietPoll {
		select {
		case <-r.stop:
			return false
		case <-time.After(quietPoll):
		}
	}
	return true
}

// closeRetired closes the contexts queued by retire, each after the runs in
// progress had their chance to finish; false when the Runner is closing.
func (r *Runner) closeRetired() bool {
	for {
		select {
		case h := <-r.retired:
			if !r.quiet() {
				h.close()
				return false
			}
			h.close()
		default:
			return true
		}
	}
}

// prewarm keeps r.pool full and closes retired contexts until Close.
func (r *Runner) prewarm() {
	defer close(r.poolDone)
	bc, err := compiledPrelude()
	if err != nil {
		return
	}
	for {
		if !r.closeRetired() || !r.quiet() {
			return
		}
		h, err := newHardened(bc, 10*time.Second)
		if err != nil {
			select {
			case <-r.stop:
				return
			case <-time.After(time.Second):
				continue
			}
		}
		for h != nil {
			select {
			case r.pool <- h:
				h = nil
			case old := <-r.retired:
				if !r.quiet() {
					old.close()
					h.close()
					return
				}
				old.close()
			case <-r.stop:
				h.close()
				return
			}
		}
	}
}

// Close stops prewarming and frees the prewarmed contexts and those waiting
// to be closed. Runs in progress are not affected (their contexts are closed
// as they finish); a Runner without Config.Prewarm needs no Close.
func (r *Runner) Close() error {
	if r.pool == nil {
		return nil
	}
	r.closeOnce.Do(func() {
		r.retireMu.Lock()
		r.closed = true
		r.retireMu.Unlock()
		close(r.stop)
		<-r.poolDone
		for {
			select {
			case h := <-r.pool:
				h.close()
			case h := <-r.retired:
				h.close()
			default:
				return
			}
		}
	})
	return nil
}
