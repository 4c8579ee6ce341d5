package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/egress"
)

// The containers routes serve two shapes over one set of records:
// /api/v1/containers (OpenRouter's envelope, SPEC §3.3 names, explicit
// limits) and /v1/containers (OpenAI's containers API: its envelope, any
// display name, memory_limit tiers). A container made on either answers on
// both, with the same object.

// containerObject is a container on the wire: OpenAI's container object
// (every field openai-go reads) plus Shellgate's limits and expires_at.
type containerObject struct {
	ID     string `json:"id"`
	Object string `json:"object"` // "container"
	Name   string `json:"name"`
	// Status is "running" (awake in this or another Shellgate process),
	// "sleeping" (only its files are kept) or "expired" (its files were
	// deleted by the retention sweep).
	Status       string `json:"status"`
	CreatedAt    int64  `json:"created_at"`
	LastActiveAt int64  `json:"last_active_at"`
	// ExpiresAfter is the container's own idle allowance when it has one,
	// else the server's retention; ExpiresAt is when that runs out.
	ExpiresAfter  expiresAfter  `json:"expires_after"`
	ExpiresAt     int64         `json:"expires_at"`
	MemoryLimit   string        `json:"memory_limit"`
	NetworkPolicy NetworkPolicy `json:"network_policy"`
	Limits        limitsObject  `json:"limits"`
	// DiskBytes is what the container takes on this server's disk (its
	// home, and the checkpoint of its running state while it sleeps);
	// CheckpointBytes is that checkpoint's part. Both only when this
	// server holds the container (sandbox.Describer).
	DiskBytes       *int64 `json:"disk_bytes,omitempty"`
	CheckpointBytes *int64 `json:"checkpoint_bytes,omitempty"`
}

type expiresAfter struct {
	Anchor  string `json:"anchor"` // "last_active_at"
	Minutes int64  `json:"minutes"`
}

// limitsObject are a container's effective limits on the wire (and, with
// every field optional, in a create request).
type limitsObject struct {
	CPUs      float64 `json:"cpus"`
	MemoryMB  int64   `json:"memory_mb"`
	Processes int64   `json:"processes"`
	DiskMB    int64   `json:"disk_mb"`
}

type listObject struct {
	Object  string            `json:"object"` // "list"
	Data    []containerObject `json:"data"`
	FirstID *string           `json:"first_id"`
	LastID  *string           `json:"last_id"`
	HasMore bool              `json:"has_more"`
}

// Listing limits of the containers lists (OpenAI's).
const (
	defaultListLimit = 20
	maxListLimit     = 100
)

func (s *Server) object(c Container) containerObject {
	st := "sleeping"
	switch got, err := s.mgr.Status(c.ID); {
	case c.Expired:
		st = "expired"
	case err == nil && got == sandbox.Running:
		st = "running"
	}
	allow := s.allowance(c)
	l := s.effective(c.Limits)
	np := NetworkPolicy{Type: "disabled"}
	if c.NetworkPolicy != nil {
		np = *c.NetworkPolicy
	}
	var disk, ckpt *int64
	if d, ok := s.cfg.Sandboxes.(sandbox.Describer); ok && !c.Expired {
		if inf, err := d.Info(c.ID); err == nil {
			disk, ckpt = &inf.DiskBytes, &inf.CheckpointBytes
		}
	}
	return containerObject{ID: c.ID, Object: "container", Name: c.Name, Status: st, DiskBytes: disk, CheckpointBytes: ckpt,
		CreatedAt: c.CreatedAt.Unix(), LastActiveAt: c.LastUse().Unix(),
		ExpiresAfter: expiresAfter{Anchor: "last_active_at", Minutes: int64(allow / time.Minute)},
		ExpiresAt:    c.LastUse().Add(allow).Unix(),
		MemoryLimit:  memoryLimit(l.MemoryBytes), NetworkPolicy: np,
		Limits: limitsObject{CPUs: float64(l.CPUMillis) / 1000, MemoryMB: l.MemoryBytes >> 20, Processes: l.Processes, DiskMB: l.DiskBytes >> 20}}
}

// allowance is how long after its last use a container's files are kept:
// its own expires_after, else the server's retention.
func (s *Server) allowance(c Container) time.Duration {
	if !c.ExpiresAt.IsZero() {
		return c.ExpiresAt.Sub(c.LastUse())
	}
	return s.cfg.Retention
}

