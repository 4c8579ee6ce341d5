package egress_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/egress/egresstest"
	"github.com/shellgate/shellgate/testenv"
)

// records collects what the engine reports.
type records struct {
	mu   sync.Mutex
	list []egress.Record
}

func (r *records) add(x egress.Record) {
	r.mu.Lock()
	r.list = append(r.list, x)
	r.mu.Unlock()
}

// count counts the records of host with verdict; r.mu is held.
func (r *records) count(host, verdict string) int {
	n := 0
	for _, x := range r.list {
		if x.Host == host && x.Verdict == verdict {
			n++
		}
	}
	return n
}

// await waits up to 5 s for at least n records of host with verdict: a
// connection is reported when its handler returns, which is after the
// client has seen the reset or the last byte.
func (r *records) await(host, verdict string, n int) bool {
	return r.until(func() bool { return r.count(host, verdict) >= n })
}

// until polls ok, under the lock, for up to 5 s.
func (r *records) until(ok func() bool) bool {
	return testenv.Eventually(5*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return ok()
	})
}

// String lists the records, under the lock (handlers may still report).
func (r *records) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("%+v", r.list)
}

func newEngine(t *testing.T, in *egresstest.Internet, firewall string) (*egress.Engine, *records) {
	t.Helper()
	testenv.NeedRoot(t, "network namespaces and firewall rules")
	rec := &records{}
	cfg := in.Config()
	cfg.Firewall = firewall
	cfg.OnConn = rec.add
	e, err := egress.New(cfg)
	if err != nil {
		testenv.Missing(t, "egress engine: %v", err)
	}
	return e, rec
}

