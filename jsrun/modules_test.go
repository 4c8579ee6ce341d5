package jsrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func moduleMap(t testing.TB, m map[string]string) *ModuleMap {
	t.Helper()
	l, err := NewModuleMap(m)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// countingLoader wraps a loader and counts its calls.
type countingLoader struct {
	ModuleLoader
	normalize, load atomic.Int64
}

func (c *countingLoader) Normalize(ctx context.Context, s, i string) (string, error) {
	c.normalize.Add(1)
	return c.ModuleLoader.Normalize(ctx, s, i)
}

func (c *countingLoader) Load(ctx context.Context, name string) (Module, error) {
	c.load.Add(1)
	return c.ModuleLoader.Load(ctx, name)
}

var testModules = map[string]string{
	"a.js":     `import {b} from './b.js'; export const a = 'A' + b; console.log('a ran');`,
	"b.js":     `import {a} from './a.js'; export const b = 'B'; export function getA() { return a }`,
	"c.js":     `export default 42; export const x = await Promise.resolve(7);`,
	"lib/d.js": `import def from '../c.js'; export const d = def + 1;`,
	"self.js":  `import * as me from './self.js'; export const n = 1; export const keys = () => Object.keys(me);`,
	"t.ts":     "export function twice(n: number): number { return n * 2 }\nexport const s: string = 'ts';",
}

func TestModuleStaticCyclicDefault(t *testing.T) {
	r := newTestRunner(t)
	loader := &countingLoader{ModuleLoader: moduleMap(t, testModules)}
	res := mustRun(t, r, Input{ModuleLoader: loader, Source: `
		import {a} from './a.js';
		import {getA} from './b.js';
		import def, {x} from './c.js';
		import {d} from './lib/d.js';
		import {keys} from './self.js';
		import {twice, s} from './t.ts';
		const v = await Promise.resolve('tla');
		console.log(a, getA(), def, x, d, keys().join(), twice(21), s, v);
		export const unused = 1;`})
	if res.Status != StatusCompleted {
		t.Fatalf("status %s", res.Status)
	}
	if _, ok := res.Value.(Undefined); !ok {
		t.Fatalf("a module run's value is undefined, got %#v", res.Value)
	}
	if want := "a ran\nAB AB 42 7 43 keys,n 42 ts tla\n"; res.Console != want {
		t.Fatalf("console %q, want %q", res.Console, want)
	}
	// Each module loads once; each (specifier, importer) resolves once.
	if n := loader.load.Load(); n != 6 {
		t.Fatalf("%d loads, want 6", n)
	}
}

func TestModuleDynamicImportFromFunctionBody(t *testing.T) {
	r := newTestRunner(t)
	loader := &countingLoader{ModuleLoader: moduleMap(t, testModules)}
	res := mustRun(t, r, Input{ModuleLoader: loader, SourceType: SourceFunctionBody, Source: `
		const m = await import('./c.js');
		let n = 0;
		for (let i = 0; i < 10000; i++) n += (await import('./c.js')).default;
		return [m.default, m.x, n]`})
	got := res.Value.([]any)
	if got[0] != 42.0 || got[1] != 7.0 || got[2] != 420000.0 {
		t.Fatalf("got %v", got)
	}
	// 10,000 repeated imports are answered by the run's cache.
	if loader.normalize.Load() != 1 || loader.load.Load() != 1 {
		t.Fatalf("normalize %d, load %d: want 1 each", loader.normalize.Load(), loader.load.Load())
	}
}

type failingLoader struct{}

func (failingLoader) Normalize(_ context.Context, s, _ string) (string, error) {
	if s == "resolve-fails" {
		return "", errors.New("secret resolver detail")
	}
	if s == "bad-name" {
		return "<entry>", nil
	}
	return s, nil
}

func (failingLoader) Load(_ context.Context, name string) (Module, error) {
	switch name {
	case "user":
		return Module{}, &UserError{Message: "module user is not allowed here"}
	case "panics":
		panic("loader bug")
	case "syntax":
		return Module{Source: "export const = 1"}, nil
	case "bad-ts":
		return Module{Source: "export const x: = 1", Language: LanguageTypeScript}, nil
	case "throws":
		return Module{Source: "throw new RangeError('module boom')"}, nil
	}
	return Module{}, errors.New("secret loader detail: password hunter2")
}

func TestModuleLoaderErrors(t *testing.T) {
	r := newTestRunner(t)
	res := mustRun(t, r, Input{ModuleLoader: failingLoader{}, SourceType: SourceFunctionBody, Source: `
		const out = [];
		for (const s of ['resolve-fails', 'bad-name', 'user', 'panics', 'plain', 'syntax', 'bad-ts', 'throws']) {
			try { await import(s); out.push('loaded ' + s) } catch (e) { out.push(e.name + ': ' + e.message) }
		}
		return out`})
	got := fmt.Sprint(res.Value)
	for _, want := range []string{
		`TypeError: module normalization failed: cannot resolve "resolve-fails" from "<entry>"`,
		`the loader returned a reserved name`,
		`TypeError: module load failed: module user is not allowed here`,
		`TypeError: module load failed: cannot load "panics"`,
		`TypeError: module load failed: cannot load "plain"`,
		`SyntaxError: variable name expected`,
		`TypeError: module load failed: SyntaxError: Unexpected "="`,
		`RangeError: module boom`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %s", want, got)
		}
	}
	if strings.Contains(got, "secret") || strings.Contains(got, "hunter2") || strings.Contains(got, "loader bug") {
		t.Fatalf("loader internals reached the guest: %s", got)
	}

	// Uncaught, in a module's static imports: the guest's error, and no
	// module of the graph ran.
	_, err := r.Run(context.Background(), Input{ModuleLoader: failingLoader{}, Source: `import 'throws'; import 'plain'; console.log('entry ran')`})
	e := wantCode(t, err, CodeUserSourceError)
	if e.Name != "TypeError" || !strings.Contains(e.Message, `cannot load "plain"`) || strings.Contains(e.Console, "ran") {
		t.Fatalf("got %s: %s (console %q)", e.Name, e.Message, e.Console)
	}
}

