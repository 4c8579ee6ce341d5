// Package homearchive keeps copies of sleeping sandboxes' home images in
// object storage (S3, or a local directory), incrementally, so that any
// node can wake a sandbox and a wake moves only what changed.
//
// An image is cut into fixed chunks (ChunkBytes, 4 MiB). A chunk that is
// a hole in the sparse image, or all zero bytes, is not stored. Every
// other chunk is stored once under its SHA-256 (NAME/chunks/HASH); a
// manifest (NAME/manifest.json) lists the image's size and the hash of
// each non-zero chunk by index, and is written last, so a reader sees the
// previous version or the new one whole.
//
// Archive uploads only the chunks the bucket lacks: those of the version
// it last archived or restored are known to be there (when that version
// is still the bucket's manifest); others are asked for with one HEAD
// each. Restore fetches only the chunks whose hash differs from the local
// image (all of them when there is none), verifies each against its hash
// (and length) before anything is written, and writes them into the image
// in place, zeroing chunks the manifest does not list. A sidecar file
// beside the image (IMAGE.archive) records the manifest the image matches
// and the image's size and mtime then, so a wake on the node that put the
// sandbox to sleep transfers nothing but the manifest, and a wake on a node
// whose untouched copy is an older version compares manifests instead of
// reading the image.
//
// Manifests are untrusted input (the bucket may be shared or tampered
// with): their size, chunk size, indexes and hashes are checked, and keys
// are only ever built from validated hashes and sandbox names. With a Key,
// manifests carry an HMAC-SHA256 and one without a valid one is refused:
// since chunks are named by their hashes, whoever can write the bucket but
// lacks the key cannot make a node mount an image of their making.
//
// # How it works
//
//   - `sandbox/homearchive` archives home images into any `Objects` (S3, or a
//     local directory, `Dir`): 4 MiB chunks named by SHA-256, holes
//     (`SEEK_DATA`) and zero chunks skipped, a manifest written last. Archive
//     HEADs only chunks the previous version did not have and PUTs only those
//     missing; Restore hashes the local image, fetches the differing chunks
//     into an unlinked staging file, verifying each (length and hash), and only
//     then writes them in place (punching holes for chunks now zero); a new
//     image is built beside and renamed. A sidecar `NAME.img.archive` records
//     the manifest the image matches and its size and mtime then, so a
//     same-node wake moves only the manifest, and a wake on a node whose
//     untouched copy is an older version compares the two manifests instead of
//     reading the image. Restore records the image as handed out (it is
//     mounted next, and file times are too coarse to prove no write followed),
//     so only Archive's record, made with the home unmounted, vouches for an
//     image. An image whose record names the bucket's newest version is kept
//     as it is even if changed since (a failed archive, a crash while awake):
//     it can only be newer, and the next Archive sends the difference. Manifests are untrusted (size,
//     chunk size, ordered in-range indexes, lowercase hex hashes, a length cap,
//     one JSON object with no unknown fields: manifest.go's `ReadManifest`,
//     `Sign` and `CheckSignature`, which kubehome's manifests use too); keys
//     are built only from checked names and hashes.
//     With `Archive.Key` (`SHELLGATE_ARCHIVE_KEY`) a manifest carries an
//     HMAC-SHA256 of itself, which binds every chunk hash, so a bucket writer
//     without the key cannot have a node mount an image of their making.
//     `archivetest` is its conformance suite, run over `Dir` and S3. The
//     Manager sees only `sandbox.HomeArchive` (Archive, Restore, Delete):
//     `sleepLocked` archives after the container stops and before the home's
//     owner lock is released, `wakeLocked` and a file call on a sleeping
//     sandbox restore under that lock before the home is mounted.
//   - The checkpoint of a sleeping sandbox's running state (gVisor) is kept
//     the same way beside its home, file by file under NAME/checkpoint/
//     (checkpoint.go: `ArchiveCheckpoint`, `RestoreCheckpoint`,
//     `DeleteCheckpoint`, the Manager's `sandbox.CheckpointArchive`).
package homearchive

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Objects is a flat key space: an S3 bucket prefix (s3store.Objects) or a
// local directory (Dir). A missing key is fs.ErrNotExist from Get.
type Objects interface {
	Put(ctx context.Context, key string, r io.ReadSeeker, size int64) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Exists(ctx context.Context, key string) (bool, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, prefix string) ([]string, error)
}

