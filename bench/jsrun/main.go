// Command jsrun-bench runs jsrun, quickjs-emscripten (the engine the Run
// SDK embeds, on Node) and the Run SDK itself (the npm package `run`) side by
// side on the same cases and prints a table of medians, p99 and the ratios
// jsrun ÷ emscripten and jsrun ÷ run.
//
//	(cd bench/jsrun && npm ci) && go run ./bench/jsrun -n 300
//	go run ./bench/jsrun -n 200 -only modules   # one case, jsrun and run only
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shellgate/shellgate/jsrun"
	"modernc.org/quickjs"
)

type stat struct {
	p50, p99 float64 // µs
	wallMs   float64 // concurrency case
	rssMiB   float64 // concurrency case: peak RSS of the process
	extra    string
}

func main() {
	n := flag.Int("n", 300, "iterations per case")
	concurrent := flag.Int("concurrent", 1000, "runs alive at once in the concurrency case (jsrun and emscripten)")
	runConcurrent := flag.Int("run-concurrent", 200, "runs alive at once in the concurrency case against the Run SDK (each holds a worker thread); 0 skips it")
	dir := flag.String("dir", "bench/jsrun", "directory of bench.mjs and run.mjs (with node_modules)")
	only := flag.String("only", "", "run only this case (e.g. modules) on jsrun and run, without the concurrency cases")
	flag.Parse()

	if *only != "" {
		g := runGoOnly(*only, *n)
		rs, err := runNode(*dir, "run.mjs", *n, 0, "--only", *only)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("jsrun (Go %s) vs the Run SDK (npm run %s) on Node %s; %d iterations, %d CPUs\n\n", runtime.Version(), runVersion(*dir), nodeVersion(), *n, runtime.NumCPU())
		fmt.Println("| case | jsrun p50 | jsrun p99 | run p50 | run p99 | p50 jsrun ÷ run |")
		fmt.Println("|---|---:|---:|---:|---:|---:|")
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", label(*only), ms(g.p50), ms(g.p99), ms(rs[*only].p50), ms(rs[*only].p99), ratio(g.p50, rs[*only].p50))
		return
	}

	goStats := runGo(*n, *concurrent, *runConcurrent)
	nodeStats, nodeErr := runNode(*dir, "bench.mjs", *n, *concurrent)
	runStats, runErr := runNode(*dir, "run.mjs", *n, *runConcurrent)

	fmt.Printf("jsrun (Go %s, modernc.org/quickjs) vs quickjs-emscripten 0.32 and the Run SDK (npm run %s) on Node %s; %d iterations per case, %d CPUs\n\n",
		runtime.Version(), runVersion(*dir), nodeVersion(), *n, runtime.NumCPU())
	fmt.Println("| case | jsrun p50 | jsrun p99 | emscripten p50 | emscripten p99 | run p50 | run p99 | p50 jsrun ÷ emscripten | p50 jsrun ÷ run |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range []string{"bare", "fresh", "roundtrip", "ten", "interrupt_resume", "fresh_prewarmed", "interrupt_resume_prewarmed"} {
		g, ns, rs := goStats[c], nodeStats[strings.TrimSuffix(c, "_prewarmed")], runStats[strings.TrimSuffix(c, "_prewarmed")]
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label(c), ms(g.p50), ms(g.p99), ms(ns.p50), ms(ns.p99), ms(rs.p50), ms(rs.p99), ratio(g.p50, ns.p50), ratio(g.p50, rs.p50))
	}
	fmt.Printf("| %d concurrent runs | %s | | %s | | — | | %s wall, %s RSS | |\n", *concurrent, goStats["concurrent"].extra, nodeStats["concurrent"].extra,
		ratio(goStats["concurrent"].wallMs, nodeStats["concurrent"].wallMs), ratio(goStats["concurrent"].rssMiB, nodeStats["concurrent"].rssMiB))
	if *runConcurrent > 0 {
		g, rs := goStats["run_concurrent"], runStats["concurrent"]
		fmt.Printf("| %d concurrent runs | %s | | — | | %s | | | %s wall, %s RSS |\n", *runConcurrent, g.extra, rs.extra, ratio(g.wallMs, rs.wallMs), ratio(g.rssMiB, rs.rssMiB))
	}
	failed := false
	for side, err := range map[string]error{"emscripten (bench.mjs)": nodeErr, "run (run.mjs)": runErr} {
		if err != nil {
			fmt.Fprintf(os.Stderr, "\n%s side failed: %v\n", side, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.3f", a/b)
}

func label(c string) string {
	return map[string]string{
		"bare":                       "bare engine: new context, eval `1+1`, dispose",
		"fresh":                      "fresh run of `return 1+1`",
		"roundtrip":                  "one host round trip",
		"ten":                        "ten sequential round trips",
		"interrupt_resume":           "interrupt + resume (signed token, replay)",
		"fresh_prewarmed":            "fresh run, jsrun Prewarm=4, one run per 5 ms (emscripten, run: closed loop)",
		"interrupt_resume_prewarmed": "interrupt + resume, jsrun Prewarm=4, one per 5 ms (emscripten, run: closed loop)",
		"modules":                    "fresh module run importing 10 modules (host loader, static imports)",
	}[c]
}

func ms(us float64) string {
	if us == 0 {
		return "—"
	}
	return fmt.Sprintf("%.3f ms", us/1000)
}

// timeCalls calls fn warmup times untimed, then n times, after a pause
// each (0: back to back), and returns the percentiles of the timed calls.
func timeCalls(n, warmup int, pause time.Duration, fn func()) stat {
	for range warmup {
		fn()
	}
	d := make([]time.Duration, 0, n)
	for range n {
		if pause > 0 {
			time.Sleep(pause)
		}
		t := time.Now()
		fn()
		d = append(d, time.Since(t))
	}
	return percentiles(d)
}

func percentiles(d []time.Duration) stat {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(p float64) float64 {
		i := int(float64(len(d)) * p)
		if i >= len(d) {
			i = len(d) - 1
		}
		return float64(d[i].Nanoseconds()) / 1000
	}
	return stat{p50: at(0.5), p99: at(0.99)}
}

var host = map[string]jsrun.Namespace{"host": {
	"echo": jsrun.Async(func(_ context.Context, args []any) (any, error) { return args[0], nil }),
	"approve": jsrun.Async(func(ctx context.Context, args []any) (any, error) {
		if r := jsrun.ResumeFrom(ctx); r != nil {
			return r.Resolution, nil
		}
		return nil, jsrun.Interrupt(ctx, args[0])
	}),
}}

func runGo(n, concurrent, runConcurrent int) map[string]stat {
	r, err := jsrun.NewRunner(jsrun.Config{Secret: bytes.Repeat([]byte("k"), 32), Store: jsrun.NewMemoryStore()})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	must := func(res *jsrun.Result, err error) *jsrun.Result {
		if err != nil {
			panic(err)
		}
		return res
	}
	cases := map[string]func(){
		"bare": func() {
			vm, err := quickjs.NewVM()
			if err != nil {
				panic(err)
			}
			if _, err := vm.Eval("1+1", quickjs.EvalGlobal); err != nil {
				panic(err)
			}
			vm.Close()
		},
		"fresh":     func() { must(r.Run(ctx, jsrun.Input{Source: "return 1+1", HostFunctions: host})) },
		"roundtrip": func() { must(r.Run(ctx, jsrun.Input{Source: "return await host.echo(1)", HostFunctions: host})) },
		"ten": func() {
			must(r.Run(ctx, jsrun.Input{Source: "let s = 0; for (let i = 0; i < 10; i++) s += await host.echo(i); return s", HostFunctions: host}))
		},
		"interrupt_resume": func() {
			src := "const a = await host.echo(1); const ok = await host.approve(a); return ok"
			res := must(r.Run(ctx, jsrun.Input{Source: src, HostFunctions: host}))
			must(r.Run(ctx, jsrun.Input{Source: src, HostFunctions: host, Continuation: res.Continuation,
				Resolutions: []jsrun.Resolution{{InterruptionID: res.Interruptions[0].ID, Value: true}}}))
		},
	}
	out := map[string]stat{}
	for _, name := range []string{"bare", "fresh", "roundtrip", "ten", "interrupt_resume"} {
		out[name] = timeCalls(n, 20, 0, cases[name])
	}
	// The same two cases with prewarmed contexts, paced so the pool keeps
	// up: the latency a server sees below saturation.
	pr, err := jsrun.NewRunner(jsrun.Config{Secret: bytes.Repeat([]byte("k"), 32), Store: jsrun.NewMemoryStore(), Prewarm: 4})
	if err != nil {
		panic(err)
	}
	defer pr.Close()
	r = pr
	for _, name := range []string{"fresh", "interrupt_resume"} {
		time.Sleep(100 * time.Millisecond)
		out[name+"_prewarmed"] = timeCalls(n, 0, 5*time.Millisecond, cases[name])
	}
	// The smaller count first: each case's peak RSS is a fresh high-water mark.
	if runConcurrent > 0 {
		out["run_concurrent"] = goConcurrent(r, runConcurrent)
	}
	out["concurrent"] = goConcurrent(r, concurrent)
	return out
}

// benchModules are the ten modules of the modules case (run.mjs has the
// same): m0 imports nothing, each other mI imports m(I-1).
var benchModules = func() map[string]string {
	m := map[string]string{}
	for i := range 10 {
		src := "export const v = " + strconv.Itoa(i) + ";"
		if i > 0 {
			src = "import {sum as prev} from './m" + strconv.Itoa(i-1) + ".js'; " + src + " export const sum = prev + v;"
		} else {
			src += " export const sum = v;"
		}
		m["m"+strconv.Itoa(i)+".js"] = src
	}
	return m
}()

const benchModuleSource = "import {sum} from './m9.js'; import {v} from './m0.js'; if (sum + v !== 45) throw new Error('bad sum');"

func runGoOnly(name string, n int) stat {
	if name != "modules" {
		panic("unknown case " + name)
	}
	r, err := jsrun.NewRunner(jsrun.Config{})
	if err != nil {
		panic(err)
	}
	loader, err := jsrun.NewModuleMap(benchModules)
	if err != nil {
		panic(err)
	}
	fn := func() {
		res, err := r.Run(context.Background(), jsrun.Input{Source: benchModuleSource, ModuleLoader: loader})
		if err != nil || res.Status != jsrun.StatusCompleted {
			panic(fmt.Sprint(res, err))
		}
	}
	return timeCalls(n, 20, 0, fn)
}

func goConcurrent(r *jsrun.Runner, n int) stat {
	gate := make(chan struct{})
	var started sync.WaitGroup
	started.Add(n)
	hf := map[string]jsrun.Namespace{"host": {"echo": jsrun.Async(func(_ context.Context, args []any) (any, error) {
		started.Done()
		<-gate
		return args[0], nil
	})}}
	var wg sync.WaitGroup
	debug.FreeOSMemory()
	resetPeakRSS()
	t := time.Now()
	for j := 0; j < n; j++ {
		wg.Add(1)
		go func(j int) {
			defer wg.Done()
			res, err := r.Run(context.Background(), jsrun.Input{Source: "const a = new Array(1000).fill(0).map((_, i) => ({i})); return (await host.echo(" + strconv.Itoa(j) + ")) + a.length", HostFunctions: hf})
			if err != nil || res.Value != float64(j+1000) {
				panic(fmt.Sprint(res, err))
			}
		}(j)
	}
	started.Wait()
	rss := peakRSSMiB()
	close(gate)
	wg.Wait()
	wall := time.Since(t)
	return stat{wallMs: float64(wall.Milliseconds()), rssMiB: rss, extra: fmt.Sprintf("all correct, %d ms wall, peak RSS %.0f MiB", wall.Milliseconds(), rss)}
}

// resetPeakRSS starts a new high-water mark for VmHWM (Linux clear_refs 5),
// so a case's peak does not include an earlier, larger one.
func resetPeakRSS() {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		fmt.Fprintf(os.Stderr, "cannot reset peak RSS (%v): it includes earlier cases\n", err)
	}
}

func peakRSSMiB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func runNode(dir, script string, n, concurrent int, extra ...string) (map[string]stat, error) {
	out := map[string]stat{}
	cmd := exec.Command("node", append([]string{filepath.Join(dir, script), "--n", strconv.Itoa(n), "--concurrent", strconv.Itoa(concurrent)}, extra...)...)
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("node %s/%s (run npm ci there first): %w", dir, script, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var line struct {
			Case   string  `json:"case"`
			P50    float64 `json:"p50_us"`
			P99    float64 `json:"p99_us"`
			WallMs float64 `json:"wall_ms"`
			RSS    float64 `json:"rss_mib"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		s := stat{p50: line.P50, p99: line.P99}
		if line.Case == "concurrent" {
			s.wallMs, s.rssMiB = line.WallMs, line.RSS
			s.extra = fmt.Sprintf("all correct, %.0f ms wall, peak RSS %.0f MiB", line.WallMs, line.RSS)
		}
		out[line.Case] = s
	}
	return out, nil
}

func runVersion(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "run", "package.json"))
	var pkg struct{ Version string }
	if err != nil || json.Unmarshal(b, &pkg) != nil {
		return "?"
	}
	return pkg.Version
}

func nodeVersion() string {
	b, err := exec.Command("node", "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
