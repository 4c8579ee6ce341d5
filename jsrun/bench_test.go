package jsrun

import (
	"context"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Benchmarks of the four cases the Run SDK budgets (see BENCHMARKS.md), plus
// 1,000 concurrent runs. Timings never gate tests.

func benchRunner(b *testing.B) *Runner {
	b.Helper()
	r, err := NewRunner(Config{Secret: testSecret, Store: NewMemoryStore()})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.Run(context.Background(), Input{Source: "return 1"}); err != nil { // compile the prelude
		b.Fatal(err)
	}
	return r
}

var benchHost = map[string]Namespace{"host": {
	"echo": Async(func(_ context.Context, args []any) (any, error) { return args[0], nil }),
	"approve": Async(func(ctx context.Context, args []any) (any, error) {
		if r := ResumeFrom(ctx); r != nil {
			return r.Resolution, nil
		}
		return nil, Interrupt(ctx, args[0])
	}),
}}

// percentiles reports the median and p99 of per-op durations as metrics.
func percentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

// timeEach calls step b.N times, after a pause each (0: back to back),
// and reports the percentiles of the durations step returns.
func timeEach(b *testing.B, pause time.Duration, step func(i int) time.Duration) {
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if pause > 0 {
			time.Sleep(pause)
		}
		d = append(d, step(i))
	}
	b.StopTimer()
	percentiles(b, d)
}

// timedRun runs in to completion and returns how long it took.
func timedRun(b *testing.B, r *Runner, ctx context.Context, in Input) time.Duration {
	t := time.Now()
	res, err := r.Run(ctx, in)
	d := time.Since(t)
	if err != nil || res.Status != StatusCompleted {
		b.Fatal(res, err)
	}
	return d
}

// timedSource is timedRun of src with benchHost's functions.
func timedSource(b *testing.B, r *Runner, ctx context.Context, src string) time.Duration {
	return timedRun(b, r, ctx, Input{Source: src, HostFunctions: benchHost})
}

func benchSource(b *testing.B, src string) {
	r := benchRunner(b)
	ctx := context.Background()
	timeEach(b, 0, func(int) time.Duration { return timedSource(b, r, ctx, src) })
}

func BenchmarkFreshRun(b *testing.B) { benchSource(b, "return 1+1") }

// BenchmarkFreshRunPrewarmed measures a run's latency when a hardened
// context is ready (Config.Prewarm), at one run per 5 ms so the pool keeps
// up; ns/op includes the pause, the p50/p99 metrics do not.
func BenchmarkFreshRunPrewarmed(b *testing.B) {
	benchPrewarmed(b, 5*time.Millisecond, func(r *Runner, ctx context.Context) time.Duration { return timedSource(b, r, ctx, "return 1+1") })
}

// BenchmarkFreshRunPrewarmedClosedLoop is BenchmarkFreshRunPrewarmed at
// saturation: runs back to back with no pause, so the pool is mostly empty
// and most runs harden their own context while the prewarm goroutine
// competes for the CPU (ns/op is the throughput; p50-µs/p99-µs the latency).
func BenchmarkFreshRunPrewarmedClosedLoop(b *testing.B) {
	benchPrewarmed(b, 0, func(r *Runner, ctx context.Context) time.Duration { return timedSource(b, r, ctx, "return 1+1") })
}

// benchPrewarmed times step with Config.Prewarm, after a pause each (5 ms
// lets the pool keep up: ns/op includes the pauses; read p50-µs/p99-µs).
func benchPrewarmed(b *testing.B, pause time.Duration, step func(*Runner, context.Context) time.Duration) {
	r, err := NewRunner(Config{Secret: testSecret, Store: NewMemoryStore(), Prewarm: 4})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	time.Sleep(100 * time.Millisecond)
	timeEach(b, pause, func(int) time.Duration { return step(r, ctx) })
}

func BenchmarkHostRoundTrip(b *testing.B) { benchSource(b, "return await host.echo(1)") }

func BenchmarkTenRoundTrips(b *testing.B) {
	benchSource(b, "let s = 0; for (let i = 0; i < 10; i++) s += await host.echo(i); return s")
}

const interruptResumeSrc = "const a = await host.echo(1); const ok = await host.approve(a); return ok"

// interruptResume runs interruptResumeSrc until it interrupts, resumes it
// with approval and returns the time both took.
func interruptResume(b *testing.B, r *Runner, ctx context.Context) time.Duration {
	t := time.Now()
	res, err := r.Run(ctx, Input{Source: interruptResumeSrc, HostFunctions: benchHost})
	if err != nil || res.Status != StatusInterrupted {
		b.Fatal(res, err)
	}
	res, err = r.Run(ctx, Input{Source: interruptResumeSrc, HostFunctions: benchHost, Continuation: res.Continuation,
		Resolutions: []Resolution{{InterruptionID: res.Interruptions[0].ID, Value: true}}})
	d := time.Since(t)
	if err != nil || res.Status != StatusCompleted {
		b.Fatal(res, err)
	}
	return d
}

func BenchmarkInterruptResume(b *testing.B) {
	r := benchRunner(b)
	ctx := context.Background()
	timeEach(b, 0, func(int) time.Duration { return interruptResume(b, r, ctx) })
}

// BenchmarkInterruptResumePrewarmed is BenchmarkInterruptResume with
// Config.Prewarm, paced like BenchmarkFreshRunPrewarmed (ns/op includes the
// 5 ms pauses; read p50-µs/p99-µs).
func BenchmarkInterruptResumePrewarmed(b *testing.B) {
	benchPrewarmed(b, 5*time.Millisecond, func(r *Runner, ctx context.Context) time.Duration { return interruptResume(b, r, ctx) })
}

// BenchmarkConcurrent1000 starts 1,000 runs at once, each holding its
// context open across a host call, and reports the process's peak RSS.
func BenchmarkConcurrent1000(b *testing.B) {
	r := benchRunner(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		gate := make(chan struct{})
		var started sync.WaitGroup
		started.Add(1000)
		hf := map[string]Namespace{"host": {"wait": Async(func(ctx context.Context, args []any) (any, error) {
			started.Done()
			<-gate
			return args[0], nil
		})}}
		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		t := time.Now()
		for j := 0; j < 1000; j++ {
			wg.Add(1)
			go func(j int) {
				defer wg.Done()
				res, err := r.Run(ctx, Input{Source: "const a = new Array(1000).fill(0).map((_, i) => ({i})); return (await host.wait(" + strconv.Itoa(j) + ")) + a.length", HostFunctions: hf})
				if err != nil {
					errs <- err
				} else if res.Value != float64(j+1000) {
					errs <- os.ErrInvalid
				}
			}(j)
		}
		started.Wait() // all 1,000 contexts are alive now
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		close(gate)
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t).Milliseconds()), "wall-ms")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
		b.ReportMetric(float64(peakRSS())/(1<<10), "peak-rss-MiB")
	}
}

// peakRSS reads VmHWM (KiB) from /proc/self/status; 0 where unavailable.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n
			}
		}
	}
	return 0
}