func TestModuleWithoutLoader(t *testing.T) {
	r := newTestRunner(t)
	res := mustRun(t, r, Input{Source: `try { await import('./a.js') } catch (e) { return e.name + ': ' + e.message }`})
	if res.Value != "ReferenceError: could not load module 'a.js'" {
		t.Fatalf("got %v", res.Value)
	}
	_, err := r.Run(context.Background(), Input{SourceType: SourceModule, Source: `import {a} from './a.js'`})
	e := wantCode(t, err, CodeUserSourceError)
	if e.Name != "TypeError" || !strings.Contains(e.Message, `no module loader: cannot import "./a.js"`) {
		t.Fatalf("got %s: %s", e.Name, e.Message)
	}
	// A module source without imports needs no loader.
	res = mustRun(t, r, Input{SourceType: SourceModule, Source: `console.log(await Promise.resolve(5))`})
	if res.Console != "5\n" {
		t.Fatalf("console %q", res.Console)
	}
	// return is a syntax error in a module, with its position.
	_, err = r.Run(context.Background(), Input{SourceType: SourceModule, Source: "const x = 1;\n  return x"})
	e = wantCode(t, err, CodeUserSourceError)
	if e.Name != "SyntaxError" || e.Details["line"] != 2 || e.Details["column"] != 3 {
		t.Fatalf("got %s %q %v %q", e.Name, e.Message, e.Details, e.Stack)
	}
}

func TestModuleStacks(t *testing.T) {
	r := newTestRunner(t)
	mods := moduleMap(t, map[string]string{
		"m.ts": "type T = {a: number}\n\n\nexport function f(x: T): never {\n  throw new Error('in ts ' + x.a)\n}",
	})
	_, err := r.Run(context.Background(), Input{ModuleLoader: mods, Source: "import {f} from './m.ts'\n\nf({a: 1})"})
	e := wantCode(t, err, CodeUserSourceError)
	if !strings.Contains(e.Stack, "(m.ts:5:") || !strings.Contains(e.Stack, "(<source>:3:") {
		t.Fatalf("stack %q", e.Stack)
	}
}

