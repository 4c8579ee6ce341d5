package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestResolve(t *testing.T) {
	real := t.TempDir()
	real, _ = filepath.EvalSymlinks(real)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, want string }{
		{link, real},
		{link + "/", real},
		{link + "/a/../b", filepath.Join(real, "b")},
		{link + "/not/yet/made", filepath.Join(real, "not/yet/made")},
	} {
		if got, err := Resolve(c.in); err != nil || got != c.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// A tree with a mount below it is never removed, whether it is named by its
// real path or through a symlink (the mount table shows only the real one).
func TestRemoveTreeRefusesWhileMounted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(real, "run", "home")
	if err := os.MkdirAll(mp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mp, unix.MNT_DETACH)
	precious := filepath.Join(mp, "precious.txt")
	if err := os.WriteFile(precious, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, dir := range []string{filepath.Join(real, "run"), filepath.Join(link, "run"), mp, link + "/run/home"} {
		got, err := Under(dir)
		if err != nil || len(got) != 1 || filepath.Base(got[0]) != "home" {
			t.Errorf("Under(%s) = %v, %v; want the home mount", dir, got, err)
		}
		if err := RemoveTree(dir); !errors.Is(err, ErrMounted) {
			t.Errorf("RemoveTree(%s) = %v, want ErrMounted", dir, err)
		}
		if b, err := os.ReadFile(precious); err != nil || string(b) != "keep" {
			t.Fatalf("after RemoveTree(%s): the mounted file is gone: %q %v", dir, b, err)
		}
	}

	if err := unix.Unmount(mp, 0); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTree(filepath.Join(link, "run")); err != nil {
		t.Fatalf("RemoveTree after unmounting: %v", err)
	}
	if _, err := os.Stat(filepath.Join(real, "run")); !os.IsNotExist(err) {
		t.Errorf("tree still there after RemoveTree: %v", err)
	}
	if err := RemoveTree("/"); err == nil {
		t.Error("RemoveTree(/) succeeded")
	}
}
