package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/flock"
)

// A slot is one /30 of the pool and everything named after its number N:
// the veth sgeN (its peer is eth0 inside the sandbox), the firewall table
// shellgate_egress_N (or iptables chains SGE-N-*), and the lock file
// SlotsDir/N. The lock is an exclusive flock held by the process whose
// sandbox uses the slot, so slots are host-wide: no two Shellgate processes
// hand out the same addresses. The file's content is non-empty while the
// slot's network exists; a free lock over a non-empty file is what a
// crashed process left, and whoever takes the lock next removes it first.
const (
	// SlotsDir holds one lock file per /30 slot of the host.
	SlotsDir = "/run/shellgate/egress/slots"
	// NSDir holds network namespaces the engine made itself (Start with
	// no namespace of the caller's).
	NSDir = "/run/shellgate/egress/netns"
	// ifacePrefix names the host end of slot N's veth.
	ifacePrefix = "sge"
	// PeerName is the sandbox's end of the veth.
	PeerName = "eth0"
)

func ifaceName(slot int) string { return ifacePrefix + strconv.Itoa(slot) }

// addrs returns the host end's and the sandbox's addresses of slot n.
func addrs(pool netip.Prefix, n int) (host, sandbox netip.Addr) {
	b := pool.Masked().Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v := base + uint32(n)*4
	mk := func(x uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
	}
	return mk(v + 1), mk(v + 2)
}

// slotCount is the number of /30s in the pool.
func slotCount(pool netip.Prefix) int {
	bits := 32 - pool.Bits() - 2
	if bits < 0 {
		return 0
	}
	return min(1<<bits, 1<<20)
}

// acquireSlot takes the lowest free slot (a /30 of the pool) and removes
// whatever a crashed owner left of it.
func (e *Engine) acquireSlot() (*flock.Slot, error) {
	s, err := flock.TakeSlot(SlotsDir, slotCount(e.cfg.Pool), func(n int, f *os.File) (bool, error) {
		if st, err := f.Stat(); err == nil && st.Size() > 0 {
			if err := e.teardownSlot(n, ""); err != nil {
				e.log.Warn("egress: slot left by a crashed process is not clean, skipping it", "slot", n, "err", err)
				return false, nil
			}
		}
		if err := f.Truncate(0); err != nil {
			return false, err
		}
		_, err := f.WriteAt([]byte("in use\n"), 0)
		return err == nil, err
	})
	if errors.Is(err, flock.ErrNoSlot) {
		return nil, fmt.Errorf("egress: no free network slot in %s", e.cfg.Pool)
	}
	return s, err
}

// teardownSlot removes slot n's veth, firewall rules and (when the engine
// made it) pinned namespace. Each part that is already gone is fine.
func (e *Engine) teardownSlot(n int, ownNS string) error {
	var errs []error
	if l, err := netlink.LinkByName(ifaceName(n)); err == nil {
		// Deleting one end of a veth deletes both.
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("delete %s: %w", ifaceName(n), err))
		}
	}
	if err := e.fw.remove(n); err != nil {
		errs = append(errs, err)
	}
	pin := ownNS
	if pin == "" {
		pin = filepath.Join(NSDir, strconv.Itoa(n))
	}
	if err := unpin(pin); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unpin unmounts and removes a pinned namespace file, if there is one.
func unpin(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// NewNetNS makes a network namespace (owned by the initial user namespace)
// and pins it at path, a bind mount of its nsfs file. The calling process's
// own namespace is unchanged.
func NewNetNS(path string) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o400)
	if err != nil {
		return err
	}
	f.Close()
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	err = onNSThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare network namespace: %w", err)
		}
		return nil
	}, func() error {
		return unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "", unix.MS_BIND, "")
	})
	if err != nil {
		return fmt.Errorf("pin network namespace at %s: %w", path, err)
	}
	return nil
}

// InNS runs fn on a thread inside the network namespace pinned at path:
// sockets it creates belong to that namespace.
func InNS(path string, fn func() error) error {
	return onNSThread(func() error {
		target, err := netns.GetFromPath(path)
		if err != nil {
			return err
		}
		defer target.Close()
		return netns.Set(target)
	}, fn)
}

