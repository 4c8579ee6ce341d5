package jsrun

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// The jsrun-v1 wire format carries one JavaScript value as a JSON array of
// nodes; node 0 is the root and a reference is a node's index, so shared
// references and cycles survive. A node is either a JSON literal (string,
// boolean, null, finite number other than -0) or a tagged array:
//
//	["u"]                          undefined
//	["n", "NaN"|"Infinity"|"-Infinity"|"-0"]
//	["b", "123"]                   BigInt (decimal)
//	["s", [u16, ...]]              string that is not well-formed UTF-16
//	["a", ref, ...]                dense array
//	["A", length, index, ref, ...] array with holes
//	["o", key, ref, ...]           plain object (own enumerable string keys)
//	["O", key, ref, ...]           object with a null prototype
//	["D", ms|null]                 Date (null: invalid date)
//	["R", source, flags]           RegExp
//	["M", keyRef, valueRef, ...]   Map
//	["S", ref, ...]                Set
//	["B", base64]                  ArrayBuffer
//	["T", type, base64]            typed array or DataView over a buffer of
//	                               its own (the viewed bytes)
//	["V", type, bufferRef, byteOffset, byteLength]
//	                               typed array or DataView over the
//	                               ArrayBuffer node bufferRef (views over one
//	                               buffer share it)
//	["E", name, message, causeRef|-1, errorsRef|-1]  Error
//
// Object keys are in the object's own order (JavaScript's: integer-like keys
// ascending, then insertion order). It plays the part of the Run SDK's
// run-js-v1 (devalue) format; the ledger keeps host-call arguments in this
// form and compares them byte for byte.
//
// jsrun-v2 added "V" (the guest serializes every typed array that way);
// continuations of jsrun-v1 still resume, except that a replayed host call
// whose arguments held a typed array no longer matches its ledger entry.
const serdeName = "jsrun-v2"

// serdeV1 is the previous format name, still accepted in continuations.
const serdeV1 = "jsrun-v1"

// EncodeValue serializes a Go value (see the table in values.go) to the wire
// format.
func EncodeValue(v any) (string, error) { return encodeWire(v, "value") }

// DecodeValue parses the wire format into Go values.
func DecodeValue(wire string) (any, error) { return decodeWire(wire) }

type encoder struct {
	nodes []any
	seen  map[identity]int
}

type identity struct {
	ptr uintptr
	n   int
	t   reflect.Type
}

func encodeWire(v any, root string) (string, error) {
	e := &encoder{seen: map[identity]int{}}
	if _, err := e.enc(v, root); err != nil {
		return "", err
	}
	b, err := json.Marshal(e.nodes)
	if err != nil {
		return "", newError(CodeSerialization, "cannot serialize %s: %v", root, err)
	}
	return string(b), nil
}

func (e *encoder) add(n any) int {
	e.nodes = append(e.nodes, n)
	return len(e.nodes) - 1
}

func serErr(path, what string) error {
	return newError(CodeSerialization, "Cannot serialize %s at %s", what, path)
}

// ident returns the identity of reference-like values so that shared
// references and cycles are encoded once.
func ident(v any) (identity, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Map, reflect.Pointer:
		if rv.IsNil() {
			return identity{}, false
		}
		return identity{ptr: uintptr(rv.UnsafePointer()), t: rv.Type()}, true
	case reflect.Slice:
		if rv.Len() == 0 {
			return identity{}, false
		}
		return identity{ptr: uintptr(rv.UnsafePointer()), n: rv.Len(), t: rv.Type()}, true
	}
	return identity{}, false
}

