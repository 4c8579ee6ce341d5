// Package kubehome keeps the homes of sleeping Kubernetes sandboxes in the
// server's storage (the S3 bucket of --storage, or a directory beside the
// data), file by file and incrementally: it is the kube.Archiver that
// `shellgate serve` gives its kubernetes backend.
//
// The home is read and written only through the pod's agent (its file
// requests: list, read, write), never a command, so the pod is treated as
// what it is, untrusted: the agent client checks every path, size and
// byte count it answers, and the archive checks the rest.
//
// Layout, in a homearchive.Objects key space (one per storage):
//
//	NAME/objects/SHA256   one object per distinct file content
//	NAME/manifest.json    the files: path, permission bits, size, SHA-256
//
// Archive lists the home's regular files (symlinks, FIFOs, sockets and
// devices are skipped, as are empty directories and anything deeper than
// homefs.MaxListDepth), reads each one once while hashing it (spooled to
// memory when small, else to an unlinked temporary file: memory stays
// bounded), uploads only the contents the previous manifest does not
// already list, and writes the manifest last, so a reader sees the old
// version or the new one whole. Objects only the old manifest named are
// then deleted. Restore reads the manifest, refuses a hostile one
// (absolute or unclean paths, "..", duplicates, a file where another
// needs a directory, too many files or bytes, a bad signature), and
// streams each object into the pod through a reader that checks size and
// SHA-256 as the bytes pass: a mismatch aborts that write before the
// agent renames it into place, so no unverified file ever appears. Delete
// removes a sandbox's manifest and objects (Destroy).
//
// A file whose name is not UTF-8 fails the archive (ErrName: the agent's
// file requests cannot read it), and the pod is kept. Modification times are not kept (a restored file is as new as its
// restore), nor owners (files belong to the commands' user).
//
// # How it works
//
// Home archive of pods (`sandbox/kube/kubehome`, wired by `serve` in
// `cmd/shellgate/storage.go`): a `homearchive.Objects` key space — S3
// `PREFIX/kubehomes/` (`s3store.Objects`) or `DATA/kubehomes` (`homearchive.Dir`);
// not `store.Blobs`, whose orphan sweep deletes blobs without a file record and
// whose Put cannot replace a manifest. Keys: `NAME/objects/SHA256` per distinct
// content, `NAME/manifest.json` (format, name, files: path bytes, permission
// bits, size, SHA-256; HMAC-SHA256 with `SHELLGATE_ARCHIVE_KEY`). Archive lists
// the home through the agent (regular files only; the agent skips symlinks,
// FIFOs, devices and upload temporaries), reads each file once while hashing it
// into a spool (memory up to 1 MiB, else an unlinked file in `DATA/run`), puts
// the contents the previous manifest does not list (4 at a time; equal contents
// once), writes the manifest, then deletes objects only the old one named.
// Restore validates the manifest (clean relative paths, strictly ordered so no
// duplicates, no file that is also another's directory, mode within 0777, the
// empty hash for empty files, file/byte/manifest-size limits, the signature)
// and streams each object into `agent.Client.PutFilePerm` through a reader that
// counts and hashes: a short, long or altered object fails the Read before the
// end, so the agent aborts the write and removes its temporary file. `Delete`
// removes the manifest first, then the objects (Destroy); `Has` is one
// `Exists` of the manifest key (false for a name no archive can hold). File entries and
// write requests carry permission bits (`mode`, omitted by older agents, which
// then write the default 0644). Non-UTF-8 names fail the archive (`ErrName`):
// the request's path is a JSON string, unlike the listing's bytes.
package kubehome

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/homefs"
	"github.com/shellgate/shellgate/sandbox/kube"
)

// Defaults of the limits.
const (
	DefaultMaxFiles         = 200_000
	DefaultMaxHomeBytes     = 1 << 40
	DefaultMaxManifestBytes = 64 << 20
	// memSpool: files up to this size are held in memory while archived;
	// larger ones go to a temporary file.
	memSpool = 1 << 20
)

