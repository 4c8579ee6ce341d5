package sandbox

// Sleep that keeps the running state. On a runtime that can checkpoint a
// whole sandbox (runtime.Checkpointer: gVisor's runsc), a sandbox put to
// sleep on purpose — Sleep, the idle sweep, Close — is checkpointed first:
// its processes (the resident Python kernel with its variables, whatever
// the resident started), their memory, open files and the sandbox kernel's
// own state (/tmp, /dev/shm, pipes, sockets) go to homes/NAME.ckpt/, next
// to the home. The next wake restores the sandbox from it over the same
// home and the same image version, and removes it: a checkpoint exists only
// while its sandbox sleeps.
//
//	homes/NAME.ckpt/meta.json     runtime, image version, agent hello, or
//	                              why no image was saved (Failed)
//	homes/NAME.ckpt/*.img         the runtime's image (runsc: checkpoint.img,
//	                              pages_meta.img, pages.img)
//
// Anything that goes wrong falls back to the wake of a sandbox without a
// checkpoint — a fresh container over the home's files — and the next
// command's result carries a note that the running state was lost and why
// (Result.Notes): a checkpoint that failed, a runtime or image that
// changed, a corrupt or unreadable image, a restore that did not start.
// Sleeps that are not chosen (the sandbox died, or did not end a command
// in time) keep files only, as before, and say so themselves.
//
// Not kept: the writable layer over the image (system changes outside
// /workspace/home and /tmp) is dropped at sleep as before, so a restored
// process that had a file open there loses it (runsc then refuses the
// restore, and the sandbox wakes from its files). The sandbox wakes in the
// id range and, under an allowlist, the network that are free then: its
// network is set up anew and gVisor's netstack takes it over (addresses and
// routes of the new namespace); connections open at sleep are closed
// (runsc's --net-disconnect-ok), so the proxy sees only new ones.
//
// With a HomeArchive that is a CheckpointArchive (homearchive over S3) the
// checkpoint goes to the archive before the home (which may hand the
// sandbox to another node) and is removed here; a wake on any node fetches
// it after the home and deletes it from the archive before restoring, so
// no checkpoint is restored twice. With another HomeArchive, files only.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// ckptMeta is homes/NAME.ckpt/meta.json.
type ckptMeta struct {
	Runtime string      `json:"runtime"`
	Rootfs  string      `json:"rootfs"` // the image version's root filesystem
	Hello   agent.Hello `json:"hello"`
	Taken   time.Time   `json:"taken"`
	// Failed says why no image was saved: the wake is files-only and
	// tells the next command.
	Failed string `json:"failed,omitempty"`
}

// checkpointTimeout bounds one checkpoint or restore (a few seconds per
// GiB of sandbox memory).
const checkpointTimeout = 5 * time.Minute

func (m *Manager) ckptPath(name string) string {
	return filepath.Join(m.dirs.homes, name+".ckpt")
}

// checkpointer is the runtime's Checkpointer when sandboxes of this
// manager can keep their running state through sleep.
func (m *Manager) checkpointer() (runtime.Checkpointer, bool) {
	cp, ok := m.rt.(runtime.Checkpointer)
	if m.cfg.HomeArchive != nil {
		_, archives := m.cfg.HomeArchive.(CheckpointArchive)
		ok = ok && archives
	}
	return cp, ok && !m.cfg.FilesOnlySleep
}

// archiveCheckpoint stores the named sandbox's checkpoint, if it has one,
// in the CheckpointArchive and then removes it here: a wake on any node
// fetches it. If that fails the running state is lost, and the next wake
// here says so.
func (m *Manager) archiveCheckpoint(ctx context.Context, name string) {
	ca, ok := m.cfg.HomeArchive.(CheckpointArchive)
	dir := m.ckptPath(name)
	if _, err := os.Stat(filepath.Join(dir, "meta.json")); !ok || err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), archiveTimeout)
	defer cancel()
	switch err := ca.ArchiveCheckpoint(ctx, name, dir); {
	case err == nil:
		os.RemoveAll(dir)
	case errors.Is(err, fs.ErrNotExist):
		// No archive behind: it stays here, where the sandbox wakes.
	default:
		m.log.Warn("checkpoint not archived; the sandbox keeps its files only", "sandbox", name, "err", err)
		md, _ := json.Marshal(ckptMeta{Runtime: m.rt.Name(), Taken: time.Now().UTC(), Failed: "storing it failed"})
		os.RemoveAll(dir)
		if os.Mkdir(dir, 0o700) == nil {
			os.WriteFile(filepath.Join(dir, "meta.json"), md, 0o600)
		}
	}
}

// fetchCheckpoint brings the named sandbox's checkpoint from the
// CheckpointArchive, if there is one there, and takes it out of the
// archive (a checkpoint is used once, on one node). lost says why the
// running state is gone when that fails.
func (m *Manager) fetchCheckpoint(ctx context.Context, name string) (lost string) {
	ca, ok := m.cfg.HomeArchive.(CheckpointArchive)
	if !ok {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, archiveTimeout)
	defer cancel()
	err := ca.RestoreCheckpoint(ctx, name, m.ckptPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return "" // none there: one here, if any, is this node's own
	}
	if err == nil {
		err = ca.DeleteCheckpoint(ctx, name)
	}
	if err != nil {
		m.log.Warn("checkpoint not fetched; the sandbox wakes from its files", "sandbox", name, "err", err)
		return "its checkpoint could not be fetched from storage"
	}
	return ""
}

