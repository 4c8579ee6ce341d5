package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/sys/unix"
)

type kind int

const (
	kindHTTP kind = iota // port 80: Host header; also CONNECT and absolute-form
	kindTLS              // port 443: TLS server name
)

const (
	// helloTimeout bounds how long the proxy waits for the TLS ClientHello
	// or the request head before it resets the connection.
	helloTimeout = 10 * time.Second
	// maxHead caps the bytes read to find the server name or Host header.
	maxHead = 64 << 10
	// maxConns caps one sandbox's connections in flight.
	maxConns = 512
)

// serve accepts the sandbox's connections on l until the network closes.
func (n *Net) serve(l net.Listener, k kind) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !n.track(c) {
				reset(c)
				continue
			}
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				defer n.untrack(c)
				n.handler.handle(c.(*net.TCPConn), k)
			}()
		}
	}()
}

// reset closes c with a TCP reset: the sandbox's client fails at once
// ("connection reset by peer") instead of waiting.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// owner is what accepted a connection: a sandbox's Net (the local engine)
// or the Explicit proxy (Kubernetes mode). Both share handle, so both apply
// the same rules.
type owner interface {
	// client says which sandbox c comes from and what it may reach; an
	// error refuses the connection with its text (errBusy: at once).
	client(c net.Conn) (id string, p Policy, err error)
	// track registers a connection to close with the owner; false once
	// it is closing.
	track(c net.Conn) bool
	untrack(c net.Conn)
}

// errBusy: the client has too many connections in flight.
var errBusy = errors.New("too many connections")

// handler is how connections of one owner are handled.
type handler struct {
	ctx    context.Context // ends when the owner closes: lookups and dials stop
	owner  owner
	up     *upstream
	report func(Record)
	// explicit: an explicit HTTP proxy only (CONNECT, absolute-form
	// http://); every refusal before the tunnel is an HTTP error response.
	explicit bool
}

// handle decides one connection and, if allowed, splices it to upstream.
func (h *handler) handle(c *net.TCPConn, k kind) {
	rec := Record{Start: time.Now()}
	defer func() {
		rec.Duration = time.Since(rec.Start)
		h.report(rec)
	}()
	id, policy, who := h.owner.client(c)
	rec.Sandbox = id
	if who == errBusy {
		rec.Kind, rec.Verdict, rec.Reason = "tcp", Denied, who.Error()
		reset(c)
		return
	}
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	var (
		head    []byte
		host    string
		port    int
		connect bool
		req     httpHead
		err     error
	)
	switch k {
	case kindTLS:
		rec.Kind, port = "tls", 443
		head, host, err = readClientHello(c)
	case kindHTTP:
		rec.Kind, port = "http", 80
		head, req, err = readHTTPHead(c)
		if err == nil {
			host, port, connect = req.host, req.port, req.connect
			if connect {
				rec.Kind = "connect"
			}
		}
	}
	rec.Host, rec.Port = host, port
	// refuse ends the connection before any tunnel: with an HTTP error
	// where the client speaks to a proxy, else with a reset.
	refuse := func(status int, verdict, why string) {
		rec.Verdict, rec.Reason = verdict, why
		if h.explicit || (connect && verdict == Denied) {
			fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nshellgate: %s\n", status, http.StatusText(status), why)
			c.Close()
			return
		}
		reset(c)
	}
	deny := func(why string) { refuse(http.StatusForbidden, Denied, why) }
	switch {
	case err != nil:
		refuse(http.StatusBadRequest, Denied, err.Error())
		return
	case h.explicit && !connect && !req.absolute:
		refuse(http.StatusMethodNotAllowed, Denied, "this is an HTTP proxy: send CONNECT host:443 or an absolute-form http:// request")
		return
	case who != nil:
		deny(who.Error())
		return
	}
	if port != 80 && port != 443 {
		deny(fmt.Sprintf("port %d is not allowed (only 80 and 443)", port))
		return
	}
	if !policy.Allows(host) {
		if _, ipErr := netip.ParseAddr(strings.Trim(host, "[]")); ipErr == nil {
			deny(fmt.Sprintf("%s is an IP address; only allowlisted hostnames are reachable", host))
		} else {
			deny(fmt.Sprintf("%s is not in this sandbox's network allowlist", host))
		}
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.up.timeout)
	addrs, why, err := h.up.resolve(ctx, host)
	if err != nil || len(addrs) == 0 {
		cancel()
		if why != "" {
			deny(why)
		} else {
			refuse(http.StatusBadGateway, Failed, fmt.Sprintf("resolve %s: %v", host, err))
		}
		return
	}
	if req.absolute {
		head = oneRequest(head)
	}
	var up *net.TCPConn
	if connect {
		if h.explicit {
			// Connect before answering, so a failure is a clear 502.
			if up, err = h.up.dial(ctx, addrs, port); err != nil {
				cancel()
				refuse(http.StatusBadGateway, Failed, err.Error())
				return
			}
		}
		c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		head = nil
		if port == 443 {
			// The client's time for its ClientHello starts now, not
			// before resolving (and, explicit, dialling).
			c.SetReadDeadline(time.Now().Add(helloTimeout))
			// The tunnel must carry TLS for the name it was opened for.
			var sni string
			head, sni, err = readClientHello(c)
			if err == nil && sni != "" && Normalize(sni) != Normalize(host) {
				err = fmt.Errorf("TLS server name %s differs from the CONNECT host %s", sni, host)
			}
			if err != nil {
				cancel()
				rec.Verdict, rec.Reason = Denied, err.Error()
				reset(c)
				if up != nil {
					reset(up)
				}
				return
			}
		}
	}
	if up == nil {
		up, err = h.up.dial(ctx, addrs, port)
	}
	cancel()
	if err != nil {
		refuse(http.StatusBadGateway, Failed, err.Error())
		return
	}
	rec.Verdict, rec.Upstream = Allowed, up.RemoteAddr().String()
	c.SetReadDeadline(time.Time{})
	if !h.owner.track(up) {
		reset(up)
		reset(c)
		return
	}
	defer h.owner.untrack(up)
	if len(head) > 0 {
		if _, err := up.Write(head); err != nil {
			rec.Reason = err.Error()
			reset(c)
			up.Close()
			return
		}
		rec.Sent = int64(len(head))
	}
	sent, recv := splice(c, up)
	rec.Sent += sent
	rec.Received = recv
}

