// Package homefs reads and lists the files of a sandbox's home from
// outside any command: both the host (sandbox.Manager, on the mounted home)
// and the in-sandbox agent (sandbox/agent, for homes it alone can reach,
// such as a Kubernetes pod's) use it, so the confinement rules are written
// once. Every path is resolved beneath the home (os.Root or openat with
// O_NOFOLLOW), no symlink is followed, and only regular files are opened.
package homefs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var (
	// ErrTooLarge is returned by ReadFile and OpenFile for a file over the
	// caller's cap.
	ErrTooLarge = errors.New("file too large")
	// ErrNotRegular is returned for a path that is a FIFO, socket, device,
	// directory or symlink.
	ErrNotRegular = errors.New("not a regular file")
	// ErrFileNotFound: nothing at that path in the home. It matches
	// fs.ErrNotExist too.
	ErrFileNotFound error = fileNotFound{}
	// ErrBadPath: the path is not a relative path inside the home.
	ErrBadPath = errors.New("bad path")
)

type fileNotFound struct{}

func (fileNotFound) Error() string        { return "no such file in the home" }
func (fileNotFound) Is(target error) bool { return target == fs.ErrNotExist }

// SourceXattr marks a file the host wrote into a home (sandbox.Manager.WriteFile). The
// trusted namespace needs CAP_SYS_ADMIN on the host, so nothing inside a
// sandbox can set or forge it; it goes with the file's inode, so a command
// that replaces the file drops it.
const SourceXattr = "trusted.shellgate.source"

// UploadTempPrefix names the temporary file an upload is written to before
// it is renamed into place; listings skip it.
const UploadTempPrefix = ".shellgate-upload-"

// FileInfo describes a regular file in a sandbox's home.
type FileInfo struct {
	// Path is relative to /workspace/home and '/'-separated, byte for byte
	// as the file system has it: names may hold newlines or invalid UTF-8.
	Path    string
	Size    int64
	ModTime time.Time
	// Mode is the file's permission bits (0o777 at most).
	Mode fs.FileMode
	// Uploaded is set on a file the host wrote (WriteFile) and no command
	// has replaced since.
	Uploaded bool
}

// ListOptions select one page of ListFiles.
type ListOptions struct {
	// After resumes a listing: only paths after it in the listing's order
	// (FileList.Next of the previous page). Empty starts at the beginning.
	After string
	// Limit is the most files returned: 1–MaxListLimit, 0 means
	// MaxListLimit.
	Limit int
	// Desc lists in descending order.
	Desc bool
}

// FileList is one page of a home's files.
type FileList struct {
	Files []FileInfo
	// More is set when files may follow; Next is the After of the next
	// page: the last file's path, or, when the scan budget ran out first,
	// the last path the scan reached (which need not be a file: a
	// directory's ends in "/").
	More bool
	Next string
}

// Bounds of one ListFiles call: the home is the sandbox's to fill, so the
// work of listing it is capped.
const (
	// MaxListLimit is the most files one page holds.
	MaxListLimit = 1000
	// MaxListDepth: directories deeper below the home are not entered.
	MaxListDepth = 32
	// MaxListScan is the most directory entries one call reads; past it
	// the page ends early with More set.
	MaxListScan = 1 << 18
	// MaxDirEntries: a directory with more entries makes ListFiles fail
	// with ErrTooManyFiles (listing it in order means reading it whole).
	MaxDirEntries = 1 << 16
)

// ErrTooManyFiles: a directory of the home has more than MaxDirEntries
// entries.
var ErrTooManyFiles = errors.New("a directory in the home has too many entries to list")

// ListDir lists one page below the directory open as fd, reading at most
// about maxScan entries.
func ListDir(ctx context.Context, fd int, opts ListOptions, maxScan int) (FileList, error) {
	w := &walker{ctx: ctx, opts: opts, maxScan: maxScan}
	err := w.dir(fd, "", 0)
	if errors.Is(err, errPageFull) {
		err = nil
	}
	return FileList{Files: w.files, More: w.more, Next: w.last}, err
}

var errPageFull = errors.New("page full")

type walker struct {
	ctx   context.Context
	opts  ListOptions
	files []FileInfo
	more  bool
	// last is the key of the last entry visited (see dir), the Next of a
	// page cut short by the scan budget.
	last    string
	scanned int
	maxScan int
}

type dirent struct {
	name  string
	isDir bool
	key   string // the path, with "/" after a directory's
}

