// Package flock takes and drops flock(2) locks on files, the way the
// sandbox packages use them: a sandbox's owner lock, the host-wide slot
// files of user-namespace ranges and egress networks, the image store's
// name locks and leases. The kernel drops a flock when its holder dies, so
// a lock that can be taken says its last owner is gone.
package flock

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// TryLock creates path (mode 0600) if need be, opens it for reading and
// writing and takes an exclusive lock on it without waiting: a lock held
// elsewhere is unix.EWOULDBLOCK. The lock lives as long as the returned
// file (or the process); drop it with Unlock.
func TryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Lock takes a lock of kind how (unix.LOCK_SH or unix.LOCK_EX, with
// unix.LOCK_NB not to wait) on f, going on when a signal interrupts the
// wait.
func Lock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

// Unlock drops f's lock and closes f. The explicit LOCK_UN matters: a
// child forked by another goroutine (a runtime CLI being started) holds a
// copy of the descriptor until it execs, and a plain Close would leave the
// lock held by that copy for a moment.
func Unlock(f *os.File) {
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	f.Close()
}

// ErrNoSlot: every slot of the set is held or passed over.
var ErrNoSlot = errors.New("no free slot")

// Slot is one of a numbered set of host-wide slot files (dir/0, dir/1, …)
// that a process holds under an exclusive lock while it uses what the
// number stands for (a user-id range, a network). The holder writes a mark
// into the file; Release empties it. A file that has a mark but no holder
// is what a crashed process left: the next taker cleans up after it.
type Slot struct {
	N    int
	File *os.File
}

// TakeSlot takes the lowest-numbered of dir's first count slots that no
// process holds and that take accepts; dir is made if need be. take sees
// the locked file as its last holder left it: false passes the slot over
// (its lock is dropped), an error ends the search. ErrNoSlot when none is
// left.
func TakeSlot(dir string, count int, take func(n int, f *os.File) (bool, error)) (*Slot, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for n := 0; n < count; n++ {
		f, err := TryLock(filepath.Join(dir, strconv.Itoa(n)))
		if errors.Is(err, unix.EWOULDBLOCK) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ok, err := take(n, f)
		if err != nil {
			Unlock(f)
			return nil, err
		}
		if !ok {
			Unlock(f)
			continue
		}
		return &Slot{N: n, File: f}, nil
	}
	return nil, ErrNoSlot
}

// Release marks the slot clean (empties its file) and drops its lock. A
// nil or released slot is left alone.
func (s *Slot) Release() { s.drop(true) }

// Abandon drops the slot's lock and leaves its mark: what it stands for
// could not be cleaned up, and the next taker must.
func (s *Slot) Abandon() { s.drop(false) }

func (s *Slot) drop(clean bool) {
	if s == nil || s.File == nil {
		return
	}
	if clean {
		s.File.Truncate(0)
	}
	Unlock(s.File)
	s.File = nil
}