// memoryLimit writes a memory size as OpenAI does ("1g"), in MiB ("512m")
// when it is not a whole number of GiB.
func memoryLimit(b int64) string {
	if b%(1<<30) == 0 {
		return strconv.FormatInt(b>>30, 10) + "g"
	}
	return strconv.FormatInt(b>>20, 10) + "m"
}

// find resolves the {id} of the path in p's workspace, expired or not; an
// id that is malformed, unknown or another workspace's is the same 404.
func (s *Server) find(ctx context.Context, p Principal, ref string) (Container, error) {
	if !sandbox.ValidName(ref) {
		return Container{}, notFound(ref)
	}
	c, err := s.cfg.Containers.Lookup(ctx, p, ref)
	if errors.Is(err, ErrNotFound) {
		return Container{}, notFound(ref)
	}
	return c, err
}

// lookup resolves the {id} of a call that uses the container (exec,
// files, eval): like find, but an expired container is 410 Gone, and the
// use is recorded as the container's last activity.
func (s *Server) lookup(ctx context.Context, p Principal, ref string) (Container, error) {
	c, err := s.find(ctx, p, ref)
	if err != nil {
		return Container{}, err
	}
	if c.Expired {
		return Container{}, expired(ref, c, s.allowance(c))
	}
	s.touch(ctx, p, c, s.now())
	return c, nil
}

// touch records a use of c at t; last_active_at is shown in seconds, so
// a container used within the last second is not written again.
func (s *Server) touch(ctx context.Context, p Principal, c Container, t time.Time) {
	if t.Sub(c.LastUse()) < time.Second {
		return
	}
	if err := s.cfg.Containers.Touch(context.WithoutCancel(ctx), p, c.ID, t); err != nil && !errors.Is(err, ErrNotFound) {
		s.log.ErrorContext(ctx, "recording last use failed", "container", c.ID, "err", err)
	}
}

func notFound(ref string) error {
	return errorf(http.StatusNotFound, "no container %q", ref)
}

// expired is the answer to a call on an expired container: 410 Gone, not
// 404, so the caller can tell it apart from a typo.
func expired(ref string, c Container, allow time.Duration) error {
	e := errorf(http.StatusGone, "container %q expired: its files were deleted %s after its last use (%s); create a new container",
		ref, allow, c.LastUse().UTC().Format(time.RFC3339))
	e.code = "container_expired"
	return e
}

// createRequest is the body of both creates. name, expires_after,
// file_ids, memory_limit and network_policy are OpenAI's; limits is
// Shellgate's (SPEC §3.1 resources, each at most the server's maximum).
type createRequest struct {
	Name          *string               `json:"name"`
	ExpiresAfter  *expiresAfterRequest  `json:"expires_after"`
	FileIDs       []string              `json:"file_ids"`
	MemoryLimit   *string               `json:"memory_limit"`
	NetworkPolicy *networkPolicyRequest `json:"network_policy"`
	Limits        *limitsRequest        `json:"limits"`
	// Skills are OpenAI's; Shellgate has none, so only an empty list is
	// accepted.
	Skills []any `json:"skills"`
}

type expiresAfterRequest struct {
	Anchor  *string `json:"anchor"`
	Minutes *int64  `json:"minutes"`
}

type networkPolicyRequest struct {
	Type           *string  `json:"type"`
	AllowedDomains []string `json:"allowed_domains"`
}

type limitsRequest struct {
	CPUs      *float64 `json:"cpus"`
	MemoryMB  *int64   `json:"memory_mb"`
	Processes *int64   `json:"processes"`
	DiskMB    *int64   `json:"disk_mb"`
}

// Bounds of a create request.
const (
	maxExpiresMinutes = 365 * 24 * 60
	maxFileIDs        = 100
	maxAllowedDomains = 50
	maxOpenAIName     = 256
)

// memoryTiers are OpenAI's memory_limit values.
var memoryTiers = map[string]int64{"1g": 1 << 30, "4g": 4 << 30, "16g": 16 << 30, "64g": 64 << 30}