// parkLocked puts the box to sleep on purpose (Sleep, idle, Close): it
// checkpoints the sandbox first where it can, then sleeps it.
func (m *Manager) parkLocked(ctx context.Context, b *box) error {
	if b.inst == nil {
		return nil
	}
	if cp, ok := m.checkpointer(); ok {
		m.checkpoint(ctx, cp, b)
	}
	return m.sleepLocked(ctx, b)
}

// checkpoint saves b's running sandbox to its checkpoint directory, or
// records why it could not. The container stops either way.
func (m *Manager) checkpoint(ctx context.Context, cp runtime.Checkpointer, b *box) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	inst := b.inst
	final := m.ckptPath(b.name)
	tmp := final + ".new"
	md := ckptMeta{Runtime: m.rt.Name(), Rootfs: inst.img.Rootfs, Hello: inst.client.Hello(), Taken: time.Now().UTC()}
	start := time.Now()
	err := errors.Join(os.RemoveAll(tmp), os.Mkdir(tmp, 0o700))
	md.Failed = "saving it failed"
	if err == nil {
		select {
		case <-inst.client.Done():
			md.Failed = "the sandbox had stopped before it went to sleep"
			err = errors.New(md.Failed)
		default:
			// The image is as large as the sandbox's memory: not below
			// the disk reserve, which homes may not take either.
			if err = m.checkReserve("checkpoint " + b.name); err != nil {
				md.Failed = "the host's free disk space is below its reserve"
			} else {
				err = cp.Checkpoint(ctx, inst.cid, tmp)
			}
		}
	}
	if err == nil {
		md.Failed = ""
	} else {
		m.log.Warn("checkpoint failed; the sandbox keeps its files only", "sandbox", b.name, "container", inst.cid, "err", err)
		os.RemoveAll(tmp)
		os.Mkdir(tmp, 0o700)
	}
	mb, _ := json.Marshal(md)
	err = errors.Join(os.WriteFile(filepath.Join(tmp, "meta.json"), mb, 0o600), os.RemoveAll(final))
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		m.log.Warn("checkpoint not kept", "sandbox", b.name, "err", err)
		os.RemoveAll(tmp)
		return
	}
	m.log.Debug("sandbox checkpointed", "sandbox", b.name, "took", time.Since(start), "bytes", dirBytes(final))
}

// restoreInstance starts the named sandbox from its checkpoint, if it has
// one, and removes the checkpoint. inst is nil when there was none or it
// could not be used; lost then says why the running state is gone ("" when
// there was no checkpoint).
func (m *Manager) restoreInstance(ctx context.Context, name, home string, set Settings) (inst *instance, lost string) {
	// A checkpoint is used once: moved aside before the restore, so that
	// after a crash a restored (and since changed) sandbox is never
	// restored from it again.
	dir := m.ckptPath(name) + ".used"
	if err := os.Rename(m.ckptPath(name), dir); errors.Is(err, fs.ErrNotExist) {
		return nil, ""
	}
	defer m.removeCheckpoint(name)
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	var md ckptMeta
	if err == nil {
		err = json.Unmarshal(b, &md)
	}
	cp, ok := m.checkpointer()
	switch {
	case err != nil:
		m.log.Warn("checkpoint unreadable; the sandbox wakes from its files", "sandbox", name, "err", err)
		return nil, "its checkpoint could not be read"
	case md.Failed != "":
		return nil, md.Failed
	case !ok || md.Runtime != m.rt.Name():
		return nil, fmt.Sprintf("it was saved by %s and this server runs sandboxes on %s without checkpoints", md.Runtime, m.rt.Name())
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	inst, err = m.startInstance(ctx, newID(), home, set.Limits, set.Network, &restoreFrom{cp: cp, dir: dir, meta: md})
	if err != nil {
		// The details (host paths, container ids) go to the log; the
		// model reads the note.
		m.log.Warn("restore failed; the sandbox wakes from its files", "sandbox", name, "err", err)
		if errors.Is(err, errImageChanged) {
			return nil, "its image was rebuilt or replaced since"
		}
		return nil, "the runtime could not restore it (a corrupt or incompatible checkpoint)"
	}
	m.log.Debug("sandbox restored", "sandbox", name, "took", time.Since(start))
	return inst, ""
}

// errImageChanged: the image's current version is not the one the
// checkpoint ran on.
var errImageChanged = errors.New("the image was rebuilt or replaced since the checkpoint")

// removeCheckpoint removes the named sandbox's checkpoint and what a
// checkpoint or restore cut short left.
func (m *Manager) removeCheckpoint(name string) error {
	p := m.ckptPath(name)
	return errors.Join(os.RemoveAll(p), os.RemoveAll(p+".new"), os.RemoveAll(p+".used"))
}

// restoreFrom is what startInstance needs to restore a container instead
// of starting one.
type restoreFrom struct {
	cp   runtime.Checkpointer
	dir  string
	meta ckptMeta
}

// lostNote is the line a command's result carries after a wake that lost
// the running state a checkpoint should have kept.
func lostNote(why string) []byte {
	return []byte("shellgate: the sandbox's running state (processes, their memory, the Python kernel's variables) was saved when it went to sleep but could not be restored: " + why + "; it woke from its files in /workspace/home only\n")
}

// dirBytes is what the regular files directly in dir take on disk.
func dirBytes(dir string) int64 {
	entries, _ := os.ReadDir(dir)
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
	}
	return n
}