func TestModuleLimits(t *testing.T) {
	r := newTestRunner(t)
	// 10,000 static imports of distinct modules.
	var b strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&b, "import './m%d.js';\n", i)
	}
	loader := &countingLoader{ModuleLoader: emptyLoader{}}
	_, err := r.Run(context.Background(), Input{ModuleLoader: loader, Source: b.String()})
	e := wantCode(t, err, CodeBridgeLimit)
	if e.Details["limit"] != "maxModuleRequests" {
		t.Fatalf("details %v", e.Details)
	}
	if n := loader.normalize.Load() + loader.load.Load(); n != 256 {
		t.Fatalf("%d loader calls, want 256", n)
	}
	// The guest cannot catch the limit.
	_, err = r.Run(context.Background(), Input{ModuleLoader: failingLoader{}, SourceType: SourceFunctionBody,
		Source: `for (let i = 0; ; i++) { try { await import('m' + i) } catch (e) {} }`})
	wantCode(t, err, CodeBridgeLimit)

	// A huge module.
	huge := moduleMap(t, map[string]string{"huge.js": "//" + strings.Repeat("x", 300<<10)})
	_, err = r.Run(context.Background(), Input{ModuleLoader: huge, Source: `import './huge.js'`})
	e = wantCode(t, err, CodeSourceTooLarge)
	if e.Details["module"] != "huge.js" {
		t.Fatalf("details %v", e.Details)
	}
	// Modules over the total.
	many := map[string]string{}
	var imports strings.Builder
	for i := range 20 {
		many[fmt.Sprintf("p%d.js", i)] = "//" + strings.Repeat("x", 250<<10)
		fmt.Fprintf(&imports, "import './p%d.js';", i)
	}
	_, err = r.Run(context.Background(), Input{ModuleLoader: moduleMap(t, many), Source: imports.String()})
	e = wantCode(t, err, CodeBridgeLimit)
	if e.Details["limit"] != "maxModuleBytes" {
		t.Fatalf("details %v", e.Details)
	}
	r8 := newTestRunner(t, func(c *Config) { c.Limits.ModuleBytes = 8 << 20 })
	if _, err = r8.Run(context.Background(), Input{ModuleLoader: moduleMap(t, many), Source: imports.String()}); err != nil {
		t.Fatalf("a runner with a higher ModuleBytes limit: %v", err)
	}
}

// emptyLoader serves an empty module under every name.
type emptyLoader struct{}

func (emptyLoader) Normalize(_ context.Context, s, _ string) (string, error) { return s, nil }
func (emptyLoader) Load(context.Context, string) (Module, error)             { return Module{}, nil }

// blockingLoader ignores its context.
type blockingLoader struct{ release chan struct{} }

func (blockingLoader) Normalize(_ context.Context, s, _ string) (string, error) { return s, nil }
func (b blockingLoader) Load(context.Context, string) (Module, error) {
	<-b.release
	return Module{Source: ""}, nil
}

func TestModuleLoaderTimeoutAndCycles(t *testing.T) {
	r := newTestRunner(t)
	bl := blockingLoader{release: make(chan struct{})}
	defer close(bl.release)
	_, err := r.Run(context.Background(), Input{ModuleLoader: bl, Source: `import 'x'`, Limits: Limits{Timeout: 200 * time.Millisecond}})
	wantCode(t, err, CodeTimeout)

	// A module that awaits its own import can never finish.
	mods := moduleMap(t, map[string]string{"w.js": `await import('./w.js'); export const never = 1;`})
	_, err = r.Run(context.Background(), Input{ModuleLoader: mods, Source: `import './w.js'`})
	wantCode(t, err, CodeTimeout)
}

