package jsrun

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Tagged JSON is how values travel over HTTP and the CLI (docs/jsrun.md).
// Whatever JSON can express stays plain JSON: null, booleans, finite
// numbers, strings, arrays, objects. Everything else is an object with a
// "$type" member:
//
//	{"$type":"undefined"}
//	{"$type":"number","value":"NaN"|"Infinity"|"-Infinity"|"-0"}
//	{"$type":"bigint","value":"123"}
//	{"$type":"string","utf16":[55296]}                 (a string with lone surrogates)
//	{"$type":"date","value":"2024-01-02T03:04:05.678Z"} (value null: invalid date)
//	{"$type":"regexp","source":"a+","flags":"gi"}
//	{"$type":"map","entries":[[key, value], ...]}
//	{"$type":"set","values":[...]}
//	{"$type":"arraybuffer","base64":"..."}
//	{"$type":"typedarray","kind":"Uint8Array","base64":"..."}  (the viewed bytes)
//	{"$type":"typedarray","kind":"Uint16Array","base64":"...","byte_offset":2,"buffer":{"$type":"arraybuffer",...}}
//	                                                    (a view into part of a buffer, or one sharing it)
//	{"$type":"array","items":[...]}                     (only to carry "$id")
//	{"$type":"array","length":5,"items":{"0":..,"3":..}} (array with holes)
//	{"$type":"object","value":{...}}                    (an object that has a "$type" key, or carries "$id")
//	{"$type":"object","null_prototype":true,"value":{...}}
//	{"$type":"error","name":"TypeError","message":"...","cause":...,"errors":[...]}
//	{"$type":"ref","id":1}                              (the value tagged "$id":1)
//
// A value that occurs more than once (a shared reference or a cycle) is
// written in full once, tagged with "$id", and referenced elsewhere.

// MarshalTagged encodes a Go value (see values.go) as tagged JSON.
func MarshalTagged(v any) ([]byte, error) {
	var t tagEncoder
	t.count = map[identity]int{}
	t.ids = map[identity]int{}
	t.countRefs(v, 0)
	out, err := t.enc(v, "value", 0)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, newError(CodeSerialization, "cannot encode value as JSON: %v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

const maxTaggedDepth = 10000

type tagEncoder struct {
	count  map[identity]int
	ids    map[identity]int
	nextID int
}

func (t *tagEncoder) countRefs(v any, depth int) {
	if depth > maxTaggedDepth {
		return
	}
	id, ok := ident(v)
	if ok {
		t.count[id]++
		if t.count[id] > 1 {
			return
		}
	}
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			t.countRefs(e, depth+1)
		}
	case map[string]any:
		for _, e := range x {
			t.countRefs(e, depth+1)
		}
	case NullProto:
		for _, e := range x {
			t.countRefs(e, depth+1)
		}
	case *Object:
		if x != nil {
			for _, e := range x.Values {
				t.countRefs(e, depth+1)
			}
		}
	case *SparseArray:
		for _, e := range x.Elements {
			t.countRefs(e, depth+1)
		}
	case *Map:
		for i := range x.Keys {
			t.countRefs(x.Keys[i], depth+1)
			if i < len(x.Values) {
				t.countRefs(x.Values[i], depth+1)
			}
		}
	case *Set:
		for _, e := range x.Values {
			t.countRefs(e, depth+1)
		}
	case *TypedArray:
		if x != nil && x.Buffer != nil {
			t.countRefs(x.Buffer, depth+1)
		}
	case *JSError:
		if x != nil {
			t.countRefs(x.Cause, depth+1)
			if x.Errors != nil {
				t.countRefs(x.Errors, depth+1)
			}
		}
	}
}

type obj = map[string]any

