package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/identity"
	"github.com/shellgate/shellgate/internal/mcp"
	"github.com/shellgate/shellgate/jsrun/jsrunhttp"
	"github.com/shellgate/shellgate/sandbox"
)

// maxMCPBody fits a write_file of mcp.MaxFileBytes in base64 in one
// JSON-RPC message.
const maxMCPBody = mcp.MaxFileBytes*4/3 + 1<<20

// mcpRoutes serves the MCP server (internal/mcp) at /mcp: POST carries
// JSON-RPC messages, GET the session's stream of server messages, DELETE
// ends a session. The key check, the workspace's limits and the body cap
// are every route's; the caller's workspace goes to the handler in the
// request's context.
func (s *Server) mcpRoutes() {
	h := mcp.NewHandler(mcp.Options{Logger: s.log, Version: "1", MaxBodyBytes: maxMCPBody, MaxSessions: s.cfg.MaxMCPSessions})
	s.mcp = h
	serve := func(w http.ResponseWriter, r *http.Request, p Principal) error {
		ws := mcpWorkspace{s: s, p: p, g: gatewaySandboxes{s: s, p: p, kind: "mcp"}, r: r}
		if s.cfg.Cluster != nil {
			ws.g.key = clientKey(r)
		}
		h.ServeHTTP(w, r.WithContext(mcp.WithWorkspace(r.Context(), ws)))
		return nil
	}
	s.handle("POST /mcp", maxMCPBody, true, serve)
	s.handle("GET /mcp", maxEmptyBody, true, serve)
	s.handle("DELETE /mcp", maxEmptyBody, true, serve)
}

// idleStream reports whether a route's requests are streams that wait,
// mostly idle, for as long as a client keeps them: a session's GET /mcp.
// They count against the workspace's rate, not its requests in flight (a
// workspace's MCP sessions are a quota of their own), so that open
// sessions do not starve its calls.
func idleStream(pattern string) bool { return pattern == "GET /mcp" }

// mcpWorkspace is mcp.Workspace for one principal: tool calls hold their
// container like the gateway's steps do (gatewaySandboxes: the call lock,
// the delete check, routing to the node that holds it), each billed as one
// usage event of kind "mcp" from its first command to its end; containers
// are made, listed and deleted as by the containers API.
type mcpWorkspace struct {
	s *Server
	p Principal
	g gatewaySandboxes
	r *http.Request // the HTTP request the MCP message came in (eval's caller)
}

var _ mcp.Workspace = mcpWorkspace{}

func (w mcpWorkspace) ID() string { return evalScope(w.p) }

func (w mcpWorkspace) Open(ctx context.Context, ref, session string) (mcp.Box, error) {
	sel := identity.Request{ContainerReference: ref}
	if ref == "" {
		if session == "" {
			// A sessionless connection has no container of its own: every
			// call would make a new one.
			return nil, &gateway.RequestError{Status: http.StatusBadRequest, Param: "container",
				Message: "this MCP connection has no session, so no container of its own: name one (create_container, list_containers)"}
		}
		sel.HeaderSessionID = session
	}
	sb, err := w.g.Open(ctx, sel, gateway.OpenOptions{})
	if err != nil {
		return nil, err
	}
	return mcpBox{sb.(*gatewayBox)}, nil
}

// mcpBox is a gatewayBox with a listing of the home.
type mcpBox struct{ *gatewayBox }

func (b mcpBox) ListFiles(ctx context.Context, after string, limit int) ([]mcp.File, bool, error) {
	var files []mcp.File
	var more bool
	err := b.hold(ctx, func(c Container) error {
		if _, ok := b.away(ctx, c.ID); ok {
			return errListAway
		}
		l, err := b.s.mgr.ListFiles(ctx, c.ID, sandbox.ListOptions{After: after, Limit: limit})
		if errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrDestroyed) {
			return nil // never started: no files yet
		}
		if _, ok := b.moved(ctx, c.ID, err); ok {
			return errListAway
		}
		if err != nil {
			return gatewayErr(err)
		}
		for _, f := range l.Files {
			files = append(files, mcp.File{Path: f.Path, Bytes: f.Size, ModifiedAt: f.ModTime.UTC()})
		}
		more = l.More
		return nil
	})
	return files, more, err
}

var errListAway = &gateway.RequestError{Status: http.StatusServiceUnavailable,
	Message: "the container is awake on another Shellgate node; list its files through the files API (GET /api/v1/containers/{id}/files) or when it sleeps there"}

func (w mcpWorkspace) container(c Container) mcp.Container {
	o := w.s.object(c)
	return mcp.Container{ID: c.ID, Name: c.Name, Status: o.Status, CreatedAt: c.CreatedAt.UTC(), ExpiresAt: c.LastUse().Add(w.s.allowance(c)).UTC()}
}

func (w mcpWorkspace) CreateContainer(ctx context.Context, name string) (mcp.Container, error) {
	req := createRequest{}
	if name != "" {
		req.Name = &name
	}
	c, err := w.s.create(ctx, w.p, req, shapeOpenRouter)
	if err != nil {
		return mcp.Container{}, err
	}
	return w.container(c), nil
}

func (w mcpWorkspace) ListContainers(ctx context.Context) ([]mcp.Container, error) {
	items, _, err := w.s.cfg.Containers.List(ctx, w.p, ListOptions{Limit: maxListLimit, Order: "desc"})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := make([]mcp.Container, 0, len(items))
	for _, c := range items {
		out = append(out, w.container(c))
	}
	return out, nil
}

func (w mcpWorkspace) DeleteContainer(ctx context.Context, ref string) (string, error) {
	return w.s.remove(ctx, w.p, ref)
}

// Eval runs req through the eval route's own handler on behalf of the
// request the MCP message came in: the continuation is bound to the
// caller's workspace and the built-ins act on its containers, billed as
// kind "eval".
func (w mcpWorkspace) Eval(ctx context.Context, req *jsrunhttp.Request) (*jsrunhttp.Response, error) {
	if w.s.evalHandler == nil {
		return nil, errors.New("eval is not enabled on this server")
	}
	r := w.r.WithContext(context.WithValue(ctx, principalKey{}, w.p))
	_, resp := jsrunhttp.EvalFor(r, w.s.evalHandler, req)
	return resp, nil
}
