package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"
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

// fromPool takes a ready pooled sandbox, or nil.
func (m *Manager) fromPool() *instance {
	if m.pool == nil {
		return nil
	}
	for {
		select {
		case inst := <-m.pool:
			select {
			case <-inst.client.Done(): // died while pooled
				m.stopInstance(context.Background(), inst)
				os.Remove(inst.home)
				continue
			default:
				return inst
			}
		default:
			return nil
		}
	}
}

// fillPool keeps the pool full until the manager closes, backing off when
// starting sandboxes fails.
func (m *Manager) fillPool() {
	defer m.bg.Done()
	backoff := 100 * time.Millisecond
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
		inst, err := m.newPooled()
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

func (m *Manager) newPooled() (*instance, error) {
	cid := newID()
	home := filepath.Join(m.dirs.pool, cid+".img")
	if err := m.newHome(home); err != nil {
		return nil, err
	}
	inst, err := m.startInstance(context.Background(), cid, home)
	if err != nil {
		return nil, errors.Join(err, os.Remove(home))
	}
	return inst, nil
}