// splice copies both ways until both directions end, passing half-closes
// on.
func splice(c, up *net.TCPConn) (sent, recv int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		recv, err = pump(c, up)
		if err != nil {
			c.SetLinger(0)
			c.Close()
			up.Close()
			return
		}
		c.CloseWrite()
	}()
	sent, err := pump(up, c)
	if err != nil {
		up.SetLinger(0)
		up.Close()
		c.Close()
	} else {
		up.CloseWrite()
	}
	wg.Wait()
	c.Close()
	up.Close()
	return sent, recv
}

// copyBuf is how much one read takes from a socket and one write hands to
// the other. Writes this large let the kernel build TCP super-packets of up
// to bigGSO on a sandbox's veth. With splice(2) (io.Copy between TCP
// connections) a packet is assembled from the pages the data arrived in, at
// most 17 fragments: packets stayed at 30-60 KiB whatever the veth allowed,
// and a download through the proxy cost 1.4-1.9x the CPU of a direct one
// instead of about 1x (BENCHMARKS.md, "Network egress").
const copyBuf = 512 << 10

var bufs = sync.Pool{New: func() any { b := make([]byte, copyBuf); return &b }}

// pump copies src to dst until src ends (nil error) or either side fails.
// A buffer is taken from the pool only once src has data and goes back
// after each write, so idle connections hold none.
func pump(dst, src *net.TCPConn) (int64, error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	var total int64
	for {
		var (
			buf  *[]byte
			k    int
			rerr error
		)
		err := rc.Read(func(fd uintptr) bool {
			if buf == nil {
				buf = bufs.Get().(*[]byte)
			}
			for {
				k, rerr = unix.Read(int(fd), *buf)
				if rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				bufs.Put(buf)
				buf = nil
				return false // wait until readable
			}
			return true
		})
		if err == nil {
			err = rerr
		}
		if err != nil || k <= 0 {
			if buf != nil {
				bufs.Put(buf)
			}
			return total, err // k == 0 without an error: end of stream
		}
		_, err = dst.Write((*buf)[:k])
		bufs.Put(buf)
		if err != nil {
			return total, err
		}
		total += int64(k)
	}
}

// upstream resolves allowed names and connects to them, refusing the
// addresses no sandbox may reach. The engine and the Explicit proxy share
// it.
type upstream struct {
	hosts        map[string][]netip.Addr // Config.Hosts, normalized
	allowPrivate []netip.Prefix
	pool         netip.Prefix // sandboxes' addresses (invalid: none)
	timeout      time.Duration
	res          *net.Resolver
	dialer       net.Dialer
}

