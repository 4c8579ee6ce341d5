package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/flock"
)

// Config configures an Engine. Zero fields take the defaults.
type Config struct {
	// Pool is the private range sandboxes' /30s come from; default
	// 10.237.0.0/16 (16,384 sandboxes). It must not overlap a network the
	// host uses.
	Pool netip.Prefix
	// Hosts maps hostnames to the addresses the proxy connects to instead
	// of asking the host's resolver (for tests; names are normalized).
	Hosts map[string][]netip.Addr
	// AllowPrivate lists ranges that are reachable although private,
	// loopback or link-local (for tests: the test's own "internet").
	// Metadata addresses and the pool are refused whatever it says.
	AllowPrivate []netip.Prefix
	// Firewall forces "nftables" or "iptables"; empty picks nftables when
	// the kernel has it.
	Firewall string
	// DialTimeout bounds connecting to an upstream; default 10 s.
	DialTimeout time.Duration
	// OnConn, if set, sees every connection when it ends (or is refused).
	OnConn func(Record)
	Logger *slog.Logger
}

// Record is one connection (or DNS question) of a sandbox.
type Record struct {
	// Sandbox is the id Start was given.
	Sandbox string
	// Kind is "http", "tls", "connect" or "dns".
	Kind string
	// Host is the name the sandbox presented (TLS server name, Host
	// header, CONNECT authority, DNS question); empty when it gave none.
	Host string
	Port int
	// Verdict is "allowed", "denied" (by the policy or the address rules)
	// or "failed" (allowed, but resolving or connecting failed).
	Verdict string
	Reason  string
	// Sent and Received count bytes from and to the sandbox.
	Sent, Received int64
	// Upstream is the address connected to, if any.
	Upstream string
	Start    time.Time
	Duration time.Duration
}

// Verdicts.
const (
	Allowed = "allowed"
	Denied  = "denied"
	Failed  = "failed"
)

// Engine gives sandboxes their networks: slots, veths, firewall rules and
// the egress endpoint. One per process; safe for concurrent use.
type Engine struct {
	cfg Config
	fw  firewall
	reporter
	upstream
	mu   sync.Mutex
	nets map[*Net]struct{}
}

// New checks that the host can enforce policies (root, a firewall) and
// returns an engine. Call Sweep once at start to remove what a crashed
// process left.
func New(cfg Config) (*Engine, error) {
	if !cfg.Pool.IsValid() {
		cfg.Pool = netip.MustParsePrefix("10.237.0.0/16")
	}
	if !cfg.Pool.Addr().Is4() || cfg.Pool.Bits() > 28 {
		return nil, fmt.Errorf("egress: pool %s: want an IPv4 range of /28 or larger", cfg.Pool)
	}
	cfg.Pool = cfg.Pool.Masked()
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if unix.Geteuid() != 0 {
		return nil, errors.New("egress: sandbox networks need root")
	}
	fw, err := newFirewall(cfg.Firewall)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, fw: fw, nets: map[*Net]struct{}{},
		reporter: reporter{metrics: newMetrics(), log: cfg.Logger, onConn: cfg.OnConn},
		upstream: newUpstream(cfg.Hosts, cfg.AllowPrivate, cfg.Pool, cfg.DialTimeout)}
	return e, nil
}

// Firewall names the firewall in use ("nftables" or "iptables").
func (e *Engine) Firewall() string { return e.fw.name() }

// Pool is the range sandboxes' addresses come from.
func (e *Engine) Pool() netip.Prefix { return e.cfg.Pool }

// Net is one sandbox's network: its slot, veth, rules and endpoint.
type Net struct {
	e       *Engine
	id      atomic.Pointer[string] // Record.Sandbox
	policy  Policy
	slot    *flock.Slot
	host    netip.Addr
	sandbox netip.Addr
	// ownNS is the namespace pin the engine made (Start without one).
	ownNS  string
	nsPath string

	ports [3]uint16 // http, tls, dns
	lns   []net.Listener
	dns   *dnsServer
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// ctx ends when the network closes: lookups and dials in flight stop.
	ctx     context.Context
	cancel  context.CancelFunc
	closed  bool
	handler handler
}

