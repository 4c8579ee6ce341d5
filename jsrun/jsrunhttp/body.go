package jsrunhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/shellgate/shellgate/jsrun"
)

// A request body is read as a stream. fieldReader passes it to the JSON
// decoder unchanged while it measures each top-level field of the object,
// and fails the read as soon as a field is larger than the most a legal
// request needs there (fieldCaps): a source of 40 MiB is refused once its
// first 256 KiB have arrived, before the decoder has buffered the rest or
// the request was decoded. The runner still checks every limit exactly;
// these caps are upper bounds that no request it would accept passes.
//
// A field's size is the bytes of its strings as decoded (an escape counts
// as what it stands for, so escaping does not make a legal source too
// large) plus the bytes of its syntax (quotes, brackets, numbers).
// Whitespace between tokens is counted apart, against maxWhitespace for
// the whole body, and so are the keys.

// maxWhitespace bounds the whitespace and keys outside strings in one body.
const maxWhitespace = 4 << 20

// fieldCap is the most one top-level field may hold; tooLarge is the
// error a request over it gets.
type fieldCap struct {
	max      int64
	tooLarge func() error
}

// fieldCaps are the caps of the request's fields for a runner with limits
// lim and a body cap of maxBody. Field names are matched as encoding/json
// matches them to Request's; a key that is not one of them (or is written
// with escapes) gets the smallest cap, since no legal request has one.
func fieldCaps(lim jsrun.Limits, maxBody int64) func(key string) fieldCap {
	over := func(field string, max int64) func() error {
		return func() error {
			return &bodyTooLarge{field: field, max: max}
		}
	}
	const small = 64 << 10
	caps := map[string]fieldCap{
		// The string and its quotes.
		"source": {int64(lim.SourceBytes) + 2, func() error {
			return &jsrun.Error{Code: jsrun.CodeSourceTooLarge, Name: "RunError", Details: map[string]any{"limit": "maxSourceBytes"},
				Message: fmt.Sprintf("source is over the limit of %d bytes", lim.SourceBytes)}
		}},
		// A continuation is ASCII (base64url and "."); no encoder escapes
		// it. Over its limit it is what the runner calls it, invalid.
		"continuation": {int64(lim.ContinuationBytes) + 2, func() error {
			return &jsrun.Error{Code: jsrun.CodeProtocol, Name: "RunError",
				Message: fmt.Sprintf("invalid continuation: over the limit of %d bytes", lim.ContinuationBytes)}
		}},
		// The most module source a run may load, and their names.
		"modules": {int64(lim.ModuleBytes) + small, over("modules", int64(lim.ModuleBytes)+small)},
		// The context is sealed into the continuation when the run
		// interrupts, so it is never larger than one.
		"context": {int64(lim.ContinuationBytes), over("context", int64(lim.ContinuationBytes))},
		// Up to InFlightHostCalls resolutions of HostOutputBytes each: more
		// than any body cap, so the body cap bounds them.
		"resolutions":      {maxBody, over("resolutions", maxBody)},
		"client_functions": {1 << 20, over("client_functions", 1<<20)},
		"language":         {small, over("language", small)},
		"source_type":      {small, over("source_type", small)},
		"sandbox":          {small, over("sandbox", small)},
		"limits":           {small, over("limits", small)},
	}
	return func(key string) fieldCap {
		if c, ok := caps[strings.ToLower(key)]; ok {
			return c
		}
		return fieldCap{small, over(key, small)}
	}
}

// bodyTooLarge is a field over its cap (413, EVAL_BODY_TOO_LARGE).
type bodyTooLarge struct {
	field string
	max   int64
	gaps  bool // whitespace and keys, not a field
	whole bool // the whole body, over the route's cap
}

func (e *bodyTooLarge) Error() string {
	if e.whole {
		return fmt.Sprintf("request body over %d bytes", e.max)
	}
	if e.gaps {
		return fmt.Sprintf("the request body has more than %d bytes of whitespace and keys", e.max)
	}
	return fmt.Sprintf("field %q is larger than %d bytes", e.field, e.max)
}

// errNotObject is a body that does not start with a JSON object.
var errNotObject = &badRequest{"invalid request JSON: the body must be a JSON object"}

// fieldReader is the body as the decoder reads it (see above). Once the
// top-level object ends it passes the rest through unmeasured: the decoder
// reads no further than the chunk the object ended in.
type fieldReader struct {
	r    io.Reader
	caps func(key string) fieldCap
	err  error

	started, done bool
	depth         int  // of objects and arrays; the request object is 1
	inString      bool // within a string (key or value)
	esc           int  // 0; 1 after a backslash; 2-5 hex digits of \u read
	hex           rune
	isKey         bool // the string is a top-level key
	expectKey     bool // at depth 1, between fields
	key           []byte
	keyPlain      bool // the key had no escape and fits in key
	cur           fieldCap
	readErr       error // the body's own, other than io.EOF
	n             int64 // size of the current field so far
	gaps          int64 // whitespace and keys
}

