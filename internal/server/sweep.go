package server

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// Retention (SPEC §3.5): a container's files are deleted Retention after
// its last use (an exec or file call), or after its own expires_after.
// The sweep does it: it destroys the container's sandbox (its home with
// every file) and marks the record "expired". The record stays, so the
// container answers as expired rather than missing: GET and lists show
// status "expired", and calls that use it (exec, files, eval) answer 410
// Gone saying so. Delete still removes it.

// sweepBatch is how many due containers one store read returns.
const sweepBatch = 100

// containerID is the form of the store's container ids: only sandboxes
// named like one are the server's to reconcile.
var containerID = regexp.MustCompile(`^cntr_[0-9a-f]{32}$`)

// Sweep expires every container that is due at the server's clock (Now),
// then reconciles the data directory with the records: the home of a
// container that is expired, or has no record at all (a crash between a
// record's change and its sandbox's), is destroyed. A container a call is
// using is not due (the call is its use) and is left for a later sweep. It
// returns how many containers it expired. Run calls it every SweepEvery;
// tests call it directly after moving the clock.
func (s *Server) Sweep(ctx context.Context) (int, error) {
	now := s.now()
	expired := 0
	for {
		due, err := s.cfg.Containers.Expiring(ctx, now, now.Add(-s.cfg.Retention), sweepBatch)
		if err != nil {
			return expired, fmt.Errorf("sweep: %w", err)
		}
		n := 0
		for _, c := range due {
			ok, err := s.expire(ctx, c, now)
			if err != nil {
				return expired, err
			}
			if ok {
				n++
			}
		}
		expired += n
		if len(due) < sweepBatch || n == 0 {
			break
		}
	}
	return expired, s.reconcile(ctx)
}

// expire expires one due container unless a call holds it or it was used
// since the store read it.
func (s *Server) expire(ctx context.Context, c Container, now time.Time) (bool, error) {
	release, ok := s.calls.tryAcquire(c.ID)
	if !ok {
		return false, nil
	}
	defer release()
	s.stateMu.Lock()
	busy := s.active[c.ID] || s.deleted[c.ID]
	s.stateMu.Unlock()
	if busy {
		return false, nil
	}
	cur, err := s.cfg.Containers.Find(ctx, c.ID)
	if errors.Is(err, ErrNotFound) {
		return false, nil // deleted meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("sweep: %w", err)
	}
	if cur.Expired || cur.LastUse().Add(s.allowance(cur)).After(now) {
		return false, nil
	}
	s.dropped.Add(1)
	ok, err = s.cfg.Containers.Expire(ctx, cur.ID, cur.LastActiveAt)
	if err != nil || !ok {
		return false, err
	}
	s.stateMu.Lock()
	delete(s.cold, cur.ID)
	s.stateMu.Unlock()
	s.metrics.expired.Inc()
	s.log.InfoContext(ctx, "container expired", "container", cur.ID, "account", cur.Owner.Account, "workspace", cur.Owner.Workspace,
		"last_use", cur.LastUse(), "kept_for", s.allowance(cur).String())
	if err := ignoreNotFound(s.mgr.Destroy(ctx, cur.ID)); err != nil {
		// Marked expired already: the next sweep's reconcile tries again.
		s.log.ErrorContext(ctx, "destroying an expired container's files failed", "container", cur.ID, "err", err)
	}
	return true, nil
}

// reconcile destroys the homes of containers whose record is expired or
// gone. Only sandboxes named like a container id are looked at: the CLI's
// own sandboxes in the same data directory are not the server's.
func (s *Server) reconcile(ctx context.Context) error {
	infos, err := s.mgr.List()
	if err != nil {
		return fmt.Errorf("sweep: listing sandboxes: %w", err)
	}
	var errs []error
	for _, in := range infos {
		if !containerID.MatchString(in.Name) {
			continue
		}
		c, err := s.cfg.Containers.Find(ctx, in.Name)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			errs = append(errs, err)
			continue
		case !c.Expired:
			continue
		}
		s.log.InfoContext(ctx, "sweep: removing the files of a container that is expired or deleted", "container", in.Name)
		if err := ignoreNotFound(s.mgr.Destroy(ctx, in.Name)); err != nil {
			errs = append(errs, fmt.Errorf("sweep: destroying %s: %w", in.Name, err))
		}
	}
	return errors.Join(errs...)
}

// sweepLoop runs Sweep every SweepEvery until ctx ends.
func (s *Server) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	var lastBlobs time.Time
	for {
		if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "sweep failed", "expired", n, "err", err)
		}
		if n, err := s.SweepLogs(ctx); err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "request-log sweep failed", "deleted", n, "err", err)
		}
		// What a burst took (a thousand connections' buffers, bodies in
		// flight) goes back to the operating system now, not at the
		// runtime's own pace: a collection and a scavenge, once a sweep.
		debug.FreeOSMemory()
		if time.Since(lastBlobs) >= blobSweepEvery {
			lastBlobs = time.Now()
			if n, err := s.SweepBlobs(ctx); err != nil && ctx.Err() == nil {
				s.log.ErrorContext(ctx, "orphaned-blob sweep failed", "deleted", n, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// blobSweepEvery is how often sweepLoop looks for orphaned blobs (a walk
// of every blob: not each SweepEvery).
const blobSweepEvery = time.Hour

// SweepBlobs deletes the workspace-file blobs that no file record names
// and that are older than store.OrphanAge: left by a crash between storing
// an upload's bytes and its record, or by a file whose bytes could not be
// deleted with it. Run calls it at start and hourly; tests call it
// directly. Blob ages are the storage's real clock, not s.now().
func (s *Server) SweepBlobs(ctx context.Context) (int, error) {
	if s.cfg.Blobs == nil || s.cfg.Files == nil {
		return 0, nil
	}
	n, err := store.SweepBlobs(ctx, s.cfg.Blobs, s.cfg.Files, time.Now().Add(-store.OrphanAge))
	if n > 0 {
		s.log.InfoContext(ctx, "sweep: deleted orphaned file blobs", "deleted", n)
	}
	return n, err
}
