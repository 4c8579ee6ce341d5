package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/shellgate/shellgate/internal/metering"
	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent"
)

// execRequest is the body of POST /api/v1/containers/{id}/exec: the shell
// tool's arguments (validated and clamped by internal/tool, as `shellgate
// exec` does) and whether to stream.
type execRequest struct {
	Commands        []string `json:"commands"`
	TimeoutMs       *int64   `json:"timeout_ms"`
	MaxOutputLength *int64   `json:"max_output_length"`
	Stream          bool     `json:"stream"`
}

type execResponse struct {
	ContainerID string               `json:"container_id"`
	Output      []tool.CommandOutput `json:"output"`
	Usage       usage                `json:"usage"`
}

// usage is what the call cost (SPEC §5, internal/metering): integer
// micro-dollars, and the same as a decimal number of dollars.
type usage struct {
	CostUSD      json.Number `json:"cost_usd"`
	CostMicroUSD int64       `json:"cost_micro_usd"`
	MeteredMs    int64       `json:"metered_ms"`
	BilledMs     int64       `json:"billed_ms"`
	// ContainerStart is what the call found: "warm", "new" (its create
	// started it) or "woken" (it was sleeping); new and woken pay at least
	// 30 s.
	ContainerStart string `json:"container_start"`
}

func usageOf(b metering.Bill) usage {
	return usage{CostUSD: json.Number(metering.USD(b.CostMicroUSD)), CostMicroUSD: b.CostMicroUSD,
		MeteredMs: b.MeteredMillis, BilledMs: b.BilledMillis, ContainerStart: b.Start.String()}
}

// exec runs a shell call in a container. Checks that can fail (the id,
// the body, the call lock) come before anything is streamed, so they
// answer with a status and the JSON error envelope in both modes.
func (s *Server) exec(w http.ResponseWriter, r *http.Request, p Principal) error {
	ref := r.PathValue("id")
	c, err := s.lookup(r.Context(), p, ref)
	if err != nil {
		return err
	}
	var req execRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	plan, err := tool.ShellArgs{Commands: req.Commands, TimeoutMs: req.TimeoutMs, MaxOutputLength: req.MaxOutputLength}.Plan()
	if err != nil {
		return errorf(http.StatusBadRequest, "%v", err)
	}
	if !s.beginCall() {
		return errorf(http.StatusServiceUnavailable, "the server is shutting down")
	}
	defer s.execs.Done()
	s.metrics.inflight.Inc()
	defer s.metrics.inflight.Dec()

	release, ok := s.calls.acquire(r.Context(), c.ID, s.cfg.CallWait)
	if !ok {
		if r.Context().Err() != nil {
			return errorf(http.StatusServiceUnavailable, "request ended while waiting for the container")
		}
		return errorf(http.StatusConflict, "container %q is running another call; calls on one container run one at a time and this one waited %s", ref, s.cfg.CallWait)
	}
	// The ledger write runs before the answer: a call whose bill the
	// ledger did not take is not answered 200 (settleNow).
	defer release()
	// Under the call lock: make sure the container was not deleted while
	// this call waited, and mark it busy for a delete that comes now.
	if !s.beginActive(c.ID) {
		return notFound(ref)
	}
	defer s.endActive(c.ID)
	if c, err = s.lookup(r.Context(), p, c.ID); err != nil {
		return err
	}

	start := s.startState(c.ID)
	run := &call{s: s, id: c.ID, maxChars: plan.MaxOutputLength}
	if !req.Stream {
		outs, runErr := tool.RunShell(r.Context(), run, c.ID, plan)
		bill, recErr := s.settleNow(r.Context(), p, c, run.firstAt(), start, "exec")
		if runErr == nil {
			runErr = recErr
		}
		if runErr != nil {
			return s.callError(r, c.ID, ref, runErr, outs, bill)
		}
		writeJSON(w, http.StatusOK, execResponse{ContainerID: c.ID, Output: outs, Usage: usageOf(bill)})
		return nil
	}
	return s.stream(w, r, p, c, ref, plan, run, start)
}

