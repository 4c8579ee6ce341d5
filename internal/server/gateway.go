package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/shellgate/shellgate/internal/cluster"
	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/identity"
	"github.com/shellgate/shellgate/internal/metering"
	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/egress"
)

// gatewaySandboxes is gateway.Sandboxes for one principal: the containers
// a gateway request runs its server-tool calls in are records of the
// caller's workspace, held call by call like exec calls, and billed once
// per request (kind "response") from its first command to its end.
type gatewaySandboxes struct {
	s  *Server
	p  Principal
	rp *forwardReq // the request, to forward (routing.go); nil: served here
	// key is the client's key headers, for a call run on another node
	// (remoteExec); nil without a cluster.
	key http.Header
	// kind is the usage kind the boxes bill as: "response" (a gateway
	// request) unless set ("mcp": an MCP tool call, mcp.go).
	kind string
}

var _ gateway.Sandboxes = gatewaySandboxes{}

// sandboxesFor is the gateway's view of p's containers.
func (s *Server) sandboxesFor(p Principal) gateway.Sandboxes { return gatewaySandboxes{s: s, p: p} }

// gatewayFor is sandboxesFor for one request of a gateway route: with
// replicas, a request whose container is awake on another node is
// forwarded there (gateway.Forward).
func (s *Server) gatewayFor(w http.ResponseWriter, r *http.Request, p Principal, rl *reqLog) gateway.Sandboxes {
	g := gatewaySandboxes{s: s, p: p, rp: s.replayable(w, r, rl)}
	if s.cfg.Cluster != nil {
		g.key = clientKey(r)
	}
	return g
}

func (g gatewaySandboxes) Open(ctx context.Context, sel identity.Request, opts gateway.OpenOptions) (gateway.Sandbox, error) {
	choice, err := identity.Choose(sel)
	if err != nil {
		return nil, gateway.BadRequest("container_reference", "%v", err)
	}
	s, p := g.s, g.p
	epoch := s.dropped.Load()
	create := func(name string) (Container, error) {
		sp, err := g.spec(name, opts)
		if err != nil {
			return Container{}, err
		}
		c, err := s.createRecord(ctx, p, sp)
		if err == nil {
			// Its first command pays the new-container minimum, even if a
			// file copied in started it first.
			s.stateMu.Lock()
			s.cold[c.ID] = true
			s.stateMu.Unlock()
		}
		return c, err
	}
	c, err := s.find(ctx, p, choice.Key)
	switch choice.Source {
	case identity.FromReference:
		switch {
		case hasStatus(err, http.StatusNotFound):
			return nil, &gateway.RequestError{Status: http.StatusNotFound, Param: "container_reference",
				Message: fmt.Sprintf("No container found with id %q in this workspace.", choice.Key)}
		case err == nil && c.Expired:
			return nil, &gateway.RequestError{Status: http.StatusGone, Param: "container_reference",
				Message: fmt.Sprintf("Container %q expired: its files were deleted %s after its last use; use a new container.", choice.Key, s.allowance(c))}
		}
	case identity.FromConversation:
		if hasStatus(err, http.StatusNotFound) || err == nil && c.Expired {
			// The conversation's container is gone: a new one.
			c, err = create("")
		}
	case identity.FromNew:
		c, err = create("")
	default: // a session: its container is named by the session key
		if err == nil && c.Expired {
			// A session outlives its container's files: it starts over in
			// a new container of the same name.
			if err = s.cfg.Containers.Delete(ctx, p, c.ID); err == nil || errors.Is(err, ErrNotFound) {
				if err = ignoreNotFound(s.mgr.Destroy(context.WithoutCancel(ctx), c.ID)); err == nil {
					err = notFound(choice.Key)
				}
			}
		}
		if hasStatus(err, http.StatusNotFound) {
			c, err = create(choice.Key)
			if errors.Is(err, ErrConflict) { // another request made it first
				c, err = s.find(ctx, p, choice.Key)
			}
		}
	}
	if err != nil {
		return nil, gatewayErr(fmt.Errorf("container for the request: %w", err))
	}
	if len(opts.NetworkPolicy) > 0 {
		// A container's network is fixed when it is made: asking an
		// existing one for another policy is a conflict, not a silent
		// change.
		want, err := g.spec("", opts)
		if err != nil {
			return nil, err
		}
		if !egress.Equal(policyOf(want.NetworkPolicy), policyOf(c.NetworkPolicy)) {
			return nil, &gateway.RequestError{Status: http.StatusConflict, Param: "network_policy",
				Message: fmt.Sprintf("container %q was created with another network_policy; a container's network is fixed when it is created: use a new container (another session) for this policy", c.ID)}
		}
	}
	// The record just read serves the request's first steps (see refresh);
	// this is the request's use of the container.
	now := s.now()
	s.touch(ctx, p, c, now)
	kind := g.kind
	if kind == "" {
		kind = "response"
	}
	return &gatewayBox{s: s, p: p, c: c, read: now, epoch: epoch, key: g.key, useID: store.NewID("use"), kind: kind}, nil
}

