package jsrun

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"modernc.org/libc"
	"modernc.org/libquickjs"
	"modernc.org/quickjs"
)

//go:embed prelude.js
var preludeSource string

var (
	preludeOnce     sync.Once
	preludeBytecode []byte
	preludeErr      error
	// preludeGCThreshold is the GC threshold a context gets once hardened:
	// what QuickJS sets after a collection (1.5 times the heap), for the
	// heap of a hardened context, measured once by compiledPrelude.
	preludeGCThreshold uintptr
)

// hardeningGCThreshold keeps QuickJS from collecting while the prelude runs:
// a fresh context's heap passes the default first threshold (256 KiB)
// during hardening and the collections (≈5% of a fresh run) find next to no
// garbage. The memory limit still applies.
const hardeningGCThreshold = 1 << 40

// freezeMarker is where the generated freeze list goes in the prelude.
const freezeMarker = "/*@jsrun:freeze@*/"

// compiledPrelude prepares the prelude once per process: it runs the
// prelude's discovery walk over the intrinsics in a scratch context, splices
// the straight-line freeze code generated from it into the source, and
// compiles that once; every context evaluates the bytecode.
func compiledPrelude() ([]byte, error) {
	preludeOnce.Do(func() {
		var code string
		if code, preludeErr = discoverFreezeCode(); preludeErr != nil {
			return
		}
		if strings.Count(preludeSource, freezeMarker) != 1 {
			preludeErr = errors.New("jsrun: prelude freeze marker missing")
			return
		}
		src := strings.Replace(preludeSource, freezeMarker, code, 1)
		if preludeBytecode, preludeErr = compileStripped(src); preludeErr != nil {
			return
		}
		var heap int64
		if heap, preludeErr = hardenedHeap(preludeBytecode); preludeErr == nil {
			preludeGCThreshold = uintptr(heap + heap/2)
		}
	})
	return preludeBytecode, preludeErr
}

// hardenedHeap runs the prelude's bytecode in a scratch context and returns
// the runtime's heap size after hardening (JS_ComputeMemoryUsage, which
// modernc.org/quickjs does not expose).
func hardenedHeap(bc []byte) (int64, error) {
	tls := libc.NewTLS()
	defer tls.Close()
	rt := libquickjs.XJS_NewRuntime(tls)
	if rt == 0 {
		return 0, errors.New("jsrun: cannot create a runtime to measure the prelude")
	}
	defer libquickjs.XJS_FreeRuntime(tls, rt)
	libquickjs.XJS_SetGCThreshold(tls, rt, hardeningGCThreshold)
	ctx := libquickjs.XJS_NewContext(tls, rt)
	if ctx == 0 {
		return 0, errors.New("jsrun: cannot create a context to measure the prelude")
	}
	defer libquickjs.XJS_FreeContext(tls, ctx)
	buf := libc.Xmalloc(tls, libc.Tsize_t(len(bc)))
	if buf == 0 {
		return 0, errors.New("jsrun: out of memory measuring the prelude")
	}
	defer libc.Xfree(tls, buf)
	copy(libc.GoBytes(buf, len(bc)), bc)
	obj := libquickjs.XJS_ReadObject(tls, ctx, buf, libquickjs.Tsize_t(len(bc)), libquickjs.MJS_READ_OBJ_BYTECODE)
	if obj.Ftag == libquickjs.EJS_TAG_EXCEPTION {
		return 0, errors.New("jsrun: cannot read the prelude's bytecode")
	}
	fn := libquickjs.XJS_EvalFunction(tls, ctx, obj) // frees obj
	if fn.Ftag == libquickjs.EJS_TAG_EXCEPTION {
		return 0, errors.New("jsrun: cannot evaluate the prelude's bytecode")
	}
	defer libquickjs.XFreeValue(tls, ctx, fn)
	undefined := libquickjs.TJSValue{Ftag: libquickjs.EJS_TAG_UNDEFINED}
	bridge := libquickjs.XJS_Call(tls, ctx, fn, undefined, 0, 0)
	if bridge.Ftag == libquickjs.EJS_TAG_EXCEPTION {
		return 0, errors.New("jsrun: the prelude fails in a scratch context")
	}
	defer libquickjs.XFreeValue(tls, ctx, bridge)
	// The engine writes the usage into libc memory (a Go address could move
	// with the goroutine's stack).
	n := int(unsafe.Sizeof(libquickjs.TJSMemoryUsage{}))
	p := tls.Alloc(n)
	defer tls.Free(n)
	libquickjs.XJS_ComputeMemoryUsage(tls, rt, p)
	size := (*libquickjs.TJSMemoryUsage)(unsafe.Add(nil, p)).Fmalloc_size
	if size <= 0 {
		return 0, errors.New("jsrun: cannot measure the prelude's heap")
	}
	return size, nil
}