func newUpstream(hosts map[string][]netip.Addr, allowPrivate []netip.Prefix, pool netip.Prefix, timeout time.Duration) upstream {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	hs := map[string][]netip.Addr{}
	for h, a := range hosts {
		hs[Normalize(h)] = a
	}
	return upstream{hosts: hs, allowPrivate: allowPrivate, pool: pool, timeout: timeout,
		res: net.DefaultResolver, dialer: net.Dialer{Timeout: timeout}}
}

// resolve finds the addresses of an allowed host and keeps those the
// sandbox may reach. why is set when the name resolved only to refused
// addresses.
func (e *upstream) resolve(ctx context.Context, host string) (ok []netip.Addr, why string, err error) {
	host = Normalize(host)
	all, static := e.hosts[host]
	if !static {
		if all, err = e.res.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, "", err
		}
	}
	if len(all) == 0 {
		return nil, "", errors.New("no addresses")
	}
	local := localAddrs()
	for _, a := range all {
		if r := e.refused(a.Unmap(), local); r != "" {
			why = fmt.Sprintf("%s resolves to %s, which is %s", host, a, r)
			continue
		}
		ok = append(ok, a.Unmap())
	}
	if len(ok) > 0 {
		why = ""
	}
	return ok, why, nil
}

var (
	metadata = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, ...
		netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
		netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	}
	special = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
		netip.MustParsePrefix("192.0.0.0/24"),
		netip.MustParsePrefix("198.18.0.0/15"),
		netip.MustParsePrefix("240.0.0.0/4"),
		netip.MustParsePrefix("64:ff9b::/96"), // NAT64 can reach private IPv4
		netip.MustParsePrefix("64:ff9b:1::/48"),
		netip.MustParsePrefix("2002::/16"), // 6to4 embeds IPv4
	}
)

// refused says why the proxy must not connect to a (empty: it may).
func (e *upstream) refused(a netip.Addr, local map[netip.Addr]bool) string {
	for _, m := range metadata {
		if a == m {
			return "a cloud metadata address"
		}
	}
	if e.pool.Contains(a) {
		return "a sandbox address"
	}
	if local[a] {
		return "an address of this host"
	}
	for _, p := range e.allowPrivate {
		if p.Contains(a) {
			return ""
		}
	}
	switch {
	case a.IsLoopback():
		return "a loopback address"
	case a.IsPrivate():
		return "a private address"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "a link-local address"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast(), a.IsUnspecified(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "not a unicast address"
	}
	for _, p := range special {
		if p.Contains(a) {
			return "a special-purpose address"
		}
	}
	return ""
}

// localAddrs are the host's own addresses: a name that resolves to one
// would reach the host's own services. They are read at most once a second
// (reading them costs a netlink dump per connection otherwise).
func localAddrs() map[netip.Addr]bool {
	localCache.Lock()
	defer localCache.Unlock()
	if localCache.m == nil || time.Since(localCache.at) > time.Second {
		localCache.m, localCache.at = readLocalAddrs(), time.Now()
	}
	return localCache.m
}

var localCache struct {
	sync.Mutex
	m  map[netip.Addr]bool
	at time.Time
}

func readLocalAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	as, _ := net.InterfaceAddrs()
	for _, a := range as {
		if ipn, ok := a.(*net.IPNet); ok {
			if ad, ok := netip.AddrFromSlice(ipn.IP); ok {
				out[ad.Unmap()] = true
			}
		}
	}
	return out
}

