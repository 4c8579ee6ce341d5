package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Sandboxes get the agent from a small tmpfs of the data directory
// (run/agent) rather than from where it is installed: a bind mount's source
// path shows in the sandbox's /proc/self/mountinfo, and a file of a tmpfs
// shows only as "/shellgate-agent-SUM". Each agent build has its own file,
// named by its hash, so processes of different versions can share the
// directory. Callers hold the run lock exclusively.

func (m *Manager) agentDir() string { return filepath.Join(filepath.Dir(m.dirs.run), "agent") }

// hashAgent names the agent build: the first 12 hex digits of its SHA-256.
func hashAgent(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("sandbox agent: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("sandbox agent: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// servedAgentLocked mounts the agent tmpfs if needed, copies this build in
// if it is not there yet, and returns its path.
func (m *Manager) servedAgentLocked() (string, error) {
	dir := m.agentDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	mounted, err := mountinfo.Mounted(dir)
	if err != nil {
		return "", err
	}
	if !mounted {
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64m,mode=0755"); err != nil {
			return "", fmt.Errorf("mount agent tmpfs: %w", err)
		}
	}
	dst := filepath.Join(dir, "shellgate-agent-"+m.agentSum)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	src, err := os.Open(m.agent)
	if err != nil {
		return "", fmt.Errorf("sandbox agent: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".copy-*")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(tmp, src)
	err = errors.Join(err, tmp.Chmod(0o755), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("copy sandbox agent: %w", err)
	}
	return dst, nil
}

// dropAgentTmpfs unmounts the agent tmpfs once no sandbox of any process
// runs from the data directory; running containers keep their own bind
// mount of the file either way.
func (m *Manager) dropAgentTmpfs() error {
	return m.withRunLock(unix.LOCK_EX, m.dropAgentTmpfsLocked)
}

func (m *Manager) dropAgentTmpfsLocked() error {
	if entries, err := os.ReadDir(m.dirs.run); err != nil || len(entries) > 0 {
		return nil
	}
	err := unix.Unmount(m.agentDir(), unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount agent tmpfs: %w", err)
	}
	return nil
}
