package egress

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// dnsServer answers one sandbox's DNS on the host end of its veth, UDP and
// TCP on one port. It never forwards a question anywhere: a name the policy
// allows gets an A record of the host end (where the proxy takes the
// connection), and an empty answer for every other type (no IPv6); any
// other name is NXDOMAIN. So nothing the sandbox encodes in a name leaves
// the host.
type dnsServer struct {
	port     uint16
	udp, tcp *dns.Server
	wg       sync.WaitGroup
}

// dnsTTL is short: a policy never changes while a sandbox runs, but its
// answers should not outlive the sandbox's network by long.
const dnsTTL = 30

func (e *Engine) startDNS(ctx context.Context, n *Net) (*dnsServer, error) {
	var lc net.ListenConfig
	// UDP and TCP on the same port number, so one redirect serves both.
	var pc net.PacketConn
	var l net.Listener
	var err error
	for range 16 {
		if pc, err = lc.ListenPacket(ctx, "udp4", netip.AddrPortFrom(n.host, 0).String()); err != nil {
			return nil, err
		}
		p := pc.LocalAddr().(*net.UDPAddr).Port
		if l, err = lc.Listen(ctx, "tcp4", netip.AddrPortFrom(n.host, uint16(p)).String()); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		return nil, err
	}
	s := &dnsServer{port: uint16(pc.LocalAddr().(*net.UDPAddr).Port)}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { e.answer(n, w, r) })
	s.udp = &dns.Server{PacketConn: pc, Handler: h, UDPSize: 1232}
	s.tcp = &dns.Server{Listener: l, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		MaxTCPQueries: 16}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			srv.ActivateAndServe()
		}()
		<-started
	}
	return s, nil
}

func (s *dnsServer) close() {
	s.udp.Shutdown()
	s.tcp.Shutdown()
	s.wg.Wait()
}

// answer builds the reply to one query.
func (e *Engine) answer(n *Net, w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	if r.Opcode != dns.OpcodeQuery || len(r.Question) != 1 {
		m.SetRcode(r, dns.RcodeNotImplemented)
		w.WriteMsg(m)
		return
	}
	m.SetReply(r)
	m.Authoritative = true
	m.RecursionAvailable = true
	q := r.Question[0]
	name := strings.TrimSuffix(q.Name, ".")
	rec := Record{Sandbox: n.ID(), Kind: "dns", Host: Normalize(name), Port: 53, Start: time.Now()}
	if q.Qclass != dns.ClassINET || !n.policy.Allows(name) {
		m.Rcode = dns.RcodeNameError
		rec.Verdict, rec.Reason = Denied, "name not in the allowlist"
	} else {
		rec.Verdict = Allowed
		if q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: dnsTTL},
				A:   n.host.AsSlice(),
			})
		}
	}
	w.WriteMsg(m)
	e.metrics.dns.WithLabelValues(rec.Verdict).Inc()
	if rec.Verdict == Denied {
		e.report(rec)
	}
}
