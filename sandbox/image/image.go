// Package image builds, imports and stores the root filesystems that
// sandboxes run on.
//
// A Store is a directory (Shellgate uses DATA/images). Each image NAME
// resolves to a directory holding image.json (the metadata) and rootfs (the
// tree):
//
//	DATA/images/default/image.json
//	DATA/images/default/rootfs/...
//
// NAME is a link to the image's current version: a rebuild or re-import
// makes a new version and switches the link, and running sandboxes keep the
// version they started from through a lease (lease_linux.go).
//
// A rootfs is owned by root and shared read-only by every sandbox: the
// runtime mounts it as the lower layer of an overlay. The store directory
// is private to root (0700), and no file in it keeps a setuid or setgid bit
// or a file capability: they are stripped from every build and import. Every image, however it
// was made, is prepared for that use (prepare.go): it has a user "sandbox"
// (uid 1000, gid 1000, home /workspace/home), the empty mount points
// /workspace/home and /.shellgate, and a world-writable sticky /tmp.
//
// Images are installed atomically: a build or import works in
// DATA/images/.tmp-NAME-XXXX and becomes a version, and current, only when
// complete, so a half-built image is never visible to Get, and a crash
// leaves only a hidden directory that the next Open removes.
//
// # Versions and leases
//
// Images are versioned and leased, like containerd's leases: a build or import
// makes a new version and switches the name's link; each container (pooled ones
// too) holds a shared flock on its version's lease file from start to stop, so
// the lease counts across processes and dies with its process. A version that is
// not current and not leased is deleted when its last lease is released or by
// the next store operation; `image rm` fails while any version is leased. The
// manager resolves the image when a container starts, not once at `Open`, and a
// pooled sandbox of a replaced version is discarded instead of handed out. A
// store written before versions (a real directory at `images/NAME`) is read as
// it is and moved among the versions by the next build.
package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Sandbox identity every image is prepared with.
const (
	SandboxUser = "sandbox"
	SandboxUID  = 1000
	SandboxGID  = 1000
	SandboxHome = "/workspace/home"
	// AgentDir is the empty mount point for Shellgate's in-sandbox agent.
	AgentDir = "/.shellgate"
)

// Image is one installed root filesystem.
type Image struct {
	Name string `json:"name"`
	// Version identifies this build or import of Name; empty for an image
	// installed before versions existed.
	Version string `json:"-"`
	// Rootfs is the absolute path of the tree (of this version). Treat it
	// as read-only; it stays in place while a Lease holds the version.
	Rootfs string `json:"-"`
	// Shell runs one command line when the command is appended, e.g.
	// ["/bin/bash", "-lc"], or ["/bin/sh", "-lc"] for busybox.
	Shell     []string  `json:"shell"`
	CreatedAt time.Time `json:"created_at"`
	// SizeBytes is the disk usage of the rootfs (hard links counted once).
	SizeBytes int64 `json:"size_bytes"`
	// Source says where the image came from, e.g. "debian bookworm (debootstrap minbase)".
	Source string `json:"source"`
	// BuildKey identifies the recipe of a built image; a build whose key
	// matches is skipped. Empty for imported images.
	BuildKey string `json:"build_key,omitempty"`
}

// ErrNotFound is matched (errors.Is) by the error Get and Remove return for
// an image that is not installed.
var ErrNotFound = errors.New("image not found")

// NotFoundError is the error for a missing image; errors.Is(err, ErrNotFound)
// holds for it.
type NotFoundError struct{ Name string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("image %q not found: run \"shellgate image build\" or \"shellgate image import\"", e.Name)
}

func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidateName reports whether name can name an image:
// [a-z0-9][a-z0-9._-]{0,62}.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("invalid image name %q: use 1-63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

const (
	metaFile  = "image.json"
	rootfsDir = "rootfs"
	tmpPrefix = ".tmp-"
	oldPrefix = ".old-"
)

// Store is a directory of images. Its methods are safe for concurrent use,
// also by several processes: builds and removals of one name are serialized
// with a lock file.
type Store struct {
	dir string
}

// Open opens (creating if needed) the image store in dir and removes what
// an interrupted build, import or removal left behind.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", dir, err)
	}
	// Private to root: nobody else on the host may reach the images'
	// files (sandboxes get them through mounts made by root).
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if err := os.Chmod(abs, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(abs, versionsDir), 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	s := &Store{dir: abs}
	s.cleanStale()
	s.collectAll()
	return s, nil
}

// Dir is the store's absolute directory.
func (s *Store) Dir() string { return s.dir }

// Get returns the current version of the installed image name, or an error
// matching ErrNotFound. Nothing keeps that version on disk: a sandbox that
// runs on it takes a Lease (Acquire) instead.
func (s *Store) Get(name string) (*Image, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	return s.read(name)
}

