package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/shellgate/shellgate/sandbox/ctxio"
)

// Blobs holds file bytes by id. Bytes are streamed in and out, never held
// whole in memory. Put is atomic: a blob is either absent or complete.
type Blobs interface {
	// Put stores r's bytes as id, reading at most maxBytes (ErrTooLarge
	// beyond, and nothing is kept). An existing id is ErrConflict.
	Put(ctx context.Context, id string, r io.Reader, maxBytes int64) (BlobInfo, error)
	// Open returns the bytes of id and their size. The reader may also be
	// an io.ReadSeeker (LocalBlobs' is), for range requests.
	Open(ctx context.Context, id string) (io.ReadCloser, int64, error)
	// Delete removes id (ErrNotFound if absent).
	Delete(ctx context.Context, id string) error
	// Walk calls fn with every complete blob's id and when it was stored,
	// in no particular order, until fn returns an error (which Walk
	// returns). Temporaries of Puts in progress are not blobs.
	Walk(ctx context.Context, fn func(id string, stored time.Time) error) error
}

// OrphanAge is how old a blob without a file record must be before
// SweepBlobs deletes it: a Put is followed by its record within the
// request that made it, so an hour-old blob without one was left by a
// crash between the two, or by a record deleted while its blob's Delete
// failed.
const OrphanAge = time.Hour

// sweepBatch is how many ids SweepBlobs asks the file records about at once.
const sweepBatch = 500

// SweepBlobs deletes the blobs stored before cutoff that no file record
// names (Files.Missing), and returns how many it deleted. A blob deleted
// by someone else meanwhile is not an error.
func SweepBlobs(ctx context.Context, b Blobs, f Files, cutoff time.Time) (deleted int, err error) {
	var batch []string
	flush := func() error {
		missing, err := f.Missing(ctx, batch)
		batch = batch[:0]
		if err != nil {
			return err
		}
		for _, id := range missing {
			if err := b.Delete(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			deleted++
		}
		return nil
	}
	err = b.Walk(ctx, func(id string, stored time.Time) error {
		if !stored.Before(cutoff) {
			return nil
		}
		batch = append(batch, id)
		if len(batch) < sweepBatch {
			return nil
		}
		return flush()
	})
	if err == nil && len(batch) > 0 {
		err = flush()
	}
	if err != nil {
		return deleted, fmt.Errorf("sweeping orphaned blobs: %w", err)
	}
	return deleted, nil
}

// BlobInfo describes a stored blob.
type BlobInfo struct {
	Bytes  int64
	SHA256 string // lowercase hex
}

// ValidBlobID reports whether id may name a blob: 1–128 letters, digits,
// '_' or '-', not starting with '-' or '_'. Ids are file names in
// LocalBlobs, so nothing else ('.', '/', NUL) is allowed.
func ValidBlobID(id string) bool {
	if len(id) < 1 || len(id) > 128 || id[0] == '-' || id[0] == '_' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// LocalBlobs keeps blobs as files in one directory (DATA/files), opened
// through an os.Root so that no id can reach outside it. A Put writes a
// temporary file (".tmp-*", which no id can name), syncs it and links it
// into place, so readers and other processes never see a partial blob.
type LocalBlobs struct {
	root *os.Root
}

// LocalBlobsDir is the blob directory's name under the data directory
// (DATA/files).
const LocalBlobsDir = "files"

// TempMaxAge is how old a temporary file must be before OpenLocalBlobs
// deletes it as left over from a crash.
const TempMaxAge = time.Hour

// OpenLocalBlobs opens (creating, mode 0700) the blob directory dir and
// removes temporary files older than TempMaxAge.
func OpenLocalBlobs(dir string) (*LocalBlobs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	b := &LocalBlobs{root: root}
	if entries, err := fs.ReadDir(root.FS(), "."); err == nil {
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".tmp-") {
				continue
			}
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > TempMaxAge {
				root.Remove(e.Name())
			}
		}
	}
	return b, nil
}

