package server

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/shellgate/shellgate/internal/broadcast"
	"github.com/shellgate/shellgate/internal/broadcast/otlptest"
	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/tool"
)

// metricValue reads one series of a /metrics text (-1 when absent).
func metricValue(text, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// waitMetric polls /metrics until series has the value want (the export
// runs after the response, on the destination's worker).
func waitMetric(t *testing.T, e *env, series string, want float64) {
	t.Helper()
	var got float64
	for range 200 {
		_, body := e.doH("GET", "/metrics", nil, nil)
		if got = metricValue(string(body), series); got == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s = %v, want %v", series, got, want)
}

// newBroadcast is a Broadcaster to dests, shut down when t ends.
func newBroadcast(t *testing.T, dests ...broadcast.Destination) *broadcast.Broadcaster {
	t.Helper()
	bc, err := broadcast.New(dests, broadcast.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		bc.Shutdown(ctx)
	})
	return bc
}

// TestTraceBroadcast: a real Responses request whose (in-process,
// scripted) model runs a shell call of two commands in a real sandbox,
// broadcast to three OTLP/HTTP receivers on loopback — one healthy, one
// that hangs, one that answers 500.
func TestTraceBroadcast(t *testing.T) {
	good, hung, broken := otlptest.NewReceiver(), otlptest.NewReceiver(), otlptest.NewReceiver()
	t.Cleanup(good.Close)
	t.Cleanup(hung.Close)
	t.Cleanup(broken.Close)
	hung.Hang()
	broken.SetStatus(http.StatusInternalServerError)
	bc := newBroadcast(t,
		broadcast.Destination{Type: broadcast.TypeOTLPHTTP, Endpoint: good.URL, Name: "good", Headers: map[string]string{"X-Team": "gw"}},
		broadcast.Destination{Type: broadcast.TypeOTLPHTTP, Endpoint: hung.URL, Name: "hung", QueueSize: 1, Timeout: time.Minute},
		broadcast.Destination{Type: broadcast.TypeOTLPHTTP, Endpoint: broken.URL, Name: "broken", MaxBatch: 1})
	models := gatewaytest.Models{}
	e := newEnv(t, "crun", "default", func(c *Config) { c.Models = models; c.Broadcast = bc })
	e.srv.cfg.Logs = e.st.Logs() // as TestRequestLogs does
	shellTool := []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_auto"}}}

	// The workspace's request log is on too: both observers of the run
	// (trace and log) see it.
	if st, b := e.do(http.MethodPut, "/api/v1/logging", e.keyA, map[string]any{"enabled": true}); st != http.StatusOK {
		t.Fatalf("PUT /api/v1/logging: %d %s", st, b)
	}
	// 1: a shell call of two commands, then the answer.
	models["scripted"] = gatewaytest.NewScript(
		gatewaytest.Turn{Parts: []gateway.Part{shellCall("call_1", "echo hi", "exit 3")}, Usage: gateway.Usage{InputTokens: 100, OutputTokens: 10}},
		gatewaytest.EchoResult())
	st, body := e.do("POST", "/v1/responses", e.keyA, map[string]any{"model": "scripted/m", "input": "go", "tools": shellTool})
	if st != http.StatusOK {
		t.Fatalf("request 1: %d %s", st, body)
	}
	cid := regexp.MustCompile(`cntr_[A-Za-z0-9]+`).Find(body)
	if cid == nil {
		t.Fatalf("no container id in %s", body)
	}
	// The hung destination took request 1's trace and holds it: requests
	// 2 and 3 are answered all the same while it is still blocked.
	if err := hung.WaitArrived(1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 3; i++ {
		models["scripted"] = gatewaytest.NewScript(gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("hello")}})
		if st, body := e.do("POST", "/v1/responses", e.keyA, map[string]any{"model": "scripted/m", "input": "hi"}); st != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, st, body)
		}
	}
	if n := hung.Attempts(); n != 1 {
		t.Fatalf("the hung destination got %d requests, want the 1 it holds", n)
	}
	select {
	case <-hung.Arrived():
		t.Fatal("the hung destination got a second request")
	default:
	}
	// Its queue (1) holds request 2's trace; request 3's was dropped.
	waitMetric(t, e, `shellgate_broadcast_dropped_total{destination="hung"}`, 1)
	waitMetric(t, e, `shellgate_broadcast_queued{destination="hung"}`, 1)
	// 500 is not retryable in OTLP: each trace failed at once.
	waitMetric(t, e, `shellgate_broadcast_failed_total{destination="broken"}`, 3)
	waitMetric(t, e, `shellgate_broadcast_sent_total{destination="good"}`, 3)
	if n := broken.Attempts(); n != 3 {
		t.Errorf("the 500 destination got %d requests, want 3 (no retries)", n)
	}

	logs := e.requestLogs(t, e.keyA, "?api=responses")
	if len(logs.Data) != 3 {
		t.Fatalf("request log: %d records, want 3", len(logs.Data))
	}
	first := e.logRecord(t, e.keyA, logs.Data[2].ID)
	var logged []string
	for _, it := range first.Items {
		if it.Type == "command" {
			logged = append(logged, it.Command)
		}
	}
	if len(logged) != 2 || logged[0] != "echo hi" || logged[1] != "exit 3" {
		t.Fatalf("request 1's log beside its trace: commands %q", logged)
	}

	spans := good.Spans()
	if len(good.Errors()) > 0 || good.Headers()[0].Get("X-Team") != "gw" {
		t.Fatalf("receiver: %v %v", good.Errors(), good.Headers()[0])
	}
	// Request 1's trace: its root is the first root span received.
	var root *tracepb.Span
	for _, s := range spans {
		if len(s.ParentSpanId) == 0 && otlptest.Int(s.Attributes, "gen_ai.usage.input_tokens") == 130 {
			root = s
		}
	}
	if root == nil {
		t.Fatalf("no root span of request 1 among %d spans", len(spans))
	}
	children := func(p *tracepb.Span) []*tracepb.Span {
		var out []*tracepb.Span
		for _, s := range spans {
			if bytes.Equal(s.ParentSpanId, p.SpanId) && bytes.Equal(s.TraceId, p.TraceId) {
				out = append(out, s)
			}
		}
		return out
	}
	ra := root.Attributes
	if root.Name != "POST /v1/responses" || root.Kind != tracepb.Span_SPAN_KIND_SERVER ||
		otlptest.Int(ra, "http.response.status_code") != 200 || otlptest.Str(ra, "http.route") != "/v1/responses" ||
		otlptest.Str(ra, "shellgate.api") != "responses" || otlptest.Str(ra, "gen_ai.request.model") != "scripted/m" ||
		otlptest.Str(ra, "gen_ai.provider.name") != "scripted" || otlptest.Int(ra, "gen_ai.usage.output_tokens") != 17 ||
		otlptest.Str(ra, "container.id") != string(cid) || otlptest.Float(ra, "shellgate.cost.usd") <= 0 ||
		otlptest.Str(ra, "shellgate.account") != "acme" || otlptest.Str(ra, "shellgate.workspace") != "a" ||
		otlptest.Int(ra, "shellgate.tool_calls.executed") != 1 || otlptest.Str(ra, "shellgate.stop_reason") != "end" {
		t.Errorf("root %s %v: %v", root.Name, root.Kind, ra)
	}
	var calls, steps []*tracepb.Span
	for _, c := range children(root) {
		switch c.Name {
		case "chat m":
			calls = append(calls, c)
		case "execute_tool shell":
			steps = append(steps, c)
		default:
			t.Errorf("unexpected child %q", c.Name)
		}
	}
	if len(calls) != 2 || len(steps) != 1 {
		t.Fatalf("%d upstream call spans, %d tool spans", len(calls), len(steps))
	}
	if calls[0].StartTimeUnixNano > calls[1].StartTimeUnixNano {
		calls[0], calls[1] = calls[1], calls[0]
	}
	for i, want := range [][2]int64{{100, 10}, {30, 7}} {
		c := calls[i]
		if c.Kind != tracepb.Span_SPAN_KIND_CLIENT || otlptest.Int(c.Attributes, "gen_ai.usage.input_tokens") != want[0] ||
			otlptest.Int(c.Attributes, "gen_ai.usage.output_tokens") != want[1] || otlptest.Str(c.Attributes, "gen_ai.operation.name") != "chat" ||
			otlptest.Str(c.Attributes, "gen_ai.request.model") != "m" {
			t.Errorf("call %d: %v %v", i, c.Kind, c.Attributes)
		}
	}
	step := steps[0]
	sa := step.Attributes
	if otlptest.Str(sa, "gen_ai.tool.name") != "shell" || otlptest.Str(sa, "gen_ai.tool.call.id") != "call_1" ||
		otlptest.Str(sa, "container.id") != string(cid) || !otlptest.Bool(sa, "shellgate.tool.executed") {
		t.Errorf("tool span %v", sa)
	}
	// The real times, in order: the first call, the step, the second call.
	within := func(in, out *tracepb.Span) bool {
		return in.StartTimeUnixNano >= out.StartTimeUnixNano && in.EndTimeUnixNano <= out.EndTimeUnixNano && in.StartTimeUnixNano <= in.EndTimeUnixNano
	}
	if !within(calls[0], root) || !within(step, root) || !within(calls[1], root) ||
		calls[0].EndTimeUnixNano > step.StartTimeUnixNano || step.EndTimeUnixNano > calls[1].StartTimeUnixNano {
		t.Errorf("times: root %d-%d, call %d-%d, step %d-%d, call %d-%d", root.StartTimeUnixNano, root.EndTimeUnixNano,
			calls[0].StartTimeUnixNano, calls[0].EndTimeUnixNano, step.StartTimeUnixNano, step.EndTimeUnixNano, calls[1].StartTimeUnixNano, calls[1].EndTimeUnixNano)
	}
	cmds := children(step)
	if len(cmds) != 2 {
		t.Fatalf("%d command spans", len(cmds))
	}
	if cmds[0].StartTimeUnixNano > cmds[1].StartTimeUnixNano {
		cmds[0], cmds[1] = cmds[1], cmds[0]
	}
	for i, want := range []int64{0, 3} {
		c := cmds[i]
		if c.Name != "command" || otlptest.Int(c.Attributes, "process.exit.code") != want || otlptest.Str(c.Attributes, "shellgate.command.outcome") != "exit" ||
			otlptest.Int(c.Attributes, "shellgate.command.index") != int64(i) || !within(c, step) {
			t.Errorf("command %d: %v", i, c.Attributes)
		}
	}
	if cmds[0].EndTimeUnixNano > cmds[1].StartTimeUnixNano {
		t.Error("the commands' spans overlap")
	}

	// A request refused before the model (unknown provider) is traced
	// too: the root alone, with its status.
	if st, _ := e.do("POST", "/v1/messages", e.keyA, map[string]any{"model": "nope/m", "max_tokens": 10,
		"messages": []any{map[string]any{"role": "user", "content": "hi"}}}); st != http.StatusNotFound {
		t.Fatalf("unknown provider: %d", st)
	}
	waitMetric(t, e, `shellgate_broadcast_sent_total{destination="good"}`, 4)
	last := good.Spans()[len(good.Spans())-1]
	if last.Name != "POST /v1/messages" || otlptest.Int(last.Attributes, "http.response.status_code") != 404 ||
		otlptest.Str(last.Attributes, "error.type") != "404" || last.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("refused request's span %s %v %v", last.Name, last.Attributes, last.Status)
	}

	// Released, the hung destination sends what it held and kept (request
	// 4's trace found its queue full too).
	hung.Release()
	waitMetric(t, e, `shellgate_broadcast_sent_total{destination="hung"}`, 2)
	waitMetric(t, e, `shellgate_broadcast_dropped_total{destination="hung"}`, 2)
}

