package broadcast

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/shellgate/shellgate/internal/broadcast/otlptest"
)

// These tests send traces to a real OTLP/HTTP receiver on loopback
// (otlptest) that decodes the protobuf the SDK's exporter sent.

// tree is a request of two upstream calls and a tool call of one command,
// at known times.
func tree(t0 time.Time, name string) *Span {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	return &Span{Name: name, Kind: trace.SpanKindServer, Start: at(0), End: at(100),
		Attrs: []attribute.KeyValue{attribute.Int("gen_ai.usage.input_tokens", 42), attribute.String("container.id", "cntr_x")},
		Children: []Span{
			{Name: "chat m", Kind: trace.SpanKindClient, Start: at(1), End: at(20)},
			{Name: "execute_tool shell", Start: at(21), End: at(60), Children: []Span{
				{Name: "command", Start: at(22), End: at(59), Attrs: []attribute.KeyValue{attribute.Int("process.exit.code", 3)}},
			}},
			{Name: "chat m", Kind: trace.SpanKindClient, Start: at(61), End: at(99), Error: "upstream 503"},
		}}
}

func counter(c *prometheus.CounterVec, dest string) float64 {
	return testutil.ToFloat64(c.WithLabelValues(dest))
}

func newBroadcaster(t *testing.T, ds ...Destination) *Broadcaster {
	t.Helper()
	b, err := New(ds, Options{ServiceVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown(context.Background()) })
	return b
}

func TestExport(t *testing.T) {
	rcv := otlptest.NewReceiver()
	defer rcv.Close()
	b := newBroadcaster(t, Destination{Type: TypeOTLPHTTP, Endpoint: rcv.URL, Name: "local", Headers: map[string]string{"X-Team": "gw"}})
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	b.Record(tree(t0, "POST /v1/responses"))
	if err := rcv.WaitArrived(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if errs := rcv.Errors(); len(errs) > 0 {
		t.Fatalf("receiver could not decode: %v", errs)
	}
	if h := rcv.Headers()[0]; h.Get("X-Team") != "gw" || h.Get("Content-Encoding") != "gzip" {
		t.Errorf("headers %v", h)
	}
	ex := rcv.Exports()
	if len(ex) != 1 || len(ex[0].ResourceSpans) != 1 {
		t.Fatalf("%d exports", len(ex))
	}
	if svc := otlptest.Str(ex[0].ResourceSpans[0].Resource.Attributes, "service.name"); svc != "shellgate" {
		t.Errorf("service.name %q", svc)
	}
	spans := rcv.Spans()
	if len(spans) != 5 {
		t.Fatalf("%d spans, want 5", len(spans))
	}
	byName := map[string][]*tracepb.Span{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	root := byName["POST /v1/responses"][0]
	tool, cmd := byName["execute_tool shell"][0], byName["command"][0]
	if len(root.ParentSpanId) != 0 || root.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("root: parent %x kind %v", root.ParentSpanId, root.Kind)
	}
	for _, s := range spans {
		if !bytes.Equal(s.TraceId, root.TraceId) {
			t.Errorf("%s in trace %s, root in %s", s.Name, hex.EncodeToString(s.TraceId), hex.EncodeToString(root.TraceId))
		}
	}
	for _, c := range append(byName["chat m"], tool) {
		if !bytes.Equal(c.ParentSpanId, root.SpanId) {
			t.Errorf("%s: parent %x, want the root %x", c.Name, c.ParentSpanId, root.SpanId)
		}
	}
	if !bytes.Equal(cmd.ParentSpanId, tool.SpanId) {
		t.Errorf("command: parent %x, want the tool span %x", cmd.ParentSpanId, tool.SpanId)
	}
	// The recorded times, to the nanosecond.
	if root.StartTimeUnixNano != uint64(t0.UnixNano()) || root.EndTimeUnixNano != uint64(t0.Add(100*time.Millisecond).UnixNano()) ||
		cmd.StartTimeUnixNano != uint64(t0.Add(22*time.Millisecond).UnixNano()) {
		t.Errorf("times: root %d..%d, command from %d", root.StartTimeUnixNano, root.EndTimeUnixNano, cmd.StartTimeUnixNano)
	}
	if otlptest.Int(root.Attributes, "gen_ai.usage.input_tokens") != 42 || otlptest.Str(root.Attributes, "container.id") != "cntr_x" ||
		otlptest.Int(cmd.Attributes, "process.exit.code") != 3 {
		t.Errorf("attributes: root %v, command %v", root.Attributes, cmd.Attributes)
	}
	failedCall := byName["chat m"][1]
	if failedCall.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || failedCall.Status.GetMessage() != "upstream 503" ||
		byName["chat m"][0].Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("statuses: %v, %v", byName["chat m"][0].Status, failedCall.Status)
	}
	if got := counter(b.sent, "local"); got != 1 {
		t.Errorf("sent %v", got)
	}
}

