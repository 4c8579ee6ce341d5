package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// firewall installs and removes one slot's host-side rules. The rules of
// slot N only ever match its veth (sgeN), so they are independent of every
// other slot's and are removed as a whole.
//
// What they say, for the veth's host address H, the sandbox's address S and
// the endpoint's ports:
//
//	prerouting (nat):  from sgeN: tcp 80 → H:http, tcp 443 → H:tls,
//	                   udp/tcp 53 → H:dns, anything else → H (same port)
//	input (filter):    from sgeN: S → H on the endpoint's ports: accept;
//	                   other TCP: reset; other UDP: port unreachable;
//	                   the rest (ICMP, IPv6, spoofed sources): drop;
//	                   to H from any interface but sgeN and lo: drop
//	forward (filter):  to or from sgeN: drop
//
// Redirecting everything to H is what makes refusals prompt: a connection
// to any address on a port that is not served is answered by a reset from
// the host instead of vanishing into a routing drop.
type firewall interface {
	name() string
	install(r rules) error
	remove(slot int) error
	// slots lists the slots that have rules installed (for orphan cleanup).
	slots() ([]int, error)
}

// rules are one slot's parameters.
type rules struct {
	slot                       int
	iface                      string
	host, sandbox              netip.Addr
	httpPort, tlsPort, dnsPort uint16
}

const tablePrefix = "shellgate_egress_"

// newFirewall picks nftables when the kernel's nf_tables answers, else
// iptables (which must then be installed). force names one ("nftables",
// "iptables") for tests.
func newFirewall(force string) (firewall, error) {
	switch force {
	case "nftables":
		return newNFT()
	case "iptables":
		return newIPT()
	case "":
	default:
		return nil, fmt.Errorf("egress: unknown firewall %q (want nftables or iptables)", force)
	}
	if f, err := newNFT(); err == nil {
		return f, nil
	} else if ipt, err2 := newIPT(); err2 == nil {
		return ipt, nil
	} else {
		return nil, fmt.Errorf("egress: no firewall: nftables: %v; iptables: %v", err, err2)
	}
}

// nft speaks nf_tables over netlink (no nft binary needed).
type nft struct{}

func newNFT() (*nft, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	if _, err := c.ListTablesOfFamily(nftables.TableFamilyINet); err != nil {
		return nil, fmt.Errorf("nf_tables: %w", err)
	}
	return &nft{}, nil
}

func (*nft) name() string { return "nftables" }

func ifname(s string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, s)
	return b
}

func port(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }

// Expression helpers: each loads into register 1 and compares.
func matchIIF(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

func matchOIF(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

func matchIPv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

func matchL4(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

func matchDport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port(p)},
	}
}

func matchAddr(offset uint32, a netip.Addr, op expr.CmpOp) []expr.Any {
	b := a.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Cmp{Op: op, Register: 1, Data: b[:]},
	}
}

func redirTo(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: port(p)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var (
	accept  = []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	drop    = []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}
	tcpRST  = []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}
	unreach = []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH}}
)

