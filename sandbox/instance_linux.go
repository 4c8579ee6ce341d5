package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/flock"
	"github.com/shellgate/shellgate/sandbox/home"
	"github.com/shellgate/shellgate/sandbox/image"
	"github.com/shellgate/shellgate/sandbox/mounts"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// instance is one running container.
type instance struct {
	rt     runtime.Runtime
	cid    string
	dir    string // run/sandboxes/CID: bundle, mount points, owner lock
	home   string // the home image mounted at dir/home
	client *agent.Client
	owner  *os.File // flock held for the container's life: not an orphan
	// lease keeps the image version img (the overlay's lower layer) on
	// disk for the container's life, across rebuilds of the image.
	lease *image.Lease
	img   *image.Image // the leased version: the root filesystem it runs on
	// slot is the container's range of host ids (nil without a user
	// namespace).
	slot *slot
	// oomKills is the cgroup's OOM-kill count already reported.
	oomKills int64
	// limits are the ones the container was started with.
	limits runtime.Limits
	// net is the sandbox's network under its policy (nil: loopback only).
	net *egress.Net
	// watch notices changes in the home (nil: unknown, always changed).
	watch *homeWatch
}

// newOOMKill reports whether the container's memory cgroup counted an
// OOM kill since the last call (cgroup v1 memory.oom_control or v2
// memory.events).
func (inst *instance) newOOMKill() bool {
	n := int64(-1)
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup/memory/shellgate", inst.cid, "memory.oom_control"),
		filepath.Join("/sys/fs/cgroup/shellgate", inst.cid, "memory.events"),
	} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
		break
	}
	if n > inst.oomKills {
		inst.oomKills = n
		return true
	}
	return false
}

// meta is what a crashed process's successor needs to clean up.
type meta struct {
	Runtime string `json:"runtime"`
	Home    string `json:"home"`
}

// agentStartTimeout bounds how long a new container may take to answer.
const agentStartTimeout = 30 * time.Second