// spec validates a create request into a ContainerSpec. memory_limit is
// clamped to the server's maximum (OpenAI's tiers are coarse); limits
// beyond the maximum are refused.
func (s *Server) spec(p Principal, req createRequest, sh shape) (ContainerSpec, error) {
	var sp ContainerSpec
	if req.Name != nil {
		sp.Name = *req.Name
		switch {
		case sh == shapeOpenAI && !displayName(sp.Name):
			return sp, paramErr("name", "name: want 1-%d printable characters", maxOpenAIName)
		case sh == shapeOpenRouter && !sandbox.ValidName(sp.Name):
			return sp, paramErr("name", "name %q: want 1-40 letters, digits, '_' or '-'", sp.Name)
		case idLike(sp.Name):
			return sp, idLikeName("name", sp.Name)
		}
	}
	if len(req.Skills) > 0 {
		return sp, paramErr("skills", "skills are not supported by this server")
	}
	if ea := req.ExpiresAfter; ea != nil {
		if ea.Anchor == nil || *ea.Anchor != "last_active_at" {
			return sp, paramErr("expires_after.anchor", `expires_after.anchor: want "last_active_at"`)
		}
		if ea.Minutes == nil || *ea.Minutes < 1 || *ea.Minutes > maxExpiresMinutes {
			return sp, paramErr("expires_after.minutes", "expires_after.minutes: want an integer from 1 to %d", maxExpiresMinutes)
		}
		sp.ExpiresAfter = time.Duration(*ea.Minutes) * time.Minute
	}
	max := s.maxLimits()
	if l := req.Limits; l != nil {
		if l.CPUs != nil {
			if *l.CPUs < 0.01 || *l.CPUs*1000 > float64(max.CPUMillis) {
				return sp, paramErr("limits.cpus", "limits.cpus %g: want 0.01 to %g", *l.CPUs, float64(max.CPUMillis)/1000)
			}
			sp.Limits.CPUMillis = int64(*l.CPUs * 1000)
		}
		if l.MemoryMB != nil {
			if *l.MemoryMB < 32 || *l.MemoryMB > max.MemoryBytes>>20 {
				return sp, paramErr("limits.memory_mb", "limits.memory_mb %d: want 32 to %d", *l.MemoryMB, max.MemoryBytes>>20)
			}
			sp.Limits.MemoryBytes = *l.MemoryMB << 20
		}
		if l.Processes != nil {
			if *l.Processes < 16 || *l.Processes > max.Processes {
				return sp, paramErr("limits.processes", "limits.processes %d: want 16 to %d", *l.Processes, max.Processes)
			}
			sp.Limits.Processes = *l.Processes
		}
		if l.DiskMB != nil {
			if *l.DiskMB < 16 || *l.DiskMB > max.DiskBytes>>20 {
				return sp, paramErr("limits.disk_mb", "limits.disk_mb %d: want 16 to %d", *l.DiskMB, max.DiskBytes>>20)
			}
			sp.Limits.DiskBytes = *l.DiskMB << 20
		}
	}
	if req.MemoryLimit != nil {
		b, ok := memoryTiers[*req.MemoryLimit]
		switch {
		case !ok:
			return sp, paramErr("memory_limit", `memory_limit %q: want "1g", "4g", "16g" or "64g"`, *req.MemoryLimit)
		case sp.Limits.MemoryBytes != 0:
			return sp, paramErr("memory_limit", "send memory_limit or limits.memory_mb, not both")
		}
		sp.Limits.MemoryBytes = min(b, max.MemoryBytes)
	}
	if np := req.NetworkPolicy; np != nil {
		pol, err := networkPolicy(np)
		if err != nil {
			return sp, err
		}
		if pol != nil {
			// Within what the operator lets this workspace open.
			if _, err := egress.Narrow(&egress.Policy{Type: egress.Allowlist, AllowedDomains: pol.AllowedDomains}, s.networkMax(p)); err != nil {
				return sp, paramErr("network_policy.allowed_domains", "%v", err)
			}
		}
		sp.NetworkPolicy = pol
	}
	if len(req.FileIDs) > maxFileIDs {
		return sp, paramErr("file_ids", "file_ids: at most %d files", maxFileIDs)
	}
	return sp, nil
}

