package jsrun

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef-test")

func newTestRunner(t testing.TB, mod ...func(*Config)) *Runner {
	t.Helper()
	cfg := Config{Secret: testSecret, Store: NewMemoryStore()}
	for _, m := range mod {
		m(&cfg)
	}
	r, err := NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustRun(t *testing.T, r *Runner, in Input) *Result {
	t.Helper()
	res, err := r.Run(context.Background(), in)
	if err != nil {
		t.Fatalf("run %q: %v", in.Source, err)
	}
	return res
}

func wantCode(t *testing.T, err error, code Code) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want error %s, got %v", code, err)
	}
	if e.Code != code {
		t.Fatalf("want error %s, got %s: %s", code, e.Code, e.Message)
	}
	return e
}

func num(v any) float64 { f, _ := v.(float64); return f }

// tools returns host functions that count their calls.
func tools(calls *atomic.Int64) map[string]Namespace {
	return map[string]Namespace{"tools": {
		"sum": Async(func(ctx context.Context, args []any) (any, error) {
			calls.Add(1)
			s := 0.0
			for _, a := range args {
				s += num(a)
			}
			return s, nil
		}),
		"echo": Sync(func(ctx context.Context, args []any) (any, error) {
			calls.Add(1)
			return args, nil
		}),
		"approve": Async(func(ctx context.Context, args []any) (any, error) {
			calls.Add(1)
			if r := ResumeFrom(ctx); r != nil {
				return r.Resolution, nil
			}
			return nil, Interrupt(ctx, map[string]any{"action": args[0]})
		}),
		"fail": Async(func(ctx context.Context, args []any) (any, error) {
			calls.Add(1)
			if len(args) > 0 && args[0] == "user" {
				return nil, &UserError{Name: "QuotaError", Message: "quota exceeded", Code: "E_QUOTA"}
			}
			return nil, errors.New("database password is hunter2")
		}),
		"sleep": Async(func(ctx context.Context, args []any) (any, error) {
			calls.Add(1)
			select {
			case <-time.After(time.Duration(num(args[0])) * time.Millisecond):
				return args[1], nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}),
		"panic": Async(func(ctx context.Context, args []any) (any, error) {
			panic("boom")
		}),
		"info": Sync(func(ctx context.Context, args []any) (any, error) {
			info, _ := CallInfoFrom(ctx)
			return map[string]any{"index": info.RequestIndex, "fn": info.Function, "run": info.LogicalRunID}, nil
		}),
	}}
}

func TestCompletion(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	cases := []struct {
		name, src string
		want      any
	}{
		{"01 arithmetic", "return 1+1", 2.0},
		{"02 no return", "1+1", Undefined{}},
		{"03 top-level await", "const x = await Promise.resolve(41); return x + 1", 42.0},
		{"04 host call", "return await tools.sum(1, 2, 3)", 6.0},
		{"05 concurrent host calls", "const [a, b] = await Promise.all([tools.sum(1), tools.sum(2)]); return a + b", 3.0},
		{"06 sync host function", "return await tools.echo('a', 1)", []any{"a", 1.0}},
		{"07 call identity", "await tools.sum(); return await tools.info()", map[string]any{"index": 2.0, "fn": "tools.info"}},
		{"08 namespace has no inherited names", "return [typeof tools.constructor, typeof tools.__proto__, 'hasOwnProperty' in tools, typeof tools.then, Object.keys(tools).sort().join()]",
			[]any{"undefined", "undefined", false, "undefined", "approve,echo,fail,info,panic,sleep,sum"}},
		{"09 unknown function is a TypeError", "try { tools.nope() } catch (e) { return e.name }", "TypeError"},
		{"10 namespace is frozen", "'use strict'; try { tools.sum = 1; return 'changed' } catch (e) { return e.name }", "TypeError"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := mustRun(t, r, Input{Source: c.src, HostFunctions: hf})
			got := res.Value
			if m, ok := got.(map[string]any); ok {
				delete(m, "run")
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

func TestHostFunctionNames(t *testing.T) {
	r := newTestRunner(t)
	fn := Async(func(ctx context.Context, args []any) (any, error) { return nil, nil })
	for i, hf := range []map[string]Namespace{
		{"Math": {"f": fn}},
		{"globalThis": {"f": fn}},
		{"__run": {"f": fn}},
		{"a-b": {"f": fn}},
		{"tools": {"__proto__": fn}},
		{"tools": {"constructor": fn}},
		{"tools": {"then": fn}},
		{"tools": {"prototype": fn}},
		{"tools": {"a b": fn}},
		{"tools": {"f": {}}},
	} {
		t.Run(fmt.Sprintf("%02d", i+1), func(t *testing.T) {
			_, err := r.Run(context.Background(), Input{Source: "return 1", HostFunctions: hf})
			wantCode(t, err, CodeInvalidInput)
		})
	}
}

func TestHostErrors(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	res := mustRun(t, r, Input{Source: `
		const out = [];
		for (const arg of ['internal', 'user']) {
			try { await tools.fail(arg) } catch (e) { out.push([e.name, e.message, e.code, e instanceof Error]) }
		}
		try { await tools.panic() } catch (e) { out.push([e.name, e.message, e.code]) }
		return out`, HostFunctions: hf})
	want := []any{
		[]any{"Error", "Host function failed.", "RUN_HOST_FUNCTION_ERROR", true},
		[]any{"QuotaError", "quota exceeded", "E_QUOTA", true},
		[]any{"Error", "Host function failed.", "RUN_HOST_FUNCTION_ERROR"},
	}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %#v", res.Value)
	}
	if strings.Contains(fmt.Sprint(res.Value), "hunter2") {
		t.Fatal("host error message leaked into the guest")
	}
	// Uncaught host error: the run fails with the host-function code.
	_, err := r.Run(context.Background(), Input{Source: "await tools.fail()", HostFunctions: hf})
	wantCode(t, err, CodeHostFunction)
	// Uncaught user-facing error keeps its code.
	_, err = r.Run(context.Background(), Input{Source: "await tools.fail('user')", HostFunctions: hf})
	e := wantCode(t, err, "E_QUOTA")
	if e.Name != "QuotaError" || e.Message != "quota exceeded" {
		t.Fatalf("got %+v", e)
	}
}

func TestGuestErrors(t *testing.T) {
	r := newTestRunner(t)
	cases := []struct {
		name, src string
		code      Code
		errName   string
		msg       string
		stack     string
		guestCode string
	}{
		{"01 TypeError with mapped stack", "function f() { null.x }\nf()", CodeUserSourceError, "TypeError", "cannot read property 'x' of null", "at f (<source>:1:20)\n    at <main> (<source>:2:2)\n", ""},
		{"02 own code kept under its own name", "const e = new Error('nope'); e.code = 'E_MINE'; throw e", CodeUserSourceError, "Error", "nope", "", "E_MINE"},
		{"03 runtime-looking code is the guest's, not the run's", "const e = new Error('x'); e.code = 'RUN_TIMEOUT'; throw e", CodeUserSourceError, "Error", "x", "", "RUN_TIMEOUT"},
		{"04 code on a plain object", "throw {code: 'RUN_HOST_FUNCTION_ERROR', message: 'x'}", CodeUserSourceError, "Error", "", "", "RUN_HOST_FUNCTION_ERROR"},
		{"05 thrown string", "throw 'plain'", CodeUserSourceError, "Error", "plain", "", ""},
		{"06 syntax error", "return (", CodeUserSourceError, "SyntaxError", "", "", ""},
		{"07 custom name", "class MyErr extends Error { constructor(m) { super(m); this.name = 'MyErr' } }\nthrow new MyErr('m')", CodeUserSourceError, "MyErr", "m", "", ""},
		{"08 runtime error cannot be relabelled", "try { Function('x') } catch (e) { try { e.code = 'RUN_TIMEOUT' } catch (_) {} ; throw e }", CodeUserSourceError, "EvalError", "Dynamic code evaluation is not allowed", "", ""},
		{"09 non-string code ignored", "const e = new Error('n'); e.code = 42; throw e", CodeUserSourceError, "Error", "n", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Run(context.Background(), Input{Source: c.src})
			e := wantCode(t, err, c.code)
			if !e.Guest {
				t.Fatalf("not marked as a guest error: %+v", e)
			}
			if e.Name != c.errName || (c.msg != "" && e.Message != c.msg) {
				t.Fatalf("got %s: %q", e.Name, e.Message)
			}
			if e.GuestCode != c.guestCode {
				t.Fatalf("guest code %q, want %q", e.GuestCode, c.guestCode)
			}
			if c.stack != "" && !strings.Contains(e.Stack, c.stack) {
				t.Fatalf("stack %q does not contain %q", e.Stack, c.stack)
			}
			if strings.Contains(e.Stack, "jsrun$") || strings.Contains(e.Stack, "<eval>") {
				t.Fatalf("stack shows runtime frames: %q", e.Stack)
			}
		})
	}
}

// TestHostErrorCodesStayTrusted: an error a host function made keeps its
// code when the guest rethrows it, and is not a user-source error; a guest
// error that copies that code is.
func TestHostErrorCodesStayTrusted(t *testing.T) {
	r := newTestRunner(t)
	hf := map[string]Namespace{"h": {"deny": Async(func(context.Context, []any) (any, error) {
		return nil, NewUserError("DENIED", "no")
	})}}
	_, err := r.Run(context.Background(), Input{Source: "try { await h.deny() } catch (e) { throw e }", HostFunctions: hf})
	if e := wantCode(t, err, "DENIED"); e.GuestCode != "" {
		t.Fatalf("guest code %q on a host error", e.GuestCode)
	}
	_, err = r.Run(context.Background(), Input{Source: "try { await h.deny() } catch (e) { const f = new Error(e.message); f.code = e.code; throw f }", HostFunctions: hf})
	if e := wantCode(t, err, CodeUserSourceError); e.GuestCode != "DENIED" {
		t.Fatalf("guest code %q, want DENIED", e.GuestCode)
	}
}

func TestResumeDoesNotRepeatEffects(t *testing.T) {
	r := newTestRunner(t)
	var sums atomic.Int64
	var approvals atomic.Int64
	hf := map[string]Namespace{"tools": {
		"sum": Async(func(ctx context.Context, args []any) (any, error) {
			sums.Add(1)
			return num(args[0]) + num(args[1]), nil
		}),
		"approve": Async(func(ctx context.Context, args []any) (any, error) {
			approvals.Add(1)
			if res := ResumeFrom(ctx); res != nil {
				if res.InterruptionID != "interrupt-2" || !reflect.DeepEqual(res.Payload, map[string]any{"amount": 3.0}) {
					return nil, fmt.Errorf("bad resume info %+v", res)
				}
				return res.Resolution, nil
			}
			return nil, Interrupt(ctx, map[string]any{"amount": args[0]})
		}),
	}}
	src := `const a = await tools.sum(1, 2); const ok = await tools.approve(a); const b = await tools.sum(a, 10); return {a, ok, b}`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	if res.Status != StatusInterrupted || len(res.Interruptions) != 1 {
		t.Fatalf("got %+v", res)
	}
	in := res.Interruptions[0]
	if in.ID != "interrupt-2" || in.HostFunctionName != "tools.approve" || !reflect.DeepEqual(in.Arguments, []any{3.0}) ||
		!reflect.DeepEqual(in.Payload, map[string]any{"amount": 3.0}) {
		t.Fatalf("interruption %+v", in)
	}
	if sums.Load() != 1 {
		t.Fatalf("sum called %d times", sums.Load())
	}
	res = mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res.Continuation,
		Resolutions: []Resolution{{InterruptionID: "interrupt-2", Value: "yes"}}})
	if res.Status != StatusCompleted || !reflect.DeepEqual(res.Value, map[string]any{"a": 3.0, "ok": "yes", "b": 13.0}) {
		t.Fatalf("got %+v", res)
	}
	if sums.Load() != 2 || approvals.Load() != 2 {
		t.Fatalf("sum called %d times, approve %d times; want 2 and 2", sums.Load(), approvals.Load())
	}
}

func resolveAll(res *Result, v any) []Resolution {
	var rs []Resolution
	for _, in := range res.Interruptions {
		rs = append(rs, Resolution{InterruptionID: in.ID, Value: v})
	}
	return rs
}

func TestBatchedInterruptsAndPartialResolution(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	src := `const xs = await Promise.all(Array.from({length: 16}, (_, i) => tools.approve(i))); return xs.reduce((a, b) => a + b, 0)`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	if res.Status != StatusInterrupted || len(res.Interruptions) != 16 {
		t.Fatalf("want 16 interruptions, got %+v", res)
	}
	for i, in := range res.Interruptions {
		if in.ID != fmt.Sprintf("interrupt-%d", i+1) {
			t.Fatalf("interruption %d id %s", i, in.ID)
		}
	}
	// Resolve half: the other half is reported again with the same ids.
	var rs []Resolution
	for i := 0; i < 8; i++ {
		rs = append(rs, Resolution{InterruptionID: res.Interruptions[i].ID, Value: 1.0})
	}
	res2 := mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: rs})
	if res2.Status != StatusInterrupted || len(res2.Interruptions) != 8 || res2.Interruptions[0].ID != "interrupt-9" {
		t.Fatalf("want the 8 unresolved interruptions, got %+v", res2.Interruptions)
	}
	res3 := mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res2.Continuation, Resolutions: resolveAll(res2, 2.0)})
	if res3.Status != StatusCompleted || res3.Value != 8.0+16.0 {
		t.Fatalf("got %+v", res3)
	}
}