// startInstance mounts the layers and the home, and starts a container
// whose init is the agent.
func (m *Manager) startInstance(ctx context.Context, cid, homeImg string, limits runtime.Limits, pol *egress.Policy) (inst *instance, err error) {
	dir := filepath.Join(m.dirs.run, cid)
	inst = &instance{rt: m.rt, cid: cid, dir: dir, home: homeImg, limits: limits}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("start sandbox %s: %w", cid, err), m.stopInstance(context.WithoutCancel(ctx), inst))
		}
	}()
	// Another process's orphan cleanup must not see the directory before
	// its owner lock is held, nor its Close unmount the agent tmpfs before
	// the directory exists.
	var agentPath string
	err = m.withRunLock(unix.LOCK_EX, func() error {
		// 0711: the namespace's root must reach the rootfs below.
		if err := os.Mkdir(dir, 0o711); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return err
		}
		if inst.owner, err = flock.TryLock(filepath.Join(dir, "owner.lock")); err != nil {
			return err
		}
		if !m.cfg.SharedHostUser {
			if inst.slot, err = m.acquireSlot(dir); err != nil {
				return err
			}
		}
		agentPath, err = m.servedAgentLocked()
		return err
	})
	if err != nil {
		return inst, err
	}
	// The image's current version, kept until the container is gone.
	if inst.lease, err = m.images.Acquire(m.cfg.Image); err != nil {
		return inst, err
	}
	inst.img = inst.lease.Image
	mb, _ := json.Marshal(meta{Runtime: m.rt.Name(), Home: homeImg})
	if err = os.WriteFile(filepath.Join(dir, "meta.json"), mb, 0o600); err != nil {
		return inst, err
	}
	// The sandbox directory is searchable by others (the runtime reaches
	// it as the slot's base id), and the mount table names it; the home's
	// own ext4 mount sits in a directory only root can enter, and its root
	// is 0700, so no host account — host uid 1000, which owns the files on
	// disk, included — can reach the user's files through it.
	layer, rootfs, homeDir := filepath.Join(dir, "layer"), filepath.Join(dir, "rootfs"), hostHomeDir(dir)
	for _, d := range []string{layer, rootfs, filepath.Dir(homeDir), homeDir} {
		if err = os.Mkdir(d, 0o700); err != nil {
			return inst, err
		}
	}
	// The user namespace is made while the layer and the home are
	// mounted: most of its cost is waiting for unshare(1) to run. It is
	// waited for before any return, so that cleanup sees its pin.
	var ns *pendingUserNS
	netPin := ""
	if inst.slot != nil {
		if pol.Enabled() {
			netPin = filepath.Join(dir, "netns")
		}
		ns = m.startUserNS(ctx, inst, netPin)
		defer ns.close()
	}
	// The writable layer lives in a size-capped tmpfs: system changes are
	// thrown away at sleep and cannot fill the host's disk.
	if err = unix.Mount("tmpfs", layer, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", m.cfg.LayerBytes)); err != nil {
		return inst, fmt.Errorf("mount layer: %w", err)
	}
	for _, d := range []string{"upper", "work"} {
		if err = os.Mkdir(filepath.Join(layer, d), 0o755); err != nil {
			return inst, err
		}
		if inst.slot != nil {
			// The sandbox's root is the slot's base id on the host.
			if err = os.Chown(filepath.Join(layer, d), int(inst.slot.base()), int(inst.slot.base())); err != nil {
				return inst, err
			}
		}
	}
	if err = home.Mount(homeImg, homeDir); err != nil {
		return inst, err
	}
	inst.watch = watchHome(homeDir)
	if err = os.Chmod(homeDir, 0o700); err != nil {
		return inst, err
	}
	if err = makeOutputDir(homeDir); err != nil {
		return inst, err
	}
	nsFD := -1
	if ns != nil {
		if nsFD, err = ns.wait(); err != nil {
			return inst, err
		}
	}
	if pol.Enabled() {
		if err = m.startNetwork(ctx, inst, *pol, netPin); err != nil {
			return inst, err
		}
	}
	// Relative paths, from the sandbox directory: /proc/self/mountinfo
	// inside the sandbox shows the overlay's options, which must not name
	// host paths.
	if inst.slot != nil {
		// The lower layer: the shared image seen through the sandbox's
		// ids, read-only; nothing of the image is chowned.
		if err = os.Mkdir(filepath.Join(dir, "lower"), 0o700); err != nil {
			return inst, err
		}
		if err = idmapBind(inst.img.Rootfs, filepath.Join(dir, "lower"), nsFD, true); err != nil {
			return inst, err
		}
	} else if err = os.Symlink(inst.img.Rootfs, filepath.Join(dir, "lower")); err != nil {
		return inst, err
	}
	mount := exec.CommandContext(ctx, "mount", "-t", "overlay", "overlay", "-o", "lowerdir=lower,upperdir=layer/upper,workdir=layer/work", "rootfs")
	mount.Dir = dir
	if out, err := mount.CombinedOutput(); err != nil {
		return inst, fmt.Errorf("mount root overlay: %w: %s", err, strings.TrimSpace(string(out)))
	}
	specHome := homeDir
	if inst.slot != nil {
		// The container gets the home through the sandbox's ids; on disk
		// (and to the host's file API at dir/home) its files stay 1000.
		specHome = filepath.Join(dir, "mapped-home")
		if err = os.Mkdir(specHome, 0o700); err != nil {
			return inst, err
		}
		if err = idmapBind(homeDir, specHome, nsFD, false); err != nil {
			return inst, err
		}
	}
	spec := runtime.Spec(runtime.SpecOptions{ID: cid, Rootfs: rootfs, Home: specHome, Agent: agentPath, Limits: limits})
	if inst.slot != nil {
		ns := runtime.UserNS{HostID: inst.slot.base(), Size: idsPerSlot}
		if m.rt.JoinsUserNS() {
			if ns.Path, err = inst.slot.nsPath(filepath.Join(dir, "userns")); err != nil {
				return inst, err
			}
		}
		runtime.UseUserNS(spec, ns)
	}
	if inst.net != nil {
		if err = joinNetwork(spec, inst); err != nil {
			return inst, err
		}
	}
	if err = m.rt.Adjust(spec); err != nil {
		return inst, err
	}
	if err = runtime.WriteBundle(dir, spec); err != nil {
		return inst, err
	}

	inR, inW, err := os.Pipe()
	if err != nil {
		return inst, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return inst, err
	}
	err = m.rt.Start(ctx, cid, dir, runtime.Stdio{In: inR, Out: outW})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return inst, err
	}
	dctx, cancel := context.WithTimeout(ctx, agentStartTimeout)
	defer cancel()
	if inst.client, err = agent.Dial(dctx, outR, inW); err != nil {
		return inst, fmt.Errorf("%w (init log: %s)", err, readTail(filepath.Join(dir, "init.log")))
	}
	return inst, nil
}

