package jsrun

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Security cases 24-26 of security-cases.md and the Run SDK's
// security-hardening and resource-hardening suites. Each case names what it
// would achieve if it got through.

// wantGlobals is the exact list of the guest's global object: the QuickJS
// intrinsics minus eval, Atomics, SharedArrayBuffer, WeakRef and
// FinalizationRegistry, plus console and the host namespaces.
var wantGlobals = strings.Fields(`AggregateError Array ArrayBuffer BigInt BigInt64Array BigUint64Array Boolean
	DataView Date Error EvalError Float16Array Float32Array Float64Array Function Infinity Int16Array Int32Array
	Int8Array InternalError Iterator JSON Map Math NaN Number Object Promise Proxy RangeError ReferenceError Reflect
	RegExp Set String Symbol Symbol(Symbol.toStringTag) SyntaxError TypeError URIError Uint16Array Uint32Array Uint8Array Uint8ClampedArray
	WeakMap WeakSet console decodeURI decodeURIComponent encodeURI encodeURIComponent escape globalThis isFinite
	isNaN parseFloat parseInt tools undefined unescape`)

func TestSecurityExactGlobals(t *testing.T) {
	// Case 26 (host leak): nothing but the listed host functions is reachable.
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := map[string]Namespace{"tools": tools(&calls)["tools"]}
	res := mustRun(t, r, Input{Source: `return Reflect.ownKeys(globalThis).map(String).sort()`, HostFunctions: hf})
	got := []string{}
	for _, v := range res.Value.([]any) {
		got = append(got, v.(string))
	}
	if !reflect.DeepEqual(got, wantGlobals) {
		t.Fatalf("globals:\n got %v\nwant %v", got, wantGlobals)
	}
}

func TestSecurityNoAmbientOrDynamicCode(t *testing.T) {
	// Case 26 (escape): eval, Function, import(), SharedArrayBuffer, Atomics
	// are absent or throw; no timers, modules, process or network.
	r := newTestRunner(t)
	attempts := []string{
		`eval('1')`,
		`globalThis.eval('1')`,
		`(0, eval)('1')`,
		`Function('return 1')()`,
		`new Function('return 1')()`,
		`(function(){}).constructor('return 1')()`,
		`(async function(){}).constructor('return 1')()`,
		`(function*(){}).constructor('yield 1')().next()`,
		`(async function*(){}).constructor('yield 1')()`,
		`Object.getPrototypeOf(function(){}).constructor('return 1')()`,
		`Reflect.construct(Function, ['return 1'])()`,
		`[].constructor.constructor('return this')()`,
		`new SharedArrayBuffer(8)`,
		`Atomics.wait`,
		`setTimeout(() => {}, 1)`,
		`setInterval(() => {}, 1)`,
		`queueMicrotask(() => {})`,
		`require('fs')`,
		`process.env`,
		`fetch('http://example.com')`,
		`new WeakRef({})`,
		`new FinalizationRegistry(() => {})`,
		`structuredClone({})`,
		`print('x')`,
		`std.open('/etc/passwd')`,
		`os.exec(['id'])`,
	}
	// One run tries every attempt (a run per attempt is slow under -race).
	var b strings.Builder
	b.WriteString("const out = [];\n")
	for _, src := range attempts {
		b.WriteString("try { const v = " + src + "; out.push('allowed: ' + " + fmt.Sprintf("%q", src) + ") } catch (e) { }\n")
	}
	b.WriteString("return out")
	res, err := r.Run(context.Background(), Input{Source: b.String()})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Value.([]any); len(got) != 0 {
		t.Fatalf("dynamic code or ambient API reachable: %v", got)
	}
	// import() rejects: there is no module loader.
	res = mustRun(t, r, Input{Source: `try { await import('fs'); return 'loaded' } catch (e) { return 'blocked' }`})
	if res.Value != "blocked" {
		t.Fatalf("import() %v", res.Value)
	}
	res = mustRun(t, r, Input{Source: `return [typeof eval, typeof SharedArrayBuffer, typeof Atomics, typeof setTimeout, typeof require, typeof process]`})
	for _, v := range res.Value.([]any) {
		if v != "undefined" {
			t.Fatalf("typeof checks %v", res.Value)
		}
	}
}

