// Package broadcast sends a trace of each finished gateway request to the
// destinations the operator configured (SPEC §6, "Broadcast"): today
// OpenTelemetry OTLP/HTTP collectors, through the OpenTelemetry Go SDK.
//
// A trace is recorded after the fact: the caller hands Record a tree of
// Spans whose start and end times it measured, and each destination's
// worker turns it into SDK spans (trace.WithTimestamp) and exports them
// with otlptracehttp. The request path only enqueues: Record never blocks
// and never does I/O. Each destination has its own bounded queue of traces
// (Destination.QueueSize); a trace that finds it full is dropped and
// counted, so a slow or dead collector costs requests nothing but the
// traces it cannot take. The exporter retries what the OTLP specification
// calls retryable (429, 502, 503, 504 and transport errors) with
// exponential backoff up to Retry.MaxElapsedTime; a batch that still fails
// is counted as failed. Counters per destination are in Collectors
// (shellgate_broadcast_{sent,failed,dropped}_total, in traces, and
// shellgate_broadcast_queued).
package broadcast

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Span is one span of a trace recorded after the fact: its times are the
// caller's measurements.
type Span struct {
	Name       string
	Kind       trace.SpanKind
	Start, End time.Time
	Attrs      []attribute.KeyValue
	// Error, when set, gives the span the status Error with this
	// description.
	Error    string
	Children []Span
}

// Count is the number of spans in the tree.
func (s *Span) Count() int {
	n := 1
	for i := range s.Children {
		n += s.Children[i].Count()
	}
	return n
}

// Options are settings of a Broadcaster that are not a destination's.
type Options struct {
	Logger *slog.Logger
	// ServiceVersion is the service.version of the traces' resource
	// (service.name is "shellgate").
	ServiceVersion string
}

// Broadcaster sends traces to its destinations. Its methods are safe for
// concurrent use.
type Broadcaster struct {
	dests  []*dest
	log    *slog.Logger
	closed atomic.Bool

	sent, failed, dropped *prometheus.CounterVec
	queued                *prometheus.GaugeVec
}

// dest is one destination: its queue, its worker and its exporter.
type dest struct {
	cfg    Destination
	q      chan *Span
	exp    *otlptrace.Exporter
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	gather *gather
	// base is cancelled when a shutdown runs out of time: it aborts the
	// export in flight.
	base   context.Context
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{}

	sent, failed, dropped prometheus.Counter
}

// New starts a Broadcaster with one worker per destination (already
// validated by ParseConfig, or filled in by the caller). No destination:
// nil, and Record on a nil Broadcaster does nothing.
func New(dests []Destination, opts Options) (*Broadcaster, error) {
	if len(dests) == 0 {
		return nil, nil
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b := &Broadcaster{
		log: opts.Logger,
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shellgate_broadcast_sent_total",
			Help: "Request traces a broadcast destination accepted.",
		}, []string{"destination"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shellgate_broadcast_failed_total",
			Help: "Request traces lost because their export to the destination failed (after the retries of retryable errors).",
		}, []string{"destination"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shellgate_broadcast_dropped_total",
			Help: "Request traces dropped without an export attempt: the destination's queue was full (a slow or dead destination), or the server was shutting down.",
		}, []string{"destination"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shellgate_broadcast_queued",
			Help: "Request traces waiting in the destination's queue.",
		}, []string{"destination"}),
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("shellgate"), semconv.ServiceVersion(opts.ServiceVersion))
	seen := map[string]bool{}
	for i, dc := range dests {
		dc = dc.withDefaults(i, len(dests))
		if seen[dc.Name] {
			b.shutdownStarted(context.Background())
			return nil, fmt.Errorf("broadcast[%d]: name %q is used twice", i, dc.Name)
		}
		seen[dc.Name] = true
		exp, err := otlptracehttp.New(context.Background(), dc.exporterOptions()...)
		if err != nil {
			b.shutdownStarted(context.Background())
			return nil, fmt.Errorf("broadcast[%d] (%s): %w", i, dc.Name, err)
		}
		g := &gather{}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(g), sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.AlwaysSample()))
		d := &dest{cfg: dc, q: make(chan *Span, dc.QueueSize), exp: exp, tp: tp, gather: g,
			tracer: tp.Tracer("github.com/shellgate/shellgate/internal/broadcast"),
			stop:   make(chan struct{}), done: make(chan struct{}),
			sent: b.sent.WithLabelValues(dc.Name), failed: b.failed.WithLabelValues(dc.Name), dropped: b.dropped.WithLabelValues(dc.Name)}
		d.base, d.cancel = context.WithCancel(context.Background())
		b.queued.WithLabelValues(dc.Name)
		b.dests = append(b.dests, d)
		go b.work(d)
	}
	return b, nil
}

// Destinations names the destinations, in order.
func (b *Broadcaster) Destinations() []string {
	if b == nil {
		return nil
	}
	var out []string
	for _, d := range b.dests {
		out = append(out, d.cfg.Name+" "+d.cfg.Endpoint)
	}
	return out
}

// Collectors are the broadcaster's Prometheus series.
func (b *Broadcaster) Collectors() []prometheus.Collector {
	if b == nil {
		return nil
	}
	return []prometheus.Collector{b.sent, b.failed, b.dropped, queuedCollector{b}}
}

// queuedCollector reads the queues' lengths when scraped.
type queuedCollector struct{ b *Broadcaster }

func (c queuedCollector) Describe(ch chan<- *prometheus.Desc) { c.b.queued.Describe(ch) }