func TestBadResolutions(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	src := `return await Promise.all([tools.approve(1), tools.approve(2)])`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	before := calls.Load()
	for i, rs := range [][]Resolution{
		nil,
		{{InterruptionID: "interrupt-3", Value: 1}},
		{{InterruptionID: "interrupt-1", Value: 1}, {InterruptionID: "interrupt-1", Value: 2}},
		{{InterruptionID: "interrupt-1", Value: func() {}}},
	} {
		t.Run(fmt.Sprintf("%02d", i+1), func(t *testing.T) {
			_, err := r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: rs})
			if c := ErrorCode(err); c != CodeProtocol && c != CodeSerialization {
				t.Fatalf("got %v", err)
			}
		})
	}
	if calls.Load() != before {
		t.Fatal("a rejected resume called a host function")
	}
	_, err := r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Resolutions: []Resolution{{InterruptionID: "interrupt-1"}}})
	wantCode(t, err, CodeProtocol)
}

func TestDeterministicDateAndRandomOverRounds(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	// Each round reads the clock and the generator 64 times, then waits for
	// an approval. Every replay must reproduce earlier rounds exactly.
	src := `
		const trace = [];
		for (let round = 0; round < 6; round++) {
			for (let i = 0; i < 64; i++) {
				trace.push(i % 3 === 0 ? Date.now() : i % 3 === 1 ? new Date().getTime() : Math.random());
			}
			trace.push(new Date(0).getTime(), Date.UTC(2020, 0, 1));
			await tools.approve(trace.length);
		}
		return trace`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	var prev []any
	for round := 0; res.Status == StatusInterrupted; round++ {
		in := res.Interruptions[0]
		if in.ID != fmt.Sprintf("interrupt-%d", round+1) {
			t.Fatalf("round %d: interruption %s", round, in.ID)
		}
		res = mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
		_ = prev
	}
	trace := res.Value.([]any)
	if len(trace) != 6*66 {
		t.Fatalf("trace has %d entries", len(trace))
	}
	// Replay the last continuation's history once more from scratch: the
	// first round alone must match the first 66 entries.
	first := mustRun(t, r, Input{Source: `const t = []; for (let i = 0; i < 64; i++) t.push(Math.random()); return t`})
	for _, v := range first.Value.([]any) {
		if f := num(v); f < 0 || f >= 1 {
			t.Fatalf("Math.random out of range: %v", f)
		}
	}
	for i := 0; i < len(trace); i += 66 {
		if trace[i+64] != 0.0 || trace[i+65] != 1577836800000.0 {
			t.Fatalf("explicit Date changed: %v %v", trace[i+64], trace[i+65])
		}
	}
	// The clock advances by one per read within a round.
	if num(trace[3])-num(trace[0]) != 2 {
		t.Fatalf("clock does not tick by 1 per read: %v %v", trace[0], trace[3])
	}
}

