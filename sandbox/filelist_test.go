package sandbox

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/homefs"
)

// TestListDirPaging checks the walk's order and cursors on a plain
// directory tree (no sandbox needed): every combination of page size, scan
// budget and direction pages through exactly the sorted list of regular
// files, each once, whatever names sort next to a directory's "/".
func TestListDirPaging(t *testing.T) {
	root := t.TempDir()
	names := []string{"a", "a-b", "a.b", "a0", "b", "new\nline", "bad\xffutf8", "z", "d"}
	var want []string
	rng := rand.New(rand.NewPCG(1, 2))
	var mk func(dir, rel string, depth int)
	mk = func(dir, rel string, depth int) {
		for _, n := range names {
			if rng.IntN(3) == 0 && depth < 3 {
				os.Mkdir(filepath.Join(dir, n), 0o755)
				mk(filepath.Join(dir, n), rel+n+"/", depth+1)
				continue
			}
			switch rng.IntN(5) {
			case 0:
				os.Symlink("/etc/passwd", filepath.Join(dir, n))
			case 1:
				unix.Mkfifo(filepath.Join(dir, n), 0o644)
			default:
				os.WriteFile(filepath.Join(dir, n), []byte(rel+n), 0o644)
				want = append(want, rel+n)
			}
		}
	}
	mk(root, "", 0)
	os.Mkdir(filepath.Join(root, "empty"), 0o755)
	os.WriteFile(filepath.Join(root, homefs.UploadTempPrefix+"x"), nil, 0o644)
	slices.Sort(want)
	if len(want) < 20 {
		t.Fatalf("tree too small: %d files", len(want))
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ctx := context.Background()
	for _, desc := range []bool{false, true} {
		exp := slices.Clone(want)
		if desc {
			slices.Reverse(exp)
		}
		for _, limit := range []int{1, 2, 3, 7, 1000} {
			for _, budget := range []int{1, 4, 9, 1 << 20} {
				var got []string
				opts := ListOptions{Limit: limit, Desc: desc}
				for pages := 0; ; pages++ {
					if pages > 10*len(want)+10 {
						t.Fatalf("desc %v limit %d budget %d: paging does not end", desc, limit, budget)
					}
					l, err := homefs.ListDir(ctx, fd, opts, budget)
					if err != nil {
						t.Fatal(err)
					}
					if len(l.Files) > limit {
						t.Fatalf("page of %d > limit %d", len(l.Files), limit)
					}
					for _, f := range l.Files {
						got = append(got, f.Path)
						if f.Size != int64(len(f.Path)) {
							t.Errorf("%q: size %d", f.Path, f.Size)
						}
					}
					if !l.More {
						break
					}
					if l.Next == opts.After {
						t.Fatalf("cursor did not move from %q", opts.After)
					}
					opts.After = l.Next
				}
				if !slices.Equal(got, exp) {
					i := 0
					for i < len(got) && i < len(exp) && got[i] == exp[i] {
						i++
					}
					t.Errorf("desc %v limit %d budget %d: %d paths, want %d; first difference at %d", desc, limit, budget, len(got), len(exp), i)
				}
			}
		}
	}
	// Depth: nothing below MaxListDepth directories is entered.
	deep := root
	for i := 0; i < MaxListDepth+2; i++ {
		deep = filepath.Join(deep, "d")
	}
	os.MkdirAll(deep, 0o755)
	os.WriteFile(filepath.Join(deep, "f"), nil, 0o644)
	l, err := homefs.ListDir(ctx, fd, ListOptions{Limit: 1000}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range l.Files {
		if strings.Count(f.Path, "/") >= MaxListDepth {
			t.Errorf("listed below the depth bound: %q", f.Path)
		}
	}
}
