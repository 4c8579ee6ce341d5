package jsrun

import (
	"context"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeToken: any string given as a continuation is rejected with a
// protocol error or accepted only if it verifies; decoding never panics.
func FuzzDecodeToken(f *testing.F) {
	r := newTestRunner(f)
	res, err := r.Run(context.Background(), Input{
		Source:        `return await t.approve(1)`,
		HostFunctions: map[string]Namespace{"t": {"approve": Async(func(ctx context.Context, _ []any) (any, error) { return nil, Interrupt(ctx, 1) })}},
	})
	if err != nil {
		f.Fatal(err)
	}
	tok := res.Continuation
	f.Add(tok)
	f.Add(tok[:len(tok)/2])
	f.Add(strings.Replace(tok, ".", "..", 1))
	f.Add("")
	f.Add(".")
	f.Add("e30.AAAA")
	f.Add("eyJhbGdvcml0aG0iOiJIUzI1NiJ9." + strings.Repeat("A", 43))
	c := r.codec
	f.Fuzz(func(t *testing.T, s string) {
		st, err := c.decode(s)
		if err != nil {
			if ErrorCode(err) != CodeProtocol {
				t.Fatalf("non-protocol error %v", err)
			}
			return
		}
		// A token that verifies was issued with the test secret (by this
		// or another fuzz worker); every one-byte change of it must fail.
		if st.LogicalRunID == "" {
			t.Fatal("verified state without a run id")
		}
		for i := 0; i < len(s); i += 1 + len(s)/64 {
			b := []byte(s)
			b[i] ^= 0x01
			if _, err := c.decode(string(b)); err == nil {
				t.Fatalf("mutated token verified (byte %d)", i)
			}
		}
	})
}

// FuzzSerializer: decoding arbitrary wire text never panics, and whatever
// decodes re-encodes to a value that decodes to the same encoding.
func FuzzSerializer(f *testing.F) {
	for _, seed := range []string{
		`[1]`, `["x"]`, `[null]`, `[["u"]]`, `[["n","-0"]]`, `[["b","-123"]]`, `[["s",[55296,97]]]`,
		`[["a",1,1],2]`, `[["A",5,0,1,4,1],"x"]`, `[["o","a",0]]`, `[["O","__proto__",1],true]`,
		`[["D",1700000000000]]`, `[["D",null]]`, `[["R","a+","gi"]]`, `[["M",1,2],"k","v"]`, `[["S",1,0]]`,
		`[["B","AQID"]]`, `[["T","Uint16Array","AQIDBA=="]]`, `[["E","TypeError","m",1,-1],["E","Error","c",-1,-1]]`,
		`[["a",0]]`, `[["o","x",5]]`, `[["T","Nope","AA=="]]`, `[["A",1e300]]`, `[{"a":1}]`, `[]`, `{}`, `[["s",[1e9]]]`,
		`[["V","Uint8Array",1,0,2],["B","AQID"]]`, `[["a",1,2],["V","Uint16Array",3,2,2],["V","DataView",3,1,3],["B","AQIDBA=="]]`,
		`[["V","Float64Array",0,0,8]]`, `[["o","b",1,"a",2,"10",1],true,["V","Int8Array",3,0,0],["B",""]]`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, wire string) {
		// Then the ordered decoding (Config.OrderedObjects) of the same text.
		if stableRoundTrip(t, wire, false, "decoded") {
			stableRoundTrip(t, wire, true, "ordered")
		}
	})
}

// stableRoundTrip decodes wire, ordered or not: a failure must be a
// serialization error (false); a value must re-encode, decode again and
// encode the same.
func stableRoundTrip(t *testing.T, wire string, ordered bool, what string) bool {
	v, err := decodeWireAs(wire, ordered)
	if err != nil {
		if ErrorCode(err) != CodeSerialization {
			t.Fatalf("non-serialization error %v", err)
		}
		return false
	}
	enc1, err := encodeWire(v, "value")
	if err != nil {
		t.Fatalf("%s value does not re-encode: %v", what, err)
	}
	v2, err := decodeWireAs(enc1, ordered)
	if err != nil {
		t.Fatalf("%s value re-encoded does not decode: %v\n%s", what, err, enc1)
	}
	enc2, err := encodeWire(v2, "value")
	if err != nil || enc2 != enc1 {
		t.Fatalf("%s encoding not stable:\n%s\n%s", what, enc1, enc2)
	}
	return true
}

// FuzzGuestSerializer sends fuzzed JSON-ish text through the guest's own
// serializer and back; the run must complete or fail with a typed error.
func FuzzGuestSerializer(f *testing.F) {
	r := newTestRunner(f)
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `[1e308, -0, "\ud800"]`, `"x"`, `{"__proto__":{"y":1}}`} {
		f.Add(s)
	}
	hf := map[string]Namespace{"t": {"echo": Sync(func(_ context.Context, args []any) (any, error) { return args, nil })}}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 4096 {
			return
		}
		src := `let v; try { v = JSON.parse(` + jsString(text) + `) } catch (e) { return 'bad json' }
			const [back] = await t.echo(v); return JSON.stringify(back) === JSON.stringify(v)`
		res, err := r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Limits: Limits{Timeout: 5 * time.Second}})
		if err != nil {
			if ErrorCode(err) == "" || ErrorCode(err) == CodeInternal {
				t.Fatalf("untyped failure: %v", err)
			}
			return
		}
		if res.Value != true && res.Value != "bad json" {
			t.Fatalf("round trip changed %q: %v", text, res.Value)
		}
	})
}

func jsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x2028 || r == 0x2029 || r == 0xFFFD:
			b.WriteString(`\u`)
			const hex = "0123456789abcdef"
			b.WriteByte(hex[r>>12&15])
			b.WriteByte(hex[r>>8&15])
			b.WriteByte(hex[r>>4&15])
			b.WriteByte(hex[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
