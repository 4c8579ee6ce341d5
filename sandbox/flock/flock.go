// Package flock takes and drops flock(2) locks on files, the way the
// sandbox packages use them: a sandbox's owner lock, the host-wide slot
// files of user-namespace ranges and egress networks, the image store's
// name locks and leases. The kernel drops a flock when its holder dies, so
// a lock that can be taken says its last owner is gone.
package flock

import (
	"os"

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