func (e *encoder) enc(v any, path string) (int, error) {
	switch x := v.(type) {
	case nil:
		return e.add(nil), nil
	case Undefined:
		return e.add([]any{"u"}), nil
	case bool:
		return e.add(x), nil
	case string:
		return e.add(encodeString(x)), nil
	case float64:
		return e.add(encodeNumber(x)), nil
	case float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr:
		return e.add(encodeNumber(toFloat(x))), nil
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, serErr(path, "an invalid json.Number")
		}
		return e.add(encodeNumber(f)), nil
	case *big.Int:
		if x == nil {
			return e.add(nil), nil
		}
		return e.add([]any{"b", x.String()}), nil
	case big.Int:
		return e.add([]any{"b", x.String()}), nil
	case time.Time:
		return e.add([]any{"D", float64(x.UnixMilli())}), nil
	case *time.Time:
		if x == nil {
			return e.add(nil), nil
		}
		return e.add([]any{"D", float64(x.UnixMilli())}), nil
	case InvalidDate:
		return e.add([]any{"D", nil}), nil
	case *RegExp:
		if x == nil {
			return e.add(nil), nil
		}
		return e.add([]any{"R", x.Source, x.Flags}), nil
	case RegExp:
		return e.add([]any{"R", x.Source, x.Flags}), nil
	}
	id, hasID := ident(v)
	if hasID {
		if i, ok := e.seen[id]; ok {
			return i, nil
		}
	}
	idx := e.add(nil)
	if hasID {
		e.seen[id] = idx
	}
	n, err := e.encCompound(v, path)
	if err != nil {
		return 0, err
	}
	e.nodes[idx] = n
	return idx, nil
}

