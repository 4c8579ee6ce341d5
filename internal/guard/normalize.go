package guard

import (
	"slices"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// view is text normalised for matching, with the way back to the
// original: byte i of text came from the original rune at from[i] (the
// white space and word breaks normalising adds come from no rune at all:
// spans are trimmed of them).
//
// Normalising, rune by rune, in one linear pass:
//   - invisible characters are dropped (zero-width spaces and joiners,
//     the BOM, soft hyphens, bidi controls, variation selectors: every
//     rune of Unicode's Cf category and the variation selectors); Unicode
//     tag characters (U+E0020–U+E007E, "ASCII smuggling") become the
//     ASCII they encode;
//   - compatibility decomposition (NFKD, the K of NFKC: fullwidth letters,
//     ligatures, mathematical alphanumerics, circled letters) with the
//     combining marks dropped, so "ｉｇｎｏｒｅ" and "ïgnörë" read "ignore";
//   - confusables that survive NFKD are folded to the Latin letter they
//     imitate (Cyrillic and Greek lookalikes, dotless i, ...), and digits
//     and symbols written for letters inside a word (1gn0re, @, $);
//   - lower case;
//   - a run of white space becomes one "\n" if it holds a line break, else
//     one " ".
type view struct {
	text []byte
	from []int32
	// foldedAt are the original offsets of runes changed by folding
	// (confusables, leetspeak, compatibility forms, marks), hiddenAt of
	// invisible runes dropped or decoded, both ascending: a detection
	// uses them to say how its match was hidden (Detection.Via).
	foldedAt, hiddenAt []int32
}

func (v *view) reset() {
	v.text, v.from = v.text[:0], v.from[:0]
	v.foldedAt, v.hiddenAt = v.foldedAt[:0], v.hiddenAt[:0]
}

func (v *view) emit(b byte, from int) {
	v.text = append(v.text, b)
	v.from = append(v.from, int32(from))
}

// end is the original offset where the rune behind text[i] ends.
func (v *view) end(orig string, i int) int {
	f := int(v.from[i])
	if f >= len(orig) {
		return len(orig)
	}
	_, n := utf8.DecodeRuneInString(orig[f:])
	return f + n
}

func (v *view) emitRune(r rune, from int) {
	if r < utf8.RuneSelf {
		v.emit(byte(r), from)
		return
	}
	var buf [utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], r)
	for i := 0; i < n; i++ {
		v.emit(buf[i], from)
	}
}

// confusables maps lookalikes that NFKD leaves alone to the ASCII letter
// they imitate (after lower-casing).
var confusables = map[rune]byte{
	// Cyrillic
	'а': 'a', 'в': 'b', 'е': 'e', 'ё': 'e', 'к': 'k', 'м': 'm', 'н': 'h', 'о': 'o', 'р': 'p', 'с': 'c',
	'т': 't', 'у': 'y', 'х': 'x', 'і': 'i', 'ї': 'i', 'ј': 'j', 'ѕ': 's', 'ԁ': 'd', 'һ': 'h', 'ӏ': 'l',
	'ԛ': 'q', 'ԝ': 'w', 'ү': 'y', 'ɡ': 'g', 'ո': 'n', 'ս': 'u', 'օ': 'o',
	// Greek
	'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'μ': 'u', 'ν': 'v', 'ο': 'o', 'ρ': 'p',
	'τ': 't', 'υ': 'u', 'χ': 'x', 'ω': 'w', 'ϲ': 'c', 'ϳ': 'j', 'ζ': 'z',
	// Latin lookalikes
	'ı': 'i', 'ȷ': 'j', 'ł': 'l', 'ø': 'o', 'đ': 'd', 'ħ': 'h', 'ŀ': 'l', 'ɑ': 'a', 'ɩ': 'i', 'ʏ': 'y',
	'ꞵ': 'b', 'ᴀ': 'a', 'ʙ': 'b', 'ᴄ': 'c', 'ᴅ': 'd', 'ᴇ': 'e', 'ɢ': 'g', 'ʜ': 'h', 'ɪ': 'i', 'ᴊ': 'j',
	'ᴋ': 'k', 'ʟ': 'l', 'ᴍ': 'm', 'ɴ': 'n', 'ᴏ': 'o', 'ᴘ': 'p', 'ʀ': 'r', 'ꜱ': 's', 'ᴛ': 't', 'ᴜ': 'u',
	'ᴠ': 'v', 'ᴡ': 'w', 'ᴢ': 'z',
}

// plain maps the ASCII bytes that normalise to themselves lower-cased
// (letters, punctuation) to that; 0 for the others (white space, controls,
// leetspeak candidates).
var plain = func() (t [128]byte) {
	for c := byte('!'); c <= '~'; c++ {
		if leet[c] == 0 {
			t[c] = lowerASCII(c)
		}
	}
	return t
}()