// Traces wait (BatchDelay) to share an export: five traces, a batch of
// five and a delay longer than the test make one export of five.
func TestBatching(t *testing.T) {
	rcv := otlptest.NewReceiver()
	defer rcv.Close()
	b := newBroadcaster(t, Destination{Type: TypeOTLPHTTP, Endpoint: rcv.URL, Name: "batch", MaxBatch: 5, BatchDelay: time.Hour})
	for range 5 {
		b.Record(tree(time.Now(), "r"))
	}
	if err := rcv.WaitArrived(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b.Shutdown(t.Context())
	if n, spans := rcv.Attempts(), len(rcv.Spans()); n != 1 || spans != 5*5 {
		t.Errorf("%d exports of %d spans, want 1 of 25", n, spans)
	}
	// A shutdown does not wait out the delay.
	b2 := newBroadcaster(t, Destination{Type: TypeOTLPHTTP, Endpoint: rcv.URL, Name: "batch", BatchDelay: time.Hour})
	b2.Record(tree(time.Now(), "r"))
	b2.Shutdown(t.Context())
	if s := counter(b2.sent, "batch"); s != 1 {
		t.Errorf("sent %v at shutdown", s)
	}
}

// fast retries for the failure tests; 2 s leave room for several even
// under -race on a loaded machine.
var fastRetry = Retry{InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond, MaxElapsedTime: 2 * time.Second}

func TestFailures(t *testing.T) {
	for _, c := range []struct {
		name    string
		status  int
		retried bool
	}{
		{"503 is retried, then counted failed", http.StatusServiceUnavailable, true},
		{"500 is not retryable (OTLP spec): one attempt, counted failed", http.StatusInternalServerError, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rcv := otlptest.NewReceiver()
			defer rcv.Close()
			rcv.SetStatus(c.status)
			b := newBroadcaster(t, Destination{Type: TypeOTLPHTTP, Endpoint: rcv.URL, Name: "refused", Retry: fastRetry})
			b.Record(tree(time.Now(), "r"))
			b.Shutdown(t.Context()) // waits for the export, retries included
			if n := rcv.Attempts(); c.retried && n < 3 {
				t.Errorf("%d attempts, want retries", n)
			} else if !c.retried && n != 1 {
				t.Errorf("%d attempts, want 1", n)
			}
			if f, s := counter(b.failed, "refused"), counter(b.sent, "refused"); f != 1 || s != 0 {
				t.Errorf("failed %v sent %v", f, s)
			}
		})
	}
	t.Run("nobody listening: failed", func(t *testing.T) {
		rcv := otlptest.NewReceiver()
		url := rcv.URL
		rcv.Close()
		b := newBroadcaster(t, Destination{Type: TypeOTLPHTTP, Endpoint: url, Name: "gone", Retry: fastRetry})
		b.Record(tree(time.Now(), "r"))
		b.Shutdown(t.Context())
		if f := counter(b.failed, "gone"); f != 1 {
			t.Errorf("failed %v", f)
		}
	})
}