// compileStripped compiles the prelude to bytecode without its source text
// and debug information (JS_SetStripInfo on the compiling runtime, which
// modernc.org/quickjs does not expose, hence the direct libquickjs calls).
// With them the bytecode is about 118 KB (every nested function carries its
// own copy of its source), without them about 23 KB, and every context reads
// it: this cuts reading the prelude into a context by about a third. Nothing
// needs the prelude's positions: its frames are cut out of guest stacks by
// name (jsrun$...), and a prelude function a guest can reach (a host
// function) prints as native code instead of the runtime's source.
func compileStripped(src string) ([]byte, error) {
	tls := libc.NewTLS()
	defer tls.Close()
	rt := libquickjs.XJS_NewRuntime(tls)
	if rt == 0 {
		return nil, errors.New("jsrun: cannot create a runtime to compile the prelude")
	}
	defer libquickjs.XJS_FreeRuntime(tls, rt)
	libquickjs.XJS_SetStripInfo(tls, rt, libquickjs.MJS_STRIP_SOURCE|libquickjs.MJS_STRIP_DEBUG)
	ctx := libquickjs.XJS_NewContext(tls, rt)
	if ctx == 0 {
		return nil, errors.New("jsrun: cannot create a context to compile the prelude")
	}
	defer libquickjs.XJS_FreeContext(tls, ctx)
	psrc, err := libc.CString(src)
	if err != nil {
		return nil, err
	}
	defer libc.Xfree(tls, psrc)
	pname, err := libc.CString("<prelude>")
	if err != nil {
		return nil, err
	}
	defer libc.Xfree(tls, pname)
	fn := libquickjs.XJS_Eval(tls, ctx, psrc, libquickjs.Tsize_t(len(src)), pname,
		libquickjs.MJS_EVAL_TYPE_GLOBAL|libquickjs.MJS_EVAL_FLAG_COMPILE_ONLY)
	if fn.Ftag == libquickjs.EJS_TAG_EXCEPTION {
		// The same source compiles in discoverFreezeCode, so this is the
		// generated freeze code; the exception itself is dropped with ctx.
		return nil, errors.New("jsrun: the prelude with its freeze list does not compile")
	}
	defer libquickjs.XFreeValue(tls, ctx, fn)
	size := tls.Alloc(int(unsafe.Sizeof(libquickjs.Tsize_t(0))))
	defer tls.Free(int(unsafe.Sizeof(libquickjs.Tsize_t(0))))
	p := libquickjs.XJS_WriteObject(tls, ctx, size, fn, libquickjs.MJS_WRITE_OBJ_BYTECODE)
	if p == 0 {
		return nil, errors.New("jsrun: cannot write the prelude's bytecode")
	}
	defer libquickjs.Xjs_free(tls, ctx, p)
	// size and p are libc heap addresses (not Go memory), read as the
	// generated libquickjs code reads them.
	n := int(*(*libquickjs.Tsize_t)(unsafe.Add(nil, size)))
	return append([]byte(nil), libc.GoBytes(p, n)...), nil // a copy: p is freed on return
}

// discovery is what the prelude's discovery walk reports: the access path
// of every intrinsic container (in breadth-first order, so a path's parent
// comes before it) and the global bindings that were made read-only.
type discovery struct {
	Paths [][]string `json:"paths"`
	// Globals are [step, isData] pairs.
	Globals [][2]any `json:"globals"`
}

// discoverFreezeCode runs the prelude once in discovery mode and returns the
// JavaScript that repeats what the walk did without walking.
func discoverFreezeCode() (string, error) {
	vm, err := quickjs.NewVM()
	if err != nil {
		return "", err
	}
	defer vm.Close()
	vm.SetWTF8(true)
	fn, err := vm.EvalValue(preludeSource, quickjs.EvalGlobal)
	if err != nil {
		return "", err
	}
	defer fn.Free()
	bridge, err := fn.CallValue(quickjs.UndefinedValue, true)
	if err != nil {
		return "", err
	}
	defer bridge.Free()
	atom, err := vm.NewAtom("discovered")
	if err != nil {
		return "", err
	}
	m, err := bridge.GetPropertyValue(atom)
	if err != nil {
		return "", err
	}
	defer m.Free()
	out, err := m.Call(bridge)
	if err != nil {
		return "", err
	}
	s, _ := out.(string)
	var d discovery
	if err := json.Unmarshal([]byte(s), &d); err != nil || len(d.Paths) == 0 {
		return "", fmt.Errorf("jsrun: prelude discovery returned %q", s)
	}
	return freezeCode(d)
}

var jsIdentRe = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// jsStep renders one path step applied to expression x.
func jsStep(x, step string) (string, error) {
	if step == "" {
		return "", errors.New("jsrun: empty freeze path step")
	}
	kind, rest := step[0], step[1:]
	switch kind {
	case '^':
		return "getPrototypeOf(" + x + ")", nil
	case '.':
		if rest == "__proto__" { // an accessor on Object.prototype, never a data step
			return "", errors.New("jsrun: __proto__ in a freeze path")
		}
		if jsIdentRe.MatchString(rest) {
			return x + "." + rest, nil
		}
		q, _ := json.Marshal(rest)
		return x + "[" + string(q) + "]", nil
	case '@':
		if !jsIdentRe.MatchString(rest) {
			return "", fmt.Errorf("jsrun: bad symbol step %q", step)
		}
		return x + "[S." + rest + "]", nil
	}
	return "", fmt.Errorf("jsrun: bad freeze path step %q", step)
}