func TestReplayedRejectionsAndSettlementOrder(t *testing.T) {
	r := newTestRunner(t)
	var fails atomic.Int64
	var calls atomic.Int64
	hf := tools(&calls)
	hf["tools"]["fail"] = Async(func(ctx context.Context, args []any) (any, error) {
		fails.Add(1)
		return nil, NewUserError("E_NO", "no")
	})
	// Settlement order: the slower call is issued first; race and all must
	// see the same order on every replay.
	src := `
		const order = [];
		const slow = tools.sleep(60, 'slow').then(v => { order.push(v); return v });
		const fast = tools.sleep(1, 'fast').then(v => { order.push(v); return v });
		const winner = await Promise.race([slow, fast]);
		let rejected;
		try { await Promise.race([tools.fail(), tools.sleep(40, 'late')]) } catch (e) { rejected = e.code }
		await Promise.all([slow, fast]);
		const ok = await tools.approve(order.join());
		return {winner, order, rejected, ok, now: Date.now()}`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	if res.Status != StatusInterrupted {
		t.Fatalf("got %+v", res)
	}
	want := "fast,slow"
	if p := res.Interruptions[0].Payload.(map[string]any)["action"]; p != want {
		t.Fatalf("first round order %v", p)
	}
	if fails.Load() != 1 {
		t.Fatalf("fail called %d times", fails.Load())
	}
	start := calls.Load()
	res = mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, "ok")})
	v := res.Value.(map[string]any)
	if v["winner"] != "fast" || !reflect.DeepEqual(v["order"], []any{"fast", "slow"}) || v["rejected"] != "E_NO" || v["ok"] != "ok" {
		t.Fatalf("replay changed the outcome: %+v", v)
	}
	if fails.Load() != 1 {
		t.Fatalf("replayed rejection called the host again (%d calls)", fails.Load())
	}
	if calls.Load()-start != 1 { // only the resumed approve runs live
		t.Fatalf("%d live calls on resume, want 1", calls.Load()-start)
	}
}

