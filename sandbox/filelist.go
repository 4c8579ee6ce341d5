package sandbox

import (
	"context"
	"fmt"
	"github.com/shellgate/shellgate/sandbox/homefs"

	"golang.org/x/sys/unix"
)

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