// dir lists the directory open as fd, whose path relative to the home is
// prefix ("" or ending in "/"), at depth below the home. It closes nothing.
//
// Order: a directory's entries are sorted by key — the name, plus "/" for a
// directory — so that a depth-first walk visits paths in lexicographic
// order: everything below "d" starts with "d/" and sorts right after the
// key "d/" and before any sibling that follows it. A directory's own key is
// visited before its entries when ascending and after them when
// descending, so keys only ever grow (or shrink) along the walk, and the
// last key visited is a cursor a later call resumes after.
func (w *walker) dir(fd int, prefix string, depth int) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	ents, err := readDir(fd, prefix)
	if err != nil {
		return err
	}
	w.scanned += len(ents)
	slices.SortFunc(ents, func(a, b dirent) int {
		if w.opts.Desc {
			return strings.Compare(b.key, a.key)
		}
		return strings.Compare(a.key, b.key)
	})
	after := w.opts.After
	for _, e := range ents {
		if e.isDir {
			if after != "" && w.skipDir(e.key, after) {
				continue
			}
			if prefix == "" && e.name == "lost+found" {
				continue
			}
			if err := w.budget(); err != nil {
				return err
			}
			if !w.opts.Desc {
				w.advance(e.key)
			}
			if depth+1 < MaxListDepth {
				sub, err := unix.Openat(fd, e.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
				if err == nil {
					err = w.dir(sub, e.key, depth+1)
					unix.Close(sub)
					if err != nil {
						return err
					}
				}
				// A directory that cannot be opened (swapped for a symlink,
				// gone) lists nothing.
			}
			if w.opts.Desc {
				w.advance(e.key)
			}
			continue
		}
		if after != "" && (!w.opts.Desc && e.key <= after || w.opts.Desc && e.key >= after) {
			continue
		}
		if strings.HasPrefix(e.name, UploadTempPrefix) {
			continue
		}
		if err := w.budget(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			w.advance(e.key)
			continue
		}
		if len(w.files) == w.opts.Limit {
			// The next page starts after the last file of this one.
			w.more, w.last = true, w.files[len(w.files)-1].Path
			return errPageFull
		}
		w.advance(e.key)
		w.files = append(w.files, FileInfo{
			Path:     e.key,
			Size:     st.Size,
			ModTime:  time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
			Mode:     fs.FileMode(st.Mode & 0o777),
			Uploaded: uploadedAt(fd, e.name),
		})
	}
	return nil
}

// skipDir tells whether the whole directory of key k lies on the already
// listed side of the cursor after.
func (w *walker) skipDir(k, after string) bool {
	if strings.HasPrefix(after, k) {
		// The cursor is the directory itself or inside it: ascending, its
		// entries after the cursor remain; descending, the directory's key
		// comes after its entries, so the directory itself is done only
		// when the cursor is its key.
		return w.opts.Desc && after == k
	}
	if w.opts.Desc {
		return after < k
	}
	return after > k
}

// advance moves the cursor to key when key lies past the caller's cursor
// (a directory that holds the cursor is entered again, but is not
// progress).
func (w *walker) advance(key string) {
	if a := w.opts.After; a == "" || !w.opts.Desc && key > a || w.opts.Desc && key < a {
		w.last = key
	}
}

// budget ends the page once the scan has read maxScan entries, unless the
// cursor has not moved past the caller's yet (then the page could not make
// progress: keep going).
func (w *walker) budget() error {
	if w.scanned > w.maxScan && w.last != "" {
		w.more = true
		return errPageFull
	}
	return nil
}

// readDir reads the entries of the directory open as fd (without closing
// it), with their types as the directory has them (no stat, no symlink
// followed). More than MaxDirEntries is ErrTooManyFiles.
func readDir(fd int, prefix string) ([]dirent, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	// A dup shares the offset: read from the start whatever read before.
	if _, err := unix.Seek(dup, 0, io.SeekStart); err != nil {
		return nil, err
	}
	var out []dirent
	for {
		batch, err := f.ReadDir(1024)
		for _, e := range batch {
			d := dirent{name: e.Name(), isDir: e.IsDir()}
			d.key = prefix + d.name
			if d.isDir {
				d.key += "/"
			}
			out = append(out, d)
		}
		if len(out) > MaxDirEntries {
			return nil, fmt.Errorf("%w: %q has more than %d", ErrTooManyFiles, strings.TrimSuffix(prefix, "/"), MaxDirEntries)
		}
		if err == io.EOF || len(batch) == 0 {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read directory %q: %w", prefix, err)
		}
	}
}

// uploadedAt reads the upload mark of the entry name in the directory open
// as dirfd without following a symlink (through the directory's
// /proc/self/fd link, which names exactly the directory already open).
func uploadedAt(dirfd int, name string) bool {
	var buf [8]byte
	n, err := unix.Lgetxattr("/proc/self/fd/"+strconv.Itoa(dirfd)+"/"+name, SourceXattr, buf[:])
	return err == nil && string(buf[:n]) == "user"
}