// freezeCode generates the body of the prelude's jsrun$freezeKnown: one
// local per container, read from its parent through the path the walk took,
// frozen in the walk's order; then the global bindings made read-only.
func freezeCode(d discovery) (string, error) {
	var b strings.Builder
	index := map[string]int{}
	for i, path := range d.Paths {
		if len(path) == 0 {
			return "", errors.New("jsrun: empty freeze path")
		}
		var expr string
		first := path[0]
		if len(path) == 1 {
			switch {
			case strings.HasPrefix(first, "#"):
				n, err := strconv.Atoi(first[1:])
				if err != nil {
					return "", fmt.Errorf("jsrun: bad hidden step %q", first)
				}
				expr = "hidden[" + strconv.Itoa(n) + "]"
			case strings.HasPrefix(first, ".") || strings.HasPrefix(first, "@"):
				var err error
				if expr, err = jsStep("G", first); err != nil {
					return "", err
				}
			default:
				return "", fmt.Errorf("jsrun: bad freeze path %q", path)
			}
		} else {
			parentKey := strings.Join(path[:len(path)-1], "\x00")
			p, ok := index[parentKey]
			if !ok {
				return "", fmt.Errorf("jsrun: freeze path %q has no parent before it", path)
			}
			var err error
			if expr, err = jsStep("v"+strconv.Itoa(p), path[len(path)-1]); err != nil {
				return "", err
			}
		}
		index[strings.Join(path, "\x00")] = i
		fmt.Fprintf(&b, "const v%d = %s; freeze(v%d);\n", i, expr, i)
	}
	for _, g := range d.Globals {
		step, _ := g[0].(string)
		isData, _ := g[1].(bool)
		if step == "" || (step[0] != '.' && step[0] != '@') {
			return "", fmt.Errorf("jsrun: global binding %v has no access path", g[0])
		}
		var key string
		if step[0] == '.' {
			q, _ := json.Marshal(step[1:])
			key = string(q)
		} else {
			if !jsIdentRe.MatchString(step[1:]) {
				return "", fmt.Errorf("jsrun: bad symbol step %q", step)
			}
			key = "S." + step[1:]
		}
		desc := "NC"
		if isData {
			desc = "RO"
		}
		fmt.Fprintf(&b, "defineProperty(G, %s, %s);\n", key, desc)
	}
	b.WriteString("return true;")
	return b.String(), nil
}

// The guest source becomes the body of this function; the prefix is on the
// source's first line so line numbers need no mapping.
const (
	sourcePrefix = "(async function jsrun$main() {"
	sourceSuffix = "\n})"
)

// invocation is one Run call: one VM, driven only from the goroutine that
// calls run (the loop goroutine). Host functions run on their own goroutines
// and post results on a channel; only VM.Interrupt is called from elsewhere.
type invocation struct {
	r           *Runner
	in          Input
	lim         Limits
	st          *contState
	resolutions map[string]*resolved
	id          string
	ts          *tsProgram // set for TypeScript sources

	vm       *quickjs.VM
	methods  map[string]quickjs.Value
	bridge   quickjs.Value
	deadline time.Time
	timedOut atomic.Bool
	aborted  atomic.Bool

	calls      []*call
	newLedger  []ledgerEntry
	releaseSeq int
	oldNext    int           // next settlement order of the old ledger to release
	oldByOrder map[int]*call // dispatched old-ledger calls waiting for release
	oldSettled int
	inFlight   int
	// liveCalls counts host functions actually called (not answered from
	// the ledger): a failed resume with none gives its token back.
	liveCalls int
	results   chan hostResult
	inline    []hostResult
	hostCtx   context.Context
	// syncCalls counts synchronous host calls (live and replayed);
	// syncFatal is the failure a synchronous call ended the run with (see
	// syncbridge.go).
	syncCalls int
	syncFatal error
	mods      moduleState
}

type call struct {
	index       int
	name        string
	args        string
	old         *ledgerEntry
	live        bool
	interrupted bool
	payload     string
}

type hostResult struct {
	index       int
	value       string
	err         *ledgerError
	interrupted bool
	payload     string
	fatal       error
	atMs        int64
}