// Errors.
var (
	// ErrCorrupt: the manifest is malformed or hostile, or an object does
	// not match its size or hash. Restore refused it.
	ErrCorrupt = errors.New("kubehome: archived home is corrupt")
	// ErrTooBig: the home has more files or bytes than the limits.
	ErrTooBig = errors.New("kubehome: home exceeds the archive's limits")
	// ErrName: a file's name is not UTF-8, which the agent's file requests
	// cannot name (it lists such names, but cannot read them). The archive
	// fails rather than lose the file; renaming it lets the pod sleep.
	ErrName = errors.New("kubehome: a file name in the home is not valid UTF-8 and cannot be archived")
)

// emptySHA256 is the SHA-256 of no bytes: an empty file needs no object.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// Archiver is a kube.Archiver over an object key space.
type Archiver struct {
	obj homearchive.Objects
	// Key, if set, signs manifests with HMAC-SHA256, and Restore refuses
	// one without a valid signature.
	Key []byte
	// TempDir holds the spool of large files while archived (default
	// os.TempDir()).
	TempDir string
	// Parallel is how many files move at once (default 4).
	Parallel int
	// Limits on a home, applied to Archive and to manifests read.
	MaxFiles         int
	MaxHomeBytes     int64
	MaxManifestBytes int64

	puts, bytesPut, gets, bytesGot, deletes atomic.Int64
}

var _ kube.Archiver = (*Archiver)(nil)

// New returns an Archiver over obj.
func New(obj homearchive.Objects) *Archiver {
	return &Archiver{obj: obj, Parallel: 4, MaxFiles: DefaultMaxFiles, MaxHomeBytes: DefaultMaxHomeBytes, MaxManifestBytes: DefaultMaxManifestBytes}
}

// Stats count what the Archiver moved: objects (not manifests) put and
// got, and objects deleted.
type Stats struct{ Puts, BytesPut, Gets, BytesGot, Deletes int64 }

// Stats returns the counters so far.
func (a *Archiver) Stats() Stats {
	return Stats{a.puts.Load(), a.bytesPut.Load(), a.gets.Load(), a.bytesGot.Load(), a.deletes.Load()}
}

// Manifest lists one archived home.
type Manifest struct {
	Format int    `json:"format"`
	Name   string `json:"name"`
	Files  []File `json:"files"`
	// MAC is the hex HMAC-SHA256, under Archiver.Key, of the manifest's
	// JSON with MAC empty.
	MAC string `json:"mac,omitempty"`
}