func TestModuleSpecifierEscapes(t *testing.T) {
	r := newTestRunner(t)
	mods := moduleMap(t, map[string]string{"a.js": "export const a = 1", "lib/x.js": "export const x = 2"})
	res := mustRun(t, r, Input{ModuleLoader: mods, SourceType: SourceFunctionBody, Source: `
		const out = [];
		for (const s of ['../a.js', './lib/../../a.js', '/../a.js', 'a.js\u0000../../etc/passwd', './lib\\x.js', '/lib/x.js', './a.js']) {
			try { const m = await import(s); out.push(Object.keys(m).join()) } catch (e) { out.push(e.message) }
		}
		return out`})
	got := res.Value.([]any)
	want := []string{
		`module normalization failed: import of "../a.js" from "<entry>" leaves the module root`,
		`module normalization failed: import of "./lib/../../a.js" from "<entry>" leaves the module root`,
		`module normalization failed: import of "/../a.js" from "<entry>" leaves the module root`,
		// The engine hands specifiers over as C strings: the rest after a
		// NUL never reaches the host.
		`a`,
		`module normalization failed: module specifier "./lib\\x.js" has a NUL, a backslash or invalid UTF-8`,
		`x`,
		`a`,
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("%d: got %q, want %q", i, got[i], w)
		}
	}
	if _, err := NewModuleMap(map[string]string{"../x.js": ""}); err == nil {
		t.Fatal("a module map accepted ../x.js")
	}
}

func TestDirModules(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "secret.js"), []byte("export const secret = 'leaked'"), 0o600))
	must(os.MkdirAll(filepath.Join(dir, "lib"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "lib", "a.mjs"), []byte("import {b} from '../b.mjs'; export const a = 'a' + b"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "b.mjs"), []byte("export const b = 'b'"), 0o600))
	must(os.Symlink(filepath.Join(outside, "secret.js"), filepath.Join(dir, "link.js")))
	must(os.WriteFile(filepath.Join(dir, "big.js"), []byte(strings.Repeat("/", 2000)), 0o600))
	r := newTestRunner(t)
	res := mustRun(t, r, Input{ModuleLoader: DirModules{Root: dir}, SourceType: SourceFunctionBody, Source: `
		const out = [(await import('./lib/a.mjs')).a];
		for (const s of ['./link.js', '../` + filepath.Base(outside) + `/secret.js', 'lodash', './lib', './missing.js']) {
			try { await import(s); out.push('loaded ' + s) } catch (e) { out.push(e.message) }
		}
		return out`})
	got := fmt.Sprint(res.Value)
	for _, want := range []string{"ab", `"link.js" cannot be opened`, "leaves the module root", `bare module specifier "lodash"`, `"lib" is not a regular file`, `"missing.js" not found`} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %s", want, got)
		}
	}
	if strings.Contains(got, "leaked") {
		t.Fatal("a symlink led out of the root")
	}
	_, err := r.Run(context.Background(), Input{ModuleLoader: DirModules{Root: dir}, Source: `import './big.js'`, Limits: Limits{SourceBytes: 1000}})
	wantCode(t, err, CodeSourceTooLarge)
}

// switchLoader serves a map that a test can change between rounds.
type switchLoader struct {
	mods             atomic.Pointer[map[string]string]
	loads, normalize atomic.Int64
}

func (s *switchLoader) Normalize(_ context.Context, spec, imp string) (string, error) {
	s.normalize.Add(1)
	name, _, err := resolveSpecifier(spec, imp)
	return name, err
}

func (s *switchLoader) Load(_ context.Context, name string) (Module, error) {
	s.loads.Add(1)
	src, ok := (*s.mods.Load())[name]
	if !ok {
		return Module{}, &UserError{Message: "not found"}
	}
	return Module{Source: src}, nil
}

