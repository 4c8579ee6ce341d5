package kubeproxy_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"testing"

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
			egresstest.CompareDownloads(b, scheme+"://allowed.test/big", direct(scheme), proxied())
		})
	}
}
