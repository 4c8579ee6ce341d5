package egress

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ExplicitConfig configures an Explicit proxy. Zero fields take the
// defaults.
type ExplicitConfig struct {
	// Client says which sandbox a source address is and its policy; an
	// error refuses the connection (403) with the error's text. It is
	// asked once per connection, so a changed policy applies from the
	// next connection on. Required.
	Client func(src netip.Addr) (id string, p Policy, err error)
	// MaxConns caps connections in flight in all (default 16384);
	// MaxConnsPerClient caps one source address's (default 512, as a
	// local sandbox's).
	MaxConns, MaxConnsPerClient int
	// DialTimeout bounds resolving and connecting to an upstream; default
	// 10 s.
	DialTimeout time.Duration
	// Hosts and AllowPrivate are Config's, for tests only: fixed
	// addresses for names, and private or loopback ranges that may be
	// reached (a test's own "internet" on loopback).
	Hosts        map[string][]netip.Addr
	AllowPrivate []netip.Prefix
	// OnConn, if set, sees every connection when it ends (or is refused).
	OnConn func(Record)
	Logger *slog.Logger
}

// Explicit is an explicit HTTP proxy for sandboxes that cannot have a
// network namespace of Shellgate's making (Kubernetes pods, which reach it
// through HTTP(S)_PROXY): CONNECT host:port and absolute-form http://
// requests, anything else refused. It identifies each connection's sandbox
// by its source address and applies exactly the local engine's rules (the
// same code): names only, ports 80 and 443, the host's resolver, no
// private, loopback, link-local or metadata addresses, a CONNECT tunnel to
// 443 must carry TLS whose server name is the CONNECT host.
type Explicit struct {
	cfg ExplicitConfig
	reporter
	up      upstream
	handler handler
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	lns     []net.Listener
	conns   map[net.Conn]netip.Addr // client connections: their source; upstreams: invalid
	per     map[netip.Addr]int      // client connections in flight by source
	clients int                     // client connections in flight
}

// NewExplicit returns a proxy; Serve runs it on a listener.
func NewExplicit(cfg ExplicitConfig) (*Explicit, error) {
	if cfg.Client == nil {
		return nil, errors.New("egress: ExplicitConfig.Client is required")
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 16384
	}
	if cfg.MaxConnsPerClient <= 0 {
		cfg.MaxConnsPerClient = maxConns
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	x := &Explicit{
		cfg:      cfg,
		reporter: reporter{metrics: newMetrics(), log: cfg.Logger, onConn: cfg.OnConn},
		up:       newUpstream(cfg.Hosts, cfg.AllowPrivate, netip.Prefix{}, cfg.DialTimeout),
		conns:    map[net.Conn]netip.Addr{},
		per:      map[netip.Addr]int{},
	}
	var ctx context.Context
	ctx, x.cancel = context.WithCancel(context.Background())
	x.handler = handler{ctx: ctx, owner: x, up: &x.up, report: x.report, explicit: true}
	return x, nil
}

// Collectors are the proxy's Prometheus metrics (the engine's connection
// and byte counters).
func (x *Explicit) Collectors() []prometheus.Collector {
	return []prometheus.Collector{x.metrics.conns, x.metrics.bytes}
}

// Serve accepts connections on l until Close; it returns nil after Close.
func (x *Explicit) Serve(l net.Listener) error {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		l.Close()
		return errors.New("egress: proxy closed")
	}
	x.lns = append(x.lns, l)
	x.wg.Add(1)
	x.mu.Unlock()
	defer x.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			x.mu.Lock()
			closed := x.closed
			x.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of descriptors and the like: wait, do not spin.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		tc, ok := c.(*net.TCPConn)
		if !ok || !x.admit(c) {
			reset(c)
			continue
		}
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			defer x.untrack(c)
			x.handler.handle(tc, kindHTTP)
		}()
	}
}

// Close stops accepting, ends every connection and waits for them.
func (x *Explicit) Close() error {
	x.mu.Lock()
	x.closed = true
	for _, l := range x.lns {
		l.Close()
	}
	for c := range x.conns {
		c.Close()
	}
	x.mu.Unlock()
	x.cancel()
	x.wg.Wait()
	return nil
}

func source(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// client implements owner: the source address's sandbox, if any.
func (x *Explicit) client(c net.Conn) (string, Policy, error) {
	src := source(c)
	x.mu.Lock()
	busy := x.per[src] > x.cfg.MaxConnsPerClient
	x.mu.Unlock()
	if busy {
		return src.String(), Policy{}, errBusy
	}
	id, p, err := x.cfg.Client(src)
	if err == nil && !p.Enabled() {
		err = errors.New("this sandbox has no network access")
	}
	if id == "" {
		id = src.String()
	}
	return id, p, err
}

// admit registers a client connection; false when the proxy is closing
// or has MaxConns client connections. A client's own cap is checked by
// client, after its connection is counted.
func (x *Explicit) admit(c net.Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed || x.clients >= x.cfg.MaxConns {
		return false
	}
	src := source(c)
	x.clients++
	x.per[src]++
	x.conns[c] = src
	return true
}

// track implements owner, for upstream connections.
func (x *Explicit) track(c net.Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false
	}
	x.conns[c] = netip.Addr{}
	return true
}

func (x *Explicit) untrack(c net.Conn) {
	x.mu.Lock()
	defer x.mu.Unlock()
	src, ok := x.conns[c]
	if !ok {
		return
	}
	delete(x.conns, c)
	if src.IsValid() {
		x.clients--
		if x.per[src]--; x.per[src] <= 0 {
			delete(x.per, src)
		}
	}
}
