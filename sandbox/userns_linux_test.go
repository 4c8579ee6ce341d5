package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkNewUserNS is the host's part of a sandbox's user namespace
// alone: unshare(1) as the base id, the maps, the pin, and two idmapped
// bind mounts (the image's lower layer and the home), then their removal.
func BenchmarkNewUserNS(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	dir := b.TempDir()
	os.Chmod(filepath.Dir(dir), 0o711)
	src := filepath.Join(dir, "src")
	for _, d := range []string{src, filepath.Join(dir, "a"), filepath.Join(dir, "b")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", src, "tmpfs", 0, "size=1m"); err != nil {
		b.Fatal(err)
	}
	defer unix.Unmount(src, unix.MNT_DETACH)
	pin := filepath.Join(dir, "userns")
	for b.Loop() {
		if err := newUserNS(context.Background(), idBase, pin, ""); err != nil {
			b.Fatal(err)
		}
		fd, err := unix.Open(pin, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		for i, d := range []string{"a", "b"} {
			if err := idmapBind(src, filepath.Join(dir, d), fd, i == 0); err != nil {
				b.Fatal(err)
			}
		}
		unix.Close(fd)
		for _, p := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "b"), pin} {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				b.Fatal(err)
			}
		}
	}
}
