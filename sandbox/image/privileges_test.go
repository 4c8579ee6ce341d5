package image

import (
	"archive/tar"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// fileCaps is a valid security.capability value (VFS_CAP_REVISION_2,
// effective) granting CAP_NET_RAW, as setcap cap_net_raw+ep writes it.
func fileCaps() []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000000|0x1)
	binary.LittleEndian.PutUint32(b[4:], 1<<unix.CAP_NET_RAW)
	return b
}

// setCaps gives path a file capability; it needs root (CAP_SETFCAP).
func setCaps(t *testing.T, path string) {
	t.Helper()
	if err := unix.Lsetxattr(path, capabilityXattr, fileCaps(), 0); err != nil {
		t.Fatalf("setcap %s: %v", path, err)
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("setuid-root files and file capabilities need root to create")
	}
}

// checkNoPrivileges fails t for every entry of rootfs with a setuid or
// setgid bit or a file capability.
func checkNoPrivileges(t *testing.T, rootfs string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Errorf("%s keeps %s", p, fi.Mode())
		}
		if d.Type()&fs.ModeSymlink == 0 {
			if _, err := unix.Lgetxattr(p, capabilityXattr, make([]byte, 64)); !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) {
				t.Errorf("%s keeps file capabilities (%v)", p, err)
			}
		}
		return nil
	})
	if err != nil || n < 2 {
		t.Fatalf("walk %s: %d entries, %v", rootfs, n, err)
	}
}

// The function every build and import ends with: bits and capabilities go,
// the rest of the mode stays, symbolic links are not followed.
func TestStripPrivileges(t *testing.T) {
	needRoot(t)
	root := filepath.Join(t.TempDir(), "rootfs")
	outside := filepath.Join(t.TempDir(), "outside-su")
	for _, d := range []string{"usr/bin", "var/mail"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string, mode fs.FileMode) {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "usr/bin/su"), 0o755|fs.ModeSetuid)
	write(filepath.Join(root, "usr/bin/wall"), 0o755|fs.ModeSetgid)
	write(filepath.Join(root, "usr/bin/ping"), 0o755)
	setCaps(t, filepath.Join(root, "usr/bin/ping"))
	os.Link(filepath.Join(root, "usr/bin/su"), filepath.Join(root, "usr/bin/su-link"))
	os.Chmod(filepath.Join(root, "var/mail"), 0o775|fs.ModeSetgid|fs.ModeSticky)
	write(outside, 0o755|fs.ModeSetuid)
	os.Symlink(outside, filepath.Join(root, "usr/bin/escape"))

	n, err := stripPrivileges(root)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 { // su (with its hard link), wall, ping, var/mail
		t.Errorf("changed %d entries, want 4", n)
	}
	checkNoPrivileges(t, root)
	for p, want := range map[string]fs.FileMode{
		"usr/bin/su": 0o755, "usr/bin/wall": 0o755, "usr/bin/ping": 0o755,
		"var/mail": fs.ModeDir | 0o775 | fs.ModeSticky,
	} {
		if fi, err := os.Lstat(filepath.Join(root, p)); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode(), err, want)
		}
	}
	if fi, _ := os.Stat(outside); fi.Mode()&fs.ModeSetuid == 0 {
		t.Error("a symlink was followed out of the tree")
	}
}

// Imports (OCI archive and directory) store neither setuid/setgid bits nor
// capabilities, whatever the source declares.
func TestImportStripsPrivileges(t *testing.T) {
	needRoot(t)
	ctx := t.Context()
	s := newStore(t)
	caps := string(fileCaps())
	layer := tarOf(t,
		dir("bin/"), exe("bin/sh", "#!fake sh\n"),
		withMode(exe("bin/su", "#!fake su\n"), 0o4755),
		withMode(exe("bin/wall", "#!fake wall\n"), 0o2755),
		entry{name: "bin/ping", body: "#!fake ping\n", typ: tar.TypeReg, mode: 0o755,
			pax: map[string]string{"SCHILY.xattr." + capabilityXattr: caps}},
		withMode(dir("var/mail/"), 0o2775),
	)
	img, err := s.Import(ctx, "oci", ociArchive(t, layer), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkNoPrivileges(t, img.Rootfs)
	if fi, err := os.Stat(filepath.Join(img.Rootfs, "bin/su")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("bin/su: %v %v, want -rwxr-xr-x", fi.Mode(), err)
	}

	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "bin"), 0o755)
	for name, mode := range map[string]fs.FileMode{"sh": 0o755, "su": 0o755 | fs.ModeSetuid, "newgrp": 0o755 | fs.ModeSetgid, "ping": 0o755} {
		p := filepath.Join(src, "bin", name)
		os.WriteFile(p, []byte("#!fake\n"), 0o755)
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	setCaps(t, filepath.Join(src, "bin/ping"))
	img, err = s.Import(ctx, "dir", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkNoPrivileges(t, img.Rootfs)
	if _, err := os.Stat(filepath.Join(img.Rootfs, "bin/ping")); err != nil {
		t.Error(err)
	}
}

// The store is private to root, also when it existed before with a looser
// mode.
func TestStoreIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(s.Dir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("store mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	fresh, err := Open(filepath.Join(t.TempDir(), "new", "images"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh.Dir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("new store mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
}
