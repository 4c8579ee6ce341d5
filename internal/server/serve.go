package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Run serves on ln until ctx ends, then shuts down gracefully:
//
//  1. /healthz turns 503 and new exec calls are refused (503);
//  2. the listener closes and idle connections with it, while requests in
//     flight — exec calls, streams — go on for up to grace;
//  3. calls still running after grace are cancelled: each answers 503 (or
//     an SSE error event) reporting the commands that did run, and the
//     command cut short is killed in its sandbox;
//  4. the sandbox manager closes: every awake sandbox is put to sleep (its
//     files are kept), so no container of this server outlives it.
//
// Connections are bounded by Config.Conns (conns.go): idle, header and
// body-stall timeouts, a header cap, and caps on connections in total and
// per address that evict idle keep-alive connections first.
//
// Run returns nil after a shutdown that lost nothing, else what went wrong.
func (s *Server) Run(ctx context.Context, ln net.Listener, grace time.Duration) error {
	base, cancelCalls := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelCalls()
	lim := s.cfg.Conns
	// No ReadTimeout or WriteTimeout: they bound a whole request, and would
	// cut uploads and streams that make progress.
	hs := &http.Server{
		Handler:           progressBodies(s.handler, lim.StallTimeout),
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: lim.HeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnState:         s.conns.track,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(s.conns.listener(ln)) }()
	// The retention sweep, until shutdown begins.
	sweepCtx, stopSweep := context.WithCancel(base)
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		s.sweepLoop(sweepCtx)
	}()
	stopSweeping := func() {
		stopSweep()
		<-swept
	}
	select {
	case err := <-served:
		// The listener failed: nothing is served, so stop now.
		s.BeginShutdown()
		stopSweeping()
		cancelCalls()
		return errors.Join(err, s.mgr.Close(context.Background()))
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "grace", grace.String())
	s.BeginShutdown()
	stopSweeping()
	var errs []error
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	// MCP sessions keep a GET stream open: they end once the calls in
	// flight have (or the grace period is over), so that they do not hold
	// the shutdown.
	go func() {
		s.WaitCalls(graceCtx)
		s.mcp.Close()
	}()
	err := hs.Shutdown(graceCtx)
	cancel()
	if err != nil {
		s.log.Warn("requests still running after the grace period: cancelling them", "grace", grace.String())
		cancelCalls()
		// Cancelled calls answer promptly: the manager kills the command
		// and the handler writes its report.
		waitCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := s.WaitCalls(waitCtx); err != nil {
			errs = append(errs, errors.New("exec calls did not end after being cancelled"))
		}
		cancel()
		shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := hs.Shutdown(shutCtx); err != nil {
			errs = append(errs, hs.Close())
		}
		cancel()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	// The request logs of the requests that ended are written (bounded).
	flushed := make(chan struct{})
	go func() {
		s.flushLogs()
		close(flushed)
	}()
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		s.log.Warn("request logs still queued at shutdown are lost")
	}
	errs = append(errs, s.mgr.Close(context.Background()))
	s.log.Info("shut down")
	return errors.Join(errs...)
}
