package sandbox_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// What the per-sandbox user namespace costs, measured side by side with
// Config.SharedHostUser (every sandbox as host uid 1000, the engine before
// user namespaces): two managers over the same image, alternating, so that
// both see the same host load.
//
//	go test ./sandbox -run '^$' -bench UserNS -benchtime 40x
//
// Each reports the median of both as userns-ms and shared-ms.

// BenchmarkUserNSCreate is a new sandbox's first `true` without a pool:
// home mkfs, the namespace, mounts, container start and the command.
func BenchmarkUserNSCreate(b *testing.B) {
	benchUserNS(b, func(b *testing.B, m *sandbox.Manager, i int) time.Duration {
		name := fmt.Sprintf("first-%d", i)
		d := benchExec(b, m, name, "true", "")
		if err := m.Destroy(context.Background(), name); err != nil {
			b.Fatal(err)
		}
		return d
	})
}

// BenchmarkUserNSWarmTrue is one `true` in a running sandbox.
func BenchmarkUserNSWarmTrue(b *testing.B) {
	benchUserNS(b, func(b *testing.B, m *sandbox.Manager, i int) time.Duration {
		if i == 0 {
			for range 3 { // start the sandbox, warm the page cache
				benchExec(b, m, "warm", "true", "")
			}
		}
		return benchExec(b, m, "warm", "true", "")
	})
}

func benchUserNS(b *testing.B, step func(*testing.B, *sandbox.Manager, int) time.Duration) {
	for _, rt := range []string{"crun", "runc", "runsc"} {
		b.Run(rt, func(b *testing.B) {
			own, shared := userNSBenchManager(b, rt, false), userNSBenchManager(b, rt, true)
			var dOwn, dShared []time.Duration
			i := 0
			for b.Loop() {
				// Alternate which goes first.
				if i%2 == 0 {
					dOwn = append(dOwn, step(b, own, i))
					dShared = append(dShared, step(b, shared, i))
				} else {
					dShared = append(dShared, step(b, shared, i))
					dOwn = append(dOwn, step(b, own, i))
				}
				i++
			}
			b.ReportMetric(median(dOwn), "userns-ms")
			b.ReportMetric(median(dShared), "shared-ms")
		})
	}
}

func userNSBenchManager(b *testing.B, rt string, sharedHostUser bool) *sandbox.Manager {
	m, _ := sandboxtest.Open(b, rt, benchImage(), func(c *sandbox.Config) {
		c.Limits = runtime.DefaultLimits()
		c.HomeBytes = 0
		c.SharedHostUser = sharedHostUser
	})
	return m
}

func median(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[len(d)/2]) / float64(time.Millisecond)
}