// endActive ends a call's hold on a container; when the container was
// deleted meanwhile, it destroys whatever the call started after the
// delete's own destroy.
// beginActive marks container id busy for a delete that comes while a call
// runs on it (the caller holds its call lock), unless it was deleted while
// the call waited: then it reports false and the call must not run.
func (s *Server) beginActive(id string) bool {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.deleted[id] {
		return false
	}
	s.active[id] = true
	return true
}

func (s *Server) endActive(id string) {
	s.stateMu.Lock()
	gone := s.deleted[id]
	delete(s.active, id)
	delete(s.deleted, id)
	s.stateMu.Unlock()
	if gone {
		if err := ignoreNotFound(s.mgr.Destroy(context.Background(), id)); err != nil {
			s.log.Error("destroying a deleted container after its last call failed", "container", id, "err", err)
		}
	}
}

// startState is what the call finds its container as, for billing: "new"
// when a create started it and no call has been billed since, else warm
// when it is awake and woken when it is not.
func (s *Server) startState(id string) metering.Start {
	s.stateMu.Lock()
	cold := s.cold[id]
	delete(s.cold, id)
	s.stateMu.Unlock()
	if cold {
		return metering.New
	}
	st, err := s.mgr.Status(id)
	switch {
	case err == nil && st == sandbox.Running:
		return metering.Warm
	case errors.Is(err, sandbox.ErrNotFound) && s.cfg.Cluster == nil:
		return metering.New
	}
	// With a cluster, a container with no home here has its home on
	// another node or in the archive: it is woken, not new.
	return metering.Woken
}

// settleNow bills the call from its first command to now and writes the
// bill to the ledger and the container's last use, before the answer: a
// call whose bill could not be written is answered with errUnbilled (the
// commands ran), never 200 unbilled.
func (s *Server) settleNow(ctx context.Context, p Principal, c Container, first time.Time, start metering.Start, kind string) (metering.Bill, error) {
	now := time.Now()
	bill := metering.Charge(first, now, start)
	if first.IsZero() {
		return bill, nil
	}
	return bill, s.record(context.WithoutCancel(ctx), p, "", c, now, kind, bill)
}

// errUnbilled is a call whose commands ran but whose bill the ledger did
// not take (the database is unreachable).
var errUnbilled = errors.New("the usage ledger is unavailable")

// record writes a call's bill (kind "exec", "eval" or "response") to the
// ledger as usage event useID ("": a new one) and the container's last use
// (on the server's clock). A failed ledger write is logged and returned
// (errUnbilled).
func (s *Server) record(ctx context.Context, p Principal, useID string, c Container, now time.Time, kind string, bill metering.Bill) error {
	err := s.writeBill(ctx, p, useID, c.ID, now, kind, bill)
	s.touch(ctx, p, c, s.now())
	return err
}

// writeBill is record's ledger write alone.
func (s *Server) writeBill(ctx context.Context, p Principal, useID, id string, now time.Time, kind string, bill metering.Bill) error {
	if s.cfg.Ledger == nil {
		return nil
	}
	err := s.cfg.Ledger.Record(ctx, p, useID, id, now, kind, bill)
	if err != nil {
		s.log.ErrorContext(ctx, "recording usage failed", "container", id, "kind", kind, "cost_micro_usd", bill.CostMicroUSD, "err", err)
		err = fmt.Errorf("%w: %v", errUnbilled, err)
	}
	return err
}