func (inv *invocation) run(ctx context.Context) (res *Result, err error) {
	bc, err := compiledPrelude()
	if err != nil {
		return nil, newError(CodeInternal, "compiling prelude: %v", err)
	}
	start := time.Now()
	inv.deadline = start.Add(inv.lim.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(inv.deadline) {
		inv.deadline = d
	}
	hostCtx, cancelHost := context.WithDeadline(ctx, inv.deadline)
	defer cancelHost()
	inv.hostCtx = hostCtx
	inv.results = make(chan hostResult, inv.lim.InFlightHostCalls+1)
	inv.oldByOrder = map[int]*call{}
	for _, e := range inv.st.Ledger {
		if e.Status != statusInterrupted {
			inv.oldSettled++
		}
	}

	h := inv.r.takeHardened()
	if h == nil {
		if h, err = newHardened(bc, time.Until(inv.deadline)); err != nil {
			if time.Now().After(inv.deadline) {
				return nil, inv.timeoutError()
			}
			return nil, newError(CodeInternal, "preparing context: %v", err)
		}
	}
	vm := h.vm
	inv.vm, inv.bridge, inv.methods = vm, h.bridge, h.methods
	defer func() {
		if p := recover(); p != nil {
			// A panic inside the engine abandons the VM; Close still frees
			// what it can, and the run fails instead of the process.
			res, err = nil, newError(CodeInternal, "engine panic: %v", p)
			_ = vm.Close()
			return
		}
		// Freeing a context costs a few hundred µs; the result does not
		// wait for it. Nothing else holds the context any more.
		inv.r.retire(h)
	}()
	vm.SetMemoryLimit(uintptr(inv.lim.MemoryBytes))
	vm.SetMaxStackSize(stackSlots(inv.lim.StackBytes))
	timer := time.AfterFunc(time.Until(inv.deadline), func() {
		inv.timedOut.Store(true)
		vm.Interrupt()
	})
	defer timer.Stop()
	stopAbort := context.AfterFunc(ctx, func() {
		inv.aborted.Store(true)
		vm.Interrupt()
	})
	defer stopAbort()

	if err := inv.setup(); err != nil {
		return nil, err
	}
	res, err = inv.loop(ctx)
	if err != nil {
		inv.keepConsole(err)
	}
	return res, err
}

// consoleGrace bounds the one call that reads the console after a run
// failed, also after its deadline or an abort.
const consoleGrace = 50 * time.Millisecond

// keepConsole puts what the guest logged before a failure into the error.
// After the deadline or an abort it still makes this one call into the VM,
// with a short timeout of its own: the prelude's console method only
// stringifies a string and a boolean it holds (no guest code can run: the
// intrinsics are frozen), and a new call from Go clears the engine's pending
// interrupt.
func (inv *invocation) keepConsole(err error) {
	var e *Error
	if !errors.As(err, &e) {
		return
	}
	if err := inv.vm.SetEvalTimeout(consoleGrace); err != nil {
		return
	}
	raw, cerr := inv.methods["console"].Call(inv.bridge)
	if cerr != nil {
		return
	}
	var res Result
	parseConsole(raw, &res)
	e.Console, e.ConsoleTruncated = res.Console, res.ConsoleTruncated
}

// decode decodes a wire value as this runner's host functions and results
// see it (ordered objects or maps).
func (inv *invocation) decode(wire string) (any, error) {
	return decodeWireAs(wire, inv.r.cfg.OrderedObjects)
}

// enter is called before every call into the VM: it never re-enters after
// the deadline or an abort, and re-arms the engine's own timeout.
func (inv *invocation) enter() error {
	if inv.syncFatal != nil {
		return inv.syncFatal
	}
	if inv.aborted.Load() {
		return newError(CodeAborted, "run aborted by the caller")
	}
	remaining := time.Until(inv.deadline)
	if remaining <= 0 || inv.timedOut.Load() {
		return inv.timeoutError()
	}
	return inv.vm.SetEvalTimeout(remaining)
}

func (inv *invocation) timeoutError() *Error {
	return limitError(CodeTimeout, "timeoutMs", "run exceeded its time limit of %s", inv.lim.Timeout)
}

// vmError classifies an error out of the engine.
func (inv *invocation) vmError(err error) error {
	if inv.syncFatal != nil {
		return inv.syncFatal
	}
	if inv.aborted.Load() {
		return newError(CodeAborted, "run aborted by the caller")
	}
	if inv.timedOut.Load() || !time.Now().Before(inv.deadline) {
		return inv.timeoutError()
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "out of memory") || msg == "OOM":
		return limitError(CodeMemoryLimit, "memoryLimitBytes", "run exceeded its memory limit of %d bytes", inv.lim.MemoryBytes)
	case strings.Contains(msg, "stack overflow"):
		return limitError(CodeStackOverflow, "maxStackSizeBytes", "run exceeded its stack limit")
	case strings.Contains(msg, "interrupted"):
		return inv.timeoutError()
	}
	return &Error{Code: CodeInternal, Name: "RunError", Message: "engine error: " + msg, cause: err}
}

func (inv *invocation) call(method string, args ...any) (any, error) {
	if err := inv.enter(); err != nil {
		return nil, err
	}
	r, err := inv.methods[method].Call(inv.bridge, args...)
	if err != nil {
		return nil, inv.vmError(err)
	}
	return r, nil
}

// preludeConfig is what init receives: the per-run part of the setup.
type preludeConfig struct {
	Namespaces [][]any `json:"namespaces"`
	DateNowMs  int64   `json:"dateNowMs"`
	Seed       string  `json:"seed"`
	ConsoleMax int     `json:"consoleMax"`
	// MaxArgumentsBytes: the guest fails a call with larger arguments
	// itself, with an error it can catch.
	MaxArgumentsBytes int `json:"maxArgumentsBytes"`
	// Sync: some host functions are synchronous (see syncbridge.go).
	Sync bool `json:"sync,omitempty"`
}