func hasStatus(err error, status int) bool {
	ae := (*apiError)(nil)
	return errors.As(err, &ae) && ae.status == status
}

// spec is the settings of a container a gateway request creates: the
// request's memory limit and network policy, validated like a create.
func (g gatewaySandboxes) spec(name string, opts gateway.OpenOptions) (ContainerSpec, error) {
	req := createRequest{}
	if name != "" {
		req.Name = &name
	}
	if opts.MemoryLimit != "" {
		req.MemoryLimit = &opts.MemoryLimit
	}
	if len(opts.NetworkPolicy) > 0 {
		var np networkPolicyRequest
		if err := json.Unmarshal(opts.NetworkPolicy, &np); err != nil {
			return ContainerSpec{}, gateway.BadRequest("network_policy", "network_policy: %v", err)
		}
		req.NetworkPolicy = &np
	}
	sp, err := g.s.spec(g.p, req, shapeOpenRouter)
	if ae := (*apiError)(nil); errors.As(err, &ae) {
		return sp, &gateway.RequestError{Status: ae.status, Param: ae.param, Message: ae.msg}
	}
	return sp, err
}

func (g gatewaySandboxes) StatFile(ctx context.Context, fileID string) (gateway.FileInfo, error) {
	notFound := &gateway.RequestError{Status: http.StatusNotFound, Param: "file_id", Message: fmt.Sprintf("No file found with id %q.", fileID)}
	if g.s.cfg.Files == nil || !store.ValidBlobID(fileID) {
		return gateway.FileInfo{}, notFound
	}
	f, err := g.s.cfg.Files.Get(ctx, scope(g.p), fileID)
	if errors.Is(err, store.ErrNotFound) {
		return gateway.FileInfo{}, notFound
	}
	if err != nil {
		return gateway.FileInfo{}, err
	}
	name := safeName(f.Name)
	if name == "" || name == "." || name == ".." {
		name = f.ID
	}
	return gateway.FileInfo{ID: f.ID, Name: name, Bytes: f.Bytes}, nil
}

// gatewayBox is one request's session on a container.
type gatewayBox struct {
	s *Server
	p Principal

	mu     sync.Mutex
	c      Container
	read   time.Time      // when c was read from the store (s.now())
	epoch  uint64         // s.dropped before that read
	first  time.Time      // the request's first command
	start  metering.Start // what the first command found
	closed bool
	key    http.Header // the client's key headers, for remoteExec
	// useID is the request's usage event: every attempt to write its bill
	// writes this one id, so a retried write cannot bill it twice.
	useID string
	kind  string // the usage kind Close bills as
	// billed is the cost Close billed (written or not).
	billed int64
	// known are files of the home whose current version (path and
	// modification time) is no news: written through the host by this
	// request (an upload, an editor call) or already reported. Files are
	// stamped by a clock that advances once a tick (fileClock), so one
	// written in the same tick just before a call would look written by it.
	known map[string]time.Time
	// elsewhere: a step of this request found the container awake on
	// another node (see away).
	elsewhere bool
}

