package image

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"

	"github.com/dustin/go-humanize"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// Import installs src as image name. src is one of:
//   - a directory holding a root filesystem: copied with modes, owners,
//     symlinks and hard links;
//   - an OCI image layout, as a tarball (e.g. "podman save --format
//     oci-archive", "skopeo copy ... oci-archive:") or a directory: the
//     manifest for this platform is found from index.json and its layers are
//     applied in order, whiteouts and opaque directories included, each
//     layer checked against its digest;
//   - a "docker save" tarball (manifest.json);
//   - any other tarball, taken as a root filesystem (e.g. "docker export").
//
// Tarballs may be gzip-compressed. Extraction never writes outside the new
// root: entries with ".." paths and hard links leaving the root fail the
// import, and writes through symbolic links that leave the root fail too.
// File modes are kept as the source declares them, except setuid and
// setgid bits, which are dropped, as are file capabilities and all other
// extended attributes; device nodes and FIFOs are skipped (the runtime
// provides /dev).
func (s *Store) Import(ctx context.Context, name, src string, progress io.Writer) (*Image, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	progress = progressOrDiscard(progress)
	abs, err := filepath.Abs(src)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("import %q: %w", src, err)
	}
	st, err := s.begin(name)
	if err != nil {
		return nil, err
	}
	defer st.abort()
	a, err := newApplier(st.rootfs)
	if err != nil {
		return nil, err
	}
	defer a.root.Close()

	var source string
	switch {
	case fi.IsDir() && isOCILayoutDir(abs):
		source, err = importOCI(ctx, a, dirBlobs(abs), "OCI layout "+abs, progress)
	case fi.IsDir():
		fmt.Fprintf(progress, "copying directory %s\n", abs)
		source = "directory " + abs
		err = copyDir(ctx, a, abs)
	case fi.Mode().IsRegular():
		source, err = importTarball(ctx, a, abs, st.dir, progress)
	default:
		err = fmt.Errorf("%s is neither a directory nor a tarball", src)
	}
	if err != nil {
		return nil, fmt.Errorf("import %q: %w", src, err)
	}
	fmt.Fprintf(progress, "%d entries written", a.entries)
	if a.skipped > 0 {
		fmt.Fprintf(progress, ", %d device nodes/FIFOs skipped", a.skipped)
	}
	fmt.Fprintln(progress)
	shell, err := prepare(st.rootfs)
	if err != nil {
		return nil, fmt.Errorf("import %q: %w", src, err)
	}
	return st.commit(&Image{Shell: shell, Source: source})
}

// applier writes tar entries into a root filesystem through os.Root.
type applier struct {
	root    *os.Root
	isRoot  bool
	entries int
	skipped int
	// created holds the paths written by the current layer, which an opaque
	// directory marker of the same layer must not remove.
	created  map[string]bool
	dirTimes []*tar.Header
}

func newApplier(rootfs string) (*applier, error) {
	r, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, err
	}
	return &applier{root: r, isRoot: os.Geteuid() == 0, created: map[string]bool{}}, nil
}

// cleanName turns a tar entry name into a path relative to the root, or
// fails if it would leave it.
func cleanName(n string) (string, error) {
	rel := strings.TrimLeft(n, "/")
	if rel == "" {
		return ".", nil
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("unsafe path %q in archive (leaves the root)", n)
	}
	return path.Clean(rel), nil
}

// applyLayer applies one layer (or a whole rootfs tarball when whiteouts is
// false).
func (a *applier) applyLayer(ctx context.Context, tr *tar.Reader, whiteouts bool) error {
	a.created = map[string]bool{}
	a.dirTimes = a.dirTimes[:0]
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := a.apply(hdr, tr, whiteouts); err != nil {
			return err
		}
	}
	return a.finishLayer()
}

func (a *applier) finishLayer() error {
	for _, h := range a.dirTimes {
		a.root.Chtimes(h.Name, h.AccessTime, h.ModTime)
	}
	return nil
}

