// Package jsonw appends JSON to a byte slice exactly as encoding/json
// writes it, for hot paths where json.Marshal's reflection and buffer
// handling cost more than the text itself. Each function's output is
// byte-identical to json.Marshal of the same Go value.
package jsonw

import (
	"bytes"
	"encoding/json"
	"sync/atomic"
	"unicode/utf8"
)

// Off, when set, makes AppendString and AppendStringNoHTML write with
// encoding/json and AppendAny refuse: BenchmarkGatewayStep measures a step
// both ways.
var Off atomic.Bool

// AppendString appends s as a JSON string the way encoding/json writes it
// (HTML-safe: <, > and & escaped; U+2028, U+2029 escaped; invalid UTF-8
// as U+FFFD).
func AppendString(b []byte, s string) []byte { return appendString(b, s, true) }

// AppendStringNoHTML is AppendString as an encoding/json Encoder with
// SetEscapeHTML(false) writes it: <, > and & as they are.
func AppendStringNoHTML(b []byte, s string) []byte { return appendString(b, s, false) }

func appendString(b []byte, s string, escapeHTML bool) []byte {
	if Off.Load() {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(escapeHTML)
		enc.Encode(s)
		return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
	}
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!escapeHTML || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
