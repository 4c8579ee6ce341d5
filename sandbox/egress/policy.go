// Package egress gives a sandbox network access to exactly the hostnames its
// policy names, on ports 80 and 443, and nothing else.
//
// A sandbox with an allowlist gets its own network namespace and a veth pair
// with a /30 of a private pool (netns_linux.go). Host-side firewall rules
// (nftables, or iptables where nf_tables is missing; firewall_linux.go)
// redirect its DNS and its TCP 80/443 to Shellgate's egress endpoint on the
// host end of the veth and refuse everything else: other ports (TCP reset),
// UDP (QUIC included; ICMP port unreachable), ICMP, IPv6, other sandboxes,
// the host's other services. The endpoint answers DNS itself (dns.go: names
// outside the policy are NXDOMAIN, nothing is forwarded) and proxies TCP
// (proxy.go): it reads the TLS server name (443) or the Host header (80)
// without terminating TLS, checks the policy, resolves the name with the
// host's resolver, refuses private, loopback, link-local and metadata
// addresses, connects and splices bytes both ways. Explicit proxying
// (CONNECT, or absolute-form requests, on port 80) follows the same rules.
//
// Enforcement is by name: whatever address the sandbox connects to, the
// connection goes to the address Shellgate resolves for the name it
// presents, so /etc/hosts tricks, IP literals and DNS tunnelling get
// nowhere.
//
// # How it works
//
// A sandbox without a policy has a network namespace the runtime makes, with
// only loopback. A sandbox with an allowlist (`egress.Policy`, from
// `Manager.SetNetwork` when it starts; pooled sandboxes never have one) gets:
//
//   - A slot: /30 number N of the pool (default `10.237.0.0/16`), held by
//     an exclusive flock on `/run/shellgate/egress/slots/N` for the sandbox's
//     life, so slots are host-wide across processes like the id ranges. The
//     file is non-empty while the slot's network exists: a free lock over a
//     non-empty file is a crashed process's, and whoever takes it next (or
//     `Engine.Sweep`, called by `Open`'s orphan cleanup) removes its veth and
//     rules first.
//   - A namespace and a veth: for crun and runc the network namespace is
//     made by the same `unshare --user --net` as the user namespace (owned by
//     it, so the runtimes, which join the user namespace first, can join it)
//     and pinned at `run/sandboxes/CID/netns`; runsc joins it by path with
//     `--network=sandbox` (gVisor's netstack takes over the interface). The veth
//     `sgeN` (host end `.1`, IPv6 off) has its peer `eth0` (`.2`, default route
//     via `.1`) inside; `/etc/resolv.conf` is a read-only bind naming `.1`.
//     For crun and runc both ends take IPv4 GSO packets of up to 512 KiB
//     (BIG TCP, `gso_ipv4_max_size`, Linux 6.3+; older kernels keep 64 KiB):
//     TCP then hands the veth one packet per ~360 segments instead of ~45, and
//     the per-packet work is most of what the proxy costs. runsc's veth keeps
//     64 KiB, the largest frame gVisor's netstack reads (`egress.Link`).
//   - Host rules per slot, in their own nftables table
//     `inet shellgate_egress_N` (netlink, no `nft` binary; iptables chains
//     `SGE-N-*` where nf_tables is missing): from `sgeN`, TCP 80 and 443 and
//     DNS are redirected to the endpoint's ports on `.1`, everything else to
//     `.1` itself, where input accepts only the endpoint's ports from the
//     sandbox's own address and answers the rest with a TCP reset or ICMP port
//     unreachable (ICMP, IPv6 and spoofed sources are dropped); forward drops
//     everything to or from `sgeN`; `.1` answers only on `sgeN` and loopback.
//     Nothing of a sandbox is ever forwarded: every packet ends at the host.
//   - The endpoint, in the Shellgate process, per sandbox: a DNS server
//     (UDP and TCP; allowed names get an A record of `.1`, other types an empty
//     answer, anything else NXDOMAIN; never forwarded) and two TCP listeners.
//     Port 443: the ClientHello is read (across records, at most 64 KiB, within
//     10 s) and its server name checked. Port 80: the request head's Host header,
//     or the authority of a CONNECT or absolute-form request (explicit proxy
//     use; CONNECT to 443 also requires the tunnel's server name to be the
//     CONNECT host). The name is resolved (`Config.Hosts` maps test names),
//     addresses that are private, loopback, link-local, CGNAT, NAT64/6to4,
//     the pool's, the host's own or cloud metadata are dropped
//     (`Config.AllowPrivate` re-admits ranges for tests; metadata and the pool
//     never), the first answering address is dialled, the bytes already read
//     are written, and both directions are copied with half-closes passed on:
//     a read of up to 512 KiB from one socket, a write of it to the other, with
//     buffers from a pool taken only while the connection has data (idle
//     connections hold none). Not splice(2): a spliced packet is assembled from
//     the pages the data arrived in, at most 17 fragments, so packets to the
//     sandbox stayed at 30–60 KiB whatever the veth allowed, and a proxied
//     download cost 1.4–1.9× the CPU of a direct one (now 0.97–1.12×;
//     BENCHMARKS.md). Refusals reset the connection. A connection is checked once, at its start: later requests
//     on a kept-alive port-80 connection, like a Host header inside TLS, reach
//     the same server, never another address. An absolute-form request (a
//     client using the endpoint as its proxy, which would send requests for
//     other hosts on the same connection) is passed on with `Connection: close`
//     and without `Proxy-*` headers (`oneRequest`), so each of those is checked
//     on its own connection. Each connection ends in a `Record` (kind, host, port,
//     verdict, reason, bytes, upstream) to the log, `Config.OnConn` and the
//     Prometheus counters of `Engine.Collectors`.
//   - Teardown (`Net.Close`, from `stopInstance` once the container is
//     deleted): listeners, DNS and every connection closed, veth (both ends)
//     and rules deleted, then the slot freed.
//
// Kubernetes mode (`egress.Explicit`, `sandbox/egress/kubeproxy`,
// `cmd/shellgate/egressproxy.go`; one per node, `deploy/kubernetes/04-egress-proxy.yaml`).
// Pods cannot get the veth and redirect rules, so a sandbox pod with an
// allowlist gets `HTTP(S)_PROXY` and a NetworkPolicy that lets it reach only
// this proxy's port. The connection handler is the endpoint's own
// (`handler` in `proxy_linux.go`, parametrised by an `owner`: a `Net`, whose
// connections are all its sandbox's, or an `Explicit`, which asks
// `ExplicitConfig.Client` for each connection's source address), with the
// same `upstream` (name resolution, refused addresses, dial) and `reporter`
// (log, `OnConn`, the two connection and byte counters); `explicit` mode
// accepts only CONNECT and absolute-form `http://` requests and turns every
// refusal before the tunnel into an HTTP status (400 malformed, 405 not a
// proxy request, 403 denied, 502 resolve or connect failed). A CONNECT is
// dialled before its `200`, then the tunnel's ClientHello is checked against
// the CONNECT host as on a sandbox's port 80. `kubeproxy.Pods` is an
// informer over the namespace's sandbox pods (label selector; field selector
// `spec.nodeName` with `--node`), indexed by `status.podIP(s)`; `Client`
// refuses addresses of no pod, of pods not Running, terminating, on another
// node, host-network or ambiguous, and a missing or invalid annotation (a
// JSON array validated as `Policy.Validate`). The policy is looked up per
// connection, so the watch's changes apply from the next one. Caps: 16384
// client connections in flight, 512 per source (reset at once), the 10 s
// head timeout and the dial timeout.
//
// Tests (`sandbox/egress`, `sandbox/sandboxtest/network.go`) build an
// "internet" in a namespace of their own (`egresstest`: HTTP, HTTPS with a
// self-signed certificate, DNS and UDP listeners that count what reaches
// them) and never address anything else: the policy cases on both firewalls
// at the engine level (with 24 MiB each way over HTTP and HTTPS arriving
// intact), the same cases with curl and python3 inside runsc, crun and runc
// sandboxes, a killed process's network removed by the next
// `Open`, and 200 create/destroy cycles leaving nothing behind.
package egress

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Policy types.
const (
	// Disabled: loopback only (the default).
	Disabled = "disabled"
	// Allowlist: the hostnames of AllowedDomains on ports 80 and 443.
	Allowlist = "allowlist"
)