var _ gateway.Sandbox = (*gatewayBox)(nil)

func (b *gatewayBox) ContainerID() string { return b.c.ID }

// ExpiresAt is when the container's files expire if it is not used again
// after now.
func (b *gatewayBox) ExpiresAt() time.Time {
	return b.s.now().Add(b.s.allowance(b.c)).UTC().Truncate(time.Second)
}

// hold runs f on the container as an exec call holds it (see evalBox.hold).
func (b *gatewayBox) hold(ctx context.Context, f func(Container) error) error {
	s := b.s
	if !s.beginCall() {
		return &gateway.RequestError{Status: http.StatusServiceUnavailable, Message: "the server is shutting down"}
	}
	defer s.execs.Done()
	s.metrics.inflight.Inc()
	defer s.metrics.inflight.Dec()
	release, ok := s.calls.acquire(ctx, b.c.ID, s.cfg.CallWait)
	if !ok {
		if err := ctx.Err(); err != nil {
			return err
		}
		return &gateway.RequestError{Status: http.StatusTooManyRequests,
			Message: fmt.Sprintf("the container is running another call; calls on one container run one at a time and this one waited %s", s.cfg.CallWait)}
	}
	defer release()
	if !s.beginActive(b.c.ID) {
		return errGatewayGone
	}
	defer s.endActive(b.c.ID)
	if err := b.refresh(ctx); err != nil {
		return err
	}
	return f(b.c)
}

// recordTTL is how long a request trusts the container record it read
// while this process deleted and expired nothing: steps follow each
// other within milliseconds, and re-reading the record before each
// (≈ 0.2 ms of SQLite) was most of the server's cost of a step. A delete
// or expiry by this process is seen at the next step; one by another
// process sharing the database within recordTTL.
const recordTTL = time.Second

// refresh re-reads the container's record (noticing a delete or an
// expiry, recording the use) unless it was read less than recordTTL ago
// and this process has dropped no record since.
func (b *gatewayBox) refresh(ctx context.Context) error {
	s, now := b.s, b.s.now()
	epoch := s.dropped.Load()
	if !b.read.IsZero() && epoch == b.epoch && now.Sub(b.read) < recordTTL && now.Sub(b.read) >= 0 {
		return nil
	}
	c, err := s.lookup(ctx, b.p, b.c.ID)
	switch {
	case hasStatus(err, http.StatusNotFound):
		return errGatewayGone
	case hasStatus(err, http.StatusGone):
		return &gateway.RequestError{Status: http.StatusGone, Message: "the container expired"}
	case err != nil:
		return err
	}
	b.c, b.read, b.epoch = c, now, epoch
	return nil
}

var errGatewayGone = &gateway.RequestError{Status: http.StatusNotFound, Message: "the container was deleted"}

func gatewayErr(err error) error {
	switch {
	case errors.Is(err, errDeleted), errors.Is(err, sandbox.ErrDestroyed):
		return errGatewayGone
	case errors.Is(err, sandbox.ErrBusy):
		return &gateway.RequestError{Status: http.StatusTooManyRequests, Message: "the container is awake in another Shellgate process; try again when that call ends"}
	case errors.Is(err, tool.ErrInvalid):
		return &gateway.RequestError{Status: http.StatusBadRequest, Message: err.Error()}
	case errors.Is(err, sandbox.ErrNotSupported):
		return &gateway.RequestError{Status: http.StatusNotImplemented, Message: err.Error()}
	}
	if ae := (*apiError)(nil); errors.As(err, &ae) && ae.status < 500 {
		return &gateway.RequestError{Status: ae.status, Param: ae.param, Message: ae.msg, Code: ae.code}
	}
	return err
}

