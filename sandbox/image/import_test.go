package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// entry is one tar entry of a test layer.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
	pax              map[string]string
}

func file(name, body string) entry {
	return entry{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func exe(name, body string) entry {
	return entry{name: name, body: body, typ: tar.TypeReg, mode: 0o755}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) entry {
	return entry{name: name, link: target, typ: tar.TypeSymlink, mode: 0o777}
}
func hardlink(name, target string) entry {
	return entry{name: name, link: target, typ: tar.TypeLink, mode: 0o644}
}
func withMode(e entry, mode int64) entry     { e.mode = mode; return e }
func tarOf(t *testing.T, es ...entry) []byte { return tarBytes(t, es) }

func tarBytes(t *testing.T, es []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Uid: 0, Gid: 0, PAXRecords: e.pax}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// ociArchive builds an OCI image layout tarball holding one image made of
// layers (tar or tar+gzip bytes), and returns its path.
func ociArchive(t *testing.T, layers ...[]byte) string {
	t.Helper()
	files := map[string][]byte{}
	blob := func(b []byte, mt string) v1.Descriptor {
		sum := sha256.Sum256(b)
		d := v1.Descriptor{MediaType: mt, Digest: digest.Digest("sha256:" + hex.EncodeToString(sum[:])), Size: int64(len(b))}
		files["blobs/sha256/"+hex.EncodeToString(sum[:])] = b
		return d
	}
	config, _ := json.Marshal(v1.Image{Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}})
	man := v1.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest,
		Config: blob(config, v1.MediaTypeImageConfig)}
	for _, l := range layers {
		mt := v1.MediaTypeImageLayer
		if l[0] == 0x1f {
			mt = v1.MediaTypeImageLayerGzip
		}
		man.Layers = append(man.Layers, blob(l, mt))
	}
	mb, _ := json.Marshal(man)
	md := blob(mb, v1.MediaTypeImageManifest)
	// An attestation-like entry for another platform that must be ignored.
	other := md
	other.Platform = &v1.Platform{OS: "unknown", Architecture: "unknown"}
	md.Platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	md.Annotations = map[string]string{v1.AnnotationRefName: "example:latest"}
	idx, _ := json.Marshal(v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, Manifests: []v1.Descriptor{other, md}})
	files["index.json"] = idx
	files["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)

	var es []entry
	for _, n := range []string{"oci-layout", "index.json"} {
		es = append(es, file(n, string(files[n])))
	}
	es = append(es, dir("blobs/"), dir("blobs/sha256/"))
	for n, b := range files {
		if strings.HasPrefix(n, "blobs/") {
			es = append(es, file(n, string(b)))
		}
	}
	p := filepath.Join(t.TempDir(), "image.oci.tar")
	if err := os.WriteFile(p, tarBytes(t, es), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestImportOCI(t *testing.T) {
	base := tarOf(t,
		dir("bin/"), exe("bin/sh", "#!fake sh\n"),
		dir("etc/"),
		file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\nsandbox:x:5:5:old:/nowhere:/bin/false\n"),
		file("etc/group", "root:x:0:\nnode:x:1000:\n"),
		dir("a/"), file("a/keep", "keep"), file("a/gone", "gone"),
		dir("d/"), file("d/old1", "1"), dir("d/sub/"), file("d/sub/old2", "2"),
		dir("usr/"), dir("usr/bin/"), withMode(exe("usr/bin/su", "su"), 0o4755), hardlink("usr/bin/su2", "usr/bin/su"),
		symlink("lib", "usr/lib"), dir("usr/lib/"),
		symlink("abs", "/usr/lib"), // absolute links are fine as links
		entry{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
	)
	top := gz(t, tarOf(t,
		file("a/.wh.gone", ""),
		file("a/.wh.never-existed", ""),
		dir("d/"), file("d/.wh..wh..opq", ""), file("d/new", "new"),
		file("usr/lib/libx.so", "x"),
		file("./etc/motd", "hello"),
	))
	src := ociArchive(t, base, top)
	s := newStore(t)
	var progress bytes.Buffer
	img, err := s.Import(context.Background(), "oci", src, &progress)
	if err != nil {
		t.Fatalf("Import: %v\n%s", err, progress.String())
	}
	t.Logf("progress:\n%s", progress.String())
	r := img.Rootfs
	checkPrepared(t, r)
	if got := strings.Join(img.Shell, " "); got != "/bin/sh -lc" {
		t.Errorf("shell %q", got)
	}
	if !strings.Contains(img.Source, "OCI archive") || !strings.Contains(img.Source, "example:latest") {
		t.Errorf("source %q", img.Source)
	}
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(r, p)); return err == nil }
	for p, want := range map[string]bool{
		"a/keep": true, "a/gone": false, "d/old1": false, "d/sub": false, "d/new": true,
		"usr/lib/libx.so": true, "etc/motd": true, "dev/null": false,
	} {
		if exists(p) != want {
			t.Errorf("%s exists=%v, want %v", p, !want, want)
		}
	}
	fi, err := os.Stat(filepath.Join(r, "usr/bin/su"))
	if err != nil || fi.Mode() != 0o755 {
		t.Errorf("usr/bin/su mode %v, %v: want the declared 0755 without its setuid bit", fi.Mode(), err)
	}
	fi2, _ := os.Stat(filepath.Join(r, "usr/bin/su2"))
	if !os.SameFile(fi, fi2) {
		t.Error("hard link su2 is not the same file as su")
	}
	if l, _ := os.Readlink(filepath.Join(r, "abs")); l != "/usr/lib" {
		t.Errorf("abs -> %q", l)
	}
	passwd, _ := os.ReadFile(filepath.Join(r, "etc/passwd"))
	wantPasswd := "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:Shellgate sandbox:/workspace/home:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\n"
	if string(passwd) != wantPasswd {
		t.Errorf("passwd:\n%s\nwant:\n%s", passwd, wantPasswd)
	}
	assertNoLeftovers(t, s)
}

func TestImportDockerSave(t *testing.T) {
	layer := tarOf(t, dir("bin/"), exe("bin/bash", "#!fake bash\n"), file("hello", "hi"))
	man, _ := json.Marshal([]map[string]any{{"Config": "cfg.json", "RepoTags": []string{"demo:1"}, "Layers": []string{"abc/layer.tar"}}})
	src := filepath.Join(t.TempDir(), "save.tar.gz")
	os.WriteFile(src, gz(t, tarOf(t, file("manifest.json", string(man)), file("cfg.json", "{}"), dir("abc/"), file("abc/layer.tar", string(layer)))), 0o644)
	s := newStore(t)
	img, err := s.Import(context.Background(), "docker", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(img.Shell, " "); got != "/bin/bash -lc" {
		t.Errorf("shell %q, want bash", got)
	}
	if b, _ := os.ReadFile(filepath.Join(img.Rootfs, "hello")); string(b) != "hi" {
		t.Errorf("hello = %q", b)
	}
	if !strings.Contains(img.Source, "demo:1") {
		t.Errorf("source %q", img.Source)
	}
}

func TestImportDirectory(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(src, "usr/bin/dash"), []byte("#!fake"), 0o755))
	must(os.Link(filepath.Join(src, "usr/bin/dash"), filepath.Join(src, "usr/bin/dash2")))
	must(os.Symlink("usr/bin", filepath.Join(src, "bin")))                        // merged /usr
	must(os.Symlink("/usr/bin/dash", filepath.Join(src, "usr/bin/sh")))           // absolute: resolved in the image
	must(os.Symlink("/etc/shadow", filepath.Join(src, "usr/bin/host-shadow")))    // copied as a link, never followed
	must(os.WriteFile(filepath.Join(src, "usr/bin/private"), []byte("p"), 0o600)) //
	must(os.Chmod(filepath.Join(src, "usr/bin/private"), os.ModeSetuid|0o711))

	s := newStore(t)
	img, err := s.Import(context.Background(), "dir", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkPrepared(t, img.Rootfs)
	if got := strings.Join(img.Shell, " "); got != "/bin/sh -lc" {
		t.Errorf("shell %q (via bin -> usr/bin, sh -> /usr/bin/dash)", got)
	}
	a, _ := os.Stat(filepath.Join(img.Rootfs, "usr/bin/dash"))
	b, _ := os.Stat(filepath.Join(img.Rootfs, "usr/bin/dash2"))
	if !os.SameFile(a, b) {
		t.Error("hard links not kept")
	}
	if l, _ := os.Readlink(filepath.Join(img.Rootfs, "usr/bin/host-shadow")); l != "/etc/shadow" {
		t.Errorf("symlink not kept: %q", l)
	}
	if fi, _ := os.Stat(filepath.Join(img.Rootfs, "usr/bin/private")); fi == nil || fi.Mode() != 0o711 {
		t.Errorf("mode not kept (less the setuid bit): %v", fi)
	}
	// Import again under the same name: replaced atomically.
	if _, err := s.Import(context.Background(), "dir", src, nil); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, s)
}

