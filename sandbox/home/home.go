// Package home keeps each sandbox's /workspace/home as a sparse ext4 image
// file, loop-mounted while the sandbox is awake. The file system's size is
// the disk quota: this kernel has no project quotas, and an image enforces
// ENOSPC exactly, survives the sandbox and a crash of Shellgate, and is one
// file to copy, expire or back up.
package home

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Create makes a new empty home image of size bytes owned by uid:gid. The
// file is sparse: it takes a few MiB until files are written.
func Create(path string, size int64, uid, gid int) error {
	if size < 16<<20 {
		return fmt.Errorf("home size %d is below the 16 MiB minimum", size)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	f.Close()
	if err == nil {
		err = run("mkfs.ext4", "-q", "-F", "-m", "0",
			"-E", fmt.Sprintf("root_owner=%d:%d,lazy_itable_init=1,lazy_journal_init=1,nodiscard", uid, gid), path)
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("create home %s: %w", path, err)
	}
	return nil
}

// Mount loop-mounts the image at dir (created if needed), with online
// discard: what the sandbox deletes stops taking space on the host. The
// journal is replayed if Shellgate or the host crashed while it was
// mounted. An image still attached to a loop device (a mount not yet, or
// never, undone) is waited for and then refused: mounting one ext4 image
// twice corrupts it.
func Mount(path, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// A lazily detached earlier mount (see Unmount) lets go of its loop
	// device once its last user is gone: give it a moment.
	devs, err := LoopDevices(path)
	for deadline := time.Now().Add(detachWait); err == nil && len(devs) > 0 && time.Now().Before(deadline); {
		time.Sleep(busyPoll)
		devs, err = LoopDevices(path)
	}
	if err != nil {
		return fmt.Errorf("mount home %s: %w", path, err)
	}
	if len(devs) > 0 {
		return fmt.Errorf("mount home %s: it is still attached to %s (a previous mount was not undone); refusing to mount it twice", path, strings.Join(devs, ", "))
	}
	// discard: blocks freed in the home are punched out of the sparse
	// image, so deleting files gives the space back to the host.
	if err := run("mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime,discard", path, dir); err != nil {
		return fmt.Errorf("mount home %s: %w", path, err)
	}
	return nil
}

// Unmount unmounts dir; the loop device is freed with it. Space freed since
// the last discard is trimmed first. A mount still busy (a process of a
// dying sandbox, such as gVisor's gofer, still holds a file) is retried for
// a moment, then detached lazily: its data is written back, and its loop
// device freed, when the last user goes.
func Unmount(dir string) error {
	Trim(dir)
	err := unix.Unmount(dir, 0)
	for deadline := time.Now().Add(detachWait); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); {
		time.Sleep(busyPoll)
		err = unix.Unmount(dir, 0)
	}
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount home %s: %w", dir, err)
	}
	return nil
}

// detachWait bounds how long Unmount retries a busy home and Mount waits
// for a lazily detached one to let go of its loop device; busyPoll is the
// interval between tries.
const (
	detachWait = 10 * time.Second
	busyPoll   = 20 * time.Millisecond
)

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// LoopDevices lists the loop devices whose backing file is path, read from
// /sys/block/loop*/loop/backing_file (the kernel shows the backing file's
// resolved path there, with " (deleted)" once it is unlinked).
func LoopDevices(path string) ([]string, error) {
	want, err := filepath.EvalSymlinks(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		if strings.TrimSuffix(string(b), "\n") == want {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out, nil
}

// Trim gives the free space of the home mounted at dir back to the host:
// it commits the journal (blocks freed by deletes become free) and trims
// every free range (FITRIM), waiting until the image's holes are punched.
// Online discard alone is not enough: ext4 issues those discards from a
// work queue after each commit, and the ones still queued when the file
// system is unmounted are dropped, so a home put to sleep right after a
// large delete would keep the space. Errors are ignored: a home that
// cannot be trimmed only keeps some space.
func Trim(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	unix.Syncfs(fd)
	r := fstrimRange{Len: math.MaxUint64}
	unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fitrim, uintptr(unsafe.Pointer(&r)))
}

// fitrim is FITRIM, _IOWR('X', 121, struct fstrim_range), from linux/fs.h.
const fitrim = 0xC0185879

type fstrimRange struct{ Start, Len, MinLen uint64 }