func (b *gatewayBox) Exec(ctx context.Context, p tool.Plan, onOutput func(cmd, stream int, text string)) (gateway.ExecResult, error) {
	var res gateway.ExecResult
	err := b.hold(ctx, func(c Container) error {
		run := &gatewayCall{call: call{s: b.s, id: c.ID, maxChars: p.MaxOutputLength}, box: b, onOutput: onOutput}
		// A file written by the call has a modification time not before
		// this (fileClock: the kernel's own clock for it; a command may set
		// an older one with touch -d: then it is not reported, which is all
		// that costs).
		since := fileClock()
		b.mu.Lock()
		unbilled := b.first.IsZero()
		b.mu.Unlock()
		var err error
		if rf, ok := b.away(ctx, c.ID); ok {
			res.Outputs, res.Changed, err = b.remoteExec(ctx, rf, p, onOutput)
			return err
		}
		res.Outputs, err = tool.RunShell(ctx, run, c.ID, p)
		if rf, ok := b.moved(ctx, c.ID, err); ok && len(res.Outputs) == 0 {
			// The container woke on another node after this request was
			// routed: the call runs there, through its exec API, and is
			// billed there.
			if unbilled {
				b.mu.Lock()
				b.first = time.Time{}
				b.mu.Unlock()
			}
			res.Outputs, res.Changed, err = b.remoteExec(ctx, rf, p, onOutput)
			return err
		}
		// The home is listed only when its watch saw a change: a command
		// that wrote nothing costs no walk of the home. Each command's own
		// call drained the watch after it (sandbox.Command.CheckHome), so
		// the OR of their answers is what one check at the end would say;
		// a backend without a watch, or a command that failed, says
		// "changed".
		if len(res.Outputs) > 0 && run.homeChanged {
			res.Changed = b.changed(context.WithoutCancel(ctx), c.ID, since)
		}
		return gatewayErr(err)
	})
	return res, err
}

// Python runs c on the container's kernel. A container awake on another
// node is not reached: its kernel lives there, and the exec API that
// carries shell calls between nodes does not carry Python calls.
func (b *gatewayBox) Python(ctx context.Context, c tool.PythonCall, onOutput func(stream int, text string)) (gateway.PythonResult, error) {
	var res gateway.PythonResult
	err := b.hold(ctx, func(ct Container) error {
		if _, ok := b.away(ctx, ct.ID); ok {
			return errPythonAway
		}
		label := "python: " + c.Code
		if c.Resume != nil {
			label = "python: resumed with a client tool's result"
		}
		run := &gatewayCall{call: call{s: b.s, id: ct.ID, maxChars: c.MaxOutputLength}, box: b, label: label}
		since := fileClock()
		out, err := tool.RunPython(ctx, run, ct.ID, c, &b.s.kernels, onOutput)
		if _, ok := b.moved(ctx, ct.ID, err); ok {
			return errPythonAway
		}
		if err != nil {
			return gatewayErr(err)
		}
		res.Output = out
		if run.homeChanged {
			res.Changed = b.changed(context.WithoutCancel(ctx), ct.ID, since)
		}
		return nil
	})
	return res, err
}

var errPythonAway = &gateway.RequestError{Status: http.StatusServiceUnavailable,
	Message: "the container is awake on another Shellgate node; Python calls run only on the node where it is awake: try again when it sleeps there"}

// moved reports where container id is when a local step on it met
// sandbox.ErrBusy because it woke on another live node after this request
// was routed: the step is sent there (remoteExec, remoteFiles).
func (b *gatewayBox) moved(ctx context.Context, id string, err error) (remoteFiles, bool) {
	if !errors.Is(err, sandbox.ErrBusy) || b.key == nil {
		return remoteFiles{}, false
	}
	return b.route(ctx, id)
}

// away is moved before the step: once a step of this request found the
// container on another node, the next ones read its location first (one
// indexed read) instead of meeting the claim again (a failed claim costs
// more), and go there while it is there.
func (b *gatewayBox) away(ctx context.Context, id string) (remoteFiles, bool) {
	b.mu.Lock()
	elsewhere := b.elsewhere
	b.mu.Unlock()
	if !elsewhere {
		return remoteFiles{}, false
	}
	return b.route(ctx, id)
}