// leet maps digits and symbols used for letters; applied only next to a
// letter, so numbers stay numbers.
var leet = [128]byte{'0': 'o', '1': 'i', '3': 'e', '4': 'a', '5': 's', '7': 't', '@': 'a', '$': 's'}

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' }

// invisible reports runes that render as nothing.
func invisible(r rune) bool {
	switch {
	case r == 0xAD, r == 0x34F, r == 0x180E, r == 0x200B, r == 0x200C, r == 0x200D, r == 0x2060, r == 0xFEFF:
		return true
	case r >= 0xFE00 && r <= 0xFE0F, r >= 0xE0100 && r <= 0xE01EF: // variation selectors
		return true
	case r >= 0xE0000 && r <= 0xE007F: // tags (decoded by the caller when printable)
		return true
	}
	return r > 0x7F && unicode.Is(unicode.Cf, r)
}

// normalize fills v from s.
func normalize(v *view, s string) {
	v.reset()
	v.emit('\n', 0) // so that "\n" in a pattern also means the start
	inTags := false // the last rune was a tag character
	space := -1     // pending white space: 0 a space, 1 a line break; -1 none
	spaceFrom := 0
	flushSpace := func() {
		if space >= 0 {
			b := byte(' ')
			if space == 1 {
				b = '\n'
			}
			v.emit(b, spaceFrom)
			space = -1
		}
	}
	v.text = slices.Grow(v.text, len(s)+1)
	v.from = slices.Grow(v.from, len(s)+1)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			// ASCII fast path: most bytes are plain (a letter, a
			// punctuation mark) and only lower-cased.
			if o := plain[c]; o != 0 && space < 0 {
				v.text = append(v.text, o)
				v.from = append(v.from, int32(i))
				inTags = false
				i++
				continue
			}
			if c == ' ' && space < 0 && i+1 < len(s) && s[i+1] < utf8.RuneSelf && plain[s[i+1]] != 0 {
				// One space between words.
				v.text = append(v.text, ' ')
				v.from = append(v.from, int32(i))
				i++
				continue
			}
			switch {
			case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
				if space < 0 {
					space, spaceFrom = 0, i
				}
			case c == '\n':
				if space < 0 {
					spaceFrom = i
				}
				space = 1
			default:
				flushSpace()
				inTags = false
				if c >= 'A' && c <= 'Z' {
					c += 'a' - 'A'
				} else if l := leet[c]; l != 0 && leetAt(v.text, s, i) {
					c = l
					v.foldedAt = append(v.foldedAt, int32(i))
				}
				v.emit(c, i)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		from := i
		i += n
		if r < 0xE0020 || r > 0xE007E {
			inTags = false
		}
		if r >= 0xE0020 && r <= 0xE007E {
			// A tag character spells ASCII invisibly: read it.
			flushSpace()
			if !inTags {
				// Smuggled text starts a word of its own.
				v.emit(' ', from)
				inTags = true
			}
			v.hiddenAt = append(v.hiddenAt, int32(from))
			c := byte(r - 0xE0000)
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			v.emit(c, from)
			continue
		}
		if invisible(r) || r == utf8.RuneError && n == 1 {
			v.hiddenAt = append(v.hiddenAt, int32(from))
			continue
		}
		if unicode.IsSpace(r) {
			if space < 0 {
				space, spaceFrom = 0, from
			}
			if r == 0x2028 || r == 0x2029 || r == 0x85 {
				space = 1
			}
			continue
		}
		flushSpace()
		folded := false
		emitOne := func(r rune) {
			if unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r) {
				folded = true
				return
			}
			if r < utf8.RuneSelf {
				c := lowerASCII(byte(r))
				if unicode.IsSpace(r) {
					c = ' '
				}
				v.emit(c, from)
				return
			}
			r = unicode.ToLower(r)
			if c, ok := confusables[r]; ok {
				folded = true
				v.emit(c, from)
				return
			}
			v.emitRune(r, from)
		}
		p := norm.NFKD.PropertiesString(s[from:i])
		if d := p.Decomposition(); len(d) > 0 {
			folded = true
			for len(d) > 0 {
				dr, dn := utf8.DecodeRune(d)
				d = d[dn:]
				emitOne(dr)
			}
		} else {
			emitOne(r)
		}
		if folded {
			v.foldedAt = append(v.foldedAt, int32(from))
		}
	}
	flushSpace()
}

// leetAt reports whether the digit or symbol s[i] stands for a letter:
// a digit next to a letter, a symbol between two letters.
func leetAt(out []byte, s string, i int) bool {
	prev := len(out) > 0 && isLetter(out[len(out)-1])
	next := i+1 < len(s) && isLetter(lowerASCII(s[i+1]))
	if s[i] == '@' || s[i] == '$' {
		return prev && next
	}
	return prev || next
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