// hostHomeDir is where the host mounts a sandbox's home image (with its
// on-disk ids; the container gets it through an idmapped bind, mapped-home):
// below a directory only root can enter.
func hostHomeDir(sandboxDir string) string {
	return filepath.Join(sandboxDir, "private", "home")
}

// stopInstance ends the container and undoes startInstance; it tolerates
// a half-started instance and is what orphan cleanup runs too. It runs with
// its own bounded context, detached from ctx's cancellation, and removes
// nothing until the runtime has deleted the container: if that fails, the
// instance is left whole (mounts, directory, owner lock) for a later try or,
// once this process is gone, the next Open's orphan cleanup.
func (m *Manager) stopInstance(ctx context.Context, inst *instance) error {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	if inst.client != nil {
		inst.client.Close()
	}
	if err := inst.rt.Delete(ctx, inst.cid); err != nil {
		return fmt.Errorf("delete container %s: %w", inst.cid, err)
	}
	removeCgroups(inst.cid)
	var errs []error
	// The network goes with the container. A failure to remove part of
	// it is logged and does not keep the sandbox awake: egress leaves the
	// slot marked for its next owner (or Open's sweep) to clean.
	if inst.net != nil {
		if err := inst.net.Close(); err != nil {
			m.log.Warn("sandbox network not fully removed; the next sweep retries", "container", inst.cid, "err", err)
		}
		inst.net = nil
	}
	inst.watch.close()
	// The directory goes only once nothing is mounted below it: removing
	// it with the home still mounted would delete the user's files.
	unmountErr := unmountAll(inst.dir)
	if unmountErr != nil {
		errs = append(errs, fmt.Errorf("keeping %s: %w", inst.dir, unmountErr))
	} else if err := mounts.RemoveTree(inst.dir); err != nil {
		errs = append(errs, err)
	}
	// The image version may go once no overlay uses it as its lower
	// layer; after a failed unmount the lease stays until this process
	// ends.
	if inst.lease != nil && unmountErr == nil {
		inst.lease.Release()
	}
	err := errors.Join(errs...)
	if err == nil {
		// Only once its processes and mounts are gone may another
		// sandbox take the range.
		if inst.slot != nil {
			inst.slot.Release()
		}
	}
	if inst.owner != nil {
		flock.Unlock(inst.owner)
		inst.owner = nil
	}
	return err
}

// unmountAll unmounts every mount at or below dir, deepest first: the
// rootfs overlay, the layer tmpfs and the home. It fails unless the mount
// table shows nothing left below dir afterwards.
func unmountAll(dir string) error {
	mps, err := mounts.Under(dir)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(mps) - 1; i >= 0; i-- {
		if filepath.Base(mps[i]) == "home" {
			errs = append(errs, home.Unmount(mps[i]))
			continue
		}
		if err := unix.Unmount(mps[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mps[i], err))
		}
	}
	if left, err := mounts.Under(dir); err != nil || len(left) > 0 {
		errs = append(errs, err, fmt.Errorf("%s %w: %s", dir, mounts.ErrMounted, strings.Join(left, ", ")))
	}
	return errors.Join(errs...)
}

// lockHome takes the named home's owner lock: one process at a time may
// hold a sandbox awake.
//
// Destroy removes the lock file while holding it, so a lock taken on a file
// that was meanwhile unlinked (or replaced) is let go and taken again on the
// file now at the path.
func (m *Manager) lockHome(name string) (func(), error) {
	path := m.homeLockPath(name)
	for {
		f, err := flock.TryLock(path)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrBusy, name)
		}
		if err != nil {
			return nil, err
		}
		var held, now unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &held); err != nil {
			flock.Unlock(f)
			return nil, err
		}
		err = unix.Stat(path, &now)
		if errors.Is(err, unix.ENOENT) || err == nil && (now.Dev != held.Dev || now.Ino != held.Ino) {
			flock.Unlock(f)
			continue
		}
		if err != nil {
			flock.Unlock(f)
			return nil, err
		}
		return func() { flock.Unlock(f) }, nil
	}
}

// cleanOrphans removes the containers and mounts of every sandbox whose
// owner process is gone (kill -9, crash, power loss), and the homes of
// pooled sandboxes that were never named. Named homes are never touched.
func (m *Manager) cleanOrphans(ctx context.Context) error {
	return m.withRunLock(unix.LOCK_EX, func() error { return m.cleanOrphansLocked(ctx) })
}