// dial connects to the first address that answers.
func (e *upstream) dial(ctx context.Context, addrs []netip.Addr, port int) (*net.TCPConn, error) {
	var errs []error
	for _, a := range addrs {
		c, err := e.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("connect: %w", errors.Join(errs...))
}

// readClientHello reads a TLS ClientHello (across records if need be) and
// returns the bytes read and its server name ("" when it has none, which
// is refused for transparent connections). Anything that is not TLS is an
// error.
func readClientHello(c net.Conn) (raw []byte, sni string, err error) {
	var hs []byte // the handshake message, reassembled from records
	buf := make([]byte, 0, 4096)
	for {
		// One record at a time: header, then body.
		for len(buf) < 5 {
			if buf, err = readMore(c, buf); err != nil {
				return nil, "", err
			}
		}
		if buf[0] != 22 || buf[1] != 3 {
			return nil, "", errors.New("not a TLS connection (port 443 carries TLS only)")
		}
		rl := int(buf[3])<<8 | int(buf[4])
		if rl == 0 || rl > 1<<14+256 {
			return nil, "", errors.New("malformed TLS record")
		}
		for len(buf) < 5+rl {
			if buf, err = readMore(c, buf); err != nil {
				return nil, "", err
			}
		}
		hs = append(hs, buf[5:5+rl]...)
		raw = append(raw, buf[:5+rl]...)
		buf = append(buf[:0], buf[5+rl:]...)
		if len(hs) >= 4 {
			if hs[0] != 1 {
				return nil, "", errors.New("TLS connection does not start with a ClientHello")
			}
			ml := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
			if ml > maxHead {
				return nil, "", errors.New("TLS ClientHello too large")
			}
			if len(hs) >= 4+ml {
				sni, err = parseSNI(hs[4 : 4+ml])
				if err != nil {
					return nil, "", err
				}
				if sni == "" {
					return nil, "", errors.New("TLS connection without a server name (SNI): only allowlisted hostnames are reachable")
				}
				return append(raw, buf...), sni, nil
			}
		}
		if len(raw) > maxHead {
			return nil, "", errors.New("TLS ClientHello too large")
		}
	}
}

func readMore(c net.Conn, buf []byte) ([]byte, error) {
	if len(buf) >= maxHead+5 {
		return nil, errors.New("request head too large")
	}
	var tmp [4096]byte
	k, err := c.Read(tmp[:])
	buf = append(buf, tmp[:k]...)
	if k > 0 {
		return buf, nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, errors.New("no request within " + helloTimeout.String())
	}
	return nil, fmt.Errorf("reading the request: %w", err)
}

// parseSNI returns the host_name of a ClientHello body's server_name
// extension ("" when it has none), read with cryptobyte as crypto/tls reads
// it. The body comes from the sandbox: anything that does not parse whole,
// or a name with a NUL, a slash or a space, is refused.
func parseSNI(b []byte) (string, error) {
	bad := errors.New("malformed TLS ClientHello")
	s := cryptobyte.String(b)
	var skip cryptobyte.String
	// version, random, session id, cipher suites, compression methods
	if !s.Skip(2+32) || !s.ReadUint8LengthPrefixed(&skip) || !s.ReadUint16LengthPrefixed(&skip) || !s.ReadUint8LengthPrefixed(&skip) {
		return "", bad
	}
	if s.Empty() {
		return "", nil // no extensions
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) {
		return "", bad
	}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return "", bad
		}
		if typ != 0 { // server_name (RFC 6066)
			continue
		}
		var names cryptobyte.String
		if !data.ReadUint16LengthPrefixed(&names) {
			return "", bad
		}
		for !names.Empty() {
			var nameType uint8
			var name cryptobyte.String
			if !names.ReadUint8(&nameType) || !names.ReadUint16LengthPrefixed(&name) {
				return "", bad
			}
			if nameType != 0 { // host_name
				continue
			}
			if len(name) == 0 || strings.ContainsAny(string(name), "\x00/ ") {
				return "", bad
			}
			return string(name), nil
		}
		return "", nil
	}
	return "", nil
}

// httpHead is what the proxy needs from a request head.
type httpHead struct {
	host     string
	port     int
	connect  bool
	absolute bool // an absolute-form http:// target
}

// readHTTPHead reads up to the end of the request head and finds where the
// request goes: the CONNECT authority, the absolute-form URL's host (for
// clients using the sandbox's endpoint as HTTP_PROXY) or the Host header.
func readHTTPHead(c net.Conn) ([]byte, httpHead, error) {
	var buf []byte
	var err error
	for {
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			h, err := parseHTTPHead(buf[:i+2])
			return buf, h, err
		}
		if len(buf) > maxHead {
			return nil, httpHead{}, errors.New("HTTP request head too large")
		}
		if buf, err = readMore(c, buf); err != nil {
			if len(buf) == 0 {
				return nil, httpHead{}, err
			}
			return nil, httpHead{}, fmt.Errorf("not an HTTP request: %w", err)
		}
	}
}

