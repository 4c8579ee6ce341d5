package jsrun

import (
	"context"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestTypeScriptRuns(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	src := `interface Point { x: number; y: number }
type Pair<T> = [T, T];
enum Color { Red = 1, Green, Blue }
abstract class Shape { abstract area(): number }
class Square extends Shape {
  constructor(private readonly side: number) { super() }
  area(): number { return this.side ** 2 }
}
const id = <T,>(v: T): T => v;
function norm(p: Point): number { return Math.hypot(p.x, p.y) }
const pair: Pair<string> = ['a', 'b'];
const sum = await tools.sum(1 as number, 2) satisfies number;
let maybe: string | undefined;
return { n: norm({ x: 3, y: 4 }), c: Color.Blue, area: new Square(3).area(), id: id<string>('x'), pair, sum, len: maybe!?.length ?? -1 };`
	res := mustRun(t, r, Input{Source: src, Language: LanguageTypeScript, HostFunctions: tools(&calls)})
	want := map[string]any{"n": 5.0, "c": 3.0, "area": 9.0, "id": "x", "pair": []any{"a", "b"}, "sum": 3.0, "len": -1.0}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %#v", res.Value)
	}
	// Plain JavaScript is valid TypeScript: same result either way.
	js := `const xs = [3, 1, 2].sort(); return {xs, s: xs.join('-'), o: {a: 1}}`
	a := mustRun(t, r, Input{Source: js})
	b := mustRun(t, r, Input{Source: js, Language: LanguageTypeScript})
	if !reflect.DeepEqual(a.Value, b.Value) {
		t.Fatalf("javascript %v, typescript %v", a.Value, b.Value)
	}
}

// TestTypeScriptErrorPositions: the types, blank lines and comments that
// stripping removes do not move error positions: stacks and syntax errors
// point into the TypeScript as written.
func TestTypeScriptErrorPositions(t *testing.T) {
	r := newTestRunner(t)
	src := `interface Account {
  id: string;
  balance: number;
}

// Withdrawals fail when the balance is short.
function withdraw(a: Account, amount: number): Account {
  if (amount > a.balance) {
    throw new RangeError(` + "`" + `balance ${a.balance} < ${amount}` + "`" + `);
  }
  return { ...a, balance: a.balance - amount };
}

const acct: Account = { id: 'x', balance: 5 };
withdraw(acct, 10);`
	_, err := r.Run(context.Background(), Input{Source: src, Language: LanguageTypeScript})
	e := wantCode(t, err, CodeUserSourceError)
	if e.Name != "RangeError" || e.Message != "balance 5 < 10" {
		t.Fatalf("got %s: %s", e.Name, e.Message)
	}
	if !strings.Contains(e.Stack, "at withdraw (<source>:9:") || !strings.Contains(e.Stack, "at <main> (<source>:15:") {
		t.Fatalf("stack does not point into the TypeScript: %q", e.Stack)
	}
	// The columns too: the same lines without types fail at the same
	// columns in JavaScript.
	jsSrc := strings.NewReplacer("interface Account {\n  id: string;\n  balance: number;\n}", "\n\n\n",
		"a: Account, amount: number): Account", "a, amount)", "const acct: Account", "const acct").Replace(src)
	_, jsErr := r.Run(context.Background(), Input{Source: jsSrc})
	js := wantCode(t, jsErr, CodeUserSourceError)
	for _, frame := range []string{"at withdraw (<source>:9:", "at <main> (<source>:15:"} {
		if tc, jc := frameColumn(t, e.Stack, frame), frameColumn(t, js.Stack, frame); tc != jc {
			t.Fatalf("%s: column %d in TypeScript, %d in JavaScript\n%s\n%s", frame, tc, jc, e.Stack, js.Stack)
		}
	}

	cases := []struct {
		name, src string
		line, col int
	}{
		{"01 TypeScript syntax on line 3", "const a = 1;\n\nconst x: number = ;\n", 3, 19},
		{"02 on the first line (wrapper removed)", "let y: = 2", 1, 8},
		{"03 unterminated type", "type T = {\nconst z = 1", 2, 9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Run(context.Background(), Input{Source: c.src, Language: LanguageTypeScript})
			e := wantCode(t, err, CodeUserSourceError)
			if e.Name != "SyntaxError" || e.Message == "" || !e.Guest {
				t.Fatalf("got %+v", e)
			}
			if e.Details["line"] != c.line || e.Details["column"] != c.col {
				t.Fatalf("position %v:%v, want %d:%d (%s)", e.Details["line"], e.Details["column"], c.line, c.col, e.Message)
			}
		})
	}
}

func frameColumn(t *testing.T, stack, prefix string) int {
	t.Helper()
	i := strings.Index(stack, prefix)
	if i < 0 {
		t.Fatalf("no frame %q in %q", prefix, stack)
	}
	rest := stack[i+len(prefix):]
	n := 0
	for _, r := range rest {
		if r < '0' || r > '9' {
			break
		}
		n = n*10 + int(r-'0')
	}
	return n
}

func TestJavaScriptSyntaxErrorPosition(t *testing.T) {
	r := newTestRunner(t)
	_, err := r.Run(context.Background(), Input{Source: "const a = 1;\nlet b = ;"})
	e := wantCode(t, err, CodeUserSourceError)
	if e.Name != "SyntaxError" || e.Details["line"] != 2 || e.Details["column"] != 9 || !strings.Contains(e.Stack, "<source>:2:9") {
		t.Fatalf("got %+v", e)
	}
}

