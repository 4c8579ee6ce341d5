package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/ctxio"
	"github.com/shellgate/shellgate/sandbox/flock"
	"github.com/shellgate/shellgate/sandbox/home"
	"github.com/shellgate/shellgate/sandbox/homefs"
	"github.com/shellgate/shellgate/sandbox/mounts"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// Files in a home are reached by the host, never by a command: every call
// below holds the sandbox's lock (so no command runs, and the agent has
// killed every process of the last one), resolves paths beneath an os.Root
// of the mounted home (so no "..", absolute path or symlink planted by the
// sandbox leads outside it), opens with O_NONBLOCK and O_NOFOLLOW and
// serves only regular files (a FIFO, socket, device, directory or symlink
// at the path is ErrNotRegular, without blocking).
//
// None of them starts a sandbox. An awake sandbox's files are reached
// through its running container's home mount; a sleeping sandbox's home is
// mounted alone for the call, under the home's owner lock (so no other
// Shellgate process wakes it meanwhile; one that holds it awake makes the
// call ErrBusy), and unmounted before the lock is released. An unknown name
// is ErrNotFound: file calls never create a sandbox (Create and Exec do).

var (
	// ErrTooLarge is returned by ReadFile and OpenFile for a file over the
	// caller's cap.
	ErrTooLarge = homefs.ErrTooLarge
	// ErrNotRegular is returned for a path that is a FIFO, socket, device,
	// directory or symlink.
	ErrNotRegular = homefs.ErrNotRegular
	// ErrFileNotFound: nothing at that path in the home. It matches
	// fs.ErrNotExist too.
	ErrFileNotFound = homefs.ErrFileNotFound
	// ErrBadPath: the path is not a relative path inside the home.
	ErrBadPath = homefs.ErrBadPath
	// ErrTooManyFiles: a directory of the home has more than MaxDirEntries
	// entries.
	ErrTooManyFiles = homefs.ErrTooManyFiles
)

// The file types and bounds are homefs's, shared with the in-sandbox agent.
type (
	FileInfo    = homefs.FileInfo
	ListOptions = homefs.ListOptions
	FileList    = homefs.FileList
)

const (
	MaxListLimit  = homefs.MaxListLimit
	MaxListDepth  = homefs.MaxListDepth
	MaxListScan   = homefs.MaxListScan
	MaxDirEntries = homefs.MaxDirEntries
	MaxPathBytes  = homefs.MaxPathBytes
)

// withHome runs fn as one op on the named sandbox with the host path of
// its mounted home (see the comment at the top of this file).
func (m *Manager) withHome(ctx context.Context, name string, fn func(ctx context.Context, dir string) error) error {
	return m.withBox(ctx, name, func(ctx context.Context, b *box) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		dir, done, err := m.homeLocked(ctx, b)
		if err != nil {
			return err
		}
		defer done()
		return fn(ctx, dir)
	})
}

