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