// networkPolicy validates OpenAI's network_policy: {"type":"disabled"}
// (nil: no network) or {"type":"allowlist","allowed_domains":[...]}.
func networkPolicy(np *networkPolicyRequest) (*NetworkPolicy, error) {
	if np.Type == nil {
		return nil, paramErr("network_policy.type", `network_policy.type: want "disabled" or "allowlist"`)
	}
	switch *np.Type {
	case "disabled":
		if len(np.AllowedDomains) > 0 {
			return nil, paramErr("network_policy.allowed_domains", `network_policy: allowed_domains goes with type "allowlist"`)
		}
		return nil, nil
	case "allowlist":
	default:
		return nil, paramErr("network_policy.type", `network_policy.type %q: want "disabled" or "allowlist"`, *np.Type)
	}
	n := len(np.AllowedDomains)
	if n < 1 || n > maxAllowedDomains {
		return nil, paramErr("network_policy.allowed_domains", "network_policy.allowed_domains: want 1 to %d hostnames, got %d", maxAllowedDomains, n)
	}
	out := &NetworkPolicy{Type: "allowlist"}
	seen := map[string]bool{}
	for _, d := range np.AllowedDomains {
		norm, ok := domainPattern(d)
		if !ok {
			return nil, paramErr("network_policy.allowed_domains", `network_policy.allowed_domains: %q is not a hostname, a "*.example.com" pattern or "*"`, d)
		}
		if norm == "*" && n > 1 {
			return nil, paramErr("network_policy.allowed_domains", `network_policy.allowed_domains: "*" allows every host and goes alone`)
		}
		if !seen[norm] {
			seen[norm] = true
			out.AllowedDomains = append(out.AllowedDomains, norm)
		}
	}
	// The egress layer enforces it: what it would refuse at start is
	// refused here.
	if err := (&egress.Policy{Type: egress.Allowlist, AllowedDomains: out.AllowedDomains}).Validate(); err != nil {
		return nil, paramErr("network_policy.allowed_domains", "network_policy: %v", err)
	}
	return out, nil
}

// domainPattern checks one allowlist entry — a hostname, "*." and a
// hostname of at least two labels, or "*" — and returns it in lower case.
// IP literals are refused: enforcement is by name (SPEC §3.4).
func domainPattern(d string) (string, bool) {
	d = strings.TrimSuffix(strings.ToLower(d), ".")
	if d == "*" {
		return d, true
	}
	host, glob := strings.CutPrefix(d, "*.")
	if len(host) < 1 || len(host) > 253 {
		return "", false
	}
	labels := strings.Split(host, ".")
	if glob && len(labels) < 2 {
		return "", false
	}
	for _, l := range labels {
		if len(l) < 1 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", false
		}
		for i := 0; i < len(l); i++ {
			if c := l[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return "", false
			}
		}
	}
	// The last label of a name is never all digits (that is an IPv4 literal).
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" {
		return "", false
	}
	return d, true
}

