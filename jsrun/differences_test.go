package jsrun

import (
	"context"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Unit tests for the differences from the Run SDK closed in issue 10
// (items 5-10); jsrun/parity runs the same situations against run itself.

// Item 5: object key order, in both directions and in the ledger.
func TestObjectKeyOrder(t *testing.T) {
	var got atomic.Value
	hf := map[string]Namespace{"h": {
		"echo": Async(func(_ context.Context, args []any) (any, error) { got.Store(args[0]); return args[0], nil }),
		"ordered": Async(func(context.Context, []any) (any, error) {
			return NewObject("b", 1, "a", 2, "10", 3, "2", 4), nil
		}),
		"unordered": Async(func(context.Context, []any) (any, error) {
			return map[string]any{"b": 1, "a": 2, "10": 3, "2": 4, "01": 5}, nil
		}),
		"ask": Async(func(ctx context.Context, args []any) (any, error) {
			if r := ResumeFrom(ctx); r != nil {
				return r.Resolution, nil
			}
			return nil, Interrupt(ctx, args[0])
		}),
	}}
	r := newTestRunner(t, func(c *Config) { c.OrderedObjects = true })

	t.Run("guest to Go", func(t *testing.T) {
		res := mustRun(t, r, Input{Source: `return {z: 1, b: {y: 1, x: 2}, 10: 'ten', 2: 'two', a: 3}`, HostFunctions: hf})
		o, ok := res.Value.(*Object)
		if !ok {
			t.Fatalf("value is %T, want *Object", res.Value)
		}
		if want := []string{"2", "10", "z", "b", "a"}; !reflect.DeepEqual(o.Keys, want) {
			t.Fatalf("keys %q, want %q", o.Keys, want)
		}
		if inner, _ := o.Get("b"); !reflect.DeepEqual(inner.(*Object).Keys, []string{"y", "x"}) {
			t.Fatalf("nested keys %v", inner)
		}
	})
	t.Run("host arguments and results", func(t *testing.T) {
		res := mustRun(t, r, Input{HostFunctions: hf, Source: `
			const back = await h.echo({q: 1, p: 2});
			const o = await h.ordered();
			const u = await h.unordered();
			return [Object.keys(back).join(), Object.keys(o).join(), Object.keys(u).join()]`})
		if arg, _ := got.Load().(*Object); arg == nil || !reflect.DeepEqual(arg.Keys, []string{"q", "p"}) {
			t.Fatalf("host function got %#v", got.Load())
		}
		// A Go map has no order: integer-like keys first, then sorted.
		want := []any{"q,p", "2,10,b,a", "2,10,01,a,b"}
		if !reflect.DeepEqual(res.Value, want) {
			t.Fatalf("got %v, want %v", res.Value, want)
		}
	})
	t.Run("ledger and resolutions", func(t *testing.T) {
		src := `const a = await h.echo({y: 1, x: 2}); const r = await h.ask({k: 1, j: 2});
			return [Object.keys(a).join(), Object.keys(r).join()]`
		res := mustRun(t, r, Input{Source: src, HostFunctions: hf})
		if res.Status != StatusInterrupted {
			t.Fatalf("status %s", res.Status)
		}
		if p := res.Interruptions[0].Payload.(*Object); !reflect.DeepEqual(p.Keys, []string{"k", "j"}) {
			t.Fatalf("payload keys %v", p.Keys)
		}
		// The replayed call's arguments match the ledger byte for byte and
		// the ledger's answer keeps its order.
		res = mustRun(t, r, Input{Source: src, HostFunctions: hf, Continuation: res.Continuation,
			Resolutions: []Resolution{{InterruptionID: "interrupt-2", Value: NewObject("n", 1, "m", 2)}}})
		if want := []any{"y,x", "n,m"}; !reflect.DeepEqual(res.Value, want) {
			t.Fatalf("got %v, want %v", res.Value, want)
		}
	})
	t.Run("wire", func(t *testing.T) {
		wire, err := EncodeValue(NewObject("b", 1.0, "a", NewObject("d", true, "c", nil)))
		if err != nil {
			t.Fatal(err)
		}
		if want := `[["o","b",1,"a",2],1,["o","d",3,"c",4],true,null]`; wire != want {
			t.Fatalf("wire %s, want %s", wire, want)
		}
		v, err := decodeWireAs(wire, true)
		if err != nil || !reflect.DeepEqual(v.(*Object).Keys, []string{"b", "a"}) {
			t.Fatalf("decoded %#v, %v", v, err)
		}
		if _, err := EncodeValue(NewObject("a", 1, "a", 2)); ErrorCode(err) != CodeSerialization {
			t.Fatalf("repeated key: %v", err)
		}
		if _, err := decodeWireAs(`[["o","a",1,"a",1],1]`, true); ErrorCode(err) != CodeSerialization {
			t.Fatalf("repeated key on the wire: %v", err)
		}
	})
	t.Run("maps by default", func(t *testing.T) {
		plain := newTestRunner(t)
		res := mustRun(t, plain, Input{Source: `return {b: 1, a: 2}`})
		if _, ok := res.Value.(map[string]any); !ok {
			t.Fatalf("without OrderedObjects the value is %T", res.Value)
		}
	})
}

// Item 6: typed arrays over one ArrayBuffer stay views over one buffer.
func TestTypedArrayViews(t *testing.T) {
	var got atomic.Value
	hf := map[string]Namespace{"h": {
		"echo": Async(func(_ context.Context, args []any) (any, error) { got.Store(args[0]); return args[0], nil }),
		"views": Async(func(context.Context, []any) (any, error) {
			buf := ArrayBuffer{1, 2, 3, 4, 5, 6, 7, 8}
			return []any{NewView("Uint16Array", buf, 2, 4), NewView("DataView", buf, 1, 3), buf}, nil
		}),
	}}
	r := newTestRunner(t)
	res := mustRun(t, r, Input{HostFunctions: hf, Source: `
		const b = new ArrayBuffer(16);
		const v = [new Uint8Array(b, 4, 4), new Float64Array(b, 8, 1), new DataView(b, 1, 5)];
		const back = await h.echo(v);
		const [u16, dv, buf] = await h.views();
		u16[0] = 0xffff;
		return [back[0].buffer === back[1].buffer && back[1].buffer === back[2].buffer,
			back.map((x) => [x.byteOffset, x.byteLength, x.buffer.byteLength]),
			u16.buffer === buf && dv.buffer === buf, new Uint8Array(buf)[2], dv.getUint8(1)]`})
	want := []any{true, []any{[]any{4.0, 4.0, 16.0}, []any{8.0, 8.0, 16.0}, []any{1.0, 5.0, 16.0}}, true, 255.0, 255.0}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %v, want %v", res.Value, want)
	}
	views, _ := got.Load().([]any)
	if len(views) != 3 {
		t.Fatalf("host got %#v", got.Load())
	}
	a, b := views[0].(*TypedArray), views[2].(*TypedArray)
	if &a.Buffer[0] != &b.Buffer[0] || a.ByteOffset != 4 || len(a.Data) != 4 || b.Type != "DataView" || b.ByteOffset != 1 {
		t.Fatalf("views %+v %+v do not share one buffer", a, b)
	}
	a.Data[0] = 9 // Data is the view: it writes through to the buffer
	if b.Buffer[4] != 9 {
		t.Fatal("Data does not alias Buffer")
	}
	for _, bad := range []string{
		`[["V","Uint8Array",1,4,8],["B","AAAAAAAAAAA="]]`,  // past the end
		`[["V","Uint16Array",1,1,2],["B","AAAAAAAAAAA="]]`, // misaligned
		`[["V","Uint8Array",0,0,0]]`,                       // itself as buffer
		`[["V","Uint8Array",1,0,1],"x"]`,                   // not a buffer
	} {
		if _, err := DecodeValue(bad); ErrorCode(err) != CodeSerialization {
			t.Errorf("%s: %v", bad, err)
		}
	}
	// jsrun-v1's self-contained view node still decodes (old ledgers).
	v, err := DecodeValue(`[["T","Uint8Array","AQI="]]`)
	if ta, _ := v.(*TypedArray); err != nil || ta == nil || !reflect.DeepEqual(ta.Data, []byte{1, 2}) {
		t.Fatalf("v1 view: %#v %v", v, err)
	}
}

