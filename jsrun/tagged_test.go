package jsrun

import (
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTaggedRoundTrip(t *testing.T) {
	shared := map[string]any{"k": "v"}
	loop := map[string]any{"n": 1.0}
	loop["self"] = loop
	v := map[string]any{
		"plain": []any{1.0, "s", true, nil}, "u": Undefined{}, "nan": math.NaN(), "nz": math.Copysign(0, -1),
		"big": big.NewInt(-42), "d": time.UnixMilli(1700000000123).UTC(), "bad": InvalidDate{}, "re": &RegExp{"a", "g"},
		"m": &Map{Keys: []any{1.0}, Values: []any{"one"}}, "s": &Set{Values: []any{"x"}}, "ab": ArrayBuffer{1, 2},
		"ta": &TypedArray{Type: "Int16Array", Data: []byte{1, 0}}, "sp": &SparseArray{Length: 4, Elements: map[int]any{2: "z"}},
		"np": NullProto{"a": 1.0}, "e": &JSError{Name: "TypeError", Message: "m", Cause: "c", HasCause: true},
		"clash": map[string]any{"$type": "mine"}, "lone": "\xed\xa0\x80", "pair": []any{shared, shared}, "loop": loop,
	}
	b, err := MarshalTagged(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`{"$type":"undefined"}`, `{"$type":"number","value":"-0"}`, `"$type":"ref"`, `{"$type":"string","utf16":[55296]}`, `{"$type":"object","value":{"$type":"mine"}}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("encoding lacks %s:\n%s", want, b)
		}
	}
	back, err := UnmarshalTagged(b)
	if err != nil {
		t.Fatal(err)
	}
	w1, err := EncodeValue(v)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := EncodeValue(back)
	if err != nil {
		t.Fatal(err)
	}
	if w1 != w2 {
		t.Fatalf("round trip changed the value:\n%s\n%s", w1, w2)
	}
	m := back.(map[string]any)
	if l := m["loop"].(map[string]any); reflect.ValueOf(l["self"]).UnsafePointer() != reflect.ValueOf(l).UnsafePointer() {
		t.Fatal("cycle lost")
	}
}

func TestTaggedErrors(t *testing.T) {
	for _, bad := range []string{`{"$type":"nope"}`, `{"$type":"ref","id":9}`, `{"$type":"bigint","value":"x"}`, `[1,`, `1 2`,
		`{"$type":"typedarray","kind":"Int32Array","base64":"AQ=="}`, `{"$type":"date","value":"yesterday"}`} {
		if _, err := UnmarshalTagged([]byte(bad)); ErrorCode(err) != CodeSerialization {
			t.Errorf("%s: got %v", bad, err)
		}
	}
}

func FuzzTagged(f *testing.F) {
	for _, s := range []string{`null`, `{"a":[1,{"$type":"undefined"}]}`, `{"$type":"object","$id":1,"value":{"me":{"$type":"ref","id":1}}}`,
		`{"$type":"array","length":3,"items":{"1":2}}`, `{"$type":"map","entries":[[1,2]]}`, `{"$type":"ref","id":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := UnmarshalTagged([]byte(s))
		if err != nil {
			return
		}
		b, err := MarshalTagged(v)
		if err != nil {
			t.Fatalf("decoded value does not re-encode: %v", err)
		}
		if _, err := UnmarshalTagged(b); err != nil {
			t.Fatalf("re-encoded value does not decode: %v\n%s", err, b)
		}
	})
}

func TestUnmarshalTaggedOrdered(t *testing.T) {
	v, err := UnmarshalTaggedOrdered([]byte(`{"b":1,"a":{"$type":"object","null_prototype":true,"value":{"y":1,"x":2}},
		"c":{"$type":"object","$id":1,"value":{"q":[{"$type":"ref","id":1}]}},"d":[{"n":1,"m":2}],"b2":{"$type":"bigint","value":"5"}}`))
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*Object)
	if !reflect.DeepEqual(o.Keys, []string{"b", "a", "c", "d", "b2"}) {
		t.Fatalf("keys %v", o.Keys)
	}
	a, _ := o.Get("a")
	if np := a.(*Object); !np.NullProto || !reflect.DeepEqual(np.Keys, []string{"y", "x"}) {
		t.Fatalf("null-prototype object %#v", a)
	}
	c, _ := o.Get("c")
	q, _ := c.(*Object).Get("q")
	if q.([]any)[0] != c {
		t.Fatal("the reference does not point at its object")
	}
	d, _ := o.Get("d")
	if inner := d.([]any)[0].(*Object); !reflect.DeepEqual(inner.Keys, []string{"n", "m"}) {
		t.Fatalf("nested keys %v", inner.Keys)
	}
	for _, bad := range []string{`{"a":1} x`, `{"a":`, `[1,]`} {
		if _, err := UnmarshalTaggedOrdered([]byte(bad)); ErrorCode(err) != CodeSerialization {
			t.Errorf("%s: %v", bad, err)
		}
	}
	// Same values as UnmarshalTagged apart from the object type.
	plain, _ := UnmarshalTagged([]byte(`{"b":1,"a":[true,null]}`))
	wire1, _ := EncodeValue(plain)
	ord, _ := UnmarshalTaggedOrdered([]byte(`{"a":[true,null],"b":1}`))
	wire2, _ := EncodeValue(ord)
	if wire1 != wire2 {
		t.Fatalf("%s != %s", wire1, wire2)
	}
}

// Issue 10 item 6 over tagged JSON: views into part of a buffer, or sharing
// one, carry it (once, then by reference).
func TestTaggedViewsShareBuffer(t *testing.T) {
	buf := ArrayBuffer{1, 2, 3, 4, 5, 6, 7, 8}
	v := []any{NewView("Uint16Array", buf, 2, 4), NewView("DataView", buf, 1, 3), NewView("Uint8Array", ArrayBuffer{9}, 0, 1)}
	b, err := MarshalTagged(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"$type":"typedarray","base64":"AwQFBg==","buffer":{"$id":1,"$type":"arraybuffer","base64":"AQIDBAUGBwg="},"byte_offset":2,"kind":"Uint16Array"},` +
		`{"$type":"typedarray","base64":"AgME","buffer":{"$type":"ref","id":1},"byte_offset":1,"kind":"DataView"},` +
		`{"$type":"typedarray","base64":"CQ==","kind":"Uint8Array"}]`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	back, err := UnmarshalTagged(b)
	if err != nil {
		t.Fatal(err)
	}
	views := back.([]any)
	a, d := views[0].(*TypedArray), views[1].(*TypedArray)
	if &a.Buffer[0] != &d.Buffer[0] || a.ByteOffset != 2 || d.ByteOffset != 1 || !reflect.DeepEqual(d.Data, []byte{2, 3, 4}) {
		t.Fatalf("views %+v %+v", a, d)
	}
	for _, bad := range []string{
		`{"$type":"typedarray","kind":"Uint8Array","base64":"AQ==","byte_offset":9,"buffer":{"$type":"arraybuffer","base64":"AQI="}}`,
		`{"$type":"typedarray","kind":"Uint8Array","base64":"AQ==","byte_offset":1,"buffer":{"$type":"arraybuffer","base64":"AQI="}}`,
		`{"$type":"typedarray","kind":"Uint16Array","base64":"AQI=","byte_offset":1,"buffer":{"$type":"arraybuffer","base64":"AQIDBA=="}}`,
		`{"$type":"typedarray","kind":"Uint8Array","base64":"AQ==","byte_offset":0,"buffer":"x"}`,
	} {
		if _, err := UnmarshalTagged([]byte(bad)); ErrorCode(err) != CodeSerialization {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
