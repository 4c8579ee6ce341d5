package kubeproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/egress/egresstest"
	"github.com/shellgate/shellgate/sandbox/egress/kubeproxy"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/testenv"
)

const (
	ns   = "sg"
	node = "node-a"
)

// env is a fake API server's sandbox pods, the proxy watching them on
// loopback, and egresstest's internet (a namespace of the test's own) as
// the outside world. Pods are 127.0.0.x addresses: a client binding its
// source to one is that pod.
type env struct {
	in    *egresstest.Internet
	cs    *fake.Clientset
	pods  *kubeproxy.Pods
	x     *egress.Explicit
	proxy string // host:port

	mu   sync.Mutex
	recs []egress.Record
}

func newEnv(t testing.TB, cfg egress.ExplicitConfig) *env {
	testenv.NeedRoot(t, "the test internet's network namespace")
	e := &env{in: egresstest.New(t), cs: fake.NewClientset()}
	var err error
	if e.pods, err = kubeproxy.NewPods(e.cs, ns, node); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); e.pods.Shutdown() })
	if err := e.pods.Start(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	e.waitWatch(t)
	ic := e.in.Config()
	cfg.Client, cfg.Hosts, cfg.AllowPrivate = e.pods.Client, ic.Hosts, ic.AllowPrivate
	cfg.OnConn = func(r egress.Record) { e.mu.Lock(); e.recs = append(e.recs, r); e.mu.Unlock() }
	if e.x, err = egress.NewExplicit(cfg); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.proxy = l.Addr().String()
	done := make(chan error, 1)
	go func() { done <- e.x.Serve(l) }()
	t.Cleanup(func() {
		e.x.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return e
}

// waitWatch returns once the informer's watch is live: the fake API
// server does not replay what happened between its list and its watch, so
// a pod created then would never be seen.
func (e *env) waitWatch(t testing.TB) {
	for i := 0; ; i++ {
		ip := fmt.Sprintf("127.0.1.%d", 1+i)
		e.addPod(t, fmt.Sprintf("sentinel-%d", i), ip, node, corev1.PodRunning, `["allowed.test"]`)
		if testenv.Eventually(3*time.Second, func() bool { _, _, err := e.pods.Client(netip.MustParseAddr(ip)); return err == nil }) {
			return
		}
		if i == 5 {
			t.Fatal("the pod watch never started")
		}
	}
}

// pod returns a sandbox pod; allow "-" means no annotation.
func pod(name, ip, nodeName string, phase corev1.PodPhase, allow string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:      map[string]string{kube.LabelName: kube.SandboxApp, kube.LabelManagedBy: kube.ManagedBy},
			Annotations: map[string]string{kube.AnnotationID: "sbx-" + name}},
		Spec:   corev1.PodSpec{NodeName: nodeName},
		Status: corev1.PodStatus{Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
	if allow != "-" {
		p.Annotations[kube.AnnotationAllow] = allow
	}
	return p
}

func (e *env) addPod(t testing.TB, name, ip, nodeName string, phase corev1.PodPhase, allow string) {
	t.Helper()
	if _, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), pod(name, ip, nodeName, phase, allow), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// seen waits until the proxy's view of ip satisfies ok.
func (e *env) seen(t testing.TB, ip string, ok func(id string, p egress.Policy, err error) bool) {
	t.Helper()
	if !testenv.Eventually(10*time.Second, func() bool { return ok(e.pods.Client(netip.MustParseAddr(ip))) }) {
		id, p, err := e.pods.Client(netip.MustParseAddr(ip))
		t.Fatalf("%s: the proxy still sees %q %v %v", ip, id, p, err)
	}
}

// dial connects to the proxy from src.
func (e *env) dial(t testing.TB, src string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp4", e.proxy)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

// request sends a raw request head from src and reads the answer; on 200
// to a CONNECT the connection stays open for the tunnel.
func (e *env) request(t testing.TB, src, head string) (*http.Response, string, net.Conn, *bufio.Reader) {
	t.Helper()
	c := e.dial(t, src)
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: strings.Fields(head)[0]})
	if err != nil {
		c.Close()
		t.Fatalf("%q from %s: %v", head, src, err)
	}
	if resp.StatusCode == 200 && strings.HasPrefix(head, "CONNECT") {
		return resp, "", c, br
	}
	b, _ := io.ReadAll(resp.Body)
	c.Close()
	return resp, string(b), nil, nil
}

// refused checks that a CONNECT from src is refused with status and a
// body containing why.
func (e *env) refused(t testing.TB, src, target string, status int, why string) {
	t.Helper()
	resp, body, _, _ := e.request(t, src, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	if resp.StatusCode != status || !strings.Contains(body, why) {
		t.Errorf("CONNECT %s from %s: %d %q, want %d and %q", target, src, resp.StatusCode, body, status, why)
	}
}

// client is an official net/http client using the proxy from src.
func (e *env) client(src string) *http.Client {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: e.proxy}),
		DialContext:     d.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: e.in.CertPool},
	}}
}

