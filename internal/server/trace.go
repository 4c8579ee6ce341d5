package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/shellgate/shellgate/internal/broadcast"
	"github.com/shellgate/shellgate/internal/gateway"
)

// Trace broadcast (SPEC §6): when a gateway request (Responses, Messages,
// Gemini, Chat Completions) ends, its trace goes to Config.Broadcast's
// destinations — a root span for the request (kind server), a child per
// upstream call (kind client, named "chat MODEL" as in OpenTelemetry's
// GenAI conventions), a child per server tool call ("execute_tool NAME")
// and, under a shell call, a child per command. Times are the ones the
// gateway measured; attributes follow the GenAI and HTTP semantic
// conventions (gen_ai.usage.input_tokens, http.response.status_code, ...)
// plus shellgate.* for what they have no name for (cost, stop reason,
// command outcome). A trace carries no prompt, completion, command text or
// output: only what is measured and who asked.

// traceNote collects what a traced request's handler learned.
type traceNote struct {
	run   *gateway.Run
	res   *gateway.Result
	err   error
	model string // the client's model name, for routes without a run
	// call is the Chat Completions route's one upstream call (that route
	// has no run), and callModel the model it went to.
	call      *gateway.UpstreamCall
	callModel gateway.Model
}

type traceNoteKey struct{}

// noteModel records the client's model name for the request's trace.
func noteModel(ctx context.Context, model string) {
	if n, ok := ctx.Value(traceNoteKey{}).(*traceNote); ok {
		n.model = model
	}
}

// noteCall records the upstream call of a route without a run (Chat
// Completions) for the request's trace.
func noteCall(ctx context.Context, m gateway.Model, c gateway.UpstreamCall) {
	if n, ok := ctx.Value(traceNoteKey{}).(*traceNote); ok && !c.Start.IsZero() {
		n.call, n.callModel = &c, m
	}
}

// traced wraps a gateway route's handler so that its trace is broadcast
// when it returns (nothing without Config.Broadcast).
func (s *Server) traced(api, pattern string, h apiHandler) apiHandler {
	b := s.cfg.Broadcast
	if b == nil {
		return h
	}
	method, route, _ := strings.Cut(pattern, " ")
	return func(w http.ResponseWriter, r *http.Request, p Principal) error {
		b := s.cfg.Broadcast // read per request: benchmarks turn it off and on
		if b == nil {
			return h(w, r, p)
		}
		start := time.Now()
		n := &traceNote{}
		ctx := gateway.WithObserver(r.Context(), func(run *gateway.Run, res *gateway.Result, err error) {
			n.run, n.res, n.err = run, res, err
		})
		ctx = context.WithValue(ctx, traceNoteKey{}, n)
		err := h(w, r.WithContext(ctx), p)
		status := http.StatusOK
		if ae := (*apiError)(nil); errors.As(err, &ae) {
			status = ae.status
		} else if err != nil {
			status = http.StatusInternalServerError
		} else if rec, ok := w.(*recorder); ok && rec.status != 0 {
			status = rec.status
		}
		b.Record(requestSpan(api, method, route, p, start, time.Now(), status, r.Context().Err() != nil, n))
		return err
	}
}