// Link describes what reads the sandbox's end of its veth.
type Link struct {
	// BigTCP is for a sandbox whose end is the Linux kernel's own stack
	// (crun, runc): the veth then carries TCP super-packets of up to
	// 512 KiB (BIG TCP, Linux 6.3+; ignored before) both ways, a quarter to
	// an eighth of the packets, which is most of what the proxy costs.
	// Leave it off when a user-space stack reads the end: gVisor's netstack
	// (runsc --network=sandbox) takes frames of at most 64 KiB and would
	// drop larger ones.
	BigTCP bool
}

// Start gives sandbox id a network under policy (which must be an
// allowlist): a slot, a veth whose peer (eth0) goes into the network
// namespace pinned at nsPath — or one Start makes and pins itself when
// nsPath is empty —, the firewall rules and the endpoint. The sandbox's
// container must run in that namespace (NetNS) and use ResolvConf.
func (e *Engine) Start(ctx context.Context, id string, policy Policy, nsPath string, link Link) (n *Net, err error) {
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	if !policy.Enabled() {
		return nil, errors.New("egress: Start needs an allowlist policy")
	}
	s, err := e.acquireSlot()
	if err != nil {
		return nil, err
	}
	n = &Net{e: e, policy: policy, slot: s, nsPath: nsPath, conns: map[net.Conn]struct{}{}}
	n.SetID(id)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.handler = handler{ctx: n.ctx, owner: n, up: &e.upstream, report: e.report}
	n.host, n.sandbox = addrs(e.cfg.Pool, s.N)
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("egress: network of %s: %w", id, err), n.Close())
			n = nil
		}
	}()
	if nsPath == "" {
		n.ownNS = filepath.Join(NSDir, strconv.Itoa(s.N))
		n.nsPath = n.ownNS
		if err := NewNetNS(n.ownNS); err != nil {
			return n, err
		}
	}
	if err := e.setupVeth(s, n.nsPath, n.host, n.sandbox, link); err != nil {
		return n, err
	}
	var lc net.ListenConfig
	listen := func() (net.Listener, uint16, error) {
		l, err := lc.Listen(ctx, "tcp4", netip.AddrPortFrom(n.host, 0).String())
		if err != nil {
			return nil, 0, err
		}
		n.lns = append(n.lns, l)
		return l, uint16(l.Addr().(*net.TCPAddr).Port), nil
	}
	httpL, httpPort, err := listen()
	if err != nil {
		return n, err
	}
	tlsL, tlsPort, err := listen()
	if err != nil {
		return n, err
	}
	if n.dns, err = e.startDNS(ctx, n); err != nil {
		return n, err
	}
	if err := e.fw.install(rules{slot: s.N, iface: ifaceName(s.N), host: n.host, sandbox: n.sandbox,
		httpPort: httpPort, tlsPort: tlsPort, dnsPort: n.dns.port}); err != nil {
		return n, err
	}
	n.ports = [3]uint16{httpPort, tlsPort, n.dns.port}
	n.serve(httpL, kindHTTP)
	n.serve(tlsL, kindTLS)
	e.mu.Lock()
	e.nets[n] = struct{}{}
	e.mu.Unlock()
	return n, nil
}

// SetID changes the id the network's records carry (Record.Sandbox), for
// an owner that learns the sandbox's name after Start.
func (n *Net) SetID(id string) { n.id.Store(&id) }

// ID is the id the network's records carry.
func (n *Net) ID() string { return *n.id.Load() }

// NetNS is the pinned network namespace the sandbox's container joins.
func (n *Net) NetNS() string { return n.nsPath }

// Addr is the sandbox's own address; HostAddr is the host end's (its DNS
// server and default gateway).
func (n *Net) Addr() netip.Addr     { return n.sandbox }
func (n *Net) HostAddr() netip.Addr { return n.host }

