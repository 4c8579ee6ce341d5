package flock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTryLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slot")
	f, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v %v, want mode 0600", st, err)
	}
	// A second open file description is a second holder: it must wait.
	if _, err := TryLock(path); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("second TryLock while held: %v, want EWOULDBLOCK", err)
	}
	other, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := Lock(other, unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("shared lock while held exclusively: %v, want EWOULDBLOCK", err)
	}
	Unlock(f)
	if err := Lock(other, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatalf("shared lock after Unlock: %v", err)
	}
	if _, err := TryLock(path); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("TryLock under a shared lock: %v, want EWOULDBLOCK", err)
	}
}

// TestTakeSlot: held slots and slots take passes over are skipped, a
// released slot is clean and free again, an abandoned one keeps its mark
// for the next taker, and a full set is ErrNoSlot.
func TestTakeSlot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "slots")
	mark := func(n int, f *os.File) (bool, error) {
		_, err := f.WriteAt([]byte("in use\n"), 0)
		return err == nil, err
	}
	a, err := TakeSlot(dir, 3, mark)
	if err != nil || a.N != 0 {
		t.Fatalf("first take: %+v %v", a, err)
	}
	passed := []int{}
	b, err := TakeSlot(dir, 3, func(n int, f *os.File) (bool, error) {
		if n == 1 {
			passed = append(passed, n)
			return false, nil
		}
		return mark(n, f)
	})
	if err != nil || b.N != 2 || len(passed) != 1 {
		t.Fatalf("second take: %+v %v, passed over %v; want slot 2 after passing over 1", b, err, passed)
	}
	if _, err := TakeSlot(dir, 3, func(n int, f *os.File) (bool, error) { return n != 1, nil }); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("full set: %v, want ErrNoSlot", err)
	}
	boom := errors.New("boom")
	if _, err := TakeSlot(dir, 3, func(int, *os.File) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("take's error: %v", err)
	}
	a.Release()
	a.Release() // twice is harmless
	if st, err := os.Stat(filepath.Join(dir, "0")); err != nil || st.Size() != 0 {
		t.Fatalf("released slot's file: %v %v, want empty", st, err)
	}
	b.Abandon()
	seen := map[int]int64{}
	for range 2 {
		s, err := TakeSlot(dir, 3, func(n int, f *os.File) (bool, error) {
			st, err := f.Stat()
			seen[n] = st.Size()
			return n != 1, err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release()
	}
	if seen[0] != 0 || seen[2] != int64(len("in use\n")) {
		t.Fatalf("what the next takers saw: %v; want slot 0 clean and slot 2 still marked", seen)
	}
}
