// Package jsonr reads JSON of a known shape without reflection, for the
// upstream answers and tool arguments the gateway decodes once per tool
// step.
//
// A Reader never guesses. It handles a subset of what encoding/json
// accepts, and on anything outside it — a name that matches a known one
// only without regard to case, a name with an escape or a non-ASCII byte,
// a duplicate known name, a number that is not a plain integer where an
// integer is read, a string with invalid UTF-8 or a lone surrogate, nesting
// deeper than MaxDepth, or invalid JSON — it fails, and the caller decodes
// the same bytes with encoding/json instead. So it fails on more inputs
// than encoding/json, and where it succeeds it yields what encoding/json
// would have (FuzzMatchesEncodingJSON in the callers' tests checks this).
//
// Why it is kept (issue 30's rule: a hand-written codec stays only where
// it saves 30 µs or more per tool step): turning the readers off (every
// answer and tool argument decoded by unmarshal instead) adds 34–46 µs to
// the gateway's own time per step, per client API, with the results
// written by encoding/json as they are now (2026-12-04, load 10–14 on
// 2 vCPUs; BENCHMARKS.md), nojsonr-step-gw-µs against step-gw-µs of
//
//	go test -count=1 -run XXX -bench BenchmarkGatewayStep -benchtime 120x ./internal/server/
//
// Measured under load; re-measure on a quiet machine before relying on
// the margin.
package jsonr

import (
	"encoding/json"
	"strconv"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"
)

// Off, when set, makes Decode and String fail, so that every caller takes
// its library path: BenchmarkGatewayStep measures a step both ways.
var Off atomic.Bool

// MaxDepth is the deepest nesting a Reader follows.
const MaxDepth = 200

// Reader reads one JSON value from a byte slice.
type Reader struct {
	b     []byte
	i     int
	depth int
	bad   bool
	buf   []byte // scratch for strings with escapes
	// s is b as a string, made when first needed: the strings without
	// escapes are slices of it, one allocation for all (which keeps all
	// of b alive as long as any of them).
	s string
}

// Decode reads data, which must hold exactly one value (with surrounding
// whitespace), with top. It reports whether top and every read in it
// succeeded; on false the destination may be partly written.
func Decode(data []byte, top func(r *Reader) bool) bool {
	if Off.Load() {
		return false
	}
	r := Reader{b: data}
	r.ws()
	if !top(&r) || r.bad {
		return false
	}
	r.ws()
	return r.i == len(r.b)
}

// String decodes data when it holds exactly one JSON string, as Decode
// with Str would, without allocating a Reader.
func String(data []byte) (string, bool) {
	if Off.Load() {
		return "", false
	}
	r := Reader{b: data}
	if r.peek() != '"' {
		return "", false
	}
	s, ok := r.str(true)
	r.ws()
	return s, ok && !r.bad && r.i == len(r.b)
}

func (r *Reader) fail() bool {
	r.bad = true
	return false
}

func (r *Reader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// peek is the next value's first byte (after whitespace), 0 at the end.
func (r *Reader) peek() byte {
	r.ws()
	if r.i >= len(r.b) {
		return 0
	}
	return r.b[r.i]
}

// lit consumes the literal s (null, true, false).
func (r *Reader) lit(s string) bool {
	if len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		return r.fail()
	}
	r.i += len(s)
	return true
}

// Null consumes a null and reports true when the next value is one.
func (r *Reader) Null() bool {
	if r.peek() == 'n' {
		return r.lit("null")
	}
	return false
}