// FileKind names what a non-regular file is, for error messages.
func FileKind(m fs.FileMode) string {
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

// OpenBeneath opens the regular file clean inside dir for reading.
func OpenBeneath(dir, clean string) (*os.File, FileInfo, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, FileInfo{}, err
	}
	defer root.Close()
	// Say plainly what a non-regular file is. No command runs while the
	// sandbox's lock is held, so nothing swaps it before the open; the
	// open is safe on its own anyway: O_NONBLOCK, so a FIFO does not wait
	// for a writer, and O_NOFOLLOW, so a symlink is refused, not followed.
	if st, err := root.Lstat(clean); err != nil {
		return nil, FileInfo{}, OpenError("read", clean, err)
	} else if !st.Mode().IsRegular() {
		return nil, FileInfo{}, fmt.Errorf("read %s: %w (%s)", clean, ErrNotRegular, FileKind(st.Mode()))
	}
	f, err := root.OpenFile(clean, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, FileInfo{}, OpenError("read", clean, err)
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("read %s: %w (%s)", clean, ErrNotRegular, FileKind(st.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, FileInfo{}, err
	}
	info := FileInfo{Path: clean, Size: st.Size(), ModTime: st.ModTime(), Mode: st.Mode().Perm(), Uploaded: Uploaded(int(f.Fd()))}
	return f, info, nil
}

// OpenError says what an open beneath the home ran into.
func OpenError(op, clean string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s %s: %w", op, clean, ErrFileNotFound)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%s %s: %w (a symlink)", op, clean, ErrNotRegular)
	case errors.Is(err, syscall.ENXIO):
		return fmt.Errorf("%s %s: %w (a FIFO or socket)", op, clean, ErrNotRegular)
	case strings.Contains(err.Error(), "path escapes from parent"):
		return fmt.Errorf("%s %s: %w: it leads outside the home", op, clean, ErrBadPath)
	}
	return fmt.Errorf("%s %s: %w", op, clean, err)
}

func Uploaded(fd int) bool {
	var buf [8]byte
	n, err := unix.Fgetxattr(fd, SourceXattr, buf[:])
	return err == nil && string(buf[:n]) == "user"
}

// MaxPathBytes is the longest path a file call takes (Linux's PATH_MAX).
const MaxPathBytes = 4096

// homeDir is where every backend's sandboxes see their home (the runtime
// package's HomeDir; not imported, to keep the agent small), for errors.
const homeDir = "/workspace/home"

// CleanRel validates a path relative to a home and cleans it: not empty,
// no NUL, not absolute, at most MaxPathBytes, not leaving the home, no
// name over 255 bytes.
func CleanRel(p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) || path.IsAbs(p) || len(p) > MaxPathBytes {
		return "", fmt.Errorf("%w %q: want a relative path inside %s of at most %d bytes", ErrBadPath, p, homeDir, MaxPathBytes)
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") || clean == "." {
		return "", fmt.Errorf("%w %q: it leaves %s", ErrBadPath, p, homeDir)
	}
	for _, part := range strings.Split(clean, "/") {
		if len(part) > 255 {
			return "", fmt.Errorf("%w: a name of %d bytes (the most is 255)", ErrBadPath, len(part))
		}
	}
	return clean, nil
}

// WriteBeneath writes r to clean inside dir, resolving every path
// component beneath dir: to a temporary file beside clean, renamed into
// place once complete. A non-regular file at clean is ErrNotRegular. The
// directories it creates and the file are chowned to uid:gid unless uid is
// negative (a caller already writing as the owner), and the file is marked
// with SourceXattr where the caller may set it.
func WriteBeneath(dir, clean string, r io.Reader, uid, gid int) error {
	return WriteBeneathPerm(dir, clean, r, uid, gid, 0)
}

// WriteBeneathPerm is WriteBeneath that gives the file the permission
// bits perm (0o777 at most; 0: the default 0644 less the umask).
func WriteBeneathPerm(dir, clean string, r io.Reader, uid, gid int, perm fs.FileMode) error {
	if perm&^fs.ModePerm != 0 {
		return fmt.Errorf("write %s: %w: mode %v is more than permission bits", clean, ErrBadPath, perm)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if st, err := root.Lstat(clean); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("write %s: %w (%s)", clean, ErrNotRegular, FileKind(st.Mode()))
	}
	parent := path.Dir(clean)
	if parent != "." {
		if err := root.MkdirAll(parent, 0o755); err != nil {
			return OpenError("write", clean, err)
		}
		// Directories created here belong to the sandbox user too.
		for d := parent; uid >= 0 && d != "."; d = path.Dir(d) {
			root.Lchown(d, uid, gid)
		}
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := path.Join(parent, UploadTempPrefix+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return OpenError("write", clean, err)
	}
	committed := false
	defer func() {
		if !committed {
			root.Remove(tmp)
		}
	}()
	_, err = io.Copy(f, r)
	if err == nil && perm != 0 {
		err = f.Chmod(perm)
	}
	if err == nil && uid >= 0 {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		// Best effort: a home without xattrs lists the file as a command's.
		unix.Fsetxattr(int(f.Fd()), SourceXattr, []byte("user"), 0)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, clean)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", clean, err)
	}
	committed = true
	return nil
}

// RemoveBeneath deletes the regular file clean inside dir; anything else
// there is ErrNotRegular and stays.
func RemoveBeneath(dir, clean string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	st, err := root.Lstat(clean)
	if err != nil {
		return OpenError("remove", clean, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("remove %s: %w (%s)", clean, ErrNotRegular, FileKind(st.Mode()))
	}
	// No command runs while the sandbox's lock is held, so nothing can
	// swap the file between the check and the unlink (and unlink never
	// follows a symlink either way).
	if err := root.Remove(clean); err != nil {
		return OpenError("remove", clean, err)
	}
	return nil
}
