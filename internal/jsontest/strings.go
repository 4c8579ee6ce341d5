// Package jsontest holds hostile texts for differential tests of JSON
// handling: the upstream adapters' hand-written element writers (compared
// with the SDKs' encoders) and the tools' argument decoding (compared with
// encoding/json's Decoder).
package jsontest

import (
	"math/rand/v2"
	"strings"
)

// Strings exercises every escaping rule of encoding/json — quotes,
// backslashes, every ASCII control and HTML-unsafe character, U+2028 and
// U+2029 and their neighbours, invalid, truncated, surrogate and
// out-of-range UTF-8, a long text — then random bytes (mostly invalid
// UTF-8), the same on every call.
func Strings() []string {
	ss := []string{"", "plain", `quote " backslash \ slash /`, "<script>&amp;</script>", "\b\f\n\r\t\x00\x01\x1f\x7f",
		"é ü 中文 🙂", "\u2028 \u2029 \u2027\u202a", "bad \xff\xfe utf8 \xc3", "\xed\xa0\x80 surrogate", "\xf4\x90\x80\x80 past U+10FFFF",
		"\xe2\x80 cut U+2028", "\ufffd real replacement", `{"commands":["ls -la"]}`, strings.Repeat("long line <&> \"x\" \xff ", 5000)}
	for c := range 0x80 {
		ss = append(ss, "a"+string(rune(c))+"b")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		ss = append(ss, string(b))
	}
	return ss
}
