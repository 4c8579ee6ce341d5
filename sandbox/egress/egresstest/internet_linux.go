// Package egresstest builds a small "internet" for egress tests: a network
// namespace the test creates, joined to the host by a veth, holding HTTP
// and HTTPS servers (self-signed certificates) for a few test hostnames, a
// DNS server and a UDP listener that count what reaches them. Nothing
// outside the host is ever addressed.
package egresstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/testenv"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/flock"
)

// Internet is the test's outside world.
type Internet struct {
	// Prefix holds every address of the internet (allow it with
	// egress.Config.AllowPrivate).
	Prefix netip.Prefix
	// Hosts maps each test hostname to its server's address (give it to
	// egress.Config.Hosts).
	Hosts map[string][]netip.Addr
	// DNS is a DNS server in the internet; it counts the questions it
	// gets (and answers none).
	DNS netip.Addr
	// CertPEM is the servers' self-signed certificate (for curl --cacert).
	CertPEM  []byte
	CertPool *x509.CertPool
	NS       string // the pinned namespace

	mu      sync.Mutex
	hits    map[string]int // by server hostname
	dnsHits atomic.Int64
	udpHits atomic.Int64
	closers []io.Closer
}

// Names are the test hostnames, each with its own address.
var Names = []string{"allowed.test", "api.allowed.test", "deep.api.allowed.test", "other.test", "evil.test", "meta.test", "private.test", "self.test"}

// BigSize is the size of /big on every server.
const BigSize = 100 << 20

// New builds the internet and removes it when t ends.
func New(t testing.TB) *Internet {
	t.Helper()
	testenv.NeedRoot(t, "a test internet needs network namespaces, veths and firewall rules")
	slotLock, x := lockIndex(t)
	in := &Internet{
		Prefix: netip.MustParsePrefix(fmt.Sprintf("10.251.%d.0/24", x)),
		Hosts:  map[string][]netip.Addr{},
		DNS:    netip.MustParseAddr(fmt.Sprintf("10.251.%d.53", x)),
		hits:   map[string]int{},
	}
	hostEnd := netip.MustParseAddr(fmt.Sprintf("10.251.%d.1", x))
	iface := "sgt" + strconv.Itoa(x)
	if l, err := netlink.LinkByName(iface); err == nil {
		netlink.LinkDel(l) // a killed test's
	}
	in.NS = filepath.Join(t.TempDir(), "inet")
	if err := egress.NewNetNS(in.NS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := len(in.closers) - 1; i >= 0; i-- {
			in.closers[i].Close()
		}
		if l, err := netlink.LinkByName(iface); err == nil {
			netlink.LinkDel(l)
		}
		unix.Unmount(in.NS, unix.MNT_DETACH)
		slotLock.Close()
	})
	nsh, err := netns.GetFromPath(in.NS)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	la := netlink.NewLinkAttrs()
	la.Name = iface
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(nsh))}); err != nil {
		t.Fatal(err)
	}
	link, _ := netlink.LinkByName(iface)
	mustNL(t, netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: hostEnd.AsSlice(), Mask: net.CIDRMask(24, 32)}}))
	mustNL(t, netlink.LinkSetUp(link))
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, _ := h.LinkByName("lo")
	mustNL(t, h.LinkSetUp(lo))
	peer, _ := h.LinkByName("eth0")
	addrs := []netip.Addr{in.DNS}
	for i, name := range Names {
		a := netip.MustParseAddr(fmt.Sprintf("10.251.%d.%d", x, 10+i))
		in.Hosts[name] = []netip.Addr{a}
		addrs = append(addrs, a)
	}
	for _, a := range addrs {
		mustNL(t, h.AddrAdd(peer, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(24, 32)}}))
	}
	mustNL(t, h.LinkSetUp(peer))
	mustNL(t, h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: hostEnd.AsSlice()}))

	cert, certPEM := selfSigned(t, Names)
	in.CertPEM = certPEM
	in.CertPool = x509.NewCertPool()
	in.CertPool.AppendCertsFromPEM(certPEM)
	for _, name := range Names {
		a := in.Hosts[name][0]
		in.serveHTTP(t, name, a, 80, nil)
		in.serveHTTP(t, name, a, 8080, nil)
		in.serveHTTP(t, name, a, 443, &tls.Config{Certificates: []tls.Certificate{cert}})
		in.countUDP(t, netip.AddrPortFrom(a, 443))
	}
	in.countDNS(t)
	return in
}