// apply writes one entry. hdr.Name is rewritten to the cleaned path.
func (a *applier) apply(hdr *tar.Header, body io.Reader, whiteouts bool) error {
	p, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if p == "." {
		return nil // the root itself: prepare sets its owner and mode
	}
	dir, base := path.Dir(p), path.Base(p)
	if whiteouts && strings.HasPrefix(base, ".wh.") {
		return a.whiteout(dir, base)
	}
	if dir != "." {
		if err := a.root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
	if fi, err := a.root.Lstat(p); err == nil {
		if !(fi.IsDir() && hdr.Typeflag == tar.TypeDir) {
			if err := a.root.RemoveAll(p); err != nil {
				return fmt.Errorf("%s: replace: %w", hdr.Name, err)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	a.created[p] = true
	a.entries++
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := a.root.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
		hdr.Name = p
		a.dirTimes = append(a.dirTimes, hdr)
	case tar.TypeReg, tar.TypeRegA:
		f, err := a.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
		_, err = io.Copy(f, body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	case tar.TypeSymlink:
		if err := a.root.Symlink(hdr.Linkname, p); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
		return a.owner(p, hdr)
	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil || target == "." {
			return fmt.Errorf("%s: unsafe hard link target %q", hdr.Name, hdr.Linkname)
		}
		if err := a.root.Link(target, p); err != nil {
			return fmt.Errorf("%s: hard link to %s: %w", hdr.Name, hdr.Linkname, err)
		}
		return nil // shares owner, mode and times with its target
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		a.entries--
		a.skipped++
		return nil
	default:
		a.entries--
		return nil
	}
	if err := a.owner(p, hdr); err != nil {
		return err
	}
	mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSticky) // never setuid/setgid
	if err := a.root.Chmod(p, mode); err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	if hdr.Typeflag != tar.TypeDir && !hdr.ModTime.IsZero() {
		a.root.Chtimes(p, hdr.AccessTime, hdr.ModTime)
	}
	return nil
}

func (a *applier) owner(p string, hdr *tar.Header) error {
	if err := lchown(a.root, p, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	return nil
}

// whiteout handles ".wh.NAME" (delete NAME from lower layers) and
// ".wh..wh..opq" (hide everything lower layers put in the directory).
func (a *applier) whiteout(dir, base string) error {
	if base == ".wh..wh..opq" {
		d, err := a.root.Open(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("opaque %s: %w", dir, err)
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return fmt.Errorf("opaque %s: %w", dir, err)
		}
		for _, n := range names {
			child := path.Join(dir, n)
			if !a.created[child] {
				if err := a.root.RemoveAll(child); err != nil {
					return fmt.Errorf("opaque %s: %w", dir, err)
				}
			}
		}
		return nil
	}
	if strings.HasPrefix(base, ".wh..wh.") {
		return nil // other AUFS metadata
	}
	target := path.Join(dir, strings.TrimPrefix(base, ".wh."))
	if err := a.root.RemoveAll(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("whiteout %s: %w", target, err)
	}
	return nil
}

// copyDir copies a root filesystem directory through the applier, so the
// same path rules hold. Symbolic links are copied, never followed; files
// hard-linked together stay hard-linked.
func copyDir(ctx context.Context, a *applier, src string) error {
	type ino struct{ dev, ino uint64 }
	links := map[ino]string{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var target string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		hdr.Name = filepath.ToSlash(rel)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			if st.Nlink > 1 && fi.Mode().IsRegular() {
				k := ino{uint64(st.Dev), st.Ino}
				if first, ok := links[k]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					links[k] = hdr.Name
				}
			}
		}
		var body io.Reader
		if hdr.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			body = f
		}
		return a.apply(hdr, body, false)
	})
	if err != nil {
		return err
	}
	return a.finishLayer() // directory times, now that their children exist
}

// blobStore reads the files of an OCI layout (or docker save archive).
type blobStore interface {
	open(name string) (io.ReadCloser, int64, error)
}

type dirBlobs string

func (d dirBlobs) open(name string) (io.ReadCloser, int64, error) {
	r, err := os.OpenRoot(string(d))
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	f, err := r.Open(name)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: not a regular file", name)
	}
	return f, fi.Size(), nil
}

func isOCILayoutDir(dir string) bool {
	_, err1 := os.Stat(filepath.Join(dir, v1.ImageLayoutFile))
	_, err2 := os.Stat(filepath.Join(dir, v1.ImageIndexFile))
	return err1 == nil && err2 == nil
}

