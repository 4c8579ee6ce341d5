package jsrun

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// Benchmarks of the Run SDK 2.1 features, each beside what a user would do
// without it (see BENCHMARKS.md, "JavaScript eval (jsrun)": TypeScript,
// synchronous host functions, codecs).

// benchTS is a typical agent program with types; benchJS is the same
// program with the types removed by hand.
const benchTS = `interface Row { id: number; amount: number; tag?: string }
type Summary = { count: number; total: number; tags: string[] };
function summarize(rows: Row[]): Summary {
  const tags = new Set<string>();
  let total = 0;
  for (const r of rows) { total += r.amount; if (r.tag) tags.add(r.tag); }
  return { count: rows.length, total, tags: [...tags].sort() };
}
const rows: Row[] = Array.from({ length: 20 }, (_, i): Row => ({ id: i, amount: i * 2, tag: i % 3 ? 'a' : 'b' }));
return summarize(rows) satisfies Summary;`

const benchJS = `function summarize(rows) {
  const tags = new Set();
  let total = 0;
  for (const r of rows) { total += r.amount; if (r.tag) tags.add(r.tag); }
  return { count: rows.length, total, tags: [...tags].sort() };
}
const rows = Array.from({ length: 20 }, (_, i) => ({ id: i, amount: i * 2, tag: i % 3 ? 'a' : 'b' }));
return summarize(rows);`

func benchLanguage(b *testing.B, src string, lang Language, fresh bool) {
	r := benchRunner(b)
	ctx := context.Background()
	timeEach(b, 0, func(i int) time.Duration {
		s := src
		if fresh { // a program never seen before: no cached transform
			s += "\n// run " + strconv.Itoa(i) + " " + strconv.FormatInt(time.Now().UnixNano(), 36)
		}
		return timedRun(b, r, ctx, Input{Source: s, Language: lang})
	})
}

// BenchmarkLanguage runs the same program as JavaScript and as TypeScript:
// "typescript-new" strips the types of a program it has not seen (each
// iteration differs by a comment, as does the JavaScript's), and
// "typescript-again" runs one it has (a resume, a program run again), whose
// transform comes from the cache.
func BenchmarkLanguage(b *testing.B) {
	b.Run("javascript", func(b *testing.B) { benchLanguage(b, benchJS, LanguageJavaScript, true) })
	b.Run("typescript-new", func(b *testing.B) { benchLanguage(b, benchTS, LanguageTypeScript, true) })
	b.Run("typescript-again", func(b *testing.B) { benchLanguage(b, benchTS, LanguageTypeScript, false) })
}

// BenchmarkTypeScriptTransform is the transform alone: through the
// resident worker process (what runs use) and esbuild called in this
// process (what the worker saves the process from), side by side.
func BenchmarkTypeScriptTransform(b *testing.B) {
	if tsInProcess() { // starts the worker outside the timing
		b.Fatal("no TypeScript worker")
	}
	b.Run("worker", func(b *testing.B) {
		for b.Loop() {
			if _, err := transformTypeScript(context.Background(), benchTS, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			if rep := esbuildTransform(sourcePrefix + benchTS + sourceSuffix); rep.Err != nil {
				b.Fatal(rep.Err.Text)
			}
		}
	})
}

var benchSyncHost = map[string]Namespace{"host": {
	"echo": Async(func(_ context.Context, args []any) (any, error) { return args[0], nil }),
	"echoSync": Synchronous(func(_ context.Context, args []any) (any, error) {
		return args[0], nil
	}),
}}

// BenchmarkHostCalls10 makes ten host calls per run: awaited (a Promise
// each, the only way without synchronous functions) and synchronous.
func BenchmarkHostCalls10(b *testing.B) {
	for _, c := range []struct{ name, src string }{
		{"awaited", "let s = 0; for (let i = 0; i < 10; i++) s += await host.echo(i); return s"},
		{"synchronous", "let s = 0; for (let i = 0; i < 10; i++) s += host.echoSync(i); return s"},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := benchRunner(b)
			ctx := context.Background()
			timeEach(b, 0, func(int) time.Duration {
				t := time.Now()
				res, err := r.Run(ctx, Input{Source: c.src, HostFunctions: benchSyncHost})
				d := time.Since(t)
				if err != nil || res.Value != 45.0 {
					b.Fatal(res, err)
				}
				return d
			})
		})
	}
}

// BenchmarkInterruptResumeCodec is BenchmarkInterruptResume with the
// default (signed) token and with NewEncryptedCodec.
func BenchmarkInterruptResumeCodec(b *testing.B) {
	enc, err := NewEncryptedCodec(make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		codec ContinuationCodec
	}{{"signed", nil}, {"encrypted", enc}} {
		b.Run(c.name, func(b *testing.B) {
			r, err := NewRunner(Config{Secret: testSecret, Store: NewMemoryStore(), Codec: c.codec})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			interruptResume(b, r, ctx)
			timeEach(b, 0, func(int) time.Duration { return interruptResume(b, r, ctx) })
		})
	}
}

// BenchmarkModules runs ten chained modules (mI imports m(I-1)) as a module
// run with a host loader, beside the same code written as one function
// body (what a user does without modules), and the same import done
// dynamically from a function body.
func BenchmarkModules(b *testing.B) {
	mods := map[string]string{}
	inline := ""
	for i := range 10 {
		n := strconv.Itoa(i)
		if i == 0 {
			mods["m0.js"] = "export const v = 0; export const sum = v;"
			inline += "const v0 = 0; const sum0 = v0;\n"
			continue
		}
		mods["m"+n+".js"] = "import {sum as prev} from './m" + strconv.Itoa(i-1) + ".js'; export const v = " + n + "; export const sum = prev + v;"
		inline += "const v" + n + " = " + n + "; const sum" + n + " = sum" + strconv.Itoa(i-1) + " + v" + n + ";\n"
	}
	loader, err := NewModuleMap(mods)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		in   Input
	}{
		{"inline-function-body", Input{Source: inline + "if (sum9 + v0 !== 45) throw new Error('bad sum')"}},
		{"module-10-imports", Input{ModuleLoader: loader, Source: "import {sum} from './m9.js'; import {v} from './m0.js'; if (sum + v !== 45) throw new Error('bad sum');"}},
		{"dynamic-import-10", Input{ModuleLoader: loader, SourceType: SourceFunctionBody, Source: "const {sum} = await import('./m9.js'); return sum"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := benchRunner(b)
			ctx := context.Background()
			timeEach(b, 0, func(int) time.Duration { return timedRun(b, r, ctx, c.in) })
		})
	}
}