// Object reads an object: for each member whose name is names[k] exactly,
// field(k) with the reader at the member's value, which field must read;
// other members are skipped. A null is read as no object (encoding/json
// leaves a struct as it was). It fails on a name that equals a known one
// without regard to ASCII case, on a name with an escape or a non-ASCII
// byte (encoding/json would match either to a known name by case folding
// or unescaping), and on a known name seen twice (encoding/json merges);
// names has at most 64 entries.
func (r *Reader) Object(names []string, field func(k int) bool) bool {
	if r.Null() {
		return true
	}
	empty, ok := r.enter('{', '}')
	if !ok || empty {
		return ok
	}
	var seen uint64
	for {
		if r.peek() != '"' {
			return r.fail()
		}
		name, ok := r.name()
		if !ok || r.peek() != ':' {
			return r.fail()
		}
		r.i++
		k := -1
		for j, n := range names {
			if n == string(name) {
				k = j
				break
			}
			if len(n) == len(name) && equalFoldASCII(n, name) {
				return r.fail()
			}
		}
		if k >= 0 {
			if seen&(1<<k) != 0 {
				return r.fail()
			}
			seen |= 1 << k
			if !field(k) || r.bad {
				return r.fail()
			}
		} else if !r.Skip() {
			return false
		}
		if !r.more('}') {
			return !r.bad
		}
	}
}

// enter consumes the opening byte of an object or array and reports
// whether it is empty (its closing byte consumed too).
func (r *Reader) enter(open, close byte) (empty, ok bool) {
	if r.peek() != open {
		return false, r.fail()
	}
	if r.depth++; r.depth > MaxDepth {
		return false, r.fail()
	}
	r.i++
	if r.peek() == close {
		r.i++
		r.depth--
		return true, true
	}
	return false, true
}

// more consumes what follows a member or an element: true at a comma,
// false at the closing byte (consumed) or on an error (r.bad set).
func (r *Reader) more(close byte) bool {
	switch r.peek() {
	case ',':
		r.i++
		return true
	case close:
		r.i++
		r.depth--
		return false
	}
	r.fail()
	return false
}

// key reads a member's name (any string, decoded when keep is set) and
// the colon after it.
func (r *Reader) key(keep bool) (string, bool) {
	if r.peek() != '"' {
		return "", r.fail()
	}
	k, ok := r.str(keep)
	if !ok || r.peek() != ':' {
		return "", r.fail()
	}
	r.i++
	return k, true
}

