package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// The warm pool keeps PoolSize started sandboxes with fresh, empty homes.
// A new name takes one and renames its home image to the name's, so a new
// sandbox's first command pays neither container start nor mkfs. Sleeping
// sandboxes wake cold: their home must be mounted before the container
// starts.

// PoolReady is the number of pooled sandboxes ready now.
func (m *Manager) PoolReady() int {
	if m.pool == nil {
		return 0
	}
	return len(m.pool)
}

// fromPool takes a ready pooled sandbox, or nil. Pooled sandboxes of an
// image version that is no longer current (the image was rebuilt) are
// discarded: a new sandbox starts on the current one.
func (m *Manager) fromPool() *instance {
	if m.pool == nil {
		return nil
	}
	for {
		select {
		case inst := <-m.pool:
			cur, err := m.images.Current(m.cfg.Image)
			stale := err != nil || cur != inst.img.Version
			select {
			case <-inst.client.Done(): // died while pooled
				m.stopInstance(context.Background(), inst)
				os.Remove(inst.home)
				continue
			default:
				if stale {
					m.stopInstance(context.Background(), inst)
					os.Remove(inst.home)
					continue
				}
				return inst
			}
		default:
			return nil
		}
	}
}

// fillPool keeps the pool full until the manager closes, backing off when
// starting sandboxes fails. While the image is missing it looks for it
// again every imageRetry, so the pool fills once the image is built or
// imported.
func (m *Manager) fillPool() {
	defer m.bg.Done()
	backoff := 100 * time.Millisecond
	imageMissing := false
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		if len(m.pool) >= cap(m.pool) {
			select {
			case <-m.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if _, err := m.image(); err != nil {
			if !imageMissing {
				m.log.Warn("warm pool: waiting for the image", "err", err)
				imageMissing = true
			}
			select {
			case <-m.stop:
				return
			case <-time.After(imageRetry):
			}
			continue
		}
		imageMissing = false
		inst, err := m.newPooled(m.bgCtx)
		if err != nil {
			m.log.Warn("warm pool: cannot start a sandbox", "err", err)
			select {
			case <-m.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		select {
		case m.pool <- inst:
		case <-m.stop:
			m.stopInstance(context.Background(), inst)
			os.Remove(inst.home)
			return
		}
	}
}

// imageRetry is how often the pool looks for a missing image.
const imageRetry = time.Second

func (m *Manager) newPooled(ctx context.Context) (*instance, error) {
	cid := newID()
	home := filepath.Join(m.dirs.pool, cid+".img")
	if err := m.newHome(home, m.cfg.HomeBytes); err != nil {
		return nil, err
	}
	inst, err := m.startInstance(ctx, cid, home, m.cfg.Limits, nil, nil)
	if err != nil {
		return nil, errors.Join(err, os.Remove(home))
	}
	if err := m.warmUp(ctx, inst); err != nil {
		return nil, errors.Join(err, m.stopInstance(ctx, inst), os.Remove(home))
	}
	return inst, nil
}

// warmUp runs one `true` through the image's shell in a pooled sandbox
// before anyone takes it. A new sandbox's first commands are slower than
// later ones: the first fork/exec of the shell and its libraries and locale
// files fills caches (in gVisor the sentry's own page and dentry caches,
// per sandbox). Paying that while pooled keeps it off the first command of
// the sandbox's user. The command reads nothing from and writes nothing to
// the still empty home.
func (m *Manager) warmUp(ctx context.Context, inst *instance) error {
	ctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	out, err := inst.client.Exec(ctx, agent.ExecRequest{
		Shell: inst.img.Shell, Command: "true", Dir: runtime.HomeDir,
		TimeoutMs: warmUpTimeout.Milliseconds(), MaxBytes: 4096,
	}, nil)
	if err != nil {
		return fmt.Errorf("warm up pooled sandbox %s: %w", inst.cid, err)
	}
	if out.ExitCode != 0 || out.Error != "" {
		return fmt.Errorf("warm up pooled sandbox %s: `true` exited %d: %s%s", inst.cid, out.ExitCode, out.Error, out.Stderr)
	}
	return nil
}

// warmUpTimeout bounds the pool's warm-up command.
const warmUpTimeout = 30 * time.Second
