package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The HTTP edge below the routes: how long each phase of a connection may
// take, and how many connections the server holds (docs/limits.md,
// "Connections").
//
//   - a connection idle between requests (keep-alive) is closed after
//     ConnLimits.IdleTimeout; one still sending its request line and
//     headers after HeaderTimeout is closed; headers over MaxHeaderBytes
//     are answered 431;
//   - a request body that makes no progress for StallTimeout (no bytes
//     arrive) ends the request with 408 and frees the connection. Only
//     progress is bounded, never the whole request: a slow but steady
//     upload of 512 MiB and an SSE stream of many minutes both go on;
//   - the server holds at most MaxConns connections, at most
//     MaxConnsPerIP of them from one address. A new connection over
//     either cap first evicts the longest-idle keep-alive connection (of
//     that address, for the per-address cap): idle connections cost a
//     descriptor each and nothing else, so they never lock out a request.
//     Only when every connection is busy is the new one refused (a 503,
//     then closed).
//
// Idle and header timeouts and the header cap are http.Server's own; the
// stall bound is a read deadline refreshed before each read of a body
// (progressBody); the caps are connLimiter, a listener wrapper that learns
// each connection's state from http.Server.ConnState.

// ConnLimits bound the server's connections (Config.Conns). Zero fields
// take their defaults.
type ConnLimits struct {
	// IdleTimeout closes a keep-alive connection idle this long between
	// requests; default DefaultIdleConnTimeout.
	IdleTimeout time.Duration
	// HeaderTimeout bounds reading a request's line and headers; default
	// DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// MaxHeaderBytes caps a request's line and headers (431 over it);
	// default DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// StallTimeout ends a request whose body sends nothing for this long
	// (408); default DefaultStallTimeout.
	StallTimeout time.Duration
	// MaxConns caps the connections held at once; default
	// DefaultMaxConns(). Negative: no cap.
	MaxConns int
	// MaxConnsPerIP caps the connections from one remote address; default
	// DefaultMaxConnsPerIP, at most half of MaxConns. Negative: no cap
	// (a server behind a reverse proxy sees one address for everyone).
	MaxConnsPerIP int
}

// Defaults of ConnLimits.
const (
	// DefaultIdleConnTimeout is longer than common clients' own idle
	// timeout (Go's 90 s), so that the client, not the server, usually
	// closes: a request sent as the server closes would fail.
	DefaultIdleConnTimeout = 2 * time.Minute
	DefaultHeaderTimeout   = 10 * time.Second
	DefaultMaxHeaderBytes  = 64 << 10
	DefaultStallTimeout    = time.Minute
	DefaultMaxConnsPerIP   = 256
	// maxConnsCeiling bounds the default connection cap: each connection
	// costs about 20 KiB besides its descriptor, and no one server's
	// sandboxes serve more requests at once.
	maxConnsCeiling = 4096
)

// DefaultMaxConns is half of the process's open-file limit (the rest is
// for sandboxes, the database and files), at most 4096.
func DefaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return maxConnsCeiling
	}
	return int(min(rl.Cur/2, maxConnsCeiling))
}

// withDefaults fills l's zero fields.
func (l ConnLimits) withDefaults() ConnLimits {
	l.IdleTimeout = positiveOr(l.IdleTimeout, DefaultIdleConnTimeout)
	l.HeaderTimeout = positiveOr(l.HeaderTimeout, DefaultHeaderTimeout)
	l.MaxHeaderBytes = positiveOr(l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	l.StallTimeout = positiveOr(l.StallTimeout, DefaultStallTimeout)
	if l.MaxConns == 0 {
		l.MaxConns = max(DefaultMaxConns(), 2)
	}
	if l.MaxConnsPerIP == 0 {
		l.MaxConnsPerIP = DefaultMaxConnsPerIP
		if l.MaxConns > 0 {
			l.MaxConnsPerIP = max(min(l.MaxConnsPerIP, l.MaxConns/2), 1)
		}
	}
	return l
}

// ConnLimits are the server's connection limits, defaults filled in.
func (s *Server) ConnLimits() ConnLimits { return s.cfg.Conns }

// progressBodies wraps next so that every request body read by a handler
// must make progress: a read that waits more than stall for a byte fails
// with a *bodyStallError, and the server closes the connection.
func progressBodies(next http.Handler, stall time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &progressBody{ReadCloser: r.Body, rc: http.NewResponseController(w), stall: stall}
		r.Body = b
		next.ServeHTTP(w, r)
		if !b.done.Load() {
			// What the handler left unread, the server reads to reuse
			// the connection (up to 256 KiB): bounded too.
			b.rc.SetReadDeadline(time.Now().Add(stall))
		}
	})
}

// progressBody is a request body whose every read has a deadline stall
// from its start.
type progressBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	stall time.Duration
	// done: the body ended (or failed); the deadline is cleared. Atomic:
	// a proxied request's body is read by the transport's goroutine.
	done atomic.Bool
}

func (b *progressBody) Read(p []byte) (int, error) {
	if b.done.Load() {
		return b.ReadCloser.Read(p)
	}
	b.rc.SetReadDeadline(time.Now().Add(b.stall))
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done.Store(true)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, &bodyStallError{stall: b.stall}
		}
		// At its end the server goes on reading the connection in the
		// background, to notice a client that goes away while the
		// handler answers (a stream of minutes): a deadline there would
		// cancel the request.
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// bodyStallError is a request body that sent nothing for stall.
type bodyStallError struct{ stall time.Duration }