func (b *gatewayBox) route(ctx context.Context, id string) (remoteFiles, bool) {
	rt, err := b.s.cfg.Cluster.Route(ctx, id)
	proxy := err == nil && rt.Where == cluster.Proxy
	b.mu.Lock()
	b.elsewhere = proxy
	b.mu.Unlock()
	if !proxy {
		return remoteFiles{}, false
	}
	return remoteFiles{from: b.s.cfg.Cluster.ID(), proxied: b.s.metrics.proxied, key: b.key, rt: rt, id: id}, true
}

// remoteExec runs p on the node rf names, and lists the files the call
// changed there: the owner's listing before and after it, compared
// (changedSince). A listing that fails costs the report, not the call.
func (b *gatewayBox) remoteExec(ctx context.Context, rf remoteFiles, p tool.Plan, onOutput func(cmd, stream int, text string)) ([]tool.CommandOutput, []gateway.ChangedFile, error) {
	before, lerr := rf.list(ctx)
	outs, err := b.s.remoteExec(ctx, b.key, rf.rt, rf.id, p, onOutput)
	if err != nil || len(outs) == 0 {
		return outs, nil, err
	}
	var after map[string]remoteEntry
	if lerr == nil {
		after, lerr = rf.list(context.WithoutCancel(ctx))
	}
	if lerr != nil {
		if !errors.Is(lerr, sandbox.ErrNotSupported) {
			b.s.log.WarnContext(ctx, "listing the files a call changed on the container's node failed", "container", rf.id, "node", rf.rt.Node, "err", lerr)
		}
		return outs, nil, nil
	}
	return outs, changedSince(before, after), nil
}

// maxChanged is how many changed files a result lists.
const maxChanged = 10

// changed lists the regular files of the home modified at or after t and
// not known at that version (gatewayBox.known), newest
// first, at most maxChanged, looking at the first sandbox.MaxListLimit
// files of the home (a home with more is reported incompletely rather
// than walked whole after every call).
func (b *gatewayBox) changed(ctx context.Context, id string, t time.Time) []gateway.ChangedFile {
	l, err := b.s.mgr.ListFiles(ctx, id, sandbox.ListOptions{})
	if errors.Is(err, sandbox.ErrNotSupported) {
		return nil // a backend without file operations reports no changed files
	}
	if err != nil {
		b.s.log.WarnContext(ctx, "listing the files a call changed failed", "container", id, "err", err)
		return nil
	}
	var out []gateway.ChangedFile
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range l.Files {
		if m, ok := b.known[f.Path]; !f.ModTime.Before(t) && !(ok && m.Equal(f.ModTime)) {
			out = append(out, gateway.ChangedFile{ID: CFileID(f.Path), Path: f.Path, Bytes: f.Size, ModTime: f.ModTime})
		}
	}
	slices.SortFunc(out, func(x, y gateway.ChangedFile) int { return y.ModTime.Compare(x.ModTime) })
	if len(out) > maxChanged {
		out = out[:maxChanged]
	}
	for _, f := range out {
		b.know(f.Path, f.ModTime)
	}
	return out
}

// gatewayCall is the exec route's executor, plus the request's billing
// start and output streaming.
type gatewayCall struct {
	call
	box      *gatewayBox
	onOutput func(cmd, stream int, text string)
	// label names the call in request logs instead of its command (a
	// Python call's client carries the driver's script).
	label string
	n     int
	// homeChanged: some command's result did not say its home was
	// unchanged (sandbox.Result.HomeUnchanged).
	homeChanged bool
}