func TestSequentialRounds(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	// Run SDK issue #63: many rounds with discarded awaited values.
	rounds := 40
	if raceEnabled {
		rounds = 12
	}
	src := fmt.Sprintf(`let n = 0; for (let i = 0; i < %d; i++) { await tools.approve(i); n++ } return n`, rounds)
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	n := 0
	for res.Status == StatusInterrupted {
		n++
		res = mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, nil)})
	}
	if n != rounds || res.Value != float64(rounds) {
		t.Fatalf("rounds %d value %v", n, res.Value)
	}
}

func TestContinuationBinding(t *testing.T) {
	var calls atomic.Int64
	hf := tools(&calls)
	src := `return await tools.approve('x')`
	r := newTestRunner(t)
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf, Context: map[string]any{"tenant": "a"}})
	rs := resolveAll(res, 1)
	other := tools(&calls)
	other["extra"] = Namespace{"f": Async(func(context.Context, []any) (any, error) { return nil, nil })}
	cases := []struct {
		name string
		r    *Runner
		in   Input
	}{
		{"01 other source", r, Input{Source: src + " ", HostFunctions: hf, Context: map[string]any{"tenant": "a"}}},
		{"02 other context", r, Input{Source: src, HostFunctions: hf, Context: map[string]any{"tenant": "b"}}},
		{"03 missing context", r, Input{Source: src, HostFunctions: hf}},
		{"04 other host function names", r, Input{Source: src, HostFunctions: other, Context: map[string]any{"tenant": "a"}}},
		{"05 other audience", newTestRunner(t, func(c *Config) { c.Audience = "elsewhere" }), Input{Source: src, HostFunctions: hf, Context: map[string]any{"tenant": "a"}}},
		{"06 other secret", newTestRunner(t, func(c *Config) { c.Secret = []byte(strings.Repeat("z", 32)) }), Input{Source: src, HostFunctions: hf, Context: map[string]any{"tenant": "a"}}},
	}
	before := calls.Load()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.Continuation, c.in.Resolutions = res.Continuation, rs
			_, err := c.r.Run(context.Background(), c.in)
			wantCode(t, err, CodeProtocol)
		})
	}
	if calls.Load() != before {
		t.Fatal("a rejected continuation reached a host function")
	}
	// The right binding resumes.
	out := mustRun(t, r, Input{Source: src, HostFunctions: hf, Context: map[string]any{"tenant": "a"}, Continuation: res.Continuation, Resolutions: rs})
	if out.Value != 1.0 {
		t.Fatalf("got %+v", out)
	}
}

