package jsrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Synchronous host functions (HostFunc.Synchronous) return their value to
// the guest directly. The guest's call goes through one Go function
// registered on the run's VM (jsrun$sync, taken off the global object by
// the prelude's init before any guest code runs) and blocks the loop
// goroutine, inside the VM call, until the host function answers: the
// function itself runs on its own goroutine, so a function that ignores
// its context still cannot hold the run past its deadline.
//
// A synchronous call takes the next request index (host calls the guest
// awaited before it are dispatched first, so indices stay in call order)
// and the next settlement order: it settles when it returns. Both are
// recorded in the ledger (Sync set), so a resume answers it from there,
// and only if it comes at the same point of the settlement order as
// before; anything else is replay divergence.
//
// A failure that ends the run (a limit, divergence, timeout, abort, an
// attempt to interrupt) is kept in syncFatal and the VM is interrupted:
// the guest gets an error it cannot usefully catch, and the loop never
// enters the VM again (enter and vmError return syncFatal).

// namespaceConfig is one namespace as the prelude's init takes it: [ns,
// fns] or, with synchronous functions, [ns, fns, [isSynchronous...]].
func (inv *invocation) namespaceConfig(ns string, fns []string) []any {
	var flags []bool
	for i, fn := range fns {
		if inv.in.HostFunctions[ns][fn].Synchronous {
			if flags == nil {
				flags = make([]bool, len(fns))
			}
			flags[i] = true
		}
	}
	if flags == nil {
		return []any{ns, fns}
	}
	return []any{ns, fns, flags}
}

// registerSync registers jsrun$sync when the run has synchronous host
// functions, and tells init to take it.
func (inv *invocation) registerSync(cfg *preludeConfig) error {
	for _, fns := range inv.in.HostFunctions {
		for _, h := range fns {
			if h.Synchronous {
				cfg.Sync = true
			}
		}
	}
	if !cfg.Sync {
		return nil
	}
	if err := inv.vm.RegisterFunc("jsrun$sync", inv.syncCall, false); err != nil {
		return newError(CodeInternal, "registering the synchronous bridge: %v", err)
	}
	return nil
}

// failSync ends the run from inside a synchronous call.
func (inv *invocation) failSync(err error) string {
	if inv.syncFatal == nil {
		inv.syncFatal = err
	}
	inv.vm.Interrupt()
	return ""
}

// syncCall is jsrun$sync: pending are the calls the guest awaited since the
// last poll (JSON, "" for none), name and args the synchronous call.
func (inv *invocation) syncCall(pending, name, args string) (out string) {
	defer func() {
		if p := recover(); p != nil {
			out = inv.failSync(newError(CodeInternal, "synchronous host call: %v", p))
		}
	}()
	if inv.syncFatal != nil {
		return ""
	}
	if pending != "" {
		var calls [][3]any
		if err := json.Unmarshal([]byte(pending), &calls); err != nil {
			return inv.failSync(newError(CodeInternal, "bad pending calls: %v", err))
		}
		for _, c := range calls {
			if err := inv.dispatch(c); err != nil {
				return inv.failSync(err)
			}
		}
	}
	index := len(inv.calls) + 1
	if index > inv.lim.HostCalls {
		return inv.failSync(limitError(CodeBridgeLimit, "maxBridgeRequests", "run made more than %d host calls", inv.lim.HostCalls))
	}
	if len(args) > inv.lim.HostArgumentsBytes {
		return inv.failSync(limitError(CodeBridgeLimit, "maxHostFunctionArgumentsBytes", "arguments of %s are %d bytes, over the limit of %d", name, len(args), inv.lim.HostArgumentsBytes))
	}
	inv.syncCalls++
	c := &call{index: index, name: name, args: args}
	inv.calls = append(inv.calls, c)
	inv.newLedger = append(inv.newLedger, ledgerEntry{Name: name, Args: args, Sync: true})
	le := &inv.newLedger[index-1]

	if index <= len(inv.st.Ledger) {
		e := inv.st.Ledger[index-1]
		if !e.Sync || e.Name != name || e.Args != args || e.SettledOrder != inv.oldNext {
			return inv.failSync(newError(CodeProtocol, "replay diverged at host call %d: the ledger has %s with other arguments, another function or another order (%s)", index, e.Name, name))
		}
		c.old = &inv.st.Ledger[index-1]
		inv.oldNext++
		*le = e
		return inv.syncAnswer(le)
	}

	h, ok := inv.lookup(name)
	if !ok || !h.Synchronous {
		le.Error = &ledgerError{Name: "Error", Message: "Unknown host function " + name, Code: string(CodeHostFunction)}
		le.Status = statusRejected
		return inv.syncAnswer(le)
	}
	argsV, err := decodeWire(args)
	if err != nil {
		return inv.failSync(err)
	}
	argv, _ := argsV.([]any)
	cs := &callState{
		info: CallInfo{LogicalRunID: inv.st.LogicalRunID, InvocationID: inv.id, RequestIndex: index,
			RequestID: fmt.Sprintf("%s:sync-%d", inv.id, inv.syncCalls), Function: name, Synchronous: true},
		maxPayload: inv.lim.HostOutputBytes,
	}
	c.live = true
	inv.liveCalls++
	done := make(chan hostResult, 1)
	go func() { done <- inv.invoke(h.Fn, cs, argv) }()
	var hr hostResult
	select {
	case hr = <-done:
	case <-inv.hostCtx.Done():
		if errors.Is(inv.hostCtx.Err(), context.Canceled) {
			return inv.failSync(newError(CodeAborted, "run aborted by the caller"))
		}
		return inv.failSync(inv.timeoutError())
	}
	switch {
	case hr.fatal != nil:
		return inv.failSync(hr.fatal)
	case hr.interrupted:
		return inv.failSync(newError(CodeProtocol, "synchronous host function %s cannot interrupt a run", name))
	case hr.err != nil:
		le.Status, le.Error = statusRejected, hr.err
	default:
		le.Status, le.Value = statusFulfilled, hr.value
	}
	le.DateNowMs = hr.atMs
	return inv.syncAnswer(le)
}

// syncAnswer gives the guest a settled synchronous call and takes its
// place in the settlement order.
func (inv *invocation) syncAnswer(le *ledgerEntry) string {
	le.SettledOrder = inv.releaseSeq
	inv.releaseSeq++
	if le.Status == statusFulfilled {
		return "1" + le.Value
	}
	b, _ := json.Marshal(le.Error)
	return "0" + string(b)
}
