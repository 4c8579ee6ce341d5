package jsrun

import (
	"cmp"
	"fmt"
	"time"
)

// Limits bound one invocation. In Config a zero field means the default
// (the Run SDK's, listed beside each field). In Input a zero field means the
// runner's limit, and any other value can only lower it: a value above the
// runner's limit gets the runner's limit (see lower).
type Limits struct {
	Timeout            time.Duration // 30 s: whole invocation, host calls included
	MemoryBytes        int           // 64 MiB: the guest heap
	StackBytes         int           // 2 MiB: guest call depth (QuickJS frames)
	ResultBytes        int           // 1 MiB: serialized completed value
	SourceBytes        int           // 256 KiB
	HostArgumentsBytes int           // 1 MiB: serialized arguments of one host call
	HostOutputBytes    int           // 4 MiB: one host result, payload or resolution
	HostCalls          int           // 256 per run, replayed calls included
	InFlightHostCalls  int           // 32 live host calls at once
	ConsoleBytes       int           // 64 KiB of console output, then truncated
	ContinuationBytes  int           // 32 MiB
	// ModuleRequests bounds the calls to Input.ModuleLoader (Normalize and
	// Load, replayed ones included; a repeated import is answered from the
	// run's own cache): 256, as the Run SDK's shared bridge limit.
	ModuleRequests int
	// ModuleBytes bounds the total source of the modules a run loads (each
	// module is also held to SourceBytes): 4 MiB.
	ModuleBytes int
}

// DefaultLimits are the Run SDK's defaults.
var DefaultLimits = Limits{
	Timeout:            30 * time.Second,
	MemoryBytes:        64 << 20,
	StackBytes:         2 << 20,
	ResultBytes:        1 << 20,
	SourceBytes:        256 << 10,
	HostArgumentsBytes: 1 << 20,
	HostOutputBytes:    4 << 20,
	HostCalls:          256,
	InFlightHostCalls:  32,
	ConsoleBytes:       64 << 10,
	ContinuationBytes:  32 << 20,
	ModuleRequests:     256,
	ModuleBytes:        4 << 20,
}

// namedInt is one int field of Limits.
type namedInt struct {
	name string
	p    *int
}

// ints lists l's int fields (all but Timeout), so that merge, lower and
// validate name each field once.
func (l *Limits) ints() []namedInt {
	return []namedInt{
		{"MemoryBytes", &l.MemoryBytes}, {"StackBytes", &l.StackBytes}, {"ResultBytes", &l.ResultBytes},
		{"SourceBytes", &l.SourceBytes}, {"HostArgumentsBytes", &l.HostArgumentsBytes},
		{"HostOutputBytes", &l.HostOutputBytes}, {"HostCalls", &l.HostCalls},
		{"InFlightHostCalls", &l.InFlightHostCalls}, {"ConsoleBytes", &l.ConsoleBytes},
		{"ContinuationBytes", &l.ContinuationBytes}, {"ModuleRequests", &l.ModuleRequests},
		{"ModuleBytes", &l.ModuleBytes},
	}
}

// merge returns l with every zero field taken from base.
func (l Limits) merge(base Limits) Limits {
	l.Timeout = cmp.Or(l.Timeout, base.Timeout)
	b := base.ints()
	for i, f := range l.ints() {
		*f.p = cmp.Or(*f.p, *b[i].p)
	}
	return l
}

// lower returns the limits of a run that asked for l on a runner whose
// limits are op (complete, no zero field): per field, the smaller of the two,
// and op's where l is zero. A request never raises the operator's limits.
func (l Limits) lower(op Limits) Limits {
	if l.Timeout == 0 || l.Timeout > op.Timeout {
		l.Timeout = op.Timeout
	}
	o := op.ints()
	for i, f := range l.ints() {
		if *f.p == 0 || *f.p > *o[i].p {
			*f.p = *o[i].p
		}
	}
	return l
}

const maxLimit = 1<<31 - 1

func (l Limits) validate() error {
	if l.Timeout < 0 || l.Timeout > maxLimit*time.Millisecond {
		return newError(CodeInvalidInput, "limit Timeout must be positive and at most 2^31-1 ms")
	}
	for _, f := range l.ints() {
		if *f.p < 0 || *f.p > maxLimit {
			return newError(CodeInvalidInput, "limit %s must be positive and at most 2^31-1, got %d", f.name, *f.p)
		}
	}
	if l.MemoryBytes != 0 && l.MemoryBytes < 1<<20 {
		return newError(CodeInvalidInput, "limit MemoryBytes must be at least 1 MiB")
	}
	return nil
}

// stackSlots converts a byte budget to the engine's unit: modernc's QuickJS
// counts libc stack slots, and its default of 5,000 is about what native
// QuickJS reaches with a 1 MiB stack.
func stackSlots(bytes int) uintptr {
	s := uintptr(int64(bytes) * 5000 / (1 << 20))
	if s < 64 {
		s = 64
	}
	if s > 40000 {
		s = 40000
	}
	return s
}

func (l Limits) String() string { return fmt.Sprintf("%+v", struct{ Limits }{l}) }