func newFieldReader(r io.Reader, caps func(string) fieldCap) *fieldReader {
	return &fieldReader{r: r, caps: caps, key: make([]byte, 0, 32)}
}

func (f *fieldReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.r.Read(p)
	if err != nil && err != io.EOF {
		f.readErr = err
	}
	for i := 0; i < n && !f.done; i++ {
		if e := f.step(p[i]); e != nil {
			f.err = e
			return i, e
		}
	}
	return n, err
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// step measures one byte.
func (f *fieldReader) step(b byte) error {
	if !f.started {
		if isSpace(b) {
			return nil
		}
		if b != '{' {
			return errNotObject
		}
		f.started, f.depth, f.expectKey = true, 1, true
		return nil
	}
	if f.inString {
		return f.stringByte(b)
	}
	if isSpace(b) {
		return f.gap(1)
	}
	if f.depth == 1 && f.expectKey {
		switch b {
		case '"':
			f.inString, f.isKey, f.keyPlain, f.key = true, true, true, f.key[:0]
			return f.gap(1)
		case '}':
			f.done = true
		}
		return f.gap(1)
	}
	switch b {
	case '"':
		f.inString = true
	case '{', '[':
		f.depth++
	case '}', ']':
		f.depth--
		if f.depth == 0 {
			f.done = true
			return nil
		}
	case ',':
		if f.depth == 1 {
			f.expectKey = true
			return f.gap(1)
		}
	case ':':
		if f.depth == 1 {
			return f.gap(1) // between the key and its value
		}
	}
	return f.add(1)
}

// stringByte measures one byte within a string.
func (f *fieldReader) stringByte(b byte) error {
	switch {
	case f.esc == 1:
		f.esc = 0
		if b == 'u' {
			f.esc, f.hex = 2, 0
			return nil
		}
		return f.strAdd(1)
	case f.esc >= 2:
		var d rune
		switch {
		case b >= '0' && b <= '9':
			d = rune(b - '0')
		case b >= 'a' && b <= 'f':
			d = rune(b-'a') + 10
		case b >= 'A' && b <= 'F':
			d = rune(b-'A') + 10
		}
		f.hex = f.hex<<4 | d
		if f.esc++; f.esc < 6 {
			return nil
		}
		f.esc = 0
		// What the escape decodes to: each half of a surrogate pair
		// counts 2, the pair's 4 bytes of UTF-8.
		if f.hex >= 0xD800 && f.hex <= 0xDFFF {
			return f.strAdd(2)
		}
		return f.strAdd(int64(utf8.RuneLen(f.hex)))
	case b == '\\':
		f.esc = 1
		f.keyPlain = false
		return nil
	case b == '"':
		f.inString = false
		if f.isKey {
			f.isKey, f.expectKey = false, false
			name := string(f.key)
			if !f.keyPlain {
				name += "…" // escaped or long: not one of ours
			}
			f.cur, f.n = f.caps(name), 0
			return f.gap(1)
		}
		return f.add(1)
	}
	if f.isKey {
		if len(f.key) == cap(f.key) {
			f.keyPlain = false // longer than any of ours
		} else {
			f.key = append(f.key, b)
		}
	}
	return f.strAdd(1)
}

// strAdd counts n decoded bytes of a string: a key's go to the gaps.
func (f *fieldReader) strAdd(n int64) error {
	if f.isKey {
		return f.gap(n)
	}
	return f.add(n)
}

func (f *fieldReader) add(n int64) error {
	f.n += n
	if f.n > f.cur.max {
		return f.cur.tooLarge()
	}
	return nil
}

func (f *fieldReader) gap(n int64) error {
	f.gaps += n
	if f.gaps > maxWhitespace {
		return &bodyTooLarge{max: maxWhitespace, gaps: true}
	}
	return nil
}

// decodeRequest decodes the request body into req as it is read: within
// the body cap (r's Content-Length is refused before a byte is read) and
// the field caps, neither the body nor a field is held past its cap.
func (h *handler) decodeRequest(w http.ResponseWriter, r *http.Request, req *Request) error {
	if r.ContentLength > h.cfg.MaxBodyBytes {
		return &bodyTooLarge{max: h.cfg.MaxBodyBytes, whole: true}
	}
	body := newFieldReader(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes), h.caps)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(req)
	if err == nil {
		return nil
	}
	var mbe *http.MaxBytesError
	switch {
	case body.err != nil:
		return body.err // a field over its cap, or not an object
	case errors.As(body.readErr, &mbe):
		return &bodyTooLarge{max: h.cfg.MaxBodyBytes, whole: true}
	case body.readErr != nil:
		return &badRequest{"reading body: " + body.readErr.Error()}
	}
	return &badRequest{"invalid request JSON: " + err.Error()}
}
