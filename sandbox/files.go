package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/shellgate/shellgate/internal/ctxio"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// WriteFile copies r into the named sandbox's home at rel (a relative path
// inside /workspace/home; missing directories are created), waking the
// sandbox if it sleeps. An unknown name is ErrNotFound: WriteFile never
// creates a sandbox (Create and Exec do). The path is resolved beneath the
// home with os.Root, so no "..", absolute path or symlink planted by the
// sandbox can lead outside it. Only a regular file is written: a FIFO,
// socket, device or directory the sandbox left at rel is refused without
// blocking (ErrNotRegular). The copy stops when ctx is done, and is refused
// or stopped below the disk reserve (ErrDiskReserve). The file belongs to
// the sandbox user.
func (m *Manager) WriteFile(ctx context.Context, name, rel string, r io.Reader) error {
	clean, err := homeRelPath(rel)
	if err != nil {
		return err
	}
	return m.withBox(ctx, name, func(ctx context.Context, b *box) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := m.wakeLocked(ctx, b, false); err != nil {
			return err
		}
		what := "write " + clean
		if err := m.checkReserve(what); err != nil {
			return err
		}
		return writeBeneath(hostHomeDir(b.inst.dir), clean, &reserveReader{m: m, what: what, r: ctxio.Reader(ctx, r)})
	})
}

// writeBeneath writes r to rel inside dir, resolving every path component
// beneath dir.
func writeBeneath(dir, clean string, r io.Reader) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	// Refuse what is not a regular file before opening it, with a clear
	// error; the open below does not block either way.
	if st, err := root.Lstat(clean); err == nil && !st.Mode().IsRegular() && st.Mode()&fs.ModeSymlink == 0 {
		return fmt.Errorf("write %s: %w (%s)", clean, ErrNotRegular, fileKind(st.Mode()))
	}
	if dir := path.Dir(clean); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("write %s: %w", clean, err)
		}
		// Directories created here belong to the sandbox user too.
		for d := dir; d != "."; d = path.Dir(d) {
			root.Lchown(d, runtime.UID, runtime.GID)
		}
	}
	// O_NONBLOCK: opening a FIFO for writing must not wait for a reader
	// (the sandbox may swap one in after the check above). O_TRUNC only
	// once the open file is known to be regular.
	f, err := root.OpenFile(clean, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			err = fmt.Errorf("%w (a FIFO or socket)", ErrNotRegular)
		}
		return fmt.Errorf("write %s: %w", clean, err)
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%w (%s)", ErrNotRegular, fileKind(st.Mode()))
	}
	if err == nil {
		err = f.Truncate(0)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", clean, err)
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Lchown(clean, runtime.UID, runtime.GID)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", clean, err)
	}
	return nil
}

var (
	// ErrTooLarge is returned by ReadFile for a file over the caller's cap.
	ErrTooLarge = errors.New("file too large")
	// ErrNotRegular is returned by ReadFile and WriteFile for a path that
	// is a FIFO, socket, device or directory.
	ErrNotRegular = errors.New("not a regular file")
)

// fileKind names what a non-regular file is, for error messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "not a regular file: " + m.Type().String()
}

// ReadFile reads a regular file at rel inside the named sandbox's home,
// waking the sandbox if it sleeps; an unknown name is ErrNotFound. Like
// WriteFile it resolves the path beneath the home; FIFOs, devices and
// directories are refused without blocking, and a file over maxBytes is
// ErrTooLarge.
func (m *Manager) ReadFile(ctx context.Context, name, rel string, maxBytes int64) ([]byte, error) {
	clean, err := homeRelPath(rel)
	if err != nil {
		return nil, err
	}
	var data []byte
	err = m.withBox(ctx, name, func(ctx context.Context, b *box) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := m.wakeLocked(ctx, b, false); err != nil {
			return err
		}
		data, err = readBeneath(ctx, hostHomeDir(b.inst.dir), clean, maxBytes)
		return err
	})
	return data, err
}

func readBeneath(ctx context.Context, dir, clean string, maxBytes int64) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := root.OpenFile(clean, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", clean, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: %w (%s)", clean, ErrNotRegular, fileKind(st.Mode()))
	}
	if st.Size() > maxBytes {
		return nil, fmt.Errorf("read %s: %w: %d bytes, the cap is %d", clean, ErrTooLarge, st.Size(), maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(ctxio.Reader(ctx, f), maxBytes+1))
	if err == nil && int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("read %s: %w: the cap is %d", clean, ErrTooLarge, maxBytes)
	}
	return data, err
}

// homeRelPath validates a path relative to /workspace/home (an absolute
// path under /workspace/home is accepted too).
func homeRelPath(p string) (string, error) {
	for _, prefix := range []string{runtime.HomeDir + "/", runtime.DataAlias + "/"} {
		if strings.HasPrefix(p, prefix) {
			p = strings.TrimPrefix(p, prefix)
			break
		}
	}
	if p == "" || strings.ContainsRune(p, 0) || path.IsAbs(p) {
		return "", fmt.Errorf("bad path %q: want a relative path inside %s", p, runtime.HomeDir)
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") || clean == "." {
		return "", fmt.Errorf("bad path %q: it leaves %s", p, runtime.HomeDir)
	}
	return clean, nil
}