func (e *encoder) encCompound(v any, path string) (any, error) {
	switch x := v.(type) {
	case []any:
		n := make([]any, 1, len(x)+1)
		n[0] = "a"
		for i, el := range x {
			r, err := e.enc(el, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			n = append(n, r)
		}
		return n, nil
	case *SparseArray:
		if x == nil {
			return nil, nil
		}
		if x.Length < 0 || x.Length > math.MaxUint32 {
			return nil, serErr(path, "a sparse array with an invalid length")
		}
		idxs := make([]int, 0, len(x.Elements))
		for i := range x.Elements {
			if i < 0 || i >= x.Length {
				return nil, serErr(path, "a sparse array element outside its length")
			}
			idxs = append(idxs, i)
		}
		sort.Ints(idxs)
		n := []any{"A", x.Length}
		for _, i := range idxs {
			r, err := e.enc(x.Elements[i], fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			n = append(n, i, r)
		}
		return n, nil
	case map[string]any:
		return e.encObject("o", x, path)
	case NullProto:
		return e.encObject("O", x, path)
	case *Object:
		if x == nil {
			return nil, nil
		}
		return e.encOrdered(x, path)
	case *Map:
		if x == nil {
			return nil, nil
		}
		if len(x.Keys) != len(x.Values) {
			return nil, serErr(path, "a Map whose Keys and Values differ in length")
		}
		n := []any{"M"}
		for i := range x.Keys {
			k, err := e.enc(x.Keys[i], fmt.Sprintf("%s.<key %d>", path, i))
			if err != nil {
				return nil, err
			}
			val, err := e.enc(x.Values[i], fmt.Sprintf("%s.<value %d>", path, i))
			if err != nil {
				return nil, err
			}
			n = append(n, k, val)
		}
		return n, nil
	case *Set:
		if x == nil {
			return nil, nil
		}
		n := []any{"S"}
		for i, el := range x.Values {
			r, err := e.enc(el, fmt.Sprintf("%s.<value %d>", path, i))
			if err != nil {
				return nil, err
			}
			n = append(n, r)
		}
		return n, nil
	case ArrayBuffer:
		return []any{"B", base64.StdEncoding.EncodeToString(x)}, nil
	case []byte:
		return []any{"T", "Uint8Array", base64.StdEncoding.EncodeToString(x)}, nil
	case *TypedArray:
		if x == nil {
			return nil, nil
		}
		size, ok := typedArrayTypes[x.Type]
		if !ok || len(x.Data)%size != 0 {
			return nil, serErr(path, "a TypedArray of unknown type or odd length")
		}
		if x.Buffer == nil {
			return []any{"T", x.Type, base64.StdEncoding.EncodeToString(x.Data)}, nil
		}
		if x.ByteOffset < 0 || x.ByteOffset%size != 0 || x.ByteOffset+len(x.Data) > len(x.Buffer) {
			return nil, serErr(path, "a TypedArray whose ByteOffset or length does not fit its Buffer")
		}
		buf, err := e.enc(x.Buffer, path+".buffer")
		if err != nil {
			return nil, err
		}
		return []any{"V", x.Type, buf, x.ByteOffset, len(x.Data)}, nil
	case *JSError:
		if x == nil {
			return nil, nil
		}
		n := []any{"E", x.Name, x.Message, -1, -1}
		if x.Name == "" {
			n[1] = "Error"
		}
		if x.HasCause {
			r, err := e.enc(x.Cause, path+".cause")
			if err != nil {
				return nil, err
			}
			n[3] = r
		}
		if x.Errors != nil {
			r, err := e.enc(x.Errors, path+".errors")
			if err != nil {
				return nil, err
			}
			n[4] = r
		}
		return n, nil
	}
	return e.encReflect(v, path)
}

func (e *encoder) encObject(tag string, m map[string]any, path string) (any, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortKeysJS(keys)
	n := make([]any, 1, 1+2*len(keys))
	n[0] = tag
	for _, k := range keys {
		r, err := e.enc(m[k], childPath(path, k))
		if err != nil {
			return nil, err
		}
		n = append(n, encodeKey(k), r)
	}
	return n, nil
}

func (e *encoder) encOrdered(o *Object, path string) (any, error) {
	if len(o.Keys) != len(o.Values) {
		return nil, serErr(path, "an Object whose Keys and Values differ in length")
	}
	tag := "o"
	if o.NullProto {
		tag = "O"
	}
	n := make([]any, 1, 1+2*len(o.Keys))
	n[0] = tag
	seen := make(map[string]struct{}, len(o.Keys))
	for i, k := range o.Keys {
		if _, dup := seen[k]; dup {
			return nil, serErr(path, "an Object with the key "+strconv.Quote(k)+" twice")
		}
		seen[k] = struct{}{}
		r, err := e.enc(o.Values[i], childPath(path, k))
		if err != nil {
			return nil, err
		}
		n = append(n, encodeKey(k), r)
	}
	return n, nil
}

// arrayIndex reports whether k is an integer-like key that JavaScript lists
// first (a canonical array index, below 2^32-1), and its value.
func arrayIndex(k string) (uint64, bool) {
	if k == "" || len(k) > 10 || k[0] < '0' || k[0] > '9' || (len(k) > 1 && k[0] == '0') {
		return 0, false
	}
	n, err := strconv.ParseUint(k, 10, 64)
	return n, err == nil && n < math.MaxUint32
}

// sortKeysJS orders the keys of a Go map as JavaScript would list them had
// they been added in sorted order: integer-like keys ascending, then the
// rest sorted.
func sortKeysJS(keys []string) {
	sort.Strings(keys)
	indices := 0
	for _, k := range keys {
		if _, ok := arrayIndex(k); ok {
			indices++
		}
	}
	if indices == 0 {
		return // the common case: no integer-like keys
	}
	sort.SliceStable(keys, func(i, j int) bool {
		a, aIdx := arrayIndex(keys[i])
		b, bIdx := arrayIndex(keys[j])
		switch {
		case aIdx && bIdx:
			return a < b
		case aIdx != bIdx:
			return aIdx
		}
		return keys[i] < keys[j]
	})
}

// encReflect handles other Go types: slices and string-keyed maps of any
// element type, and anything encoding/json can marshal (structs), by way of
// JSON. Functions, channels and the like are rejected with their path.
func (e *encoder) encReflect(v any, path string) (any, error) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Func:
		return nil, serErr(path, "a function")
	case reflect.Chan:
		return nil, serErr(path, "a channel")
	case reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return nil, serErr(path, "a "+rv.Kind().String())
	case reflect.Slice, reflect.Array:
		if _, ok := v.(json.Marshaler); !ok {
			n := make([]any, 1, rv.Len()+1)
			n[0] = "a"
			for i := 0; i < rv.Len(); i++ {
				r, err := e.enc(rv.Index(i).Interface(), fmt.Sprintf("%s[%d]", path, i))
				if err != nil {
					return nil, err
				}
				n = append(n, r)
			}
			return n, nil
		}
	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			if _, ok := v.(json.Marshaler); !ok {
				m := make(map[string]any, rv.Len())
				it := rv.MapRange()
				for it.Next() {
					m[it.Key().String()] = it.Value().Interface()
				}
				return e.encObject("o", m, path)
			}
		}
	case reflect.Pointer:
		if rv.IsNil() {
			return nil, nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, serErr(path, fmt.Sprintf("a %T (%v)", v, err))
	}
	var plain any
	if err := json.Unmarshal(b, &plain); err != nil {
		return nil, serErr(path, fmt.Sprintf("a %T", v))
	}
	// Re-encode the plain JSON value in place of this node.
	sub := &encoder{seen: map[identity]int{}}
	if _, err := sub.enc(plain, path); err != nil {
		return nil, err
	}
	// Splice: the sub-encoder's root becomes this node; its other nodes are
	// appended with shifted references.
	base := len(e.nodes)
	shifted := make([]any, len(sub.nodes))
	for i, n := range sub.nodes {
		shifted[i] = shiftRefs(n, base-1)
	}
	e.nodes = append(e.nodes, shifted[1:]...)
	return shifted[0], nil
}

