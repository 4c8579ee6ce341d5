package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// Benchmarks of the sandbox fast path against real runtimes, as root:
//
//	sudo go test ./sandbox -run '^$' -bench . -benchtime 100x
//
// Images come from $SHELLGATE_TEST_IMAGES (default
// /var/lib/shellgate/images), the image from $SHELLGATE_BENCH_IMAGE (default "default"). Each benchmark
// also reports its median as median-ms. The side-by-side comparison with
// podman, crun, runc, bwrap and the host is `go run ./bench/sandbox`.

func benchImage() string {
	if n := os.Getenv("SHELLGATE_BENCH_IMAGE"); n != "" {
		return n
	}
	return "default"
}

// benchManager opens a manager with the default limits on a private data
// directory sharing the image store, or skips the benchmark saying why it
// cannot run here.
func benchManager(b *testing.B, rt string, pool int) *sandbox.Manager {
	b.Helper()
	m, _ := sandboxtest.Open(b, rt, benchImage(), func(c *sandbox.Config) {
		c.PoolSize = pool
		c.Limits = runtime.DefaultLimits()
		c.HomeBytes = 0
	})
	return m
}

func benchExec(b *testing.B, m *sandbox.Manager, name, cmd, want string) time.Duration {
	b.Helper()
	t0 := time.Now()
	res, err := m.Exec(context.Background(), name, sandbox.Command{Command: cmd, TimeoutMs: 120_000, MaxBytes: 16384})
	d := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	if res.ExitCode != 0 || string(res.Stdout) != want {
		b.Fatalf("%q: exit %d, stdout %q, stderr %q", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return d
}

func reportMedian(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2])/float64(time.Millisecond), "median-ms")
}

func benchWarm(b *testing.B, cmd, want string) {
	for _, rt := range runtime.Names {
		b.Run(rt, func(b *testing.B) {
			m := benchManager(b, rt, 0)
			for range 3 { // start the sandbox, warm the page cache
				benchExec(b, m, "warm", cmd, want)
			}
			var d []time.Duration
			b.ResetTimer()
			for b.Loop() {
				d = append(d, benchExec(b, m, "warm", cmd, want))
			}
			b.StopTimer()
			reportMedian(b, d)
			if err := m.Destroy(context.Background(), "warm"); err != nil {
				b.Error(err)
			}
		})
	}
}

// BenchmarkWarmExecTrue is one `true` (run as `bash -lc true`) in a running
// sandbox: the agent round trip plus the login shell.
func BenchmarkWarmExecTrue(b *testing.B) { benchWarm(b, "true", "") }

// BenchmarkWarmExecPython is `python3 -c 'print(1)'` in a running sandbox.
func BenchmarkWarmExecPython(b *testing.B) { benchWarm(b, "python3 -c 'print(1)'", "1\n") }

// BenchmarkPooledFirstCommand is the first `true` of a new sandbox name
// taken from a warm pool of one; the pool refills (untimed) between
// iterations.
func BenchmarkPooledFirstCommand(b *testing.B) { benchFirst(b, 1) }

// BenchmarkUnpooledFirstCommand is the first `true` of a new sandbox name
// without a pool: home mkfs, mounts and the container start included.
func BenchmarkUnpooledFirstCommand(b *testing.B) { benchFirst(b, 0) }

func benchFirst(b *testing.B, pool int) {
	for _, rt := range runtime.Names {
		b.Run(rt, func(b *testing.B) {
			m := benchManager(b, rt, pool)
			ctx := context.Background()
			var d []time.Duration
			i := 0
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				if pool > 0 {
					waitPoolFull(b, m, pool)
				}
				name := fmt.Sprintf("first-%d", i)
				i++
				b.StartTimer()
				d = append(d, benchExec(b, m, name, "true", ""))
				b.StopTimer()
				if err := m.Destroy(ctx, name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			reportMedian(b, d)
		})
	}
}

// waitPoolFull waits until the warm pool holds PoolSize started sandboxes.
func waitPoolFull(b *testing.B, m *sandbox.Manager, size int) {
	deadline := time.Now().Add(time.Minute)
	for m.PoolReady() < size {
		if time.Now().After(deadline) {
			b.Fatal("the warm pool did not refill within a minute")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