func start(t *testing.T, e *egress.Engine, domains ...string) *egress.Net {
	t.Helper()
	n, err := e.Start(context.Background(), "t-"+t.Name(), egress.Policy{Type: egress.Allowlist, AllowedDomains: domains}, "", egress.Link{BigTCP: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// dialIn connects from inside the sandbox's namespace.
func dialIn(n *egress.Net, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := egress.InNS(n.NetNS(), func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err = d.Dial(network, addr)
		return err
	})
	return c, err
}

// get sends one HTTP/1.1 request over a connection made inside the
// sandbox to addr (host:port), with the given Host header; sni non-empty
// makes it TLS with that server name ("-" for TLS without one).
func get(n *egress.Net, in *egresstest.Internet, addr, hostHdr, sni string) (string, error) {
	c, err := dialIn(n, "tcp4", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if sni != "" {
		cfg := &tls.Config{RootCAs: in.CertPool, ServerName: sni}
		if sni == "-" {
			cfg = &tls.Config{InsecureSkipVerify: true}
		}
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			return "", err
		}
		c = tc
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hostHdr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// lookup asks the sandbox's resolver (or server, host:53) for name's A
// record from inside the sandbox.
func lookup(t *testing.T, n *egress.Net, server, network, name string) (*dns.Msg, error) {
	c, err := dialIn(n, network, server)
	if err != nil {
		return nil, err
	}
	dc := &dns.Conn{Conn: c}
	defer dc.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	if err := dc.WriteMsg(q); err != nil {
		return nil, err
	}
	return dc.ReadMsg()
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func TestPolicyEnforcement(t *testing.T) {
	for _, fw := range []string{"nftables", "iptables"} {
		t.Run(fw, func(t *testing.T) { testEnforcement(t, fw) })
	}
}

func testEnforcement(t *testing.T, firewall string) {
	testenv.NeedRoot(t, "network namespaces")
	in := egresstest.New(t)
	e, rec := newEngine(t, in, firewall)
	if e.Firewall() != firewall {
		t.Fatalf("firewall %s, want %s", e.Firewall(), firewall)
	}
	n := start(t, e, "allowed.test", "*.api.allowed.test", "API.Allowed.Test.")
	H := n.HostAddr().String()
	inet := func(name string, port int) string { return netip.AddrPortFrom(in.Addr(name), uint16(port)).String() }
	dnsH := H + ":53"

	t.Run("01 allowed over HTTP by name", func(t *testing.T) {
		m, err := lookup(t, n, dnsH, "udp4", "allowed.test")
		if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != H {
			t.Fatalf("lookup: %v %v", m, err)
		}
		body, err := get(n, in, H+":80", "allowed.test", "")
		if err != nil || body != egresstest.Reply("allowed.test", "allowed.test", "") {
			t.Fatalf("got %q, %v", body, err)
		}
	})
	t.Run("02 allowed over HTTPS, certificate verified", func(t *testing.T) {
		body, err := get(n, in, H+":443", "allowed.test", "allowed.test")
		if err != nil || body != egresstest.Reply("allowed.test", "allowed.test", "allowed.test") {
			t.Fatalf("got %q, %v", body, err)
		}
	})
	t.Run("03 denied host is reset, reaches nothing", func(t *testing.T) {
		before := in.Hits("other.test", 80) + in.Hits("other.test", 443)
		if _, err := get(n, in, H+":80", "other.test", ""); !isReset(err) {
			t.Fatalf("HTTP: %v, want a reset", err)
		}
		if _, err := get(n, in, H+":443", "other.test", "other.test"); !isReset(err) {
			t.Fatalf("HTTPS: %v, want a reset", err)
		}
		if after := in.Hits("other.test", 80) + in.Hits("other.test", 443); after != before {
			t.Fatalf("other.test got %d requests", after-before)
		}
		if !rec.await("other.test", egress.Denied, 2) {
			t.Fatalf("denials not recorded: %s", rec)
		}
	})
	t.Run("04 glob vs apex vs exact, case and trailing dot", func(t *testing.T) {
		for _, c := range []struct {
			host string
			ok   bool
		}{
			{"api.allowed.test", true},       // exact (listed in another case)
			{"deep.api.allowed.test", true},  // under *.api.allowed.test
			{"DEEP.API.allowed.test.", true}, // case, trailing dot
			{"evil.test", false},             // unlisted
			{"xallowed.test", false},         // suffix, not a subdomain
			{"sub.allowed.test", false},      // allowed.test is exact, not a glob
		} {
			_, err := get(n, in, H+":443", c.host, strings.TrimSuffix(strings.ToLower(c.host), "."))
			if c.ok && err != nil && !strings.Contains(err.Error(), "certificate") {
				t.Errorf("%s: %v, want allowed", c.host, err)
			}
			if !c.ok && !isReset(err) {
				t.Errorf("%s: %v, want a reset", c.host, err)
			}
		}
	})
	t.Run("05 port 8080 refused promptly, here and on the internet", func(t *testing.T) {
		for _, addr := range []string{H + ":8080", inet("allowed.test", 8080), "192.0.2.1:22"} {
			t0 := time.Now()
			c, err := dialIn(n, "tcp4", addr)
			if err == nil {
				c.Close()
				t.Fatalf("%s: connected", addr)
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("%s: %v, want connection refused (after %v)", addr, err, time.Since(t0))
			}
		}
		if in.Hits("allowed.test", 8080) != 0 {
			t.Fatal("port 8080 was reached")
		}
	})
	t.Run("06 an address spoofed in /etc/hosts goes where the name resolves", func(t *testing.T) {
		// /etc/hosts saying "allowed.test = evil.test's address" makes the
		// client connect there; the connection still goes to allowed.test.
		body, err := get(n, in, inet("evil.test", 80), "allowed.test", "")
		if err != nil || !strings.HasPrefix(body, "server=allowed.test") {
			t.Fatalf("got %q, %v", body, err)
		}
		if _, err := get(n, in, inet("evil.test", 80), "evil.test", ""); !isReset(err) {
			t.Fatalf("evil.test at its own address: %v", err)
		}
		if in.Hits("evil.test", 80) != 0 {
			t.Fatal("evil.test was reached")
		}
	})
	t.Run("07 HTTPS to an IP without a server name, HTTP with an IP Host", func(t *testing.T) {
		if _, err := get(n, in, inet("allowed.test", 443), "allowed.test", "-"); err == nil {
			t.Fatal("TLS without SNI got through")
		}
		if _, err := get(n, in, inet("allowed.test", 80), in.Addr("allowed.test").String(), ""); !isReset(err) {
			t.Fatalf("IP literal Host: %v", err)
		}
	})
	t.Run("08 domain fronting: the server name decides", func(t *testing.T) {
		before := in.Hits("evil.test", 443)
		body, err := get(n, in, H+":443", "evil.test", "allowed.test")
		if err != nil || !strings.HasPrefix(body, "server=allowed.test") {
			t.Fatalf("SNI allowed, Host evil: %q %v", body, err)
		}
		if _, err := get(n, in, H+":443", "allowed.test", "evil.test"); err == nil {
			t.Fatal("SNI evil, Host allowed got through")
		}
		if in.Hits("evil.test", 443) != before {
			t.Fatal("evil.test was reached")
		}
	})
	t.Run("09 IPv6 unreachable", func(t *testing.T) {
		for _, addr := range []string{"[2001:db8::1]:443", "[fd00:ec2::254]:80", "[::1]:80"} {
			if c, err := dialIn(n, "tcp6", addr); err == nil {
				c.Close()
				t.Fatalf("%s: connected", addr)
			}
		}
	})
	t.Run("10 UDP 443 (QUIC) refused, nothing leaves", func(t *testing.T) {
		for _, addr := range []string{inet("allowed.test", 443), H + ":443"} {
			c, err := dialIn(n, "udp4", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(3 * time.Second))
			c.Write([]byte("quic initial"))
			_, err = c.Read(make([]byte, 100))
			c.Close()
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("%s: %v, want connection refused (ICMP port unreachable)", addr, err)
			}
		}
		if in.UDPPackets() != 0 {
			t.Fatalf("%d UDP packets reached the internet", in.UDPPackets())
		}
	})
	t.Run("11 DNS: outside names NXDOMAIN, nothing forwarded", func(t *testing.T) {
		for _, server := range []string{dnsH, netip.AddrPortFrom(in.DNS, 53).String(), "8.8.8.8:53"} {
			for _, network := range []string{"udp4", "tcp4"} {
				for _, name := range []string{"other.test", "c2VjcmV0.evil.test", "allowed.test.evil.test"} {
					m, err := lookup(t, n, server, network, name)
					if err != nil || m.Rcode != dns.RcodeNameError || len(m.Answer) != 0 {
						t.Fatalf("%s %s %s: %v %v", server, network, name, m, err)
					}
				}
			}
		}
		if in.DNSQueries() != 0 {
			t.Fatalf("%d DNS packets reached the internet", in.DNSQueries())
		}
	})
	t.Run("12 metadata, private and loopback refused even when the name is allowed", func(t *testing.T) {
		star := start(t, e, "*")
		SH := star.HostAddr().String()
		for _, name := range []string{"meta.test", "meta6.test", "private.test", "self.test"} {
			if _, err := get(star, in, SH+":80", name, ""); !isReset(err) {
				t.Fatalf("%s: %v, want a reset", name, err)
			}
		}
		for _, ip := range []string{"169.254.169.254", "10.0.0.1"} {
			if _, err := get(star, in, ip+":80", ip, ""); !isReset(err) {
				t.Fatalf("%s: %v, want a reset", ip, err)
			}
		}
		// "*" does allow any name that resolves to a public (here: the
		// test's allowed) address.
		if body, err := get(star, in, SH+":443", "other.test", "other.test"); err != nil || !strings.HasPrefix(body, "server=other.test") {
			t.Fatalf("* other.test: %q %v", body, err)
		}
	})
	t.Run("13 another sandbox and the host's own services unreachable", func(t *testing.T) {
		other := start(t, e, "allowed.test")
		// A host service on every address (like the API port).
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("host service\n"))
				c.Close()
			}
		}()
		p := l.Addr().(*net.TCPAddr).Port
		for _, addr := range []string{
			netip.AddrPortFrom(other.Addr(), 8000).String(),
			netip.AddrPortFrom(other.HostAddr(), uint16(p)).String(),
			fmt.Sprintf("%s:%d", H, p),
			fmt.Sprintf("127.0.0.1:%d", p),
			netip.AddrPortFrom(in.Prefix.Addr().Next(), uint16(p)).String(), // the internet's host end
		} {
			c, err := dialIn(n, "tcp4", addr)
			if err == nil {
				b, _ := io.ReadAll(c)
				c.Close()
				if len(b) > 0 {
					t.Fatalf("%s: reached %q", addr, b)
				}
				t.Fatalf("%s: connected", addr)
			}
		}
		// The endpoint of a sandbox serves that sandbox only: not the
		// others, not other interfaces of the host (here: the internet's).
		hp, tp, dp := other.Ports()
		for _, p := range []uint16{hp, tp, dp} {
			ap := netip.AddrPortFrom(other.HostAddr(), p).String()
			if c, err := dialIn(n, "tcp4", ap); err == nil {
				c.Close()
				t.Fatalf("%s reached another sandbox's endpoint", ap)
			}
			err := egress.InNS(in.NS, func() error {
				c, err := net.DialTimeout("tcp4", ap, time.Second)
				if err == nil {
					c.Close()
					return fmt.Errorf("the internet reached %s", ap)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		// Port 80 of the other sandbox is this sandbox's own proxy.
		if _, err := get(n, in, netip.AddrPortFrom(other.Addr(), 80).String(), other.Addr().String(), ""); !isReset(err) {
			t.Fatalf("other sandbox's port 80: %v", err)
		}
	})
	t.Run("14 CONNECT under the same rules", func(t *testing.T) {
		connect := func(target, sni string) (string, error) {
			c, err := dialIn(n, "tcp4", H+":80")
			if err != nil {
				return "", err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
			if err != nil {
				return "", err
			}
			if resp.StatusCode != 200 {
				return "", fmt.Errorf("status %d", resp.StatusCode)
			}
			tc := tls.Client(c, &tls.Config{RootCAs: in.CertPool, ServerName: sni})
			fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
			r2, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				return "", err
			}
			b, err := io.ReadAll(r2.Body)
			return string(b), err
		}
		if body, err := connect("allowed.test:443", "allowed.test"); err != nil || !strings.HasPrefix(body, "server=allowed.test") {
			t.Fatalf("CONNECT allowed: %q %v", body, err)
		}
		if _, err := connect("evil.test:443", "evil.test"); err == nil || !strings.Contains(err.Error(), "403") {
			t.Fatalf("CONNECT evil: %v, want 403", err)
		}
		if _, err := connect("allowed.test:8080", "allowed.test"); err == nil || !strings.Contains(err.Error(), "403") {
			t.Fatalf("CONNECT port 8080: %v, want 403", err)
		}
		if _, err := connect("allowed.test:443", "evil.test"); err == nil {
			t.Fatal("CONNECT allowed with SNI evil got through")
		}
		// Absolute-form (HTTP_PROXY) requests.
		c, err := dialIn(n, "tcp4", H+":80")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		if !strings.HasPrefix(string(b), "server=allowed.test") {
			t.Fatalf("absolute-form: %q", b)
		}
	})
	t.Run("15 hostile heads are refused, never hang", func(t *testing.T) {
		for _, head := range []string{
			"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00", // truncated ClientHello
			"GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: evil.test\r\n\r\n",
			"GET / HTTP/1.1\r\n\r\n",
			strings.Repeat("A", 70<<10),
			"SSH-2.0-OpenSSH\r\n\r\n",
		} {
			for _, port := range []string{":80", ":443"} {
				c, err := dialIn(n, "tcp4", H+port)
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(15 * time.Second))
				c.Write([]byte(head))
				b, err := io.ReadAll(c)
				c.Close()
				if err == nil && len(b) > 0 || err != nil && !isReset(err) {
					t.Fatalf("%q on %s: %q %v", head[:min(len(head), 30)], port, b, err)
				}
			}
		}
	})
	t.Run("16 bytes arrive intact both ways", func(t *testing.T) {
		// Uploads and downloads larger than any buffer on the way, over
		// HTTP and HTTPS: the veth carries BIG TCP packets through the
		// firewall's rules both ways.
		for _, c := range []struct{ addr, scheme string }{{H + ":80", "http"}, {H + ":443", "https"}} {
			cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
				DisableKeepAlives: true, DisableCompression: true, TLSClientConfig: &tls.Config{RootCAs: in.CertPool},
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dialIn(n, "tcp4", c.addr) },
			}}
			resp, err := cl.Get(c.scheme + "://allowed.test/blob")
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, egresstest.Blob()) {
				t.Fatalf("%s download: %d of %d bytes, equal %v, %v", c.scheme, len(got), egresstest.BlobSize, bytes.Equal(got, egresstest.Blob()), err)
			}
			resp, err = cl.Post(c.scheme+"://allowed.test/sink", "application/octet-stream", bytes.NewReader(egresstest.Blob()))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			sum := sha256.Sum256(egresstest.Blob())
			if want := egresstest.SinkReply(egresstest.BlobSize, sum[:]); err != nil || string(b) != want {
				t.Fatalf("%s upload: server got %q, want %q (%v)", c.scheme, b, want, err)
			}
		}
	})
	t.Run("17 recorded and counted", func(t *testing.T) {
		if !rec.await("allowed.test", egress.Allowed, 1) || !rec.await("evil.test", egress.Denied, 1) {
			t.Fatalf("records: %s", rec)
		}
		var sent, recv int64
		if !rec.until(func() bool {
			sent, recv = 0, 0
			for _, r := range rec.list {
				if r.Host == "allowed.test" && r.Verdict == egress.Allowed {
					sent += r.Sent
					recv += r.Received
				}
			}
			return sent >= 2*egresstest.BlobSize && recv >= 2*egresstest.BlobSize
		}) {
			t.Fatalf("bytes not counted: sent %d received %d", sent, recv)
		}
	})
}

