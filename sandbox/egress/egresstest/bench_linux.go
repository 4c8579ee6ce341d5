package egresstest

import (
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// CompareDownloads fetches url (a BigSize body) through direct and through
// proxied, one after the other in every iteration of b, in alternating
// order so that a shared machine's load falls on both alike. It reports
// each path's throughput (direct-MB/s, proxy-MB/s), the ratio of their
// speeds (direct time ÷ proxy time) and the ratio of the CPU time this
// process spent on each (cpu-ratio: server, proxy and clients are all in it).
func CompareDownloads(b *testing.B, url string, direct, proxied *http.Client) {
	paths := [2]*http.Client{direct, proxied}
	var wall, cpu [2]time.Duration
	for i := 0; i < b.N; i++ {
		for j := range 2 {
			p := (i + j) % 2
			c0, t0 := cpuTime(b), time.Now()
			resp, err := paths[p].Get(url)
			if err != nil {
				b.Fatal(err)
			}
			k, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || k != BigSize {
				b.Fatalf("%d bytes, %v", k, err)
			}
			wall[p] += time.Since(t0)
			cpu[p] += cpuTime(b) - c0
		}
	}
	mbs := func(d time.Duration) float64 { return float64(b.N) * BigSize / d.Seconds() / 1e6 }
	b.ReportMetric(mbs(wall[0]), "direct-MB/s")
	b.ReportMetric(mbs(wall[1]), "proxy-MB/s")
	b.ReportMetric(wall[0].Seconds()/wall[1].Seconds(), "ratio")
	b.ReportMetric(cpu[1].Seconds()/cpu[0].Seconds(), "cpu-ratio")
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
