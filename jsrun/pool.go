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

var bridgeMethods = []string{"init", "start", "poll", "settle", "finish", "console"}

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

// prewarm keeps r.pool full until Close.
func (r *Runner) prewarm() {
	defer close(r.poolDone)
	bc, err := compiledPrelude()
	if err != nil {
		return
	}
	for {
		h, err := newHardened(bc, 10*time.Second)
		if err != nil {
			select {
			case <-r.stop:
				return
			case <-time.After(time.Second):
				continue
			}
		}
		select {
		case r.pool <- h:
		case <-r.stop:
			h.close()
			return
		}
	}
}

// Close stops prewarming and frees the prewarmed contexts. Runs in progress
// are not affected; a Runner without Config.Prewarm needs no Close.
func (r *Runner) Close() error {
	if r.pool == nil {
		return nil
	}
	r.closeOnce.Do(func() {
		close(r.stop)
		<-r.poolDone
		for {
			select {
			case h := <-r.pool:
				h.close()
			default:
				return
			}
		}
	})
	return nil
}
