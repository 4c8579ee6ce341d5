package jsrun

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// syncTools are synchronous host functions next to the async tools.
func syncTools(calls *atomic.Int64) map[string]Namespace {
	hf := tools(calls)
	hf["fs"] = Namespace{
		// read blocks on the host (as an async host API would) and
		// returns its value straight to the guest.
		"read": Synchronous(func(ctx context.Context, args []any) (any, error) {
			calls.Add(1)
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			info, _ := CallInfoFrom(ctx)
			return map[string]any{"path": args[0], "id": info.RequestID, "index": float64(info.RequestIndex), "sync": info.Synchronous}, nil
		}),
		"missing": Synchronous(func(ctx context.Context, args []any) (any, error) {
			calls.Add(1)
			return nil, NewUserError("ENOENT", "no such file: "+args[0].(string))
		}),
		"broken": Synchronous(func(ctx context.Context, args []any) (any, error) {
			calls.Add(1)
			return nil, errors.New("disk controller on fire")
		}),
		"ask": Synchronous(func(ctx context.Context, args []any) (any, error) {
			calls.Add(1)
			return nil, Interrupt(ctx, "may I?")
		}),
	}
	hf["tools"]["id"] = Async(func(ctx context.Context, args []any) (any, error) {
		info, _ := CallInfoFrom(ctx)
		return info.RequestID, nil
	})
	return hf
}

func TestSynchronousHostFunctions(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	res := mustRun(t, r, Input{Source: `
		const a = fs.read('/a');
		const kind = typeof a.then;
		const b = await tools.id();
		const c = fs.read('/c');
		return {a, kind, b, c}`, HostFunctions: syncTools(&calls)})
	v := res.Value.(map[string]any)
	a, c := v["a"].(map[string]any), v["c"].(map[string]any)
	if v["kind"] != "undefined" || a["path"] != "/a" || c["path"] != "/c" || a["sync"] != true {
		t.Fatalf("synchronous calls did not return values: %+v", v)
	}
	// Request indices are shared, in call order; IDs as the Run SDK's.
	if a["index"] != 1.0 || c["index"] != 3.0 || !strings.HasSuffix(a["id"].(string), ":sync-1") ||
		!strings.HasSuffix(v["b"].(string), ":bridge-1") || !strings.HasSuffix(c["id"].(string), ":sync-2") {
		t.Fatalf("request identity: %+v", v)
	}
	if !strings.HasPrefix(a["id"].(string), "run-") || strings.Split(a["id"].(string), ":")[0] != strings.Split(v["b"].(string), ":")[0] {
		t.Fatalf("request IDs do not share the invocation ID: %+v", v)
	}
}

func TestSynchronousCallsAwaitedCallsInOrder(t *testing.T) {
	// Calls the guest awaited (not yet polled) are dispatched before a
	// synchronous call, so indices follow the program.
	r := newTestRunner(t)
	var calls atomic.Int64
	res := mustRun(t, r, Input{Source: `
		const p = tools.sum(1, 2).then((x) => x);
		const q = tools.sum(3, 4).then((x) => x);
		const s = fs.read('/s');
		return [await p, await q, s.index]`, HostFunctions: syncTools(&calls)})
	v := res.Value.([]any)
	if v[0] != 3.0 || v[1] != 7.0 || v[2] != 3.0 {
		t.Fatalf("got %v", v)
	}
}

func TestSynchronousErrors(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := syncTools(&calls)
	res := mustRun(t, r, Input{Source: `
		const out = [];
		for (const f of [() => fs.missing('x.txt'), () => fs.broken(), () => fs.read(() => 1)]) {
			try { f(); out.push('no error') } catch (e) { out.push([e.name, e.message, e.code]) }
		}
		return out`, HostFunctions: hf})
	want := [][]any{{"Error", "no such file: x.txt", "ENOENT"}, {"Error", "Host function failed.", "RUN_HOST_FUNCTION_ERROR"},
		{"TypeError", "Cannot serialize a function at arguments[0]", "RUN_SERIALIZATION_ERROR"}}
	got := res.Value.([]any)
	for i := range want {
		g := got[i].([]any)
		for j := range want[i] {
			if g[j] != want[i][j] {
				t.Fatalf("case %d: got %v, want %v", i, g, want[i])
			}
		}
	}
	// Uncaught: the host's code, and a stack that starts at the guest's call.
	_, err := r.Run(context.Background(), Input{Source: "const x = 1;\nfs.missing('y')", HostFunctions: hf})
	e := wantCode(t, err, "ENOENT")
	if !strings.Contains(e.Stack, "(<source>:2:") || strings.Contains(e.Stack, "missing") {
		t.Fatalf("stack %q", e.Stack)
	}
}

func TestSynchronousCannotInterrupt(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	_, err := r.Run(context.Background(), Input{Source: `try { fs.ask() } catch (e) { return 'caught ' + e.message }`, HostFunctions: syncTools(&calls)})
	if e := wantCode(t, err, CodeProtocol); !strings.Contains(e.Message, "fs.ask cannot interrupt") {
		t.Fatalf("message %q", e.Message)
	}
}

func TestSynchronousSharesTheBridgeLimit(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	_, err := r.Run(context.Background(), Input{Source: `
		await tools.sum(1); await tools.sum(2);
		try { fs.read('a'); fs.read('b') } catch (e) { return 'caught' }`,
		HostFunctions: syncTools(&calls), Limits: Limits{HostCalls: 3}})
	wantCode(t, err, CodeBridgeLimit)
	if calls.Load() != 3 {
		t.Fatalf("%d host calls ran, want 3", calls.Load())
	}
	_, err = r.Run(context.Background(), Input{Source: `fs.read('x'.repeat(2000))`,
		HostFunctions: syncTools(&calls), Limits: Limits{HostArgumentsBytes: 1000}})
	wantCode(t, err, CodeBridgeLimit)
}

