package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// maxHandshakes bounds the connections authenticating at once; more are
// closed at accept. A peer on the pod network can delay the host's
// connection by at most AuthTimeout this way, never block it.
const maxHandshakes = 16

// ServeTLS runs the agent's network mode on ln: it accepts connections,
// authenticates each with c (TLS with c's certificate, then c's token, all
// within AuthTimeout) and serves one at a time with Serve; it returns when
// the connection served ends. Connections that fail are closed and
// reported to logf (which may be nil).
//
// A connection that authenticates while another is served takes over: the
// served one is closed (its running command killed, as when a host hangs
// up) and the new one served. Several gateway replicas holding the
// sandbox's credentials (its Kubernetes Secret) reach the pod this way, one
// at a time; nobody without the token can, and a peer still authenticating
// never disturbs the host served.
func ServeTLS(ln net.Listener, c Credentials, opts Options, logf func(format string, args ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if len(c.Token) != TokenSize {
		return fmt.Errorf("agent: token is %d bytes, want %d", len(c.Token), TokenSize)
	}
	cfg, err := c.ServerTLS()
	if err != nil {
		ln.Close()
		return err
	}
	won := make(chan net.Conn, 1)
	slots := make(chan struct{}, maxHandshakes)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			select {
			case slots <- struct{}{}:
			default:
				logf("refused %s: %d connections already authenticating", raw.RemoteAddr(), maxHandshakes)
				raw.Close()
				continue
			}
			go func() {
				defer func() { <-slots }()
				conn := tls.Server(raw, cfg)
				conn.SetDeadline(time.Now().Add(AuthTimeout))
				err := conn.Handshake()
				if err == nil {
					err = authenticate(conn, c.Token)
				}
				if err != nil {
					logf("refused %s: %v", raw.RemoteAddr(), err)
					raw.Close()
					return
				}
				conn.SetDeadline(time.Time{})
				select {
				case won <- conn:
				default: // another connection won first
					raw.Close()
				}
			}()
		}
	}()
	var conn net.Conn
	select {
	case conn = <-won:
	case err := <-acceptErr:
		return fmt.Errorf("agent: accept: %w", err)
	}
	defer ln.Close()
	for {
		if tc, ok := conn.(*tls.Conn); ok {
			if tcp, ok := tc.NetConn().(*net.TCPConn); ok {
				tcp.SetKeepAlive(true)
				tcp.SetKeepAlivePeriod(15 * time.Second)
			}
		}
		served := make(chan error, 1)
		go func(conn net.Conn) { served <- Serve(conn, conn, opts) }(conn)
		select {
		case err := <-served:
			conn.Close()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case next := <-won:
			logf("%s took over from %s", next.RemoteAddr(), conn.RemoteAddr())
			conn.Close()
			<-served // its commands are killed and reaped
			conn = next
		}
	}
}