func TestTypeScriptContinuations(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	src := `type Decision = boolean;
const n: number = await tools.sum(2, 3);
const ok = (await tools.approve({ n })) as Decision;
return ok ? n : 0;`
	res := mustRun(t, r, Input{Source: src, Language: LanguageTypeScript, HostFunctions: hf})
	if res.Status != StatusInterrupted {
		t.Fatalf("want interrupted: %+v", res)
	}
	// The language is bound: the same text resumed as JavaScript is refused.
	_, err := r.Run(context.Background(), Input{Source: src, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	wantCode(t, err, CodeProtocol)
	out := mustRun(t, r, Input{Source: src, Language: LanguageTypeScript, HostFunctions: hf, Continuation: res.Continuation, Resolutions: resolveAll(res, true)})
	if out.Value != 5.0 {
		t.Fatalf("resume: %+v", out)
	}
}

func TestTypeScriptInputChecks(t *testing.T) {
	r := newTestRunner(t)
	_, err := r.Run(context.Background(), Input{Source: "return 1", Language: "coffeescript"})
	wantCode(t, err, CodeInvalidInput)
	_, err = r.Run(context.Background(), Input{Source: "const s: string = '" + strings.Repeat("x", 2000) + "'", Language: LanguageTypeScript, Limits: Limits{SourceBytes: 1000}})
	wantCode(t, err, CodeSourceTooLarge)
	// No module syntax in a function body, as in JavaScript.
	_, err = r.Run(context.Background(), Input{Source: "import fs from 'fs'\nreturn 1", Language: LanguageTypeScript})
	wantCode(t, err, CodeUserSourceError)
	res := mustRun(t, r, Input{Source: "return 1", Language: LanguageJavaScript})
	if res.Value != 1.0 {
		t.Fatalf("got %v", res.Value)
	}
}

func TestTypeScriptTransformCache(t *testing.T) {
	src := "const cached: number = 1; return cached"
	a, err := typeScriptProgram(t.Context(), src, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := typeScriptProgram(t.Context(), src, time.Minute)
	if a != b {
		t.Fatal("the same source was transformed twice")
	}
	big := "const s: string = '" + strings.Repeat("x", tsCacheBytes/8) + "'; return s.length"
	for i := range 6 {
		if _, err := typeScriptProgram(t.Context(), big+strings.Repeat(" ", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	tsCache.Lock()
	held, n, ordered := tsCache.bytes, len(tsCache.m), len(tsCache.order)
	sum := 0
	for _, p := range tsCache.m {
		sum += p.bytesHeld
	}
	tsCache.Unlock()
	if held > tsCacheBytes || held != sum || n != ordered {
		t.Fatalf("cache holds %d bytes (%d counted), %d entries, %d in order", held, sum, n, ordered)
	}
}

// TestTypeScriptNestingGuard: esbuild has no depth limit, and a deep
// source overflows the goroutine stack (a fatal error that kills the
// process) or costs minutes; such sources are refused before it runs.
func TestTypeScriptNestingGuard(t *testing.T) {
	r := newTestRunner(t)
	hostile := map[string]string{
		"parens":        "return " + strings.Repeat("(", 120000) + "1" + strings.Repeat(")", 120000),
		"unary":         "return " + strings.Repeat("- ", 120000) + "1",
		"arrows":        "return " + strings.Repeat("x=>", 4000) + "1",
		"ifs":           strings.Repeat("if(a)", 16000) + "x;",
		"else if":       "if(a){}" + strings.Repeat("else if(a){}", 20000),
		"blocks":        strings.Repeat("{", 100000) + strings.Repeat("}", 100000),
		"members":       "return a" + strings.Repeat(".b", 100000),
		"calls":         "return a" + strings.Repeat("()", 100000),
		"ternaries":     "return " + strings.Repeat("a?a:", 50000) + "1",
		"templates":     "return " + strings.Repeat("`${", 50000) + "1" + strings.Repeat("}`", 50000),
		"regex gadgets": strings.Repeat("(()=>{ if(a)/)))/; ", 5000),
		// After "}" a "/" may start a regular expression (a block ended) or
		// divide (an object ended): closings in it must not count.
		"brace regex gadgets":  strings.Repeat("(()=>{ {} /)));/; ", 5000),
		"brace quote gadgets":  strings.Repeat("(()=>{ {} /`/; ", 2000) + strings.Repeat(")", 2000),
		"for await gadgets":    strings.Repeat("(async()=>{ for await (const x of y) /)))/; ", 3000),
		"html comment gadgets": strings.Repeat("(()=>{ <!-- )))\n", 5000),
		"property if gadgets":  strings.Repeat("(a.if(x) / (", 3000) + "1",
	}
	for name, src := range hostile {
		t.Run(name, func(t *testing.T) {
			_, err := r.Run(context.Background(), Input{Source: src, Language: LanguageTypeScript})
			if e := wantCode(t, err, CodeSourceTooLarge); e.Details["limit"] != "typeScriptNesting" {
				t.Fatalf("details %v", e.Details)
			}
		})
	}
	// Ordinary code, also long, is well under the limit.
	ordinary := strings.Repeat("if (a.b) { x(1, 2) } else if (c) { y() } else { z = 1.5 * w + (v - 2) / u }\n", 500) +
		"const total: number = 1" + strings.Repeat(" + 1", 5000) + ";\n" +
		"const s = '((((' + \"[[[[\" + `x${'(((('}y` + /[((((]/.source;\nreturn total"
	res, err := r.Run(context.Background(), Input{Source: "const a = {b: 0}, c = 0; let z = 0, w = 1, v = 2, u = 1; function x(...a: number[]) {} function y() {}\n" + ordinary, Language: LanguageTypeScript})
	if err != nil || res.Value != 5001.0 {
		t.Fatalf("ordinary code: %v %v", res, err)
	}
}
