package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestFileAPISecurityCases holds cases 17–20 of shared/security-cases.md
// (the file API) against every runtime: a command plants what an attacker
// would (traversal names, symlinks, hardlinks, FIFOs, devices, sparse
// giants, archives), then the HTTP file routes are used against it.
// Nothing outside the home may be read or written, nothing may hang, and
// every refusal is a clear 4xx. Each case is tagged with what it would
// achieve if it got through.
func TestFileAPISecurityCases(t *testing.T) {
	sandboxtest.EachRuntime(t, fileSecurityCases)
}

func fileSecurityCases(t *testing.T, rt string) {
	e := newEnv(t, rt, "busybox", func(c *Config) {
		c.MaxFileBytes = 64 << 20
		c.MaxUploadBytes = 32 << 20
		c.CallWait = 2 * time.Second
	})
	c := e.create(e.keyA, "target")
	base := "/api/v1/containers/" + c.ID + "/files"
	// A host file no answer may ever contain.
	canary := filepath.Join(t.TempDir(), "canary")
	os.WriteFile(canary, []byte("host-canary-secret\n"), 0o644)
	passwd := fileSum(t, "/etc/passwd")
	leaked := func(b []byte) bool {
		return bytes.Contains(b, []byte("host-canary-secret")) || bytes.Contains(b, []byte("root:x:0:0"))
	}
	client := &http.Client{Timeout: 30 * time.Second}
	get := func(path string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", e.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+e.keyA)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v (a hang ends in the client's timeout)", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	refused := func(what string, st int, b []byte) {
		t.Helper()
		if st < 400 || st >= 500 || leaked(b) {
			t.Errorf("%s: %d %.200s, want a 4xx without host data", what, st, b)
		}
	}
	noEscapes := func() {
		t.Helper()
		for _, p := range []string{"/tmp/escape", "/tmp/escape2", "/tmp/escape3", "/tmp/escape4", "/etc/cron.d/x", filepath.Join(filepath.Dir(canary), "evil.txt")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s was written on the host", p)
				os.Remove(p)
			}
		}
		if m, _ := filepath.Glob(filepath.Join(e.data, "run", "sandboxes", "*", "*escape*")); len(m) > 0 {
			t.Errorf("written beside the home: %v", m)
		}
		if fileSum(t, "/etc/passwd") != passwd {
			t.Error("/etc/passwd changed")
		}
	}

	t.Run("17 traversal, absolute, encoded, NUL, backslash and over-long paths [escape, host leak]", func(t *testing.T) {
		for _, p := range []string{"../escape", "../../../../tmp/escape", "/tmp/escape", "/etc/cron.d/x", "/workspace/home/../escape", "a/../../escape", "x\x00y", strings.Repeat("n", 300), "/mnt/data/../../tmp/escape"} {
			st, b := e.upload(base, e.keyA, part{name: "path", content: p}, part{name: "file", filename: "f", content: "payload"})
			refused("upload to "+strings.ToValidUTF8(p, "?"), st, b)
		}
		// Names that only look dangerous are ordinary names inside the home.
		for _, p := range []string{`..\..\escape`, "%2e%2e%2fescape", "..%252f..%252fescape", "...", "sub/..hidden"} {
			st, b := e.upload(base, e.keyA, part{name: "path", content: p}, part{name: "file", filename: "f", content: "inside"})
			if st != 200 {
				t.Errorf("upload to %q: %d %s", p, st, b)
			}
		}
		if o := e.exec(e.keyA, c.ID, `cat '..\..\escape' %2e%2e%2fescape ... sub/..hidden | tr -d '\n'`).Output[0]; o.Stdout != "insideinsideinsideinside" {
			t.Errorf("literal names: %q %q", o.Stdout, o.Stderr)
		}
		for _, id := range []string{CFileID("../etc/passwd"), CFileID("/etc/passwd"), CFileID("a/../../etc/passwd"), CFileID("x\x00y"),
			"cfile_..%2F..%2Fetc%2Fpasswd", "..%2F..%2Fetc%2Fpasswd", "..%252F..%252Fetc%252Fpasswd", "%2e%2e", "cfile_Li4vLi4vZXRjL3Bhc3N3ZA%3D%3D"} {
			st, b := get(base + "/" + id + "/content")
			refused("download "+id, st, b)
		}
		noEscapes()
	})

	t.Run("18 symlinks, symlinked parents, hardlinks, and a symlink swapped in during a download [escape, host leak]", func(t *testing.T) {
		o := e.exec(e.keyA, c.ID, "ln -s /etc/passwd pw; ln -s / rootlink; ln -s .. up; mkdir -p d; ln -s ../../../../.. d/deep; ln -s "+canary+" canary; ln /etc/passwd hard 2>/dev/null && echo HARDLINKED; true").Output[0]
		if strings.Contains(o.Stdout, "HARDLINKED") {
			// A hardlink to a file of the image would be served as a home
			// file: the image and the home are separate file systems, so
			// it must fail.
			t.Errorf("a hardlink from the home to the image's /etc/passwd was made")
		}
		for _, rel := range []string{"pw", "rootlink/etc/passwd", "up/etc/passwd", "d/deep/etc/passwd", "canary", "d/deep" + canary} {
			st, b := get(base + "/" + CFileID(rel) + "/content")
			refused("download "+rel, st, b)
			st, b = get(base + "/" + CFileID(rel))
			refused("describe "+rel, st, b)
			st, b = e.do("POST", base+"/"+CFileID(rel)+"/promote", e.keyA, nil)
			refused("promote "+rel, st, b)
		}
		for _, p := range []string{"rootlink/tmp/escape2", "up/escape3", "d/deep/tmp/escape4", "pw", "canary"} {
			st, b := e.upload(base, e.keyA, part{name: "path", content: p}, part{name: "file", filename: "f", content: "payload"})
			refused("upload through "+p, st, b)
		}
		st, b := e.do("DELETE", base+"/"+CFileID("pw"), e.keyA, nil)
		refused("delete a symlink", st, b)
		for _, f := range e.listAll("/api/v1", c.ID, 100, "") {
			if f.Path == "pw" || f.Path == "canary" || strings.HasPrefix(f.Path, "rootlink") || strings.HasPrefix(f.Path, "up/") || strings.HasPrefix(f.Path, "d/") {
				t.Errorf("listing followed or showed a symlink: %q", f.Path)
			}
		}
		if b, err := os.ReadFile(canary); err != nil || string(b) != "host-canary-secret\n" {
			t.Errorf("canary changed: %q %v", b, err)
		}
		noEscapes()

		// A download holds the container: a command that would swap the
		// file for a symlink waits (here: gives up with 409), and the
		// download serves the bytes it opened.
		// Larger than what loopback's socket buffers hold, so the handler
		// is still sending when the command comes.
		big := make([]byte, 24<<20)
		rand.Read(big)
		st, b = e.upload(base, e.keyA, part{name: "file", filename: "big", content: string(big)})
		e.must(st, b, nil)
		req, _ := http.NewRequest("GET", e.url+base+"/"+CFileID("big")+"/content", nil)
		req.Header.Set("Authorization", "Bearer "+e.keyA)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 1024)
		if _, err := io.ReadFull(resp.Body, head); err != nil {
			t.Fatal(err)
		}
		st, b = e.do("POST", "/api/v1/containers/"+c.ID+"/exec", e.keyA, map[string]any{"commands": []string{"rm big && ln -s /etc/passwd big"}})
		if st != http.StatusConflict {
			t.Errorf("a command during a download: %d %s, want 409", st, b)
		}
		rest, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(append(head, rest...), big) {
			t.Errorf("download during a swap attempt: %d bytes, %v", len(head)+len(rest), err)
		}
		e.exec(e.keyA, c.ID, "rm big && ln -s /etc/passwd big")
		st, b = get(base + "/" + CFileID("big") + "/content")
		refused("download the swapped-in symlink", st, b)
	})

	t.Run("19 FIFOs, /dev/zero behind a symlink, devices and a huge sparse file [host DoS]", func(t *testing.T) {
		e.exec(e.keyA, c.ID, "mkfifo fifo; ln -s /dev/zero zero; ln -s /dev/zero d/zero2; mknod dev c 1 5 2>/dev/null; truncate -s 100G sparse; true")
		for _, rel := range []string{"fifo", "zero", "d/zero2", "dev"} {
			start := time.Now()
			st, b := get(base + "/" + CFileID(rel) + "/content")
			refused("download "+rel, st, b)
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("download %s took %s", rel, d)
			}
			// As docs/http-api.md says: a FIFO is a 400 (not a regular
			// file), except under gVisor, where it exists only in gVisor's
			// kernel, never in the home: no such file, 404.
			if want := map[bool]int{true: 404, false: 400}[rt == "runsc"]; rel == "fifo" && st != want {
				t.Errorf("download of a FIFO on %s: %d, want %d as the docs say", rt, st, want)
			}
		}
		var f ContainerFile
		st, b := e.do("GET", base+"/"+CFileID("sparse"), e.keyA, nil)
		e.must(st, b, &f)
		if f.Bytes != 100<<30 {
			t.Errorf("sparse file: %+v", f)
		}
		st, b = get(base + "/" + CFileID("sparse") + "/content")
		if st != http.StatusUnprocessableEntity {
			t.Errorf("download of a 100 GiB sparse file: %d %.200s, want 422 (over the cap)", st, b)
		}
		st, b = e.do("POST", base+"/"+CFileID("sparse")+"/promote", e.keyA, nil)
		if st != http.StatusUnprocessableEntity {
			t.Errorf("promote of a 100 GiB sparse file: %d %.200s", st, b)
		}
		// The container still works.
		if o := e.exec(e.keyA, c.ID, "echo alive").Output[0]; o.Stdout != "alive\n" {
			t.Errorf("after: %+v", o)
		}
	})

	t.Run("20 archives are stored as bytes, never unpacked: zip-slip, tar symlink-then-file, gzip bomb [escape, host DoS]", func(t *testing.T) {
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		tw.WriteHeader(&tar.Header{Name: "../../evil.txt", Mode: 0o644, Size: 4})
		tw.Write([]byte("evil"))
		tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc"})
		tw.WriteHeader(&tar.Header{Name: "link/passwd", Mode: 0o644, Size: 4})
		tw.Write([]byte("evil"))
		tw.Close()
		var gb bytes.Buffer
		gw := gzip.NewWriter(&gb)
		gw.Write(make([]byte, 64<<20)) // 64 MiB of zeros in a few KiB
		gw.Close()
		for name, content := range map[string][]byte{"slip.tar": tb.Bytes(), "bomb.gz": gb.Bytes()} {
			var f ContainerFile
			st, b := e.upload(base, e.keyA, part{name: "path", content: "archives/"}, part{name: "file", filename: name, content: string(content)})
			e.must(st, b, &f)
			if f.Bytes != int64(len(content)) {
				t.Errorf("%s stored as %d bytes, sent %d", name, f.Bytes, len(content))
			}
			var wf orFile
			st, b = e.upload("/api/v1/files", e.keyA, part{name: "file", filename: name, content: string(content)})
			e.must(st, b, &wf)
			if wf.SizeBytes != int64(len(content)) {
				t.Errorf("workspace %s: %d bytes", name, wf.SizeBytes)
			}
		}
		var got []string
		for _, f := range e.listAll("/api/v1", c.ID, 100, "") {
			if strings.HasPrefix(f.Path, "archives/") || strings.Contains(f.Path, "evil") || strings.HasPrefix(f.Path, "link") {
				got = append(got, f.Path)
			}
		}
		if strings.Join(got, ",") != "archives/bomb.gz,archives/slip.tar" {
			t.Errorf("home after archive uploads: %q", got)
		}
		noEscapes()
	})
}

func fileSum(t testing.TB, p string) [32]byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