func TestTokenTamperingExpiryAndRotation(t *testing.T) {
	var calls atomic.Int64
	hf := tools(&calls)
	src := `return await tools.approve('x')`
	now := time.Now()
	clock := &now
	var mu sync.Mutex
	nowFn := func() time.Time { mu.Lock(); defer mu.Unlock(); return *clock }
	setNow := func(t time.Time) { mu.Lock(); *clock = t; mu.Unlock() }
	oldKey := []byte(strings.Repeat("o", 32))
	newKey := []byte(strings.Repeat("n", 32))
	r := newTestRunner(t, func(c *Config) { c.Secret = oldKey; c.Now = nowFn })
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	tok := res.Continuation
	rs := resolveAll(res, 7)
	before := calls.Load()
	resume := func(r *Runner, tok string) error {
		_, err := r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: tok, Resolutions: rs})
		return err
	}
	body, sig, _ := strings.Cut(tok, ".")
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	for i, bad := range []string{
		flip(tok, 5), flip(tok, len(body)+3), tok[:len(tok)-1], body, "." + sig, body + "." + sig + ".x",
		tok + "=", "x", strings.Repeat("A", 100) + "." + sig,
	} {
		t.Run(fmt.Sprintf("tampered %02d", i+1), func(t *testing.T) {
			wantCode(t, resume(r, bad), CodeProtocol)
		})
	}
	// Every single-byte change of a token fails.
	for i := 0; i < len(tok); i += 7 {
		if err := resume(r, flip(tok, i)); ErrorCode(err) != CodeProtocol {
			t.Fatalf("mutation at %d: %v", i, err)
		}
	}
	// Rotation: the new primary still accepts the old key as a verification key.
	rotated := newTestRunner(t, func(c *Config) { c.Secret = newKey; c.VerificationSecrets = [][]byte{oldKey}; c.Now = nowFn })
	retired := newTestRunner(t, func(c *Config) { c.Secret = newKey; c.Now = nowFn })
	wantCode(t, resume(retired, tok), CodeProtocol)
	if calls.Load() != before {
		t.Fatal("a rejected token reached a host function")
	}
	// Expiry: one hour plus the 60 s skew.
	setNow(now.Add(time.Hour + 59*time.Second))
	if err := resume(rotated, tok); err != nil {
		t.Fatalf("token inside the skew window rejected: %v", err)
	}
	setNow(now.Add(time.Hour + 61*time.Second))
	e := wantCode(t, resume(rotated, tok), CodeProtocol)
	if !strings.Contains(e.Message, "expired") {
		t.Fatalf("got %v", e)
	}
	// Issued in the future beyond the skew.
	setNow(now.Add(-2 * time.Minute))
	wantCode(t, resume(rotated, tok), CodeProtocol)
}