// shiftRefs renumbers the references of a node produced by a sub-encoder whose
// node i lands at index i+delta (node 0 replaces the caller's placeholder).
func shiftRefs(n any, delta int) any {
	arr, ok := n.([]any)
	if !ok || len(arr) == 0 {
		return n
	}
	tag, _ := arr[0].(string)
	out := append([]any(nil), arr...)
	shift := func(i int) {
		if r, ok := out[i].(int); ok && r >= 0 {
			out[i] = r + delta
		}
	}
	switch tag {
	case "a", "S", "M":
		for i := 1; i < len(out); i++ {
			shift(i)
		}
	case "o", "O":
		for i := 2; i < len(out); i += 2 {
			shift(i)
		}
	case "V":
		shift(2)
	}
	return out
}

func childPath(path, key string) string {
	if isIdentifier(key) {
		return path + "." + key
	}
	b, _ := json.Marshal(key)
	return path + "[" + string(b) + "]"
}

func encodeNumber(f float64) any {
	switch {
	case math.IsNaN(f):
		return []any{"n", "NaN"}
	case math.IsInf(f, 1):
		return []any{"n", "Infinity"}
	case math.IsInf(f, -1):
		return []any{"n", "-Infinity"}
	case f == 0 && math.Signbit(f):
		return []any{"n", "-0"}
	}
	return f
}

// encodeString returns a string node: the string itself when it is valid
// UTF-8, else an ["s", units] node keeping WTF-8 lone surrogates.
func encodeString(s string) any {
	if utf8.ValidString(s) {
		return s
	}
	u, lone := wtf8ToUTF16(s)
	if !lone {
		return string(utf16.Decode(u))
	}
	units := make([]any, len(u))
	for i, c := range u {
		units[i] = int(c)
	}
	return []any{"s", units}
}

// encodeKey makes an object key safe for JSON: keys with lone surrogates
// become U+FFFD (JavaScript keys with lone surrogates are rare; the guest's
// own serializer keeps them, a Go map key cannot round-trip them through
// encoding/json anyway).
func encodeKey(k string) string {
	if utf8.ValidString(k) {
		return k
	}
	return strings.ToValidUTF8(k, "\uFFFD")
}