// homeLocked returns the host path of b's mounted home and what undoes
// that: nothing for an awake sandbox; for a sleeping one, its home is
// mounted alone (below run/sandboxes/ID, with an owner lock and meta.json
// like a container's, so that orphan cleanup unmounts it after a crash)
// and done unmounts it. The caller holds b's lock.
func (m *Manager) homeLocked(ctx context.Context, b *box) (dir string, done func(), err error) {
	if b.inst != nil {
		select {
		case <-b.inst.client.Done():
			// Died while idle: its home is unmounted, then mounted alone.
			if err := m.sleepLocked(ctx, b); err != nil {
				return "", nil, err
			}
		default:
			b.lastUsed = time.Now() // a file call is use
			return hostHomeDir(b.inst.dir), func() {}, nil
		}
	}
	if m.cfg.HomeArchive == nil {
		if err := m.statHome(b.name); err != nil {
			return "", nil, err
		}
	}
	unlockHome, err := m.lockHome(b.name)
	if err != nil {
		return "", nil, err
	}
	if err := m.restoreLocked(ctx, b.name, false); err != nil {
		unlockHome()
		return "", nil, err
	}
	// Another process may have destroyed it before we held the lock.
	if err := m.statHome(b.name); err != nil {
		unlockHome()
		return "", nil, err
	}
	sdir := filepath.Join(m.dirs.run, newID())
	var owner *os.File
	undo := func() {
		var errs []error
		if owner != nil {
			if err := unmountAll(sdir); err != nil {
				errs = append(errs, err)
			} else {
				errs = append(errs, mounts.RemoveTree(sdir))
				// The call may have written: the archive follows.
				if m.cfg.HomeArchive != nil {
					errs = append(errs, m.archiveHome(context.Background(), b.name))
				}
			}
			flock.Unlock(owner)
		}
		unlockHome()
		if err := errors.Join(errs...); err != nil {
			m.log.Warn("unmounting a home mounted for a file call", "sandbox", b.name, "dir", sdir, "err", err)
		}
	}
	err = m.withRunLock(unix.LOCK_EX, func() error {
		if err := os.Mkdir(sdir, 0o700); err != nil {
			return err
		}
		owner, err = flock.TryLock(filepath.Join(sdir, "owner.lock"))
		return err
	})
	if err == nil {
		mb, _ := json.Marshal(meta{Runtime: m.rt.Name(), Home: m.homePath(b.name)})
		err = os.WriteFile(filepath.Join(sdir, "meta.json"), mb, 0o600)
	}
	hd := hostHomeDir(sdir)
	if err == nil {
		err = os.MkdirAll(hd, 0o700)
	}
	if err == nil {
		err = home.Mount(m.homePath(b.name), hd)
	}
	if err == nil {
		err = os.Chmod(hd, 0o700)
	}
	if err != nil {
		if owner == nil {
			os.Remove(sdir)
		}
		undo()
		return "", nil, fmt.Errorf("mount the home of %s: %w", b.name, err)
	}
	b.homeOnly.Store(true)
	return hd, func() {
		b.homeOnly.Store(false)
		undo()
	}, nil
}

// WriteFile copies r into the named sandbox's home at rel (a relative path
// inside /workspace/home; missing directories are created). The bytes go
// to a temporary file beside rel that is renamed into place once complete,
// so a copy that fails or is cut short leaves what was at rel untouched. A
// FIFO, socket, device, directory or symlink at rel is refused
// (ErrNotRegular). The copy stops when ctx is done, and is refused or
// stopped below the disk reserve (ErrDiskReserve). The file belongs to the
// sandbox user and is marked as uploaded (FileInfo.Uploaded).
func (m *Manager) WriteFile(ctx context.Context, name, rel string, r io.Reader) error {
	_, err := m.PutFile(ctx, name, rel, r)
	return err
}

// PutFile is WriteFile that also describes the file written, in the same
// call (a sleeping sandbox's home is mounted once).
func (m *Manager) PutFile(ctx context.Context, name, rel string, r io.Reader) (FileInfo, error) {
	clean, err := homeRelPath(rel)
	if err != nil {
		return FileInfo{}, err
	}
	var info FileInfo
	err = m.withHome(ctx, name, func(ctx context.Context, dir string) error {
		what := "write " + clean
		if err := m.checkReserve(what); err != nil {
			return err
		}
		if err := homefs.WriteBeneath(dir, clean, &reserveReader{m: m, what: what, r: ctxio.Reader(ctx, r)}, runtime.UID, runtime.GID); err != nil {
			return err
		}
		f, fi, err := homefs.OpenBeneath(dir, clean)
		if err != nil {
			return err
		}
		info = fi
		return f.Close()
	})
	return info, err
}

// ReadFile reads a regular file at rel inside the named sandbox's home; a
// file over maxBytes is ErrTooLarge.
func (m *Manager) ReadFile(ctx context.Context, name, rel string, maxBytes int64) ([]byte, error) {
	f, err := m.OpenFile(ctx, name, rel, maxBytes)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return data, nil
}

// File is a regular file of a sandbox's home opened by OpenFile. It reads
// exactly Size bytes (the size when it was opened). The sandbox is held
// until Close: commands and other calls on it wait, so close it promptly.
type File struct {
	FileInfo
	r       io.Reader
	f       io.Closer
	release func()
	closed  bool
}

