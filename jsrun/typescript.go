package jsrun

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-sourcemap/sourcemap"
)

// Language is the language of Input.Source.
type Language string

// Languages.
const (
	// LanguageJavaScript (or "") runs the source as it is.
	LanguageJavaScript Language = "javascript"
	// LanguageTypeScript strips the types first (esbuild's transform: no
	// type checking, no bundling, no file access) and maps the positions
	// of errors back to the TypeScript source.
	LanguageTypeScript Language = "typescript"
)

func (l Language) valid() bool {
	return l == "" || l == LanguageJavaScript || l == LanguageTypeScript
}

// tsProgram is a TypeScript source made runnable: js is the whole wrapped
// function (what the JavaScript path evaluates as sourcePrefix + source +
// sourceSuffix), and positions in js map back to that wrapped TypeScript
// through the source map.
type tsProgram struct {
	js     string
	rawMap []byte
	// bytesHeld is what the cache counts for it.
	bytesHeld int
	once      sync.Once
	sm        *sourcemap.Consumer // parsed on first use: only errors need it
	lines     []string            // of js, split on first use
}

// The transforms of recent sources are kept (up to tsCacheBytes of source,
// output and map), so a resume, which runs the same source again, and a
// program run many times strip their types once.
const tsCacheBytes = 8 << 20

var tsCache = struct {
	sync.Mutex
	m     map[[32]byte]*tsProgram
	order [][32]byte
	bytes int
}{m: map[[32]byte]*tsProgram{}}

func (p *tsProgram) size(source string) int { return len(source) + len(p.js) + len(p.rawMap) }

// typeScriptProgram returns the transform of source, from the cache when
// it can.
func typeScriptProgram(ctx context.Context, source string, timeout time.Duration) (*tsProgram, error) {
	return cachedTypeScript(ctx, source, false, timeout)
}

// typeScriptModule returns the transform of a module's source (no function
// wrapper: imports and exports stay as they are).
func typeScriptModule(ctx context.Context, source string, timeout time.Duration) (*tsProgram, error) {
	return cachedTypeScript(ctx, source, true, timeout)
}

func cachedTypeScript(ctx context.Context, source string, module bool, timeout time.Duration) (*tsProgram, error) {
	key := sha256.Sum256([]byte(source))
	if module {
		key[0] ^= 0xff // a module and a function body of one text differ
	}
	tsCache.Lock()
	p := tsCache.m[key]
	tsCache.Unlock()
	if p != nil {
		return p, nil
	}
	if d, line := tsNestingDepth(source); d > maxTSNesting {
		e := limitError(CodeSourceTooLarge, "typeScriptNesting", "TypeScript source nests too deeply to strip its types: about %d levels at line %d, over the limit of %d (split the expression or statement)", d, line, maxTSNesting)
		e.Details["line"] = line
		return nil, e
	}
	p, err := transformSource(ctx, source, module, timeout)
	if err != nil {
		return nil, err
	}
	n := p.size(source)
	if n > tsCacheBytes/4 {
		return p, nil
	}
	tsCache.Lock()
	defer tsCache.Unlock()
	if tsCache.m[key] != nil {
		return p, nil
	}
	for tsCache.bytes+n > tsCacheBytes && len(tsCache.order) > 0 {
		old := tsCache.order[0]
		tsCache.order = tsCache.order[1:]
		tsCache.bytes -= tsCache.m[old].bytesHeld
		delete(tsCache.m, old)
	}
	p.bytesHeld = n
	tsCache.m[key] = p
	tsCache.order = append(tsCache.order, key)
	tsCache.bytes += n
	return p, nil
}

// transformTypeScript strips the types of a function-body source. The
// source is transformed inside the same wrapper the JavaScript path uses, so
// top-level await and return parse as they do there, and the output is the
// wrapped function. A TypeScript syntax error is a RUN_USER_SOURCE_ERROR
// SyntaxError with the line and column in the original source.
func transformTypeScript(ctx context.Context, source string, timeout time.Duration) (*tsProgram, error) {
	return transformSource(ctx, source, false, timeout)
}

// transformSource strips the types of a function body (wrapped) or of a
// module (as it is).
func transformSource(ctx context.Context, source string, module bool, timeout time.Duration) (*tsProgram, error) {
	prefix, suffix := sourcePrefix, sourceSuffix
	if module {
		prefix, suffix = "", ""
	}
	rep, err := tsw.transform(ctx, prefix+source+suffix, timeout)
	switch {
	case errors.Is(err, errTSTimeout):
		return nil, limitError(CodeTimeout, "typeScriptTransform", "%v (over %v)", err, min(timeout, tsMaxTransform))
	case errors.Is(err, errTSWorkerCrashed):
		// esbuild's recursion outgrew the worker's stack or memory: the
		// source nests deeper than the scan estimated.
		return nil, limitError(CodeSourceTooLarge, "typeScriptNesting", "TypeScript source is too deeply nested or too large to strip its types (%v)", err)
	case err != nil:
		return nil, err
	}
	if m := rep.Err; m != nil {
		line, col := 0, 0
		if m.Line > 0 {
			line, col = m.Line, m.Col+1
			if line == 1 {
				col -= len(prefix)
			}
		}
		return nil, syntaxError(m.Text, line, col, nil)
	}
	return &tsProgram{js: rep.Code, rawMap: rep.Map}, nil
}

// syntaxError is the error of a source that does not parse; line and
// column (1-based) are in the source as given.
func syntaxError(msg string, line, col int, cause error) *Error {
	e := &Error{Code: CodeUserSourceError, Name: "SyntaxError", Message: msg, Guest: true, cause: cause}
	if line > 0 {
		e.Stack = fmt.Sprintf("    at <source>:%d:%d\n", line, col)
		e.Details = map[string]any{"line": line, "column": col}
	}
	return e
}

// position maps a 1-based line and column of the generated JavaScript to
// the wrapped TypeScript (still 1-based).
func (p *tsProgram) position(line, col int) (int, int, bool) {
	p.once.Do(func() {
		p.sm, _ = sourcemap.Parse("", p.rawMap)
		p.lines = strings.Split(p.js, "\n")
	})
	if p.sm == nil {
		return line, col, false
	}
	gc := max(col-1, 0)
	_, _, l, c, ok := p.sm.Source(line, gc)
	if !ok {
		return line, col, false
	}
	// The map has a point where each token begins; the engine's column can
	// be past it (at the "(" of a call, say). Keep that offset: the probe
	// walks back to where the point's span starts, not into the line's
	// indentation (before the first point, the map answers with the
	// previous line's last one).
	indent := 0
	if line >= 1 && line <= len(p.lines) {
		text := p.lines[line-1]
		indent = len(text) - len(strings.TrimLeft(text, " "))
	}
	d := 0
	for gc-d-1 >= indent && d < 256 {
		if _, _, l2, c2, ok2 := p.sm.Source(line, gc-d-1); !ok2 || l2 != l || c2 != c {
			break
		}
		d++
	}
	return l, c + d + 1, true
}

// program returns the wrapped function source to evaluate.
func (inv *invocation) program() string {
	if inv.mods.module {
		return moduleProgram
	}
	if inv.ts != nil {
		return inv.ts.js
	}
	return sourcePrefix + inv.in.Source + sourceSuffix
}
