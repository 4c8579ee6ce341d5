package kubeproxy_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/egress/egresstest"
)

// BenchmarkExplicitDownload fetches 100 MB from the test internet directly
// (the host's namespace, no proxy) and through the Kubernetes-mode proxy
// as a sandbox pod would (HTTP_PROXY: absolute-form http://; HTTPS_PROXY:
// CONNECT, then TLS end to end), one after the other in every iteration,
// in alternating order so that the shared machine's load falls on both
// alike. It reports each path's throughput, the ratio proxy/direct and
// the ratio of the CPU time this process spent on each (server, proxy and
// clients are all in it).
func BenchmarkExplicitDownload(b *testing.B) {
	e := newEnv(b, egress.ExplicitConfig{})
	const pod = "127.0.0.51"
	e.addPod(b, "bench", pod, node, corev1.PodRunning, `["allowed.test"]`)
	e.seen(b, pod, func(_ string, _ egress.Policy, err error) bool { return err == nil })
	server := netip.AddrPortFrom(e.in.Addr("allowed.test"), 0)
	direct := func(scheme string) *http.Client {
		port := uint16(80)
		if scheme == "https" {
			port = 443
		}
		var d net.Dialer
		return &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "tcp4", netip.AddrPortFrom(server.Addr(), port).String())
			},
			TLSClientConfig:   &tls.Config{RootCAs: e.in.CertPool},
			DisableKeepAlives: true, DisableCompression: true,
		}}
	}
	proxied := func() *http.Client {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(pod)}}
		return &http.Client{Transport: &http.Transport{
			Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: e.proxy}),
			DialContext:       d.DialContext,
			TLSClientConfig:   &tls.Config{RootCAs: e.in.CertPool},
			DisableKeepAlives: true, DisableCompression: true,
		}}
	}
	for _, scheme := range []string{"http", "https"} {
		b.Run(scheme, func(b *testing.B) {
			paths := [2]*http.Client{direct(scheme), proxied()}
			var wall, cpu [2]time.Duration
			for i := 0; i < b.N; i++ {
				for j := range 2 {
					p := (i + j) % 2
					c0, t0 := cpuTime(b), time.Now()
					resp, err := paths[p].Get(scheme + "://allowed.test/big")
					if err != nil {
						b.Fatal(err)
					}
					k, err := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil || k != egresstest.BigSize {
						b.Fatalf("%d bytes, %v", k, err)
					}
					wall[p] += time.Since(t0)
					cpu[p] += cpuTime(b) - c0
				}
			}
			mbs := func(d time.Duration) float64 { return float64(b.N) * egresstest.BigSize / d.Seconds() / 1e6 }
			b.ReportMetric(mbs(wall[0]), "direct-MB/s")
			b.ReportMetric(mbs(wall[1]), "proxy-MB/s")
			b.ReportMetric(wall[0].Seconds()/wall[1].Seconds(), "ratio")
			b.ReportMetric(cpu[1].Seconds()/cpu[0].Seconds(), "cpu-ratio")
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