func (inv *invocation) setup() error {
	vm := inv.vm
	cfg := preludeConfig{Namespaces: [][]any{}, DateNowMs: inv.st.DateNowMs, Seed: inv.st.RandomSeed, ConsoleMax: inv.lim.ConsoleBytes,
		MaxArgumentsBytes: inv.lim.HostArgumentsBytes}
	nss := make([]string, 0, len(inv.in.HostFunctions))
	for ns := range inv.in.HostFunctions {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		fns := make([]string, 0, len(inv.in.HostFunctions[ns]))
		for f := range inv.in.HostFunctions[ns] {
			fns = append(fns, f)
		}
		sort.Strings(fns)
		cfg.Namespaces = append(cfg.Namespaces, inv.namespaceConfig(ns, fns))
	}
	if err := inv.registerSync(&cfg); err != nil {
		return err
	}
	cfgJSON, _ := json.Marshal(cfg)
	if _, err := inv.call("init", string(cfgJSON)); err != nil {
		return err
	}

	if inv.mods.module {
		inv.mods.entryPending = true
		inv.mods.entryJS = inv.in.Source
		if inv.ts != nil {
			inv.mods.entryJS = inv.ts.js
		}
	}
	inv.setupModules()
	if err := inv.enter(); err != nil {
		return err
	}
	main, err := vm.EvalValue(inv.program(), quickjs.EvalGlobal)
	if err != nil {
		var qe *quickjs.Error
		if errors.As(err, &qe) && (qe.Name == "SyntaxError" || qe.Name == "") && !inv.timedOut.Load() {
			line, col := qe.LineNumber, qe.ColumnNumber
			if inv.ts != nil {
				line, col, _ = inv.ts.position(line, col)
			}
			if line == 1 {
				col -= len(sourcePrefix)
			}
			return syntaxError(qe.Message, line, col, err)
		}
		return inv.vmError(err)
	}
	defer main.Free()
	if _, err := inv.call("start", main); err != nil {
		return err
	}
	return nil
}

type pollResult struct {
	calls   [][3]any
	outcome int
}

func (inv *invocation) poll() (pollResult, error) {
	raw, err := inv.call("poll")
	if err != nil {
		return pollResult{}, err
	}
	switch n := raw.(type) {
	case int:
		return pollResult{outcome: n}, nil
	case int32:
		return pollResult{outcome: int(n)}, nil
	case int64:
		return pollResult{outcome: int(n)}, nil
	case float64:
		return pollResult{outcome: int(n)}, nil
	}
	s, _ := raw.(string)
	var p [2]json.RawMessage
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return pollResult{}, newError(CodeInternal, "bad poll reply: %v", err)
	}
	var out pollResult
	if err := json.Unmarshal(p[0], &out.calls); err != nil {
		return pollResult{}, newError(CodeInternal, "bad poll calls: %v", err)
	}
	if err := json.Unmarshal(p[1], &out.outcome); err != nil {
		return pollResult{}, newError(CodeInternal, "bad poll outcome: %v", err)
	}
	return out, nil
}

// drain runs queued jobs until the queue is empty.
func (inv *invocation) drain() error {
	for {
		if err := inv.enter(); err != nil {
			return err
		}
		n, err := inv.vm.ExecutePendingJobs()
		if err != nil {
			return inv.vmError(err)
		}
		if n == 0 {
			return nil
		}
	}
}

func (inv *invocation) loop(ctx context.Context) (*Result, error) {
	for {
		if err := inv.drain(); err != nil {
			return nil, err
		}
		p, err := inv.poll()
		if err != nil {
			return nil, err
		}
		for _, c := range p.calls {
			if err := inv.dispatch(c); err != nil {
				return nil, err
			}
		}
		if len(p.calls) > 0 {
			continue // dispatching may have queued inline results or jobs
		}
		if p.outcome != 0 {
			return inv.finish(p.outcome)
		}
		if c := inv.oldByOrder[inv.oldNext]; c != nil {
			delete(inv.oldByOrder, inv.oldNext)
			inv.oldNext++
			if err := inv.releaseOld(c); err != nil {
				return nil, err
			}
			continue
		}
		if len(inv.inline) > 0 {
			hr := inv.inline[0]
			inv.inline = inv.inline[1:]
			if err := inv.apply(hr); err != nil {
				return nil, err
			}
			continue
		}
		if inv.inFlight > 0 {
			wait := time.NewTimer(time.Until(inv.deadline))
			select {
			case hr := <-inv.results:
				wait.Stop()
				if err := inv.apply(hr); err != nil {
					return nil, err
				}
				continue
			case <-wait.C:
				return nil, inv.timeoutError()
			case <-ctx.Done():
				wait.Stop()
				return nil, newError(CodeAborted, "run aborted by the caller")
			}
		}
		// Quiescent: nothing queued, nothing in flight, the guest not done.
		if inv.oldNext < inv.oldSettled {
			return nil, newError(CodeProtocol, "replay diverged: the run stopped before consuming the ledger (%d of %d answers released)", inv.oldNext, inv.oldSettled)
		}
		if inv.hasInterruptions() {
			return inv.interrupted()
		}
		return nil, limitError(CodeTimeout, "timeoutMs", "run can never finish: it awaits a promise that nothing can settle")
	}
}

