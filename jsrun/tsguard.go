package jsrun

import "strings"

// esbuild's parser, visitor and printer recurse once per level of nesting
// and have no depth limit: 250,000 nested "(" overflow the 1 GB goroutine
// stack, which kills the whole process (not a recoverable panic), and some
// shapes cost far more than their size (4,000 chained arrow functions, 12
// KB, take minutes; 16,000 nested if statements take 2.6 GB). So before a
// TypeScript source reaches esbuild, tsNestingDepth estimates how deep its
// parse can go, and sources over maxTSNesting are refused.
//
// The estimate is a light scan (strings, comments, template literals and
// regular expressions skipped; regex versus division decided from the token
// before, as JavaScript's grammar does, and both readings counted where the
// scan cannot know) that over-counts: every bracket level,
// plus, per level since its last "," or ";", every token that can nest
// without a bracket (prefix and right-associative operators, arrows, member
// and call chains, control keywords). Plain binary operators, which esbuild
// handles iteratively, are not counted. It is a bound for sources a lexer
// reads the way esbuild does; see docs/jsrun.md for what it does not cover.

// maxTSNesting bounds the estimate. At this depth the worst shapes measured
// (chained arrows, nested blocks and ifs) transform in about 0.2 s.
const maxTSNesting = 500

// arrowWeight: chained arrow functions cost esbuild far more per level.
const arrowWeight = 4

var tsNestingKeywords = map[string]bool{
	"if": true, "else": true, "for": true, "while": true, "do": true, "with": true,
	"typeof": true, "void": true, "delete": true, "await": true, "new": true, "yield": true,
	"keyof": true, "infer": true, "extends": true, "return": true, "throw": true, "case": true,
	"in": true, "of": true, "instanceof": true,
}

// regexAfterKeyword: after these a "/" starts a regular expression.
var regexAfterKeyword = map[string]bool{
	"return": true, "typeof": true, "void": true, "delete": true, "await": true, "new": true,
	"yield": true, "throw": true, "case": true, "in": true, "of": true, "instanceof": true,
	"do": true, "else": true,
}

type tsLevel struct {
	open    byte // ( [ { or $ for a template substitution
	control bool // a ( after if/while/for/with: a regex may follow its )
	count   int
	// elses counts a chain "} else if (...) {...} else ...", which nests
	// in esbuild although each block closes.
	elses int
}

