// Package ociimage writes an OCI image layout (image-spec v1.1) from files
// on this machine: no registry, no daemon, no base image pulled. It builds
// the Shellgate gateway image from the static binaries (`make image-oci`)
// and the Kubernetes sandbox image from a root filesystem directory plus the
// agent.
//
// The result is reproducible: the same inputs give the same digests (file
// times are fixed, entries sorted, gzip without a name or time).
package ociimage

import (
	"archive/tar"
	"compress/gzip"
	_ "crypto/sha256" // go-digest's Canonical algorithm
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// File is one entry of the image's single layer.
type File struct {
	Path     string // absolute path in the image
	Mode     fs.FileMode
	UID, GID int
	Data     []byte // regular files
	Source   string // or read from this host path
	Dir      bool
	Link     string // symlink target
}

// Image describes what to build.
type Image struct {
	Files      []File
	RootFS     string // optional host directory copied in first (below Files)
	Arch       string // GOARCH, e.g. amd64
	Entrypoint []string
	Cmd        []string
	User       string
	WorkingDir string
	Env        []string
	Labels     map[string]string
	ExposedTCP []int
	RefName    string // org.opencontainers.image.ref.name in index.json
}

// epoch is every entry's time: reproducible digests.
var epoch = time.Unix(0, 0).UTC()

// Write builds img into the OCI layout directory dir (created) and returns
// the manifest's digest.
func Write(dir string, img Image) (digest.Digest, error) {
	if img.Arch == "" {
		return "", fmt.Errorf("ociimage: Arch is required")
	}
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return "", err
	}
	// One pass, streamed (a root filesystem is gigabytes): tar → diff_id
	// hash and gzip → blob file and its hash.
	tmp, err := os.CreateTemp(filepath.Join(dir, "blobs", "sha256"), ".layer-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	blobHash, diffHash := digest.Canonical.Digester(), digest.Canonical.Digester()
	size := &counter{}
	zw, _ := gzip.NewWriterLevel(io.MultiWriter(tmp, blobHash.Hash(), size), gzip.DefaultCompression)
	zw.ModTime = epoch
	tw := tar.NewWriter(io.MultiWriter(zw, diffHash.Hash()))
	if img.RootFS != "" {
		if err := addTree(tw, img.RootFS); err != nil {
			return "", err
		}
	}
	files := append([]File(nil), img.Files...)
	sort.SliceStable(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	for _, f := range files {
		if err := addFile(tw, f); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	diffID := diffHash.Digest()
	layer := v1.Descriptor{MediaType: v1.MediaTypeImageLayerGzip, Digest: blobHash.Digest(), Size: size.n}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, "blobs", "sha256", layer.Digest.Encoded())); err != nil {
		return "", err
	}
	ports := map[string]struct{}{}
	for _, p := range img.ExposedTCP {
		ports[fmt.Sprintf("%d/tcp", p)] = struct{}{}
	}
	created := epoch
	cfg := v1.Image{
		Created:  &created,
		Platform: v1.Platform{OS: "linux", Architecture: img.Arch},
		Config: v1.ImageConfig{
			User: img.User, Entrypoint: img.Entrypoint, Cmd: img.Cmd, WorkingDir: img.WorkingDir,
			Env: img.Env, Labels: img.Labels, ExposedPorts: ports,
		},
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		History: []v1.History{{Created: &created, CreatedBy: "shellgate ociimage"}},
	}
	config, err := writeJSONBlob(dir, v1.MediaTypeImageConfig, cfg)
	if err != nil {
		return "", err
	}
	m := v1.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest, Config: config, Layers: []v1.Descriptor{layer}}
	man, err := writeJSONBlob(dir, v1.MediaTypeImageManifest, m)
	if err != nil {
		return "", err
	}
	man.Platform = &cfg.Platform
	if img.RefName != "" {
		man.Annotations = map[string]string{v1.AnnotationRefName: img.RefName}
	}
	idx := v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex, Manifests: []v1.Descriptor{man}}
	ib, err := json.Marshal(idx)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, v1.ImageIndexFile), ib, 0o644); err != nil {
		return "", err
	}
	lb, _ := json.Marshal(v1.ImageLayout{Version: v1.ImageLayoutVersion})
	if err := os.WriteFile(filepath.Join(dir, v1.ImageLayoutFile), lb, 0o644); err != nil {
		return "", err
	}
	return man.Digest, nil
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// writeJSONBlob writes v as JSON into the layout's blobs and describes it.
func writeJSONBlob(dir, mediaType string, v any) (v1.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return v1.Descriptor{}, err
	}
	d := digest.FromBytes(b)
	p := filepath.Join(dir, "blobs", d.Algorithm().String(), d.Encoded())
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}, nil
}

func addFile(tw *tar.Writer, f File) error {
	name := strings.TrimPrefix(path.Clean(f.Path), "/")
	if !path.IsAbs(f.Path) || name == "" || strings.HasPrefix(name, "../") {
		return fmt.Errorf("ociimage: bad path %q: want an absolute path inside the image", f.Path)
	}
	h := &tar.Header{Name: name, Mode: int64(f.Mode.Perm() | f.Mode&(fs.ModeSetuid|fs.ModeSticky)), Uid: f.UID, Gid: f.GID, ModTime: epoch, Format: tar.FormatPAX}
	if f.Mode&fs.ModeSticky != 0 {
		h.Mode = int64(f.Mode.Perm()) | 0o1000
	}
	switch {
	case f.Dir:
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
		return tw.WriteHeader(h)
	case f.Link != "":
		h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		return tw.WriteHeader(h)
	}
	data := f.Data
	if f.Source != "" {
		var err error
		if data, err = os.ReadFile(f.Source); err != nil {
			return fmt.Errorf("ociimage: %w", err)
		}
	}
	h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// addTree copies a root filesystem directory: directories, regular files
// and symlinks, with their modes and owners; other kinds are skipped.
func addTree(tw *tar.Writer, root string) error {
	root, err := filepath.EvalSymlinks(root) // the image store links names to versions
	if err != nil {
		return fmt.Errorf("ociimage: rootfs: %w", err)
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.ModTime, h.AccessTime, h.ChangeTime = epoch, time.Time{}, time.Time{}
		h.Uname, h.Gname = "", ""
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
}
