package jsrun

import (
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

// merge returns l with every zero field taken from base.
func (l Limits) merge(base Limits) Limits {
	pick := func(v, b int) int {
		if v == 0 {
			return b
		}
		return v
	}
	out := base
	if l.Timeout != 0 {
		out.Timeout = l.Timeout
	}
	out.MemoryBytes = pick(l.MemoryBytes, base.MemoryBytes)
	out.StackBytes = pick(l.StackBytes, base.StackBytes)
	out.ResultBytes = pick(l.ResultBytes, base.ResultBytes)
	out.SourceBytes = pick(l.SourceBytes, base.SourceBytes)
	out.HostArgumentsBytes = pick(l.HostArgumentsBytes, base.HostArgumentsBytes)
	out.HostOutputBytes = pick(l.HostOutputBytes, base.HostOutputBytes)
	out.HostCalls = pick(l.HostCalls, base.HostCalls)
	out.InFlightHostCalls = pick(l.InFlightHostCalls, base.InFlightHostCalls)
	out.ConsoleBytes = pick(l.ConsoleBytes, base.ConsoleBytes)
	out.ContinuationBytes = pick(l.ContinuationBytes, base.ContinuationBytes)
	out.ModuleRequests = pick(l.ModuleRequests, base.ModuleRequests)
	out.ModuleBytes = pick(l.ModuleBytes, base.ModuleBytes)
	return out
}

// lower returns the limits of a run that asked for l on a runner whose
// limits are op (complete, no zero field): per field, the smaller of the two,
// and op's where l is zero. A request never raises the operator's limits.
func (l Limits) lower(op Limits) Limits {
	pick := func(v, o int) int {
		if v == 0 || v > o {
			return o
		}
		return v
	}
	out := op
	if l.Timeout != 0 && l.Timeout < op.Timeout {
		out.Timeout = l.Timeout
	}
	out.MemoryBytes = pick(l.MemoryBytes, op.MemoryBytes)
	out.StackBytes = pick(l.StackBytes, op.StackBytes)
	out.ResultBytes = pick(l.ResultBytes, op.ResultBytes)
	out.SourceBytes = pick(l.SourceBytes, op.SourceBytes)
	out.HostArgumentsBytes = pick(l.HostArgumentsBytes, op.HostArgumentsBytes)
	out.HostOutputBytes = pick(l.HostOutputBytes, op.HostOutputBytes)
	out.HostCalls = pick(l.HostCalls, op.HostCalls)
	out.InFlightHostCalls = pick(l.InFlightHostCalls, op.InFlightHostCalls)
	out.ConsoleBytes = pick(l.ConsoleBytes, op.ConsoleBytes)
	out.ContinuationBytes = pick(l.ContinuationBytes, op.ContinuationBytes)
	out.ModuleRequests = pick(l.ModuleRequests, op.ModuleRequests)
	out.ModuleBytes = pick(l.ModuleBytes, op.ModuleBytes)
	return out
}

const maxLimit = 1<<31 - 1

func (l Limits) validate() error {
	if l.Timeout < 0 || l.Timeout > maxLimit*time.Millisecond {
		return newError(CodeInvalidInput, "limit Timeout must be positive and at most 2^31-1 ms")
	}
	for name, v := range map[string]int{
		"MemoryBytes": l.MemoryBytes, "StackBytes": l.StackBytes, "ResultBytes": l.ResultBytes,
		"SourceBytes": l.SourceBytes, "HostArgumentsBytes": l.HostArgumentsBytes,
		"HostOutputBytes": l.HostOutputBytes, "HostCalls": l.HostCalls,
		"InFlightHostCalls": l.InFlightHostCalls, "ConsoleBytes": l.ConsoleBytes,
		"ContinuationBytes": l.ContinuationBytes, "ModuleRequests": l.ModuleRequests,
		"ModuleBytes": l.ModuleBytes,
	} {
		if v < 0 || v > maxLimit {
			return newError(CodeInvalidInput, "limit %s must be positive and at most 2^31-1, got %d", name, v)
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