// callError turns a call that stopped early into an answer that reports
// the commands that did run (error.metadata.output) and the bill.
func (s *Server) callError(r *http.Request, id, ref string, err error, outs []tool.CommandOutput, bill metering.Bill) error {
	ae, quota := isQuota(err)
	switch {
	case quota:
		// The awake quota refused to wake the container.
	case errors.Is(err, errDeleted), errors.Is(err, sandbox.ErrNotFound):
		ae = errorf(http.StatusNotFound, "container %q was deleted during this call; %d of its commands ran", ref, len(outs))
	case errors.Is(err, sandbox.ErrBusy):
		ae = errorf(http.StatusConflict, "container %q is awake in another Shellgate process; try again when that call ends", ref)
	case s.isStopping() && (errors.Is(err, sandbox.ErrClosed) || r.Context().Err() != nil):
		ae = errorf(http.StatusServiceUnavailable, "the server shut down during this call; %d of its commands ran", len(outs))
	case r.Context().Err() != nil:
		ae = errorf(http.StatusServiceUnavailable, "the request ended during this call; %d of its commands ran", len(outs))
	case errors.Is(err, errUnbilled):
		ae = errorf(http.StatusServiceUnavailable, "the commands ran, but their usage could not be recorded (the database is unavailable): the call is not billed (metadata.output has what ran); try again")
		ae.retryAfter = 1
	default:
		s.log.ErrorContext(r.Context(), "exec call failed", "container", id, "err", err)
		ae = errorf(http.StatusInternalServerError, "running the commands failed after %d of them", len(outs))
	}
	if outs == nil {
		outs = []tool.CommandOutput{}
	}
	s.log.WarnContext(r.Context(), "exec call stopped early", "container", id, "ran", len(outs), "status", ae.status, "err", err)
	return &metaError{apiError: ae, meta: map[string]any{"container_id": id, "output": outs, "usage": usageOf(bill)}}
}

func (s *Server) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

var errDeleted = errors.New("container was deleted")

// call is the executor an exec call hands to tool.RunShell: the manager,
// plus what the HTTP layer needs around each command — no new command once
// the container is being deleted, the time of the first command (metering
// starts there), the command-duration metric, and, when streaming, the
// events of each command.
type call struct {
	s        *Server
	id       string
	maxChars int

	mu    sync.Mutex
	first time.Time
	n     int
	ev    *events // nil unless streaming
}

func (c *call) firstAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

func (c *call) Exec(ctx context.Context, name string, cmd sandbox.Command) (sandbox.Result, error) {
	c.s.stateMu.Lock()
	gone := c.s.deleted[c.id]
	c.s.stateMu.Unlock()
	if gone {
		return sandbox.Result{}, errDeleted
	}
	c.mu.Lock()
	idx := c.n
	c.n++
	t0 := time.Now()
	if c.first.IsZero() {
		c.first = t0
	}
	c.mu.Unlock()
	if c.ev != nil {
		c.ev.push("command.started", struct {
			Index   int    `json:"index"`
			Command string `json:"command"`
		}{idx, cmd.Command})
		cmd.OnOutput = c.ev.deltas(idx, cmd.MaxBytes)
	}
	res, err := c.s.mgr.Exec(ctx, name, cmd)
	if _, quota := isQuota(err); idx == 0 && (errors.Is(err, sandbox.ErrBusy) || quota) {
		// Refused before anything ran (awake in another process, or on
		// another node; the workspace's awake quota): the call is not
		// billed.
		c.mu.Lock()
		c.first = time.Time{}
		c.mu.Unlock()
	}
	outcome := 2 // commandOutcomes: error
	if err == nil {
		outcome = 0 // exit
		if res.TimedOut {
			outcome = 1 // timeout
		}
	}
	c.s.metrics.observeCommand(outcome, time.Since(t0).Seconds())
	if err == nil && c.ev != nil {
		o := tool.Output(res, c.maxChars)
		c.ev.push("command.completed", struct {
			Index int `json:"index"`
			tool.CommandOutput
		}{idx, o})
	}
	return res, err
}

// metaError is an apiError with error.metadata.
type metaError struct {
	*apiError
	meta map[string]any
}

func (e *metaError) Unwrap() error { return e.apiError }

