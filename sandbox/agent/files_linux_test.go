package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/homefs"
	"github.com/shellgate/shellgate/testenv"
)

// fileUID is the commands' user of the file tests' agent.
const fileUID = 65534

// startFileAgent runs the real agent as PID 1 of a new PID namespace with
// commands (and file requests) as fileUID, and returns it with a home
// owned by that user.
func startFileAgent(t *testing.T) (*agent.Client, string) {
	t.Helper()
	testenv.NeedRoot(t, "a PID namespace and another user")
	home := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, fileUID, fileUID); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(home), 0o755)
	os.Chmod(filepath.Dir(filepath.Dir(home)), 0o755)
	c := startAgent(t, "-uid", fmt.Sprint(fileUID), "-gid", fmt.Sprint(fileUID))
	return c, home
}

func readAll(t *testing.T, c *agent.Client, home, rel string, max int64) ([]byte, error) {
	t.Helper()
	_, r, err := c.OpenFile(context.Background(), home, rel, max)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func TestAgentFiles(t *testing.T) {
	c, home := startFileAgent(t)
	ctx := context.Background()

	// Upload, stat, read back, as the commands' user.
	data := bytes.Repeat([]byte("0123456789"), 30000) // several frames
	fi, err := c.PutFile(ctx, home, "a/b/c.txt", bytes.NewReader(data), 0)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Path != "a/b/c.txt" || fi.Size != int64(len(data)) {
		t.Fatalf("put: %+v", fi)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(home, "a/b/c.txt"), &st); err != nil || st.Uid != fileUID {
		t.Fatalf("uploaded file owner %d (err %v), want %d", st.Uid, err, fileUID)
	}
	if got, err := readAll(t, c, home, "a/b/c.txt", 1<<20); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, err %v", len(got), err)
	}
	if fi, err := c.StatFile(ctx, home, "a/b/c.txt"); err != nil || fi.Size != int64(len(data)) {
		t.Fatalf("stat: %+v %v", fi, err)
	}
	// The commands see it as their file.
	out, err := c.Exec(ctx, agent.ExecRequest{Shell: []string{"/bin/sh", "-c"}, Command: "cat a/b/c.txt | wc -c; id -u", Dir: home}, nil)
	if err != nil || strings.Fields(string(out.Stdout))[0] != fmt.Sprint(len(data)) {
		t.Fatalf("exec: %q %v", out.Stdout, err)
	}

	// A file over the read cap, and a write over the write cap.
	if _, err := readAll(t, c, home, "a/b/c.txt", 10); !errors.Is(err, homefs.ErrTooLarge) {
		t.Fatalf("read over the cap: %v", err)
	}
	if _, err := c.PutFile(ctx, home, "big.bin", bytes.NewReader(data), 1000); !errors.Is(err, homefs.ErrTooLarge) {
		t.Fatalf("write over the cap: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(home, "big.bin")); !os.IsNotExist(err) {
		t.Fatalf("a refused write left a file: %v", err)
	}
	// A write whose source fails: once PutFile returns, the agent has
	// removed the temporary file too (as after the refused write above).
	broken := io.MultiReader(bytes.NewReader(data), iotest.ErrReader(errors.New("the source broke")))
	if _, err := c.PutFile(ctx, home, "broken.bin", broken, 0); err == nil || !strings.Contains(err.Error(), "the source broke") {
		t.Fatalf("write from a failing source: %v", err)
	}
	if names := listDir(t, home); !slices.Equal(names, []string{"a"}) {
		t.Fatalf("failed writes left %q in the home", names)
	}
	// A huge (sparse) file: refused by size; a read closed early stops the
	// stream and the connection goes on.
	if err := os.Truncate(filepath.Join(home, "a/b/c.txt"), 8<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(t, c, home, "a/b/c.txt", 1<<30); !errors.Is(err, homefs.ErrTooLarge) {
		t.Fatalf("read of a huge file: %v", err)
	}
	_, r, err := c.OpenFile(ctx, home, "a/b/c.txt", 16<<30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := c.StatFile(ctx, home, "a/b/c.txt"); err != nil {
		t.Fatalf("stat after an abandoned read: %v", err)
	}

	// Hostile homes: symlinks out, FIFOs, directories, files the user may
	// not read, paths that leave.
	os.Symlink("/etc/passwd", filepath.Join(home, "passwd"))
	os.Symlink("/", filepath.Join(home, "root"))
	syscall.Mkfifo(filepath.Join(home, "fifo"), 0o666)
	os.WriteFile(filepath.Join(home, "secret"), []byte("root's"), 0o600) // owned by root
	for _, tc := range []struct {
		path string
		want error
	}{
		{"passwd", homefs.ErrNotRegular},
		{"root/etc/passwd", homefs.ErrBadPath},
		{"fifo", homefs.ErrNotRegular},
		{"a/b", homefs.ErrNotRegular},
		{"missing", homefs.ErrFileNotFound},
		{"../etc/passwd", homefs.ErrBadPath},
		{"/etc/passwd", homefs.ErrBadPath},
	} {
		if _, err := readAll(t, c, home, tc.path, 1<<20); !errors.Is(err, tc.want) {
			t.Errorf("read %q: %v, want %v", tc.path, err, tc.want)
		}
		if tc.want == homefs.ErrFileNotFound {
			// (a write there creates it)
		} else if _, err := c.PutFile(ctx, home, tc.path, strings.NewReader("x"), 0); !errors.Is(err, tc.want) {
			t.Errorf("write %q: %v, want %v", tc.path, err, tc.want)
		}
		if err := c.RemoveFile(ctx, home, tc.path); !errors.Is(err, tc.want) {
			t.Errorf("remove %q: %v, want %v", tc.path, err, tc.want)
		}
	}
	if _, err := readAll(t, c, home, "secret", 1<<20); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("read of root's 0600 file as the commands' user: %v", err)
	}
	if b, _ := os.ReadFile("/etc/passwd"); len(b) == 0 {
		t.Fatal("the symlink test clobbered /etc/passwd")
	}

	// Many files: pages of the limit, in order, resumed by the cursor; the
	// symlinks, FIFO and the refused upload's leftovers are not listed.
	for i := range 1500 {
		os.WriteFile(filepath.Join(home, "a", fmt.Sprintf("f%04d", i)), nil, 0o644)
	}
	var all []string
	opts := homefs.ListOptions{}
	for {
		l, err := c.ListFiles(ctx, home, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range l.Files {
			all = append(all, f.Path)
		}
		if !l.More {
			break
		}
		opts.After = l.Next
	}
	if len(all) != 1502 || all[0] != "a/b/c.txt" || all[1] != "a/f0000" || all[1501] != "secret" {
		t.Fatalf("listed %d files: %q ... %q", len(all), all[:min(3, len(all))], all[len(all)-1])
	}
	if err := c.RemoveFile(ctx, home, "a/f0000"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatFile(ctx, home, "a/f0000"); !errors.Is(err, homefs.ErrFileNotFound) {
		t.Fatalf("stat after remove: %v", err)
	}
}

// TestAgentListBounds: a listing whose names would not fit one frame ends
// its pages early and pages on to the end; a directory past MaxDirEntries
// is ErrTooManyFiles, not an unbounded read.
func TestAgentListBounds(t *testing.T) {
	c, home := startFileAgent(t)
	ctx := context.Background()
	long := func(ch byte) string { return strings.Repeat(string(ch), 250) }
	dir := filepath.Join(home, long('a'), long('b'), long('c'))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s%04d", long('f'), i)), nil, 0o644)
	}
	var n, pages int
	opts := homefs.ListOptions{}
	for {
		l, err := c.ListFiles(ctx, home, opts)
		if err != nil {
			t.Fatal(err)
		}
		n += len(l.Files)
		pages++
		if !l.More {
			break
		}
		opts.After = l.Next
	}
	if n != 1000 || pages < 2 {
		t.Fatalf("%d files in %d pages, want 1000 in more than one", n, pages)
	}

	many := filepath.Join(home, "many")
	os.Mkdir(many, 0o755)
	for i := range homefs.MaxDirEntries + 1 {
		f, err := os.Create(filepath.Join(many, fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if _, err := c.ListFiles(ctx, home, homefs.ListOptions{}); !errors.Is(err, homefs.ErrTooManyFiles) {
		t.Fatalf("list of a directory with too many entries: %v", err)
	}
}
