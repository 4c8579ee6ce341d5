package egress_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/egress/egresstest"
	"github.com/shellgate/shellgate/testenv"
)

// benchEnv is one internet and one sandbox network allowed to reach it.
func benchEnv(b *testing.B) (*egresstest.Internet, *egress.Engine, *egress.Net) {
	testenv.NeedRoot(b, "network namespaces")
	in := egresstest.New(b)
	e, err := egress.New(in.Config())
	if err != nil {
		b.Fatal(err)
	}
	n, err := e.Start(context.Background(), "bench", egress.Policy{Type: egress.Allowlist, AllowedDomains: []string{"allowed.test"}}, "", egress.Link{BigTCP: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	return in, e, n
}

// client makes HTTP connections from the host (ns "") or from inside the
// sandbox's namespace, always to addr, without keep-alive.
func client(ns, addr string) *http.Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		if ns == "" {
			var d net.Dialer
			return d.DialContext(ctx, "tcp4", addr)
		}
		var c net.Conn
		err := egress.InNS(ns, func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, "tcp4", addr)
			return err
		})
		return c, err
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true, DisableCompression: true}}
}

// BenchmarkDownload fetches 100 MB over HTTP from the host's namespace
// (direct) and through a sandbox's egress proxy, one after the other in
// every iteration (in alternating order, so that the shared machine's load
// falls on both alike). It reports each path's throughput, the ratio
// proxy/direct, and the ratio of the CPU time this process spent on each
// (cpu-ratio; the server, the proxy and both clients are all in it).
func BenchmarkDownload(b *testing.B) {
	in, _, n := benchEnv(b)
	egresstest.CompareDownloads(b, "http://allowed.test/big",
		client("", netip.AddrPortFrom(in.Addr("allowed.test"), 80).String()),
		client(n.NetNS(), netip.AddrPortFrom(n.HostAddr(), 80).String()))
}

// BenchmarkConnect is one new connection and a small request, directly and
// through the proxy; it reports the median (p50-ms) too.
func BenchmarkConnect(b *testing.B) {
	in, _, n := benchEnv(b)
	for _, c := range []struct {
		name string
		cl   *http.Client
	}{
		{"direct", client("", netip.AddrPortFrom(in.Addr("allowed.test"), 80).String())},
		{"proxy", client(n.NetNS(), netip.AddrPortFrom(n.HostAddr(), 80).String())},
	} {
		b.Run(c.name, func(b *testing.B) {
			ds := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				resp, err := c.cl.Get("http://allowed.test/")
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ds = append(ds, time.Since(t0))
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
		})
	}
}

// BenchmarkNetworkSetup is one sandbox network's Start (slot, veth,
// rules, endpoint) and Close; it reports Start's median (start-p50-ms).
func BenchmarkNetworkSetup(b *testing.B) {
	testenv.NeedRoot(b, "network namespaces")
	e, err := egress.New(egress.Config{})
	if err != nil {
		b.Fatal(err)
	}
	pol := egress.Policy{Type: egress.Allowlist, AllowedDomains: []string{"allowed.test"}}
	ds := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		n, err := e.Start(context.Background(), fmt.Sprint("b", i), pol, "", egress.Link{BigTCP: true})
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		if err := n.Close(); err != nil {
			b.Fatal(err)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "start-p50-ms")
}
