package jsrun

import (
	"math/big"
	"time"
)

// Values crossing between the guest and Go (host-function arguments and
// results, interruption payloads, resolutions, the completed value) use these
// Go types:
//
//	JavaScript                 Go
//	undefined                  Undefined{}
//	null                       nil
//	boolean                    bool
//	number (incl. NaN, ±Inf,   float64 (any Go integer or float32 is accepted
//	  -0)                        when encoding)
//	string                     string (a lone surrogate is kept as WTF-8 bytes)
//	BigInt                     *big.Int
//	Date                       time.Time (millisecond precision); InvalidDate{}
//	RegExp                     *RegExp
//	Array (dense)              []any
//	Array (with holes)         *SparseArray
//	plain object               map[string]any, or *Object (keys in order)
//	                             with Config.OrderedObjects
//	Object.create(null)        NullProto, or *Object with NullProto set
//	Map / Set                  *Map / *Set (insertion order kept)
//	ArrayBuffer                ArrayBuffer
//	typed array, DataView      *TypedArray ([]byte encodes as a Uint8Array)
//	Error, AggregateError      *JSError
//
// Shared references and cycles are kept: a map, slice or pointer that occurs
// twice in a value is one object in the guest, and the other way round.
// Encoding also accepts structs and other Go values that encoding/json can
// marshal (converted through JSON); anything else (channels, functions) is a
// serialization error naming the path of the bad value.

// Undefined is JavaScript's undefined.
type Undefined struct{}

// InvalidDate is a Date whose time value is NaN.
type InvalidDate struct{}

// RegExp is a JavaScript regular expression.
type RegExp struct {
	Source string
	Flags  string
}

// SparseArray is an array with holes: Elements maps the present indices.
type SparseArray struct {
	Length   int
	Elements map[int]any
}

// NullProto is an object with a null prototype.
type NullProto map[string]any

// Map is a JavaScript Map; Keys[i] maps to Values[i].
type Map struct {
	Keys   []any
	Values []any
}

// Set is a JavaScript Set.
type Set struct {
	Values []any
}

// ArrayBuffer is a JavaScript ArrayBuffer.
type ArrayBuffer []byte

// TypedArray is a typed array or DataView: Type is the constructor name
// ("Uint8Array", "Float64Array", "DataView", ...) and Data the viewed bytes in
// little-endian order. Buffer, when set, is the whole ArrayBuffer the view
// looks into, from ByteOffset (Data is then Buffer[ByteOffset:][:len(Data)]):
// views over one buffer share it, in the guest and in Go. Decoded values
// always have it; without it a view gets a buffer of its own.
type TypedArray struct {
	Type       string
	Data       []byte
	Buffer     ArrayBuffer
	ByteOffset int
}

// NewView returns a view of type typ over byteLength bytes of buf from
// byteOffset.
func NewView(typ string, buf ArrayBuffer, byteOffset, byteLength int) *TypedArray {
	return &TypedArray{Type: typ, Data: buf[byteOffset : byteOffset+byteLength], Buffer: buf, ByteOffset: byteOffset}
}

// Object is a plain JavaScript object (or, with NullProto, one with a null
// prototype) whose keys keep their order: Keys[i] maps to Values[i]. Values
// decode to it when Config.OrderedObjects is set; it always encodes in its
// own order (a JavaScript object still lists integer-like keys first, in
// ascending order, as JavaScript does). A map[string]any encodes with its
// integer-like keys first in ascending order, then the others sorted.
type Object struct {
	Keys      []string
	Values    []any
	NullProto bool
}

// NewObject builds an Object from alternating keys and values.
func NewObject(kv ...any) *Object {
	o := &Object{}
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		o.Keys = append(o.Keys, k)
		o.Values = append(o.Values, kv[i+1])
	}
	return o
}

// Get returns the value of key k.
func (o *Object) Get(k string) (any, bool) {
	for i, x := range o.Keys {
		if x == k {
			return o.Values[i], true
		}
	}
	return nil, false
}

// JSError is a JavaScript Error value (not a thrown failure of the run): name,
// message, an optional cause and, for AggregateError, the errors. Stacks are
// not serialized.
type JSError struct {
	Name     string
	Message  string
	Cause    any
	HasCause bool
	Errors   []any
}

var (
	_ = big.NewInt
	_ = time.Time{}
)

var typedArrayTypes = map[string]int{
	"Int8Array": 1, "Uint8Array": 1, "Uint8ClampedArray": 1, "Int16Array": 2, "Uint16Array": 2,
	"Int32Array": 4, "Uint32Array": 4, "Float16Array": 2, "Float32Array": 4, "Float64Array": 8,
	"BigInt64Array": 8, "BigUint64Array": 8, "DataView": 1,
}
