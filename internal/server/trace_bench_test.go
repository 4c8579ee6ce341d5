package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/shellgate/shellgate/internal/broadcast"
	"github.com/shellgate/shellgate/internal/broadcast/otlptest"
	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
	"github.com/shellgate/shellgate/internal/tool"
)

// BenchmarkGatewayBroadcast: the same gateway request with trace
// broadcast off and on (to a live OTLP/HTTP receiver on loopback),
// interleaved request by request on one server, so that load on the
// machine falls on both sides alike. Two requests: Responses with one
// shell step (`true` on a warm crun/busybox container) and Responses with
// a text answer only (no sandbox: where broadcast's share is largest).
// It reports the client's medians off and on, their ratio, and heap
// objects allocated per request in this process (server, scripted model
// and client; on: including the export on the destination's worker).
func BenchmarkGatewayBroadcast(b *testing.B) {
	rcv := otlptest.NewReceiver()
	b.Cleanup(rcv.Close)
	bc, err := broadcast.New([]broadcast.Destination{{Type: broadcast.TypeOTLPHTTP, Endpoint: rcv.URL, Name: "bench"}}, broadcast.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		bc.Shutdown(ctx)
	})
	step, text := scripted.NewServer(stepScript(1)), scripted.NewServer(stepScript(0))
	b.Cleanup(step.Close)
	b.Cleanup(text.Close)
	ps := []upstream.Provider{
		{Name: "step", API: "responses", Endpoint: upstream.Endpoint{BaseURL: step.URL + "/v1", APIKey: "sk-scripted", Timeout: 30 * time.Second}},
		{Name: "text", API: "responses", Endpoint: upstream.Endpoint{BaseURL: text.URL + "/v1", APIKey: "sk-scripted", Timeout: 30 * time.Second}},
	}
	e := newEnv(b, "crun", "busybox", func(c *Config) { c.Models = upstream.NewProviders(ps...); c.Broadcast = bc })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	b.Cleanup(client.CloseIdleConnections)
	c := e.create(e.keyA, "bench-broadcast")
	e.exec(e.keyA, c.ID, "true") // starts it
	for _, kind := range []string{"step", "text"} {
		b.Run(kind, func(b *testing.B) {
			model := step
			if kind == "text" {
				model = text
			}
			path, body, hdr := gatewayBodyFor("responses", kind, c.ID, "", false)
			hdr.Set("Authorization", "Bearer "+e.keyA)
			var wall [2][]time.Duration // off, on
			var objs [2]uint64
			one := func(on bool) {
				k := 0
				e.srv.cfg.Broadcast = nil
				if on {
					k = 1
					e.srv.cfg.Broadcast = bc
				}
				model.Reset()
				a0, t0 := allocs(), time.Now()
				if err := post(client, e.url+path, body, hdr); err != nil {
					b.Fatal(err)
				}
				wall[k] = append(wall[k], time.Since(t0))
				objs[k] += allocs() - a0
			}
			one(false)
			one(true)
			wall, objs = [2][]time.Duration{}, [2]uint64{}
			sent0 := rcv.Attempts()
			for b.Loop() {
				one(false)
				one(true)
			}
			off, on := medianMs(wall[0]), medianMs(wall[1])
			b.ReportMetric(off, "off-ms")
			b.ReportMetric(on, "on-ms")
			b.ReportMetric(on/off, "ratio")
			b.ReportMetric((on-off)*1000, "added-µs")
			b.ReportMetric(float64(objs[0])/float64(b.N), "off-allocs/req")
			b.ReportMetric(float64(objs[1])/float64(b.N), "on-allocs/req")
			b.Logf("%s: %d requests each way; the receiver got %d exports", kind, b.N, rcv.Attempts()-sent0)
		})
	}
	e.srv.cfg.Broadcast = bc
	if errs := rcv.Errors(); len(errs) > 0 {
		b.Fatal(fmt.Sprint(errs))
	}
}

// BenchmarkTraceRecord is broadcast's cost on the request path: the span
// tree of a request of two upstream calls and a shell call of two
// commands built from the gateway's Result and queued (Record), beside
// what instrumenting the request inline with the OpenTelemetry SDK would
// cost there: the same attributes from the same Result, then the same
// five spans started and ended through a
// TracerProvider with a BatchSpanProcessor (the SDK's usual setup). Both
// export to a live receiver on loopback with their default settings, as
// in production (the export's CPU shares the machine with the loop).
func BenchmarkTraceRecord(b *testing.B) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	exit0, exit3 := 0, 3
	step := &gateway.Step{Call: gateway.ToolCall{ID: "call_1", Name: "shell"}, Start: at(21), End: at(60),
		Result: gateway.StepResult{Executed: true, Detail: &gateway.ShellDetail{ContainerID: "cntr_x", Outputs: []tool.CommandOutput{
			{Outcome: tool.Outcome{Type: "exit", ExitCode: &exit0}, Start: at(22), End: at(40)},
			{Outcome: tool.Outcome{Type: "exit", ExitCode: &exit3}, Start: at(41), End: at(59)}}}}}
	n := &traceNote{run: &gateway.Run{Model: gateway.Model{Provider: "openai", Name: "gpt-5", API: "responses"}},
		res: &gateway.Result{Stop: gateway.StopEnd, Model: "gpt-5", ContainerID: "cntr_x", CostMicroUSD: 3000, ToolCallsRequested: 1, ToolCallsExecuted: 1,
			Usage: gateway.Usage{InputTokens: 130, OutputTokens: 17},
			Items: []gateway.Item{{Kind: gateway.ItemStep, Step: step}, {Kind: gateway.ItemText, Text: "done"}},
			Calls: []gateway.UpstreamCall{{Start: at(1), End: at(20), ID: "resp_1", Model: "gpt-5", Stop: gateway.StopToolUse, Usage: gateway.Usage{InputTokens: 100, OutputTokens: 10}},
				{Start: at(61), End: at(99), ID: "resp_2", Model: "gpt-5", Stop: gateway.StopEnd, Usage: gateway.Usage{InputTokens: 30, OutputTokens: 7}}}}}
	p := Principal{Account: "acme", Workspace: "a"}
	rcv := otlptest.NewReceiver()
	b.Cleanup(rcv.Close)
	b.Run("shellgate-record", func(b *testing.B) {
		bc, err := broadcast.New([]broadcast.Destination{{Type: broadcast.TypeOTLPHTTP, Endpoint: rcv.URL, Name: "x"}}, broadcast.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			bc.Record(requestSpan("responses", "POST", "/v1/responses", p, at(0), at(100), 200, false, n))
		}
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		bc.Shutdown(ctx)
	})
	b.Run("sdk-inline", func(b *testing.B) {
		exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(rcv.URL+"/v1/traces"))
		if err != nil {
			b.Fatal(err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		tr := tp.Tracer("bench")
		var build func(ctx context.Context, s *broadcast.Span)
		build = func(ctx context.Context, s *broadcast.Span) {
			ctx, sp := tr.Start(ctx, s.Name, trace.WithTimestamp(s.Start), trace.WithSpanKind(s.Kind), trace.WithAttributes(s.Attrs...))
			for i := range s.Children {
				build(ctx, &s.Children[i])
			}
			sp.End(trace.WithTimestamp(s.End))
		}
		b.ReportAllocs()
		for b.Loop() {
			// The same attributes from the same Result, then the spans.
			build(context.Background(), requestSpan("responses", "POST", "/v1/responses", p, at(0), at(100), 200, false, n))
		}
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tp.Shutdown(ctx)
	})
}