// File is one regular file of a home. Path is bytes: names need not be
// UTF-8, which JSON strings would mangle.
type File struct {
	Path   []byte `json:"path"`
	Mode   uint32 `json:"mode"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)
	hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func manifestKey(name string) string    { return name + "/manifest.json" }
func objectKey(name, sum string) string { return name + "/objects/" + sum }

func checkName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("kubehome: bad sandbox name %q", name)
	}
	return nil
}

// unsigned is m without its signature, as signed.
func (m Manifest) unsigned() *Manifest {
	m.MAC = ""
	return &m
}

// Validate checks an untrusted manifest of name against the limits.
func (a *Archiver) Validate(m *Manifest, name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: manifest of %s: %s", ErrCorrupt, name, fmt.Sprintf(format, args...))
	}
	if m.Format != 1 {
		return bad("format %d, want 1", m.Format)
	}
	if m.Name != name {
		return bad("it names %q", m.Name)
	}
	if len(m.Files) > a.MaxFiles {
		return bad("%d files, the limit is %d", len(m.Files), a.MaxFiles)
	}
	files := make(map[string]bool, len(m.Files))
	var total int64
	prev := ""
	for i, f := range m.Files {
		p := string(f.Path)
		// Archive never stores a name that is not UTF-8 (ErrName): the
		// agent's write could not name it either.
		if clean, err := homefs.CleanRel(p); err != nil || clean != p || p == "." || !utf8.ValidString(p) {
			return bad("path %q is not a clean relative path inside the home", p)
		}
		if i > 0 && p <= prev {
			return bad("path %q is a duplicate or out of order after %q", p, prev)
		}
		prev = p
		files[p] = true
		if f.Mode&^uint32(fs.ModePerm) != 0 {
			return bad("%q: mode %o is more than permission bits", p, f.Mode)
		}
		if f.Size < 0 || f.Size > a.MaxHomeBytes-total {
			return bad("%q: size %d is negative or past the home limit of %d bytes", p, f.Size, a.MaxHomeBytes)
		}
		total += f.Size
		if !hashRE.MatchString(f.SHA256) {
			return bad("%q: %q is not a SHA-256", p, f.SHA256)
		}
		if f.Size == 0 && f.SHA256 != emptySHA256 {
			return bad("%q: empty with the hash of something", p)
		}
	}
	// A file cannot also be a directory of another.
	for p := range files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if files[d] {
				return bad("%q is a file and a directory of %q", d, p)
			}
		}
	}
	return nil
}

// Load reads and validates the stored manifest of name; nil when none.
func (a *Archiver) Load(ctx context.Context, name string) (*Manifest, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	rc, err := a.obj.Get(ctx, manifestKey(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var m Manifest
	if err := homearchive.ReadManifest(rc, name, a.MaxManifestBytes, &m, ErrCorrupt); err != nil {
		return nil, err
	}
	if err := a.Validate(&m, name); err != nil {
		return nil, err
	}
	if err := homearchive.CheckSignature(a.Key, m.unsigned(), m.MAC, name, ErrCorrupt); err != nil {
		return nil, err
	}
	return &m, nil
}

// Archive saves the home of sandbox name (see the package comment).
func (a *Archiver) Archive(ctx context.Context, name string, h kube.Home) error {
	if err := checkName(name); err != nil {
		return err
	}
	c := h.Files()
	// The previous version's objects are known to be stored. One that
	// does not validate is ignored (and overwritten).
	old, err := a.Load(ctx, name)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return err
	}
	have := map[string]bool{}
	if old != nil {
		for _, f := range old.Files {
			have[f.SHA256] = true
		}
	}
	var list []homefs.FileInfo
	var total int64
	for after := ""; ; {
		page, err := c.ListFiles(ctx, h.Dir(), homefs.ListOptions{After: after})
		if err != nil {
			return fmt.Errorf("kubehome: listing the home of %s: %w", name, err)
		}
		for _, fi := range page.Files {
			if !utf8.ValidString(fi.Path) {
				return fmt.Errorf("%w: %q in %s", ErrName, fi.Path, name)
			}
			total += fi.Size
			if len(list) == a.MaxFiles || total > a.MaxHomeBytes {
				return fmt.Errorf("%w: %s has more than %d files or %d bytes", ErrTooBig, name, a.MaxFiles, a.MaxHomeBytes)
			}
			list = append(list, fi)
		}
		if !page.More {
			break
		}
		after = page.Next
	}
	files := make([]*File, len(list))
	st := &stored{have: have, putting: map[string]chan struct{}{}}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(a.Parallel, 1))
	for i, fi := range list {
		g.Go(func() (err error) {
			files[i], err = a.archiveFile(gctx, name, h, fi, st)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	m := &Manifest{Format: 1, Name: name, Files: make([]File, 0, len(files))}
	for _, f := range files {
		if f != nil { // nil: gone or no longer a regular file
			m.Files = append(m.Files, *f)
		}
	}
	if a.Key != nil {
		if m.MAC, err = homearchive.Sign(a.Key, m.unsigned()); err != nil {
			return err
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := a.obj.Put(ctx, manifestKey(name), bytes.NewReader(b), int64(len(b))); err != nil {
		return fmt.Errorf("kubehome: manifest of %s: %w", name, err)
	}
	// Objects only the old version named are garbage now.
	if old != nil {
		keep := map[string]bool{}
		for _, f := range m.Files {
			keep[f.SHA256] = true
		}
		for _, f := range old.Files {
			if !keep[f.SHA256] && f.Size > 0 {
				keep[f.SHA256] = true // once
				if err := a.obj.Delete(ctx, objectKey(name, f.SHA256)); err != nil {
					return fmt.Errorf("kubehome: deleting an old object of %s: %w", name, err)
				}
				a.deletes.Add(1)
			}
		}
	}
	return nil
}

// stored tracks which contents are in the store during one Archive, so
// that two files with the same bytes are put once.
type stored struct {
	mu      sync.Mutex
	have    map[string]bool
	putting map[string]chan struct{} // closed when that put ends
}

// claim tells whether the caller must put sum; it waits for another
// worker's put of the same bytes, and takes over if that one failed.
func (s *stored) claim(ctx context.Context, sum string) (bool, error) {
	for {
		s.mu.Lock()
		if s.have[sum] {
			s.mu.Unlock()
			return false, nil
		}
		w, busy := s.putting[sum]
		if !busy {
			s.putting[sum] = make(chan struct{})
			s.mu.Unlock()
			return true, nil
		}
		s.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// done ends the caller's put of sum.
func (s *stored) done(sum string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.have[sum] = true
	}
	close(s.putting[sum])
	delete(s.putting, sum)
}

// archiveFile reads one file of the home, hashing it, and puts its bytes
// unless they are stored already. nil, nil: the file is gone or no longer
// a regular file.
func (a *Archiver) archiveFile(ctx context.Context, name string, h kube.Home, fi homefs.FileInfo, st *stored) (*File, error) {
	fi0, r, err := h.Files().OpenFile(ctx, h.Dir(), fi.Path, a.MaxHomeBytes)
	if errors.Is(err, homefs.ErrFileNotFound) || errors.Is(err, homefs.ErrNotRegular) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubehome: reading %q of %s: %w", fi.Path, name, err)
	}
	defer r.Close()
	sp, err := a.spool(fi0.Size)
	if err != nil {
		return nil, err
	}
	defer sp.Close()
	hs := sha256.New()
	n, err := io.Copy(io.MultiWriter(sp, hs), r)
	if err != nil {
		return nil, fmt.Errorf("kubehome: reading %q of %s: %w", fi.Path, name, err)
	}
	if n != fi0.Size {
		return nil, fmt.Errorf("kubehome: reading %q of %s: %d bytes, the agent announced %d", fi.Path, name, n, fi0.Size)
	}
	f := &File{Path: []byte(fi.Path), Mode: uint32(fi0.Mode.Perm()), Size: n, SHA256: hex.EncodeToString(hs.Sum(nil))}
	if n == 0 {
		return f, nil
	}
	put, err := st.claim(ctx, f.SHA256)
	if err != nil || !put {
		return f, err
	}
	rs, err := sp.Reader()
	if err == nil {
		err = a.obj.Put(ctx, objectKey(name, f.SHA256), rs, n)
	}
	st.done(f.SHA256, err == nil)
	if err != nil {
		return nil, fmt.Errorf("kubehome: storing %q of %s: %w", fi.Path, name, err)
	}
	a.puts.Add(1)
	a.bytesPut.Add(n)
	return f, nil
}

// spool holds one file's bytes between reading and storing.
type spool interface {
	io.Writer
	Reader() (io.ReadSeeker, error)
	Close() error
}

func (a *Archiver) spool(size int64) (spool, error) {
	if size <= memSpool {
		return &memSpoolBuf{}, nil
	}
	f, err := os.CreateTemp(a.TempDir, ".shellgate-kubehome-*")
	if err != nil {
		return nil, fmt.Errorf("kubehome: spool: %w", err)
	}
	os.Remove(f.Name()) // unlinked at once: a crash leaves nothing
	return fileSpool{f}, nil
}

type memSpoolBuf struct{ bytes.Buffer }

func (m *memSpoolBuf) Reader() (io.ReadSeeker, error) { return bytes.NewReader(m.Bytes()), nil }
func (m *memSpoolBuf) Close() error                   { return nil }

type fileSpool struct{ *os.File }

func (f fileSpool) Reader() (io.ReadSeeker, error) {
	_, err := f.Seek(0, io.SeekStart)
	return f.File, err
}

// Restore writes the archived home of name into h; a sandbox never
// archived is left empty.
func (a *Archiver) Restore(ctx context.Context, name string, h kube.Home) error {
	m, err := a.Load(ctx, name)
	if err != nil || m == nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(a.Parallel, 1))
	for _, f := range m.Files {
		g.Go(func() error { return a.restoreFile(gctx, name, h, f) })
	}
	return g.Wait()
}

func (a *Archiver) restoreFile(ctx context.Context, name string, h kube.Home, f File) error {
	var src io.Reader = bytes.NewReader(nil)
	if f.Size > 0 {
		rc, err := a.obj.Get(ctx, objectKey(name, f.SHA256))
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s: the object of %q is missing", ErrCorrupt, name, f.Path)
		}
		if err != nil {
			return fmt.Errorf("kubehome: %s: the object of %q: %w", name, f.Path, err)
		}
		defer rc.Close()
		src = rc
		a.gets.Add(1)
	}
	v := &verifier{r: src, h: sha256.New(), want: f.SHA256, size: f.Size, what: string(f.Path)}
	fi, err := h.Files().PutFilePerm(ctx, h.Dir(), string(f.Path), v, f.Size, fs.FileMode(f.Mode))
	if v.err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, name, v.err)
	}
	if err != nil {
		return fmt.Errorf("kubehome: restoring %q of %s: %w", f.Path, name, err)
	}
	if fi.Size != f.Size {
		return fmt.Errorf("kubehome: restoring %q of %s: the pod has %d bytes, want %d", f.Path, name, fi.Size, f.Size)
	}
	a.bytesGot.Add(f.Size)
	return nil
}

// verifier passes an object's bytes through, failing instead of ending
// when they are not exactly size bytes with the SHA-256 want: the agent's
// write is then aborted before it is renamed into place.
type verifier struct {
	r    io.Reader
	h    hash.Hash
	want string
	size int64
	n    int64
	what string
	err  error
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	// One byte past the size is enough to know it is too long.
	if rest := v.size - v.n + 1; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := v.r.Read(p)
	v.n += int64(n)
	v.h.Write(p[:n])
	switch {
	case v.n > v.size:
		v.err = fmt.Errorf("the object of %q has more than its %d bytes", v.what, v.size)
		return 0, v.err
	case err == io.EOF && v.n != v.size:
		v.err = fmt.Errorf("the object of %q has %d bytes, want %d", v.what, v.n, v.size)
		return n, v.err
	case err == io.EOF && hex.EncodeToString(v.h.Sum(nil)) != v.want:
		v.err = fmt.Errorf("the object of %q does not match its SHA-256", v.what)
		return n, v.err
	}
	return n, err
}

// Has reports whether name has a stored manifest: one existence check
// (a HEAD on S3), the manifest neither read nor verified. A name Archive
// refuses has none.
func (a *Archiver) Has(ctx context.Context, name string) (bool, error) {
	if checkName(name) != nil {
		return false, nil
	}
	ok, err := a.obj.Exists(ctx, manifestKey(name))
	if err != nil {
		return false, fmt.Errorf("kubehome: looking for the archive of %s: %w", name, err)
	}
	return ok, nil
}

// Delete removes everything archived of name (kube.Backend.Destroy).
func (a *Archiver) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	// The manifest first: what remains of a failed Delete is unreachable
	// objects, never a manifest naming missing ones.
	if err := a.obj.Delete(ctx, manifestKey(name)); err != nil {
		return fmt.Errorf("kubehome: deleting the archive of %s: %w", name, err)
	}
	keys, err := a.obj.List(ctx, name+"/")
	if err != nil {
		return fmt.Errorf("kubehome: deleting the archive of %s: %w", name, err)
	}
	for _, k := range keys {
		if err := a.obj.Delete(ctx, k); err != nil {
			return fmt.Errorf("kubehome: deleting the archive of %s: %w", name, err)
		}
		a.deletes.Add(1)
	}
	return nil
}