func (s *Store) read(name string) (*Image, error) {
	dir, version, err := s.resolve(name)
	if err != nil {
		return nil, err
	}
	return s.readAt(name, dir, version)
}

// readAt reads the version of name in dir.
func (s *Store) readAt(name, dir, version string) (*Image, error) {
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, &NotFoundError{Name: name}
	}
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("image %q: bad %s: %w", name, metaFile, err)
	}
	img.Name = name
	img.Version = version
	img.Rootfs = filepath.Join(dir, rootfsDir)
	if len(img.Shell) == 0 {
		return nil, fmt.Errorf("image %q: %s has no shell", name, metaFile)
	}
	return &img, nil
}

// List returns the installed images sorted by name.
func (s *Store) List() ([]Image, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	var out []Image
	for _, e := range ents {
		if !(e.IsDir() || e.Type()&fs.ModeSymlink != 0) || ValidateName(e.Name()) != nil {
			continue
		}
		img, err := s.read(e.Name())
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, *img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// stage is an image under construction in a hidden directory of the store.
type stage struct {
	s      *Store
	name   string
	dir    string // DATA/images/.tmp-NAME-XXXX
	rootfs string // dir/rootfs
	unlock func()
}

// begin locks name and creates an empty staging directory for it. The caller
// must call abort (harmless after commit).
func (s *Store) begin(name string) (*stage, error) {
	unlock, err := s.lock(name)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(s.dir, tmpPrefix+name+"-")
	if err != nil {
		unlock()
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	st := &stage{s: s, name: name, dir: dir, rootfs: filepath.Join(dir, rootfsDir), unlock: unlock}
	if err := os.Mkdir(st.rootfs, 0o755); err != nil {
		st.abort()
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	return st, nil
}

// commit writes image.json and moves the staged image into place, replacing
// an installed image of the same name in one atomic exchange.
func (st *stage) commit(img *Image) (*Image, error) {
	img.Name = st.name
	if img.CreatedAt.IsZero() {
		img.CreatedAt = time.Now().UTC()
	}
	// However the tree was made (import, debootstrap and package
	// scripts, busybox), no setuid, setgid or file capability reaches
	// the store.
	if _, err := stripPrivileges(st.rootfs); err != nil {
		return nil, fmt.Errorf("image %q: %w", st.name, err)
	}
	size, err := diskUsage(st.rootfs)
	if err != nil {
		return nil, fmt.Errorf("image %q: size: %w", st.name, err)
	}
	img.SizeBytes = size
	b, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(filepath.Join(st.dir, metaFile), append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("image %q: %w", st.name, err)
	}
	lease, err := os.OpenFile(filepath.Join(st.dir, leaseFile), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", st.name, err)
	}
	lease.Close()
	if err := os.Chmod(st.dir, 0o700); err != nil {
		return nil, fmt.Errorf("image %q: %w", st.name, err)
	}
	// The staged tree becomes a new version, then the current one. The
	// previous version stays while sandboxes lease it.
	version := newVersionID()
	vdir := filepath.Join(st.s.dir, versionsDir, st.name)
	if err := os.MkdirAll(vdir, 0o700); err != nil {
		return nil, fmt.Errorf("install image %q: %w", st.name, err)
	}
	dst := filepath.Join(vdir, version)
	if err := os.Rename(st.dir, dst); err != nil {
		return nil, fmt.Errorf("install image %q: %w", st.name, err)
	}
	st.dir = dst // removed by abort if the switch fails
	if err := st.s.switchTo(st.name, version); err != nil {
		return nil, fmt.Errorf("install image %q: %w", st.name, err)
	}
	st.dir = ""
	st.s.collectLocked(st.name)
	st.unlock()
	st.unlock = nil
	return st.s.readAt(st.name, dst, version)
}

// abort removes the staging directory (if not committed) and unlocks.
func (st *stage) abort() {
	if st.dir != "" {
		removeTree(st.dir)
		st.dir = ""
	}
	if st.unlock != nil {
		st.unlock()
		st.unlock = nil
	}
}

// cleanStale removes staging and removal leftovers whose owner is gone (its
// lock is free).
func (s *Store) cleanStale() {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		var rest string
		switch {
		case strings.HasPrefix(n, tmpPrefix):
			rest = n[len(tmpPrefix):]
		case strings.HasPrefix(n, oldPrefix):
			rest = n[len(oldPrefix):]
		case strings.HasPrefix(n, linkPrefix):
			rest = n[len(linkPrefix):]
		default:
			continue
		}
		i := strings.LastIndexByte(rest, '-')
		if i <= 0 || ValidateName(rest[:i]) != nil {
			continue
		}
		unlock, ok := s.tryLock(rest[:i])
		if !ok {
			continue // a build of that name is running
		}
		removeTree(filepath.Join(s.dir, n))
		unlock()
	}
}

func writeFileSync(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