func get(t testing.TB, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %q", u, resp.Status, b)
	}
	return string(b)
}

func (e *env) records() []egress.Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]egress.Record(nil), e.recs...)
}

// TestExplicitProxy: pods reach exactly their allowlist, by CONNECT and by
// absolute-form HTTP, under the local engine's rules; everything else is
// refused with a clear HTTP error.
func TestExplicitProxy(t *testing.T) {
	e := newEnv(t, egress.ExplicitConfig{})
	const (
		podA      = "127.0.0.11" // allowed.test, api.allowed.test
		podNoAnn  = "127.0.0.12"
		podBadAnn = "127.0.0.13"
		podIPAnn  = "127.0.0.14"
		podRisky  = "127.0.0.15" // names that resolve to refused addresses
		podPend   = "127.0.0.16"
		podOther  = "127.0.0.17" // on another node
		stranger  = "127.0.0.99"
	)
	e.addPod(t, "a", podA, node, corev1.PodRunning, `["allowed.test","api.allowed.test"]`)
	e.addPod(t, "noann", podNoAnn, node, corev1.PodRunning, "-")
	e.addPod(t, "badann", podBadAnn, node, corev1.PodRunning, `["allowed.test",`)
	e.addPod(t, "ipann", podIPAnn, node, corev1.PodRunning, `["10.251.0.10"]`)
	e.addPod(t, "risky", podRisky, node, corev1.PodRunning, `["meta.test","private.test","self.test"]`)
	e.addPod(t, "pending", podPend, node, corev1.PodPending, `["allowed.test"]`)
	e.addPod(t, "elsewhere", podOther, "node-b", corev1.PodRunning, `["allowed.test"]`)
	e.seen(t, podRisky, func(_ string, p egress.Policy, err error) bool { return err == nil })

	t.Run("connect", func(t *testing.T) {
		c := e.client(podA)
		if got, want := get(t, c, "https://allowed.test/"), egresstest.Reply("allowed.test", "allowed.test", "allowed.test"); got != want {
			t.Errorf("https: %q, want %q", got, want)
		}
		// Bytes both ways: a body up, its digest down.
		body := bytes.Repeat([]byte("shellgate"), 1<<17)
		resp, err := c.Post("https://api.allowed.test/sink", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		sum := sha256.Sum256(body)
		if string(got) != egresstest.SinkReply(int64(len(body)), sum[:]) {
			t.Errorf("sink: %q", got)
		}
		c.CloseIdleConnections()
	})
	t.Run("absolute-form", func(t *testing.T) {
		c := e.client(podA)
		if got, want := get(t, c, "http://api.allowed.test/x"), egresstest.Reply("api.allowed.test", "api.allowed.test", ""); got != want {
			t.Errorf("http: %q, want %q", got, want)
		}
		// One client, connections to the proxy kept alive: each request
		// reaches its own host's server, or none.
		for _, h := range []string{"allowed.test", "api.allowed.test", "allowed.test"} {
			if got, want := get(t, c, "http://"+h+"/"), egresstest.Reply(h, h, ""); got != want {
				t.Errorf("http, one client: %q, want %q", got, want)
			}
		}
		if resp, err := c.Get("http://other.test/"); err != nil || resp.StatusCode != 403 {
			t.Errorf("http://other.test/ after allowed ones: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		c.CloseIdleConnections()
		resp, body, _, _ := e.request(t, podA, "GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
		if resp.StatusCode != 403 || !strings.Contains(body, "other.test is not in this sandbox's network allowlist") {
			t.Errorf("absolute-form to other.test: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		e.refused(t, podA, "other.test:443", 403, "other.test is not in this sandbox's network allowlist")
		e.refused(t, podA, "allowed.test:22", 403, "port 22 is not allowed")
		e.refused(t, podA, e.in.Addr("allowed.test").String()+":443", 403, "is an IP address; only allowlisted hostnames are reachable")
		e.refused(t, podNoAnn, "allowed.test:443", 403, "no shellgate.dev/allowed-domains annotation")
		e.refused(t, podBadAnn, "allowed.test:443", 403, "want a JSON array of hostnames")
		e.refused(t, podIPAnn, "allowed.test:443", 403, "IP addresses are not allowed")
		e.refused(t, stranger, "allowed.test:443", 403, "127.0.0.99 is not a running sandbox pod's address")
		e.refused(t, podPend, "allowed.test:443", 403, "is not a running sandbox pod's address")
		e.refused(t, podOther, "allowed.test:443", 403, "is not a running sandbox pod's address")
		e.refused(t, podRisky, "meta.test:443", 403, "meta.test resolves to 169.254.169.254, which is a cloud metadata address")
		e.refused(t, podRisky, "private.test:80", 403, "private.test resolves to 10.0.0.1, which is a private address")
		e.refused(t, podRisky, "self.test:443", 403, "self.test resolves to 127.0.0.1, which is an address of this host")
		resp, body, _, _ := e.request(t, podA, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(body, "send CONNECT host:443 or an absolute-form http:// request") {
			t.Errorf("origin-form: %d %q", resp.StatusCode, body)
		}
		resp, body, _, _ = e.request(t, podA, "GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "use CONNECT for https") {
			t.Errorf("absolute-form https: %d %q", resp.StatusCode, body)
		}
		// Not even an HTTP request: an answer, then the end.
		c := e.dial(t, podA)
		io.WriteString(c, "\x16\x03\x01\x00\x05hello\r\n\r\n")
		b, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(b), "HTTP/1.1 400 Bad Request") {
			t.Errorf("garbage: %q", b)
		}
	})
	t.Run("sni", func(t *testing.T) {
		// The tunnel is for allowed.test; TLS inside it names other.test.
		before := e.in.Hits("other.test", 443) + e.in.Hits("allowed.test", 443)
		_, _, c, _ := e.request(t, podA, "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
		tc := tls.Client(c, &tls.Config{ServerName: "other.test", RootCAs: e.in.CertPool})
		if err := tc.Handshake(); err == nil {
			t.Error("a TLS handshake for other.test through a tunnel to allowed.test succeeded")
		}
		tc.Close()
		if after := e.in.Hits("other.test", 443) + e.in.Hits("allowed.test", 443); after != before {
			t.Errorf("%d requests reached the servers", after-before)
		}
		found := testenv.Eventually(10*time.Second, func() bool {
			for _, r := range e.records() {
				if r.Verdict == egress.Denied && strings.Contains(r.Reason, "TLS server name other.test differs from the CONNECT host allowed.test") {
					return true
				}
			}
			return false
		})
		if !found {
			t.Error("no denied record for the SNI mismatch")
		}
	})
	t.Run("records", func(t *testing.T) {
		// A connection is reported when it ends: the clients' have.
		var allowed, denied int
		testenv.Eventually(10*time.Second, func() bool {
			n := 0
			for _, r := range e.records() {
				if r.Verdict == egress.Allowed {
					n++
				}
			}
			return n >= 3
		})
		for _, r := range e.records() {
			switch r.Verdict {
			case egress.Allowed:
				allowed++
				if r.Sandbox != "sbx-a" || r.Upstream == "" {
					t.Errorf("allowed record %+v", r)
				}
			case egress.Denied:
				denied++
			}
		}
		if allowed < 3 || denied < 14 {
			t.Errorf("%d allowed and %d denied records", allowed, denied)
		}
	})
}

// TestExplicitWatch: an allowlist changed on the pod applies from the next
// connection; a deleted pod's address is refused.
func TestExplicitWatch(t *testing.T) {
	e := newEnv(t, egress.ExplicitConfig{})
	const podA = "127.0.0.21"
	e.addPod(t, "a", podA, node, corev1.PodRunning, `["allowed.test"]`)
	e.seen(t, podA, func(_ string, _ egress.Policy, err error) bool { return err == nil })
	e.refused(t, podA, "other.test:443", 403, "not in this sandbox's network allowlist")

	p, err := e.cs.CoreV1().Pods(ns).Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[kube.AnnotationAllow] = `["allowed.test","other.test"]`
	if _, err := e.cs.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.seen(t, podA, func(_ string, p egress.Policy, _ error) bool { return p.Allows("other.test") })
	if got, want := get(t, e.client(podA), "https://other.test/"), egresstest.Reply("other.test", "other.test", "other.test"); got != want {
		t.Errorf("after the update: %q, want %q", got, want)
	}

	if err := e.cs.CoreV1().Pods(ns).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.seen(t, podA, func(_ string, _ egress.Policy, err error) bool { return err != nil })
	e.refused(t, podA, "allowed.test:443", 403, "127.0.0.21 is not a running sandbox pod's address")
}

// TestExplicitCaps: a pod's connections beyond MaxConnsPerClient are reset
// at once; other pods are not affected.
func TestExplicitCaps(t *testing.T) {
	e := newEnv(t, egress.ExplicitConfig{MaxConnsPerClient: 2})
	e.addPod(t, "a", "127.0.0.31", node, corev1.PodRunning, `["allowed.test"]`)
	e.addPod(t, "b", "127.0.0.32", node, corev1.PodRunning, `["allowed.test"]`)
	e.seen(t, "127.0.0.32", func(_ string, _ egress.Policy, err error) bool { return err == nil })
	// Six tunnels at once from one pod: whatever order the proxy counts
	// them in, at most two are open at any time, so at most two get
	// their 200 and the others a reset (which can come before connect(2)
	// returns on loopback).
	const n = 6
	var conns []net.Conn
	var opened, resets int
	for i := 0; i < n; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.31")}}
		c, err := d.Dial("tcp4", e.proxy)
		if err == nil {
			conns = append(conns, c)
			c.SetDeadline(time.Now().Add(30 * time.Second))
			_, err = io.WriteString(c, "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
		}
		if err != nil {
			if !strings.Contains(err.Error(), "reset") {
				t.Fatal(err)
			}
			resets++
		}
	}
	for _, c := range conns {
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
		switch {
		case err == nil && resp.StatusCode == 200:
			opened++
		case err != nil && strings.Contains(err.Error(), "reset"):
			resets++
		case err == nil:
			t.Errorf("CONNECT: %s", resp.Status)
		}
	}
	if opened > 2 || resets < n-2 || opened+resets != n {
		t.Errorf("%d tunnels opened and %d reset, want at most 2 opened and the rest reset", opened, resets)
	}
	if got := get(t, e.client("127.0.0.32"), "https://allowed.test/"); !strings.HasPrefix(got, "server=allowed.test") {
		t.Errorf("another pod: %q", got)
	}
	for _, c := range conns {
		c.Close()
	}
}
