package jsrun

import (
	"context"
	"errors"
	"sync"
)

// Func is a host function. args are the guest's call arguments, already
// copied into Go values (see values.go); the result is copied back into the
// guest, where the call's Promise fulfils with it. Returning an error rejects
// the guest's Promise: a *UserError keeps its name, message and code, any
// other error reaches the guest as "Host function failed." with code
// RUN_HOST_FUNCTION_ERROR. A panic is recovered and treated as an error.
//
// ctx carries the call's identity (CallInfoFrom) and is cancelled when the
// run ends (completed, interrupted, timed out or failed).
type Func func(ctx context.Context, args []any) (any, error)

// HostFunc is one host function as listed to a run.
//
// By default the guest's call returns a Promise (a lazy thenable) and fn
// runs on its own goroutine. Sync (see the Sync constructor) runs fn inline
// on the run's loop goroutine, without a goroutine hop: use it only for
// cheap functions that never block; the guest still sees a Promise.
//
// Synchronous makes the guest's call return fn's value directly, not a
// Promise (the Run SDK's syncHostFunctions): the guest waits while fn runs,
// and fn may block as long as it likes (up to the run's deadline; its ctx
// is cancelled on timeout or when the caller cancels). A synchronous
// function cannot interrupt: Interrupt fails the run with
// RUN_PROTOCOL_ERROR. Its calls count against Limits.HostCalls like any
// other, are recorded in the continuation's ledger and are answered from it
// on a resume; its errors are thrown at the call site. Synchronous wins
// over Sync.
type HostFunc struct {
	Fn          Func
	Sync        bool
	Synchronous bool
}

// Async lists fn as a host function that runs on its own goroutine.
func Async(fn Func) HostFunc { return HostFunc{Fn: fn} }

// Sync lists fn as a host function that runs inline on the loop goroutine
// (the guest still gets a Promise; see Synchronous for a direct value).
func Sync(fn Func) HostFunc { return HostFunc{Fn: fn, Sync: true} }

// Synchronous lists fn as a host function whose guest call returns its
// value directly instead of a Promise (see HostFunc).
func Synchronous(fn Func) HostFunc { return HostFunc{Fn: fn, Synchronous: true} }

// Namespace is a group of host functions: the guest calls them as ns.fn(...).
type Namespace map[string]HostFunc

// CallInfo is the identity of one host call, carried by its context.
type CallInfo struct {
	// LogicalRunID is stable across every resume of one logical run.
	LogicalRunID string
	// InvocationID names this invocation (one Run call) of the logical run.
	InvocationID string
	// RequestIndex is the 1-based index of this call in the run's sequence
	// of host calls; it is stable across replays.
	RequestIndex int
	// RequestID names this call within the invocation, as the Run SDK does:
	// InvocationID + ":bridge-N" for the N-th call returning a Promise,
	// ":sync-N" for the N-th synchronous call (replayed calls counted).
	RequestID string
	// Synchronous reports a synchronous host function's call.
	Synchronous bool
	// Function is the qualified name, "ns.fn".
	Function string
	// Resume is set when this call was interrupted in an earlier invocation
	// and the caller now supplies its resolution.
	Resume *ResumeInfo
}

// ResumeInfo is what a resumed host call sees.
type ResumeInfo struct {
	InterruptionID string
	Payload        any
	Resolution     any
}

type callState struct {
	info CallInfo
	mu   sync.Mutex
	// interrupted payload (wire) when the function called Interrupt.
	interrupted bool
	payload     string
	err         error
	maxPayload  int
}

type callKey struct{}

// CallInfoFrom returns the identity of the host call whose context ctx is.
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	cs, ok := ctx.Value(callKey{}).(*callState)
	if !ok {
		return CallInfo{}, false
	}
	return cs.info, true
}

// ErrInterrupted is what Interrupt returns (wrapped); a host function should
// return it. Whatever the function returns after calling Interrupt, the call
// stays pending in the guest and is reported as an interruption.
var ErrInterrupted = errors.New("jsrun: host call interrupted")

// Interrupt pauses the host call whose context is ctx: its guest Promise
// never settles in this invocation, and once the run is quiescent it returns
// with status "interrupted", listing {id, hostFunctionName, arguments,
// payload} and a continuation token. payload must be serializable.
//
//	func(ctx context.Context, args []any) (any, error) {
//		if r := jsrun.ResumeFrom(ctx); r != nil {
//			return r.Resolution, nil // the approver's answer
//		}
//		return nil, jsrun.Interrupt(ctx, map[string]any{"needs": "approval"})
//	}
func Interrupt(ctx context.Context, payload any) error {
	cs, ok := ctx.Value(callKey{}).(*callState)
	if !ok {
		return errors.New("jsrun: Interrupt called outside a host function")
	}
	if cs.info.Synchronous {
		err := newError(CodeProtocol, "synchronous host function %s cannot interrupt a run", cs.info.Function)
		cs.mu.Lock()
		cs.err = err
		cs.mu.Unlock()
		return err
	}
	wire, err := encodeWire(payload, "payload")
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err != nil {
		cs.err = err
		return err
	}
	if len(wire) > cs.maxPayload {
		cs.err = limitError(CodeBridgeLimit, "maxHostFunctionOutputBytes", "interruption payload of %s is %d bytes, over the limit of %d", cs.info.Function, len(wire), cs.maxPayload)
		return cs.err
	}
	cs.interrupted = true
	cs.payload = wire
	return ErrInterrupted
}

// ResumeFrom returns the resume information of a resumed host call, or nil.
func ResumeFrom(ctx context.Context) *ResumeInfo {
	info, ok := CallInfoFrom(ctx)
	if !ok {
		return nil
	}
	return info.Resume
}