// tarBlobs serves the regular files of an uncompressed tarball by offset,
// without extracting it.
type tarBlobs struct {
	f       *os.File
	entries map[string][2]int64 // name -> offset, size
}

func (t *tarBlobs) open(name string) (io.ReadCloser, int64, error) {
	e, ok := t.entries[path.Clean(name)]
	if !ok {
		return nil, 0, fmt.Errorf("%s: not in archive", name)
	}
	return io.NopCloser(io.NewSectionReader(t.f, e[0], e[1])), e[1], nil
}

// posReader tracks the offset in the file that archive/tar has reached; it
// stays seekable so tar skips file data without reading it.
type posReader struct {
	f   *os.File
	pos int64
}

func (r *posReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	r.pos += int64(n)
	return n, err
}

func (r *posReader) Seek(off int64, whence int) (int64, error) {
	n, err := r.f.Seek(off, whence)
	if err == nil {
		r.pos = n
	}
	return n, err
}

func importTarball(ctx context.Context, a *applier, src, scratch string, progress io.Writer) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var magic [4]byte
	n, _ := io.ReadFull(f, magic[:])
	if n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		fmt.Fprintf(progress, "decompressing %s\n", src)
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return "", err
		}
		plain, err := gunzipTo(f, filepath.Join(scratch, "source.tar"))
		if err != nil {
			return "", fmt.Errorf("gunzip: %w", err)
		}
		defer os.Remove(plain.Name())
		defer plain.Close()
		f = plain
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	pr := &posReader{f: f}
	tr := tar.NewReader(pr)
	tb := &tarBlobs{f: f, entries: map[string][2]int64{}}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("not a tar archive: %w", err)
		}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA {
			tb.entries[path.Clean(strings.TrimPrefix(hdr.Name, "./"))] = [2]int64{pr.pos, hdr.Size}
		}
	}
	if _, ok := tb.entries[v1.ImageIndexFile]; ok {
		return importOCI(ctx, a, tb, "OCI archive "+src, progress)
	}
	if _, ok := tb.entries["manifest.json"]; ok {
		return importDockerSave(ctx, a, tb, src, progress)
	}
	fmt.Fprintf(progress, "extracting root filesystem tarball %s\n", src)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if err := a.applyLayer(ctx, tar.NewReader(bufio.NewReaderSize(f, 1<<20)), false); err != nil {
		return "", err
	}
	return "tarball " + src, nil
}