// ErrNotArchived: the bucket holds no archive of that name.
var ErrNotArchived = fmt.Errorf("home is not archived: %w", fs.ErrNotExist)

// ErrCorrupt: the archive does not verify (a chunk's bytes do not match
// its hash, or the manifest is malformed). Nothing was written.
var ErrCorrupt = errors.New("home archive is corrupt")

// ChunkBytes is the chunk size.
const ChunkBytes = 4 << 20

// DefaultMaxImageBytes bounds the image size a manifest may claim.
const DefaultMaxImageBytes = 1 << 40

// Stats count what an Archive moved (for tests and benchmarks).
type Stats struct {
	ChunksPut, BytesPut, ChunksGot, BytesGot, Heads int64
}

// Archive archives and restores home images in one Objects.
type Archive struct {
	obj Objects
	// MaxImageBytes bounds what a manifest may claim (default
	// DefaultMaxImageBytes).
	MaxImageBytes int64
	// Parallel transfers (default 4).
	Parallel int
	// Key, if set, signs manifests, and Restore refuses a manifest
	// without a valid signature.
	Key []byte

	chunksPut, bytesPut, chunksGot, bytesGot, heads atomic.Int64
}

// New returns an Archive over obj.
func New(obj Objects) *Archive {
	return &Archive{obj: obj, MaxImageBytes: DefaultMaxImageBytes, Parallel: 4}
}

// Stats returns the counters so far.
func (a *Archive) Stats() Stats {
	return Stats{a.chunksPut.Load(), a.bytesPut.Load(), a.chunksGot.Load(), a.bytesGot.Load(), a.heads.Load()}
}

// Manifest describes one archived version of a home image.
type Manifest struct {
	Format     int     `json:"format"`
	Name       string  `json:"name"`
	ID         string  `json:"id"`
	Version    int64   `json:"version"`
	ImageBytes int64   `json:"image_bytes"`
	ChunkBytes int64   `json:"chunk_bytes"`
	Chunks     []Chunk `json:"chunks"`
	// MAC is the hex HMAC-SHA256, under Archive.Key, of the manifest's
	// JSON with MAC empty (omitted).
	MAC string `json:"mac,omitempty"`
}

// unsigned is m without its signature, as signed.
func (m Manifest) unsigned() *Manifest {
	m.MAC = ""
	return &m
}

// Chunk is one non-zero chunk: its index in the image and its SHA-256.
type Chunk struct {
	Index  int64  `json:"i"`
	SHA256 string `json:"sha256"`
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)
	hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	idRE   = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

func manifestKey(name string) string   { return name + "/manifest.json" }
func chunkKey(name, sum string) string { return name + "/chunks/" + sum }

// validate checks an untrusted manifest for name.
func (a *Archive) validate(m *Manifest, name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: manifest of %s: %s", ErrCorrupt, name, fmt.Sprintf(format, args...))
	}
	if m.Format != 1 {
		return bad("format %d, want 1", m.Format)
	}
	if m.Name != name {
		return bad("it names %q", m.Name)
	}
	if !idRE.MatchString(m.ID) || m.Version < 1 {
		return bad("bad id %q or version %d", m.ID, m.Version)
	}
	if m.ChunkBytes != ChunkBytes {
		return bad("chunk size %d, want %d", m.ChunkBytes, ChunkBytes)
	}
	if m.ImageBytes <= 0 || m.ImageBytes > a.MaxImageBytes {
		return bad("image size %d is outside 1..%d", m.ImageBytes, a.MaxImageBytes)
	}
	n := (m.ImageBytes + ChunkBytes - 1) / ChunkBytes
	prev := int64(-1)
	for _, c := range m.Chunks {
		if c.Index <= prev || c.Index >= n {
			return bad("chunk index %d out of order or beyond the image's %d chunks", c.Index, n)
		}
		if !hashRE.MatchString(c.SHA256) {
			return bad("chunk %d: %q is not a SHA-256", c.Index, c.SHA256)
		}
		prev = c.Index
	}
	return nil
}