// Ports are the endpoint's ports on HostAddr (HTTP, TLS, DNS), where the
// firewall redirects the sandbox's 80, 443 and 53.
func (n *Net) Ports() (http, tls, dns uint16) { return n.ports[0], n.ports[1], n.ports[2] }

// Slot is the slot number: the veth is sgeN.
func (n *Net) Slot() int { return n.slot.N }

// Policy is the policy the network enforces.
func (n *Net) Policy() Policy { return n.policy }

// ResolvConf is the sandbox's /etc/resolv.conf: the host end answers.
func (n *Net) ResolvConf() []byte {
	return []byte("nameserver " + n.host.String() + "\noptions ndots:1 timeout:2 attempts:2\n")
}

// Close stops the endpoint (closing every connection of the sandbox) and
// removes the veth, the rules and a namespace Start made. It is safe to
// call twice; the slot is freed only once everything is gone.
func (n *Net) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.cancel()
	for _, l := range n.lns {
		l.Close()
	}
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	if n.dns != nil {
		n.dns.close()
	}
	n.wg.Wait()
	n.e.mu.Lock()
	delete(n.e.nets, n)
	n.e.mu.Unlock()
	err := n.e.teardownSlot(n.slot.N, n.ownNS)
	if err == nil {
		n.slot.Release()
	} else {
		n.slot.Abandon() // the next owner of the slot cleans it
	}
	return err
}

// track registers a connection to close with the network; false once the
// network is closing.
func (n *Net) track(c net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.conns[c] = struct{}{}
	return true
}

// client: every connection of the network is its sandbox's.
func (n *Net) client(net.Conn) (string, Policy, error) {
	n.mu.Lock()
	busy := len(n.conns) > maxConns
	n.mu.Unlock()
	if busy {
		return n.ID(), n.policy, errBusy
	}
	return n.ID(), n.policy, nil
}

func (n *Net) untrack(c net.Conn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

// Sweep removes the networks of slots no live process holds: veths,
// firewall rules and pinned namespaces a crashed process left. Slots of
// live processes (this one's included) are never touched.
func (e *Engine) Sweep() error {
	cand := map[int]bool{}
	for _, n := range strayLinks() {
		cand[n] = true
	}
	for _, n := range strayPins() {
		cand[n] = true
	}
	if ns, err := e.fw.slots(); err == nil {
		for _, n := range ns {
			cand[n] = true
		}
	}
	if es, err := readDirNames(SlotsDir); err == nil {
		for _, name := range es {
			if n, err := strconv.Atoi(name); err == nil {
				cand[n] = true
			}
		}
	}
	var errs []error
	for n := range cand {
		f, err := flock.TryLock(filepath.Join(SlotsDir, strconv.Itoa(n)))
		if err != nil {
			continue // held by a live sandbox (or no slots dir yet)
		}
		if err := e.teardownSlot(n, ""); err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", n, err))
			flock.Unlock(f)
			continue
		}
		f.Truncate(0)
		flock.Unlock(f)
	}
	return errors.Join(errs...)
}

// Leftovers lists what exists on the host for slots no live process holds
// (what Sweep would remove): for tests and doctor.
func (e *Engine) Leftovers() []string {
	var out []string
	held := func(n int) bool {
		f, err := flock.TryLock(filepath.Join(SlotsDir, strconv.Itoa(n)))
		if err != nil {
			return true
		}
		flock.Unlock(f)
		return false
	}
	for _, n := range strayLinks() {
		if !held(n) {
			out = append(out, "veth "+ifaceName(n))
		}
	}
	if ns, err := e.fw.slots(); err == nil {
		for _, n := range ns {
			if !held(n) {
				out = append(out, e.fw.name()+" rules of slot "+strconv.Itoa(n))
			}
		}
	}
	for _, n := range strayPins() {
		if !held(n) {
			out = append(out, "netns pin "+filepath.Join(NSDir, strconv.Itoa(n)))
		}
	}
	return out
}