func (inv *invocation) hasInterruptions() bool {
	for _, c := range inv.calls {
		if c.interrupted {
			return true
		}
	}
	return false
}

func (inv *invocation) dispatch(raw [3]any) error {
	idxF, _ := raw[0].(float64)
	name, _ := raw[1].(string)
	args, _ := raw[2].(string)
	index := int(idxF)
	if index != len(inv.calls)+1 {
		return newError(CodeInternal, "host call %d out of sequence", index)
	}
	if index > inv.lim.HostCalls {
		return limitError(CodeBridgeLimit, "maxBridgeRequests", "run made more than %d host calls", inv.lim.HostCalls)
	}
	if len(args) > inv.lim.HostArgumentsBytes {
		return limitError(CodeBridgeLimit, "maxHostFunctionArgumentsBytes", "arguments of %s are %d bytes, over the limit of %d", name, len(args), inv.lim.HostArgumentsBytes)
	}
	c := &call{index: index, name: name, args: args}
	inv.calls = append(inv.calls, c)
	inv.newLedger = append(inv.newLedger, ledgerEntry{Name: name, Args: args, SettledOrder: -1})
	if index <= len(inv.st.Ledger) {
		e := &inv.st.Ledger[index-1]
		if e.Name != name || e.Args != args || e.Sync {
			return newError(CodeProtocol, "replay diverged at host call %d: the ledger has %s with other arguments or another function (%s)", index, e.Name, name)
		}
		c.old = e
		switch e.Status {
		case statusFulfilled, statusRejected:
			inv.oldByOrder[e.SettledOrder] = c
			return nil
		case statusInterrupted:
			res := inv.resolutions[e.InterruptionID]
			if res == nil {
				c.interrupted, c.payload = true, e.Payload
				inv.markInterrupted(c)
				return nil
			}
			var payload any
			if e.Payload != "" {
				payload, _ = inv.decode(e.Payload)
			}
			return inv.startLive(c, &ResumeInfo{InterruptionID: e.InterruptionID, Payload: payload, Resolution: res.value})
		}
	}
	return inv.startLive(c, nil)
}

func (inv *invocation) markInterrupted(c *call) {
	le := &inv.newLedger[c.index-1]
	le.Status = statusInterrupted
	le.InterruptionID = interruptionID(c.index)
	le.Payload = c.payload
	le.SettledOrder = -1
}

func (inv *invocation) lookup(name string) (HostFunc, bool) {
	ns, fn, ok := strings.Cut(name, ".")
	if !ok {
		return HostFunc{}, false
	}
	h, ok := inv.in.HostFunctions[ns][fn]
	return h, ok && h.Fn != nil
}

func (inv *invocation) startLive(c *call, resume *ResumeInfo) error {
	h, ok := inv.lookup(c.name)
	if !ok {
		inv.inline = append(inv.inline, hostResult{index: c.index, err: &ledgerError{Name: "Error", Message: "Unknown host function " + c.name, Code: string(CodeHostFunction)}, atMs: inv.r.cfg.Now().UnixMilli()})
		return nil
	}
	if inv.inFlight >= inv.lim.InFlightHostCalls {
		return limitError(CodeBridgeLimit, "maxInFlightBridgeRequests", "more than %d host calls in flight", inv.lim.InFlightHostCalls)
	}
	args, err := inv.decode(c.args)
	if err != nil {
		return err
	}
	argv, _ := args.([]any)
	cs := &callState{
		info: CallInfo{LogicalRunID: inv.st.LogicalRunID, InvocationID: inv.id, RequestIndex: c.index,
			RequestID: fmt.Sprintf("%s:bridge-%d", inv.id, c.index-inv.syncCalls), Function: c.name, Resume: resume},
		maxPayload: inv.lim.HostOutputBytes,
	}
	c.live = true
	inv.liveCalls++
	if h.Sync {
		inv.inline = append(inv.inline, inv.invoke(h.Fn, cs, argv))
		return nil
	}
	inv.inFlight++
	go func() {
		// The channel has room for every call in flight, so this never
		// blocks, even after the loop has stopped reading.
		inv.results <- inv.invoke(h.Fn, cs, argv)
	}()
	return nil
}