// displayName: OpenAI's container names are free text; Shellgate takes
// 1–256 bytes of printable UTF-8.
func displayName(n string) bool {
	if len(n) < 1 || len(n) > maxOpenAIName || !utf8.ValidString(n) {
		return false
	}
	for _, r := range n {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// idLike reports whether a name has the form of a container id (cntr_ and
// 32 hex digits, in any case). Such names are refused: ids and names are
// looked up in one namespace (an id first), so the name would address
// another container, or hide behind it.
func idLike(name string) bool {
	return len(name) == len("cntr_")+32 && containerID.MatchString(strings.ToLower(name))
}

func idLikeName(param, name string) *apiError {
	return paramErr(param, "%s %q has the form of a container id (cntr_ and 32 hex digits), which names cannot have: ids and names address containers alike", param, name)
}

func paramErr(param, format string, a ...any) *apiError {
	e := errorf(http.StatusBadRequest, format, a...)
	e.param = param
	return e
}

func (s *Server) createContainer(sh shape) apiHandler {
	return func(w http.ResponseWriter, r *http.Request, p Principal) error {
		var req createRequest
		if err := decodeJSON(r, &req, sh == shapeOpenRouter); err != nil {
			return err
		}
		if sh == shapeOpenAI && req.Name == nil {
			return paramErr("name", "name is required")
		}
		c, err := s.create(r.Context(), p, req, sh)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, s.object(c))
		return nil
	}
}

// create makes a container of p's workspace as req asks and starts it:
// the create routes' and the MCP create_container tool's.
func (s *Server) create(ctx context.Context, p Principal, req createRequest, sh shape) (Container, error) {
	sp, err := s.spec(p, req, sh)
	if err != nil {
		return Container{}, err
	}
	sp.CreatedAt = s.now()
	// Every named file must be the workspace's before anything is made.
	for i, id := range req.FileIDs {
		_, rc, err := s.openFile(ctx, p, id)
		if err != nil {
			return Container{}, fileErr(i, id, err)
		}
		rc.Close()
	}
	c, err := s.createRecord(ctx, p, sp)
	switch {
	case errors.Is(err, ErrQuota):
		return Container{}, err
	case errors.Is(err, ErrConflict):
		e := errorf(http.StatusConflict, "a container named %q already exists in this workspace (names are unique in a workspace: they address containers)", sp.Name)
		e.param = "name"
		return Container{}, e
	case err != nil:
		return Container{}, fmt.Errorf("create container record: %w", err)
	}
	if !sandbox.ValidName(c.ID) {
		return Container{}, fmt.Errorf("container store made id %q, which cannot name a sandbox", c.ID)
	}
	fail := func(what string, err error) (Container, error) {
		ctx := context.WithoutCancel(ctx)
		cleanup := errors.Join(s.cfg.Containers.Delete(ctx, p, c.ID), ignoreNotFound(s.mgr.Destroy(ctx, c.ID)))
		s.log.ErrorContext(ctx, what+" failed", "container", c.ID, "err", err, "cleanup", cleanup)
		return Container{}, err
	}
	// Start it now, so it answers "running" like a created container
	// should; the first exec call pays the new-container minimum.
	if err := s.mgr.Create(ctx, c.ID); err != nil {
		if qe, ok := isQuota(err); ok {
			return fail("starting a new container", qe)
		}
		return fail("starting a new container", errorf(http.StatusServiceUnavailable, "could not start the container: %v", err))
	}
	for i, id := range req.FileIDs {
		if err := s.copyFile(ctx, p, c.ID, id); err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				err = fileErr(i, id, err)
			}
			return fail("copying file_ids into a new container", err)
		}
	}
	s.stateMu.Lock()
	s.cold[c.ID] = true
	s.stateMu.Unlock()
	return c, nil
}

// createRecord records a new container of p's within the workspace's
// quota of containers that exist: over it, the quota's 403 (which also
// matches ErrQuota).
func (s *Server) createRecord(ctx context.Context, p Principal, sp ContainerSpec) (Container, error) {
	sp.MaxContainers = s.cfg.MaxContainers
	c, err := s.cfg.Containers.CreateSpec(ctx, p, sp)
	if errors.Is(err, ErrQuota) {
		return Container{}, quotaErr{containersQuota(s.cfg.MaxContainers), err}
	}
	return c, err
}

// quotaErr is a quota's answer that is also the backend's ErrQuota.
type quotaErr struct {
	*apiError
	cause error
}

func (e quotaErr) Unwrap() []error { return []error{e.apiError, e.cause} }

func (s *Server) openFile(ctx context.Context, p Principal, id string) (string, io.ReadCloser, error) {
	if s.cfg.WorkspaceFiles == nil {
		return "", nil, paramErr("file_ids", "this server keeps no workspace files, so file_ids cannot be used")
	}
	return s.cfg.WorkspaceFiles.OpenFile(ctx, p, id)
}

// copyFile copies workspace file id into the container's home under the
// base of its uploaded name (its id when that name is not usable).
func (s *Server) copyFile(ctx context.Context, p Principal, container, id string) error {
	name, rc, err := s.openFile(ctx, p, id)
	if err != nil {
		return err
	}
	defer rc.Close()
	base := path.Base(strings.ReplaceAll(name, "\\", "/"))
	if base == "." || base == ".." || base == "/" || strings.ContainsRune(base, 0) {
		base = id
	}
	if err := s.mgr.WriteFile(ctx, container, base, rc); err != nil {
		if errors.Is(err, sandbox.ErrDiskReserve) {
			return errorf(http.StatusInsufficientStorage, "copying file %s into the container: %v", id, err)
		}
		return err
	}
	return nil
}