func (e *bodyStallError) Error() string {
	return fmt.Sprintf("the request body sent nothing for %v (the server's --stall-timeout)", e.stall)
}

func (e *bodyStallError) Unwrap() error { return os.ErrDeadlineExceeded }

// connLimiter caps the connections a server holds, in total and per
// remote address, evicting idle keep-alive connections (longest idle
// first) before it refuses a new one. Its listener admits connections;
// its track is the http.Server's ConnState hook.
type connLimiter struct {
	max, perIP int // <= 0: no cap
	log        *slog.Logger

	mu    sync.Mutex
	conns map[net.Conn]*connEntry
	byIP  map[string]int
	seq   uint64 // orders idle connections: the lowest idled first

	evicted, refused atomic.Uint64
}

type connEntry struct {
	ip    string
	idle  bool
	since uint64 // seq when it went idle
}

func newConnLimiter(l ConnLimits, log *slog.Logger) *connLimiter {
	return &connLimiter{max: l.MaxConns, perIP: l.MaxConnsPerIP, log: log,
		conns: map[net.Conn]*connEntry{}, byIP: map[string]int{}}
}

// open is how many connections are held.
func (cl *connLimiter) open() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return len(cl.conns)
}

// listener wraps ln: Accept admits each new connection, or answers it 503
// and closes it.
func (cl *connLimiter) listener(ln net.Listener) net.Listener { return &limitedListener{ln, cl} }

type limitedListener struct {
	net.Listener
	cl *connLimiter
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			// Out of descriptors (sandboxes and files use them too): free
			// one for the retry http.Server makes after its back-off.
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				l.cl.evict("")
			}
			return nil, err
		}
		if why := l.cl.admit(c); why != "" {
			l.cl.refused.Add(1)
			refuse(c, why)
			continue
		}
		return c, nil
	}
}

// admit counts c in, evicting an idle connection when c would be over a
// cap; it returns why c is refused when there was none to evict.
func (cl *connLimiter) admit(c net.Conn) string {
	ip := remoteIP(c)
	var victims []net.Conn
	defer func() {
		for _, v := range victims {
			v.Close()
		}
	}()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.perIP > 0 && cl.byIP[ip] >= cl.perIP {
		v := cl.evictLocked(ip)
		if v == nil {
			return fmt.Sprintf("too many connections from %s: %d are busy (the server's --max-conns-per-ip)", ip, cl.perIP)
		}
		victims = append(victims, v)
	}
	if cl.max > 0 && len(cl.conns) >= cl.max {
		v := cl.evictLocked("")
		if v == nil {
			return fmt.Sprintf("the server holds %d busy connections, its --max-conns", cl.max)
		}
		victims = append(victims, v)
	}
	cl.conns[c] = &connEntry{ip: ip}
	cl.byIP[ip]++
	return ""
}

// evict closes the longest-idle connection (of ip, unless empty), if any.
func (cl *connLimiter) evict(ip string) {
	cl.mu.Lock()
	v := cl.evictLocked(ip)
	cl.mu.Unlock()
	if v != nil {
		v.Close()
	}
}

// evictLocked forgets the longest-idle connection (of ip, unless empty)
// and returns it for the caller to close; nil if none is idle.
func (cl *connLimiter) evictLocked(ip string) net.Conn {
	var victim net.Conn
	var oldest *connEntry
	for c, e := range cl.conns {
		if e.idle && (ip == "" || e.ip == ip) && (oldest == nil || e.since < oldest.since) {
			victim, oldest = c, e
		}
	}
	if victim != nil {
		cl.forgetLocked(victim, oldest)
		cl.evicted.Add(1)
	}
	return victim
}

func (cl *connLimiter) forgetLocked(c net.Conn, e *connEntry) {
	delete(cl.conns, c)
	if cl.byIP[e.ip]--; cl.byIP[e.ip] <= 0 {
		delete(cl.byIP, e.ip)
	}
}

// track is the http.Server's ConnState hook. A connection already
// evicted is not counted again.
func (cl *connLimiter) track(c net.Conn, st http.ConnState) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	e := cl.conns[c]
	if e == nil {
		return
	}
	switch st {
	case http.StateIdle:
		cl.seq++
		e.idle, e.since = true, cl.seq
	case http.StateActive, http.StateNew:
		e.idle = false
	case http.StateClosed, http.StateHijacked:
		cl.forgetLocked(c, e)
	}
}

// refuse answers a connection over the caps with a 503 in the API's
// envelope and closes it. The write cannot block the accept loop for
// long: a new connection's send buffer takes it whole.
func refuse(c net.Conn, why string) {
	body, _ := json.Marshal(errorBody{Error: errorDetail{Code: http.StatusServiceUnavailable, Message: why}})
	c.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s", len(body), body)
	c.Close()
}

func remoteIP(c net.Conn) string {
	a := c.RemoteAddr()
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// collectors are the limiter's series in /metrics.
func (cl *connLimiter) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shellgate_http_connections",
			Help: "HTTP connections the server holds.",
		}, func() float64 { return float64(cl.open()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shellgate_http_connections_evicted_total",
			Help: "Idle keep-alive connections closed to make room for a new one (--max-conns, --max-conns-per-ip).",
		}, func() float64 { return float64(cl.evicted.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shellgate_http_connections_refused_total",
			Help: "New connections answered 503 and closed: every held one was busy (--max-conns, --max-conns-per-ip).",
		}, func() float64 { return float64(cl.refused.Load()) }),
	}
}
