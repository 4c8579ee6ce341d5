package kubehome_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/homefs"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/kube/kubehome"
	"github.com/shellgate/shellgate/sandbox/kube/kubetest"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
)

// counting passes every call to the real store and counts the Puts.
type counting struct {
	homearchive.Objects
	puts atomic.Int64
}

func (c *counting) Put(ctx context.Context, key string, r io.ReadSeeker, size int64) error {
	c.puts.Add(1)
	return c.Objects.Put(ctx, key, r, size)
}

// stores runs fn over a local directory and over S3 (versitygw).
func stores(t *testing.T, fn func(t *testing.T, obj homearchive.Objects)) {
	t.Run("dir", func(t *testing.T) {
		d, err := homearchive.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		fn(t, d)
	})
	t.Run("s3", func(t *testing.T) {
		fn(t, s3test.Open(t, s3test.NewBucket(t)).Objects("kubehomes"))
	})
}

func newSandboxes(t testing.TB, c *kubetest.Cluster, arch kube.Archiver) (*kube.Backend, *kube.Sandboxes) {
	t.Helper()
	return c.Sandboxes(t, arch, -1)
}

func run(t testing.TB, s *kube.Sandboxes, name, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Exec(ctx, name, sandbox.Command{Command: cmd})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %+v %v", cmd, res, err)
	}
	return string(res.Stdout)
}

// fill makes a home of an empty file, nested directories, two files with
// the same bytes, a 5 MiB random file, an executable, a name with a space, a symlink out of the home
// and a FIFO.
const fill = `set -e
mkdir -p a/b/c/d empty-dir
: > empty
printf 'deep\n' > a/b/c/d/deep.txt
cp a/b/c/d/deep.txt a/copy.txt
head -c 5242880 /dev/urandom > big.bin
printf '#!/bin/sh\necho hi\n' > a/run.sh && chmod 755 a/run.sh
chmod 600 empty
printf 'odd' > 'na me'
ln -s /etc/passwd link-out
mkfifo fifo
`

// listing is the home's regular files with mode, size and SHA-256, as
// the pod sees them.
const listing = `find . -type f -exec sh -c 'for f; do printf "%s %s " "$(stat -c "%a %s" "$f")" "$(sha256sum < "$f" | cut -d" " -f1)"; printf "%s\n" "$f" | od -An -c | tr -d " \n"; echo; done' sh {} + | sort`