func mustNL(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// lockIndex takes a host-wide index 0..99 so that tests of several
// packages running at once get different internets.
func lockIndex(t testing.TB) (*os.File, int) {
	dir := "/run/shellgate/egress-test"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for x := 0; x < 100; x++ {
		f, err := flock.TryLock(filepath.Join(dir, strconv.Itoa(x)))
		if err == nil {
			return f, x
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			t.Fatal(err)
		}
	}
	t.Fatal("no free test internet index")
	return nil, 0
}

// BlobSize is the size of /blob on every server.
const BlobSize = 24 << 20

// Blob is what /blob serves: BlobSize pseudo-random bytes, the same every
// time.
func Blob() []byte {
	blobOnce.Do(func() {
		blob = make([]byte, BlobSize)
		mrand.NewChaCha8([32]byte{'s', 'h', 'e', 'l', 'l', 'g', 'a', 't', 'e'}).Read(blob)
	})
	return blob
}

var (
	blobOnce sync.Once
	blob     []byte
)

// SinkReply is what POST /sink answers for a body of n bytes with SHA-256
// sum.
func SinkReply(n int64, sum []byte) string {
	return fmt.Sprintf("%d bytes sha256=%x\n", n, sum)
}

// Reply is what every server answers: who it is and what it was asked.
func Reply(server, hostHeader, sni string) string {
	return fmt.Sprintf("server=%s host=%s sni=%s\n", server, hostHeader, sni)
}

func (in *Internet) serveHTTP(t testing.TB, name string, a netip.Addr, port int, tc *tls.Config) {
	var l net.Listener
	err := egress.InNS(in.NS, func() (err error) {
		l, err = net.Listen("tcp4", netip.AddrPortFrom(a, uint16(port)).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(BigSize))
		buf := make([]byte, 256<<10)
		for left := BigSize; left > 0; left -= len(buf) {
			if _, err := w.Write(buf[:min(len(buf), left)]); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(BlobSize))
		w.Write(Blob())
	})
	mux.HandleFunc("/sink", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		k, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		io.WriteString(w, SinkReply(k, h.Sum(nil)))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		in.mu.Lock()
		in.hits[name+":"+strconv.Itoa(port)]++
		in.mu.Unlock()
		sni := ""
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		io.WriteString(w, Reply(name, r.Host, sni))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if tc != nil {
		l = tls.NewListener(l, tc)
	}
	go srv.Serve(l)
	in.closers = append(in.closers, srv)
}

// Hits is how many requests the named server got on port.
func (in *Internet) Hits(name string, port int) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.hits[name+":"+strconv.Itoa(port)]
}

// TotalHits is every request any server got.
func (in *Internet) TotalHits() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := 0
	for _, v := range in.hits {
		n += v
	}
	return n
}

// DNSQueries is how many DNS packets reached the internet's DNS server.
func (in *Internet) DNSQueries() int64 { return in.dnsHits.Load() }

// UDPPackets is how many UDP packets reached any server's port 443.
func (in *Internet) UDPPackets() int64 { return in.udpHits.Load() }

func (in *Internet) countUDP(t testing.TB, ap netip.AddrPort) {
	var pc net.PacketConn
	if err := egress.InNS(in.NS, func() (err error) { pc, err = net.ListenPacket("udp4", ap.String()); return err }); err != nil {
		t.Fatal(err)
	}
	in.closers = append(in.closers, pc)
	go countPackets(pc, &in.udpHits)
}

// countPackets counts the packets pc receives in n until pc is closed.
func countPackets(pc net.PacketConn, n *atomic.Int64) {
	buf := make([]byte, 2048)
	for {
		if _, _, err := pc.ReadFrom(buf); err != nil {
			return
		}
		n.Add(1)
	}
}

func (in *Internet) countDNS(t testing.TB) {
	var pc net.PacketConn
	var l net.Listener
	err := egress.InNS(in.NS, func() (err error) {
		if pc, err = net.ListenPacket("udp4", netip.AddrPortFrom(in.DNS, 53).String()); err != nil {
			return err
		}
		l, err = net.Listen("tcp4", netip.AddrPortFrom(in.DNS, 53).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	in.closers = append(in.closers, pc, l)
	go countPackets(pc, &in.dnsHits)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			in.dnsHits.Add(1)
			c.Close()
		}
	}()
}

func selfSigned(t testing.TB, names []string) (tls.Certificate, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "shellgate egress test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		DNSNames:              names,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	kb, _ := x509.MarshalECPrivateKey(key)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c, certPEM
}

// Config returns an engine configuration that reaches this internet:
// its hostnames mapped, its range allowed, metadata and a private address
// mapped for the refusal tests.
func (in *Internet) Config() egress.Config {
	hosts := map[string][]netip.Addr{}
	for k, v := range in.Hosts {
		hosts[k] = v
	}
	hosts["meta.test"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	hosts["meta6.test"] = []netip.Addr{netip.MustParseAddr("fd00:ec2::254")}
	hosts["private.test"] = []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	hosts["self.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	return egress.Config{Hosts: hosts, AllowPrivate: []netip.Prefix{in.Prefix}}
}

// Addr is the address of a test hostname.
func (in *Internet) Addr(name string) netip.Addr { return in.Hosts[strings.ToLower(name)][0] }
