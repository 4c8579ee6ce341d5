package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/jsrun"
	"github.com/shellgate/shellgate/jsrun/jsrunhttp"
	"github.com/shellgate/shellgate/sandbox"
)

// maxEvalBody is jsrunhttp's own cap (40 MiB: a resume of the largest
// continuation, 32 MiB, with its source, modules and resolutions). The
// handler holds each field besides to the most a legal request has there,
// so an oversized source is refused once its 256 KiB have arrived.
const maxEvalBody = jsrunhttp.DefaultMaxBodyBytes

// Error codes the sandbox built-ins give the guest besides jsrunhttp's
// (a guest sees them as error.code; the run goes on).
const (
	codeContainerBusy = "EVAL_CONTAINER_BUSY"
	codeUnavailable   = "EVAL_UNAVAILABLE"
)

// evalScope is what a continuation is bound to: the principal's account and
// workspace, each quoted so that no two principals give the same text. A
// token made for one workspace does not verify for another.
func evalScope(p Principal) string {
	return strconv.Quote(p.Account) + "/" + strconv.Quote(p.Workspace)
}

// principalOf is the caller the eval route put in the request's context.
func principalOf(r *http.Request) (Principal, bool) {
	if r == nil {
		return Principal{}, false
	}
	p, ok := r.Context().Value(principalKey{}).(Principal)
	return p, ok
}

func (s *Server) newEvalHandler() http.Handler {
	return jsrunhttp.NewHandler(jsrunhttp.Config{
		Runner:    s.cfg.EvalRunner,
		Sandboxes: s.evalSandbox,
		Scope: func(r *http.Request) string {
			p, _ := principalOf(r) // always set: the route authenticates first
			return evalScope(p)
		},
		MaxBodyBytes: maxEvalBody,
		Logger:       s.log,
	})
}

// eval serves POST /api/v1/eval: jsrunhttp's handler (its wire format and
// error envelope, docs/jsrun.md) with the key's principal as the
// continuation's scope and its containers as the built-ins' sandboxes.
func (s *Server) eval(w http.ResponseWriter, r *http.Request, p Principal) error {
	if s.evalHandler == nil {
		return errorf(http.StatusNotFound, "eval is not enabled on this server")
	}
	if s.routeEval(w, r, p) {
		return nil
	}
	s.evalHandler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	return nil
}

// evalSandbox resolves request.sandbox.container_id exactly as the
// containers routes resolve {id}: an id or a name of the caller's
// workspace; another workspace's container is not found.
func (s *Server) evalSandbox(ctx context.Context, r *http.Request, ref string) (jsrunhttp.Sandbox, error) {
	p, ok := principalOf(r)
	if !ok {
		return nil, fmt.Errorf("%w: no caller", jsrunhttp.ErrSandboxNotFound)
	}
	c, err := s.lookup(ctx, p, ref)
	if err != nil {
		if ae := (*apiError)(nil); errors.As(err, &ae) && ae.status == http.StatusNotFound {
			return nil, fmt.Errorf("%w: no container %q", jsrunhttp.ErrSandboxNotFound, ref)
		}
		if ae := (*apiError)(nil); errors.As(err, &ae) && ae.status == http.StatusGone {
			return nil, fmt.Errorf("%w: %s", jsrunhttp.ErrSandboxNotFound, ae.msg)
		}
		return nil, err
	}
	return &evalBox{s: s, p: p, id: c.ID}, nil
}

// evalBox is one container as the eval built-ins see it. Each built-in call
// holds the container like an exec call does; sandbox.exec runs its
// commands through internal/tool with the exec route's executor and is
// billed to the same ledger (kind "eval"). Reading and writing files use no
// sandbox time and are not billed.
type evalBox struct {
	s  *Server
	p  Principal
	id string // the container's id, its sandbox's name
}

var _ jsrunhttp.Sandbox = (*evalBox)(nil)