// TestSleepWake: 1. a sleep and wake keep every regular file byte-exact
// with its mode, and leave out the symlink and the FIFO; 2. a second sleep
// with one file changed puts one object (and the manifest), and its old
// bytes are deleted once no file has them; 3. a new Sandboxes on the same cluster and store (a
// restarted gateway) restores the home; 4. Destroy deletes the archive.
func TestSleepWake(t *testing.T) {
	stores(t, func(t *testing.T, obj homearchive.Objects) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := kubetest.NewCluster(t)
		cnt := &counting{Objects: obj}
		a := kubehome.New(cnt)
		a.TempDir = t.TempDir()
		_, s := newSandboxes(t, c, a)

		run(t, s, "c1", fill)
		before := run(t, s, "c1", listing)
		if n := strings.Count(before, "\n"); n != 6 {
			t.Fatalf("the pod lists %d files, want 6:\n%s", n, before)
		}
		// The host's own hash of the big file, read over the agent.
		big, err := s.ReadFile(ctx, "c1", "big.bin", 10<<20)
		if err != nil || len(big) != 5<<20 {
			t.Fatalf("%d %v", len(big), err)
		}
		sum := sha256.Sum256(big)
		if !strings.Contains(before, hex.EncodeToString(sum[:])) {
			t.Fatalf("the pod's listing lacks the big file's hash:\n%s", before)
		}
		if err := s.Sleep(ctx, "c1"); err != nil {
			t.Fatal(err)
		}
		if st, _ := s.Status("c1"); st != sandbox.Sleeping {
			t.Fatalf("1: status %v", st)
		}
		if pods, _, _, _ := c.Objects(ctx); pods != 0 {
			t.Fatalf("1: %d pods after sleep", pods)
		}
		st := a.Stats()
		// 4 distinct non-empty contents (deep and its copy, big, run.sh,
		// the name with a space): the copy is not put again.
		if st.Puts != 4 || cnt.puts.Load() != 5 || st.BytesPut != 5<<20+5+18+3 {
			t.Fatalf("1: first sleep: %+v, %d store puts", st, cnt.puts.Load())
		}
		after := run(t, s, "c1", listing)
		if after != before {
			t.Fatalf("1: home after wake:\n%s\nwant:\n%s", after, before)
		}
		if out := run(t, s, "c1", "./a/run.sh; test ! -e link-out && test ! -e fifo && echo skipped"); out != "hi\nskipped\n" {
			t.Fatalf("1: %q", out)
		}

		run(t, s, "c1", "echo more >> a/b/c/d/deep.txt")
		changed := run(t, s, "c1", listing)
		p0 := cnt.puts.Load()
		if err := s.Sleep(ctx, "c1"); err != nil {
			t.Fatal(err)
		}
		st2 := a.Stats()
		if st2.Puts-st.Puts != 1 || cnt.puts.Load()-p0 != 2 || st2.BytesPut-st.BytesPut != 10 || st2.Deletes-st.Deletes != 0 {
			t.Fatalf("2: second sleep: %+v after %+v, %d store puts", st2, st, cnt.puts.Load()-p0)
		}
		if got := run(t, s, "c1", listing); got != changed {
			t.Fatalf("2: home after wake:\n%s\nwant:\n%s", got, changed)
		}
		// The old bytes of deep.txt live on in the copy until it changes.
		run(t, s, "c1", "cp a/b/c/d/deep.txt a/copy.txt")
		changed = run(t, s, "c1", listing)
		if err := s.Sleep(ctx, "c1"); err != nil {
			t.Fatal(err)
		}
		if st3 := a.Stats(); st3.Puts != st2.Puts || st3.Deletes-st2.Deletes != 1 {
			t.Fatalf("2: third sleep: %+v after %+v", st3, st2)
		}
		if err := s.Close(ctx); err != nil { // sleeps c1
			t.Fatal(err)
		}

		a2 := kubehome.New(obj)
		_, s2 := newSandboxes(t, c, a2)
		// The restarted gateway finds the sleeping c1 by its manifest.
		if has, err := a2.Has(ctx, "c1"); !has || err != nil {
			t.Fatalf("3: Has %v %v", has, err)
		}
		if st, err := s2.Status("c1"); st != sandbox.Sleeping || err != nil {
			t.Fatalf("3: status after a restart %q %v", st, err)
		}
		if got := run(t, s2, "c1", listing); got != changed {
			t.Fatalf("3: home after a restart:\n%s\nwant:\n%s", got, changed)
		}
		if a2.Stats().Gets != 5 {
			t.Fatalf("3: %+v", a2.Stats())
		}

		keys, err := obj.List(ctx, "c1/")
		if err != nil || len(keys) != 5 {
			t.Fatalf("4: before destroy: %v %v", keys, err)
		}
		if err := s2.Destroy(ctx, "c1"); err != nil {
			t.Fatal(err)
		}
		if keys, err := obj.List(ctx, "c1/"); err != nil || len(keys) != 0 {
			t.Fatalf("4: after destroy: %v %v", keys, err)
		}
		if m, err := a2.Load(ctx, "c1"); m != nil || err != nil {
			t.Fatalf("4: %+v %v", m, err)
		}
		if has, err := a2.Has(ctx, "c1"); has || err != nil {
			t.Fatalf("4: Has after destroy %v %v", has, err)
		}
		if has, err := a2.Has(ctx, "../c1"); has || err != nil {
			t.Fatalf("4: Has of a name no archive can hold %v %v", has, err)
		}
		// A new c1 starts empty.
		if out := run(t, s2, "c1", "find . -type f | wc -l"); strings.TrimSpace(out) != "0" {
			t.Fatalf("4: a new c1 has %s files", out)
		}
	})
}