func fileErr(i int, id string, err error) error {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return err
	case errors.Is(err, ErrNotFound):
		return paramErr("file_ids", "file_ids[%d]: no file %q in this workspace", i, id)
	}
	return fmt.Errorf("file_ids[%d] %s: %w", i, id, err)
}

func ignoreNotFound(err error) error {
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil
	}
	return err
}

func (s *Server) listContainers(sh shape) apiHandler {
	return func(w http.ResponseWriter, r *http.Request, p Principal) error {
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
				return paramErr("limit", "limit %q: want an integer from 1 to %d", v, maxListLimit)
			}
			opts.Limit = n
		}
		if v := q.Get("order"); v != "" {
			if v != "asc" && v != "desc" {
				return paramErr("order", "order %q: want asc or desc", v)
			}
			opts.Order = v
		}
		if opts.After != "" && !sandbox.ValidName(opts.After) {
			return paramErr("after", "after %q is not a container id", opts.After)
		}
		if opts.Name != "" && (sh == shapeOpenRouter && !sandbox.ValidName(opts.Name) || sh == shapeOpenAI && !displayName(opts.Name)) {
			return paramErr("name", "name %q is not a container name", opts.Name)
		}
		if idLike(opts.Name) {
			return idLikeName("name", opts.Name)
		}
		items, more, err := s.cfg.Containers.List(r.Context(), p, opts)
		switch {
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrNotFound):
			return paramErr("after", "after %q is not a container of this workspace", opts.After)
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
}

// getContainer answers an expired container too (status "expired").
func (s *Server) getContainer(w http.ResponseWriter, r *http.Request, p Principal) error {
	c, err := s.find(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.object(c))
	return nil
}

// sleepContainer puts the container to sleep now, waiting for a command
// running in it: where the runtime can (gVisor), its running state — the
// Python kernel's variables, processes the resident started, /tmp — is
// checkpointed beside its files and restored by the next call
// (sandbox/checkpoint.go). It answers the container, with the
// checkpoint's size. A container that never ran is asleep already.
func (s *Server) sleepContainer(w http.ResponseWriter, r *http.Request, p Principal) error {
	c, err := s.lookup(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := ignoreNotFound(s.mgr.Sleep(r.Context(), c.ID)); err != nil {
		if r.Context().Err() != nil {
			return errorf(http.StatusServiceUnavailable, "request ended while waiting for the container's command")
		}
		return fmt.Errorf("sleep container %s: %w", c.ID, err)
	}
	writeJSON(w, http.StatusOK, s.object(c))
	return nil
}

// deleteContainer removes the record (new calls answer 404 from then on),
// then destroys the sandbox, which cuts short the command running in it:
// the exec call in flight answers with what ran and a "deleted" error. An
// expired container can be deleted too.
func (s *Server) deleteContainer(w http.ResponseWriter, r *http.Request, p Principal) error {
	id, err := s.remove(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "container.deleted", "deleted": true})
	return nil
}

// remove deletes the container ref names (the delete routes' and the MCP
// delete_container tool's) and returns its id.
func (s *Server) remove(ctx context.Context, p Principal, ref string) (string, error) {
	c, err := s.find(ctx, p, ref)
	if err != nil {
		return "", err
	}
	s.stateMu.Lock()
	s.deleted[c.ID] = true
	delete(s.cold, c.ID)
	s.stateMu.Unlock()
	s.dropped.Add(1)
	ctx = context.WithoutCancel(ctx)
	err = s.cfg.Containers.Delete(ctx, p, c.ID)
	if errors.Is(err, ErrNotFound) {
		// A concurrent delete won.
		s.clearDeleted(c.ID)
		return "", notFound(ref)
	}
	if err != nil {
		s.clearDeleted(c.ID)
		return "", fmt.Errorf("delete container record %s: %w", c.ID, err)
	}
	derr := ignoreNotFound(s.mgr.Destroy(ctx, c.ID))
	s.clearDeleted(c.ID)
	if derr != nil {
		// The record is gone; the sandbox's home is left for the sweep
		// (or `shellgate sandbox rm`). Say so in the log, answer the delete.
		s.log.ErrorContext(ctx, "destroying a deleted container's sandbox failed", "container", c.ID, "err", derr)
	}
	return c.ID, nil
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