func TestSecurityFrozenBuiltins(t *testing.T) {
	// Case 26 (escape via prototype pollution across the bridge).
	r := newTestRunner(t)
	res := mustRun(t, r, Input{Source: `'use strict';
		const notFrozen = [Object, Object.prototype, Array.prototype, Function.prototype, Promise, Promise.prototype,
			JSON, Math, Reflect, Date, Date.prototype, Error.prototype, console, Symbol, String.prototype, RegExp.prototype,
			Map.prototype, Object.getPrototypeOf(async function(){}), Object.getPrototypeOf([][Symbol.iterator]()),
			Iterator.prototype, Object.getPrototypeOf(Uint8Array.prototype)].filter(o => !Object.isFrozen(o));
		const assigned = [];
		for (const [name, f] of Object.entries({
			'Array.prototype.map': () => { Array.prototype.map = null },
			'Object.prototype.x': () => { Object.prototype.x = 1 },
			'JSON.parse': () => { JSON.parse = null },
			'Math.random': () => { Math.random = () => 4 },
			'Date.now': () => { Date.now = () => 0 },
			'Promise.prototype.then': () => { Promise.prototype.then = null },
			'globalThis.Array': () => { globalThis.Array = null },
			'delete globalThis.Object': () => { if (!delete globalThis.Object) throw new TypeError('x') },
			'Error.prototype.name': () => { Error.prototype.name = 'x' },
		})) {
			try { f(); assigned.push(name) } catch (e) { }
		}
		return {notFrozen: notFrozen.length, assigned, random: Math.random() < 1, polluted: ({}).x}`})
	v := res.Value.(map[string]any)
	if v["notFrozen"] != 0.0 || len(v["assigned"].([]any)) != 0 || v["random"] != true || v["polluted"] != (Undefined{}) {
		t.Fatalf("intrinsics changed: %+v", v)
	}
	// Overriding inherited names on instances still works (the override
	// mistake is fixed for the usual suspects).
	res = mustRun(t, r, Input{Source: `
		class E extends Error { constructor() { super('m'); this.name = 'E' } }
		const o = {}; o.toString = () => 'mine';
		return [new E().name, String(o)]`})
	if !reflect.DeepEqual(res.Value, []any{"E", "mine"}) {
		t.Fatalf("got %v", res.Value)
	}
}