// remote reads and validates the bucket's manifest of name.
func (a *Archive) remote(ctx context.Context, name string) (*Manifest, error) {
	rc, err := a.obj.Get(ctx, manifestKey(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotArchived, name)
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// 100 bytes a chunk is ample for {"i":N,"sha256":"…"}.
	limit := (a.MaxImageBytes/ChunkBytes+1)*100 + 4096
	var m Manifest
	if err := ReadManifest(rc, name, limit, &m, ErrCorrupt); err != nil {
		return nil, err
	}
	if err := a.validate(&m, name); err != nil {
		return nil, err
	}
	if err := CheckSignature(a.Key, m.unsigned(), m.MAC, name, ErrCorrupt); err != nil {
		return nil, err
	}
	return &m, nil
}

// sidecar is what IMAGE.archive records.
type sidecar struct {
	Manifest *Manifest `json:"manifest"`
	Size     int64     `json:"size"`
	MtimeNS  int64     `json:"mtime_ns"`
}

func sidecarPath(image string) string { return image + ".archive" }

// readSidecar returns the manifest image matched when last archived or
// restored, and whether the image is unchanged since.
func (a *Archive) readSidecar(image, name string) (m *Manifest, unchanged bool) {
	b, err := os.ReadFile(sidecarPath(image))
	if err != nil {
		return nil, false
	}
	var s sidecar
	if json.Unmarshal(b, &s) != nil || s.Manifest == nil || a.validate(s.Manifest, name) != nil {
		return nil, false
	}
	st, err := os.Stat(image)
	if err != nil {
		return nil, false // the image is gone: the record is of nothing
	}
	return s.Manifest, st.Size() == s.Size && st.ModTime().UnixNano() == s.MtimeNS
}

// writeSidecar records that image matches m. handedOut says the image is
// about to be used (Restore: it is mounted next): its chunks are m's now,
// but not for long, and file times are too coarse (a jiffy) to tell a
// write right after from none, so the record says "m, until modified" with
// a size no file has, and the next Archive or Restore reads the image.
// Archive records the image as it stays (asleep).
func writeSidecar(image string, m *Manifest, handedOut bool) error {
	st, err := os.Stat(image)
	if err != nil {
		return err
	}
	sc := sidecar{Manifest: m, Size: st.Size(), MtimeNS: st.ModTime().UnixNano()}
	if handedOut {
		sc.Size = -1
	}
	b, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	tmp := sidecarPath(image) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, sidecarPath(image))
}