func gunzipTo(r io.Reader, dst string) (*os.File, error) {
	zr, err := gzip.NewReader(bufio.NewReaderSize(r, 1<<20))
	if err != nil {
		return nil, err
	}
	out, err := os.Create(dst)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(out, zr); err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

var digestRE = regexp.MustCompile(`^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$`)

func readJSON(b blobStore, name string, limit int64, v any) error {
	rc, size, err := b.open(name)
	if err != nil {
		return err
	}
	defer rc.Close()
	if size > limit {
		return fmt.Errorf("%s: too large (%d bytes)", name, size)
	}
	if err := json.NewDecoder(rc).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func blobPath(d v1.Descriptor) (string, error) {
	s := string(d.Digest)
	if !digestRE.MatchString(s) {
		return "", fmt.Errorf("unsupported or malformed digest %q", s)
	}
	alg, hexd, _ := strings.Cut(s, ":")
	return "blobs/" + alg + "/" + hexd, nil
}

// importOCI applies the layers of the image in an OCI layout for this
// platform (linux/GOARCH), following nested indexes.
func importOCI(ctx context.Context, a *applier, b blobStore, source string, progress io.Writer) (string, error) {
	var idx v1.Index
	if err := readJSON(b, v1.ImageIndexFile, 16<<20, &idx); err != nil {
		return "", err
	}
	var man v1.Manifest
	ref := ""
	for depth := 0; ; depth++ {
		if depth > 4 {
			return "", errors.New("image indexes nested too deep")
		}
		d, err := pickManifest(idx.Manifests)
		if err != nil {
			return "", err
		}
		if r := d.Annotations[v1.AnnotationRefName]; r != "" && ref == "" {
			ref = r
		}
		p, err := blobPath(d)
		if err != nil {
			return "", err
		}
		if d.MediaType == v1.MediaTypeImageIndex || d.MediaType == "application/vnd.docker.distribution.manifest.list.v2+json" {
			idx = v1.Index{}
			if err := readJSON(b, p, 16<<20, &idx); err != nil {
				return "", err
			}
			continue
		}
		if err := readJSON(b, p, 16<<20, &man); err != nil {
			return "", err
		}
		break
	}
	if len(man.Layers) == 0 {
		return "", errors.New("image manifest has no layers")
	}
	for i, l := range man.Layers {
		p, err := blobPath(l)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(progress, "layer %d/%d %s (%s)\n", i+1, len(man.Layers), shortDigest(string(l.Digest)), humanize.IBytes(uint64(l.Size)))
		if err := applyBlob(ctx, a, b, p, string(l.Digest), l.Size); err != nil {
			return "", fmt.Errorf("layer %d %s: %w", i+1, l.Digest, err)
		}
	}
	if ref != "" {
		source += " (" + ref + ")"
	}
	return source, nil
}

func pickManifest(ds []v1.Descriptor) (v1.Descriptor, error) {
	var fallback *v1.Descriptor
	for i, d := range ds {
		p := d.Platform
		if p == nil {
			if fallback == nil {
				fallback = &ds[i]
			}
			continue
		}
		if p.OS == "linux" && p.Architecture == runtime.GOARCH {
			return d, nil
		}
	}
	if fallback != nil {
		return *fallback, nil
	}
	if len(ds) == 0 {
		return v1.Descriptor{}, errors.New("index.json lists no manifests")
	}
	return v1.Descriptor{}, fmt.Errorf("no image for linux/%s in the archive", runtime.GOARCH)
}

func shortDigest(d string) string {
	if _, h, ok := strings.Cut(d, ":"); ok && len(h) > 12 {
		return d[:len(d)-len(h)] + h[:12]
	}
	return d
}

// applyBlob applies one (possibly compressed) layer blob, verifying its
// digest and size when known. A mismatch fails the import, which then
// leaves nothing installed.
func applyBlob(ctx context.Context, a *applier, b blobStore, name, digest string, size int64) error {
	rc, n, err := b.open(name)
	if err != nil {
		return err
	}
	defer rc.Close()
	if size > 0 && n != size {
		return fmt.Errorf("size %d, manifest says %d", n, size)
	}
	var h hash.Hash
	switch {
	case strings.HasPrefix(digest, "sha256:"):
		h = sha256.New()
	case strings.HasPrefix(digest, "sha512:"):
		h = sha512.New()
	}
	var r io.Reader = rc
	if h != nil {
		r = io.TeeReader(rc, h)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	var lr io.Reader = br
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		lr = zr
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		return errors.New("zstd-compressed layers are not supported: export the image with gzip layers")
	}
	if err := a.applyLayer(ctx, tar.NewReader(lr), true); err != nil {
		return err
	}
	if h != nil {
		if _, err := io.Copy(io.Discard, br); err != nil {
			return err
		}
		_, want, _ := strings.Cut(digest, ":")
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return fmt.Errorf("digest mismatch: got %s", got)
		}
	}
	return nil
}

// importDockerSave applies the layers listed in a "docker save" archive's
// manifest.json (the first image in it).
func importDockerSave(ctx context.Context, a *applier, b blobStore, src string, progress io.Writer) (string, error) {
	var ms []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := readJSON(b, "manifest.json", 16<<20, &ms); err != nil {
		return "", err
	}
	if len(ms) == 0 || len(ms[0].Layers) == 0 {
		return "", errors.New("manifest.json lists no image layers")
	}
	m := ms[0]
	for i, l := range m.Layers {
		fmt.Fprintf(progress, "layer %d/%d %s\n", i+1, len(m.Layers), l)
		digest := ""
		if alg, h, ok := strings.Cut(strings.TrimPrefix(l, "blobs/"), "/"); ok && strings.HasPrefix(l, "blobs/") && digestRE.MatchString(alg+":"+h) {
			digest = alg + ":" + h
		}
		if err := applyBlob(ctx, a, b, l, digest, 0); err != nil {
			return "", fmt.Errorf("layer %d %s: %w", i+1, l, err)
		}
	}
	source := "docker archive " + src
	if len(m.RepoTags) > 0 {
		source += " (" + m.RepoTags[0] + ")"
	}
	return source, nil
}