// resign rewrites a token's state with the test secret, as an attacker who
// holds the secret could; it exercises the checks after the signature.
func resign(t *testing.T, r *Runner, tok string, edit func(*contState)) string {
	t.Helper()
	st, err := r.codec.decode(tok)
	if err != nil {
		t.Fatal(err)
	}
	edit(st)
	out, _, err := r.codec.encode(st)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReplayDivergence(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	src := `const a = await tools.sum(1, 2); const b = await tools.sum(3, 4); return await tools.approve(a + b)`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	rs := resolveAll(res, 1)
	cases := []struct {
		name string
		edit func(*contState)
	}{
		{"01 other arguments", func(s *contState) { s.Ledger[0].Args = `[["a",1,2],1,3]` }},
		{"02 other function", func(s *contState) { s.Ledger[1].Name = "tools.echo" }},
		{"03 bad settlement order", func(s *contState) { s.Ledger[0].SettledOrder = 5 }},
		{"04 inconsistent entry", func(s *contState) { s.Ledger[0].Status = statusRejected }},
	}
	before := calls.Load()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok := resign(t, r, res.Continuation, c.edit)
			_, err := r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: tok, Resolutions: rs})
			wantCode(t, err, CodeProtocol)
		})
	}
	if calls.Load() != before {
		t.Fatalf("a diverging replay called the host %d times", calls.Load()-before)
	}
	// A ledger longer than the replay is found when the run ends (the
	// resumed call may already have run: it is live by then).
	tok := resign(t, r, res.Continuation, func(s *contState) {
		s.Ledger = append(s.Ledger, ledgerEntry{Name: "tools.sum", Args: "[]", Status: statusFulfilled, SettledOrder: 2, Value: "[1]"})
	})
	_, err := r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: tok, Resolutions: rs})
	wantCode(t, err, CodeProtocol)
}

func TestDetachedHostCall(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	_, err := r.Run(context.Background(), Input{Source: `tools.sleep(200, 1).then(() => {}); return 1`, HostFunctions: tools(&calls)})
	wantCode(t, err, CodeDetachedRequest)
}