// NewFile is an open file of another backend: reads come from r (which
// must yield exactly info.Size bytes), and Close closes r.
func NewFile(info FileInfo, r io.ReadCloser) *File {
	return &File{FileInfo: info, r: r, f: r, release: func() {}}
}

func (f *File) Read(p []byte) (int, error) {
	if f.closed {
		return 0, os.ErrClosed
	}
	return f.r.Read(p)
}

// Close closes the file and lets the sandbox go on.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	err := f.f.Close()
	f.release()
	return err
}

// OpenFile opens the regular file at rel inside the named sandbox's home
// for streaming; a file over maxBytes is ErrTooLarge. Reading stops with
// ctx, or when the sandbox is destroyed or the manager closed (ErrDestroyed,
// ErrClosed). The caller must Close the file.
func (m *Manager) OpenFile(ctx context.Context, name, rel string, maxBytes int64) (*File, error) {
	clean, err := homeRelPath(rel)
	if err != nil {
		return nil, err
	}
	b, opCtx, release, err := m.hold(ctx, name)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*File, error) {
		release()
		if cause := stoppedBy(opCtx); cause != nil && ctx.Err() == nil {
			return nil, cause
		}
		return nil, err
	}
	if err := opCtx.Err(); err != nil {
		return fail(err)
	}
	dir, done, err := m.homeLocked(opCtx, b)
	if err != nil {
		return fail(err)
	}
	f, info, err := homefs.OpenBeneath(dir, clean)
	if err != nil {
		done()
		return fail(err)
	}
	if info.Size > maxBytes {
		f.Close()
		done()
		return fail(fmt.Errorf("read %s: %w: %d bytes, the cap is %d", clean, ErrTooLarge, info.Size, maxBytes))
	}
	return &File{
		FileInfo: info,
		r:        &stopReader{ctx: opCtx, r: io.LimitReader(f, info.Size)},
		f:        f,
		release:  func() { done(); release() },
	}, nil
}

// stopReader reads until ctx ends, then returns its cause (ErrDestroyed
// when Destroy stopped it).
type stopReader struct {
	ctx context.Context
	r   io.Reader
}

func (s *stopReader) Read(p []byte) (int, error) {
	if s.ctx.Err() != nil {
		if cause := stoppedBy(s.ctx); cause != nil {
			return 0, cause
		}
		return 0, s.ctx.Err()
	}
	return s.r.Read(p)
}

// StatFile describes the regular file at rel inside the named sandbox's
// home.
func (m *Manager) StatFile(ctx context.Context, name, rel string) (FileInfo, error) {
	clean, err := homeRelPath(rel)
	if err != nil {
		return FileInfo{}, err
	}
	var info FileInfo
	err = m.withHome(ctx, name, func(ctx context.Context, dir string) error {
		f, fi, err := homefs.OpenBeneath(dir, clean)
		if err != nil {
			return err
		}
		info = fi
		return f.Close()
	})
	return info, err
}

// RemoveFile deletes the regular file at rel inside the named sandbox's
// home; anything else at rel is ErrNotRegular and stays.
func (m *Manager) RemoveFile(ctx context.Context, name, rel string) error {
	clean, err := homeRelPath(rel)
	if err != nil {
		return err
	}
	return m.withHome(ctx, name, func(ctx context.Context, dir string) error {
		return homefs.RemoveBeneath(dir, clean)
	})
}

// HomeRelPath validates a path relative to /workspace/home (an absolute
// path under /workspace/home is accepted too) and cleans it: what every
// backend's file calls take.
func HomeRelPath(p string) (string, error) { return homeRelPath(p) }

func homeRelPath(p string) (string, error) {
	for _, prefix := range []string{runtime.HomeDir + "/", runtime.DataAlias + "/"} {
		if strings.HasPrefix(p, prefix) {
			p = strings.TrimPrefix(p, prefix)
			break
		}
	}
	return homefs.CleanRel(p)
}