// withRunLock runs fn holding run/.lock, exclusively while a sandbox
// directory is made and locked, while orphans are looked for and while the
// agent tmpfs is mounted or unmounted.
func (m *Manager) withRunLock(how int, fn func() error) error {
	f, err := os.OpenFile(filepath.Join(filepath.Dir(m.dirs.run), ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		return err
	}
	return fn()
}

func (m *Manager) cleanOrphansLocked(ctx context.Context) error {
	entries, err := os.ReadDir(m.dirs.run)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		dir := filepath.Join(m.dirs.run, e.Name())
		owner, err := flock.TryLock(filepath.Join(dir, "owner.lock"))
		if errors.Is(err, unix.EWOULDBLOCK) {
			continue // a live process owns it
		}
		inst := &instance{rt: m.rt, cid: e.Name(), dir: dir, owner: owner}
		var md meta
		if b, err := os.ReadFile(filepath.Join(dir, "meta.json")); err == nil {
			json.Unmarshal(b, &md)
		}
		inst.home = md.Home
		if r, err := mounts.Resolve(md.Home); err == nil && md.Home != "" {
			inst.home = r // written by a version that did not resolve paths
		}
		if md.Runtime != "" && md.Runtime != m.rt.Name() {
			if other, err := runtime.New(md.Runtime, m.dirs.runtimeState); err == nil {
				inst.rt = other
			}
		}
		m.log.Info("cleaning up orphaned sandbox", "container", inst.cid, "runtime", inst.rt.Name())
		if err := m.stopInstance(ctx, inst); err != nil {
			errs = append(errs, err)
			continue
		}
		if inst.home != "" && filepath.Dir(inst.home) == m.dirs.pool {
			os.Remove(inst.home)
		}
	}
	// Stray mounts whose directory is gone (a crash mid-cleanup).
	stray, err := mounts.Under(m.dirs.run)
	if err != nil {
		errs = append(errs, err)
	}
	for _, mp := range stray {
		cid, _, _ := strings.Cut(strings.TrimPrefix(mp, m.dirs.run+"/"), "/")
		if _, err := os.Stat(filepath.Join(m.dirs.run, cid)); errors.Is(err, os.ErrNotExist) {
			errs = append(errs, unmountAll(filepath.Join(m.dirs.run, cid)))
		}
	}
	sweepSlots()
	errs = append(errs, m.sweepEgress(), m.dropRuntimeMounts(ctx), m.dropAgentTmpfsLocked())
	// Pool homes whose container is gone.
	pooled, _ := os.ReadDir(m.dirs.pool)
	for _, p := range pooled {
		cid := strings.TrimSuffix(p.Name(), ".img")
		if _, err := os.Stat(filepath.Join(m.dirs.run, cid)); errors.Is(err, os.ErrNotExist) {
			os.Remove(filepath.Join(m.dirs.pool, p.Name()))
		}
	}
	return errors.Join(errs...)
}

func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return strings.TrimSpace(string(b))
}

// dropRuntimeMounts removes the mounts a runtime keeps in its own state
// directory (runsc's shared null network namespace) once it has no
// container left, in this process or any other.
func (m *Manager) dropRuntimeMounts(ctx context.Context) error {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	if ids, err := m.rt.List(ctx); err != nil || len(ids) > 0 {
		return nil
	}
	return unmountAll(m.dirs.runtimeState)
}

// removeCgroups removes the container's cgroups in every hierarchy if the
// runtime left them (a container that failed to start, or a runtime killed
// mid-way). Only empty cgroups can be removed, so this never touches a live
// one.
func removeCgroups(cid string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "shellgate", cid))
	if d := filepath.Join("/sys/fs/cgroup", "shellgate", cid); dirExists(d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		unix.Rmdir(d)
	}
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// makeOutputDir makes $OUTPUT_DIR in a home that has none, owned by the
// sandbox user. It goes through an os.Root and mkdir never follows a link,
// so whatever the sandbox left at that name (a link, a file) stays as it is.
func makeOutputDir(homeDir string) error {
	root, err := os.OpenRoot(homeDir)
	if err != nil {
		return err
	}
	defer root.Close()
	name := strings.TrimPrefix(runtime.OutputDir, runtime.HomeDir+"/")
	switch err := root.Mkdir(name, 0o755); {
	case errors.Is(err, fs.ErrExist):
		return nil
	case err != nil:
		return fmt.Errorf("make %s: %w", runtime.OutputDir, err)
	}
	return root.Lchown(name, runtime.UID, runtime.GID)
}
