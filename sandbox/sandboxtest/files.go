package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/home"
)

// FilesSuite covers the host's file calls on a home (ListFiles, StatFile,
// OpenFile, ReadFile, WriteFile, RemoveFile): order and paging, hostile
// names and file kinds, and that a sleeping sandbox's files are reached
// without starting it.
func FilesSuite(t *testing.T, rt string) {
	ctx := context.Background()
	m, data := Open(t, rt, "busybox")

	t.Run("01 listing: regular files only, in path order, paged both ways", func(t *testing.T) {
		const box = "lister"
		o := Run(t, m, box, `set -e
mkdir -p a/b/c deep a-b
echo 1 > a/b/c/f; echo 22 > a-b/x; echo 333 > a.txt; echo z > z
printf 'x' > "$(printf 'new\nline')"; printf 'y' > "$(printf 'bad\377utf8')"
ln -s /etc/passwd link; ln -s a dirlink; ln a.txt hard
d=deep; for i in $(seq 1 40); do d=$d/d; done; mkdir -p $d; echo deep > $d/f
mkfifo fifo 2>/dev/null || true
echo ok`)
		if o.Stdout != "ok\n" {
			t.Fatalf("setup: %+v %q %q", o.Outcome, o.Stdout, o.Stderr)
		}
		all, err := m.ListFiles(ctx, box, sandbox.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, f := range all.Files {
			paths = append(paths, f.Path)
		}
		want := []string{"a-b/x", "a.txt", "a/b/c/f", "bad\377utf8", "hard", "new\nline", "z"}
		if !slices.Equal(paths, want) || all.More {
			t.Fatalf("ListFiles = %q (more %v), want %q", paths, all.More, want)
		}
		if all.Files[0].Size != 3 || all.Files[0].ModTime.IsZero() || all.Files[0].Uploaded {
			t.Errorf("a-b/x: %+v", all.Files[0])
		}
		for _, desc := range []bool{false, true} {
			var got []string
			opts := sandbox.ListOptions{Limit: 2, Desc: desc}
			for pages := 0; ; pages++ {
				if pages > 10 {
					t.Fatal("paging does not end")
				}
				p, err := m.ListFiles(ctx, box, opts)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range p.Files {
					got = append(got, f.Path)
				}
				if !p.More {
					break
				}
				opts.After = p.Next
			}
			exp := slices.Clone(want)
			if desc {
				slices.Reverse(exp)
			}
			if !slices.Equal(got, exp) {
				t.Errorf("paged (desc %v) = %q, want %q", desc, got, exp)
			}
		}
		// Resuming from a cursor that is a directory or not a file at all.
		if p, _ := m.ListFiles(ctx, box, sandbox.ListOptions{After: "a/"}); len(p.Files) == 0 || p.Files[0].Path != "a/b/c/f" {
			t.Errorf("after a/: %+v", p.Files)
		}
		if p, _ := m.ListFiles(ctx, box, sandbox.ListOptions{After: "b"}); len(p.Files) == 0 || p.Files[0].Path != "bad\377utf8" {
			t.Errorf("after b: %+v", p.Files)
		}
		if _, err := m.ListFiles(ctx, box, sandbox.ListOptions{Limit: sandbox.MaxListLimit + 1}); err == nil {
			t.Error("a limit over the maximum was accepted")
		}
	})

	t.Run("02 stat, open, remove: regular files only, nothing outside", func(t *testing.T) {
		const box = "lister"
		if fi, err := m.StatFile(ctx, box, "a/b/c/f"); err != nil || fi.Size != 2 || fi.Path != "a/b/c/f" {
			t.Errorf("stat: %+v %v", fi, err)
		}
		for p, want := range map[string]error{
			"link": sandbox.ErrNotRegular, "dirlink/b/c/f": nil, "a": sandbox.ErrNotRegular,
			"nope": sandbox.ErrFileNotFound, "a.txt/x": sandbox.ErrFileNotFound,
			"../x": sandbox.ErrBadPath, "/etc/passwd": sandbox.ErrBadPath, "a\x00b": sandbox.ErrBadPath,
			strings.Repeat("n", 256): sandbox.ErrBadPath,
		} {
			_, err := m.StatFile(ctx, box, p)
			if want == nil && err != nil || want != nil && !errors.Is(err, want) {
				t.Errorf("stat %q: %v, want %v", p, err, want)
			}
		}
		f, err := m.OpenFile(ctx, box, "a.txt", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		if f.Close(); err != nil || string(b) != "333\n" || f.Size != 4 {
			t.Errorf("open: %q %v", b, err)
		}
		if _, err := m.OpenFile(ctx, box, "a.txt", 3); !errors.Is(err, sandbox.ErrTooLarge) {
			t.Errorf("open over the cap: %v", err)
		}
		if err := m.RemoveFile(ctx, box, "link"); !errors.Is(err, sandbox.ErrNotRegular) {
			t.Errorf("remove a symlink: %v", err)
		}
		if err := m.RemoveFile(ctx, box, "hard"); err != nil {
			t.Errorf("remove: %v", err)
		}
		if err := m.RemoveFile(ctx, box, "hard"); !errors.Is(err, sandbox.ErrFileNotFound) {
			t.Errorf("remove twice: %v", err)
		}
		if o := Run(t, m, box, "cat a.txt; test -L link && test -e hard || echo gone"); o.Stdout != "333\ngone\n" {
			t.Errorf("after remove: %q %q", o.Stdout, o.Stderr)
		}
	})

	t.Run("03 a sleeping sandbox's files without starting it", func(t *testing.T) {
		const box = "sleeper"
		Run(t, m, box, "mkdir -p out && echo result > out/r.txt")
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		before := containers(t, rt, data)
		mounted := mountsUnder(filepath.Join(data, "run"))
		if fi, err := m.PutFile(ctx, box, "in/data.csv", strings.NewReader("a,b\n")); err != nil || fi.Size != 4 || !fi.Uploaded || fi.Path != "in/data.csv" {
			t.Fatalf("PutFile asleep: %+v %v", fi, err)
		}
		l, err := m.ListFiles(ctx, box, sandbox.ListOptions{})
		if err != nil || len(l.Files) != 2 || l.Files[0].Path != "in/data.csv" || !l.Files[0].Uploaded || l.Files[1].Uploaded {
			t.Fatalf("list asleep: %+v %v", l, err)
		}
		if b, err := m.ReadFile(ctx, box, "out/r.txt", 100); err != nil || string(b) != "result\n" {
			t.Errorf("read asleep: %q %v", b, err)
		}
		if err := m.RemoveFile(ctx, box, "out/r.txt"); err != nil {
			t.Error(err)
		}
		f, err := m.OpenFile(ctx, box, "in/data.csv", 100)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := m.Status(box); st != sandbox.Sleeping || err != nil {
			t.Errorf("status while a file is open: %s %v", st, err)
		}
		if after := containers(t, rt, data); !slices.Equal(after, before) {
			t.Errorf("file calls started a container: %v -> %v", before, after)
		}
		// A command waits for the open file, then wakes the sandbox over
		// the same home.
		done := make(chan string, 1)
		go func() { done <- Run(t, m, box, "cat in/data.csv; ls out").Stdout }()
		select {
		case out := <-done:
			t.Fatalf("a command ran while the file was open: %q", out)
		case <-time.After(300 * time.Millisecond):
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != "a,b\n" {
			t.Errorf("read: %q", b)
		}
		if out := <-done; out != "a,b\n" {
			t.Errorf("after wake: %q", out)
		}
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		if left := mountsUnder(filepath.Join(data, "run")); !slices.Equal(left, mounted) {
			t.Errorf("mounts before the file calls %v, after %v", mounted, left)
		}
		for _, call := range []func() error{
			func() error { _, err := m.ListFiles(ctx, "ghost", sandbox.ListOptions{}); return err },
			func() error { _, err := m.StatFile(ctx, "ghost", "f"); return err },
			func() error { _, err := m.OpenFile(ctx, "ghost", "f", 1); return err },
			func() error { return m.RemoveFile(ctx, "ghost", "f") },
		} {
			if err := call(); !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("unknown sandbox: %v", err)
			}
		}
		if _, err := os.Stat(filepath.Join(data, "homes", "ghost.lock")); err == nil {
			t.Error("a file call on an unknown name left a lock file")
		}
	})

	t.Run("04 destroy stops a download; a failed upload keeps the old file", func(t *testing.T) {
		const box = "doomed-files"
		Run(t, m, box, "head -c 1000000 /dev/zero > big && echo old > keep")
		f, err := m.OpenFile(ctx, box, "big", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10)
		if _, err := f.Read(buf); err != nil {
			t.Fatal(err)
		}
		destroyed := make(chan error, 1)
		go func() { destroyed <- m.Destroy(ctx, box) }()
		// Destroy cancels the reader; it waits for Close to go on. A reader
		// that got to the end before Destroy began (io.EOF) is stopped too:
		// its next read answers ErrDestroyed.
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err = f.Read(buf)
			if err == io.EOF && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil || time.Now().After(deadline) {
				break
			}
		}
		if !errors.Is(err, sandbox.ErrDestroyed) {
			t.Errorf("read during destroy: %v", err)
		}
		f.Close()
		if err := <-destroyed; err != nil {
			t.Fatal(err)
		}

		Run(t, m, box, "echo old > keep")
		err = m.WriteFile(ctx, box, "keep", io.MultiReader(strings.NewReader("new"), errReader{}))
		if err == nil {
			t.Fatal("a failing upload succeeded")
		}
		if o := Run(t, m, box, "cat keep; ls -a | grep -c shellgate-upload"); o.Stdout != "old\n0\n" {
			t.Errorf("after a failed upload: %q %q", o.Stdout, o.Stderr)
		}
		// A command that replaces an uploaded file makes it the sandbox's.
		if err := m.WriteFile(ctx, box, "up", strings.NewReader("u")); err != nil {
			t.Fatal(err)
		}
		Run(t, m, box, "cp up up2 && mv up2 up")
		if fi, err := m.StatFile(ctx, box, "up"); err != nil || fi.Uploaded {
			t.Errorf("replaced upload: %+v %v", fi, err)
		}
	})

	t.Run("05 hostile file kinds planted on the host side never block or escape", func(t *testing.T) {
		const box = "traps2"
		Run(t, m, box, "true")
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		// Plant a FIFO and a device in the home image itself, through a
		// file call's own mount: mount it by waking, plant, sleep.
		Run(t, m, box, "echo x > plain")
		homes, _ := filepath.Glob(filepath.Join(data, "run", "sandboxes", "*", "private", "home"))
		var h string
		for _, c := range homes {
			if _, err := os.Stat(filepath.Join(c, "plain")); err == nil {
				h = c
			}
		}
		if h == "" {
			t.Fatalf("home not found among %v", homes)
		}
		unix.Mkfifo(filepath.Join(h, "fifo"), 0o666)
		unix.Mknod(filepath.Join(h, "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5)))
		os.Symlink("/dev/zero", filepath.Join(h, "zlink"))
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"fifo", "zero", "zlink"} {
			done := make(chan error, 1)
			go func() { _, err := m.ReadFile(ctx, box, p, 1<<20); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, sandbox.ErrNotRegular) {
					t.Errorf("read %s: %v", p, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("read %s blocked", p)
			}
		}
		l, err := m.ListFiles(ctx, box, sandbox.ListOptions{})
		if err != nil || len(l.Files) != 1 || l.Files[0].Path != "plain" {
			t.Errorf("list: %+v %v", l, err)
		}
	})

	t.Run("06 a directory too large to list is refused, not read whole", func(t *testing.T) {
		// A home with inodes enough for it (a sparse 2 GiB image).
		bm, _ := Open(t, rt, "busybox", func(c *sandbox.Config) { c.HomeBytes = 2 << 30 })
		const box = "crowded"
		o := Shell(t, bm, box, Call{Commands: []string{fmt.Sprintf("mkdir many && cd many && seq 1 %d | xargs touch && echo ok", sandbox.MaxDirEntries+1)}, TimeoutMs: i64(240_000)})[0]
		if o.Stdout != "ok\n" {
			t.Fatalf("setup: %+v %q", o.Outcome, o.Stderr)
		}
		Run(t, bm, box, "echo x > a")
		if _, err := bm.ListFiles(ctx, box, sandbox.ListOptions{}); !errors.Is(err, sandbox.ErrTooManyFiles) {
			t.Errorf("list: %v, want ErrTooManyFiles", err)
		}
		// Its files are still reached one by one.
		if b, err := bm.ReadFile(ctx, box, "a", 10); err != nil || string(b) != "x\n" {
			t.Errorf("read beside it: %q %v", b, err)
		}
	})

	t.Run("08 CheckHome sees what commands write and only that", func(t *testing.T) {
		const box = "watched"
		// check runs cmd, asking (or not) whether the home changed.
		check := func(cmd string, ask bool) sandbox.Result {
			t.Helper()
			res, err := m.Exec(ctx, box, sandbox.Command{Command: cmd, TimeoutMs: 60_000, MaxBytes: 1 << 16, CheckHome: ask})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%s: %+v %v", cmd, res, err)
			}
			if !ask && res.HomeUnchanged {
				t.Errorf("%s: HomeUnchanged without CheckHome", cmd)
			}
			return res
		}
		Run(t, m, box, "true")
		if check("true", true).HomeUnchanged {
			t.Error("the first check after a wake said unchanged")
		}
		steps := []struct {
			cmd     string
			changed bool
		}{
			{"true", false}, // (the sandbox's first command: not checked)
			{"true", false},
			{"cat /etc/hostname >/dev/null; ls -la >/dev/null", false},
			{"echo 1 > a.txt", true},
			{"true", false},
			{"mkdir -p d/e && echo 2 > d/e/b.txt", true},
			{"echo more >> d/e/b.txt", true},
			{"touch -d 2001-01-01 a.txt", true},
			{"mv a.txt c.txt", true},
			{"rm c.txt", true}, // the unlinked file's link count, an attribute: a harmless yes
			{"true", false},
			{"cat d/e/b.txt > /dev/null", false},
			{"echo 3 > /tmp/outside", false}, // not the home
			// a write through a shared mapping, closed when the process ends
			{"printf 0000 > m.bin", true},
			{"true", false},
			{"true", false},
		}
		for i, s := range steps {
			if i == 0 {
				continue
			}
			got := !check(s.cmd, true).HomeUnchanged
			switch {
			case s.changed && !got:
				// A missed change would hide a file a command wrote.
				t.Errorf("after %q: HomeUnchanged = true", s.cmd)
			case !s.changed && got && rt == "runsc" && (s.cmd != "true" || steps[i-1].cmd != "true"):
				// gVisor's gofer writes back late and updates times of
				// files the sandbox only read: a needless listing, not a
				// miss; a command that touches no file of the home after
				// one that did not either is still a no.
				t.Logf("after %q: HomeUnchanged = false under runsc", s.cmd)
			case !s.changed && got:
				t.Errorf("after %q: HomeUnchanged = false, want true", s.cmd)
			}
		}
		// A command that does not ask leaves the watch as it is: the next
		// one that asks still sees the earlier write.
		check("echo 4 > quiet.txt", false)
		check("true", false)
		if check("true", true).HomeUnchanged {
			t.Error("a write by a command that did not ask was lost")
		}
		if !check("true", true).HomeUnchanged && rt != "runsc" {
			t.Error("after the write was reported: HomeUnchanged = false")
		}
		// Host-side writes count too.
		if err := m.WriteFile(ctx, box, "up.txt", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		if check("true", true).HomeUnchanged {
			t.Error("an upload was not seen")
		}
		// A sandbox woken from sleep has a fresh watch: changed.
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		if check("true", true).HomeUnchanged {
			t.Error("after a wake: HomeUnchanged = true")
		}
	})

	t.Run("07 a home mounted for a file call by a process that died is unmounted by the next Open", func(t *testing.T) {
		const box = "crashy"
		Run(t, m, box, "echo precious > f")
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		// What a process killed during a file call on a sleeping sandbox
		// leaves: the directory, its free owner lock, meta.json and the
		// home mounted alone.
		real, _ := filepath.EvalSymlinks(data)
		dir := filepath.Join(real, "run", "sandboxes", "sg-deadbeefdeadbeef")
		img := filepath.Join(real, "homes", box+".img")
		if err := os.MkdirAll(filepath.Join(dir, "private", "home"), 0o700); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "owner.lock"), nil, 0o600)
		os.WriteFile(filepath.Join(dir, "meta.json"), []byte(`{"runtime":"`+rt+`","home":"`+img+`"}`), 0o600)
		if err := home.Mount(img, filepath.Join(dir, "private", "home")); err != nil {
			t.Fatal(err)
		}
		agent, err := agentbin.Build()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := sandbox.Open(ctx, sandbox.Config{DataDir: data, Runtime: rt, Image: "busybox", Images: ImagesDir(), Agent: agent,
			Limits: Limits, HomeBytes: HomeBytes, LayerBytes: 64 << 20, IdleTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := m2.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if left := mountsUnder(dir); len(left) > 0 {
			t.Errorf("still mounted: %v", left)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s left behind", dir)
		}
		if b, err := m.ReadFile(ctx, box, "f", 100); err != nil || string(b) != "precious\n" {
			t.Errorf("the home after cleanup: %q %v", b, err)
		}
	})
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("client went away") }