func (t *tagEncoder) enc(v any, path string, depth int) (any, error) {
	if depth > maxTaggedDepth {
		return nil, serErr(path, "a value nested too deeply")
	}
	switch x := v.(type) {
	case nil, bool:
		return x, nil
	case string:
		if utf8.ValidString(x) {
			return x, nil
		}
		u, lone := wtf8ToUTF16(x)
		if !lone {
			return string(utf16.Decode(u)), nil
		}
		units := make([]int, len(u))
		for i, c := range u {
			units[i] = int(c)
		}
		return obj{"$type": "string", "utf16": units}, nil
	case float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, json.Number:
		n := encodeNumber(toFloat(x))
		if f, ok := n.(float64); ok {
			return f, nil
		}
		return obj{"$type": "number", "value": n.([]any)[1]}, nil
	case Undefined:
		return obj{"$type": "undefined"}, nil
	case *big.Int:
		if x == nil {
			return nil, nil
		}
		return obj{"$type": "bigint", "value": x.String()}, nil
	case time.Time:
		return obj{"$type": "date", "value": x.UTC().Format("2006-01-02T15:04:05.000Z07:00")}, nil
	case InvalidDate:
		return obj{"$type": "date", "value": nil}, nil
	case *RegExp:
		if x == nil {
			return nil, nil
		}
		return obj{"$type": "regexp", "source": x.Source, "flags": x.Flags}, nil
	case []byte:
		return obj{"$type": "typedarray", "kind": "Uint8Array", "base64": base64.StdEncoding.EncodeToString(x)}, nil
	case *TypedArray:
		if x == nil {
			return nil, nil
		}
		out := obj{"$type": "typedarray", "kind": x.Type, "base64": base64.StdEncoding.EncodeToString(x.Data)}
		// The buffer goes along when the view does not cover all of it or
		// another value shares it.
		if x.Buffer != nil && (x.ByteOffset != 0 || len(x.Data) != len(x.Buffer) || t.sharedBuffer(x.Buffer)) {
			if x.ByteOffset < 0 || x.ByteOffset+len(x.Data) > len(x.Buffer) {
				return nil, serErr(path, "a TypedArray whose ByteOffset or length does not fit its Buffer")
			}
			b, err := t.enc(x.Buffer, path+".buffer", depth+1)
			if err != nil {
				return nil, err
			}
			out["byte_offset"], out["buffer"] = x.ByteOffset, b
		}
		return out, nil
	}
	id, hasID := ident(v)
	shared := hasID && t.count[id] > 1
	if shared {
		if n, ok := t.ids[id]; ok {
			return obj{"$type": "ref", "id": n}, nil
		}
		t.nextID++
		t.ids[id] = t.nextID
	}
	out, err := t.encCompound(v, path, depth)
	if err != nil {
		return nil, err
	}
	if shared {
		m, ok := out.(obj)
		if !ok || m["$type"] == nil {
			switch v.(type) {
			case []any:
				m = obj{"$type": "array", "items": out}
			default:
				m = obj{"$type": "object", "value": out}
			}
		}
		m["$id"] = t.ids[id]
		return m, nil
	}
	return out, nil
}

// toFloat converts one of the Go number types the encoders accept to the
// float64 a JS number is; an invalid json.Number reads as 0. The common
// types skip reflection.
func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return reflect.ValueOf(v).Convert(reflect.TypeFor[float64]()).Float()
}

func (t *tagEncoder) sharedBuffer(b ArrayBuffer) bool {
	id, ok := ident(b)
	return ok && t.count[id] > 1
}