// attrOf is the value of key among a (nil when absent).
func attrOf(a []attribute.KeyValue, key string) any {
	for _, kv := range a {
		if string(kv.Key) == key {
			return kv.Value.AsInterface()
		}
	}
	return nil
}

// The spans of a request whose second upstream call failed after a step
// whose command timed out: errors where they happened, and on the root.
func TestRequestSpanErrors(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	step := &gateway.Step{Call: gateway.ToolCall{ID: "c1", Name: "shell"}, Start: at(10), End: at(20),
		Result: gateway.StepResult{Executed: true, Detail: &gateway.ShellDetail{Outputs: []tool.CommandOutput{
			{Outcome: tool.Outcome{Type: "timeout"}, Start: at(11), End: at(19)}}}}}
	refused := &gateway.Step{Call: gateway.ToolCall{ID: "c2", Name: "shell"}, Start: at(21), End: at(21),
		Result: gateway.StepResult{IsError: true, Detail: &gateway.ShellDetail{Error: "commands: required", ErrorCode: "invalid_tool_input"}}}
	upErr := &gateway.UpstreamError{Status: 503, Type: "overloaded_error", Message: "busy"}
	n := &traceNote{run: &gateway.Run{Model: gateway.Model{Provider: "p", Name: "m", API: "messages"}}, err: upErr,
		res: &gateway.Result{Items: []gateway.Item{{Kind: gateway.ItemStep, Step: step}, {Kind: gateway.ItemStep, Step: refused}},
			Calls: []gateway.UpstreamCall{{Start: at(1), End: at(9), Usage: gateway.Usage{InputTokens: 5}}, {Start: at(22), End: at(30), Err: upErr}}}}
	root := requestSpan("messages", "POST", "/v1/messages", Principal{Account: "a", Workspace: "w"}, at(0), at(31), 503, false, n)
	if root.Error == "" || attrOf(root.Attrs, "error.type") != "503" || attrOf(root.Attrs, "http.response.status_code") != int64(503) {
		t.Errorf("root: %q %v", root.Error, root.Attrs)
	}
	if root.Count() != 6 || len(root.Children) != 4 {
		t.Fatalf("%d spans, %d children", root.Count(), len(root.Children))
	}
	failed := root.Children[1]
	if failed.Error == "" || attrOf(failed.Attrs, "error.type") != "overloaded_error" || attrOf(failed.Attrs, "http.response.status_code") != int64(503) ||
		attrOf(failed.Attrs, "gen_ai.usage.input_tokens") != nil {
		t.Errorf("failed call: %q %v", failed.Error, failed.Attrs)
	}
	if ok := root.Children[0]; ok.Error != "" || attrOf(ok.Attrs, "gen_ai.usage.input_tokens") != int64(5) {
		t.Errorf("first call: %q %v", ok.Error, ok.Attrs)
	}
	cmd := root.Children[2].Children[0]
	if cmd.Error == "" || attrOf(cmd.Attrs, "error.type") != "timeout" || attrOf(cmd.Attrs, "process.exit.code") != nil {
		t.Errorf("timed-out command: %q %v", cmd.Error, cmd.Attrs)
	}
	if r := root.Children[3]; r.Error != "commands: required" || attrOf(r.Attrs, "error.type") != "invalid_tool_input" || len(r.Children) != 0 {
		t.Errorf("refused step: %q %v", r.Error, r.Attrs)
	}
	// A client that went away.
	gone := requestSpan("messages", "POST", "/v1/messages", Principal{}, at(0), at(1), 200, true, &traceNote{})
	if attrOf(gone.Attrs, "error.type") != "canceled" || gone.Error == "" {
		t.Errorf("gone: %v", gone.Attrs)
	}
}

