package upstream

import (
	"sync"
	"time"
)

// Calls' timeouts share one timer per duration (a watch) instead of each
// call starting its own. Arming a runtime timer is not free: adding it to
// the timer heap can wake a sleeping thread of the Go scheduler (a futex
// wake) so that some thread polls the new deadline, and on this kind of
// machine that was ≈ 10–20 µs of a tool step (measured by
// BenchmarkGatewayStep's per-step timeline). With every call of a watch
// having the same duration, deadlines come in the order calls start (or
// are touched), so a list in that order has the earliest at its front and
// one timer, set for the front, is enough. The timer is left armed when
// the list empties: when it fires early it re-arms for the new front, so
// a steady stream of calls costs a list insertion each and one timer
// operation per duration, not one per call. Timeouts fire exactly on time.

// watch is the deadlines of the calls of one timeout duration.
type watch struct {
	limit time.Duration
	mu    sync.Mutex
	head  *call // earliest deadline first; linked by call.prev/next
	tail  *call
	timer *time.Timer
	fires time.Time // when the timer fires; zero: not armed
}

var watches sync.Map // time.Duration → *watch

func watchFor(limit time.Duration) *watch {
	if w, ok := watches.Load(limit); ok {
		return w.(*watch)
	}
	w, _ := watches.LoadOrStore(limit, &watch{limit: limit})
	return w.(*watch)
}

// add starts c's deadline: now + the watch's duration.
func (w *watch) add(c *call) {
	w.mu.Lock()
	c.deadline = time.Now().Add(w.limit)
	w.push(c)
	w.arm()
	w.mu.Unlock()
}

// touch restarts c's deadline (a streamed event arrived); nothing once c
// was cancelled or removed.
func (w *watch) touch(c *call) {
	w.mu.Lock()
	if c.watched {
		w.unlink(c)
		c.deadline = time.Now().Add(w.limit)
		w.push(c)
	}
	w.mu.Unlock()
}

// remove ends c's deadline.
func (w *watch) remove(c *call) {
	w.mu.Lock()
	if c.watched {
		w.unlink(c)
	}
	w.mu.Unlock()
}

func (w *watch) push(c *call) {
	c.watched, c.prev, c.next = true, w.tail, nil
	if w.tail != nil {
		w.tail.next = c
	} else {
		w.head = c
	}
	w.tail = c
}

func (w *watch) unlink(c *call) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		w.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		w.tail = c.prev
	}
	c.watched, c.prev, c.next = false, nil, nil
}

// arm makes sure the timer fires no later than the front's deadline (w.mu
// held). A timer already set to fire earlier is left alone.
func (w *watch) arm() {
	if w.head == nil || (!w.fires.IsZero() && !w.fires.After(w.head.deadline)) {
		return
	}
	d := time.Until(w.head.deadline)
	w.fires = w.head.deadline
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.fire)
	} else {
		w.timer.Reset(d)
	}
}

// fire cancels the calls whose deadline has passed and re-arms for the
// next one.
func (w *watch) fire() {
	var due []*call
	w.mu.Lock()
	w.fires = time.Time{}
	now := time.Now()
	for w.head != nil && !w.head.deadline.After(now) {
		c := w.head
		w.unlink(c)
		due = append(due, c)
	}
	w.arm()
	w.mu.Unlock()
	for _, c := range due {
		c.cancel(errTimeout)
	}
}
