package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

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
		out, err = listDir(ctx, fd, opts, MaxListScan)
		unix.Close(fd)
		return err
	})
	return out, err
}

// listDir lists one page below the directory open as fd, reading at most
// about maxScan entries.
func listDir(ctx context.Context, fd int, opts ListOptions, maxScan int) (FileList, error) {
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
		if strings.HasPrefix(e.name, uploadTempPrefix) {
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
	n, err := unix.Lgetxattr("/proc/self/fd/"+strconv.Itoa(dirfd)+"/"+name, sourceXattr, buf[:])
	return err == nil && string(buf[:n]) == "user"
}