// TestSecurityEveryIntrinsicFrozen walks everything reachable from the
// global object and the hidden intrinsics (every own key, data values,
// accessor functions and prototypes) in a hardened context, with and without
// a prewarmed pool, and checks that every container is frozen and every
// global binding read-only: the per-process freeze list must miss nothing the
// walk finds.
func TestSecurityEveryIntrinsicFrozen(t *testing.T) {
	src := `'use strict';
		const FP = Function.prototype;
		const isContainer = (v) => (typeof v === 'object' && v !== null) ||
			(typeof v === 'function' && (v === FP || Object.hasOwn(v, 'prototype')));
		const roots = [['globalThis', globalThis],
			['AsyncFunction', Object.getPrototypeOf(async function () {}).constructor],
			['GeneratorFunction', Object.getPrototypeOf(function* () {}).constructor],
			['AsyncGeneratorFunction', Object.getPrototypeOf(async function* () {}).constructor],
			['ArrayIterator', Object.getPrototypeOf([][Symbol.iterator]())],
			['MapIterator', Object.getPrototypeOf(new Map().entries())],
			['SetIterator', Object.getPrototypeOf(new Set().values())],
			['StringIterator', Object.getPrototypeOf(''[Symbol.iterator]())],
			['RegExpStringIterator', Object.getPrototypeOf(/a/[Symbol.matchAll](''))],
			['Generator', Object.getPrototypeOf(Object.getPrototypeOf((function* () {})()))],
			['AsyncGenerator', Object.getPrototypeOf(Object.getPrototypeOf((async function* () {})()))],
			['IteratorHelper', Object.getPrototypeOf([].values().map((x) => x))],
			['WrapForValidIterator', Object.getPrototypeOf(Iterator.from({ next() { return { done: true } } }))],
			['AsyncIterator', Object.getPrototypeOf(Object.getPrototypeOf(Object.getPrototypeOf((async function* () {})())))],
			['hostNamespace', tools], ['hostFunction', tools.sum]];
		const seen = new Set();
		const queue = roots.slice();
		const notFrozen = [], writableGlobals = [];
		let containers = 0;
		for (let i = 0; i < queue.length; i++) {
			const [path, o] = queue[i];
			if (seen.has(o)) continue;
			seen.add(o);
			containers++;
			if (o !== globalThis && !Object.isFrozen(o)) notFrozen.push(path);
			const p = Object.getPrototypeOf(o);
			if (p !== null && isContainer(p)) queue.push([path + '^', p]);
			for (const k of Reflect.ownKeys(o)) {
				const d = Object.getOwnPropertyDescriptor(o, k);
				if (o === globalThis && (d.configurable || d.writable)) writableGlobals.push(String(k));
				for (const v of [d.value, d.get, d.set]) {
					if (isContainer(v)) queue.push([path + '.' + String(k), v]);
				}
			}
		}
		return {containers, notFrozen, writableGlobals}`
	for _, prewarm := range []int{0, 2} {
		r, err := NewRunner(Config{Secret: testSecret, Store: NewMemoryStore(), Prewarm: prewarm})
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		hf := map[string]Namespace{"tools": tools(&calls)["tools"]}
		for i := 0; i < 3; i++ {
			res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
			v := res.Value.(map[string]any)
			if v["containers"].(float64) < 100 || len(v["notFrozen"].([]any)) != 0 || len(v["writableGlobals"].([]any)) != 0 {
				t.Fatalf("prewarm %d: %+v", prewarm, v)
			}
		}
		_ = r.Close()
	}
}

func TestSecurityCleanRealmAfterFailure(t *testing.T) {
	r := newTestRunner(t)
	_, err := r.Run(context.Background(), Input{Source: `globalThis.leak = 'secret'; throw new Error('x')`})
	wantCode(t, err, CodeUserSourceError)
	res := mustRun(t, r, Input{Source: `return typeof globalThis.leak`})
	if res.Value != "undefined" {
		t.Fatal("state leaked between runs")
	}
}

