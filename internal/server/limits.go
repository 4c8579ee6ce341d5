package server

import (
	"context"
	"errors"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// now is the server's clock (Config.Now).
func (s *Server) now() time.Time { return s.cfg.Now() }

// defaults are the limits of a container that asks for none: the sandbox
// manager's.
func (s *Server) defaults() Limits {
	d := s.mgr.Defaults()
	return Limits{CPUMillis: int64(d.Limits.CPUs * 1000), MemoryBytes: d.Limits.MemoryBytes,
		Processes: d.Limits.Processes, DiskBytes: d.HomeBytes}
}

// maxLimits are the most a container may ask for (Config.MaxLimits, its
// zero fields the defaults).
func (s *Server) maxLimits() Limits { return over(s.cfg.MaxLimits, s.defaults()) }

// effective are a container's limits with the defaults filled in.
func (s *Server) effective(l Limits) Limits { return over(l, s.defaults()) }

func over(l, def Limits) Limits {
	if l.CPUMillis == 0 {
		l.CPUMillis = def.CPUMillis
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = def.MemoryBytes
	}
	if l.Processes == 0 {
		l.Processes = def.Processes
	}
	if l.DiskBytes == 0 {
		l.DiskBytes = def.DiskBytes
	}
	return l
}

// sandboxSettings is the manager's SettingsFunc: a sandbox named by a
// container id starts with that container's limits (the record is the one
// source of them); any other sandbox (the CLI's) with the defaults.
func (s *Server) sandboxSettings(ctx context.Context, name string) (sandbox.Settings, error) {
	c, err := s.cfg.Containers.Find(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return sandbox.Settings{}, nil
	}
	if err != nil {
		return sandbox.Settings{}, err
	}
	l := c.Limits
	set := sandbox.Settings{
		Limits:    runtime.Limits{CPUs: float64(l.CPUMillis) / 1000, MemoryBytes: l.MemoryBytes, Processes: l.Processes},
		HomeBytes: l.DiskBytes,
	}
	set.Network = policyOf(c.NetworkPolicy)
	return set, nil
}

// policyOf is a record's network policy for the egress layer (nil: none).
func policyOf(np *NetworkPolicy) *egress.Policy {
	if np == nil || np.Type != egress.Allowlist {
		return nil
	}
	return &egress.Policy{Type: egress.Allowlist, AllowedDomains: np.AllowedDomains}
}

// networkMax is the most network a container of p's workspace may open:
// the operator's per-workspace setting, else the server-wide one; nil
// (the default) is none at all.
func (s *Server) networkMax(p Principal) *egress.Policy {
	if m, ok := s.cfg.NetworkAllowByWorkspace[p.Account+"/"+p.Workspace]; ok {
		return m
	}
	return s.cfg.NetworkAllow
}