// testHome is the home of an awake pod of b, for Restore and Archive
// called directly.
type testHome struct {
	c   *agent.Client
	dir string
}

func (h testHome) Exec(ctx context.Context, req agent.ExecRequest) (agent.Output, error) {
	return h.c.Exec(ctx, req, nil)
}
func (h testHome) Dir() string          { return h.dir }
func (h testHome) Files() *agent.Client { return h.c }

func putManifest(t *testing.T, obj homearchive.Objects, name string, m any) {
	t.Helper()
	b, ok := m.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := obj.Put(context.Background(), name+"/manifest.json", bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestHostile: manifests and objects from a tampered store are refused
// and nothing is written into the pod: 1. each bad manifest fails Load and
// Restore with ErrCorrupt; 2. an object whose bytes do not match its hash,
// or are too long or short, fails Restore and leaves no file (not even a
// temporary one); 3. with a Key, an unsigned manifest is refused and a
// signed one restores; 4. a home over the limits, or with a name that is
// not UTF-8, is not archived and the pod is kept.
func TestHostile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := kubetest.NewCluster(t)
	obj, err := homearchive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := kubehome.New(obj)
	a.MaxFiles = 3
	a.MaxHomeBytes = 1 << 20
	a.MaxManifestBytes = 1 << 16
	b, s := newSandboxes(t, c, a)
	run(t, s, "pod", "true")
	cl, err := b.Agent("pod")
	if err != nil {
		t.Fatal(err)
	}
	h := testHome{c: cl, dir: c.HomeDir}
	empty := func(what string) {
		t.Helper()
		l, err := cl.ListFiles(ctx, c.HomeDir, homefs.ListOptions{})
		if err != nil || len(l.Files) != 0 {
			t.Fatalf("%s: the pod has %+v %v", what, l.Files, err)
		}
		if out := run(t, s, "pod", "find . -mindepth 1 | wc -l"); strings.TrimSpace(out) != "0" {
			t.Fatalf("%s: %s entries left in the home", what, out)
		}
	}
	f := func(p string, size int64, sum string) kubehome.File {
		return kubehome.File{Path: []byte(p), Mode: 0o644, Size: size, SHA256: sum}
	}
	m := func(files ...kubehome.File) kubehome.Manifest {
		return kubehome.Manifest{Format: 1, Name: "v", Files: files}
	}
	ok := f("ok", 2, sha("ok"))
	for i, tc := range []struct {
		why string
		m   any
	}{
		{"absolute path", m(f("/etc/passwd", 2, sha("ok")))},
		{"dot-dot", m(f("../x", 2, sha("ok")))},
		{"dot-dot inside", m(f("a/../../x", 2, sha("ok")))},
		{"unclean", m(f("a//b", 2, sha("ok")))},
		{"dot", m(f(".", 2, sha("ok")))},
		{"empty path", m(f("", 2, sha("ok")))},
		{"NUL", m(f("a\x00b", 2, sha("ok")))},
		{"not UTF-8", m(f("n\xffme", 2, sha("ok")))},
		{"duplicate", m(ok, ok)},
		{"out of order", m(f("z", 2, sha("ok")), ok)},
		{"file and directory", m(f("a", 2, sha("ok")), f("a/b", 2, sha("ok")))},
		{"too many files", m(f("a", 2, sha("ok")), f("b", 2, sha("ok")), f("c", 2, sha("ok")), f("d", 2, sha("ok")))},
		{"too many bytes", m(f("a", 1<<20, sha("ok")), f("b", 1, sha("ok")))},
		{"negative size", m(f("a", -1, sha("ok")))},
		{"bad hash", m(f("a", 2, "../../etc"))},
		{"upper-case hash", m(f("a", 2, strings.ToUpper(sha("ok"))))},
		{"empty file with a hash", m(f("a", 0, sha("ok")))},
		{"setuid", m(kubehome.File{Path: []byte("a"), Mode: 0o4755, Size: 2, SHA256: sha("ok")})},
		{"other name", kubehome.Manifest{Format: 1, Name: "w", Files: []kubehome.File{ok}}},
		{"format", kubehome.Manifest{Format: 2, Name: "v"}},
		{"unknown field", []byte(`{"format":1,"name":"v","files":[],"extra":1}`)},
		{"trailing data", []byte(`{"format":1,"name":"v","files":[]}{}`)},
		{"not JSON", []byte("\x00\x01")},
		{"too large", append([]byte(`{"format":1,"name":"v","files":[],"mac":"`), bytes.Repeat([]byte("a"), 1<<16)...)},
	} {
		putManifest(t, obj, "v", tc.m)
		if _, err := a.Load(ctx, "v"); !errors.Is(err, kubehome.ErrCorrupt) {
			t.Fatalf("1.%d %s: Load: %v", i, tc.why, err)
		}
		if err := a.Restore(ctx, "v", h); !errors.Is(err, kubehome.ErrCorrupt) {
			t.Fatalf("1.%d %s: Restore: %v", i, tc.why, err)
		}
	}
	empty("1")

	for i, body := range []string{"ko", "okk", "o", ""} {
		putManifest(t, obj, "v", m(ok))
		if err := obj.Put(ctx, "v/objects/"+sha("ok"), strings.NewReader(body), int64(len(body))); err != nil {
			t.Fatal(err)
		}
		if err := a.Restore(ctx, "v", h); !errors.Is(err, kubehome.ErrCorrupt) {
			t.Fatalf("2.%d %q: %v", i, body, err)
		}
		empty(fmt.Sprintf("2.%d", i))
	}
	obj.Delete(ctx, "v/objects/"+sha("ok"))
	if err := a.Restore(ctx, "v", h); !errors.Is(err, kubehome.ErrCorrupt) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("2: missing object: %v", err)
	}

	a.Key = bytes.Repeat([]byte("k"), 32)
	if err := obj.Put(ctx, "v/objects/"+sha("ok"), strings.NewReader("ok"), 2); err != nil {
		t.Fatal(err)
	}
	if err := a.Restore(ctx, "v", h); !errors.Is(err, kubehome.ErrCorrupt) || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("3: unsigned: %v", err)
	}
	empty("3")
	run(t, s, "pod", "printf ok > ok && chmod 640 ok")
	if err := s.Sleep(ctx, "pod"); err != nil {
		t.Fatal(err)
	}
	if out := run(t, s, "pod", "stat -c '%a %s' ok && cat ok"); out != "640 2\nok" {
		t.Fatalf("3: signed round trip: %q", out)
	}

	run(t, s, "pod", "touch b c d")
	if err := s.Sleep(ctx, "pod"); !errors.Is(err, kube.ErrArchive) || !errors.Is(err, kubehome.ErrTooBig) {
		t.Fatalf("4: too many files: %v", err)
	}
	if st, _ := s.Status("pod"); st != sandbox.Running {
		t.Fatalf("4: status %v", st)
	}
	run(t, s, "pod", "rm b c d && printf x > \"$(printf 'n\\377')\"")
	if err := s.Sleep(ctx, "pod"); !errors.Is(err, kube.ErrArchive) || !errors.Is(err, kubehome.ErrName) {
		t.Fatalf("4: a name that is not UTF-8: %v", err)
	}
	run(t, s, "pod", "rm n* && head -c 1048577 /dev/zero > big")
	if err := s.Sleep(ctx, "pod"); !errors.Is(err, kubehome.ErrTooBig) {
		t.Fatalf("4: too many bytes: %v", err)
	}
	if out := run(t, s, "pod", "ls"); out != "big\nok\n" {
		t.Fatalf("4: %q", out)
	}
}