// events is a streamed call's queue of server-sent events: the agent's
// output callback must not block, so it only appends here and the handler
// goroutine writes to the client.
type events struct {
	mu   sync.Mutex
	q    []event
	wake chan struct{}
}

type event struct {
	name string
	data any
}

func newEvents() *events { return &events{wake: make(chan struct{}, 1)} }

func (e *events) push(name string, data any) {
	e.mu.Lock()
	e.q = append(e.q, event{name, data})
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *events) take() []event {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.q
	e.q = nil
	return q
}

// deltas streams a command's output as "output" events: at most maxBytes
// per stream (what the agent keeps; the command's final output is shaped
// from the same bytes), never splitting a UTF-8 character across events.
func (e *events) deltas(idx, maxBytes int) agent.OutputFunc {
	return utf8Output(maxBytes, func(stream int, text string) {
		name := "stdout"
		if stream == 2 {
			name = "stderr"
		}
		e.push("output", outputDelta{idx, name, text})
	})
}

type outputDelta struct {
	Index  int    `json:"index"`
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// incompleteTail is the length of a UTF-8 character begun but not ended
// at the end of b.
func incompleteTail(b []byte) int {
	for k := 1; k <= utf8.UTFMax && k <= len(b); k++ {
		if utf8.RuneStart(b[len(b)-k]) {
			if !utf8.FullRune(b[len(b)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}

// stream runs the call with "stream": true as server-sent events:
//
//	command.started    {"index","command"}
//	output             {"index","stream":"stdout"|"stderr","text"}   as produced
//	command.completed  {"index","stdout","stderr","outcome"}         shaped as in the JSON answer
//	result             the JSON answer: {"container_id","output","usage"}
//	error              {"error":{"code","message","metadata"}}       instead of result when the call stopped early
func (s *Server) stream(w http.ResponseWriter, r *http.Request, p Principal, c Container, ref string, plan tool.Plan, run *call, start metering.Start) error {
	id := c.ID
	fl, ok := w.(http.Flusher)
	if !ok {
		return errors.New("response writer cannot flush")
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()

	run.ev = newEvents()
	type done struct {
		outs []tool.CommandOutput
		err  error
	}
	finished := make(chan done, 1)
	go func() {
		// This goroutine is outside the handler's panic recovery: a panic
		// here ends the call with an error event, not the server.
		var outs []tool.CommandOutput
		var err error
		defer func() {
			if v := recover(); v != nil {
				s.log.ErrorContext(r.Context(), "exec call panicked", "container", id, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				err = fmt.Errorf("panic: %v", v)
			}
			finished <- done{outs, err}
		}()
		outs, err = tool.RunShell(r.Context(), run, id, plan)
	}()
	clientGone := false
	write := func(name string, data any) {
		if clientGone {
			return
		}
		b, err := json.Marshal(data)
		if err != nil {
			b, _ = json.Marshal(errorBody{Error: errorDetail{Code: 500, Message: "encoding an event failed"}})
			name = "error"
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b); err != nil {
			clientGone = true
			return
		}
		fl.Flush()
	}
	flush := func() {
		for _, e := range run.ev.take() {
			write(e.name, e.data)
		}
	}
	for {
		select {
		case <-run.ev.wake:
			flush()
			continue
		case d := <-finished:
			flush()
			bill, recErr := s.settleNow(r.Context(), p, c, run.firstAt(), start, "exec")
			if d.err == nil {
				d.err = recErr
			}
			if d.err != nil {
				err := s.callError(r, id, ref, d.err, d.outs, bill)
				var me *metaError
				errors.As(err, &me)
				write("error", errorBody{Error: errorDetail{Code: me.status, Message: me.msg, Metadata: me.meta}})
				return nil
			}
			write("result", execResponse{ContainerID: id, Output: d.outs, Usage: usageOf(bill)})
			return nil
		}
	}
}