// TestCleanup: Close leaves nothing, many cycles leave nothing, and what a
// killed process left is removed by the next Sweep.
func TestCleanup(t *testing.T) {
	in := egresstest.New(t)
	e, _ := newEngine(t, in, "")
	if err := e.Sweep(); err != nil {
		t.Fatal(err)
	}
	cycles := 200
	if testing.Short() {
		cycles = 20
	}
	var total time.Duration
	for i := 0; i < cycles; i++ {
		t0 := time.Now()
		n, err := e.Start(context.Background(), "cycle", egress.Policy{Type: egress.Allowlist, AllowedDomains: []string{"allowed.test"}}, "", egress.Link{BigTCP: true})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		total += time.Since(t0)
		if i%50 == 0 {
			if body, err := get(n, in, n.HostAddr().String()+":80", "allowed.test", ""); err != nil || body == "" {
				t.Fatalf("cycle %d: %q %v", i, body, err)
			}
		}
		if err := n.Close(); err != nil {
			t.Fatalf("cycle %d: close: %v", i, err)
		}
	}
	t.Logf("%d cycles, network setup %v on average", cycles, total/time.Duration(cycles))
	if left := e.Leftovers(); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}

	// A process killed with its network up.
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "EGRESS_CRASH_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "up ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	left := e.Leftovers()
	if len(left) < 3 {
		t.Fatalf("a killed process left %v; expected its veth, rules and namespace", left)
	}
	if err := e.Sweep(); err != nil {
		t.Fatal(err)
	}
	if left := e.Leftovers(); len(left) > 0 {
		t.Fatalf("after Sweep: %v", left)
	}
}

// crashHelper is the process TestCleanup kills (TestMain runs it instead
// of the tests when EGRESS_CRASH_HELPER is set).
func crashHelper() {
	e, err := egress.New(egress.Config{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	n, err := e.Start(context.Background(), "crash", egress.Policy{Type: egress.Allowlist, AllowedDomains: []string{"x.test"}}, "", egress.Link{BigTCP: true})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Printf("up %d\n", n.Slot())
	time.Sleep(time.Minute)
	os.Exit(0)
}

func TestMain(m *testing.M) {
	if os.Getenv("EGRESS_CRASH_HELPER") == "1" {
		crashHelper()
	}
	testenv.RunCheckingLeaks(m, 5*time.Second, nil)
}