func (t *tagEncoder) encCompound(v any, path string, depth int) (any, error) {
	switch x := v.(type) {
	case ArrayBuffer:
		return obj{"$type": "arraybuffer", "base64": base64.StdEncoding.EncodeToString(x)}, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := t.enc(e, fmt.Sprintf("%s[%d]", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case map[string]any:
		m, err := t.encMap(x, path, depth)
		if err != nil {
			return nil, err
		}
		if _, clash := x["$type"]; clash {
			return obj{"$type": "object", "value": m}, nil
		}
		return m, nil
	case NullProto:
		m, err := t.encMap(x, path, depth)
		if err != nil {
			return nil, err
		}
		return obj{"$type": "object", "null_prototype": true, "value": m}, nil
	case *Object:
		if x == nil {
			return nil, nil
		}
		if len(x.Keys) != len(x.Values) {
			return nil, serErr(path, "an Object whose Keys and Values differ in length")
		}
		o := orderedObj{keys: make([]string, len(x.Keys)), vals: make([]any, len(x.Keys))}
		clash := false
		for i, k := range x.Keys {
			r, err := t.enc(x.Values[i], childPath(path, k), depth+1)
			if err != nil {
				return nil, err
			}
			o.keys[i], o.vals[i] = encodeKey(k), r
			clash = clash || k == "$type"
		}
		if x.NullProto {
			return obj{"$type": "object", "null_prototype": true, "value": o}, nil
		}
		if clash {
			return obj{"$type": "object", "value": o}, nil
		}
		return o, nil
	case *SparseArray:
		if x == nil {
			return nil, nil
		}
		items := obj{}
		for i, e := range x.Elements {
			r, err := t.enc(e, fmt.Sprintf("%s[%d]", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			items[strconv.Itoa(i)] = r
		}
		return obj{"$type": "array", "length": x.Length, "items": items}, nil
	case *Map:
		if x == nil {
			return nil, nil
		}
		entries := make([]any, 0, len(x.Keys))
		for i := range x.Keys {
			if i >= len(x.Values) {
				return nil, serErr(path, "a Map whose Keys and Values differ in length")
			}
			k, err := t.enc(x.Keys[i], fmt.Sprintf("%s.<key %d>", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			val, err := t.enc(x.Values[i], fmt.Sprintf("%s.<value %d>", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			entries = append(entries, []any{k, val})
		}
		return obj{"$type": "map", "entries": entries}, nil
	case *Set:
		if x == nil {
			return nil, nil
		}
		vals := make([]any, 0, len(x.Values))
		for i, e := range x.Values {
			r, err := t.enc(e, fmt.Sprintf("%s.<value %d>", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			vals = append(vals, r)
		}
		return obj{"$type": "set", "values": vals}, nil
	case *JSError:
		if x == nil {
			return nil, nil
		}
		name := x.Name
		if name == "" {
			name = "Error"
		}
		out := obj{"$type": "error", "name": name, "message": x.Message}
		if x.HasCause {
			r, err := t.enc(x.Cause, path+".cause", depth+1)
			if err != nil {
				return nil, err
			}
			out["cause"] = r
		}
		if x.Errors != nil {
			r, err := t.enc(x.Errors, path+".errors", depth+1)
			if err != nil {
				return nil, err
			}
			out["errors"] = r
		}
		return out, nil
	}
	// Other Go values: through the wire encoder (structs, typed maps...).
	wire, err := encodeWire(v, path)
	if err != nil {
		return nil, err
	}
	plain, err := decodeWire(wire)
	if err != nil {
		return nil, err
	}
	return t.enc(plain, path, depth+1)
}

// orderedObj is a JSON object written with its keys in order (an *Object).
type orderedObj struct {
	keys []string
	vals []any
}

func (o orderedObj) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	buf.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := enc.Encode(k); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
		buf.WriteByte(':')
		if err := enc.Encode(o.vals[i]); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func (t *tagEncoder) encMap(m map[string]any, path string, depth int) (obj, error) {
	out := make(obj, len(m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r, err := t.enc(m[k], childPath(path, k), depth+1)
		if err != nil {
			return nil, err
		}
		out[encodeKey(k)] = r
	}
	return out, nil
}

// UnmarshalTagged decodes tagged JSON into Go values (see values.go).
// Numbers become float64.
func UnmarshalTagged(data []byte) (any, error) {
	var raw any
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return nil, newError(CodeSerialization, "invalid JSON value: %v", err)
	}
	if dec.More() {
		return nil, newError(CodeSerialization, "invalid JSON value: trailing data")
	}
	return DecodeTaggedValue(raw)
}

// UnmarshalTaggedOrdered is UnmarshalTagged with objects as *Object, their
// keys in the order of the JSON text (the HTTP handler's resolutions, so a
// client's object reaches the guest in its order).
func UnmarshalTaggedOrdered(data []byte) (any, error) {
	p := &orderedParser{dec: json.NewDecoder(bytes.NewReader(data)), order: map[unsafe.Pointer][]string{}}
	raw, err := p.value(0)
	if err != nil {
		return nil, newError(CodeSerialization, "invalid JSON value: %v", err)
	}
	if _, err := p.dec.Token(); err != io.EOF {
		return nil, newError(CodeSerialization, "invalid JSON value: trailing data")
	}
	d := &tagDecoder{defs: map[int]obj{}, built: map[int]any{}, order: p.order}
	if err := d.collect(raw, 0); err != nil {
		return nil, err
	}
	return d.dec(raw, "value", 0)
}

// orderedParser parses JSON as encoding/json does into an any, and records
// the key order of every object it makes.
type orderedParser struct {
	dec   *json.Decoder
	order map[unsafe.Pointer][]string
}

func (p *orderedParser) value(depth int) (any, error) {
	if depth > maxTaggedDepth {
		return nil, errors.New("nested too deeply")
	}
	tok, err := p.dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	switch d {
	case '[':
		arr := []any{}
		for p.dec.More() {
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := p.dec.Token()
		return arr, err
	case '{':
		m := obj{}
		var keys []string
		for p.dec.More() {
			kt, err := p.dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if _, dup := m[k]; !dup {
				keys = append(keys, k)
			}
			m[k] = v // the last one wins, as in encoding/json
		}
		p.order[reflect.ValueOf(m).UnsafePointer()] = keys
		_, err := p.dec.Token()
		return m, err
	}
	return nil, fmt.Errorf("unexpected %v", d)
}

// DecodeTaggedValue decodes an already-parsed tagged JSON value (as produced
// by encoding/json into an any).
func DecodeTaggedValue(raw any) (any, error) {
	d := &tagDecoder{defs: map[int]obj{}, built: map[int]any{}}
	if err := d.collect(raw, 0); err != nil {
		return nil, err
	}
	return d.dec(raw, "value", 0)
}

type tagDecoder struct {
	defs  map[int]obj
	built map[int]any
	// order, from UnmarshalTaggedOrdered: the key order of each parsed
	// object; plain objects then decode to *Object.
	order map[unsafe.Pointer][]string
}

// ordered returns the keys of x in order when the decoder keeps order.
func (d *tagDecoder) ordered(x obj) ([]string, bool) {
	if d.order == nil {
		return nil, false
	}
	keys, ok := d.order[reflect.ValueOf(x).UnsafePointer()]
	return keys, ok
}

func tagErr(path, why string) error {
	return newError(CodeSerialization, "invalid tagged value at %s: %s", path, why)
}

func (d *tagDecoder) collect(raw any, depth int) error {
	if depth > maxTaggedDepth {
		return tagErr("value", "nested too deeply")
	}
	switch x := raw.(type) {
	case []any:
		for _, e := range x {
			if err := d.collect(e, depth+1); err != nil {
				return err
			}
		}
	case obj:
		if idv, ok := x["$id"]; ok {
			f, ok := idv.(float64)
			if !ok || f != math.Trunc(f) || f < 1 || f > 1e9 {
				return tagErr("value", "bad $id")
			}
			if _, dup := d.defs[int(f)]; dup {
				return tagErr("value", "duplicate $id")
			}
			d.defs[int(f)] = x
		}
		for _, e := range x {
			if err := d.collect(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *tagDecoder) dec(raw any, path string, depth int) (any, error) {
	if depth > maxTaggedDepth {
		return nil, tagErr(path, "nested too deeply")
	}
	switch x := raw.(type) {
	case nil, bool, string, float64:
		return x, nil
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return nil, tagErr(path, "bad number")
		}
		return f, nil
	case []any:
		out := make([]any, len(x))
		if err := d.decItems(out, x, path, depth); err != nil {
			return nil, err
		}
		return out, nil
	case obj:
		typ, tagged := x["$type"]
		if keys, ok := d.ordered(x); ok && !tagged {
			o := &Object{Keys: keys, Values: make([]any, len(keys))}
			for i, k := range keys {
				v, err := d.dec(x[k], childPath(path, k), depth+1)
				if err != nil {
					return nil, err
				}
				o.Values[i] = v
			}
			return o, nil
		}
		if !tagged {
			out := make(map[string]any, len(x))
			for k, e := range x {
				v, err := d.dec(e, childPath(path, k), depth+1)
				if err != nil {
					return nil, err
				}
				out[k] = v
			}
			return out, nil
		}
		ts, _ := typ.(string)
		return d.decTagged(ts, x, path, depth)
	}
	return nil, tagErr(path, "unexpected JSON")
}

// decItems decodes the items of an array at path into out.
func (d *tagDecoder) decItems(out, items []any, path string, depth int) error {
	for i, e := range items {
		v, err := d.dec(e, fmt.Sprintf("%s[%d]", path, i), depth+1)
		if err != nil {
			return err
		}
		out[i] = v
	}
	return nil
}

func (d *tagDecoder) register(x obj, v any) {
	if f, ok := x["$id"].(float64); ok {
		d.built[int(f)] = v
	}
}

func (d *tagDecoder) decTagged(typ string, x obj, path string, depth int) (any, error) {
	str := func(k string) (string, bool) { s, ok := x[k].(string); return s, ok }
	switch typ {
	case "undefined":
		return Undefined{}, nil
	case "number":
		s, _ := str("value")
		switch s {
		case "NaN":
			return math.NaN(), nil
		case "Infinity":
			return math.Inf(1), nil
		case "-Infinity":
			return math.Inf(-1), nil
		case "-0":
			return math.Copysign(0, -1), nil
		}
		return nil, tagErr(path, "bad number")
	case "bigint":
		s, _ := str("value")
		b, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, tagErr(path, "bad bigint")
		}
		return b, nil
	case "string":
		units, ok := x["utf16"].([]any)
		if !ok {
			return nil, tagErr(path, "bad string")
		}
		u := make([]uint16, len(units))
		for i, e := range units {
			f, ok := e.(float64)
			if !ok || f < 0 || f > 0xFFFF || f != math.Trunc(f) {
				return nil, tagErr(path, "bad code unit")
			}
			u[i] = uint16(f)
		}
		return utf16ToWTF8(u), nil
	case "date":
		if x["value"] == nil {
			return InvalidDate{}, nil
		}
		s, _ := str("value")
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, tagErr(path, "bad date (want RFC 3339)")
		}
		return tm.UTC(), nil
	case "regexp":
		src, ok1 := str("source")
		flags, _ := str("flags")
		if !ok1 {
			return nil, tagErr(path, "bad regexp")
		}
		return &RegExp{Source: src, Flags: flags}, nil
	case "arraybuffer", "typedarray":
		s, _ := str("base64")
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, tagErr(path, "bad base64")
		}
		if typ == "arraybuffer" {
			d.register(x, ArrayBuffer(b))
			return ArrayBuffer(b), nil
		}
		kind, _ := str("kind")
		size, ok := typedArrayTypes[kind]
		if !ok || len(b)%size != 0 {
			return nil, tagErr(path, "bad typed array kind or length")
		}
		rawBuf, hasBuf := x["buffer"]
		if !hasBuf {
			return &TypedArray{Type: kind, Data: b}, nil
		}
		bv, err := d.dec(rawBuf, path+".buffer", depth+1)
		if err != nil {
			return nil, err
		}
		buf, ok := bv.(ArrayBuffer)
		off, ok2 := x["byte_offset"].(float64)
		if !ok || !ok2 || off < 0 || off != math.Trunc(off) || int(off)%size != 0 || off+float64(len(b)) > float64(len(buf)) {
			return nil, tagErr(path, "bad typed array buffer or byte_offset")
		}
		view := buf[int(off) : int(off)+len(b) : int(off)+len(b)]
		if !bytes.Equal(view, b) {
			return nil, tagErr(path, "typed array bytes differ from its buffer")
		}
		return &TypedArray{Type: kind, Data: view, Buffer: buf, ByteOffset: int(off)}, nil
	case "ref":
		f, ok := x["id"].(float64)
		if !ok {
			return nil, tagErr(path, "bad ref")
		}
		id := int(f)
		if v, ok := d.built[id]; ok {
			return v, nil
		}
		def, ok := d.defs[id]
		if !ok {
			return nil, tagErr(path, "ref to unknown $id")
		}
		t, _ := def["$type"].(string)
		if t == "ref" {
			return nil, tagErr(path, "a ref cannot carry $id")
		}
		return d.decTagged(t, def, path, depth+1)
	}
	// Containers: registered under their $id before their children decode,
	// so cycles resolve.
	if f, ok := x["$id"].(float64); ok {
		if v, done := d.built[int(f)]; done {
			return v, nil
		}
	}
	switch typ {
	case "array":
		if l, ok := x["length"].(float64); ok {
			items, ok := x["items"].(obj)
			if !ok || l < 0 || l > math.MaxUint32 || l != math.Trunc(l) {
				return nil, tagErr(path, "bad sparse array")
			}
			out := &SparseArray{Length: int(l), Elements: map[int]any{}}
			d.register(x, out)
			for k, e := range items {
				i, err := strconv.Atoi(k)
				if err != nil || i < 0 || i >= out.Length {
					return nil, tagErr(path, "bad sparse index")
				}
				v, err := d.dec(e, fmt.Sprintf("%s[%d]", path, i), depth+1)
				if err != nil {
					return nil, err
				}
				out.Elements[i] = v
			}
			return out, nil
		}
		items, ok := x["items"].([]any)
		if !ok {
			return nil, tagErr(path, "bad array")
		}
		out := make([]any, len(items))
		d.register(x, out)
		if err := d.decItems(out, items, path, depth); err != nil {
			return nil, err
		}
		return out, nil
	case "object":
		val, ok := x["value"].(obj)
		if !ok {
			return nil, tagErr(path, "bad object")
		}
		if keys, ok := d.ordered(val); ok {
			np, _ := x["null_prototype"].(bool)
			o := &Object{Keys: keys, Values: make([]any, len(keys)), NullProto: np}
			d.register(x, o)
			for i, k := range keys {
				v, err := d.dec(val[k], childPath(path, k), depth+1)
				if err != nil {
					return nil, err
				}
				o.Values[i] = v
			}
			return o, nil
		}
		out := make(map[string]any, len(val))
		var ret any = out
		if np, _ := x["null_prototype"].(bool); np {
			ret = NullProto(out)
		}
		d.register(x, ret)
		for k, e := range val {
			v, err := d.dec(e, childPath(path, k), depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return ret, nil
	case "map":
		entries, ok := x["entries"].([]any)
		if !ok {
			return nil, tagErr(path, "bad map")
		}
		out := &Map{}
		d.register(x, out)
		for i, e := range entries {
			pair, ok := e.([]any)
			if !ok || len(pair) != 2 {
				return nil, tagErr(path, "bad map entry")
			}
			k, err := d.dec(pair[0], fmt.Sprintf("%s.<key %d>", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			v, err := d.dec(pair[1], fmt.Sprintf("%s.<value %d>", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			out.Keys, out.Values = append(out.Keys, k), append(out.Values, v)
		}
		return out, nil
	case "set":
		vals, ok := x["values"].([]any)
		if !ok {
			return nil, tagErr(path, "bad set")
		}
		out := &Set{}
		d.register(x, out)
		for i, e := range vals {
			v, err := d.dec(e, fmt.Sprintf("%s.<value %d>", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			out.Values = append(out.Values, v)
		}
		return out, nil
	case "error":
		name, _ := str("name")
		msg, _ := str("message")
		out := &JSError{Name: name, Message: msg}
		if out.Name == "" {
			out.Name = "Error"
		}
		d.register(x, out)
		if c, ok := x["cause"]; ok {
			v, err := d.dec(c, path+".cause", depth+1)
			if err != nil {
				return nil, err
			}
			out.Cause, out.HasCause = v, true
		}
		if es, ok := x["errors"]; ok {
			v, err := d.dec(es, path+".errors", depth+1)
			if err != nil {
				return nil, err
			}
			arr, ok := v.([]any)
			if !ok {
				return nil, tagErr(path, "bad errors")
			}
			out.Errors = arr
		}
		return out, nil
	}
	return nil, tagErr(path, fmt.Sprintf("unknown $type %q", typ))
}
