package homefs

import (
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// FuzzBeneath: a path from a client or from inside a sandbox either fails
// CleanRel with ErrBadPath or is a clean relative path that stays beneath
// the home; opening, writing and removing it there (OpenBeneath,
// WriteBeneath, RemoveBeneath) never reaches a file outside the home
// through a symlink, never opens anything but a regular file beneath the
// home, and leaves what lies outside untouched. The home holds symlinks
// out of it (relative and absolute, at the end of a path and in its
// middle), a symlink within it, and a FIFO. The corpus is in
// testdata/fuzz/FuzzBeneath.
func FuzzBeneath(f *testing.F) {
	base := f.TempDir()
	home, outside := filepath.Join(base, "home"), filepath.Join(base, "outside")
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	must(os.Mkdir(outside, 0o755))
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	build := func() error {
		if err := os.RemoveAll(home); err != nil {
			return err
		}
		return errors.Join(
			os.MkdirAll(filepath.Join(home, "dir"), 0o755),
			os.WriteFile(filepath.Join(home, "top"), []byte("in"), 0o644),
			os.WriteFile(filepath.Join(home, "dir", "f"), []byte("in"), 0o644),
			os.Symlink("../outside", filepath.Join(home, "out")),
			os.Symlink("../outside/secret", filepath.Join(home, "sec")),
			os.Symlink(outside, filepath.Join(home, "abs")),
			os.Symlink("../../outside", filepath.Join(home, "dir", "up")),
			os.Symlink("dir/f", filepath.Join(home, "in")),
			os.Symlink("dir", filepath.Join(home, "dirlink")),
			syscall.Mkfifo(filepath.Join(home, "fifo"), 0o644),
		)
	}
	must(build())
	intact := func(t *testing.T, p string) {
		ents, err := os.ReadDir(outside)
		b, rerr := os.ReadFile(filepath.Join(outside, "secret"))
		if err != nil || rerr != nil || len(ents) != 1 || string(b) != "secret" {
			t.Fatalf("%q: outside the home changed: %v %v %v %q", p, ents, err, rerr, b)
		}
	}
	// beneath reports whether the regular file the path names, all its
	// symlinks followed, is inside the home.
	beneath := func(clean string) (string, bool) {
		real, err := filepath.EvalSymlinks(filepath.Join(home, clean))
		return real, err == nil && strings.HasPrefix(real, home+"/")
	}
	f.Fuzz(func(t *testing.T, p string, op byte) {
		clean, err := CleanRel(p)
		if err != nil {
			if !errors.Is(err, ErrBadPath) {
				t.Fatalf("CleanRel(%q): %v, not ErrBadPath", p, err)
			}
			return
		}
		if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || path.IsAbs(clean) || path.Clean(clean) != clean || len(clean) > MaxPathBytes {
			t.Fatalf("CleanRel(%q) = %q", p, clean)
		}
		if rel, err := filepath.Rel(home, filepath.Join(home, clean)); err != nil || rel != clean {
			t.Fatalf("CleanRel(%q) = %q leaves the home (%q)", p, clean, rel)
		}
		switch op % 3 {
		case 0:
			fh, info, err := OpenBeneath(home, clean)
			if err != nil {
				break
			}
			b, rerr := io.ReadAll(fh)
			st, serr := fh.Stat()
			fh.Close()
			real, in := beneath(clean)
			if rerr != nil || serr != nil || !st.Mode().IsRegular() || string(b) != "in" || info.Path != clean || !in {
				t.Fatalf("OpenBeneath(%q) opened %q (%v, %q)", clean, real, st.Mode(), b)
			}
			if lst, err := os.Lstat(filepath.Join(home, clean)); err != nil || !os.SameFile(lst, st) {
				t.Fatalf("OpenBeneath(%q) followed a symlink at the end of the path", clean)
			}
		case 1:
			if err := WriteBeneath(home, clean, strings.NewReader("w"), -1, -1); err == nil {
				real, in := beneath(clean)
				b, _ := os.ReadFile(real)
				if !in || string(b) != "w" {
					t.Fatalf("WriteBeneath(%q) wrote %q", clean, real)
				}
			}
			intact(t, p)
			if err := build(); err != nil {
				t.Fatal(err)
			}
		case 2:
			real, in := beneath(clean)
			lst, lerr := os.Lstat(filepath.Join(home, clean))
			if err := RemoveBeneath(home, clean); err == nil {
				if !in || lerr != nil || !lst.Mode().IsRegular() {
					t.Fatalf("RemoveBeneath(%q) removed %q (%v)", clean, real, lst)
				}
			}
			intact(t, p)
			if err := build(); err != nil {
				t.Fatal(err)
			}
		}
		intact(t, p)
	})
}