func TestLimits(t *testing.T) {
	// Case 24 (host DoS) and case 25; every breach is a typed error, fast.
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	short := Limits{Timeout: 300 * time.Millisecond}
	cases := []struct {
		name   string
		src    string
		limits Limits
		code   Code
	}{
		{"01 while(true)", `while (true) {}`, short, CodeTimeout},
		{"02 loop swallowing the interrupt in try/finally", `for (;;) { try { while (true) {} } catch (e) {} finally { continue } }`, short, CodeTimeout},
		{"03 runaway in a rejection handler", `Promise.reject(1).catch(() => { while (true) {} }); await new Promise(() => {})`, short, CodeTimeout},
		{"04 microtask storm", `const f = () => Promise.resolve().then(f); f(); await new Promise(() => {})`, short, CodeTimeout},
		{"05 catastrophic regexp", `return /^(a+)+$/.test('a'.repeat(40) + 'b')`, short, CodeTimeout},
		{"06 heap bomb", `const a = []; for (;;) a.push(new Array(1e5).fill(1))`, Limits{MemoryBytes: 16 << 20}, CodeMemoryLimit},
		{"07 string bomb", `const a = []; const s = 'x'.repeat(1 << 20); for (;;) a.push(s + a.length)`, Limits{MemoryBytes: 16 << 20}, CodeMemoryLimit},
		{"08 deep recursion", `function f(n) { return f(n + 1) + 1 } return f(0)`, Limits{}, CodeStackOverflow},
		{"09 never-settling promise", `await new Promise(() => {})`, Limits{}, CodeTimeout},
		{"10 host calls over the limit", `for (let i = 0; i < 10; i++) await tools.sum(i)`, Limits{HostCalls: 5}, CodeBridgeLimit},
		{"11 host calls in flight", `await Promise.all(Array.from({length: 40}, () => tools.sleep(50, 1)))`, Limits{}, CodeBridgeLimit},
		{"12 host arguments too large", `await tools.echo('x'.repeat(2000))`, Limits{HostArgumentsBytes: 1000}, CodeBridgeLimit},
		{"13 host output too large", `await tools.echo('x'.repeat(2000))`, Limits{HostOutputBytes: 1000}, CodeBridgeLimit},
		{"14 result too large", `return 'x'.repeat(2000)`, Limits{ResultBytes: 1000}, CodeResultTooLarge},
		{"15 source too large", `return 1 /*` + strings.Repeat("x", 2000) + `*/`, Limits{SourceBytes: 1000}, CodeSourceTooLarge},
		{"16 interrupt payload too large", `await tools.approve('x'.repeat(2000))`, Limits{HostOutputBytes: 1000}, CodeBridgeLimit},
		{"17 host that never returns is cut at the deadline", `await tools.sleep(60000, 1)`, short, CodeTimeout},
		{"18 negative limit", `return 1`, Limits{HostCalls: -1}, CodeInvalidInput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// No wall-clock bound here (timings are not pass/fail on a
			// shared machine): a case that hangs ends at the run's own
			// deadline with CodeTimeout, which fails every case that
			// expects another code.
			_, err := r.Run(context.Background(), Input{Source: c.src, HostFunctions: hf, Limits: c.limits})
			wantCode(t, err, c.code)
		})
	}
}

func TestDefaultStackDepthIsUsable(t *testing.T) {
	r := newTestRunner(t)
	res := mustRun(t, r, Input{Source: `function f(n) { return n === 0 ? 0 : 1 + f(n - 1) } return f(2000)`})
	if res.Value != 2000.0 {
		t.Fatalf("got %v", res.Value)
	}
}

func TestAbort(t *testing.T) {
	r := newTestRunner(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := r.Run(ctx, Input{Source: `while (true) {}`})
	wantCode(t, err, CodeAborted)
}

func TestHostContextCancelledOnTimeout(t *testing.T) {
	r := newTestRunner(t)
	cancelled := make(chan struct{})
	hf := map[string]Namespace{"t": {"wait": Async(func(ctx context.Context, _ []any) (any, error) {
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	})}}
	_, err := r.Run(context.Background(), Input{Source: `await t.wait()`, HostFunctions: hf, Limits: Limits{Timeout: 3 * time.Second}})
	wantCode(t, err, CodeTimeout)
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("host function was not told the run timed out")
	}
}

func TestContinuationSizeLimit(t *testing.T) {
	// Continuation amplification: a large ledger stops at the limit.
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	_, err := r.Run(context.Background(), Input{
		Source: `for (let i = 0; i < 20; i++) await tools.echo('x'.repeat(1000)); await tools.approve(1)`, HostFunctions: hf,
		Limits: Limits{ContinuationBytes: 8000},
	})
	wantCode(t, err, CodeContinuationTooLarge)
}

func TestNoSecretNoInterrupt(t *testing.T) {
	r, err := NewRunner(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	if _, err := r.Run(context.Background(), Input{Source: "return 1"}); err != nil {
		t.Fatal(err)
	}
	_, err = r.Run(context.Background(), Input{Source: "await tools.approve(1)", HostFunctions: tools(&calls)})
	wantCode(t, err, CodeInvalidInput)
	if _, err := NewRunner(Config{Secret: []byte("short")}); err == nil {
		t.Fatal("short secret accepted")
	}
}