// Item 7: a rejected host call's stack has the guest's frames only.
func TestHostRejectionStack(t *testing.T) {
	var calls atomic.Int64
	r := newTestRunner(t)
	_, err := r.Run(context.Background(), Input{HostFunctions: tools(&calls), Source: "async function lookup() {\n  return await tools.fail()\n}\nawait lookup()"})
	e := wantCode(t, err, CodeHostFunction)
	lines := strings.Split(strings.TrimSpace(e.Stack), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "at lookup (<source>:2:") || !strings.Contains(lines[1], "(<source>:4:") {
		t.Fatalf("stack %q: want lookup at line 2, then line 4", e.Stack)
	}
}

// Item 8: arguments or results over the byte limits are catchable.
func TestBridgeByteLimitsCatchable(t *testing.T) {
	var calls atomic.Int64
	r := newTestRunner(t)
	lim := Limits{HostArgumentsBytes: 1000, HostOutputBytes: 1000}
	res := mustRun(t, r, Input{HostFunctions: tools(&calls), Limits: lim, Source: `
		const out = [];
		try { await tools.echo('x'.repeat(2000)) } catch (e) { out.push(e.code, e.message) }
		try { await tools.echo('<'.repeat(400)) } catch (e) { out.push(e.code, e.message) }
		out.push(await tools.sum(1, 2));
		return out`})
	want := []any{"RUN_BRIDGE_LIMIT", "Host function arguments exceed the 1000 byte size limit.",
		"RUN_BRIDGE_LIMIT", "Host function output exceeds the 1000 byte size limit.", 3.0}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %v, want %v", res.Value, want)
	}
	// The oversized arguments never reached the host: the call with them
	// was not made (2 calls: the second echo and sum).
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d host calls, want 2", n)
	}
	_, err := r.Run(context.Background(), Input{HostFunctions: tools(&calls), Limits: lim, Source: `await tools.echo('x'.repeat(2000))`})
	wantCode(t, err, CodeBridgeLimit)
}