// wtf8ToUTF16 decodes WTF-8 (UTF-8 that may hold surrogate code points);
// other invalid bytes become U+FFFD. It reports whether a lone surrogate
// remains.
func wtf8ToUTF16(s string) ([]uint16, bool) {
	var u []uint16
	for i := 0; i < len(s); {
		if i+2 < len(s) && s[i] == 0xED && s[i+1] >= 0xA0 && s[i+1] <= 0xBF && s[i+2] >= 0x80 && s[i+2] <= 0xBF {
			cp := 0xD000 | uint16(s[i+1]&0x3F)<<6 | uint16(s[i+2]&0x3F)
			u = append(u, cp)
			i += 3
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		u = utf16.AppendRune(u, r)
	}
	lone := false
	for i := 0; i < len(u); i++ {
		c := u[i]
		if c >= 0xD800 && c <= 0xDBFF && i+1 < len(u) && u[i+1] >= 0xDC00 && u[i+1] <= 0xDFFF {
			i++
			continue
		}
		if c >= 0xD800 && c <= 0xDFFF {
			lone = true
		}
	}
	return u, lone
}

// utf16ToWTF8 encodes UTF-16 code units as WTF-8: pairs as their character,
// lone surrogates as their own three bytes.
func utf16ToWTF8(u []uint16) string {
	var b strings.Builder
	for i := 0; i < len(u); i++ {
		c := u[i]
		if c >= 0xD800 && c <= 0xDBFF && i+1 < len(u) && u[i+1] >= 0xDC00 && u[i+1] <= 0xDFFF {
			b.WriteRune(utf16.DecodeRune(rune(c), rune(u[i+1])))
			i++
			continue
		}
		if c >= 0xD800 && c <= 0xDFFF {
			b.WriteByte(0xED)
			b.WriteByte(byte(0xA0 | (c>>6)&0x1F))
			b.WriteByte(byte(0x80 | c&0x3F))
			continue
		}
		b.WriteRune(rune(c))
	}
	return b.String()
}

// ---- decoding

type decoder struct {
	nodes   []any
	memo    []any
	state   []uint8 // 0 unseen, 1 in progress / done
	ordered bool    // plain objects as *Object
}

func decodeWire(wire string) (any, error) { return decodeWireAs(wire, false) }

// decodeWireAs decodes; with ordered, plain and null-prototype objects
// become *Object with their keys in order.
func decodeWireAs(wire string, ordered bool) (any, error) {
	var nodes []any
	if err := json.Unmarshal([]byte(wire), &nodes); err != nil {
		return nil, newError(CodeSerialization, "invalid %s value: %v", serdeName, err)
	}
	if len(nodes) == 0 {
		return nil, newError(CodeSerialization, "invalid %s value: no root node", serdeName)
	}
	d := &decoder{nodes: nodes, memo: make([]any, len(nodes)), state: make([]uint8, len(nodes)), ordered: ordered}
	return d.de(0)
}

func badNode(i int, why string) error {
	return newError(CodeSerialization, "invalid %s value: node %d: %s", serdeName, i, why)
}

func (d *decoder) ref(x any) (int, bool) {
	f, ok := x.(float64)
	if !ok || f != math.Trunc(f) || f < 0 || f >= float64(len(d.nodes)) {
		return 0, false
	}
	return int(f), true
}

func (d *decoder) child(i int, x any) (any, error) {
	r, ok := d.ref(x)
	if !ok {
		return nil, badNode(i, "bad reference")
	}
	return d.de(r)
}

func str(x any) (string, bool) { s, ok := x.(string); return s, ok }

func (d *decoder) de(i int) (any, error) {
	if d.state[i] != 0 {
		return d.memo[i], nil
	}
	n := d.nodes[i]
	arr, ok := n.([]any)
	if !ok {
		if _, isObj := n.(map[string]any); isObj {
			return nil, badNode(i, "object node")
		}
		d.state[i] = 1
		d.memo[i] = n
		return n, nil
	}
	if len(arr) == 0 {
		return nil, badNode(i, "empty node")
	}
	tag, ok := str(arr[0])
	if !ok {
		return nil, badNode(i, "missing tag")
	}
	set := func(v any) (any, error) { d.state[i] = 1; d.memo[i] = v; return v, nil }
	switch tag {
	case "u":
		return set(Undefined{})
	case "n":
		if len(arr) != 2 {
			return nil, badNode(i, "bad number")
		}
		switch arr[1] {
		case "NaN":
			return set(math.NaN())
		case "Infinity":
			return set(math.Inf(1))
		case "-Infinity":
			return set(math.Inf(-1))
		case "-0":
			return set(math.Copysign(0, -1))
		}
		return nil, badNode(i, "bad number")
	case "b":
		s, _ := str(elem(arr, 1))
		b, ok := new(big.Int).SetString(s, 10)
		if !ok || len(arr) != 2 {
			return nil, badNode(i, "bad bigint")
		}
		return set(b)
	case "s":
		raw, ok := elem(arr, 1).([]any)
		if !ok || len(arr) != 2 {
			return nil, badNode(i, "bad string")
		}
		u := make([]uint16, len(raw))
		for j, x := range raw {
			f, ok := x.(float64)
			if !ok || f < 0 || f > 0xFFFF || f != math.Trunc(f) {
				return nil, badNode(i, "bad code unit")
			}
			u[j] = uint16(f)
		}
		return set(utf16ToWTF8(u))
	case "D":
		if len(arr) != 2 {
			return nil, badNode(i, "bad date")
		}
		if arr[1] == nil {
			return set(InvalidDate{})
		}
		f, ok := arr[1].(float64)
		if !ok || math.Abs(f) > 8.64e15 || f != math.Trunc(f) {
			return nil, badNode(i, "bad date")
		}
		return set(time.UnixMilli(int64(f)).UTC())
	case "R":
		src, ok1 := str(elem(arr, 1))
		flags, ok2 := str(elem(arr, 2))
		if !ok1 || !ok2 || len(arr) != 3 {
			return nil, badNode(i, "bad regexp")
		}
		return set(&RegExp{Source: src, Flags: flags})
	case "B":
		s, _ := str(elem(arr, 1))
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(arr) != 2 {
			return nil, badNode(i, "bad ArrayBuffer")
		}
		return set(ArrayBuffer(b))
	case "T":
		typ, _ := str(elem(arr, 1))
		s, _ := str(elem(arr, 2))
		size, known := typedArrayTypes[typ]
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || !known || len(b)%size != 0 || len(arr) != 3 {
			return nil, badNode(i, "bad typed array")
		}
		return set(&TypedArray{Type: typ, Data: b, Buffer: ArrayBuffer(b)})
	case "V":
		typ, _ := str(elem(arr, 1))
		size, known := typedArrayTypes[typ]
		off, ok1 := elem(arr, 3).(float64)
		n, ok2 := elem(arr, 4).(float64)
		if !known || !ok1 || !ok2 || len(arr) != 5 || off < 0 || n < 0 || off != math.Trunc(off) || n != math.Trunc(n) {
			return nil, badNode(i, "bad view")
		}
		d.state[i] = 1 // a view that refers to itself decodes to nil here and fails below
		v, err := d.child(i, arr[2])
		if err != nil {
			return nil, err
		}
		buf, ok := v.(ArrayBuffer)
		if !ok || off+n > float64(len(buf)) || int(off)%size != 0 || int(n)%size != 0 {
			return nil, badNode(i, "bad view")
		}
		return set(&TypedArray{Type: typ, Data: buf[int(off) : int(off)+int(n) : int(off)+int(n)], Buffer: buf, ByteOffset: int(off)})
	case "a":
		out := make([]any, len(arr)-1)
		set(out)
		for j := 1; j < len(arr); j++ {
			v, err := d.child(i, arr[j])
			if err != nil {
				return nil, err
			}
			out[j-1] = v
		}
		return out, nil
	case "A":
		l, ok := elem(arr, 1).(float64)
		if !ok || l < 0 || l > math.MaxUint32 || l != math.Trunc(l) || len(arr)%2 != 0 {
			return nil, badNode(i, "bad sparse array")
		}
		out := &SparseArray{Length: int(l), Elements: map[int]any{}}
		set(out)
		for j := 2; j+1 < len(arr); j += 2 {
			k, ok := arr[j].(float64)
			if !ok || k < 0 || k >= l || k != math.Trunc(k) {
				return nil, badNode(i, "bad sparse index")
			}
			v, err := d.child(i, arr[j+1])
			if err != nil {
				return nil, err
			}
			out.Elements[int(k)] = v
		}
		return out, nil
	case "o", "O":
		if len(arr)%2 != 1 {
			return nil, badNode(i, "bad object")
		}
		if d.ordered {
			return d.deOrdered(i, tag, arr)
		}
		m := make(map[string]any, (len(arr)-1)/2)
		if tag == "O" {
			set(NullProto(m))
		} else {
			set(m)
		}
		for j := 1; j+1 < len(arr); j += 2 {
			k, ok := str(arr[j])
			if !ok {
				return nil, badNode(i, "bad key")
			}
			v, err := d.child(i, arr[j+1])
			if err != nil {
				return nil, err
			}
			m[k] = v
		}
		return d.memo[i], nil
	case "M":
		if len(arr)%2 != 1 {
			return nil, badNode(i, "bad map")
		}
		out := &Map{}
		set(out)
		for j := 1; j+1 < len(arr); j += 2 {
			k, err := d.child(i, arr[j])
			if err != nil {
				return nil, err
			}
			v, err := d.child(i, arr[j+1])
			if err != nil {
				return nil, err
			}
			out.Keys = append(out.Keys, k)
			out.Values = append(out.Values, v)
		}
		return out, nil
	case "S":
		out := &Set{}
		set(out)
		for j := 1; j < len(arr); j++ {
			v, err := d.child(i, arr[j])
			if err != nil {
				return nil, err
			}
			out.Values = append(out.Values, v)
		}
		return out, nil
	case "E":
		name, ok1 := str(elem(arr, 1))
		msg, ok2 := str(elem(arr, 2))
		if !ok1 || !ok2 || len(arr) != 5 {
			return nil, badNode(i, "bad error")
		}
		out := &JSError{Name: name, Message: msg}
		set(out)
		if f, _ := arr[3].(float64); f != -1 {
			v, err := d.child(i, arr[3])
			if err != nil {
				return nil, err
			}
			out.Cause, out.HasCause = v, true
		}
		if f, _ := arr[4].(float64); f != -1 {
			v, err := d.child(i, arr[4])
			if err != nil {
				return nil, err
			}
			errs, ok := v.([]any)
			if !ok {
				return nil, badNode(i, "bad AggregateError errors")
			}
			out.Errors = errs
		}
		return out, nil
	}
	return nil, badNode(i, "unknown tag "+strconv.Quote(tag))
}

func (d *decoder) deOrdered(i int, tag string, arr []any) (any, error) {
	o := &Object{NullProto: tag == "O", Keys: make([]string, 0, (len(arr)-1)/2), Values: make([]any, 0, (len(arr)-1)/2)}
	d.state[i], d.memo[i] = 1, o
	seen := make(map[string]struct{}, (len(arr)-1)/2)
	for j := 1; j+1 < len(arr); j += 2 {
		k, ok := str(arr[j])
		if !ok {
			return nil, badNode(i, "bad key")
		}
		if _, dup := seen[k]; dup {
			return nil, badNode(i, "repeated key")
		}
		seen[k] = struct{}{}
		v, err := d.child(i, arr[j+1])
		if err != nil {
			return nil, err
		}
		o.Keys = append(o.Keys, k)
		o.Values = append(o.Values, v)
	}
	return o, nil
}

func elem(arr []any, i int) any {
	if i < len(arr) {
		return arr[i]
	}
	return nil
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	return true
}
