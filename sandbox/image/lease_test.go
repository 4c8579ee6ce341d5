package image

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// versionsOf lists the version directories of name on disk.
func versionsOf(t *testing.T, s *Store, name string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.Dir(), versionsDir, name))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestMain doubles as the helper process of leaseFromOtherProcess: with
// SHELLGATE_LEASE_STORE set it leases an image, says so, and holds the lease
// until its stdin closes.
func TestMain(m *testing.M) {
	dir, name := os.Getenv("SHELLGATE_LEASE_STORE"), os.Getenv("SHELLGATE_LEASE_NAME")
	if dir == "" {
		os.Exit(m.Run())
	}
	s, err := Open(dir)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	l, err := s.Acquire(name)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("leased", l.Image.Version)
	bufio.NewReader(os.Stdin).ReadString('\n')
	l.Release()
	os.Exit(0)
}

// leaseFromOtherProcess leases name's current version in another process
// and returns the version and a function that makes the process release it
// and exit.
func leaseFromOtherProcess(t *testing.T, s *Store, name string) (string, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "SHELLGATE_LEASE_STORE="+s.Dir(), "SHELLGATE_LEASE_NAME="+name)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	version, ok := strings.CutPrefix(strings.TrimSpace(line), "leased ")
	if !ok {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper process: %q", line)
	}
	done := false
	release := func() {
		if !done {
			done = true
			stdin.Close()
			cmd.Wait()
		}
	}
	t.Cleanup(release)
	return version, release
}

// A rebuild under a leased version makes a new one and keeps the old until
// its last lease goes, across processes; removing a leased image fails and
// removes nothing.
func TestLeasesKeepVersionsAcrossRebuilds(t *testing.T) {
	s := newStore(t)
	v1 := installFake(t, s, "img", "k1")
	mine, err := s.Acquire("img")
	if err != nil {
		t.Fatal(err)
	}
	if mine.Image.Version != v1.Version || mine.Image.Rootfs != v1.Rootfs {
		t.Fatalf("leased %+v, want version %s", mine.Image, v1.Version)
	}
	theirs, releaseTheirs := leaseFromOtherProcess(t, s, "img")
	if theirs != v1.Version {
		t.Fatalf("other process leased %q, want %q", theirs, v1.Version)
	}

	v2 := installFake(t, s, "img", "k2") // the rebuild succeeds
	if cur, _ := s.Get("img"); cur.Version != v2.Version || v2.Version == v1.Version {
		t.Fatalf("after the rebuild Get = %+v, want the new version %s", cur, v2.Version)
	}
	if !exists(filepath.Join(v1.Rootfs, "bin/bash")) {
		t.Fatal("the leased version was removed by the rebuild")
	}
	if _, err := Open(s.Dir()); err != nil { // another process's store operation
		t.Fatal(err)
	}
	if err := s.Remove("img"); !errors.Is(err, ErrInUse) {
		t.Fatalf("Remove of a leased image: %v, want ErrInUse", err)
	}
	if !exists(v1.Rootfs) || !exists(v2.Rootfs) {
		t.Fatal("a refused Remove removed something")
	}

	mine.Release()
	mine.Release() // idempotent
	if !exists(v1.Rootfs) {
		t.Fatal("version removed while the other process still leases it")
	}
	releaseTheirs() // the last lease: the old version goes with it
	if got := versionsOf(t, s, "img"); len(got) != 1 || got[0] != v2.Version {
		t.Errorf("versions after the last lease went: %v, want only %s", got, v2.Version)
	}

	// A process that dies releases its lease; the next store operation
	// collects the version.
	_, kill := leaseFromOtherProcess(t, s, "img")
	installFake(t, s, "img", "k3")
	if !exists(v2.Rootfs) {
		t.Fatal("leased version removed")
	}
	kill()
	if _, err := Open(s.Dir()); err != nil {
		t.Fatal(err)
	}
	if exists(v2.Rootfs) {
		t.Error("a version no process leases survived the next Open")
	}
	if err := s.Remove("img"); err != nil {
		t.Fatalf("Remove of an unused image: %v", err)
	}
	if _, err := s.Acquire("img"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Acquire after Remove: %v", err)
	}
	if exists(filepath.Join(s.Dir(), versionsDir, "img")) || exists(filepath.Join(s.Dir(), "img")) {
		t.Error("Remove left the image's name or versions")
	}
	assertNoLeftovers(t, s)
}

