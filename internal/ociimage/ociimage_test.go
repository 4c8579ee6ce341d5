package ociimage_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/shellgate/shellgate/internal/ociimage"
	"github.com/shellgate/shellgate/sandbox/image"
	"github.com/shellgate/shellgate/testenv"
)

// readBlob reads a descriptor's blob and checks its size and digest.
func readBlob(t *testing.T, dir string, d v1.Descriptor) []byte {
	t.Helper()
	if err := d.Digest.Validate(); err != nil {
		t.Fatalf("digest %q: %v", d.Digest, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", d.Digest.Algorithm().String(), d.Digest.Encoded()))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != d.Size {
		t.Fatalf("%s: %d bytes, descriptor says %d", d.Digest, len(b), d.Size)
	}
	if got := digest.FromBytes(b); got != d.Digest {
		t.Fatalf("blob %s has digest %s", d.Digest, got)
	}
	return b
}

// TestLayout: 1. oci-layout and index.json; 2. every blob's digest and size
// verify; 3. the config's diff_id is the uncompressed layer's digest; 4. the
// layer holds the files with their modes and owners; 5. the same inputs
// give the same manifest digest.
func TestLayout(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	os.WriteFile(src, []byte("#!static binary"), 0o755)
	rootfs := t.TempDir()
	os.MkdirAll(filepath.Join(rootfs, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(rootfs, "usr/bin/python3"), []byte("py"), 0o755)
	os.Symlink("python3", filepath.Join(rootfs, "usr/bin/python"))
	current := filepath.Join(t.TempDir(), "current") // as the image store links a name to its version
	os.Symlink(rootfs, current)
	img := ociimage.Image{
		Arch: "amd64", RootFS: current, RefName: "dev", User: "1000:1000",
		Entrypoint: []string{"/usr/local/bin/shellgate"}, ExposedTCP: []int{8080},
		Files: []ociimage.File{
			{Path: "/usr/local/bin/shellgate", Mode: 0o755, Source: src},
			{Path: "/var/lib/shellgate", Dir: true, Mode: 0o700, UID: 1000, GID: 1000},
			{Path: "/etc/passwd", Mode: 0o644, Data: []byte("shellgate:x:1000:1000::/:/sbin/nologin\n")},
		},
	}
	dir := t.TempDir()
	md, err := ociimage.Write(dir, img)
	if err != nil {
		t.Fatal(err)
	}

	var layout v1.ImageLayout
	b, _ := os.ReadFile(filepath.Join(dir, v1.ImageLayoutFile))
	if json.Unmarshal(b, &layout) != nil || layout.Version != v1.ImageLayoutVersion {
		t.Fatalf("1: oci-layout %q", b)
	}
	var idx v1.Index
	b, _ = os.ReadFile(filepath.Join(dir, v1.ImageIndexFile))
	if err := json.Unmarshal(b, &idx); err != nil || idx.SchemaVersion != 2 || len(idx.Manifests) != 1 {
		t.Fatalf("1: index.json %q: %v", b, err)
	}
	md0 := idx.Manifests[0]
	if md0.Digest != md || md0.MediaType != v1.MediaTypeImageManifest || md0.Annotations[v1.AnnotationRefName] != "dev" || md0.Platform.Architecture != "amd64" {
		t.Fatalf("1: manifest descriptor %+v", md0)
	}

	var m v1.Manifest
	if err := json.Unmarshal(readBlob(t, dir, md0), &m); err != nil || len(m.Layers) != 1 {
		t.Fatalf("2: manifest: %v", err)
	}
	var cfg v1.Image
	if err := json.Unmarshal(readBlob(t, dir, m.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != v1.MediaTypeImageConfig || m.Layers[0].MediaType != v1.MediaTypeImageLayerGzip {
		t.Fatalf("2: media types %s %s", m.Config.MediaType, m.Layers[0].MediaType)
	}
	gz := readBlob(t, dir, m.Layers[0])

	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest.FromBytes(raw) {
		t.Fatalf("3: diff_ids %v, layer %s", cfg.RootFS.DiffIDs, digest.FromBytes(raw))
	}
	if cfg.OS != "linux" || cfg.Config.User != "1000:1000" || cfg.Config.Entrypoint[0] != "/usr/local/bin/shellgate" {
		t.Fatalf("3: config %+v", cfg)
	}
	if _, ok := cfg.Config.ExposedPorts["8080/tcp"]; !ok {
		t.Fatalf("3: exposed ports %v", cfg.Config.ExposedPorts)
	}

	type entry struct {
		typ        byte
		mode       int64
		uid        int
		link, body string
	}
	got := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = entry{h.Typeflag, h.Mode, h.Uid, h.Linkname, string(body)}
	}
	for name, want := range map[string]entry{
		"usr/local/bin/shellgate": {tar.TypeReg, 0o755, 0, "", "#!static binary"},
		"var/lib/shellgate/":      {tar.TypeDir, 0o700, 1000, "", ""},
		"etc/passwd":              {tar.TypeReg, 0o644, 0, "", "shellgate:x:1000:1000::/:/sbin/nologin\n"},
		"usr/bin/python":          {tar.TypeSymlink, 0o777, 0, "python3", ""},
		"usr/bin/python3":         {tar.TypeReg, 0o755, 0, "", "py"},
	} {
		g, ok := got[name]
		if want.typ == tar.TypeSymlink || name == "usr/bin/python3" {
			g.uid, want.uid = 0, 0 // the rootfs is owned by whoever ran the test
		}
		if !ok || g != want {
			t.Errorf("4: %s: got %+v (present %v), want %+v", name, g, ok, want)
		}
	}

	dir2 := t.TempDir()
	md2, err := ociimage.Write(dir2, img)
	if err != nil {
		t.Fatal(err)
	}
	if md2 != md {
		t.Fatalf("5: rebuild gave %s, first build %s", md2, md)
	}
}

// TestBadPath: a file path outside the image is refused.
func TestBadPath(t *testing.T) {
	for _, p := range []string{"relative", "/", "../etc", ""} {
		_, err := ociimage.Write(t.TempDir(), ociimage.Image{Arch: "amd64", Files: []ociimage.File{{Path: p, Data: []byte("x")}}})
		if err == nil {
			t.Errorf("%q accepted", p)
		}
	}
}

// TestImportedByShellgate: Shellgate's own OCI importer (sandbox/image,
// which checks each layer against its digest) takes the layout, and the
// files land with their contents and modes.
func TestImportedByShellgate(t *testing.T) {
	testenv.NeedRoot(t, "the importer keeps owners")
	rootfs := t.TempDir()
	os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755)
	os.WriteFile(filepath.Join(rootfs, "bin/sh"), []byte("#!fake shell"), 0o755)
	layout := t.TempDir()
	if _, err := ociimage.Write(layout, ociimage.Image{Arch: goruntime.GOARCH, RootFS: rootfs, Files: []ociimage.File{
		{Path: "/usr/local/bin/shellgate-agent", Mode: 0o755, Data: []byte("agent")},
	}}); err != nil {
		t.Fatal(err)
	}
	st, err := image.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	img, err := st.Import(context.Background(), "fromlayout", layout, nil)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	for p, want := range map[string]string{"bin/sh": "#!fake shell", "usr/local/bin/shellgate-agent": "agent"} {
		b, err := os.ReadFile(filepath.Join(img.Rootfs, p))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q %v", p, b, err)
		}
		if fi, err := os.Stat(filepath.Join(img.Rootfs, p)); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v %v", p, fi.Mode(), err)
		}
	}
}