func TestImportNoShell(t *testing.T) {
	s := newStore(t)
	_, err := s.Import(context.Background(), "noshell", ociArchive(t, tarOf(t, file("hello", "hi"))), nil)
	if err == nil || !strings.Contains(err.Error(), "neither /bin/bash nor /bin/sh") {
		t.Fatalf("err = %v", err)
	}
	if _, err := s.Get("noshell"); !errors.Is(err, ErrNotFound) {
		t.Errorf("failed import is visible: %v", err)
	}
	assertNoLeftovers(t, s)
	if _, err := s.Import(context.Background(), "missing", filepath.Join(t.TempDir(), "nope.tar"), nil); err == nil {
		t.Error("missing source accepted")
	}
	if _, err := s.Import(context.Background(), "Bad Name", t.TempDir(), nil); err == nil {
		t.Error("bad name accepted")
	}
}

// TestImportMalicious feeds layers that try to reach outside the new root.
// Each import must fail (leaving nothing installed) or keep every write
// inside the image; the host side must be untouched.
func TestImportMalicious(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	victim := filepath.Join(outside, "victim")
	os.WriteFile(secret, []byte("secret"), 0o600)
	os.WriteFile(victim, []byte("victim"), 0o600)
	sh := exe("bin/sh", "#!fake")
	rel := strings.Repeat("../", 12) + strings.TrimPrefix(outside, "/")

	for i, tc := range []struct {
		name  string
		layer []entry
	}{
		{"dotdot path", []entry{sh, file("../../../../"+strings.TrimPrefix(outside, "/")+"/pwned", "x")}},
		{"dotdot inside name", []entry{sh, file("etc/../../pwned", "x")}},
		{"absolute symlink then write through it", []entry{sh, symlink("evil", outside), file("evil/pwned", "x")}},
		{"relative symlink escaping then write through it", []entry{sh, symlink("up", rel), file("up/pwned", "x")}},
		{"symlink then directory through it", []entry{sh, symlink("evil", outside), dir("evil/sub/"), file("evil/sub/pwned", "x")}},
		{"hard link with dotdot target", []entry{sh, hardlink("h", rel+"/secret")}},
		{"hard link with absolute host target", []entry{sh, hardlink("h", secret)}},
		{"hard link through escaping symlink", []entry{sh, symlink("evil", outside), hardlink("h", "evil/secret")}},
		{"whiteout with dotdot", []entry{sh, file("../"+strings.TrimPrefix(outside, "/")+"/.wh.victim", "")}},
		{"whiteout through absolute symlink", []entry{sh, symlink("evil", outside), file("evil/.wh.victim", "")}},
		{"opaque through absolute symlink", []entry{sh, symlink("evil", outside), file("evil/.wh..wh..opq", "")}},
		{"symlink replaces file then write", []entry{sh, file("etc/passwd", "root:x:0:0::/:/bin/sh\n"), symlink("etc/passwd", secret)}},
	} {
		t.Run(fmt.Sprintf("%02d %s", i+1, tc.name), func(t *testing.T) {
			s := newStore(t)
			img, err := s.Import(context.Background(), "evil", ociArchive(t, tarBytes(t, tc.layer)), nil)
			t.Logf("import: %v", err)
			if err != nil {
				if _, gerr := s.Get("evil"); !errors.Is(gerr, ErrNotFound) {
					t.Errorf("failed import is visible: %v", gerr)
				}
				assertNoLeftovers(t, s)
			} else {
				// Contained: the image's own files only.
				if strings.HasPrefix(img.Rootfs, outside) {
					t.Fatal("rootfs outside the store")
				}
			}
			ents, _ := os.ReadDir(outside)
			if len(ents) != 2 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("outside dir changed: %v", names)
			}
			for _, p := range []string{secret, victim} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if n := fi.Sys().(*syscall.Stat_t).Nlink; n != 1 {
					t.Errorf("%s has %d links: hard-linked into the image", p, n)
				}
				if fi.Mode().Perm() != 0o600 {
					t.Errorf("%s mode changed to %v", p, fi.Mode())
				}
			}
			if b, _ := os.ReadFile(secret); string(b) != "secret" {
				t.Errorf("secret overwritten: %q", b)
			}
		})
	}
}