func TestConcurrentRuns(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := r.Run(context.Background(), Input{Source: fmt.Sprintf(`let s = 0; for (let j = 0; j < 5; j++) s += await tools.sum(j, %d); return s`, i), HostFunctions: hf})
			if err != nil {
				errs <- err
				return
			}
			if want := float64(10 + 5*i); res.Value != want {
				errs <- fmt.Errorf("run %d: got %v want %v", i, res.Value, want)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	r := newTestRunner(t, func(c *Config) { c.MaxConcurrentRuns = 1 })
	started := make(chan struct{})
	release := make(chan struct{})
	hf := map[string]Namespace{"t": {"block": Async(func(ctx context.Context, _ []any) (any, error) {
		close(started)
		<-release
		return nil, nil
	})}}
	done := make(chan error)
	go func() {
		_, err := r.Run(context.Background(), Input{Source: "await t.block()", HostFunctions: hf})
		done <- err
	}()
	<-started
	_, err := r.Run(context.Background(), Input{Source: "return 1"})
	wantCode(t, err, CodeConcurrencyLimit)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestSerializationRoundTrip(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	// Rich values go guest -> Go -> guest through tools.echo, then compare in
	// the guest, and come back to Go as the result.
	src := `
		const cyc = {name: 'c'}; cyc.self = cyc;
		const shared = [1];
		const sparse = [1, , 3]; sparse[10] = 'x';
		const proto = JSON.parse('{"__proto__": {"evil": true}}');
		const nul = Object.create(null); nul.k = 1;
		const err = new RangeError('bad', {cause: new Error('inner')});
		const agg = new AggregateError([new TypeError('t')], 'agg');
		const value = {
			u: undefined, n: null, b: true, big: 12345678901234567890123n, nan: NaN, inf: Infinity, ninf: -Infinity, nz: -0,
			d: new Date(1700000000123), bad: new Date(NaN), re: /a+b/gi, m: new Map([[1, 'one'], [{k: 1}, [2]]]),
			s: new Set(['a', 1, null]), ab: new Uint8Array([1, 2, 3]).buffer, u16: new Uint16Array([1, 65535]),
			f64: new Float64Array([1.5, -0]), dv: new DataView(new Uint8Array([9, 8]).buffer), cyc, pair: [shared, shared],
			sparse, proto, nul, err, agg, lone: 'a\uD800b', pairStr: '\uD83D\uDE00', lowFirst: '\uDC00\uD800', str: 'héllo ✓',
		};
		const [back] = await tools.echo(value);
		const checks = {
			u: 'u' in back && back.u === undefined, big: back.big === value.big, nan: Number.isNaN(back.nan),
			inf: back.inf === Infinity && back.ninf === -Infinity, nz: Object.is(back.nz, -0),
			d: back.d instanceof Date && back.d.getTime() === 1700000000123, bad: Number.isNaN(back.bad.getTime()),
			re: back.re instanceof RegExp && back.re.source === 'a+b' && back.re.flags === 'gi',
			m: back.m instanceof Map && back.m.get(1) === 'one' && back.m.size === 2,
			s: back.s instanceof Set && back.s.has('a') && back.s.has(null),
			ab: back.ab instanceof ArrayBuffer && new Uint8Array(back.ab)[2] === 3,
			u16: back.u16 instanceof Uint16Array && back.u16[1] === 65535, f64: Object.is(back.f64[1], -0),
			dv: back.dv instanceof DataView && back.dv.getUint8(0) === 9,
			cyc: back.cyc.self === back.cyc, pair: back.pair[0] === back.pair[1],
			sparse: back.sparse.length === 11 && !(1 in back.sparse) && back.sparse[10] === 'x',
			proto: Object.getPrototypeOf(back.proto) === Object.prototype && Object.hasOwn(back.proto, '__proto__') && back.proto.__proto__.evil === true && ({}).evil === undefined,
			nul: Object.getPrototypeOf(back.nul) === null && back.nul.k === 1,
			err: back.err instanceof RangeError && back.err.message === 'bad' && back.err.cause.message === 'inner',
			agg: back.agg instanceof AggregateError && back.agg.errors[0] instanceof TypeError,
			lone: back.lone === value.lone && back.lone.length === 3, pairStr: back.pairStr === value.pairStr,
			lowFirst: back.lowFirst === value.lowFirst, str: back.str === value.str,
		};
		const failed = Object.keys(checks).filter(k => !checks[k]);
		return {failed, value};`
	res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
	out := res.Value.(map[string]any)
	if f := out["failed"].([]any); len(f) != 0 {
		t.Fatalf("round trip lost: %v", f)
	}
	v := out["value"].(map[string]any)
	big1, _ := new(big.Int).SetString("12345678901234567890123", 10)
	checks := map[string]bool{
		"undefined": v["u"] == Undefined{},
		"bigint":    v["big"].(*big.Int).Cmp(big1) == 0,
		"nan":       math.IsNaN(v["nan"].(float64)),
		"-0":        math.Signbit(v["nz"].(float64)),
		"date":      v["d"].(time.Time).UnixMilli() == 1700000000123,
		"bad date":  v["bad"] == InvalidDate{},
		"regexp":    *v["re"].(*RegExp) == RegExp{Source: "a+b", Flags: "gi"},
		"map":       len(v["m"].(*Map).Keys) == 2,
		"set":       len(v["s"].(*Set).Values) == 3,
		"buffer":    reflect.DeepEqual(v["ab"], ArrayBuffer{1, 2, 3}),
		"typed":     v["u16"].(*TypedArray).Type == "Uint16Array" && len(v["u16"].(*TypedArray).Data) == 4,
		"cycle":     reflect.ValueOf(v["cyc"].(map[string]any)["self"]).UnsafePointer() == reflect.ValueOf(v["cyc"]).UnsafePointer(),
		"sparse":    v["sparse"].(*SparseArray).Length == 11 && len(v["sparse"].(*SparseArray).Elements) == 3,
		"proto key": v["proto"].(map[string]any)["__proto__"] != nil,
		"null":      v["nul"].(NullProto)["k"] == 1.0,
		"error":     v["err"].(*JSError).Name == "RangeError" && v["err"].(*JSError).Cause.(*JSError).Message == "inner",
		"aggregate": len(v["agg"].(*JSError).Errors) == 1,
		"lone":      v["lone"] == "a\xed\xa0\x80b",
		"pair":      v["pairStr"] == "😀",
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("Go side lost %s", name)
		}
	}
}

func TestNonSerializableValues(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	cases := []struct{ src, path string }{
		{"return {a: {b: [1, () => 1]}}", "result.a.b[1]"},
		{"return {s: Symbol('x')}", "result.s"},
		{"class P { }; return [new P()]", "result[0]"},
		{"return {p: Promise.resolve(1)}", "result.p"},
		{"return {w: new WeakMap()}", "result.w"},
		{"return {['a b']: function(){}}", `result["a b"]`},
		{"await tools.echo({f() {}})", "arguments[0].f"},
		{"return new Map([[1, () => 1]])", "result.<value 0>"},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%02d", i+1), func(t *testing.T) {
			_, err := r.Run(context.Background(), Input{Source: c.src, HostFunctions: hf})
			e := wantCode(t, err, CodeSerialization)
			if !strings.Contains(e.Message, c.path) {
				t.Fatalf("message %q does not name %s", e.Message, c.path)
			}
		})
	}
	// A guest can catch a non-serializable argument error.
	res := mustRun(t, r, Input{Source: "try { await tools.echo(() => 1) } catch (e) { return e.code }", HostFunctions: hf})
	if res.Value != string(CodeSerialization) {
		t.Fatalf("got %v", res.Value)
	}
	// A host function returning something unserializable rejects the call.
	hf["tools"]["bad"] = Async(func(context.Context, []any) (any, error) { return map[string]any{"c": make(chan int)}, nil })
	_, err := r.Run(context.Background(), Input{Source: "await tools.bad()", HostFunctions: hf})
	e := wantCode(t, err, CodeSerialization)
	if !strings.Contains(e.Message, "result of tools.bad.c") {
		t.Fatalf("got %q", e.Message)
	}
}