// invoke calls a host function, recovering a panic, and serializes its
// answer. It runs on the host goroutine (or inline for Sync functions).
func (inv *invocation) invoke(fn Func, cs *callState, args []any) (hr hostResult) {
	hr.index = cs.info.RequestIndex
	defer func() {
		if p := recover(); p != nil {
			inv.r.log.Error("jsrun: host function panicked", "function", cs.info.Function, "panic", p)
			hr.value, hr.interrupted = "", false
			hr.err = &ledgerError{Name: "Error", Message: "Host function failed.", Code: string(CodeHostFunction)}
		}
		hr.atMs = inv.r.cfg.Now().UnixMilli()
	}()
	ctx := context.WithValue(inv.hostCtx, callKey{}, cs)
	v, err := fn(ctx, args)
	cs.mu.Lock()
	interrupted, payload, ierr := cs.interrupted, cs.payload, cs.err
	cs.mu.Unlock()
	if ierr != nil {
		hr.fatal = ierr
		return hr
	}
	if interrupted {
		hr.interrupted, hr.payload = true, payload
		return hr
	}
	if err != nil {
		hr.err = inv.r.hostFailure(cs.info.Function, err)
		return hr
	}
	wire, werr := encodeWire(v, "result of "+cs.info.Function)
	if werr != nil {
		var je *Error
		msg := werr.Error()
		if errors.As(werr, &je) {
			msg = je.Message
		}
		hr.err = &ledgerError{Name: "TypeError", Message: msg, Code: string(CodeSerialization)}
		return hr
	}
	if len(wire) > inv.lim.HostOutputBytes {
		// The guest gets an error it can catch; the run goes on.
		hr.err = &ledgerError{Name: "RunError", Message: fmt.Sprintf("Host function output exceeds the %d byte size limit.", inv.lim.HostOutputBytes), Code: string(CodeBridgeLimit)}
		return hr
	}
	hr.value = wire
	return hr
}

// apply delivers a live host result to the guest.
func (inv *invocation) apply(hr hostResult) error {
	c := inv.calls[hr.index-1]
	if c.live && inv.inFlight > 0 && !inv.isInline(hr) {
		inv.inFlight--
	}
	if hr.fatal != nil {
		return hr.fatal
	}
	if hr.interrupted {
		c.interrupted, c.payload = true, hr.payload
		inv.markInterrupted(c)
		return nil
	}
	le := &inv.newLedger[hr.index-1]
	le.DateNowMs = hr.atMs
	if hr.err != nil {
		le.Status, le.Error = statusRejected, hr.err
	} else {
		le.Status, le.Value = statusFulfilled, hr.value
	}
	return inv.settle(c, le)
}

func (inv *invocation) isInline(hr hostResult) bool {
	h, ok := inv.lookup(inv.calls[hr.index-1].name)
	return !ok || h.Sync
}

// releaseOld answers a replayed call from the ledger.
func (inv *invocation) releaseOld(c *call) error {
	le := &inv.newLedger[c.index-1]
	*le = *c.old
	return inv.settle(c, le)
}

func (inv *invocation) settle(c *call, le *ledgerEntry) error {
	le.SettledOrder = inv.releaseSeq
	inv.releaseSeq++
	if le.Status == statusFulfilled {
		_, err := inv.call("settle", c.index, true, le.Value, le.DateNowMs)
		return err
	}
	b, _ := json.Marshal(le.Error)
	_, err := inv.call("settle", c.index, false, string(b), le.DateNowMs)
	return err
}

type guestErrorInfo struct {
	Name      string `json:"name"`
	Message   string `json:"message"`
	Code      string `json:"code"`
	GuestCode string `json:"guestCode"`
	Stack     string `json:"stack"`
	Null      bool   `json:"null"`
}

func (inv *invocation) finish(outcome int) (*Result, error) {
	if outcome == 3 {
		name, _ := inv.call("detached")
		return nil, &Error{Code: CodeDetachedRequest, Name: "RunError", Details: map[string]any{"name": name, "status": "idle"},
			Message: fmt.Sprintf("the run returned with a host call it never awaited: %v", name)}
	}
	if outcome == 1 {
		// Inline (Sync) calls answered but not yet delivered: one that
		// interrupted is recorded (as in the Run SDK, whose interruptions
		// arrive before the return is handled); one that has a value was
		// pending when the guest returned.
		pendingInline := 0
		for _, hr := range inv.inline {
			if hr.interrupted && hr.fatal == nil {
				if err := inv.apply(hr); err != nil {
					return nil, err
				}
				continue
			}
			pendingInline++
		}
		inv.inline = nil
		if n := inv.inFlight + pendingInline; n > 0 {
			return nil, &Error{Code: CodeDetachedRequest, Name: "RunError", Details: map[string]any{"pending": n},
				Message: fmt.Sprintf("the run returned while %d host calls were still pending", n)}
		}
		if inv.oldNext < inv.oldSettled {
			return nil, newError(CodeProtocol, "replay diverged: the run finished before consuming the ledger (%d of %d answers released)", inv.oldNext, inv.oldSettled)
		}
		if inv.hasInterruptions() {
			return inv.interrupted()
		}
	}
	raw, err := inv.call("finish")
	if err != nil {
		return nil, err
	}
	s, _ := raw.(string)
	var out [2]json.RawMessage
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, newError(CodeInternal, "bad finish reply: %v", err)
	}
	if string(out[0]) == "1" {
		var wire string
		if err := json.Unmarshal(out[1], &wire); err != nil {
			return nil, newError(CodeInternal, "bad result: %v", err)
		}
		if len(wire) > inv.lim.ResultBytes {
			return nil, limitError(CodeResultTooLarge, "maxResultBytes", "result is %d bytes, over the limit of %d", len(wire), inv.lim.ResultBytes)
		}
		v, err := inv.decode(wire)
		if err != nil {
			return nil, err
		}
		res := &Result{Status: StatusCompleted, Value: v}
		inv.console(res)
		return res, nil
	}
	var gi guestErrorInfo
	if err := json.Unmarshal(out[1], &gi); err != nil {
		return nil, newError(CodeInternal, "bad error reply: %v", err)
	}
	return nil, inv.guestError(gi)
}

