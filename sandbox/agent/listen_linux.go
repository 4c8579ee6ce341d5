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

// maxHosts bounds the hosts served at once; a connection that
// authenticates past it is closed. Each gateway replica keeps one
// connection to a pod, so this is far more than a deployment has.
const maxHosts = 64

// ServeTLS runs the agent's network mode on ln: it accepts connections,
// authenticates each with c (TLS with c's certificate, then c's token, all
// within AuthTimeout) and serves every authenticated one at once, sharing
// one agent: their commands go through one queue and run one at a time in
// the order they arrived, whichever connection sent them (a command sent
// while another host's runs waits for it). Connections that fail are
// closed and reported to logf (which may be nil).
//
// A connection that ends takes only its own work with it: its queued
// commands are dropped, its running command and its resident process are
// killed and reaped, its file requests canceled, before anything else of
// it could run; the other connections' commands go on. Several gateway
// replicas holding the sandbox's credentials (its Kubernetes Secret) reach
// the pod this way; nobody without the token can, and a peer still
// authenticating never disturbs the hosts served. Each host is told of
// the others (Peers), and one may hold the sandbox (Client.Hold) to have
// it alone while it archives the home.
//
// ServeTLS returns when the last connection served ends, like the stdio
// mode when its stdin closes (the pod restarts the agent).
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
	won := make(chan net.Conn)
	quit := make(chan struct{}) // closed when ServeTLS returns
	defer close(quit)
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
				case <-quit: // the agent is done
					raw.Close()
				}
			}()
		}
	}()
	var s *server
	defer func() {
		ln.Close()
		if s != nil {
			s.shutdown()
		}
	}()
	ended := make(chan error)
	served := 0
	for {
		select {
		case conn := <-won:
			if served == maxHosts {
				logf("refused %s: %d hosts already served", conn.RemoteAddr(), maxHosts)
				conn.Close()
				continue
			}
			if s == nil {
				if s, err = start(opts); err != nil {
					conn.Close()
					return err
				}
			}
			if tc, ok := conn.(*tls.Conn); ok {
				if tcp, ok := tc.NetConn().(*net.TCPConn); ok {
					// A host that vanished (its node gone) is found out
					// within about half a minute of silence, and its
					// command, which the other hosts' wait for, killed.
					tcp.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3})
				}
			}
			served++
			go func() {
				err := s.serve(conn, conn)
				conn.Close()
				if err != nil && !errors.Is(err, io.EOF) {
					logf("%s: %v", conn.RemoteAddr(), err)
				}
				ended <- err
			}()
		case err := <-ended:
			if served--; served == 0 {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		case err := <-acceptErr:
			if served == 0 {
				return fmt.Errorf("agent: accept: %w", err)
			}
			logf("accept: %v", err)
			acceptErr = nil // serve the hosts there are
		}
	}
}