func (c queuedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range c.b.dests {
		c.b.queued.WithLabelValues(d.cfg.Name).Set(float64(len(d.q)))
	}
	c.b.queued.Collect(ch)
}

// Record queues the trace whose root is root for every destination,
// without waiting: a destination whose queue is full drops it (counted).
// root and what it holds must not be changed afterwards.
func (b *Broadcaster) Record(root *Span) {
	if b == nil {
		return
	}
	if b.closed.Load() {
		for _, d := range b.dests {
			d.dropped.Inc()
		}
		return
	}
	for _, d := range b.dests {
		select {
		case d.q <- root:
		default:
			d.dropped.Inc()
		}
	}
}

// Shutdown stops taking traces, exports those queued, and stops the
// exporters; what is not sent when ctx ends is dropped (counted).
func (b *Broadcaster) Shutdown(ctx context.Context) error {
	if b == nil || b.closed.Swap(true) {
		return nil
	}
	return b.shutdownStarted(ctx)
}

func (b *Broadcaster) shutdownStarted(ctx context.Context) error {
	b.closed.Store(true)
	for _, d := range b.dests {
		close(d.stop)
	}
	var errs []error
	for _, d := range b.dests {
		select {
		case <-d.done:
		case <-ctx.Done():
			d.cancel() // aborts the export in flight
			<-d.done
		}
		// What a Record racing with the shutdown left behind.
		for {
			select {
			case <-d.q:
				d.dropped.Inc()
				continue
			default:
			}
			break
		}
		d.cancel()
		errs = append(errs, d.tp.Shutdown(context.WithoutCancel(ctx)))
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		errs = append(errs, d.exp.Shutdown(sctx))
		cancel()
	}
	return errors.Join(errs...)
}

// work is a destination's worker: it takes the traces queued (up to
// MaxBatch at once), builds their spans and exports them.
func (b *Broadcaster) work(d *dest) {
	defer close(d.done)
	batch := make([]*Span, 0, d.cfg.MaxBatch)
	for {
		batch = batch[:0]
		select {
		case s := <-d.q:
			batch = append(batch, s)
			b.linger(d, &batch)
		case <-d.stop:
			// Export what is queued, then stop (Shutdown's ctx bounds it
			// through d.base).
			for {
				batch = batch[:0]
				b.fill(d, &batch)
				if len(batch) == 0 {
					return
				}
				b.export(d, batch)
			}
		}
		b.fill(d, &batch)
		b.export(d, batch)
	}
}

// linger waits up to BatchDelay for more traces to export with the
// first (fewer, larger exports), or until the batch is full or a shutdown
// starts.
func (b *Broadcaster) linger(d *dest, batch *[]*Span) {
	b.fill(d, batch)
	if len(*batch) >= d.cfg.MaxBatch || d.cfg.BatchDelay <= 0 {
		return
	}
	t := time.NewTimer(d.cfg.BatchDelay)
	defer t.Stop()
	for len(*batch) < d.cfg.MaxBatch {
		select {
		case s := <-d.q:
			*batch = append(*batch, s)
		case <-t.C:
			return
		case <-d.stop:
			return
		}
	}
}

// fill adds queued traces to batch, without waiting, up to MaxBatch.
func (b *Broadcaster) fill(d *dest, batch *[]*Span) {
	for len(*batch) < d.cfg.MaxBatch {
		select {
		case s := <-d.q:
			*batch = append(*batch, s)
		default:
			return
		}
	}
}

func (b *Broadcaster) export(d *dest, batch []*Span) {
	if d.base.Err() != nil {
		// A shutdown ran out of time: no more attempts.
		d.dropped.Add(float64(len(batch)))
		return
	}
	for _, root := range batch {
		build(context.Background(), d.tracer, root)
	}
	spans := d.gather.take()
	// The exporter's retries end at Retry.MaxElapsedTime; an attempt at
	// Timeout. This bounds the whole export in case a server trickles.
	ctx, cancel := context.WithTimeout(d.base, d.cfg.Retry.MaxElapsedTime+2*d.cfg.Timeout)
	err := d.exp.ExportSpans(ctx, spans)
	cancel()
	if err != nil {
		d.failed.Add(float64(len(batch)))
		b.log.Warn("broadcast: export failed", "destination", d.cfg.Name, "traces", len(batch), "spans", len(spans), "err", err)
		return
	}
	d.sent.Add(float64(len(batch)))
}

// build makes s and its children SDK spans with their recorded times.
func build(ctx context.Context, tr trace.Tracer, s *Span) {
	ctx, sp := tr.Start(ctx, s.Name, trace.WithTimestamp(s.Start), trace.WithSpanKind(s.Kind), trace.WithAttributes(s.Attrs...))
	for i := range s.Children {
		build(ctx, tr, &s.Children[i])
	}
	if s.Error != "" {
		sp.SetStatus(codes.Error, s.Error)
	}
	sp.End(trace.WithTimestamp(s.End))
}

// gather is a SpanProcessor that keeps the spans ended, for the worker
// to export as one batch (the worker builds and takes them on its own
// goroutine; the lock is for the SDK's sake).
type gather struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (g *gather) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (g *gather) OnEnd(s sdktrace.ReadOnlySpan) {
	g.mu.Lock()
	g.spans = append(g.spans, s)
	g.mu.Unlock()
}

func (g *gather) Shutdown(context.Context) error   { return nil }
func (g *gather) ForceFlush(context.Context) error { return nil }

func (g *gather) take() []sdktrace.ReadOnlySpan {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.spans
	g.spans = nil
	return out
}
