package tool_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// BenchmarkPython compares, side by side in one run, a call on the
// container's warm kernel with what a Python tool did before it: a fresh
// `python3 -c` exec in the same sandbox. Two workloads: print(1), and
// df.describe() on a 10 MB CSV (the kernel loads it once; a fresh process
// imports pandas and reads it every time). It also reports the first
// call's cost (the kernel starting) and the memory an idle kernel holds.
//
//	sudo go test -run '^$' -bench BenchmarkPython -benchtime 10x ./internal/tool/
func BenchmarkPython(b *testing.B) {
	for _, rt := range []string{"runsc", "crun"} {
		b.Run(rt, func(b *testing.B) { benchPython(b, rt) })
	}
}

func benchPython(b *testing.B, rt string) {
	// Files-only sleep: "first call" measures a kernel's start after a
	// sleep, which a checkpoint would skip (BenchmarkSleepWake).
	m, _ := sandboxtest.Open(b, rt, "default", func(c *sandbox.Config) { c.FilesOnlySleep = true })
	ctx := context.Background()
	var k tool.Kernels
	const box = "bench"
	py := func(b *testing.B, code string) tool.PythonOutput {
		c, err := tool.PythonArgs{Code: &code}.Call()
		if err != nil {
			b.Fatal(err)
		}
		o, err := tool.RunPython(ctx, m, box, c, &k, nil)
		if err != nil || o.Outcome.Type != "exit" || *o.Outcome.ExitCode != 0 {
			b.Fatalf("%v %+v", err, o)
		}
		return o
	}
	sh := func(b *testing.B, cmd string) string {
		res, err := m.Exec(ctx, box, sandbox.Command{Command: cmd, TimeoutMs: 120_000, MaxBytes: 1 << 20})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%v %d %s", err, res.ExitCode, res.Stderr)
		}
		return string(res.Stdout)
	}
	// A 10 MB CSV in the home.
	sh(b, `python3 -c "
import random
random.seed(1)
with open('data.csv', 'w') as f:
    f.write('a,b,c,d\n')
    while f.tell() < 10_000_000:
        f.write('%d,%f,%f,x%d\n' % (random.randint(0, 1000), random.random(), random.gauss(0, 1), random.randint(0, 50)))
"`)
	b.Run("first call (kernel start)", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			m.Sleep(ctx, box)
			sh(b, "true") // wake: the sandbox's start is not the kernel's
			b.StartTimer()
			py(b, "print(1)")
		}
	})
	// Each workload on the kernel (after its setup, untimed) and as a
	// fresh python3.
	for _, w := range []struct{ name, setup, code, fresh string }{
		{"print(1)", "print(1)", "print(1)", "python3 -c 'print(1)'"},
		{"describe", "import pandas as pd\ndf = pd.read_csv('data.csv')", "df.describe()",
			`python3 -c "import pandas as pd; print(pd.read_csv('data.csv').describe())"`},
	} {
		b.Run(w.name+"/kernel", func(b *testing.B) {
			py(b, w.setup)
			for b.Loop() {
				py(b, w.code)
			}
		})
		b.Run(w.name+"/fresh python3", func(b *testing.B) {
			for b.Loop() {
				sh(b, w.fresh)
			}
		})
	}
	b.Run("idle kernel memory", func(b *testing.B) {
		m.Sleep(ctx, box)
		py(b, "print(1)")
		var kib int
		for b.Loop() {
			kib = 0
			for _, f := range strings.Fields(sh(b, "ps -o rss= -C python3")) {
				n, _ := strconv.Atoi(f)
				kib += n
			}
		}
		b.ReportMetric(float64(kib)/1024, "MiB-RSS")
	})
}

// BenchmarkSleepWake compares, side by side in one run on gVisor, sleep
// and wake with a checkpoint of the running state against a files-only
// sleep (what every other hosted code tool but E2B offers), for an idle
// kernel and for one holding 1 GiB of numpy arrays. Both wake with the
// same call, which rebuilds the state only when it is gone — a files-only
// wake pays a new kernel and the rebuild. It reports the checkpoint's
// size on disk, and sleep and wake per GiB of sandbox memory to set
// beside E2B's published ≈ 4 s/GiB pause and ≈ 1 s resume.
//
//	sudo go test -run '^$' -bench BenchmarkSleepWake -benchtime 3x ./internal/tool/
func BenchmarkSleepWake(b *testing.B) {
	for _, mode := range []string{"checkpoint", "files-only"} {
		b.Run(mode, func(b *testing.B) {
			m, _ := sandboxtest.Open(b, "runsc", "default", func(c *sandbox.Config) {
				c.Limits.MemoryBytes = 3 << 30 // 1 GiB of arrays and the kernel
				c.FilesOnlySleep = mode == "files-only"
			})
			ctx := context.Background()
			var k tool.Kernels
			py := func(b *testing.B, code, want string) {
				c, err := tool.PythonArgs{Code: &code}.Call()
				if err != nil {
					b.Fatal(err)
				}
				c.TimeoutMs = 300_000
				o, err := tool.RunPython(ctx, m, "bench", c, &k, nil)
				if err != nil || o.Outcome.Type != "exit" || *o.Outcome.ExitCode != 0 || o.Stdout != want {
					b.Fatalf("%v %+v", err, o)
				}
			}
			for _, w := range []struct{ name, setup, print, want string }{
				{"idle kernel", "x = 41", "print(x + 1)", "42\n"},
				{"1 GiB numpy", "import numpy as np\nx = np.arange(1 << 27, dtype=np.float64)", "print(int(x[-1]))", "134217727\n"},
			} {
				b.Run(w.name, func(b *testing.B) {
					wake := "if 'x' not in globals():\n" + indent(w.setup) + "\n" + w.print
					py(b, w.setup+"\n"+w.print, w.want)
					var sleep, woke time.Duration
					var ckpt int64
					for b.Loop() {
						t0 := time.Now()
						if err := m.Sleep(ctx, "bench"); err != nil {
							b.Fatal(err)
						}
						t1 := time.Now()
						inf, _ := m.Info("bench")
						ckpt = inf.CheckpointBytes
						py(b, wake, w.want)
						sleep, woke = sleep+t1.Sub(t0), woke+time.Since(t1)
					}
					n := float64(b.N)
					b.ReportMetric(sleep.Seconds()*1000/n, "sleep-ms")
					b.ReportMetric(woke.Seconds()*1000/n, "wake-ms")
					b.ReportMetric(float64(ckpt)/(1<<20), "ckpt-MiB")
				})
			}
		})
	}
}

func indent(code string) string {
	return "    " + strings.ReplaceAll(code, "\n", "\n    ")
}