var errEvalGone = jsrun.NewUserError(jsrunhttp.CodeSandboxNotFound, "the container was deleted")

// hold runs f on the container the way an exec call holds it: refused once
// the server is stopping, one call at a time per container (waiting at
// most CallWait), never after a delete, with the record looked up again.
func (b *evalBox) hold(ctx context.Context, f func(Container) error) error {
	s := b.s
	if !s.beginCall() {
		return jsrun.NewUserError(codeUnavailable, "the server is shutting down")
	}
	defer s.execs.Done()
	s.metrics.inflight.Inc()
	defer s.metrics.inflight.Dec()
	release, ok := s.calls.acquire(ctx, b.id, s.cfg.CallWait)
	if !ok {
		if err := ctx.Err(); err != nil {
			return err
		}
		return jsrun.NewUserError(codeContainerBusy, fmt.Sprintf("the container is running another call; calls on one container run one at a time and this one waited %s", s.cfg.CallWait))
	}
	defer release()
	if !s.beginActive(b.id) {
		return errEvalGone
	}
	defer s.endActive(b.id)
	c, err := s.lookup(ctx, b.p, b.id)
	if err != nil {
		if ae := (*apiError)(nil); errors.As(err, &ae) && ae.status == http.StatusGone {
			return jsrun.NewUserError(jsrunhttp.CodeSandboxNotFound, ae.msg)
		}
		if ae := (*apiError)(nil); errors.As(err, &ae) && ae.status == http.StatusNotFound {
			return errEvalGone
		}
		return err
	}
	return f(c)
}

// sandboxErr turns what the manager says about a container into what the
// guest may see.
func sandboxErr(err error) error {
	switch {
	case errors.Is(err, errDeleted), errors.Is(err, sandbox.ErrDestroyed):
		return errEvalGone
	case errors.Is(err, sandbox.ErrBusy):
		return jsrun.NewUserError(codeContainerBusy, "the container is awake in another Shellgate process; try again when that call ends")
	case errors.Is(err, tool.ErrInvalid):
		return jsrun.NewUserError("EVAL_BAD_ARGUMENT", err.Error())
	}
	if qe, ok := isQuota(err); ok {
		return jsrun.NewUserError("EVAL_QUOTA_EXCEEDED", qe.msg)
	}
	return err
}

func (b *evalBox) Exec(ctx context.Context, commands []string, timeoutMs, maxOutput int) ([]jsrunhttp.CommandResult, error) {
	var res []jsrunhttp.CommandResult
	err := b.hold(ctx, func(c Container) error {
		start := b.s.startState(c.ID)
		run := &call{s: b.s, id: c.ID}
		var err error
		res, err = tool.EvalSandbox{Manager: b.s.mgr, Name: c.ID, Executor: run}.Exec(ctx, commands, timeoutMs, maxOutput)
		// As for an exec call, the charge is written before the guest
		// sees the result: an unbilled result is an error.
		_, recErr := b.s.settleNow(ctx, b.p, c, run.firstAt(), start, "eval")
		if errors.Is(err, sandbox.ErrNotFound) {
			return errEvalGone
		}
		if err == nil && recErr != nil {
			res = nil
			return jsrun.NewUserError(codeUnavailable, "the commands ran, but their usage could not be recorded (the database is unavailable); try again")
		}
		return sandboxErr(err)
	})
	return res, err
}

func (b *evalBox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var data []byte
	err := b.hold(ctx, func(c Container) error {
		var err error
		data, err = tool.EvalSandbox{Manager: b.s.mgr, Name: c.ID}.ReadFile(ctx, path)
		return sandboxErr(err)
	})
	return data, err
}

func (b *evalBox) WriteFile(ctx context.Context, path string, data []byte) error {
	return b.hold(ctx, func(c Container) error {
		return sandboxErr(tool.EvalSandbox{Manager: b.s.mgr, Name: c.ID}.WriteFile(ctx, path, data))
	})
}
