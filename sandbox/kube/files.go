package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent"
)

// The file operations go to the pod's agent (agent.Client's file
// requests): it resolves every path beneath the home with no symlink
// followed and serves only regular files, as the commands' user; the
// client checks what it answers (paths, sizes, counts, order, bytes
// against the cap) as it would anything else from inside a sandbox.
//
// Unlike on this machine, where a sleeping sandbox's home is mounted
// alone, a file call on a sleeping sandbox wakes its pod (its home lives
// in the Archiver while it sleeps), on any replica: one that never saw the
// sandbox finds it by its pod or archived home. A name with neither,
// unknown here, is sandbox.ErrNotFound: file calls never create a sandbox. Files are never marked Uploaded: the
// mark is a trusted xattr only the host can set, and no host writes a
// pod's home.

// withAgent holds the named sandbox, wakes its pod and runs fn with its
// agent; readOnly says fn changes nothing in the pod (retries.readOnly).
func (s *Sandboxes) withAgent(ctx context.Context, name string, readOnly bool, fn func(c *agent.Client) error) error {
	return s.holdAgent(ctx, name, readOnly, func(c *agent.Client, release func()) error {
		err := fn(c)
		if err == nil {
			release()
		}
		return err
	})
}

// holdAgent is withAgent whose fn, when it succeeds, releases the sandbox
// itself (at once, or when what it returns is closed). When fn fails,
// holdAgent releases it after looking at the error, still holding it so
// that no other call of this process wakes the pod meanwhile.
func (s *Sandboxes) holdAgent(ctx context.Context, name string, readOnly bool, fn func(c *agent.Client, release func()) error) error {
	e, release, err := s.hold(ctx, name, false)
	if err != nil {
		return err
	}
	e.lastUsed.Store(time.Now().UnixNano())
	done := func() {
		e.lastUsed.Store(time.Now().UnixNano())
		release()
	}
	tries := retries{readOnly: readOnly}
	for {
		if err := s.wake(ctx, name); err != nil {
			release()
			return err
		}
		c, aerr := s.b.Agent(name)
		if aerr != nil {
			release()
			return aerr
		}
		err = fn(c, done)
		again, werr := s.again(ctx, name, err, &tries)
		switch {
		case werr != nil:
			err = werr
		case again:
			continue
		}
		break
	}
	if err != nil {
		defer done()
	}
	if err != nil && e.destroying.Load() {
		return sandbox.ErrDestroyed
	}
	if errors.Is(err, agent.ErrNoFiles) {
		return fmt.Errorf("kube: sandbox %s: %w: %w", name, err, sandbox.ErrNotSupported)
	}
	if err != nil {
		return fmt.Errorf("kube: sandbox %s: %w", name, err)
	}
	return nil
}

// ListFiles lists one page of the regular files of the named sandbox's
// home (sandbox.Manager.ListFiles' rules and order).
func (s *Sandboxes) ListFiles(ctx context.Context, name string, opts sandbox.ListOptions) (sandbox.FileList, error) {
	var l sandbox.FileList
	err := s.withAgent(ctx, name, true, func(c *agent.Client) (err error) {
		l, err = c.ListFiles(ctx, s.b.cfg.HomeDir, opts)
		return err
	})
	return l, err
}

// StatFile describes the regular file at rel in the named sandbox's home.
func (s *Sandboxes) StatFile(ctx context.Context, name, rel string) (sandbox.FileInfo, error) {
	clean, err := sandbox.HomeRelPath(rel)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	var fi sandbox.FileInfo
	err = s.withAgent(ctx, name, true, func(c *agent.Client) (err error) {
		fi, err = c.StatFile(ctx, s.b.cfg.HomeDir, clean)
		return err
	})
	return fi, err
}

// OpenFile opens the regular file at rel for streaming; a file over
// maxBytes is sandbox.ErrTooLarge. The sandbox is held until Close.
func (s *Sandboxes) OpenFile(ctx context.Context, name, rel string, maxBytes int64) (*sandbox.File, error) {
	clean, err := sandbox.HomeRelPath(rel)
	if err != nil {
		return nil, err
	}
	var f *sandbox.File
	err = s.holdAgent(ctx, name, true, func(c *agent.Client, release func()) error {
		fi, r, err := c.OpenFile(ctx, s.b.cfg.HomeDir, clean, maxBytes)
		if err != nil {
			return err
		}
		f = sandbox.NewFile(fi, &releaser{ReadCloser: r, release: release})
		return nil
	})
	return f, err
}

// releaser lets the sandbox go when the file is closed.
type releaser struct {
	io.ReadCloser
	release func()
}

func (r *releaser) Close() error {
	err := r.ReadCloser.Close()
	r.release()
	return err
}

// ReadFile reads the regular file at rel; a file over maxBytes is
// sandbox.ErrTooLarge.
func (s *Sandboxes) ReadFile(ctx context.Context, name, rel string, maxBytes int64) ([]byte, error) {
	f, err := s.OpenFile(ctx, name, rel, maxBytes)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// WriteFile copies r to rel (missing directories are created), renamed
// into place once complete; a non-regular file at rel is
// sandbox.ErrNotRegular.
func (s *Sandboxes) WriteFile(ctx context.Context, name, rel string, r io.Reader) error {
	_, err := s.PutFile(ctx, name, rel, r)
	return err
}

// PutFile is WriteFile that also describes the file written.
func (s *Sandboxes) PutFile(ctx context.Context, name, rel string, r io.Reader) (sandbox.FileInfo, error) {
	clean, err := sandbox.HomeRelPath(rel)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	var fi sandbox.FileInfo
	err = s.withAgent(ctx, name, false, func(c *agent.Client) (err error) {
		fi, err = c.PutFile(ctx, s.b.cfg.HomeDir, clean, r, 0)
		if errors.Is(err, agent.ErrHeld) {
			// Not made again: the agent refused it as the bytes left.
			return errWriteHeld
		}
		return err
	})
	return fi, err
}

// errWriteHeld: a write refused while another replica held the pod to put
// it to sleep.
var errWriteHeld = fmt.Errorf("another gateway replica is putting the sandbox to sleep: %w", sandbox.ErrBusy)

// RemoveFile deletes the regular file at rel; anything else there is
// sandbox.ErrNotRegular and stays.
func (s *Sandboxes) RemoveFile(ctx context.Context, name, rel string) error {
	clean, err := sandbox.HomeRelPath(rel)
	if err != nil {
		return err
	}
	return s.withAgent(ctx, name, false, func(c *agent.Client) error {
		return c.RemoveFile(ctx, s.b.cfg.HomeDir, clean)
	})
}