func (inv *invocation) guestError(gi guestErrorInfo) error {
	// An uncaught null: what QuickJS throws when it runs out of memory while
	// creating its "out of memory" error (a guest's own throw null looks the
	// same, and is reported the same way).
	if gi.Null || (gi.Name == "InternalError" && strings.Contains(gi.Message, "out of memory")) {
		return limitError(CodeMemoryLimit, "memoryLimitBytes", "run exceeded its memory limit of %d bytes", inv.lim.MemoryBytes)
	}
	if (gi.Name == "InternalError" || gi.Name == "RangeError") && strings.Contains(gi.Message, "stack overflow") {
		return limitError(CodeStackOverflow, "maxStackSizeBytes", "run exceeded its stack limit")
	}
	code := Code(gi.Code)
	e := &Error{Code: code, Name: gi.Name, Message: gi.Message, GuestCode: gi.GuestCode, Stack: inv.mapStack(gi.Stack)}
	inv.entrySyntaxError(e)
	switch code {
	case CodeSerialization, CodeHostFunction, CodeBridgeLimit:
		// A runtime error the guest did not catch: still a typed failure.
		e.Guest = false
	default:
		e.Guest = true
	}
	return e
}

// frameRe matches one stack frame: "    at f (file:line:col)" or, for a
// syntax error, "    at file:line:col".
var frameRe = regexp.MustCompile(`^(\s*at (?:[^(]* \()?)(.*):(\d+):(\d+)(\)?)$`)

// mapStack keeps the guest's frames, names its own source "<source>" with
// positions in it (in the TypeScript as written, on the first line without
// the function wrapper's prefix), and maps frames of loaded TypeScript
// modules back to their TypeScript.
func (inv *invocation) mapStack(stack string) string {
	var b strings.Builder
	for _, line := range strings.Split(stack, "\n") {
		if line == "" || (strings.Contains(line, "jsrun$") && !strings.Contains(line, "jsrun$main")) {
			continue
		}
		line = strings.Replace(line, "jsrun$main", "<main>", 1)
		if sub := frameRe.FindStringSubmatch(line); sub != nil {
			file := sub[2]
			ln, _ := strconv.Atoi(sub[3])
			col, _ := strconv.Atoi(sub[4])
			switch {
			case file == evalFileName && !inv.mods.module:
				if inv.ts != nil {
					ln, col, _ = inv.ts.position(ln, col)
				}
				if ln == 1 {
					col -= len(sourcePrefix)
				}
				file = "<source>"
			case file == EntryModule && inv.mods.module:
				if inv.ts != nil {
					ln, col, _ = inv.ts.position(ln, col)
				}
				file = "<source>"
			case inv.mods.ts[file] != nil:
				ln, col, _ = inv.mods.ts[file].position(ln, col)
			}
			line = fmt.Sprintf("%s%s:%d:%d%s", sub[1], file, ln, col, sub[5])
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// entrySyntaxError adds the position of a module source's syntax error.
func (inv *invocation) entrySyntaxError(e *Error) {
	if !inv.mods.module || e.Name != "SyntaxError" {
		return
	}
	first, _, _ := strings.Cut(e.Stack, "\n")
	sub := frameRe.FindStringSubmatch(first)
	if sub == nil || sub[2] != "<source>" {
		return
	}
	ln, _ := strconv.Atoi(sub[3])
	col, _ := strconv.Atoi(sub[4])
	e.Details = map[string]any{"line": ln, "column": col}
}

func (inv *invocation) console(res *Result) {
	raw, err := inv.call("console")
	if err != nil {
		return
	}
	parseConsole(raw, res)
}

func parseConsole(raw any, res *Result) {
	s, _ := raw.(string)
	var out []json.RawMessage
	if json.Unmarshal([]byte(s), &out) != nil || len(out) != 2 {
		return
	}
	_ = json.Unmarshal(out[0], &res.Console)
	_ = json.Unmarshal(out[1], &res.ConsoleTruncated)
}

func (inv *invocation) interrupted() (*Result, error) {
	res := &Result{Status: StatusInterrupted}
	for _, c := range inv.calls {
		if !c.interrupted {
			continue
		}
		args, err := inv.decode(c.args)
		if err != nil {
			return nil, err
		}
		var payload any = Undefined{}
		if c.payload != "" {
			if payload, err = inv.decode(c.payload); err != nil {
				return nil, err
			}
		}
		argv, _ := args.([]any)
		res.Interruptions = append(res.Interruptions, Interruption{
			ID: interruptionID(c.index), HostFunctionName: c.name, Arguments: argv, Payload: payload,
		})
	}
	inv.console(res)
	return res, nil
}