// Close releases the directory.
func (b *LocalBlobs) Close() error { return b.root.Close() }

func (b *LocalBlobs) Put(ctx context.Context, id string, r io.Reader, maxBytes int64) (info BlobInfo, err error) {
	if !ValidBlobID(id) {
		return BlobInfo{}, fmt.Errorf("%w: blob id %q", ErrInvalid, id)
	}
	if maxBytes < 0 {
		return BlobInfo{}, fmt.Errorf("%w: blob size cap %d", ErrInvalid, maxBytes)
	}
	if _, err := b.root.Lstat(id); err == nil {
		return BlobInfo{}, fmt.Errorf("blob %s: %w", id, ErrConflict)
	}
	tmp := ".tmp-" + NewID("put")
	f, err := b.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return BlobInfo{}, fmt.Errorf("blob %s: %w", id, err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		if rmErr := b.root.Remove(tmp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("blob %s: removing temporary file: %w", id, rmErr))
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxio.Reader(ctx, r), maxBytes+1))
	if err != nil {
		return BlobInfo{}, fmt.Errorf("blob %s: writing: %w", id, err)
	}
	if n > maxBytes {
		return BlobInfo{}, fmt.Errorf("blob %s: more than %d bytes: %w", id, maxBytes, ErrTooLarge)
	}
	if err := f.Sync(); err != nil {
		return BlobInfo{}, fmt.Errorf("blob %s: %w", id, err)
	}
	err, f = f.Close(), nil
	if err != nil {
		return BlobInfo{}, fmt.Errorf("blob %s: %w", id, err)
	}
	// Link fails if id exists, so two Puts of one id cannot overwrite
	// each other; the temporary name is removed by the deferred cleanup.
	if err := b.root.Link(tmp, id); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return BlobInfo{}, fmt.Errorf("blob %s: %w", id, ErrConflict)
		}
		return BlobInfo{}, fmt.Errorf("blob %s: %w", id, err)
	}
	if err := b.syncDir(); err != nil {
		return BlobInfo{}, fmt.Errorf("blob %s: %w", id, err)
	}
	return BlobInfo{Bytes: n, SHA256: hexSum(h)}, nil
}

func (b *LocalBlobs) Open(ctx context.Context, id string) (io.ReadCloser, int64, error) {
	if !ValidBlobID(id) {
		return nil, 0, fmt.Errorf("blob %q: %w", id, ErrNotFound)
	}
	f, err := b.root.OpenFile(id, os.O_RDONLY|noFollow, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("blob %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("blob %s: %w", id, err)
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("blob %s: %w", id, err)
	}
	return f, st.Size(), nil
}

func (b *LocalBlobs) Delete(ctx context.Context, id string) error {
	if !ValidBlobID(id) {
		return fmt.Errorf("blob %q: %w", id, ErrNotFound)
	}
	if err := b.root.Remove(id); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob %s: %w", id, ErrNotFound)
	} else if err != nil {
		return fmt.Errorf("blob %s: %w", id, err)
	}
	return b.syncDir()
}

func (b *LocalBlobs) Walk(ctx context.Context, fn func(id string, stored time.Time) error) error {
	d, err := b.root.Open(".")
	if err != nil {
		return fmt.Errorf("blobs: %w", err)
	}
	defer d.Close()
	for {
		entries, err := d.ReadDir(256)
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				return err
			}
			// Only regular files with a blob's name: temporaries start
			// with a dot, which no blob id has.
			if !e.Type().IsRegular() || !ValidBlobID(e.Name()) {
				continue
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted meanwhile
			}
			if err != nil {
				return fmt.Errorf("blob %s: %w", e.Name(), err)
			}
			if err := fn(e.Name(), info.ModTime()); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("blobs: %w", err)
		}
	}
}

func (b *LocalBlobs) syncDir() error {
	d, err := b.root.Open(".")
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }
