package sandbox

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"

	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// Settings are one sandbox's own resources. A zero field takes the
// manager's default (Config.Limits, Config.HomeBytes), field by field.
//
// They are asked for each time the sandbox starts — created or woken —
// through the manager's SettingsFunc, so whoever keeps the sandbox's
// record (the server's container store) stays the one source of them:
//
//	mgr.SetSettings(func(ctx context.Context, name string) (sandbox.Settings, error) {
//		rec, err := records.Find(ctx, name)
//		... // a name without a record runs on the defaults
//		return sandbox.Settings{Limits: runtime.Limits{MemoryBytes: rec.MemoryBytes}}, nil
//	})
//
// The limits apply from the sandbox's next start. HomeBytes is the size of
// the home when it is created; a home keeps its size afterwards.
type Settings struct {
	Limits    runtime.Limits
	HomeBytes int64
	// Network is the sandbox's egress policy; nil (or disabled) is
	// loopback only. Sandboxes with one never come from the warm pool.
	Network *egress.Policy
}

// SettingsFunc gives the named sandbox's settings when it starts. An error
// fails that start (the call that would have woken it returns it).
type SettingsFunc func(ctx context.Context, name string) (Settings, error)

// SetSettings makes f the source of every sandbox's settings from its next
// start on; nil goes back to the manager's defaults for all.
func (m *Manager) SetSettings(f SettingsFunc) {
	if f == nil {
		m.settingsFn.Store(nil)
		return
	}
	m.settingsFn.Store(&f)
}

// Defaults are the settings of a sandbox that has none of its own.
func (m *Manager) Defaults() Settings {
	return Settings{Limits: m.cfg.Limits, HomeBytes: m.cfg.HomeBytes}
}

// settingsFor resolves the named sandbox's settings: its own over the
// defaults, validated.
func (m *Manager) settingsFor(ctx context.Context, name string) (Settings, error) {
	var f SettingsFunc
	if p := m.settingsFn.Load(); p != nil {
		f = *p
	}
	return ResolveSettings(ctx, f, m.Defaults(), name)
}

// ResolveSettings is the named sandbox's settings from f (nil: none of its
// own) over def, validated: what every backend starts a sandbox with.
func ResolveSettings(ctx context.Context, f SettingsFunc, def Settings, name string) (Settings, error) {
	if f == nil {
		return def, nil
	}
	own, err := f(ctx, name)
	if err != nil {
		return Settings{}, fmt.Errorf("settings of sandbox %s: %w", name, err)
	}
	s := own.over(def)
	if err := s.Limits.Validate(); err != nil {
		return Settings{}, fmt.Errorf("settings of sandbox %s: %w", name, err)
	}
	if s.HomeBytes < 1<<20 {
		return Settings{}, fmt.Errorf("settings of sandbox %s: home of %d bytes: at least 1 MiB", name, s.HomeBytes)
	}
	if !s.Network.Enabled() {
		s.Network = nil
	} else if err := s.Network.Validate(); err != nil {
		return Settings{}, fmt.Errorf("network policy of sandbox %s: %w", name, err)
	}
	return s, nil
}

// over fills s's zero fields from def.
func (s Settings) over(def Settings) Settings {
	l, d := &s.Limits, def.Limits
	l.CPUs = cmp.Or(l.CPUs, d.CPUs)
	l.MemoryBytes = cmp.Or(l.MemoryBytes, d.MemoryBytes)
	l.Processes = cmp.Or(l.Processes, d.Processes)
	l.TmpBytes = cmp.Or(l.TmpBytes, d.TmpBytes)
	l.ShmBytes = cmp.Or(l.ShmBytes, d.ShmBytes)
	s.HomeBytes = cmp.Or(s.HomeBytes, def.HomeBytes)
	return s
}

// poolStats counts how new sandboxes started: from the warm pool (hits)
// or cold (misses: the pool was empty or off, or the sandbox's settings
// differ from the pooled sandboxes' defaults).
type poolStats struct{ hits, misses atomic.Uint64 }

// PoolSize is the number of started sandboxes the pool keeps ready
// (Config.PoolSize).
func (m *Manager) PoolSize() int { return m.cfg.PoolSize }

// PoolStats returns how many new sandboxes took a pooled sandbox (hits)
// and how many started cold (misses) since Open.
func (m *Manager) PoolStats() (hits, misses uint64) {
	return m.pstats.hits.Load(), m.pstats.misses.Load()
}