// tsNestingDepth returns the estimated maximum nesting of src and the
// 1-based line where it is reached.
func tsNestingDepth(src string) (depth, atLine int) {
	stack := []tsLevel{{open: 0}}
	total := 1 // Σ (1 + count) over the stack
	line := 1
	// prev describes the last significant token: 'o' operator or start (a
	// regex or a prefix operator may follow), 'v' value (identifier,
	// number, string, closing bracket of an expression), 'c' the ) of a
	// control header or a keyword after which a regex may follow.
	prev := byte('o')
	lastWord := ""
	var afterBrace, afterDot bool
	wordBefore := ""
	// monotone: from here on nothing is taken as closing or resetting a
	// level, and nothing is skipped as a string or comment (see below).
	monotone := false
	reset := func() {
		top := &stack[len(stack)-1]
		total -= top.count
		top.count = 0
	}
	bump := func(n int) {
		stack[len(stack)-1].count += n
		total += n
		if total > depth {
			depth, atLine = total, line
		}
	}
	push := func(open byte, control bool) {
		stack = append(stack, tsLevel{open: open, control: control})
		total++
		if total > depth {
			depth, atLine = total, line
		}
	}
	// pop closes the innermost level and reports whether it was a control
	// header.
	pop := func() bool {
		if len(stack) == 1 {
			return false
		}
		top := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		total -= 1 + top.count + top.elses
		if top.open == '{' {
			// A block or object ends: nothing nests past it but an else.
			reset()
			afterBrace = true
			return false
		}
		bump(1) // a chain link: a(...)(...), a[0][0]
		return top.control
	}
	depth = 1
	n := len(src)
	lineStart := 0
	for i := 0; i < n; i++ {
		c := src[i]
		if monotone {
			// Every bracket opens and every operator nests: an upper
			// bound whatever esbuild reads here.
			switch {
			case c == '\n':
				line++
			case c == '(' || c == '[' || c == '{':
				push(c, false)
			case isOperatorByte(c) || c == '.' || c == '/':
				bump(1)
			}
			if depth > maxTSNesting {
				return depth, atLine
			}
			continue
		}
		// A legacy HTML comment ("<!--", or "-->" first on a line) is a
		// line comment to some parsers and code to others: be monotone.
		if (c == '<' && strings.HasPrefix(src[i:], "<!--")) ||
			(c == '-' && strings.HasPrefix(src[i:], "-->") && strings.TrimSpace(src[lineStart:i]) == "") {
			monotone = true
			i--
			continue
		}
		switch {
		case c == '\n':
			line++
			lineStart = i + 1
			continue
		case c == ' ' || c == '\t' || c == '\r':
			continue
		case c == '/' && i+1 < n && src[i+1] == '/':
			for i < n && src[i] != '\n' {
				i++
			}
			i--
			continue
		case c == '/' && i+1 < n && src[i+1] == '*':
			i += 2
			for i+1 < n && !(src[i] == '*' && src[i+1] == '/') {
				if src[i] == '\n' {
					line++
				}
				i++
			}
			i++
			continue
		case c == '\'' || c == '"':
			i++
			for i < n && src[i] != c && src[i] != '\n' {
				if src[i] == '\\' {
					i++
				}
				i++
			}
			prev = 'v'
			continue
		case c == '`' || (c == '}' && stack[len(stack)-1].open == '$'):
			if c == '}' {
				top := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				total -= 1 + top.count + top.elses
			}
			// Template text up to the closing ` or the next ${.
			i++
			for i < n && src[i] != '`' {
				if src[i] == '\\' {
					i++
				} else if src[i] == '\n' {
					line++
				} else if src[i] == '$' && i+1 < n && src[i+1] == '{' {
					i++
					push('$', false)
					break
				}
				i++
			}
			if i < n && src[i] == '{' {
				prev = 'o'
				continue
			}
			prev = 'v'
			continue
		case c == '/' && afterBrace && i+1 < n && src[i+1] != '/' && src[i+1] != '*':
			// After "}" a "/" starts a regular expression if the "}" ended
			// a block, and divides if it ended an expression (an object, a
			// function): the scan cannot tell. Count the body both ways:
			// its openings and operators count, its closings and resets do
			// not. A body that would change how the rest reads (a quote, a
			// backtick, a comment) makes the rest monotone.
			end := regexEnd(src, i)
			if end < 0 { // no regex can end on this line: division
				afterBrace = false
				prev = 'o'
				continue
			}
			body := src[i+1 : end]
			if strings.ContainsAny(body, "'\"`") || strings.Contains(body, "/*") || strings.Contains(body, "<!--") {
				monotone = true
				i--
				continue
			}
			for k := 0; k < len(body); k++ {
				switch b := body[k]; {
				case b == '(' || b == '[' || b == '{':
					push(b, false)
				case isOperatorByte(b) || b == '.':
					bump(1)
				}
			}
			i = end
			for i+1 < n && isIdentByte(src[i+1]) {
				i++
			}
			afterBrace = false
			prev = 'v'
			continue
		case c == '/' && prev != 'v':
			// A regular expression: skip its body and flags (an
			// unterminated one: the rest of its line).
			if end := regexEnd(src, i); end >= 0 {
				i = end
				for i+1 < n && isIdentByte(src[i+1]) {
					i++
				}
			} else if k := strings.IndexByte(src[i:], '\n'); k >= 0 {
				i += k
			} else {
				i = n
			}
			prev = 'v'
			continue
		case isIdentByte(c):
			j := i
			for j < n && isIdentByte(src[j]) {
				j++
			}
			if c >= '0' && c <= '9' && j+1 < n && src[j] == '.' {
				for j++; j < n && isIdentByte(src[j]); j++ {
				}
			}
			word := src[i:j]
			i = j - 1
			if afterDot { // a property name, not a keyword: a.if(x)
				word = "." + word
			}
			afterDot = false
			wordBefore, lastWord = lastWord, word
			top := &stack[len(stack)-1]
			if word == "else" && afterBrace {
				top.elses++
				total++
				if total > depth {
					depth, atLine = total, line
				}
			} else if afterBrace {
				total -= top.elses
				top.elses = 0
			}
			afterBrace = false
			if tsNestingKeywords[word] {
				bump(1)
			}
			if regexAfterKeyword[word] {
				prev = 'o'
			} else {
				prev = 'v'
			}
			continue
		}
		if afterBrace && c != '}' {
			top := &stack[len(stack)-1]
			total -= top.elses
			top.elses = 0
		}
		if c != '}' && c != ')' && c != ']' {
			afterBrace = false
		}
		switch c {
		case '(', '[', '{':
			control := c == '(' && (lastWord == "if" || lastWord == "while" || lastWord == "for" || lastWord == "with" ||
				(lastWord == "await" && wordBefore == "for"))
			push(c, control)
			prev = 'o'
		case ')', ']', '}':
			afterBrace = false
			if pop() {
				prev = 'o' // if (x) /re/ ...
			} else {
				prev = 'v'
			}
		case ';', ',':
			reset()
			prev = 'o'
		case '.':
			if i+1 < n && src[i+1] >= '0' && src[i+1] <= '9' && prev != 'v' {
				prev = 'v' // .5
				continue
			}
			bump(1)
			prev = 'o'
			lastWord, wordBefore = "", ""
			afterDot = true
			continue
		default:
			// An operator: the whole run of operator characters.
			j := i
			for j < n && isOperatorByte(src[j]) {
				j++
			}
			if j == i { // "/" after a value, or a character of no account
				if c == '/' {
					j++
					if j < n && src[j] == '=' {
						j++
					}
				} else {
					continue
				}
			}
			op := src[i:j]
			i = j - 1
			switch {
			case op == "=>":
				bump(arrowWeight)
			case prev == 'o' || op == "=" || op == "?" || op == ":" || op == "**" || op == "??=" ||
				(len(op) >= 2 && op[len(op)-1] == '=' && op != "==" && op != "===" && op != "!=" && op != "!==" && op != "<=" && op != ">="):
				// Prefix or right-associative: nests without brackets.
				bump(1)
			}
			if op == "++" || op == "--" {
				// Postfix after a value keeps a value.
				if prev == 'v' {
					continue
				}
			}
			prev = 'o'
		}
		lastWord, wordBefore = "", ""
		afterDot = false
	}
	return depth, atLine
}

// regexEnd returns the index of the "/" that ends a regular expression
// starting at src[i], or -1 when none ends on that line.
func regexEnd(src string, i int) int {
	inClass := false
	for i++; i < len(src) && src[i] != '\n'; i++ {
		switch src[i] {
		case '\\':
			i++
		case '[':
			inClass = true
		case ']':
			inClass = false
		case '/':
			if !inClass {
				return i
			}
		}
	}
	return -1
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

func isOperatorByte(c byte) bool {
	switch c {
	case '=', '!', '<', '>', '+', '-', '*', '%', '&', '|', '^', '~', '?', ':', '@', '#':
		return true
	}
	return false
}