// name reads a member name made of printable ASCII without escapes; the
// slice aliases the input.
func (r *Reader) name() ([]byte, bool) {
	start := r.i + 1
	for j := start; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			r.i = j + 1
			return r.b[start:j], true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

func equalFoldASCII(s string, b []byte) bool {
	for i := range len(s) {
		x, y := s[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// Array reads an array, calling elem with the reader at each element,
// which elem must read. A null fails: the caller checks Null first, as
// the meaning of a null array is its own (encoding/json sets a slice nil).
func (r *Reader) Array(elem func() bool) bool {
	empty, ok := r.enter('[', ']')
	if !ok || empty {
		return ok
	}
	for {
		if !elem() || r.bad {
			return r.fail()
		}
		if !r.more(']') {
			return !r.bad
		}
	}
}

// Strs reads an object of string fields (Object's rules): the member
// names[k] into dst[k] with Str.
func (r *Reader) Strs(names []string, dst ...*string) bool {
	return r.Object(names, func(k int) bool { return r.Str(dst[k]) })
}

// Str reads a string into dst; a null leaves dst as it is.
func (r *Reader) Str(dst *string) bool {
	switch r.peek() {
	case 'n':
		return r.lit("null")
	case '"':
		s, ok := r.str(true)
		if ok {
			*dst = s
		}
		return ok
	}
	return r.fail()
}

// str reads a string (at its opening quote), decoding it when keep is
// set. It fails on a control character, an invalid escape, a lone
// surrogate or invalid UTF-8 (which encoding/json replaces with U+FFFD).
func (r *Reader) str(keep bool) (string, bool) {
	start := r.i + 1
	j := start
	for j < len(r.b) {
		c := r.b[j]
		switch {
		case c == '"':
			r.i = j + 1
			if !keep {
				return "", true
			}
			if r.s == "" {
				r.s = string(r.b)
			}
			return r.s[start:j], true
		case c == '\\':
			return r.strEscaped(start, j, keep)
		case c < 0x20:
			return "", r.fail()
		case c < utf8.RuneSelf:
			j++
		default:
			n := runeLen(r.b[j:])
			if n == 0 {
				return "", r.fail()
			}
			j += n
		}
	}
	return "", r.fail()
}

// strEscaped goes on with a string whose first escape is at j. A kept
// string is decoded into its own array, as long as the string's source
// (unescaping never lengthens it), which becomes the string: one
// allocation; a skipped one is decoded into the reader's scratch.
func (r *Reader) strEscaped(start, j int, keep bool) (string, bool) {
	end := j
	for end < len(r.b) && r.b[end] != '"' {
		if r.b[end] == '\\' {
			end++
		}
		end++
	}
	if end >= len(r.b) {
		return "", r.fail()
	}
	buf := r.buf[:0]
	if keep {
		buf = make([]byte, 0, end-start)
	}
	buf = append(buf, r.b[start:j]...)
	for j < len(r.b) {
		c := r.b[j]
		switch {
		case c == '"':
			r.i = j + 1
			if !keep {
				r.buf = buf
				return "", true
			}
			// buf is this string's own and never written again.
			return unsafe.String(unsafe.SliceData(buf), len(buf)), true
		case c == '\\':
			if j+1 >= len(r.b) {
				return "", r.fail()
			}
			j += 2
			switch r.b[j-1] {
			case '"', '\\', '/':
				buf = append(buf, r.b[j-1])
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				ru, ok := hex4(r.b, j)
				if !ok {
					return "", r.fail()
				}
				j += 4
				if utf8.ValidRune(ru) {
					buf = utf8.AppendRune(buf, ru)
					break
				}
				// A surrogate: valid only as a high one followed by
				// the escape of a low one.
				lo, ok := hex4(r.b, j+2)
				if !ok || ru >= 0xDC00 || r.b[j] != '\\' || r.b[j+1] != 'u' || lo < 0xDC00 || lo > 0xDFFF {
					return "", r.fail()
				}
				j += 6
				buf = utf8.AppendRune(buf, 0x10000+(ru-0xD800)<<10+(lo-0xDC00))
			default:
				return "", r.fail()
			}
		case c < 0x20:
			return "", r.fail()
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			j++
		default:
			n := runeLen(r.b[j:])
			if n == 0 {
				return "", r.fail()
			}
			buf = append(buf, r.b[j:j+n]...)
			j += n
		}
	}
	return "", r.fail()
}

// runeLen is the length of the UTF-8 sequence b starts with, 0 when it
// is not a valid one (encoding/json would decode it as U+FFFD).
func runeLen(b []byte) int {
	ru, n := utf8.DecodeRune(b)
	if ru == utf8.RuneError && n == 1 {
		return 0
	}
	return n
}

// hex4 is the value of the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || len(b)-i < 4 {
		return 0, false
	}
	var v rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | rune(c)
	}
	return v, true
}

// number consumes a number and returns its text; integer says whether it
// has neither fraction nor exponent.
func (r *Reader) number() (text []byte, integer bool, ok bool) {
	b, start := r.b, r.i
	j := start
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && '1' <= b[j] && b[j] <= '9':
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
	default:
		return nil, false, r.fail()
	}
	integer = true
	if j < len(b) && b[j] == '.' {
		integer = false
		if j = digits(b, j+1); j < 0 {
			return nil, false, r.fail()
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		integer = false
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if j = digits(b, j); j < 0 {
			return nil, false, r.fail()
		}
	}
	r.i = j
	return b[start:j], integer, true
}

// digits is the index after the digits at b[j:], -1 when there are none.
func digits(b []byte, j int) int {
	d := j
	for j < len(b) && '0' <= b[j] && b[j] <= '9' {
		j++
	}
	if j == d {
		return -1
	}
	return j
}

// Int reads an integer that fits in bits bits (a number with a fraction
// or an exponent fails, as it does in encoding/json); a null leaves dst
// as it is.
func (r *Reader) Int(dst *int64, bits int) bool {
	c := r.peek()
	if c == 'n' {
		return r.lit("null")
	}
	if c != '-' && (c < '0' || c > '9') {
		return r.fail()
	}
	text, integer, ok := r.number()
	if !ok || !integer {
		return r.fail()
	}
	v, err := strconv.ParseInt(string(text), 10, bits)
	if err != nil {
		return r.fail()
	}
	*dst = v
	return true
}

// Int64 is Int for an int64.
func (r *Reader) Int64(dst *int64) bool { return r.Int(dst, 64) }

// Int32 is Int for an int32.
func (r *Reader) Int32(dst *int32) bool {
	v := int64(*dst)
	if !r.Int(&v, 32) {
		return false
	}
	*dst = int32(v)
	return true
}

// Bool reads true or false; a null leaves dst as it is.
func (r *Reader) Bool(dst *bool) bool {
	switch r.peek() {
	case 'n':
		return r.lit("null")
	case 't':
		*dst = true
		return r.lit("true")
	case 'f':
		*dst = false
		return r.lit("false")
	}
	return r.fail()
}

// Raw reads any value and sets dst to a copy of its text, as
// encoding/json does for a json.RawMessage (a null included).
func (r *Reader) Raw(dst *json.RawMessage) bool {
	r.ws()
	start := r.i
	if !r.Skip() {
		return false
	}
	*dst = append(json.RawMessage(nil), r.b[start:r.i]...)
	return true
}

// Skip reads any value and discards it.
func (r *Reader) Skip() bool {
	switch c := r.peek(); {
	case c == '{':
		empty, ok := r.enter('{', '}')
		if !ok || empty {
			return ok
		}
		for {
			if _, ok := r.key(false); !ok || !r.Skip() {
				return r.fail()
			}
			if !r.more('}') {
				return !r.bad
			}
		}
	case c == '[':
		return r.Array(r.Skip)
	case c == '"':
		_, ok := r.str(false)
		return ok
	case c == 'n':
		return r.lit("null")
	case c == 't':
		return r.lit("true")
	case c == 'f':
		return r.lit("false")
	case c == '-' || '0' <= c && c <= '9':
		_, _, ok := r.number()
		return ok
	}
	return r.fail()
}

// Any reads any value as encoding/json decodes it into an interface{}:
// map[string]any, []any, float64, string, bool or nil. It fails on a
// duplicate name in an object (encoding/json keeps the last) and on a
// number out of float64's range.
func (r *Reader) Any() (any, bool) {
	switch c := r.peek(); {
	case c == '{':
		m := map[string]any{}
		return m, r.Map(m)
	case c == '[':
		s := []any{}
		ok := r.Array(func() bool {
			v, ok := r.Any()
			s = append(s, v)
			return ok
		})
		return s, ok
	case c == '"':
		return r.str(true)
	case c == 'n':
		return nil, r.lit("null")
	case c == 't':
		return true, r.lit("true")
	case c == 'f':
		return false, r.lit("false")
	case c == '-' || '0' <= c && c <= '9':
		text, _, ok := r.number()
		if !ok {
			return nil, false
		}
		f, err := strconv.ParseFloat(string(text), 64)
		if err != nil {
			return nil, r.fail()
		}
		return f, true
	}
	return nil, r.fail()
}

// Map reads an object's members into m with Any (the reader must be at
// an object, not a null).
func (r *Reader) Map(m map[string]any) bool {
	empty, ok := r.enter('{', '}')
	if !ok || empty {
		return ok
	}
	for {
		k, ok := r.key(true)
		if !ok {
			return false
		}
		if _, dup := m[k]; dup {
			return r.fail()
		}
		v, ok := r.Any()
		if !ok {
			return r.fail()
		}
		m[k] = v
		if !r.more('}') {
			return !r.bad
		}
	}
}

// Slice reads an array into *s as encoding/json does (null sets it nil,
// an empty array makes it empty and not nil), each element with elem.
func Slice[S ~[]E, E any](r *Reader, s *S, elem func(e *E) bool) bool {
	if r.Null() {
		*s = nil
		return true
	}
	*s = make(S, 0, 2) // the arrays read are short
	return r.Array(func() bool {
		var zero E
		*s = append(*s, zero)
		return elem(&(*s)[len(*s)-1])
	})
}

// Ptr reads a value into *p as encoding/json does: null sets it nil,
// anything else is read by read into a new value.
func Ptr[T any](r *Reader, p **T, read func(v *T) bool) bool {
	if r.Null() {
		*p = nil
		return true
	}
	*p = new(T)
	return read(*p)
}