func (*nft) install(r rules) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: tablePrefix + strconv.Itoa(r.slot)})
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	in := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter})
	fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	iif := matchIIF(r.iface)
	add := func(ch *nftables.Chain, e []expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }

	add(pre, cat(iif, matchIPv4(), matchL4(unix.IPPROTO_TCP), matchDport(80), redirTo(r.httpPort)))
	add(pre, cat(iif, matchIPv4(), matchL4(unix.IPPROTO_TCP), matchDport(443), redirTo(r.tlsPort)))
	add(pre, cat(iif, matchIPv4(), matchL4(unix.IPPROTO_TCP), matchDport(53), redirTo(r.dnsPort)))
	add(pre, cat(iif, matchIPv4(), matchL4(unix.IPPROTO_UDP), matchDport(53), redirTo(r.dnsPort)))
	add(pre, cat(iif, matchIPv4(), []expr.Any{&expr.Redir{}}))

	// Only the sandbox's own address, only to the host end, only the
	// endpoint's ports.
	add(in, cat(iif, matchIPv4(), matchAddr(12, r.sandbox, expr.CmpOpNeq), drop))
	add(in, cat(iif, matchIPv4(), matchAddr(16, r.host, expr.CmpOpNeq), matchL4(unix.IPPROTO_TCP), tcpRST))
	add(in, cat(iif, matchIPv4(), matchAddr(16, r.host, expr.CmpOpNeq), drop))
	for _, p := range []uint16{r.httpPort, r.tlsPort, r.dnsPort} {
		add(in, cat(iif, matchL4(unix.IPPROTO_TCP), matchDport(p), accept))
	}
	add(in, cat(iif, matchL4(unix.IPPROTO_UDP), matchDport(r.dnsPort), accept))
	add(in, cat(iif, matchL4(unix.IPPROTO_TCP), tcpRST))
	add(in, cat(iif, matchL4(unix.IPPROTO_UDP), unreach))
	add(in, cat(iif, drop))
	// The endpoint serves this sandbox only: its address is not reachable
	// from other interfaces (a LAN routing to the pool), loopback aside.
	add(in, cat(matchIPv4(), matchAddr(16, r.host, expr.CmpOpEq),
		[]expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(r.iface)}},
		[]expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname("lo")}},
		drop))

	add(fwd, cat(iif, drop))
	add(fwd, cat(matchOIF(r.iface), drop))
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: install rules of %s: %w", r.iface, err)
	}
	return nil
}

func (*nft) remove(slot int) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	name := tablePrefix + strconv.Itoa(slot)
	if _, err := c.ListTableOfFamily(name, nftables.TableFamilyINet); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("nftables: look up %s: %w", name, err)
	}
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nftables: delete %s: %w", name, err)
	}
	return nil
}

func (*nft) slots() ([]int, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, t := range ts {
		if n, ok := slotOf(t.Name, tablePrefix); ok {
			out = append(out, n)
		}
	}
	return out, nil
}

func slotOf(name, prefix string) (int, bool) {
	s, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0 && strconv.Itoa(n) == s
}

// ipt drives iptables(8) (and ip6tables for IPv6) where the kernel has no
// nf_tables. Slot N's rules live in its own chains SGE-N-PRE (nat), SGE-N-IN
// and SGE-N-FWD (filter), jumped to from the built-in chains for its veth.
type ipt struct{ v4, v6 string }

func newIPT() (*ipt, error) {
	v4, err := exec.LookPath("iptables")
	if err != nil {
		return nil, errors.New("iptables is not installed")
	}
	v6, _ := exec.LookPath("ip6tables")
	return &ipt{v4: v4, v6: v6}, nil
}

func (*ipt) name() string { return "iptables" }