// RemoveSidecar removes the sidecar of image (when the image is deleted).
func RemoveSidecar(image string) error {
	err := os.Remove(sidecarPath(image))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Archive stores the image at path as the newest version of name. The
// image must not be in use (unmounted).
func (a *Archive) Archive(ctx context.Context, name, path string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("archive: bad name %q", name)
	}
	prev, unchanged := a.readSidecar(path, name)
	cur, err := a.remote(ctx, name)
	if err != nil && !errors.Is(err, ErrNotArchived) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	if cur != nil && prev != nil && cur.ID == prev.ID && unchanged {
		return nil // the bucket has exactly this image
	}
	known := map[string]bool{}
	if cur != nil && prev != nil && cur.ID == prev.ID {
		for _, c := range prev.Chunks {
			known[c.SHA256] = true
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if size <= 0 || size > a.MaxImageBytes {
		return fmt.Errorf("archive %s: image size %d is outside 1..%d", name, size, a.MaxImageBytes)
	}
	m := &Manifest{Format: 1, Name: name, ID: newID(), Version: 1, ImageBytes: size, ChunkBytes: ChunkBytes}
	if cur != nil {
		m.Version = cur.Version + 1
	}
	var mu sync.Mutex // guards known
	err = a.eachChunk(ctx, f, size, func(ctx context.Context, idx int64, data []byte) error {
		sum := sha256.Sum256(data)
		h := hex.EncodeToString(sum[:])
		mu.Lock()
		m.Chunks = append(m.Chunks, Chunk{Index: idx, SHA256: h})
		seen := known[h]
		known[h] = true
		mu.Unlock()
		if seen {
			return nil
		}
		a.heads.Add(1)
		if ok, err := a.obj.Exists(ctx, chunkKey(name, h)); err != nil || ok {
			return err
		}
		if err := a.obj.Put(ctx, chunkKey(name, h), bytes.NewReader(data), int64(len(data))); err != nil {
			return err
		}
		a.chunksPut.Add(1)
		a.bytesPut.Add(int64(len(data)))
		return nil
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	sortChunks(m.Chunks)
	if a.Key != nil {
		if m.MAC, err = Sign(a.Key, m.unsigned()); err != nil {
			return err
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := a.obj.Put(ctx, manifestKey(name), bytes.NewReader(b), int64(len(b))); err != nil {
		return fmt.Errorf("archive %s: manifest: %w", name, err)
	}
	if err := writeSidecar(path, m, false); err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	// Chunks of the version replaced that this one does not use.
	if cur != nil {
		keep := map[string]bool{}
		for _, c := range m.Chunks {
			keep[c.SHA256] = true
		}
		for _, c := range cur.Chunks {
			if !keep[c.SHA256] {
				keep[c.SHA256] = true
				a.obj.Delete(ctx, chunkKey(name, c.SHA256))
			}
		}
	}
	return nil
}

// eachChunk calls fn, from Parallel goroutines, with every chunk of f that
// holds data (holes found with SEEK_DATA are skipped without reading) and
// is not all zero bytes.
func (a *Archive) eachChunk(ctx context.Context, f *os.File, size int64, fn func(ctx context.Context, idx int64, data []byte) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idxs := make(chan int64)
	var wg sync.WaitGroup
	for range max(a.Parallel, 1) {
		wg.Go(func() {
			buf := make([]byte, ChunkBytes)
			for idx := range idxs {
				off := idx * ChunkBytes
				data := buf[:min(ChunkBytes, size-off)]
				if _, err := f.ReadAt(data, off); err != nil && !errors.Is(err, io.EOF) {
					cancel(err)
					continue
				}
				if allZero(data) {
					continue
				}
				if err := fn(ctx, idx, data); err != nil {
					cancel(err)
				}
			}
		})
	}
	for off := int64(0); off < size; {
		if ctx.Err() != nil {
			break
		}
		data, serr := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(serr, unix.ENXIO) {
			break // no data after off
		}
		if serr != nil {
			data = off // no SEEK_DATA here: read everything
		}
		idx := data / ChunkBytes
		select {
		case idxs <- idx:
		case <-ctx.Done():
		}
		off = (idx + 1) * ChunkBytes
	}
	close(idxs)
	wg.Wait()
	return context.Cause(ctx)
}

// Restore makes the image at path the bucket's newest version of name
// (ErrNotArchived when there is none). A local image is updated in place,
// fetching only the chunks that differ; every fetched chunk is verified
// before the image is touched (ErrCorrupt). The image must not be in use.
func (a *Archive) Restore(ctx context.Context, name, path string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("restore: bad name %q", name)
	}
	m, err := a.remote(ctx, name)
	if err != nil {
		return fmt.Errorf("restore %s: %w", name, err)
	}
	prev, unchanged := a.readSidecar(path, name)
	if prev != nil && prev.ID == m.ID {
		// The image is the bucket's newest version, or that version
		// changed here since (a sleep whose archive failed, a crash
		// while awake): at least as new as the bucket's, so it is kept,
		// and the next Archive sends what changed.
		return writeSidecar(path, m, true)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	isNew := errors.Is(err, fs.ErrNotExist)
	if isNew {
		tmp := path + ".restore"
		os.Remove(tmp)
		f, err = os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			defer os.Remove(tmp) // after the rename: a no-op
		}
	}
	if err != nil {
		return fmt.Errorf("restore %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	// Which chunks differ: the local chunk's hash, or its absence.
	want := map[int64]string{}
	for _, c := range m.Chunks {
		want[c.Index] = c.SHA256
	}
	var need []Chunk
	var zero []int64 // local chunks with data the manifest has as zero
	if !isNew {
		localSize := st.Size()
		have := map[int64]string{}
		if prev != nil && unchanged && prev.ImageBytes == localSize {
			// The image is an older version, untouched since: its
			// chunks are that manifest's, no need to read them.
			for _, c := range prev.Chunks {
				have[c.Index] = c.SHA256
			}
		} else {
			var mu sync.Mutex
			err := a.eachChunk(ctx, f, localSize, func(_ context.Context, idx int64, data []byte) error {
				sum := sha256.Sum256(data)
				mu.Lock()
				have[idx] = hex.EncodeToString(sum[:])
				mu.Unlock()
				return nil
			})
			if err != nil {
				return fmt.Errorf("restore %s: reading the local image: %w", name, err)
			}
		}
		for idx := range have {
			if _, ok := want[idx]; !ok {
				zero = append(zero, idx)
			}
		}
		for _, c := range m.Chunks {
			// A last chunk whose length changes with the size is refetched.
			if have[c.Index] != c.SHA256 || localSize != m.ImageBytes && (c.Index+1)*ChunkBytes > min(localSize, m.ImageBytes) {
				need = append(need, c)
			}
		}
	} else {
		need = m.Chunks
	}
	if isNew {
		// A new image is written in place: it is renamed to path only
		// once every chunk has verified.
		if err := f.Truncate(m.ImageBytes); err != nil {
			return fmt.Errorf("restore %s: %w", name, err)
		}
		if err := a.fetch(ctx, name, m, need, f, func(_ int, c Chunk) int64 { return c.Index * ChunkBytes }); err != nil {
			return fmt.Errorf("restore %s: %w", name, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("restore %s: %w", name, err)
		}
		if err := os.Rename(f.Name(), path); err != nil {
			return fmt.Errorf("restore %s: %w", name, err)
		}
		if err := writeSidecar(path, m, true); err != nil {
			return fmt.Errorf("restore %s: %w", name, err)
		}
		return nil
	}
	// Fetch and verify into a staging file first: a bad chunk leaves the
	// image as it was.
	stage, err := os.CreateTemp(filepath.Dir(path), ".restore-stage-*")
	if err != nil {
		return fmt.Errorf("restore %s: %w", name, err)
	}
	os.Remove(stage.Name())
	defer stage.Close()
	if err := a.fetch(ctx, name, m, need, stage, func(i int, _ Chunk) int64 { return int64(i) * ChunkBytes }); err != nil {
		return fmt.Errorf("restore %s: %w", name, err)
	}
	// Apply.
	if err := f.Truncate(m.ImageBytes); err != nil {
		return fmt.Errorf("restore %s: %w", name, err)
	}
	buf := make([]byte, ChunkBytes)
	for i, c := range need {
		n := chunkLen(m, c.Index)
		if _, err := stage.ReadAt(buf[:n], int64(i)*ChunkBytes); err != nil {
			return fmt.Errorf("restore %s: staging: %w", name, err)
		}
		if _, err := f.WriteAt(buf[:n], c.Index*ChunkBytes); err != nil {
			return fmt.Errorf("restore %s: %w", name, err)
		}
	}
	for _, idx := range zero {
		off := idx * ChunkBytes
		if off >= m.ImageBytes {
			continue // cut off by the truncate
		}
		n := min(int64(ChunkBytes), m.ImageBytes-off)
		if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
			clear(buf[:n])
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				return fmt.Errorf("restore %s: %w", name, err)
			}
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("restore %s: %w", name, err)
	}
	if err := writeSidecar(path, m, true); err != nil {
		return fmt.Errorf("restore %s: %w", name, err)
	}
	return nil
}

func chunkLen(m *Manifest, idx int64) int64 { return min(ChunkBytes, m.ImageBytes-idx*ChunkBytes) }

// fetch downloads need's chunks into dst (need[i] at at(i, need[i])),
// verifying each one's length and hash.
func (a *Archive) fetch(ctx context.Context, name string, m *Manifest, need []Chunk, dst *os.File, at func(int, Chunk) int64) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan int)
	var wg sync.WaitGroup
	for range max(a.Parallel, 1) {
		wg.Go(func() {
			buf := make([]byte, ChunkBytes+1)
			for i := range work {
				c := need[i]
				if err := a.fetchOne(ctx, name, m, c, buf, dst, at(i, c)); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := range need {
		select {
		case work <- i:
			continue
		case <-ctx.Done():
		}
		break
	}
	close(work)
	wg.Wait()
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return nil
}

func (a *Archive) fetchOne(ctx context.Context, name string, m *Manifest, c Chunk, buf []byte, stage *os.File, at int64) error {
	want := chunkLen(m, c.Index)
	rc, err := a.obj.Get(ctx, chunkKey(name, c.SHA256))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: chunk %d (%s) is missing from the bucket", ErrCorrupt, c.Index, c.SHA256)
	}
	if err != nil {
		return err
	}
	n, err := io.ReadFull(rc, buf[:want+1])
	rc.Close()
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("chunk %d: %w", c.Index, err)
	}
	sum := sha256.Sum256(buf[:n])
	if int64(n) != want || hex.EncodeToString(sum[:]) != c.SHA256 {
		return fmt.Errorf("%w: chunk %d of %s has %d bytes hashing to %x, want %d bytes hashing to %s (corrupted in the bucket?)",
			ErrCorrupt, c.Index, name, n, sum[:8], want, c.SHA256)
	}
	if _, err := stage.WriteAt(buf[:n], at); err != nil {
		return err
	}
	a.chunksGot.Add(1)
	a.bytesGot.Add(int64(n))
	return nil
}

// Delete removes every object of name (ErrNotArchived when there are
// none) and the sidecar of the image at path (if path is not "").
func (a *Archive) Delete(ctx context.Context, name, path string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("delete archive: bad name %q", name)
	}
	if path != "" {
		if err := RemoveSidecar(path); err != nil {
			return err
		}
	}
	keys, err := a.obj.List(ctx, name+"/")
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: %s", ErrNotArchived, name)
	}
	// The manifest first: a half-deleted archive is then just absent.
	if err := a.obj.Delete(ctx, manifestKey(name)); err != nil {
		return err
	}
	var errs []error
	for _, k := range keys {
		if k != manifestKey(name) {
			errs = append(errs, a.obj.Delete(ctx, k))
		}
	}
	return errors.Join(errs...)
}

// allZero: every byte equals its predecessor and the first is zero
// (bytes.Equal is the runtime's vectorized compare).
func allZero(b []byte) bool {
	return len(b) == 0 || b[0] == 0 && bytes.Equal(b[1:], b[:len(b)-1])
}

// sortChunks orders chunks by index (parallel workers append them out of
// order).
func sortChunks(c []Chunk) {
	slices.SortFunc(c, func(x, y Chunk) int { return cmp.Compare(x.Index, y.Index) })
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
