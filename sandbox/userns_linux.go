package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/flock"
)

// Every sandbox runs in its own user namespace with its own range of host
// ids, so that no two sandboxes and no host account share a host uid: an
// escape from crun or runc lands as an id that owns nothing, and per-uid
// kernel limits (inotify instances, RLIMIT_NPROC's count, ...) are charged
// per sandbox.
//
// Ranges are slots: slot N maps ids 0..65535 inside to host ids
// 100000+N·65536 onwards. A slot is taken by an exclusive flock on
// SlotsDir/N, held for the sandbox's life (pooled ones too) by the process
// that owns it, so no two Shellgate processes of the host hand out the
// same range, whether or not they share a data directory. The file names
// the sandbox's directory; a slot whose lock is free but whose sandbox
// directory still exists belongs to a crashed process's sandbox that
// cleanup has not removed yet, and is skipped until then.
//
// The image stays shared and unchanged: the overlay's lower layer is a
// read-only idmapped bind mount of it (host id k reads as base+k), the
// writable layer's upper directory belongs to the base id, and the home is
// an idmapped bind of its ext4 mount, so its files stay 1000:1000 on disk
// and a home can wake in any range. All of this is done by the host with
// mount_setattr(2), not with the runtimes' own idmap options, which the
// installed crun, runc and runsc handle differently.
//
// For crun and runc the host creates the namespace while running as the
// base id (unshare(1) started with that credential; root writes the maps)
// and pins it under the sandbox directory; the runtime joins it by path.
// Its owner is then the base id, which is what per-uid limits are charged
// to. runsc cannot join a namespace by path and creates it from the spec's
// mappings; its sentry and gofer then run as the base id instead of host
// root.
const (
	idBase     = 100000
	idsPerSlot = 65536
	// maxSlots keeps every id below 2^30.
	maxSlots = 16384
)

// slot is one range of host ids held by a sandbox: the N-th.
type slot struct{ *flock.Slot }

func (s *slot) base() uint32 { return uint32(idBase + s.N*idsPerSlot) }

// SlotsDir holds the host's id range slots: one per host, not per data
// directory, since ranges are host ids.
const SlotsDir = "/run/shellgate/slots"

// acquireSlot takes the lowest free slot for the sandbox in
// directory sandboxDir. A sandbox directory is removed only after its
// container and mounts are gone, so a slot naming a missing directory is
// free.
func (m *Manager) acquireSlot(sandboxDir string) (*slot, error) {
	fs, err := flock.TakeSlot(SlotsDir, maxSlots, func(n int, f *os.File) (bool, error) {
		if m.hostIDs.overlaps(uint32(idBase+n*idsPerSlot), idsPerSlot) {
			return false, nil
		}
		if prev := readSlotOwner(f); prev != "" && dirExists(prev) {
			return false, nil // a crashed process's sandbox, not cleaned up yet
		}
		return true, writeSlotOwner(f, sandboxDir)
	})
	if errors.Is(err, flock.ErrNoSlot) {
		return nil, fmt.Errorf("no free user-namespace slot (all %d in use)", maxSlots)
	}
	if err != nil {
		return nil, err
	}
	return &slot{fs}, nil
}

// readSlotOwner returns the sandbox directory a slot file names, or "" for
// a free slot (or one whose content is not an absolute path).
func readSlotOwner(f *os.File) string {
	b := make([]byte, 4096)
	n, _ := f.ReadAt(b, 0)
	p := strings.TrimSpace(string(b[:n]))
	if !filepath.IsAbs(p) {
		return ""
	}
	return p
}

func writeSlotOwner(f *os.File, sandboxDir string) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(sandboxDir+"\n"), 0)
	return err
}

// nsPath gives the sandbox's pinned namespace (pin) a path the runtime
// accepts: runc hands namespace paths to its init as a comma-separated
// list and refuses one with a comma, which a data directory (or a test's
// temporary one) may have. The link, /run/shellgate/userns/N, belongs to
// the slot like its lock file.
func (s *slot) nsPath(pin string) (string, error) {
	link := filepath.Join(filepath.Dir(SlotsDir), "userns", strconv.Itoa(s.N))
	if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
		return "", err
	}
	tmp := link + ".new"
	os.Remove(tmp)
	if err := os.Symlink(pin, tmp); err != nil {
		return "", err
	}
	return link, os.Rename(tmp, link)
}

// sweepSlots frees the slots of sandboxes that no longer exist (their
// owner crashed and cleanup removed them), of any data directory.
func sweepSlots() {
	entries, _ := os.ReadDir(SlotsDir)
	for _, e := range entries {
		f, err := flock.TryLock(filepath.Join(SlotsDir, e.Name()))
		if err != nil {
			continue // held: alive
		}
		if prev := readSlotOwner(f); prev == "" || !dirExists(prev) {
			f.Truncate(0)
		}
		flock.Unlock(f)
	}
}

// hostIDs are the uids and gids the host's accounts and subordinate-id
// ranges use; slots that would overlap them are never handed out.
type hostIDs []idRange

type idRange struct{ start, size uint32 }

func (h hostIDs) overlaps(start, size uint32) bool {
	for _, r := range h {
		if uint64(r.start) < uint64(start)+uint64(size) && uint64(start) < uint64(r.start)+uint64(r.size) {
			return true
		}
	}
	return false
}

