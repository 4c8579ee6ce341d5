package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/image"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// Benchmarks of the sandbox fast path against real runtimes, as root:
//
//	sudo go test ./sandbox -run '^$' -bench . -benchtime 100x
//
// Images come from $SHELLGATE_IMAGES (default /var/lib/shellgate/images),
// the image from $SHELLGATE_BENCH_IMAGE (default "default"). Each benchmark
// also reports its median as median-ms. The side-by-side comparison with
// podman, crun, runc, bwrap and the host is `go run ./bench/sandbox`.

func benchImages() string {
	if d := os.Getenv("SHELLGATE_IMAGES"); d != "" {
		return d
	}
	return "/var/lib/shellgate/images"
}

func benchImage() string {
	if n := os.Getenv("SHELLGATE_BENCH_IMAGE"); n != "" {
		return n
	}
	return "default"
}

// benchManager opens a manager on a private data directory sharing the
// image store, or skips the benchmark saying why it cannot run here.
func benchManager(b *testing.B, rt string, pool int) *Manager {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("sandbox benchmarks need root")
	}
	ctx := context.Background()
	r, err := runtime.New(rt, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Check(ctx); err != nil {
		b.Skipf("runtime %s does not work here: %v", rt, err)
	}
	store, err := image.Open(benchImages())
	if err != nil {
		b.Skipf("image store %s: %v", benchImages(), err)
	}
	if _, err := store.Get(benchImage()); err != nil {
		b.Skipf("image %q missing in %s (build it with `shellgate image build`): %v", benchImage(), benchImages(), err)
	}
	agent, err := agentbin.Build()
	if err != nil {
		b.Skipf("cannot build the agent: %v", err)
	}
	data := b.TempDir()
	if err := os.Symlink(benchImages(), filepath.Join(data, "images")); err != nil {
		b.Fatal(err)
	}
	m, err := Open(ctx, Config{DataDir: data, Runtime: rt, Image: benchImage(), Agent: agent, PoolSize: pool, IdleTimeout: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			b.Error(err)
		}
	})
	return m
}

func benchExec(b *testing.B, m *Manager, name, cmd, want string) time.Duration {
	b.Helper()
	t0 := time.Now()
	res, err := m.Exec(context.Background(), name, Command{Command: cmd, TimeoutMs: 120_000, MaxBytes: 16384})
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
					waitPoolFull(b, m)
				}
				name := fmt.Sprintf("first-%d", i)
				i++
				b.StartTimer()
				d = append(d, benchExec(b, m, name, "true", ""))
				b.StopTimer()
				if err := destroyRetry(ctx, m, name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			reportMedian(b, d)
			if n := busyRetries.Swap(0); n > 0 {
				b.Logf("Destroy found the home lock busy %d times (transient)", n)
			}
		})
	}
}

// waitPoolFull waits until the warm pool holds PoolSize started sandboxes.
func waitPoolFull(b *testing.B, m *Manager) {
	deadline := time.Now().Add(time.Minute)
	for len(m.pool) < cap(m.pool) {
		if time.Now().After(deadline) {
			b.Fatal("the warm pool did not refill within a minute")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// destroyRetry retries Destroy while it fails with ErrBusy: the home's flock
// can be held for a moment by a process the pool filler is forking (the
// child shares the lock's open file until its exec closes it).
func destroyRetry(ctx context.Context, m *Manager, name string) error {
	var err error
	for range 100 {
		if err = m.Destroy(ctx, name); !errors.Is(err, ErrBusy) {
			return err
		}
		busyRetries.Add(1)
		time.Sleep(time.Millisecond)
	}
	return err
}

var busyRetries atomic.Int64
