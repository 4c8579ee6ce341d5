package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/shellgate/shellgate/sandbox"
)

// containerObject is a container on the wire.
type containerObject struct {
	ID     string `json:"id"`
	Object string `json:"object"` // "container"
	Name   string `json:"name"`
	// Status is "running" (awake in this or another Shellgate process) or
	// "sleeping" (only its files are kept).
	Status       string `json:"status"`
	CreatedAt    int64  `json:"created_at"`
	LastActiveAt int64  `json:"last_active_at"`
}

type listObject struct {
	Object  string            `json:"object"` // "list"
	Data    []containerObject `json:"data"`
	FirstID *string           `json:"first_id"`
	LastID  *string           `json:"last_id"`
	HasMore bool              `json:"has_more"`
}

// Listing limits of GET /api/v1/containers (OpenAI's containers list).
const (
	defaultListLimit = 20
	maxListLimit     = 100
)

func (s *Server) object(c Container) containerObject {
	st := "sleeping"
	if got, err := s.mgr.Status(c.ID); err == nil && got == sandbox.Running {
		st = "running"
	}
	active := c.LastActiveAt
	if active.IsZero() {
		active = c.CreatedAt
	}
	return containerObject{ID: c.ID, Object: "container", Name: c.Name, Status: st,
		CreatedAt: c.CreatedAt.Unix(), LastActiveAt: active.Unix()}
}

// lookup finds the {id} of the path in p's workspace; an id that is
// malformed, unknown or another workspace's is the same 404.
func (s *Server) lookup(ctx context.Context, p Principal, ref string) (Container, error) {
	if !sandbox.ValidName(ref) {
		return Container{}, notFound(ref)
	}
	c, err := s.cfg.Containers.Lookup(ctx, p, ref)
	if errors.Is(err, ErrNotFound) {
		return Container{}, notFound(ref)
	}
	return c, err
}

func notFound(ref string) error {
	return errorf(http.StatusNotFound, "no container %q", ref)
}

type createRequest struct {
	// Name is optional: 1–40 letters, digits, '_' or '-' (SPEC §3.3).
	Name *string `json:"name"`
}

func (s *Server) createContainer(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req createRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	name := ""
	if req.Name != nil {
		name = *req.Name
		if !sandbox.ValidName(name) {
			return errorf(http.StatusBadRequest, "name %q: want 1-40 letters, digits, '_' or '-'", name)
		}
	}
	c, err := s.cfg.Containers.Create(r.Context(), p, name)
	switch {
	case errors.Is(err, ErrConflict):
		return errorf(http.StatusConflict, "a container named %q already exists in this workspace", name)
	case err != nil:
		return fmt.Errorf("create container record: %w", err)
	}
	if !sandbox.ValidName(c.ID) {
		return fmt.Errorf("container store made id %q, which cannot name a sandbox", c.ID)
	}
	// Start it now, so it answers "running" like a created container
	// should; the first exec call pays the new-container minimum.
	if err := s.mgr.Create(r.Context(), c.ID); err != nil {
		cleanup := errors.Join(s.cfg.Containers.Delete(context.WithoutCancel(r.Context()), p, c.ID),
			ignoreNotFound(s.mgr.Destroy(context.WithoutCancel(r.Context()), c.ID)))
		s.log.ErrorContext(r.Context(), "starting a new container failed", "container", c.ID, "err", err, "cleanup", cleanup)
		return errorf(http.StatusServiceUnavailable, "could not start the container: %v", err)
	}
	s.stateMu.Lock()
	s.cold[c.ID] = true
	s.stateMu.Unlock()
	writeJSON(w, http.StatusOK, s.object(c))
	return nil
}

func ignoreNotFound(err error) error {
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil
	}
	return err
}

func (s *Server) listContainers(w http.ResponseWriter, r *http.Request, p Principal) error {
	q := r.URL.Query()
	opts := ListOptions{Limit: defaultListLimit, Order: "desc", After: q.Get("after"), Name: q.Get("name")}
	for k := range q {
		switch k {
		case "limit", "after", "order", "name":
		default:
			return errorf(http.StatusBadRequest, "unknown query parameter %q (want limit, after, order, name)", k)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return errorf(http.StatusBadRequest, "limit %q: want an integer from 1 to %d", v, maxListLimit)
		}
		opts.Limit = n
	}
	if v := q.Get("order"); v != "" {
		if v != "asc" && v != "desc" {
			return errorf(http.StatusBadRequest, "order %q: want asc or desc", v)
		}
		opts.Order = v
	}
	if opts.After != "" && !sandbox.ValidName(opts.After) {
		return errorf(http.StatusBadRequest, "after %q is not a container id", opts.After)
	}
	if opts.Name != "" && !sandbox.ValidName(opts.Name) {
		return errorf(http.StatusBadRequest, "name %q: want 1-40 letters, digits, '_' or '-'", opts.Name)
	}
	items, more, err := s.cfg.Containers.List(r.Context(), p, opts)
	switch {
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrNotFound):
		return errorf(http.StatusBadRequest, "after %q is not a container of this workspace", opts.After)
	case err != nil:
		return fmt.Errorf("list containers: %w", err)
	}
	out := listObject{Object: "list", Data: make([]containerObject, 0, len(items)), HasMore: more}
	for _, c := range items {
		out.Data = append(out.Data, s.object(c))
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[n-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getContainer(w http.ResponseWriter, r *http.Request, p Principal) error {
	c, err := s.lookup(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.object(c))
	return nil
}

// deleteContainer removes the record (new calls answer 404 from then on),
// then destroys the sandbox, which cuts short the command running in it:
// the exec call in flight answers with what ran and a "deleted" error.
func (s *Server) deleteContainer(w http.ResponseWriter, r *http.Request, p Principal) error {
	c, err := s.lookup(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	s.stateMu.Lock()
	s.deleted[c.ID] = true
	delete(s.cold, c.ID)
	s.stateMu.Unlock()
	ctx := context.WithoutCancel(r.Context())
	err = s.cfg.Containers.Delete(ctx, p, c.ID)
	if errors.Is(err, ErrNotFound) {
		// A concurrent delete won.
		s.clearDeleted(c.ID)
		return notFound(r.PathValue("id"))
	}
	if err != nil {
		s.clearDeleted(c.ID)
		return fmt.Errorf("delete container record %s: %w", c.ID, err)
	}
	derr := ignoreNotFound(s.mgr.Destroy(ctx, c.ID))
	s.clearDeleted(c.ID)
	if derr != nil {
		// The record is gone; the sandbox's home is left for `shellgate
		// sandbox rm`. Say so in the log, answer the delete.
		s.log.ErrorContext(r.Context(), "destroying a deleted container's sandbox failed", "container", c.ID, "err", derr)
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": c.ID, "object": "container.deleted", "deleted": true})
	return nil
}

// clearDeleted forgets a deleted container's tombstone unless a call is
// running in it; that call clears it (and destroys what it started) when it
// ends.
func (s *Server) clearDeleted(id string) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if !s.active[id] {
		delete(s.deleted, id)
	}
}
