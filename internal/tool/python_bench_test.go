package tool_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

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
	m, _ := sandboxtest.Open(b, rt, "default")
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
	b.Run("print(1)/kernel", func(b *testing.B) {
		py(b, "print(1)")
		for b.Loop() {
			py(b, "print(1)")
		}
	})
	b.Run("print(1)/fresh python3", func(b *testing.B) {
		for b.Loop() {
			sh(b, "python3 -c 'print(1)'")
		}
	})
	b.Run("describe/kernel", func(b *testing.B) {
		py(b, "import pandas as pd\ndf = pd.read_csv('data.csv')")
		for b.Loop() {
			py(b, "df.describe()")
		}
	})
	b.Run("describe/fresh python3", func(b *testing.B) {
		for b.Loop() {
			sh(b, `python3 -c "import pandas as pd; print(pd.read_csv('data.csv').describe())"`)
		}
	})
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
