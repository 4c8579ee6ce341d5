package sandboxtest

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/egress/egresstest"
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

func (p *policies) get(_ context.Context, name string) (*egress.Policy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[name], nil
}

// OpenNetwork starts a manager for runtime rt (Debian image) whose egress
// engine reaches in's hosts; set gives a sandbox name its allowlist.
func OpenNetwork(t *testing.T, rt string, in *egresstest.Internet) (*sandbox.Manager, *egress.Engine, func(name string, domains ...string)) {
	t.Helper()
	Skip(t, rt, "default")
	cfg := in.Config()
	e, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := Open(t, rt, "default", func(c *sandbox.Config) { c.Egress = e; c.Limits.MemoryBytes = 512 << 20; c.HomeBytes = 64 << 20 })
	p := &policies{m: map[string]*egress.Policy{}}
	m.SetNetwork(p.get)
	return m, e, p.set
}

// sh runs one command (30 s timeout) and returns its output and exit code.
func sh(t *testing.T, m *sandbox.Manager, name, cmd string) (string, int) {
	t.Helper()
	o := Shell(t, m, name, tool.ShellArgs{Commands: []string{cmd}, TimeoutMs: i64(30000)})[0]
	return o.Stdout + o.Stderr, exitCode(o)
}

// NetworkSuite runs the egress cases in real sandboxes of runtime rt.
func NetworkSuite(t *testing.T, rt string) {
	in := egresstest.New(t)
	m, e, set := OpenNetwork(t, rt, in)
	const box = "net"
	set(box, "allowed.test", "*.api.allowed.test")
	ip := func(name string) string { return in.Addr(name).String() }
	ca := fmt.Sprintf("cat > ca.pem <<'EOF'\n%sEOF\n", in.CertPEM)
	curl := "curl -sS --max-time 20 --cacert ca.pem "

	t.Run("01 allowed host over HTTP and HTTPS", func(t *testing.T) {
		out, code := sh(t, m, box, ca+curl+"http://allowed.test/ && "+curl+"https://allowed.test/")
		want := egresstest.Reply("allowed.test", "allowed.test", "") + egresstest.Reply("allowed.test", "allowed.test", "allowed.test")
		if code != 0 || out != want {
			t.Fatalf("exit %d: %q", code, out)
		}
	})
	_ = e
	_ = ip
	_ = time.Now
	_ = strings.Contains
	_ = netip.Addr{}
	_ = netlink.LinkList
}