// readHostIDs collects the ids of /etc/passwd, /etc/group (nobody's 65534
// included, far below the first slot) and the ranges of /etc/subuid and
// /etc/subgid.
func readHostIDs() hostIDs {
	var h hostIDs
	for _, p := range []string{"/etc/passwd", "/etc/group"} {
		eachLine(p, func(f []string) {
			if len(f) > 2 {
				if id, err := strconv.ParseUint(f[2], 10, 32); err == nil {
					h = append(h, idRange{uint32(id), 1})
				}
			}
		})
	}
	for _, p := range []string{"/etc/subuid", "/etc/subgid"} {
		eachLine(p, func(f []string) {
			if len(f) > 2 {
				start, err1 := strconv.ParseUint(f[1], 10, 32)
				size, err2 := strconv.ParseUint(f[2], 10, 32)
				if err1 == nil && err2 == nil {
					h = append(h, idRange{uint32(start), uint32(size)})
				}
			}
		})
	}
	return h
}

func eachLine(path string, fn func(fields []string)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fn(strings.Split(sc.Text(), ":"))
	}
}

// makeTraversable gives the directories above every sandbox's rootfs the
// search permission a namespace's root needs to reach it (it has no
// DAC_OVERRIDE over host-owned directories): DATA, DATA/run and
// DATA/run/sandboxes become 0711 (searchable, not listable), and every
// directory above DATA must already be searchable by others.
func (m *Manager) makeTraversable() error {
	run := filepath.Dir(m.dirs.run)
	data := filepath.Dir(run)
	for _, d := range []string{data, run, m.dirs.run} {
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	real, err := filepath.EvalSymlinks(data)
	if err != nil {
		return err
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("sandbox: %s (mode %o) must be searchable by other users (o+x): sandboxes run as unprivileged host ids and must reach their root filesystem under %s", d, st.Mode().Perm(), data)
		}
		if d == "/" {
			return nil
		}
	}
}

// newUserNS creates a user namespace owned by host id base, mapping ids
// 0..idsPerSlot-1 to base onwards, and pins it at path (a bind mount of its
// nsfs file). It runs unshare(1) as base, so the namespace's owner, to
// which the kernel charges per-uid limits, is base and not root; root then
// writes the maps from outside. With netPath set, the same unshare makes a
// network namespace owned by the new user namespace too (one a runtime that
// joins the user namespace first can then join), pinned at netPath.
func newUserNS(ctx context.Context, base uint32, path, netPath string) error {
	args := []string{"--user", "--", "cat"}
	if netPath != "" {
		args = []string{"--user", "--net", "--", "cat"}
	}
	cmd := exec.CommandContext(ctx, "unshare", args...)
	// No Pdeathsig: it follows the spawning OS thread, not the process.
	// If Shellgate dies, cat reads EOF and exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: base, Gid: base}}
	cmd.Dir = "/"
	cmd.Env = []string{}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("create user namespace: %w", err)
	}
	err = func() error {
		// cat echoes a byte once it runs, which is after unshare(2).
		if _, err := in.Write([]byte{'\n'}); err != nil {
			return err
		}
		if _, err := io.ReadFull(out, make([]byte, 1)); err != nil {
			return err
		}
		pid := strconv.Itoa(cmd.Process.Pid)
		m := fmt.Sprintf("0 %d %d\n", base, idsPerSlot)
		for _, f := range []string{"uid_map", "gid_map"} {
			if err := os.WriteFile(filepath.Join("/proc", pid, f), []byte(m), 0); err != nil {
				return err
			}
		}
		if netPath != "" {
			if err := os.WriteFile(netPath, nil, 0o600); err != nil {
				return err
			}
			if err := unix.Mount(filepath.Join("/proc", pid, "ns", "net"), netPath, "", unix.MS_BIND, ""); err != nil {
				return err
			}
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			return err
		}
		return unix.Mount(filepath.Join("/proc", pid, "ns", "user"), path, "", unix.MS_BIND, "")
	}()
	in.Close()
	werr := cmd.Wait()
	if err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("create user namespace: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// idmapBind mounts a detached clone of the mount at src on dst with its
// ids shifted by the user namespace open at nsFD: a file of host id k
// appears as the namespace's id k, which is host id base+k.
func idmapBind(src, dst string, nsFD int, readOnly bool) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("idmapped mount of %s: open_tree: %w", src, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(nsFD)}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("idmapped mount of %s: mount_setattr: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmapped mount of %s: move_mount: %w", src, err)
	}
	return nil
}

// pendingUserNS is a sandbox's user namespace being made, pinned at
// dir/userns.
type pendingUserNS struct {
	done chan struct{}
	fd   int
	err  error
}

// startUserNS starts making the sandbox's user namespace (and, when netPath
// is set, its network namespace).
func (m *Manager) startUserNS(ctx context.Context, inst *instance, netPath string) *pendingUserNS {
	p := &pendingUserNS{done: make(chan struct{}), fd: -1}
	path := filepath.Join(inst.dir, "userns")
	go func() {
		defer close(p.done)
		if p.err = newUserNS(ctx, inst.slot.base(), path, netPath); p.err != nil {
			return
		}
		if p.fd, p.err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); p.err != nil {
			p.err = fmt.Errorf("open user namespace: %w", p.err)
		}
	}()
	return p
}

// wait returns the namespace open for idmapped mounts.
func (p *pendingUserNS) wait() (int, error) {
	<-p.done
	return p.fd, p.err
}

// close waits for the namespace and closes its descriptor; the pin stays
// until unmountAll.
func (p *pendingUserNS) close() {
	if fd, _ := p.wait(); fd >= 0 {
		unix.Close(fd)
	}
}

// prepareUserNS readies the data directory for user-namespaced sandboxes.
func (m *Manager) prepareUserNS() error {
	if m.cfg.SharedHostUser {
		return nil
	}
	m.hostIDs = readHostIDs()
	return m.makeTraversable()
}