// onNSThread runs fn on a locked OS thread that enter moved into another
// network namespace, then moves the thread back. A thread that cannot go
// back is never given back to the scheduler: it stays locked and dies with
// its goroutine.
func onNSThread(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			runtime.UnlockOSThread()
			return
		}
		defer orig.Close()
		ferr := enter()
		if ferr == nil {
			ferr = fn()
		}
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to the host network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// bigGSO is the kernel's largest GSO packet (GSO_MAX_SIZE, 8 × 65535).
const bigGSO = 8 * 65535

// setupVeth creates slot s's veth with its peer inside the namespace
// pinned at nsPath, addresses both ends, brings up the namespace's
// loopback and peer with a default route via the host end, and turns IPv6
// off on the host end (the firewall drops it too). With link.BigTCP both
// ends take IPv4 GSO packets of up to bigGSO (BIG TCP, Linux 6.3+): TCP
// then hands the veth one packet per ~360 segments instead of per ~45,
// which is what the proxy's CPU per byte mostly depends on.
func (e *Engine) setupVeth(s *flock.Slot, nsPath string, host, sb netip.Addr, link Link) error {
	nsh, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", nsPath, err)
	}
	defer nsh.Close()
	name := ifaceName(s.N)
	la := netlink.NewLinkAttrs()
	la.Name = name
	la.MTU = 1500
	veth := &netlink.Veth{LinkAttrs: la, PeerName: PeerName, PeerNamespace: netlink.NsFd(int(nsh))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", name, err)
	}
	// Before the link is up, so it never gets an IPv6 address.
	if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", name, "disable_ipv6"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("disable IPv6 on %s: %w", name, err)
	}
	hostEnd, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	if link.BigTCP {
		if err := netlink.LinkSetGSOIPv4MaxSize(hostEnd, bigGSO); err != nil {
			// Older kernels: only slower.
			e.log.Debug("egress: no BIG TCP on the sandbox's veth (needs Linux 6.3)", "err", err)
			link.BigTCP = false
		}
	}
	if err := netlink.AddrAdd(hostEnd, &netlink.Addr{IPNet: &net.IPNet{IP: host.AsSlice(), Mask: net.CIDRMask(30, 32)}}); err != nil {
		return fmt.Errorf("address %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(hostEnd); err != nil {
		return fmt.Errorf("bring up %s: %w", name, err)
	}
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return fmt.Errorf("netlink in the sandbox's namespace: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	peer, err := h.LinkByName(PeerName)
	if err != nil {
		return err
	}
	if link.BigTCP {
		if err := h.LinkSetGSOIPv4MaxSize(peer, bigGSO); err != nil {
			e.log.Debug("egress: no BIG TCP in the sandbox's namespace", "err", err)
		}
	}
	if err := h.AddrAdd(peer, &netlink.Addr{IPNet: &net.IPNet{IP: sb.AsSlice(), Mask: net.CIDRMask(30, 32)}}); err != nil {
		return fmt.Errorf("address %s in the sandbox: %w", PeerName, err)
	}
	if err := h.LinkSetUp(peer); err != nil {
		return fmt.Errorf("bring up %s in the sandbox: %w", PeerName, err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: host.AsSlice()}); err != nil {
		return fmt.Errorf("default route in the sandbox: %w", err)
	}
	return nil
}

// strayLinks lists the slots that have a veth on the host.
func strayLinks() []int {
	links, err := netlink.LinkList()
	if err != nil {
		return nil
	}
	var out []int
	for _, l := range links {
		if n, ok := slotOf(l.Attrs().Name, ifacePrefix); ok && l.Type() == "veth" {
			out = append(out, n)
		}
	}
	return out
}

// strayPins lists the slots that have a namespace pinned in NSDir.
func strayPins() []int {
	es, _ := os.ReadDir(NSDir)
	var out []int
	for _, e := range es {
		if n, err := strconv.Atoi(e.Name()); err == nil && !strings.ContainsAny(e.Name(), "+-") {
			out = append(out, n)
		}
	}
	return out
}