// requestSpan is the trace of one gateway request.
func requestSpan(api, method, route string, p Principal, start, end time.Time, status int, gone bool, n *traceNote) *broadcast.Span {
	root := &broadcast.Span{Name: method + " " + route, Kind: trace.SpanKindServer, Start: start, End: end}
	a := []attribute.KeyValue{
		semconv.HTTPRequestMethodKey.String(method),
		semconv.HTTPRoute(route),
		semconv.HTTPResponseStatusCode(status),
		attribute.String("shellgate.api", api),
		attribute.String("shellgate.account", p.Account),
		attribute.String("shellgate.workspace", p.Workspace),
		semconv.GenAIOperationNameInvokeAgent,
	}
	model := n.model
	if n.run != nil {
		model = n.run.Model.Provider + "/" + n.run.Model.Name
		a = append(a, semconv.GenAIProviderNameKey.String(n.run.Model.Provider), attribute.String("shellgate.upstream.api", n.run.Model.API))
	}
	if model != "" {
		a = append(a, semconv.GenAIRequestModel(model))
	}
	switch {
	case gone:
		a = append(a, semconv.ErrorTypeKey.String("canceled"))
		root.Error = "the client went away"
	case status >= 400:
		a = append(a, semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		if status >= 500 {
			root.Error = http.StatusText(status)
			if n.err != nil {
				root.Error = n.err.Error()
			}
		}
	}
	if res := n.res; res != nil {
		a = append(a, usageAttrs(res.Usage)...)
		a = append(a,
			attribute.Float64("shellgate.cost.usd", float64(res.CostMicroUSD)/1e6),
			attribute.Int64("shellgate.cost.micro_usd", res.CostMicroUSD),
			attribute.Int("shellgate.tool_calls.requested", res.ToolCallsRequested),
			attribute.Int("shellgate.tool_calls.executed", res.ToolCallsExecuted),
			attribute.Int("shellgate.tool_calls.native", res.ToolCallsNative),
			attribute.Int("shellgate.upstream.calls", len(res.Calls)))
		if res.Model != "" {
			a = append(a, semconv.GenAIResponseModel(res.Model))
		}
		if res.Stop != "" {
			a = append(a, attribute.String("shellgate.stop_reason", string(res.Stop)))
		}
		if res.ContainerID != "" {
			a = append(a, semconv.ContainerID(res.ContainerID))
		}
		for _, c := range res.Calls {
			root.Children = append(root.Children, callSpan(n.run.Model, c))
		}
		for _, it := range res.Items {
			if it.Kind == gateway.ItemStep && !it.Step.Start.IsZero() {
				root.Children = append(root.Children, stepSpan(it.Step))
			}
		}
	}
	if n.call != nil && n.run == nil {
		a = append(a, semconv.GenAIProviderNameKey.String(n.callModel.Provider), attribute.String("shellgate.upstream.api", n.callModel.API))
		if n.call.Err == nil {
			a = append(a, usageAttrs(n.call.Usage)...)
		}
		root.Children = append(root.Children, callSpan(n.callModel, *n.call))
	}
	root.Attrs = a
	return root
}

func usageAttrs(u gateway.Usage) []attribute.KeyValue {
	a := []attribute.KeyValue{semconv.GenAIUsageInputTokens(int(u.InputTokens)), semconv.GenAIUsageOutputTokens(int(u.OutputTokens))}
	if u.CacheReadTokens > 0 {
		a = append(a, semconv.GenAIUsageCacheReadInputTokens(int(u.CacheReadTokens)))
	}
	if u.CacheWriteTokens > 0 {
		a = append(a, semconv.GenAIUsageCacheCreationInputTokens(int(u.CacheWriteTokens)))
	}
	return a
}

// callSpan is one upstream call.
func callSpan(m gateway.Model, c gateway.UpstreamCall) broadcast.Span {
	sp := broadcast.Span{Name: "chat " + m.Name, Kind: trace.SpanKindClient, Start: c.Start, End: c.End}
	a := []attribute.KeyValue{
		semconv.GenAIOperationNameChat,
		semconv.GenAIProviderNameKey.String(m.Provider),
		semconv.GenAIRequestModel(m.Name),
	}
	if c.Err != nil {
		typ := "error"
		if ue, ok := gateway.AsUpstreamError(c.Err); ok {
			a = append(a, semconv.HTTPResponseStatusCode(ue.Status))
			typ = strconv.Itoa(ue.Status)
			if ue.Type != "" {
				typ = ue.Type
			}
		} else if errors.Is(c.Err, context.Canceled) {
			typ = "canceled"
		}
		a = append(a, semconv.ErrorTypeKey.String(typ))
		sp.Error = c.Err.Error()
	} else {
		a = append(a, usageAttrs(c.Usage)...)
		a = append(a, semconv.GenAIResponseFinishReasons(string(c.Stop)))
		if c.Model != "" {
			a = append(a, semconv.GenAIResponseModel(c.Model))
		}
		if c.ID != "" {
			a = append(a, semconv.GenAIResponseID(c.ID))
		}
	}
	sp.Attrs = a
	return sp
}

// stepSpan is one server tool call, with its commands.
func stepSpan(st *gateway.Step) broadcast.Span {
	sp := broadcast.Span{Name: "execute_tool " + st.Call.Name, Kind: trace.SpanKindInternal, Start: st.Start, End: st.End}
	a := []attribute.KeyValue{
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolName(st.Call.Name),
		semconv.GenAIToolCallID(st.Call.ID),
		semconv.GenAIToolTypeKey.String("extension"),
		attribute.Bool("shellgate.tool.executed", st.Result.Executed),
		attribute.Bool("shellgate.tool.native", st.Native),
	}
	code, msg := "", ""
	switch d := st.Result.Detail.(type) {
	case *gateway.ShellDetail:
		if d.ContainerID != "" {
			a = append(a, semconv.ContainerID(d.ContainerID))
		}
		code, msg = d.ErrorCode, d.Error
		for i, o := range d.Outputs {
			if o.Start.IsZero() {
				continue
			}
			sp.Children = append(sp.Children, commandSpan(i, o.Outcome.Type, o.Outcome.ExitCode, o.Truncated, o.Start, o.End))
		}
	case *gateway.CodeExecDetail:
		switch c := d.Content.(type) {
		case *gateway.BashResult:
			a = append(a, semconv.ProcessExitCode(c.ReturnCode))
		case *gateway.CodeExecError:
			code, msg = c.ErrorCode, c.ErrorMessage
		}
	case *gateway.InterpreterDetail:
		if d.ContainerID != "" {
			a = append(a, semconv.ContainerID(d.ContainerID))
		}
		code, msg = d.ErrorCode, d.Error
		if d.Ran {
			o := d.Output.Outcome
			a = append(a, attribute.String("shellgate.command.outcome", o.Type))
			if o.ExitCode != nil {
				a = append(a, semconv.ProcessExitCode(*o.ExitCode))
			}
			if d.Output.Restarted != "" {
				a = append(a, attribute.Bool("shellgate.python.restarted", true))
			}
		}
	}
	if st.Result.IsError {
		if code == "" {
			code = "tool_error"
		}
		if msg == "" {
			msg = code
		}
		a = append(a, semconv.ErrorTypeKey.String(code))
		sp.Error = msg
	}
	sp.Attrs = a
	return sp
}

func commandSpan(i int, outcome string, exit *int, truncated bool, start, end time.Time) broadcast.Span {
	sp := broadcast.Span{Name: "command", Kind: trace.SpanKindInternal, Start: start, End: end}
	a := []attribute.KeyValue{
		attribute.Int("shellgate.command.index", i),
		attribute.String("shellgate.command.outcome", outcome),
		attribute.Bool("shellgate.command.truncated", truncated),
	}
	if exit != nil {
		a = append(a, semconv.ProcessExitCode(*exit))
	}
	if outcome == "timeout" {
		a = append(a, semconv.ErrorTypeKey.String("timeout"))
		sp.Error = "the command timed out"
	}
	sp.Attrs = a
	return sp
}
