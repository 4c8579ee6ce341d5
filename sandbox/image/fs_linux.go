package image

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/flock"
)

// lock takes the per-name lock file DATA/images/.lock-NAME (flock, so it is
// released if the process dies).
func (s *Store) lock(name string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, ".lock-"+name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image %q: lock: %w", name, err)
	}
	if err := flock.Lock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("image %q: lock: %w", name, err)
	}
	return func() { f.Close() }, nil
}

func (s *Store) tryLock(name string) (func(), bool) {
	f, err := flock.TryLock(filepath.Join(s.dir, ".lock-"+name))
	if err != nil {
		return nil, false
	}
	return func() { f.Close() }, true
}

// removeTree deletes dir after detaching anything mounted beneath it (a
// build killed while /proc was mounted in its chroot must not make RemoveAll
// walk into the host's /proc).
func removeTree(dir string) error {
	if dir == "" || dir == "/" {
		return fmt.Errorf("refusing to remove %q", dir)
	}
	for _, m := range mountsUnder(dir) {
		unix.Unmount(m, unix.MNT_DETACH)
	}
	if len(mountsUnder(dir)) > 0 {
		return fmt.Errorf("%s: still has mounts beneath it", dir)
	}
	return os.RemoveAll(dir)
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	// Deepest first.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// capabilityXattr holds a file's capabilities (setcap(8)).
const capabilityXattr = "security.capability"

// stripPrivileges removes every way a file of the tree could raise the
// privileges of whoever runs it: setuid and setgid bits (of directories
// too: nothing in a sandbox needs them) and file capabilities. The store
// is private to root, but a sandbox mounts the tree, and a rootfs copied
// out of the store must not carry setuid-root binaries either. Symbolic
// links are not followed. It returns how many entries it changed.
func stripPrivileges(root string) (int, error) {
	changed := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 || !(d.IsDir() || d.Type().IsRegular()) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		did := false
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			// p is no symlink (Lstat) and WalkDir reached it through
			// real directories, so Chmod changes this very entry.
			if err := os.Chmod(p, fi.Mode()&(fs.ModePerm|fs.ModeSticky)); err != nil {
				return fmt.Errorf("strip setuid/setgid %s: %w", p, err)
			}
			did = true
		}
		if d.Type().IsRegular() {
			err := unix.Lremovexattr(p, capabilityXattr)
			switch {
			case err == nil:
				did = true
			case errors.Is(err, unix.ENODATA), errors.Is(err, unix.EOPNOTSUPP):
			case errors.Is(err, unix.EPERM) && noCapabilities(p):
				// Unprivileged, removing is refused even where there is
				// nothing to remove (and nothing could have set it).
			default:
				return fmt.Errorf("strip capabilities %s: %w", p, err)
			}
		}
		if did {
			changed++
		}
		return nil
	})
	return changed, err
}

// diskUsage sums the allocated blocks under root, counting hard links once.
func diskUsage(root string) (int64, error) {
	type ino struct{ dev, ino uint64 }
	seen := map[ino]bool{}
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			total += fi.Size()
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := ino{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// statIDs returns the owner uid and gid of fi.
func statIDs(fi fs.FileInfo) ([2]int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]int{}, false
	}
	return [2]int{int(st.Uid), int(st.Gid)}, true
}

// noCapabilities reports whether p has no file capabilities attribute.
func noCapabilities(p string) bool {
	_, err := unix.Lgetxattr(p, capabilityXattr, nil)
	return errors.Is(err, unix.ENODATA) || errors.Is(err, unix.EOPNOTSUPP)
}