// A hung destination holds its worker; Record never waits: the queue
// fills, and every trace past it is dropped and counted, while a healthy
// destination beside it gets them all.
func TestHungDestinationDrops(t *testing.T) {
	hung, good := otlptest.NewReceiver(), otlptest.NewReceiver()
	defer hung.Close()
	defer good.Close()
	hung.Hang()
	const queue = 3
	b := newBroadcaster(t,
		Destination{Type: TypeOTLPHTTP, Endpoint: hung.URL, Name: "hung", QueueSize: queue, Retry: fastRetry, Timeout: time.Minute},
		Destination{Type: TypeOTLPHTTP, Endpoint: good.URL, Name: "good", QueueSize: 100, MaxBatch: 1})
	b.Record(tree(time.Now(), "first"))
	if err := hung.WaitArrived(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The hung worker is in its export of "first"; its queue takes 3 more.
	const more = 10
	for range more {
		b.Record(tree(time.Now(), "more"))
	}
	if d := counter(b.dropped, "hung"); d != more-queue {
		t.Errorf("dropped %v, want %d", d, more-queue)
	}
	if hung.Attempts() != 1 {
		t.Errorf("the hung destination got %d requests while hung", hung.Attempts())
	}
	if err := good.WaitArrived(1+more, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := counter(b.dropped, "good"); d != 0 {
		t.Errorf("the good destination dropped %v", d)
	}
	// Released, the hung destination sends what it kept.
	hung.Release()
	if err := b.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s, d := counter(b.sent, "hung"), counter(b.dropped, "hung"); s != 1+queue || d != more-queue {
		t.Errorf("hung: sent %v dropped %v, want %d and %d", s, d, 1+queue, more-queue)
	}
	if s := counter(b.sent, "good"); s != 1+more {
		t.Errorf("good: sent %v", s)
	}
	// After the shutdown, traces are dropped.
	b.Record(tree(time.Now(), "late"))
	if d := counter(b.dropped, "good"); d != 1 {
		t.Errorf("after shutdown: dropped %v", d)
	}
}

// A shutdown whose time runs out aborts the hung export and drops what is
// queued, counted.
func TestShutdownDeadline(t *testing.T) {
	hung := otlptest.NewReceiver()
	defer hung.Close()
	hung.Hang()
	b := newBroadcaster(t, Destination{Type: TypeOTLPHTTP, Endpoint: hung.URL, Name: "hung", QueueSize: 5, Timeout: time.Minute})
	b.Record(tree(time.Now(), "a"))
	if err := hung.WaitArrived(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b.Record(tree(time.Now(), "b"))
	b.Record(tree(time.Now(), "c"))
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	b.Shutdown(ctx)
	if f, d, s := counter(b.failed, "hung"), counter(b.dropped, "hung"), counter(b.sent, "hung"); f != 1 || d != 2 || s != 0 {
		t.Errorf("failed %v dropped %v sent %v, want 1, 2, 0", f, d, s)
	}
}

func TestParseConfig(t *testing.T) {
	env := map[string]string{"OTLP_AUTH": "Bearer s3cret"}
	getenv := func(k string) string { return env[k] }
	ds, err := ParseConfig([]byte(`
providers:
  openai: {api: responses, base_url: https://api.openai.com/v1}
broadcast:
  - type: otlp_http
    endpoint: http://127.0.0.1:4318
    headers: {x-team: gw}
    headers_env: {authorization: OTLP_AUTH}
    queue_size: 10
    retry: {initial_interval: 100ms, max_elapsed_time: 5s}
  - type: otlp_http
    name: second
    endpoint: https://otel.example.com/custom/path
    compression: none
`), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Headers["authorization"] != "Bearer s3cret" || ds[0].Headers["x-team"] != "gw" || ds[0].QueueSize != 10 ||
		ds[0].Retry.InitialInterval != 100*time.Millisecond || ds[0].Retry.MaxElapsedTime != 5*time.Second || ds[1].Name != "second" {
		t.Fatalf("%+v", ds)
	}
	d0 := ds[0].withDefaults(0, 2)
	if d0.Name != "otlp_http_0" || d0.MaxBatch != DefaultMaxBatch || d0.Timeout != DefaultTimeout || d0.Retry.MaxInterval != 10*time.Second {
		t.Errorf("defaults %+v", d0)
	}
	if ds, err := ParseConfig([]byte("providers: {}\n"), getenv); err != nil || ds != nil {
		t.Errorf("no broadcast: %v %v", ds, err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"broadcast: [{type: otlp_http}]", "broadcast[0].endpoint: required"},
		{"broadcast: [{endpoint: http://x:4318}]", "broadcast[0].type: required"},
		{"broadcast: [{type: zipkin, endpoint: http://x:4318}]", `"zipkin" is not otlp_http`},
		{"broadcast: [{type: otlp_http, endpoint: 'ftp://x'}]", "not an http(s) URL"},
		{"broadcast: [{type: otlp_http, endpoint: 'http://u:p@x:4318'}]", "without credentials"},
		{"broadcast: [{type: otlp_http, endpoint: http://x:4318, colour: red}]", "field colour not found"},
		{"broadcast: [{type: otlp_http, endpoint: http://x:4318, headers_env: {authorization: NOPE}}]", "NOPE is not set"},
		{"broadcast: [{type: otlp_http, endpoint: http://x:4318, headers: {'bad header': x}}]", "not a header name"},
		{"broadcast: [{type: otlp_http, endpoint: http://x:4318, headers: {x: \"a\\nb\"}}]", "no line breaks"},
		{"broadcast: [{type: otlp_http, endpoint: http://x:4318, queue_size: -1}]", "must not be negative"},
		{"broadcast: [{type: otlp_http, endpoint: http://x:4318, timeout: soon}]", "broadcast: want a list"},
		{"broadcast: {type: otlp_http}", "want a list"},
		{"broadcast: [{type: otlp_http, endpoint: http://x:4318, compression: brotli}]", "not gzip or none"},
	} {
		if _, err := ParseConfig([]byte(c.yaml), getenv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.yaml, err, c.want)
		}
	}
	if _, err := New([]Destination{{Type: TypeOTLPHTTP, Endpoint: "http://a:1", Name: "x"}, {Type: TypeOTLPHTTP, Endpoint: "http://b:1", Name: "x"}}, Options{}); err == nil {
		t.Error("two destinations of one name were accepted")
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{
		"SHELLGATE_BROADCAST_OTLP_ENDPOINT": "http://127.0.0.1:4318, https://otel.example.com",
		"SHELLGATE_BROADCAST_OTLP_HEADERS":  "authorization=Bearer%20abc,x-team=gw",
	}
	ds, err := FromEnv(func(k string) string { return env[k] })
	if err != nil || len(ds) != 2 || ds[1].Endpoint != "https://otel.example.com" || ds[0].Headers["authorization"] != "Bearer abc" || ds[1].Headers["x-team"] != "gw" {
		t.Fatalf("%+v %v", ds, err)
	}
	if ds, err := FromEnv(func(string) string { return "" }); ds != nil || err != nil {
		t.Errorf("unset: %v %v", ds, err)
	}
	env["SHELLGATE_BROADCAST_OTLP_HEADERS"] = "novalue"
	if _, err := FromEnv(func(k string) string { return env[k] }); err == nil {
		t.Error("a header without = was accepted")
	}
}
