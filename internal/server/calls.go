package server

import (
	"context"
	"sync"
	"time"
)

// callLocks serialise whole exec calls per container: the manager already
// runs one command at a time per sandbox, but a call is several commands
// and must not interleave with another call's. A call waits a bounded time
// for the container, then gives up (the handler answers 409).
type callLocks struct {
	mu    sync.Mutex
	locks map[string]*callLock
}

type callLock struct {
	ch   chan struct{}
	refs int
}

func newCallLocks() *callLocks { return &callLocks{locks: map[string]*callLock{}} }

// acquire takes name's lock, waiting at most wait (or until ctx ends). ok
// is false when it gave up; release must be called after a true.
func (c *callLocks) acquire(ctx context.Context, name string, wait time.Duration) (release func(), ok bool) {
	c.mu.Lock()
	l := c.locks[name]
	if l == nil {
		l = &callLock{ch: make(chan struct{}, 1)}
		c.locks[name] = l
	}
	l.refs++
	c.mu.Unlock()

	drop := func() {
		c.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(c.locks, name)
		}
		c.mu.Unlock()
	}
	release = func() { <-l.ch; drop() }
	select {
	case l.ch <- struct{}{}:
		return release, true // free: no timer to make
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.ch <- struct{}{}:
		return release, true
	case <-t.C:
	case <-ctx.Done():
	}
	drop()
	return nil, false
}

// tryAcquire takes name's lock only if it is free now.
func (c *callLocks) tryAcquire(name string) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.locks[name]
	if l == nil {
		l = &callLock{ch: make(chan struct{}, 1)}
		c.locks[name] = l
	}
	select {
	case l.ch <- struct{}{}:
	default:
		if l.refs == 0 {
			delete(c.locks, name)
		}
		return nil, false
	}
	l.refs++
	return func() {
		<-l.ch
		c.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(c.locks, name)
		}
		c.mu.Unlock()
	}, true
}