func (c *gatewayCall) Exec(ctx context.Context, name string, cmd sandbox.Command) (sandbox.Result, error) {
	b := c.box
	b.mu.Lock()
	if b.first.IsZero() {
		b.start = b.s.startState(name)
		b.first = time.Now()
	}
	b.mu.Unlock()
	if c.onOutput != nil {
		idx := c.n
		cmd.OnOutput = utf8Output(cmd.MaxBytes, func(stream int, text string) { c.onOutput(idx, stream, text) })
	}
	c.n++
	if rl := reqLogFrom(ctx); rl != nil && !cmd.Resident {
		label := cmd.Command
		if c.label != "" {
			label = c.label
		}
		start := time.Now()
		defer func() { rl.timed(label, time.Since(start)) }()
	}
	cmd.CheckHome = true
	res, err := c.call.Exec(ctx, name, cmd)
	if !res.HomeUnchanged {
		c.homeChanged = true
	}
	return res, err
}

func (b *gatewayBox) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	var data []byte
	err := b.hold(ctx, func(c Container) error {
		var err error
		rf, remote := b.away(ctx, c.ID)
		if !remote {
			data, err = b.s.mgr.ReadFile(ctx, c.ID, path, maxBytes)
			rf, remote = b.moved(ctx, c.ID, err)
		}
		if remote {
			rel, perr := sandbox.HomeRelPath(path)
			if perr != nil {
				return perr
			}
			data, err = rf.readFile(ctx, rel, maxBytes)
		}
		return gatewayErr(err)
	})
	return data, err
}

func (b *gatewayBox) WriteFile(ctx context.Context, path string, r io.Reader) error {
	return b.hold(ctx, func(c Container) error {
		var err error
		rf, remote := b.away(ctx, c.ID)
		if !remote {
			err = b.writeHere(ctx, c.ID, path, func() error { return b.s.mgr.WriteFile(ctx, c.ID, path, r) })
			rf, remote = b.moved(ctx, c.ID, err)
		}
		if remote {
			// Refused before reading r: the owner gets all of it.
			rel, perr := sandbox.HomeRelPath(path)
			if perr != nil {
				return perr
			}
			err = rf.writeFile(ctx, rel, r)
		}
		return gatewayErr(err)
	})
}

// writeHere runs write, which writes the file rel into the home of
// container id on this node. A new container has no home until it first
// starts: it is started and write runs again. The file written is
// recorded as known.
func (b *gatewayBox) writeHere(ctx context.Context, id, rel string, write func() error) error {
	err := write()
	if errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrDestroyed) {
		if err = b.s.mgr.Create(ctx, id); err == nil {
			err = write()
		}
	}
	if err == nil {
		b.wrote(ctx, id, rel)
	}
	return err
}

// wrote records the file at rel, just written through the host, as known
// (a failed stat leaves it reportable, which is all that costs).
func (b *gatewayBox) wrote(ctx context.Context, id, rel string) {
	fi, err := b.s.mgr.StatFile(ctx, id, rel)
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.know(fi.Path, fi.ModTime)
}

// know records path's version as known; b.mu is held.
func (b *gatewayBox) know(path string, mtime time.Time) {
	if b.known == nil {
		b.known = map[string]time.Time{}
	}
	b.known[path] = mtime
}

func (b *gatewayBox) CopyIn(ctx context.Context, fileID, dir string) (string, error) {
	fi, err := gatewaySandboxes{s: b.s, p: b.p}.StatFile(ctx, fileID)
	if err != nil {
		return "", err
	}
	rel := path.Join(dir, fi.Name)
	err = b.hold(ctx, func(c Container) error {
		var err error
		rf, remote := b.away(ctx, c.ID)
		if !remote {
			err = b.writeHere(ctx, c.ID, rel, func() error {
				_, err := b.s.CopyWorkspaceFileIn(ctx, b.p, c.ID, fileID, rel)
				return err
			})
			rf, remote = b.moved(ctx, c.ID, err)
		}
		if remote {
			clean, perr := sandbox.HomeRelPath(rel)
			if perr != nil {
				return perr
			}
			return gatewayErr(rf.copyIn(ctx, fileID, clean))
		}
		if errors.Is(err, store.ErrNotFound) {
			return &gateway.RequestError{Status: http.StatusNotFound, Param: "file_id", Message: fmt.Sprintf("No file found with id %q.", fileID)}
		}
		return gatewayErr(err)
	})
	return rel, err
}