// Item 9: a host call never awaited, or pending at the return, detaches.
func TestDetachedHostCalls(t *testing.T) {
	var calls atomic.Int64
	hf := tools(&calls)
	hf["h"] = Namespace{"ask": Sync(func(ctx context.Context, args []any) (any, error) {
		if r := ResumeFrom(ctx); r != nil {
			return r.Resolution, nil
		}
		return nil, Interrupt(ctx, args[0])
	})}
	r := newTestRunner(t)
	for _, src := range []string{
		`tools.sum(1); return 1`,                      // never awaited: never called
		`tools.sum(1); await tools.sum(2); return 1`,  // same, after other work
		`tools.sleep(50, 1).then(() => {}); return 2`, // in flight (Async)
		`tools.echo(1).then(() => {}); return 2`,      // answered, not yet delivered (Sync)
	} {
		calls.Store(0)
		_, err := r.Run(context.Background(), Input{Source: src, HostFunctions: hf})
		e := wantCode(t, err, CodeDetachedRequest)
		if strings.HasPrefix(src, "tools.sum(1);") && !strings.HasSuffix(e.Message, "never awaited: tools.sum") {
			t.Fatalf("%s: message %q does not name the call", src, e.Message)
		}
		if strings.HasPrefix(src, "tools.sum(1);") && calls.Load() > 1 {
			t.Fatalf("%s: the unawaited call ran", src)
		}
	}
	// An interruption made before the return is reported.
	res := mustRun(t, r, Input{Source: `h.ask('q').then(() => {}); return 2`, HostFunctions: hf})
	if res.Status != StatusInterrupted || len(res.Interruptions) != 1 {
		t.Fatalf("got %+v", res)
	}
}

// Item 10: console output before a failure is kept in the error.
func TestConsoleKeptOnFailure(t *testing.T) {
	var calls atomic.Int64
	r := newTestRunner(t)
	for src, want := range map[string]string{
		`console.log('before'); console.error('oops'); throw new Error('boom')`: "before\n[stderr] oops\n",
		`console.log('step 1'); await tools.fail()`:                             "step 1\n",
		`console.log('deep'); function f() { return f() } f()`:                  "deep\n",
		`console.log('looping'); while (true) {}`:                               "looping\n",
		`console.log('waiting'); await tools.sleep(60000, 1)`:                   "waiting\n",
	} {
		_, err := r.Run(context.Background(), Input{Source: src, HostFunctions: tools(&calls), Limits: Limits{Timeout: 2 * time.Second}})
		e, ok := err.(*Error)
		if !ok || e.Console != want {
			t.Fatalf("%s: error %v with console %q, want %q", src, err, e.Console, want)
		}
	}
}

// The wire format became jsrun-v2 (views over buffers); a continuation
// minted as jsrun-v1 still resumes.
func TestContinuationV1StillResumes(t *testing.T) {
	var calls atomic.Int64
	r := newTestRunner(t)
	src := `const a = await tools.sum(1, 2); return [a, await tools.approve({n: a})]`
	res := mustRun(t, r, Input{Source: src, HostFunctions: tools(&calls)})
	st, err := r.codec.decode(res.Continuation)
	if err != nil {
		t.Fatal(err)
	}
	if st.Serde != serdeName {
		t.Fatalf("new tokens are %q", st.Serde)
	}
	st.Serde = serdeV1
	old, _, err := r.codec.encode(st)
	if err != nil {
		t.Fatal(err)
	}
	res = mustRun(t, r, Input{Source: src, HostFunctions: tools(&calls), Continuation: old,
		Resolutions: []Resolution{{InterruptionID: "interrupt-2", Value: "ok"}}})
	if !reflect.DeepEqual(res.Value, []any{3.0, "ok"}) {
		t.Fatalf("got %v", res.Value)
	}
	st.Serde = "jsrun-v0"
	bad, _, _ := r.codec.encode(st)
	_, err = r.Run(context.Background(), Input{Source: src, HostFunctions: tools(&calls), Continuation: bad,
		Resolutions: []Resolution{{InterruptionID: "interrupt-2", Value: "ok"}}})
	wantCode(t, err, CodeProtocol)
}
