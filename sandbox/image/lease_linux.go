package image

// Versions and leases.
//
// Every build or import of a name makes a new version; the name is a
// symbolic link to its current one:
//
//	DATA/images/default -> .versions/default/20261201T030405.123Z-1a2b3c4d
//	DATA/images/.versions/default/20261201T030405.123Z-1a2b3c4d/image.json
//	DATA/images/.versions/default/20261201T030405.123Z-1a2b3c4d/rootfs/...
//	DATA/images/.versions/default/20261201T030405.123Z-1a2b3c4d/lease
//
// A sandbox holds a lease on the version it started from, as containerd's
// leases keep content alive: a shared flock on the version's lease file,
// held for the container's life. Locks are per open file, so they count
// across processes (the CLI and a server may share a data directory) and a
// process that dies releases its leases with it. A version that is not
// current and that nobody leases is garbage: it is removed when the last
// lease is released, or by the next store operation (Open, a build or
// import, Remove). Collecting a version takes its lease file exclusively
// (without waiting) and renames the directory away before unlocking, so a
// sandbox either leases a version before it is collected, or sees it gone
// and takes the current one.
//
// A store written before versions existed has a real directory at
// DATA/images/NAME: it is read as the name's current (unversioned) version
// and leased the same way; the next build or import of the name moves it
// among the versions in the same atomic exchange that switches the name.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/flock"
)

const (
	versionsDir = ".versions"
	leaseFile   = "lease"
	linkPrefix  = ".link-"
)

// ErrInUse is matched (errors.Is) by the error Remove returns for an image
// that running sandboxes hold.
var ErrInUse = errors.New("image is in use")

// InUseError is the error for removing an image that sandboxes run on;
// errors.Is(err, ErrInUse) holds for it.
type InUseError struct{ Name string }

func (e *InUseError) Error() string {
	return fmt.Sprintf("image %q is in use by running sandboxes: put them to sleep (or destroy them) first; a rebuild or re-import can replace it while they run", e.Name)
}

func (e *InUseError) Is(target error) bool { return target == ErrInUse }