// A store written before versions (DATA/images/NAME a real directory) is
// read and leased as it is; the next build moves it among the versions,
// where its lease keeps it until released.
func TestOldLayoutIsReadAndMigrated(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "img")
	os.MkdirAll(filepath.Join(old, "rootfs", "bin"), 0o755)
	os.WriteFile(filepath.Join(old, "rootfs", "bin", "sh"), []byte("#!old\n"), 0o755)
	os.WriteFile(filepath.Join(old, "image.json"), []byte(`{"name":"img","shell":["/bin/sh","-lc"],"source":"old layout"}`), 0o644)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.Get("img")
	if err != nil || img.Source != "old layout" || img.Version != "" {
		t.Fatalf("Get of the old layout: %+v %v", img, err)
	}
	if l, err := s.List(); err != nil || len(l) != 1 {
		t.Fatalf("List: %+v %v", l, err)
	}
	lease, err := s.Acquire("img")
	if err != nil {
		t.Fatal(err)
	}
	v2 := installFake(t, s, "img", "new")
	if fi, err := os.Lstat(old); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the name is not a link to the new version: %v %v", fi, err)
	}
	if cur, _ := s.Get("img"); cur.Version != v2.Version {
		t.Fatalf("current %+v, want %s", cur, v2.Version)
	}
	versions := versionsOf(t, s, "img")
	if len(versions) != 2 {
		t.Fatalf("versions %v: want the migrated old image and the new one", versions)
	}
	migrated := ""
	for _, v := range versions {
		if v != v2.Version {
			migrated = filepath.Join(s.Dir(), versionsDir, "img", v)
		}
	}
	if b, err := os.ReadFile(filepath.Join(migrated, "rootfs", "bin", "sh")); err != nil || string(b) != "#!old\n" {
		t.Fatalf("old image not kept while leased: %q %v", b, err)
	}
	lease.Release()
	if exists(migrated) {
		t.Error("migrated old image kept after its lease went")
	}
	assertNoLeftovers(t, s)
}

// Leftovers of a crash between the steps of a build (a version never made
// current, a placeholder link, a link being swapped in) go at the next Open.
func TestVersionCrashLeftovers(t *testing.T) {
	s := newStore(t)
	v := installFake(t, s, "img", "k")
	stray := filepath.Join(s.Dir(), versionsDir, "img", "20260101T000000.000Z-deadbeef")
	os.MkdirAll(filepath.Join(stray, "rootfs"), 0o755)
	os.Symlink("x", filepath.Join(s.Dir(), versionsDir, "img", "20260101T000000.000Z-placeholder"))
	os.Symlink(versionsDir+"/img/"+v.Version, filepath.Join(s.Dir(), linkPrefix+"img-0badf00d"))
	if _, err := Open(s.Dir()); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, s)
	if cur, err := s.Get("img"); err != nil || cur.Version != v.Version {
		t.Errorf("current version lost: %+v %v", cur, err)
	}
}

// Leases taken while the image is rebuilt over and over always hold a
// version that exists for as long as they are held.
func TestLeaseRacesRebuilds(t *testing.T) {
	s := newStore(t)
	installFake(t, s, "img", "k0")
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for w := 0; w < 3; w++ {
		go func() {
			other, err := Open(s.Dir()) // as if another process
			if err != nil {
				errs <- err
				return
			}
			n := 0
			for {
				select {
				case <-stop:
					if n == 0 {
						errs <- errors.New("no lease taken")
						return
					}
					errs <- nil
					return
				default:
				}
				l, err := other.Acquire("img")
				if err != nil {
					errs <- err
					return
				}
				n++
				for range 3 {
					if !exists(filepath.Join(l.Image.Rootfs, "bin/bash")) {
						errs <- fmt.Errorf("leased version %s vanished", l.Image.Version)
						return
					}
				}
				l.Release()
			}
		}()
	}
	for i := 0; i < 20; i++ {
		installFake(t, s, "img", fmt.Sprint("k", i+1))
	}
	close(stop)
	for w := 0; w < 3; w++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	s.collect("img")
	assertNoLeftovers(t, s)
}