func parseHTTPHead(b []byte) (httpHead, error) {
	lines := strings.Split(string(b), "\r\n")
	parts := strings.Split(lines[0], " ")
	if len(parts) != 3 || !strings.HasPrefix(parts[2], "HTTP/1.") {
		return httpHead{}, errors.New("not an HTTP/1 request (port 80 carries HTTP only)")
	}
	method, target := parts[0], parts[1]
	var hostHdr []string
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), "host") {
			hostHdr = append(hostHdr, strings.TrimSpace(v))
		}
	}
	if len(hostHdr) > 1 {
		return httpHead{}, errors.New("more than one Host header")
	}
	if method == "CONNECT" {
		h, p, err := splitHostPort(target, -1)
		if err != nil {
			return httpHead{}, fmt.Errorf("CONNECT %q: %v", target, err)
		}
		return httpHead{host: h, port: p, connect: true}, nil
	}
	if strings.HasPrefix(strings.ToLower(target), "http://") || strings.HasPrefix(strings.ToLower(target), "https://") {
		u, err := url.Parse(target)
		if err != nil || u.Host == "" {
			return httpHead{}, fmt.Errorf("bad request target %q", target)
		}
		if !strings.EqualFold(u.Scheme, "http") {
			return httpHead{}, errors.New("only http:// targets can be proxied in the clear; use CONNECT for https")
		}
		h, p, err := splitHostPort(u.Host, 80)
		if err != nil {
			return httpHead{}, err
		}
		if len(hostHdr) == 1 {
			hh, _, err := splitHostPort(hostHdr[0], 80)
			if err != nil || Normalize(hh) != Normalize(h) {
				return httpHead{}, fmt.Errorf("Host header %q differs from the request's host %s", hostHdr[0], h)
			}
		}
		return httpHead{host: h, port: p, absolute: true}, nil
	}
	if len(hostHdr) == 0 || hostHdr[0] == "" {
		return httpHead{}, errors.New("HTTP request without a Host header")
	}
	// The connection arrived on port 80; a port in the Host header does
	// not change where it goes.
	h, _, err := splitHostPort(hostHdr[0], 80)
	if err != nil {
		return httpHead{}, err
	}
	return httpHead{host: h, port: 80}, nil
}

// oneRequest rewrites an absolute-form request's head for the origin
// server: its target in origin-form (RFC 9112 3.2.1: what a client sends
// an origin server; many servers answer an absolute-form target with a
// 404), its connection ending with the response (Connection: close), and
// without the headers meant for the proxy. Clients keep a connection to a proxy alive
// and send it requests for other hosts, but the connection is spliced to
// the first request's server: without this, a later request for another
// host would reach that server (never another address, but not the host
// asked for either, and never checked against the policy).
func oneRequest(buf []byte) []byte {
	i := bytes.Index(buf, []byte("\r\n\r\n"))
	if i < 0 {
		return buf
	}
	lines := bytes.Split(buf[:i], []byte("\r\n"))
	out := make([]byte, 0, len(buf)+32)
	out = append(append(out, originForm(lines[0])...), "\r\n"...)
	dropping := false
	for _, l := range lines[1:] {
		if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') { // a folded line continues the header before it
			if !dropping {
				out = append(append(out, l...), "\r\n"...)
			}
			continue
		}
		k, _, _ := bytes.Cut(l, []byte(":"))
		switch strings.ToLower(strings.TrimSpace(string(k))) {
		case "connection", "proxy-connection", "keep-alive", "proxy-authorization":
			dropping = true
			continue
		}
		dropping = false
		out = append(append(out, l...), "\r\n"...)
	}
	out = append(out, "Connection: close\r\n\r\n"...)
	return append(out, buf[i+4:]...)
}

// originForm is the request line "METHOD http://host[:port]/path?q VERSION"
// as "METHOD /path?q VERSION"; another line is returned as it is.
func originForm(line []byte) []byte {
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, version, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || len(target) < 7 || !strings.EqualFold(string(target[:7]), "http://") {
		return line
	}
	path := target[7:]
	if j := bytes.IndexAny(path, "/?"); j < 0 {
		path = []byte("/")
	} else if path = path[j:]; path[0] == '?' {
		path = append([]byte("/"), path...)
	}
	return bytes.Join([][]byte{method, path, version}, []byte(" "))
}

// splitHostPort splits "host[:port]"; def < 0 means the port is required.
func splitHostPort(s string, def int) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		if def < 0 {
			return "", 0, errors.New("want host:port")
		}
		if strings.Count(s, ":") > 0 && !strings.HasPrefix(s, "[") {
			return "", 0, fmt.Errorf("bad host %q", s)
		}
		return strings.Trim(s, "[]"), def, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return h, n, nil
}