var versionRE = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._-]{0,127}$`)

func newVersionID() string {
	return time.Now().UTC().Format("20060102T150405.000Z") + "-" + randHex()
}

func randHex() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// resolve returns the directory of name's current version and its id ("" for
// a store written before versions: then dir is DATA/images/NAME itself).
func (s *Store) resolve(name string) (dir, version string, err error) {
	link := filepath.Join(s.dir, name)
	fi, err := os.Lstat(link)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", &NotFoundError{Name: name}
	}
	if err != nil {
		return "", "", fmt.Errorf("image %q: %w", name, err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(link)
		if err != nil {
			return "", "", fmt.Errorf("image %q: %w", name, err)
		}
		version, ok := strings.CutPrefix(target, versionsDir+"/"+name+"/")
		if !ok || !versionRE.MatchString(version) {
			return "", "", fmt.Errorf("image %q: %s points to %q, not to one of its versions", name, link, target)
		}
		return filepath.Join(s.dir, versionsDir, name, version), version, nil
	case fi.IsDir():
		return link, "", nil
	}
	return "", "", &NotFoundError{Name: name}
}

// Current returns the id of name's current version ("" for an image
// installed before versions existed).
func (s *Store) Current(name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	_, v, err := s.resolve(name)
	return v, err
}

// Lease keeps one version of an image on disk while a sandbox runs on it.
type Lease struct {
	// Image is the leased version; its Rootfs stays valid until Release.
	Image *Image
	s     *Store
	f     *os.File
	once  sync.Once
}

// Acquire leases the current version of name. The caller must Release the
// lease when nothing uses the version any more (and only then).
func (s *Store) Acquire(name string) (*Lease, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	for range 20 {
		dir, version, err := s.resolve(name)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, leaseFile)
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
		if errors.Is(err, fs.ErrNotExist) {
			continue // collected meanwhile: the name has moved on
		}
		if err != nil {
			return nil, fmt.Errorf("image %q: lease: %w", name, err)
		}
		if err := flock.Lock(f, unix.LOCK_SH); err != nil {
			f.Close()
			return nil, fmt.Errorf("image %q: lease: %w", name, err)
		}
		// The version may have been collected (renamed away) or, for
		// the old layout, replaced between resolve and the lock.
		if !samePath(f, path) {
			flock.Unlock(f)
			continue
		}
		img, err := s.readAt(name, dir, version)
		if err != nil {
			flock.Unlock(f)
			return nil, err
		}
		return &Lease{Image: img, s: s, f: f}, nil
	}
	return nil, fmt.Errorf("image %q: changed too often to lease it", name)
}

// Release gives the version back; if it is no longer current and no other
// lease holds it, it is removed. Release is idempotent.
func (l *Lease) Release() {
	l.once.Do(func() {
		flock.Unlock(l.f)
		l.s.collect(l.Image.Name)
	})
}

// samePath tells whether f is still the file at path.
func samePath(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// switchTo makes version the current one of name. The caller holds name's
// lock.
func (s *Store) switchTo(name, version string) error {
	target := versionsDir + "/" + name + "/" + version // relative to s.dir
	link := filepath.Join(s.dir, name)
	fi, err := os.Lstat(link)
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	case err == nil && fi.IsDir():
		// The old layout: put a link to the new version among the
		// versions and exchange it with the old image in one step, so
		// the name always resolves and the old image becomes a version
		// that its leases keep.
		placeholder := filepath.Join(s.dir, versionsDir, name, newVersionID())
		if err := os.Symlink(target, placeholder); err != nil {
			return err
		}
		if err := unix.Renameat2(unix.AT_FDCWD, placeholder, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
			os.Remove(placeholder)
			return err
		}
		return nil
	case err == nil && fi.Mode()&fs.ModeSymlink == 0:
		return fmt.Errorf("%s is neither an image directory nor a link to a version", link)
	}
	tmp := filepath.Join(s.dir, linkPrefix+name+"-"+randHex()) // cleanStale's pattern
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil { // atomic replace
		os.Remove(tmp)
		return err
	}
	return nil
}

// collect removes name's unleased old versions unless a build or removal
// of the name runs (which collects when it is done).
func (s *Store) collect(name string) {
	if unlock, ok := s.tryLock(name); ok {
		s.collectLocked(name)
		unlock()
	}
}

// collectAll collects every name's old versions.
func (s *Store) collectAll() {
	ents, _ := os.ReadDir(filepath.Join(s.dir, versionsDir))
	for _, e := range ents {
		if ValidateName(e.Name()) == nil {
			s.collect(e.Name())
		}
	}
}

// collectLocked removes the versions of name that are neither current nor
// leased. The caller holds name's lock.
func (s *Store) collectLocked(name string) {
	current := ""
	if _, v, err := s.resolve(name); err == nil {
		current = v
	}
	vdir := filepath.Join(s.dir, versionsDir, name)
	ents, _ := os.ReadDir(vdir)
	var doomed []string
	var locks []*os.File
	for _, e := range ents {
		p := filepath.Join(vdir, e.Name())
		if e.Name() == current && current != "" {
			continue
		}
		if !e.IsDir() {
			os.Remove(p) // a placeholder link left by a crash
			continue
		}
		f, ok := lockUnused(p)
		if !ok {
			continue
		}
		doomed, locks = append(doomed, p), append(locks, f)
	}
	s.discard(name, doomed, locks)
	os.Remove(vdir) // only if empty
}

// lockUnused takes the lease file of the version in dir exclusively, without
// waiting: ok is false while a lease holds it.
func lockUnused(dir string) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(dir, leaseFile), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false
	}
	if err := flock.Lock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// discard renames dirs out of reach while their lease files are locked
// (so no lease can start on them), unlocks and deletes them.
func (s *Store) discard(name string, dirs []string, locks []*os.File) error {
	defer func() {
		for _, f := range locks {
			flock.Unlock(f)
		}
	}()
	if len(dirs) == 0 {
		return nil
	}
	trash, err := os.MkdirTemp(s.dir, oldPrefix+name+"-")
	if err != nil {
		return err
	}
	var errs []error
	for i, d := range dirs {
		errs = append(errs, os.Rename(d, filepath.Join(trash, fmt.Sprintf("%d-%s", i, filepath.Base(d)))))
	}
	for _, f := range locks {
		flock.Unlock(f)
	}
	locks = nil
	errs = append(errs, removeTree(trash))
	return errors.Join(errs...)
}

// Remove deletes an image: its name and every version. It fails with an
// error matching ErrInUse while a sandbox holds any version of it, and
// removes nothing then.
func (s *Store) Remove(name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	unlock, err := s.lock(name)
	if err != nil {
		return err
	}
	defer unlock()
	cur, _, err := s.resolve(name)
	if err != nil {
		return err
	}
	link := filepath.Join(s.dir, name)
	dirs := []string{cur}
	vdir := filepath.Join(s.dir, versionsDir, name)
	ents, _ := os.ReadDir(vdir)
	for _, e := range ents {
		if p := filepath.Join(vdir, e.Name()); e.IsDir() && p != cur {
			dirs = append(dirs, p)
		}
	}
	var locks []*os.File
	for _, d := range dirs {
		f, ok := lockUnused(d)
		if !ok {
			for _, l := range locks {
				flock.Unlock(l)
			}
			return &InUseError{Name: name}
		}
		locks = append(locks, f)
	}
	if cur != link { // the name is a link to a version
		if err := os.Remove(link); err != nil {
			for _, l := range locks {
				flock.Unlock(l)
			}
			return fmt.Errorf("remove image %q: %w", name, err)
		}
	}
	// With the old layout the name is the directory: discard renames it.
	if err := s.discard(name, dirs, locks); err != nil {
		return fmt.Errorf("remove image %q: %w", name, err)
	}
	s.collectLocked(name)
	return nil
}
