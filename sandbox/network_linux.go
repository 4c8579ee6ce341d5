package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// A sandbox's network is fixed when it starts. Without a policy (or with
// {"type":"disabled"}) it has a network namespace of its own with only
// loopback, made by the runtime, as always. With an allowlist it runs in a
// network namespace the host makes, joined to the host by a veth that
// package egress sets up, and reaches exactly the names of its policy on
// ports 80 and 443 through Shellgate's egress endpoint.
//
// For crun and runc (which join the sandbox's user namespace first) the
// network namespace is made by the same unshare as the user namespace and
// is owned by it; runsc joins it by path and runs with --network=sandbox.
// With Config.SharedHostUser there is no user namespace and the engine
// makes the network namespace itself.

// Egress is the engine that gives sandboxes their networks, or the error
// that says why this host cannot (sandboxes with a policy then fail to
// start with it).
func (m *Manager) Egress() (*egress.Engine, error) { return m.egress, m.egressErr }

// openEgress takes the configured engine or makes one; a host that cannot
// enforce policies is not an error until a sandbox needs one.
func (m *Manager) openEgress() {
	if m.cfg.Egress != nil {
		m.egress = m.cfg.Egress
		return
	}
	m.egress, m.egressErr = egress.New(egress.Config{Logger: m.log})
	if m.egressErr != nil {
		m.log.Info("sandboxes with a network policy cannot start here", "err", m.egressErr)
	}
}

// sweepEgress removes the networks of sandboxes whose process is gone.
func (m *Manager) sweepEgress() error {
	if m.egress == nil {
		return nil
	}
	return m.egress.Sweep()
}

// startNetwork gives inst its network under pol, in the namespace pinned at
// netPin (empty: the engine makes one).
func (m *Manager) startNetwork(ctx context.Context, inst *instance, pol egress.Policy, netPin string) error {
	if m.egress == nil {
		return fmt.Errorf("sandbox network: %w", m.egressErr)
	}
	n, err := m.egress.Start(ctx, inst.cid, pol, netPin, egress.Link{BigTCP: m.rt.Name() != "runsc"})
	if err != nil {
		return err
	}
	inst.net = n
	return nil
}

// joinNetwork puts the container of inst into its network namespace and
// gives it a resolv.conf naming the egress endpoint.
func joinNetwork(spec *runtime.Config, inst *instance) error {
	path := inst.net.NetNS()
	if inst.slot != nil {
		// runc refuses namespace paths with a comma, which a data
		// directory may have: a link of the slot's, like the user
		// namespace's.
		link := filepath.Join(filepath.Dir(SlotsDir), "netns", strconv.Itoa(inst.slot.N))
		if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
			return err
		}
		tmp := link + ".new"
		os.Remove(tmp)
		if err := os.Symlink(path, tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, link); err != nil {
			return err
		}
		path = link
	}
	found := false
	for i, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			spec.Linux.Namespaces[i].Path = path
			found = true
		}
	}
	if !found {
		return errors.New("sandbox spec has no network namespace")
	}
	conf := filepath.Join(inst.dir, "resolv.conf")
	if err := os.WriteFile(conf, inst.net.ResolvConf(), 0o644); err != nil {
		return err
	}
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: conf,
		Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	return nil
}