// TestTraceChatCompletions: the Chat Completions route has no run, but its
// trace has the upstream call all the same — for the pass-through to a
// chat_completions provider (status, no token counts: the answer is
// copied, not read), for one translated to a messages provider (token
// counts from the adapter's turn) and for an upstream error.
func TestTraceChatCompletions(t *testing.T) {
	rcv := otlptest.NewReceiver()
	t.Cleanup(rcv.Close)
	bc := newBroadcast(t, broadcast.Destination{Type: broadcast.TypeOTLPHTTP, Endpoint: rcv.URL, Name: "r", MaxBatch: 1})
	e, _ := chatEnvTB(t, &scripted.Script{Models: map[string][]scripted.Turn{
		"m1":      {{Text: "pass-through", Usage: scripted.Usage{InputTokens: 12, OutputTokens: 3}}},
		"sonnet":  {{Text: "translated", Usage: scripted.Usage{InputTokens: 21, OutputTokens: 4}}},
		"limited": {{Error: &scripted.Error{Status: 429, Type: "rate_limit_exceeded", Message: "slow down"}}},
	}}, func(c *Config) { c.Broadcast = bc })
	for _, model := range []string{"local/m1", "claude/sonnet", "local/limited"} {
		e.do("POST", "/v1/chat/completions", e.keyA, map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	}
	waitMetric(t, e, `shellgate_broadcast_sent_total{destination="r"}`, 3)
	spans := rcv.Spans()
	type want struct {
		status         int64
		input, output  int64
		callName, errT string
	}
	wants := map[string]want{
		"m1":      {200, 0, 0, "chat m1", ""},
		"sonnet":  {200, 21, 4, "chat sonnet", ""},
		"limited": {429, 0, 0, "chat limited", "429"},
	}
	seen := 0
	for _, root := range spans {
		if root.Name != "POST /v1/chat/completions" {
			continue
		}
		model := otlptest.Str(root.Attributes, "gen_ai.request.model")
		_, name, _ := strings.Cut(model, "/")
		w, ok := wants[name]
		if !ok {
			t.Fatalf("root span for model %q", model)
		}
		seen++
		if otlptest.Int(root.Attributes, "http.response.status_code") != w.status || otlptest.Str(root.Attributes, "shellgate.api") != "chat_completions" {
			t.Errorf("%s root: %v", model, root.Attributes)
		}
		var calls []*tracepb.Span
		for _, s := range spans {
			if bytes.Equal(s.ParentSpanId, root.SpanId) && bytes.Equal(s.TraceId, root.TraceId) {
				calls = append(calls, s)
			}
		}
		if len(calls) != 1 {
			t.Fatalf("%s: %d child spans, want the upstream call", model, len(calls))
		}
		c := calls[0]
		if c.Name != w.callName || c.Kind != tracepb.Span_SPAN_KIND_CLIENT || otlptest.Str(c.Attributes, "gen_ai.operation.name") != "chat" ||
			c.StartTimeUnixNano < root.StartTimeUnixNano || c.EndTimeUnixNano > root.EndTimeUnixNano || c.StartTimeUnixNano > c.EndTimeUnixNano {
			t.Errorf("%s call span %s %v %v", model, c.Name, c.Kind, c.Attributes)
		}
		if otlptest.Int(c.Attributes, "gen_ai.usage.input_tokens") != w.input || otlptest.Int(c.Attributes, "gen_ai.usage.output_tokens") != w.output {
			t.Errorf("%s call tokens: %v", model, c.Attributes)
		}
		if got := otlptest.Str(c.Attributes, "error.type"); got != w.errT {
			t.Errorf("%s call error.type %q, want %q", model, got, w.errT)
		}
	}
	if seen != 3 {
		t.Fatalf("%d chat root spans of %d spans", seen, len(spans))
	}
}