func TestImportDigestMismatch(t *testing.T) {
	good := tarOf(t, exe("bin/sh", "#!fake"))
	src := ociArchive(t, good)
	// Flip a byte of the layer blob inside the archive.
	b, _ := os.ReadFile(src)
	i := bytes.Index(b, []byte("#!fake"))
	b[i] = '?'
	os.WriteFile(src, b, 0o644)
	s := newStore(t)
	_, err := s.Import(context.Background(), "bad", src, nil)
	if err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("err = %v, want digest mismatch", err)
	}
	if _, err := s.Get("bad"); !errors.Is(err, ErrNotFound) {
		t.Errorf("corrupt import visible: %v", err)
	}
}

func TestImportOCILayoutDir(t *testing.T) {
	src := ociArchive(t, tarOf(t, exe("bin/sh", "#!fake")))
	dst := t.TempDir()
	s0 := newStore(t)
	// Unpack the archive as a plain rootfs tarball gives the layout files.
	a, _ := newApplier(dst)
	f, _ := os.Open(src)
	defer f.Close()
	if err := a.applyLayer(context.Background(), tar.NewReader(f), false); err != nil {
		t.Fatal(err)
	}
	img, err := s0.Import(context.Background(), "layout", dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(img.Source, "OCI layout") {
		t.Errorf("source %q", img.Source)
	}
}
