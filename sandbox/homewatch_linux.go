package sandbox

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// homeWatch tells whether anything in a mounted home changed since it was
// last asked: a fanotify group marking the home's whole filesystem (the
// home is its own ext4 image) for writes, closes after writing, creations,
// renames into place and attribute changes, reported by file handle (no
// descriptor of the sandbox's files is ever opened for an event). Asking
// costs one read(2) of a non-blocking descriptor, where listing the home
// costs a walk of it.
//
// Any doubt answers "changed": the first question after a wake, a full
// queue (the kernel's per-group event limit), a read error. A watch that
// cannot be made (an old kernel, the per-user fanotify group limit, no
// CAP_SYS_ADMIN) is nil, which also always answers "changed".
type homeWatch struct {
	mu    sync.Mutex
	fd    int
	fresh bool
}

const homeWatchMask = unix.FAN_MODIFY | unix.FAN_CLOSE_WRITE | unix.FAN_CREATE | unix.FAN_MOVED_TO | unix.FAN_ATTRIB | unix.FAN_ONDIR

// watchHome watches the filesystem mounted at dir, or returns nil.
func watchHome(dir string) *homeWatch {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_REPORT_FID|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil
	}
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, homeWatchMask, unix.AT_FDCWD, dir); err != nil {
		unix.Close(fd)
		return nil
	}
	return &homeWatch{fd: fd, fresh: true}
}

// changed drains the events queued since the last call and says whether
// there were any. A nil watch always says true.
func (w *homeWatch) changed() bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return true
	}
	any := w.fresh
	w.fresh = false
	var buf [8192]byte
	for {
		n, err := unix.Read(w.fd, buf[:])
		if n > 0 {
			any = true
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return any
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return true
	}
}

// close ends the watch (before the home is unmounted).
func (w *homeWatch) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}