// MaxDomains is the most entries an allowlist may have.
const MaxDomains = 50

// Policy is a sandbox's network policy, as the APIs carry it:
//
//	{"type":"disabled"}
//	{"type":"allowlist","allowed_domains":["pypi.org","*.pythonhosted.org"]}
//
// An entry is a hostname (exact match), a glob "*.example.com" (every
// subdomain of example.com at any depth, not example.com itself) or "*"
// (every hostname). Matching ignores case and a trailing dot. IP addresses
// are never matched: enforcement is by name.
type Policy struct {
	Type           string   `json:"type"`
	AllowedDomains []string `json:"allowed_domains,omitempty"`
}

// Enabled reports whether the policy opens any network access.
func (p *Policy) Enabled() bool { return p != nil && p.Type == Allowlist }

// ParsePolicy decodes and validates a policy; unknown fields are refused.
func ParsePolicy(b []byte) (Policy, error) {
	var p Policy
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("network_policy: %w", err)
	}
	if d.More() {
		return Policy{}, errors.New("network_policy: trailing data after the object")
	}
	return p, p.Validate()
}

// ErrInvalid is matched by every validation error.
var ErrInvalid = errors.New("invalid network_policy")

// Validate checks the policy's shape and every entry; the error names the
// first bad entry.
func (p Policy) Validate() error {
	switch p.Type {
	case Disabled:
		if len(p.AllowedDomains) > 0 {
			return fmt.Errorf("%w: allowed_domains is only for type \"allowlist\"", ErrInvalid)
		}
		return nil
	case Allowlist:
	case "":
		return fmt.Errorf("%w: type is required (\"disabled\" or \"allowlist\")", ErrInvalid)
	default:
		return fmt.Errorf("%w: unknown type %q (want \"disabled\" or \"allowlist\")", ErrInvalid, p.Type)
	}
	if len(p.AllowedDomains) == 0 {
		return fmt.Errorf("%w: allowed_domains must name at least one host", ErrInvalid)
	}
	if len(p.AllowedDomains) > MaxDomains {
		return fmt.Errorf("%w: allowed_domains has %d entries, at most %d", ErrInvalid, len(p.AllowedDomains), MaxDomains)
	}
	for _, d := range p.AllowedDomains {
		if err := validEntry(d); err != nil {
			return fmt.Errorf("%w: allowed_domains entry %q: %v", ErrInvalid, d, err)
		}
	}
	return nil
}