func TestModuleContinuationBindsSources(t *testing.T) {
	r := newTestRunner(t)
	var calls atomic.Int64
	hf := tools(&calls)
	v1 := map[string]string{"act.js": `export async function act(x) { return await tools.approve(x) }`}
	v2 := map[string]string{"act.js": `export async function act(x) { await tools.sum(666); return await tools.approve(x) }`}
	src := `import {act} from './act.js'; const ok = await act('deploy'); console.log('approved', ok);`
	sl := &switchLoader{}
	sl.mods.Store(&v1)
	res := mustRun(t, r, Input{ModuleLoader: sl, HostFunctions: hf, Source: src})
	if res.Status != StatusInterrupted || res.Interruptions[0].ID != "interrupt-1" {
		t.Fatalf("got %+v", res)
	}
	// The loader now serves other code: the resume fails before it runs,
	// and the token can be used again (no host function ran).
	sl.mods.Store(&v2)
	before := calls.Load()
	_, err := r.Run(context.Background(), Input{ModuleLoader: sl, HostFunctions: hf, Source: src, Continuation: res.Continuation,
		Resolutions: []Resolution{{InterruptionID: "interrupt-1", Value: true}}})
	e := wantCode(t, err, CodeProtocol)
	if !strings.Contains(e.Message, `module "act.js" changed`) || calls.Load() != before {
		t.Fatalf("%s (host calls %d → %d)", e.Message, before, calls.Load())
	}
	// Without a loader, or as a function body, the token is not in scope.
	_, err = r.Run(context.Background(), Input{SourceType: SourceModule, HostFunctions: hf, Source: src, Continuation: res.Continuation,
		Resolutions: []Resolution{{InterruptionID: "interrupt-1", Value: true}}})
	wantCode(t, err, CodeProtocol)
	// The original code resumes: Normalize is answered from the
	// continuation, Load is called again and checked.
	sl.mods.Store(&v1)
	n0, l0 := sl.normalize.Load(), sl.loads.Load()
	res2 := mustRun(t, r, Input{ModuleLoader: sl, HostFunctions: hf, Source: src, Continuation: res.Continuation,
		Resolutions: []Resolution{{InterruptionID: "interrupt-1", Value: true}}})
	if res2.Status != StatusCompleted || res2.Console != "approved true\n" {
		t.Fatalf("got %+v", res2)
	}
	if sl.normalize.Load() != n0 || sl.loads.Load() != l0+1 {
		t.Fatalf("resume: %d normalize, %d load calls; want 0 and 1", sl.normalize.Load()-n0, sl.loads.Load()-l0)
	}
}

func TestModuleTypeScriptEntry(t *testing.T) {
	r := newTestRunner(t)
	mods := moduleMap(t, testModules)
	src := "import {twice} from './t.ts';\ninterface P { n: number }\nconst p: P = {n: twice(2)};\nconsole.log(p.n);\nif (p.n === 4) throw new Error('four');"
	_, err := r.Run(context.Background(), Input{ModuleLoader: mods, Language: LanguageTypeScript, Source: src})
	e := wantCode(t, err, CodeUserSourceError)
	if e.Message != "four" || e.Console != "4\n" || !strings.Contains(e.Stack, "(<source>:5:") {
		t.Fatalf("%q %q %q", e.Message, e.Console, e.Stack)
	}
	_, err = r.Run(context.Background(), Input{ModuleLoader: mods, Language: LanguageTypeScript, Source: "import {s} from './t.ts';\nconst x: = 1"})
	e = wantCode(t, err, CodeUserSourceError)
	if e.Name != "SyntaxError" || e.Details["line"] != 2 {
		t.Fatalf("%s %q %v", e.Name, e.Message, e.Details)
	}
	// A huge specifier never reaches the host.
	res := mustRun(t, r, Input{ModuleLoader: failingLoader{}, SourceType: SourceFunctionBody,
		Source: "try { await import('x'.repeat(1e6)) } catch (e) { return e.message }"})
	if !strings.Contains(fmt.Sprint(res.Value), "over the limit of 4096") {
		t.Fatalf("got %v", res.Value)
	}
}