func TestSynchronousCancellation(t *testing.T) {
	r := newTestRunner(t)
	started := make(chan struct{}, 1)
	cancelled := make(chan error, 1)
	release := make(chan struct{})
	defer close(release)
	hf := map[string]Namespace{"h": {
		"wait": Synchronous(func(ctx context.Context, args []any) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			cancelled <- ctx.Err()
			return nil, ctx.Err()
		}),
		// stuck ignores its context: the run must still end.
		"stuck": Synchronous(func(ctx context.Context, args []any) (any, error) {
			<-release
			return 1, nil
		}),
	}}
	hostCtxErr := func() error {
		select {
		case err := <-cancelled:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("the host function was not called, or its context not cancelled")
		}
		return nil
	}
	// The time limit leaves room to prepare a context under -race.
	_, err := r.Run(context.Background(), Input{Source: `try { h.wait() } catch (e) {} for (;;) {}`, HostFunctions: hf, Limits: Limits{Timeout: 2 * time.Second}})
	wantCode(t, err, CodeTimeout)
	<-started
	if err := hostCtxErr(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("host context ended with %v", err)
	}
	_, err = r.Run(context.Background(), Input{Source: `return h.stuck()`, HostFunctions: hf, Limits: Limits{Timeout: 200 * time.Millisecond}})
	wantCode(t, err, CodeTimeout)

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err = r.Run(ctx, Input{Source: `h.wait()`, HostFunctions: hf})
	wantCode(t, err, CodeAborted)
	if err := hostCtxErr(); !errors.Is(err, context.Canceled) {
		t.Fatalf("host context ended with %v", err)
	}
}

func TestSynchronousReplay(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := syncTools(&calls)
	src := `
		const before = fs.read('/before');
		const [x, y] = await Promise.all([tools.sleep(20, 'slow'), tools.sum(1, 1)]);
		const mid = fs.read('/mid');
		const ok = await tools.approve(x + y);
		const after = fs.read('/after');
		return [before.index, x, y, mid.index, ok, after.index, Date.now() > 0]`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	if res.Status != StatusInterrupted {
		t.Fatalf("want interrupted: %+v", res)
	}
	n := calls.Load()
	if n != 5 {
		t.Fatalf("first round made %d host calls, want 5", n)
	}
	out := mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, "yes")})
	got := out.Value.([]any)
	want := []any{1.0, "slow", 2.0, 4.0, "yes", 6.0, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	// Replayed: the approval again (resolved) and the new read only.
	if calls.Load()-n != 2 {
		t.Fatalf("resume made %d host calls, want 2", calls.Load()-n)
	}
}

func TestSynchronousReplayDivergence(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := syncTools(&calls)
	src := `const a = fs.read('/a'); const b = await tools.sum(1); return await tools.approve([a.index, b])`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	st, err := r.codec.decode(res.Continuation)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Ledger[0].Sync || st.Ledger[1].Sync || st.Ledger[0].SettledOrder != 0 || st.Ledger[1].SettledOrder != 1 {
		t.Fatalf("ledger %+v", st.Ledger)
	}
	// A ledger whose synchronous answer comes later than it can is refused.
	st.Ledger[0].SettledOrder, st.Ledger[1].SettledOrder = 1, 0
	tok, _, err := r.codec.encode(st)
	if err != nil {
		t.Fatal(err)
	}
	before := calls.Load()
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: tok, Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeProtocol)
	// So is an asynchronous entry where a synchronous call comes.
	st.Ledger[0].SettledOrder, st.Ledger[1].SettledOrder = 0, 1
	st.Ledger[0].Sync = false
	tok, _, _ = r.codec.encode(st)
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: tok, Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeProtocol)
	if calls.Load() != before {
		t.Fatal("a diverging replay called a host function")
	}
	// A function that changes kind does not resume the token.
	hf2 := syncTools(&calls)
	hf2["fs"]["read"] = Async(hf2["fs"]["read"].Fn)
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: hf2, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeProtocol)
}

func TestSynchronousBridgeIsHidden(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	res := mustRun(t, r, Input{Source: `
		const names = Object.getOwnPropertyNames(globalThis).filter((n) => n.startsWith('jsrun'));
		return [typeof jsrun$sync, names.length, Object.keys(fs).join(','), fs.read.name, fs.read.length]`,
		HostFunctions: syncTools(&calls)})
	got := res.Value.([]any)
	if got[0] != "undefined" || got[1] != 0.0 || got[2] != "ask,broken,missing,read" || got[3] != "read" {
		t.Fatalf("got %v", got)
	}
}

// TestSynchronousOnPrewarmedContexts: the bridge is registered per run, also
// on a context hardened before the run was known.
func TestSynchronousOnPrewarmedContexts(t *testing.T) {
	r := newTestRunner(t, func(c *Config) { c.Prewarm = 2 })
	defer r.Close()
	var calls atomic.Int64
	hf := syncTools(&calls)
	for i := range 6 {
		if i > 0 {
			time.Sleep(20 * time.Millisecond) // let the pool refill
		}
		res := mustRun(t, r, Input{Source: `return [fs.read('/x').index, typeof jsrun$sync]`, HostFunctions: hf})
		if v := res.Value.([]any); v[0] != 1.0 || v[1] != "undefined" {
			t.Fatalf("run %d: %v", i, v)
		}
		// A run without synchronous functions on the next context.
		if res := mustRun(t, r, Input{Source: `return typeof jsrun$sync`}); res.Value != "undefined" {
			t.Fatalf("run %d: %v", i, res.Value)
		}
	}
}