// validEntry checks one allowlist entry.
func validEntry(e string) error {
	if e == "*" {
		return nil
	}
	if strings.TrimSpace(e) == "" {
		return errors.New("empty name")
	}
	if strings.Contains(e, "://") || strings.ContainsAny(e, "/?#@") {
		return errors.New("a hostname, not a URL")
	}
	if _, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
		return errors.New("IP addresses are not allowed: name the host")
	}
	if strings.Contains(e, ":") {
		return errors.New("ports are not allowed: only 80 and 443 are reachable")
	}
	name := e
	if rest, ok := strings.CutPrefix(e, "*."); ok {
		name = rest
		if !strings.Contains(strings.TrimSuffix(name, "."), ".") {
			return errors.New("a glob must cover a domain with at least two labels (*.example.com)")
		}
	}
	if strings.Contains(name, "*") {
		return errors.New("'*' is allowed only as a whole entry or as the first label (*.example.com)")
	}
	if !validHostname(name) {
		return errors.New("not a valid hostname")
	}
	return nil
}

// validHostname checks letters, digits, '-' and '_' in labels of 1–63
// characters, at most 253 in all; a trailing dot is ignored. A name of
// digits and dots only is refused (an IPv4 address in some spelling).
func validHostname(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	allDigits := true
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '_':
				allDigits = false
			default:
				return false
			}
		}
	}
	return !allDigits
}

// Normalize lowercases a hostname and drops one trailing dot.
func Normalize(host string) string {
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// Allows reports whether the policy lets a sandbox reach host (a hostname
// as the sandbox presented it: DNS question, TLS server name, Host header,
// CONNECT authority). IP literals and invalid names are never allowed.
func (p *Policy) Allows(host string) bool {
	if !p.Enabled() {
		return false
	}
	h := Normalize(host)
	if !validHostname(h) {
		return false
	}
	for _, e := range p.AllowedDomains {
		if matches(Normalize(e), h) {
			return true
		}
	}
	return false
}

// matches reports whether a normalized entry covers a normalized host.
func matches(entry, host string) bool {
	switch {
	case entry == "*":
		return true
	case strings.HasPrefix(entry, "*."):
		return strings.HasSuffix(host, entry[1:]) // ".example.com": subdomains only
	default:
		return entry == host
	}
}

// covers reports whether every host entry e allows is allowed by max.
func (p *Policy) covers(e string) bool {
	e = Normalize(e)
	for _, m := range p.AllowedDomains {
		m = Normalize(m)
		switch {
		case m == "*", m == e:
			return true
		case strings.HasPrefix(m, "*.") && e != "*":
			// A host under the glob, or a narrower glob: "*.a.example.com"
			// (or "a.example.com") within "*.example.com".
			if strings.HasSuffix(strings.TrimPrefix(e, "*"), m[1:]) && strings.TrimPrefix(e, "*") != m[1:] {
				return true
			}
		}
	}
	return false
}

// Narrow checks that a request's policy stays within max, the most the
// operator lets a workspace open, and returns the policy to apply. A nil or
// disabled request is disabled. An entry max does not cover is an error
// naming it.
func Narrow(req *Policy, max *Policy) (Policy, error) {
	if req == nil || req.Type == Disabled {
		return Policy{Type: Disabled}, nil
	}
	if err := req.Validate(); err != nil {
		return Policy{}, err
	}
	if !max.Enabled() {
		return Policy{}, fmt.Errorf("%w: this workspace allows no network access (allowed_domains %q is outside it)", ErrNotPermitted, req.AllowedDomains[0])
	}
	for _, d := range req.AllowedDomains {
		if !max.covers(d) {
			return Policy{}, fmt.Errorf("%w: domain %q is not in this workspace's allowed domains", ErrNotPermitted, d)
		}
	}
	return Policy{Type: Allowlist, AllowedDomains: append([]string(nil), req.AllowedDomains...)}, nil
}

// ErrNotPermitted: a request asked for more than its workspace's maximum.
var ErrNotPermitted = errors.New("network_policy not permitted")

// Equal reports whether two policies allow the same entries (order, case
// and trailing dots aside). nil and disabled are equal.
func Equal(a, b *Policy) bool {
	if !a.Enabled() || !b.Enabled() {
		return a.Enabled() == b.Enabled()
	}
	set := map[string]bool{}
	for _, d := range a.AllowedDomains {
		set[Normalize(d)] = true
	}
	other := map[string]bool{}
	for _, d := range b.AllowedDomains {
		if !set[Normalize(d)] {
			return false
		}
		other[Normalize(d)] = true
	}
	return len(other) == len(set)
}