func (b *gatewayBox) Promote(ctx context.Context, rel string) (string, error) {
	var id string
	err := b.hold(ctx, func(c Container) error {
		var err error
		rf, remote := b.away(ctx, c.ID)
		if !remote {
			var f store.File
			f, err = b.s.PromoteContainerFile(ctx, b.p, c.ID, rel)
			id = f.ID
			rf, remote = b.moved(ctx, c.ID, err)
		}
		if remote {
			clean, perr := sandbox.HomeRelPath(rel)
			if perr != nil {
				return perr
			}
			id, err = rf.promote(ctx, clean)
		}
		if errors.Is(err, store.ErrTooLarge) && !errors.Is(err, sandbox.ErrTooLarge) {
			return fmt.Errorf("%w: %v", sandbox.ErrTooLarge, err)
		}
		return gatewayErr(err)
	})
	return id, err
}

func (b *gatewayBox) Cost() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.first.IsZero() {
		return 0
	}
	if b.closed {
		return b.billed
	}
	return metering.Charge(b.first, time.Now(), b.start).CostMicroUSD
}

// Close bills the request, from its first command to now, to the ledger,
// before the request is answered (the loop closes the session before
// Execute returns). The write is tried billTries times, always as the
// request's one usage event (useID); when none succeeds the error is a
// 503 *gateway.RequestError: the frontends answer it in their API's error
// envelope (or end the stream with their error event) instead of the
// completion, so no request is answered complete without its bill.
func (b *gatewayBox) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.first.IsZero() {
		b.closed = true
		return nil
	}
	b.closed = true
	now := time.Now()
	bill := metering.Charge(b.first, now, b.start)
	b.billed = bill.CostMicroUSD
	ctx := context.Background()
	var err error
	for i := range billTries {
		if i > 0 {
			time.Sleep(billBackoff << (i - 1))
		}
		if err = b.s.writeBill(ctx, b.p, b.useID, b.c.ID, now, b.kind, bill); err == nil {
			break
		}
	}
	b.s.touch(ctx, b.p, b.c, b.s.now())
	if err != nil {
		return fmt.Errorf("%w (usage %s, container %s): %w", errGatewayUnbilled, b.useID, b.c.ID, err)
	}
	return nil
}

// billTries bounds the attempts at writing a gateway request's bill
// (each one retried by the store itself after a lost connection), and
// billBackoff is the wait before the second (doubling after it): about
// 0.3 s for a database to come back before the request fails.
const (
	billTries   = 3
	billBackoff = 100 * time.Millisecond
)

// errGatewayUnbilled answers a gateway request whose commands ran but
// whose bill the ledger did not take.
var errGatewayUnbilled = &gateway.RequestError{Status: http.StatusServiceUnavailable,
	Message: "The commands of this request ran, but their usage could not be recorded (the database is unavailable), so the request is not billed and its answer is withheld; try again."}

// utf8Output adapts the agent's output callback to text: at most maxBytes
// per stream, and never a UTF-8 character split across two calls.
func utf8Output(maxBytes int, emit func(stream int, text string)) agent.OutputFunc {
	var sent [2]int
	var carry [2][]byte
	return func(stream byte, data []byte) {
		k := 0
		if stream == agent.Stderr {
			k = 1
		}
		room := maxBytes - sent[k]
		if room <= 0 {
			return
		}
		if len(data) > room {
			data = data[:room]
		}
		sent[k] += len(data)
		b := append(carry[k], data...)
		carry[k] = nil
		if cut := incompleteTail(b); cut > 0 && sent[k] < maxBytes {
			carry[k] = append([]byte(nil), b[len(b)-cut:]...)
			b = b[:len(b)-cut]
		}
		if len(b) > 0 {
			emit(k+1, string(b))
		}
	}
}
