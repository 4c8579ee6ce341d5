package sandbox

import (
	"context"
	"fmt"
	"github.com/shellgate/shellgate/sandbox/homefs"

	"golang.org/x/sys/unix"
)

// HomeChanged says whether anything may have changed in the named
// sandbox's home since the previous call: false only when the sandbox is
// awake and its home's watch (fanotify on the home's filesystem) saw no
// write, close after writing, creation, rename or attribute change since
// then, so a caller can skip listing the home. Everything else — asleep,
// no watch, the first question after a wake, an overflowing queue — says
// true. Writes through a shared mapping that is never closed are not seen
// (mmap writers close their files when their process ends).
func (m *Manager) HomeChanged(ctx context.Context, name string) bool {
	changed := true
	m.withBox(ctx, name, func(ctx context.Context, b *box) error {
		if b.inst != nil {
			changed = b.inst.watch.changed()
		}
		return nil
	})
	return changed
}

// ListFiles returns one page of the regular files beneath the named
// sandbox's home, in lexicographic byte order of their paths (descending
// with Desc). The walk opens every directory relative to its parent with
// O_NOFOLLOW and O_DIRECTORY and reads entries with lstat semantics: it
// never follows a symlink, and lists only regular files (not symlinks,
// FIFOs, sockets or devices; not the file system's lost+found, nor an
// upload still being written). Like the other file calls it never starts a
// sandbox.
func (m *Manager) ListFiles(ctx context.Context, name string, opts ListOptions) (FileList, error) {
	if opts.Limit == 0 {
		opts.Limit = MaxListLimit
	}
	if opts.Limit < 1 || opts.Limit > MaxListLimit {
		return FileList{}, fmt.Errorf("list limit %d: want 1-%d", opts.Limit, MaxListLimit)
	}
	var out FileList
	err := m.withHome(ctx, name, func(ctx context.Context, dir string) error {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open home: %w", err)
		}
		out, err = homefs.ListDir(ctx, fd, opts, MaxListScan)
		unix.Close(fd)
		return err
	})
	return out, err
}
