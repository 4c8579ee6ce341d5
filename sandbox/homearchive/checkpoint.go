package homearchive

// Checkpoints (sandbox.CheckpointArchive): the running state of a sleeping
// sandbox, a directory of files, kept beside its home so that another node
// can restore it. Each file is archived like a home image — chunks named by
// their hashes, a manifest written last, verified on the way back (and
// signed with Key) — in a sub-archive under the home's own prefix,
// NAME/checkpoint/FILE/… ('.' in FILE written as '-'), and
// NAME/checkpoint/index.json, written last and deleted first, names the
// files. Delete of the home removes them with it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// prefixed is Objects below a key prefix.
type prefixed struct {
	obj    Objects
	prefix string
}

func (p prefixed) Put(ctx context.Context, key string, r io.ReadSeeker, size int64) error {
	return p.obj.Put(ctx, p.prefix+key, r, size)
}
func (p prefixed) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return p.obj.Get(ctx, p.prefix+key)
}
func (p prefixed) Exists(ctx context.Context, key string) (bool, error) {
	return p.obj.Exists(ctx, p.prefix+key)
}
func (p prefixed) Delete(ctx context.Context, key string) error {
	return p.obj.Delete(ctx, p.prefix+key)
}
func (p prefixed) List(ctx context.Context, prefix string) ([]string, error) {
	keys, err := p.obj.List(ctx, p.prefix+prefix)
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, p.prefix)
	}
	return keys, err
}

// checkpoints is the sub-archive of name's checkpoint files.
func (a *Archive) checkpoints(name string) *Archive {
	s := New(prefixed{a.obj, name + "/checkpoint/"})
	s.MaxImageBytes, s.Parallel, s.Key = a.MaxImageBytes, a.Parallel, a.Key
	return s
}

// checkpointIndex is NAME/checkpoint/index.json: file name → size.
type checkpointIndex struct {
	Files map[string]int64 `json:"files"`
}

const indexKey = "index.json"

// fileArchiveName is a checkpoint file's name in the sub-archive.
func fileArchiveName(file string) (string, bool) {
	n := strings.ReplaceAll(file, ".", "-")
	return n, !strings.Contains(file, "-") && nameRE.MatchString(n)
}

// ArchiveCheckpoint stores the regular files of dir as name's checkpoint,
// replacing any.
func (a *Archive) ArchiveCheckpoint(ctx context.Context, name, dir string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("archive checkpoint: bad name %q", name)
	}
	if err := a.DeleteCheckpoint(ctx, name); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	sub := a.checkpoints(name)
	idx := checkpointIndex{Files: map[string]int64{}}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || strings.HasSuffix(e.Name(), ".archive") {
			continue // sidecars of a restored checkpoint
		}
		an, ok := fileArchiveName(e.Name())
		if !ok {
			return fmt.Errorf("archive checkpoint %s: file name %q", name, e.Name())
		}
		idx.Files[e.Name()] = fi.Size()
		if fi.Size() == 0 {
			continue
		}
		if err := sub.Archive(ctx, an, filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("archive checkpoint %s: %w", name, err)
		}
	}
	b, _ := json.Marshal(idx)
	return sub.obj.Put(ctx, indexKey, bytes.NewReader(b), int64(len(b)))
}

// RestoreCheckpoint makes dir (replaced) hold name's checkpoint, every
// file verified; an error matching fs.ErrNotExist when there is none, and
// then dir is untouched.
func (a *Archive) RestoreCheckpoint(ctx context.Context, name, dir string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("restore checkpoint: bad name %q", name)
	}
	sub := a.checkpoints(name)
	r, err := sub.obj.Get(ctx, indexKey)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(r, 64<<10))
	r.Close()
	var idx checkpointIndex
	if err == nil {
		err = json.Unmarshal(b, &idx)
	}
	if err != nil {
		return fmt.Errorf("restore checkpoint %s: index: %w", name, errors.Join(ErrCorrupt, err))
	}
	if err := errors.Join(os.RemoveAll(dir), os.Mkdir(dir, 0o700)); err != nil {
		return err
	}
	for file, size := range idx.Files {
		an, ok := fileArchiveName(file)
		if !ok || size < 0 || size > a.MaxImageBytes {
			return fmt.Errorf("restore checkpoint %s: %w: file %q of %d bytes", name, ErrCorrupt, file, size)
		}
		path := filepath.Join(dir, file)
		if size == 0 {
			err = os.WriteFile(path, nil, 0o600)
		} else {
			err = sub.Restore(ctx, an, path)
		}
		if err != nil {
			// Not fs.ErrNotExist: dir was replaced.
			return fmt.Errorf("restore checkpoint %s: %w: %v", name, ErrCorrupt, err)
		}
	}
	return nil
}

// DeleteCheckpoint removes name's checkpoint (none is not an error).
func (a *Archive) DeleteCheckpoint(ctx context.Context, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("delete checkpoint: bad name %q", name)
	}
	sub := a.checkpoints(name)
	// The index first: a half-deleted checkpoint is then just absent.
	if err := sub.obj.Delete(ctx, indexKey); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	keys, err := sub.obj.List(ctx, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, k := range keys {
		errs = append(errs, sub.obj.Delete(ctx, k))
	}
	return errors.Join(errs...)
}