func (f *ipt) run(bin string, args ...string) error {
	out, err := exec.Command(bin, append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func iptChain(slot int, kind string) string { return "SGE-" + strconv.Itoa(slot) + "-" + kind }

func (f *ipt) install(r rules) error {
	pre, in, fwd, guard := iptChain(r.slot, "PRE"), iptChain(r.slot, "IN"), iptChain(r.slot, "FWD"), iptChain(r.slot, "GRD")
	H, S, I := r.host.String(), r.sandbox.String(), r.iface
	p := func(n uint16) string { return strconv.Itoa(int(n)) }
	cmds := [][]string{
		{"-t", "nat", "-N", pre},
		{"-t", "nat", "-A", pre, "-p", "tcp", "--dport", "80", "-j", "REDIRECT", "--to-ports", p(r.httpPort)},
		{"-t", "nat", "-A", pre, "-p", "tcp", "--dport", "443", "-j", "REDIRECT", "--to-ports", p(r.tlsPort)},
		{"-t", "nat", "-A", pre, "-p", "tcp", "--dport", "53", "-j", "REDIRECT", "--to-ports", p(r.dnsPort)},
		{"-t", "nat", "-A", pre, "-p", "udp", "--dport", "53", "-j", "REDIRECT", "--to-ports", p(r.dnsPort)},
		{"-t", "nat", "-A", pre, "-j", "REDIRECT"},
		{"-N", in},
		{"-A", in, "!", "-s", S, "-j", "DROP"},
		{"-A", in, "!", "-d", H, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"},
		{"-A", in, "!", "-d", H, "-j", "DROP"},
		{"-A", in, "-p", "tcp", "-m", "multiport", "--dports", p(r.httpPort) + "," + p(r.tlsPort) + "," + p(r.dnsPort), "-j", "ACCEPT"},
		{"-A", in, "-p", "udp", "--dport", p(r.dnsPort), "-j", "ACCEPT"},
		{"-A", in, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"},
		{"-A", in, "-p", "udp", "-j", "REJECT", "--reject-with", "icmp-port-unreachable"},
		{"-A", in, "-j", "DROP"},
		{"-N", fwd},
		{"-A", fwd, "-j", "DROP"},
		{"-N", guard},
		{"-A", guard, "-i", I, "-j", "RETURN"},
		{"-A", guard, "-i", "lo", "-j", "RETURN"},
		{"-A", guard, "-j", "DROP"},
		{"-I", "INPUT", "-d", H, "-j", guard},
		{"-t", "nat", "-I", "PREROUTING", "-i", I, "-j", pre},
		{"-I", "INPUT", "-i", I, "-j", in},
		{"-I", "FORWARD", "-i", I, "-j", fwd},
		{"-I", "FORWARD", "-o", I, "-j", fwd},
	}
	for _, c := range cmds {
		if err := f.run(f.v4, c...); err != nil {
			return errors.Join(err, f.remove(r.slot))
		}
	}
	if f.v6 != "" {
		// IPv6 is off on the veth; this drops anything that gets through.
		for _, c := range [][]string{{"-I", "INPUT", "-i", I, "-j", "DROP"}, {"-I", "FORWARD", "-i", I, "-j", "DROP"}} {
			if err := f.run(f.v6, c...); err != nil {
				return errors.Join(err, f.remove(r.slot))
			}
		}
	}
	return nil
}

func (f *ipt) remove(slot int) error {
	I := ifaceName(slot)
	pre, in, fwd, guard := iptChain(slot, "PRE"), iptChain(slot, "IN"), iptChain(slot, "FWD"), iptChain(slot, "GRD")
	// Each jump is deleted until none is left; a missing chain or rule is
	// what a finished removal looks like.
	del := func(bin string, args ...string) {
		for i := 0; i < 8 && f.run(bin, args...) == nil; i++ {
		}
	}
	del(f.v4, "-t", "nat", "-D", "PREROUTING", "-i", I, "-j", pre)
	del(f.v4, "-D", "INPUT", "-i", I, "-j", in)
	del(f.v4, "-D", "FORWARD", "-i", I, "-j", fwd)
	del(f.v4, "-D", "FORWARD", "-o", I, "-j", fwd)
	// The guard's jump names the host address: find it by its target.
	if b, err := exec.Command(f.v4, "-w", "-S", "INPUT").Output(); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "-A INPUT "); ok && strings.HasSuffix(line, "-j "+guard) {
				f.run(f.v4, append([]string{"-D", "INPUT"}, strings.Fields(rest)...)...)
			}
		}
	}
	if f.v6 != "" {
		del(f.v6, "-D", "INPUT", "-i", I, "-j", "DROP")
		del(f.v6, "-D", "FORWARD", "-i", I, "-j", "DROP")
	}
	var errs []error
	for _, c := range [][]string{{"-t", "nat", "-F", pre}, {"-t", "nat", "-X", pre}, {"-F", in}, {"-X", in}, {"-F", fwd}, {"-X", fwd}, {"-F", guard}, {"-X", guard}} {
		if err := f.run(f.v4, c...); err != nil && !strings.Contains(err.Error(), "No chain") && !strings.Contains(err.Error(), "does not exist") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (f *ipt) slots() ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, table := range []string{"filter", "nat"} {
		b, err := exec.Command(f.v4, "-w", "-t", table, "-S").Output()
		if err != nil {
			return nil, fmt.Errorf("iptables -t %s -S: %w", table, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			name, ok := strings.CutPrefix(line, "-N SGE-")
			if !ok {
				continue
			}
			num, _, _ := strings.Cut(name, "-")
			if n, err := strconv.Atoi(num); err == nil && !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out, nil
}