func TestGoValuesToGuest(t *testing.T) {
	r := newTestRunner(t)
	type point struct {
		X int `json:"x"`
		Y int `json:"y"`
	}
	shared := map[string]any{"k": 1}
	loop := map[string]any{}
	loop["me"] = loop
	hf := map[string]Namespace{"go": {"values": Sync(func(context.Context, []any) (any, error) {
		return map[string]any{
			"ints": []int{1, 2}, "point": point{3, 4}, "bytes": []byte{7}, "when": time.UnixMilli(5).UTC(),
			"pair": []any{shared, shared}, "loop": loop, "u": Undefined{}, "m": map[string]int{"z": 26},
		}, nil
	})}}
	res := mustRun(t, r, Input{Source: `const v = await go.values(); return [v.ints[1], v.point.y, v.bytes instanceof Uint8Array, v.when.getTime(), v.pair[0] === v.pair[1], v.loop.me === v.loop, 'u' in v && v.u === undefined, v.m.z]`, HostFunctions: hf})
	want := []any{2.0, 4.0, true, 5.0, true, true, true, 26.0}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %v", res.Value)
	}
}

func TestConsole(t *testing.T) {
	r := newTestRunner(t)
	res := mustRun(t, r, Input{Source: `console.log('a', 1, {b: [1, 'x']}, undefined, 2n); console.error(new TypeError('t')); const o = {}; o.o = o; console.info(o); return 1`})
	want := "a 1 { b: [ 1, 'x' ] } undefined 2n\n[stderr] TypeError: t\n{ o: [Circular] }\n"
	if res.Console != want {
		t.Fatalf("console %q", res.Console)
	}
	res = mustRun(t, r, Input{Source: `for (let i = 0; i < 10000; i++) console.log('x'.repeat(100)); return 1`, Limits: Limits{ConsoleBytes: 1000}})
	if !res.ConsoleTruncated || len(res.Console) > 1000 {
		t.Fatalf("console not capped: %d bytes truncated=%v", len(res.Console), res.ConsoleTruncated)
	}
}

// TestMain checks that no test leaves goroutines behind (host goroutines
// must end with their run).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(5 * time.Second)
		base := 4
		for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > base {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Printf("leaked goroutines (%d):\n%s\n", n, buf)
			code = 1
		}
	}
	os.Exit(code)
}

func TestPrewarmedContextsAreFreshPerRun(t *testing.T) {
	r := newTestRunner(t, func(c *Config) { c.Prewarm = 2 })
	defer r.Close()
	var calls atomic.Int64
	hf := tools(&calls)
	for i := 0; i < 6; i++ {
		time.Sleep(20 * time.Millisecond) // let the pool refill
		res := mustRun(t, r, Input{Source: `const seen = typeof globalThis.mark; globalThis.mark = 1; return [seen, await tools.sum(1, 2), Object.isFrozen(Array.prototype)]`, HostFunctions: hf})
		if !reflect.DeepEqual(res.Value, []any{"undefined", 3.0, true}) {
			t.Fatalf("run %d: %v", i, res.Value)
		}
	}
	// Interrupt and resume through prewarmed contexts too.
	res := mustRun(t, r, Input{Source: `return await tools.approve(1)`, HostFunctions: hf})
	res = mustRun(t, r, Input{Source: `return await tools.approve(1)`, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, "y")})
	if res.Value != "y" {
		t.Fatalf("got %v", res.Value)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
