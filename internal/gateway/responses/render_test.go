package responses

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/tool"
)

// TestViewStepReusesArgs: a step whose ShellDetail kept the arguments it
// parsed shows the same as one whose arguments are parsed again, and
// arguments kept for another text (a tool that rewrote them) are not used.
func TestViewStepReusesArgs(t *testing.T) {
	for _, args := range []string{`{"commands":["ls","pwd"]}`, `{"commands":["true"],"timeout_ms":5000,"max_output_length":100}`,
		`{"commands":null}`, `{}`, `{"commands":["a"]} {"x":1}`, `not json`, `{"commands":"ls"}`, ``} {
		a, err := tool.ParseShellArgs([]byte(args))
		d := &gateway.ShellDetail{Outputs: []tool.CommandOutput{}}
		if err == nil {
			d.Args, d.ArgsOf = a, args
		}
		call := gateway.ToolCall{ID: "c1", Name: "shell", Arguments: args}
		kept := viewStep(&gateway.Step{Call: call, Result: gateway.StepResult{Detail: d}})
		parsed := viewStep(&gateway.Step{Call: call, Result: gateway.StepResult{Detail: &gateway.ShellDetail{Outputs: []tool.CommandOutput{}}}})
		if !reflect.DeepEqual(kept, parsed) {
			t.Errorf("%s: kept %+v, parsed %+v", args, kept, parsed)
		}
	}
	other := &gateway.ShellDetail{Args: tool.ShellArgs{Commands: []string{"rewritten"}}, ArgsOf: `{"commands":["rewritten"]}`}
	v := viewStep(&gateway.Step{Call: gateway.ToolCall{Arguments: `{"commands":["original"]}`}, Result: gateway.StepResult{Detail: other}})
	if len(v.action.Commands) != 1 || v.action.Commands[0] != "original" {
		t.Errorf("arguments kept for another text were shown: %+v", v.action)
	}
}

// TestNewIDAndRaw: ids are the prefix and 48 lowercase hex digits, all
// different; raw's pooled encoder gives each item its own bytes, without
// HTML escaping or a trailing newline.
func TestNewIDAndRaw(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := newID(prefixMessage)
		if len(id) != len(prefixMessage)+48 || !strings.HasPrefix(id, prefixMessage) || strings.Trim(id[len(prefixMessage):], "0123456789abcdef") != "" || seen[id] {
			t.Fatalf("bad id %q", id)
		}
		seen[id] = true
	}
	a, b := raw(map[string]string{"t": "<a&b>"}), raw([]int{1, 2})
	c := raw(strings.Repeat("x", 100<<10))
	if string(a) != `{"t":"<a&b>"}` || string(b) != `[1,2]` || len(c) != 100<<10+2 {
		t.Errorf("raw: %s %s %d", a, b, len(c))
	}
}

// TestEncodeResponse: the response splices its items in with exactly the
// bytes encoding/json writes for the whole object, streamed and not, with
// strings before the output field that hold the sequence the splice
// looks for.
func TestEncodeResponse(t *testing.T) {
	hostile := []string{"", `,"output":null`, `x","output":null,"y`, "\"\\\n\u2028<>&\xff", strings.Repeat(`,"output":null`, 50)}
	items := [][]json.RawMessage{nil, {}, {json.RawMessage(`{"type":"message","content":[{"text":",\"output\":null"}]}`)},
		{raw(map[string]any{"a": 1}), raw([]any{"b", nil}), raw("c")}}
	n := 0
	for _, h := range hostile {
		for _, its := range items {
			h := h
			p := &parsed{model: h, instructions: &h, user: h, metadata: map[string]string{h: h}}
			m := newMeta(p, h)
			for _, fail := range []*apiError{nil, {Status: 500, Message: h}} {
				r := m.response("completed", its, &gateway.Result{}, fail)
				r.ID = h
				want := raw(r)
				if its == nil {
					// Execute's nil output renders as [] (renderOutput's
					// is never nil).
					r.Output = []json.RawMessage{}
					want = raw(r)
					r.Output = nil
				}
				if got := encodeResponse(r); !bytes.Equal(got, want) {
					t.Fatalf("encodeResponse:\n got %s\nwant %s", got, want)
				}
				if !json.Valid(want) {
					t.Fatalf("not JSON: %s", want)
				}
				// Streamed: the same bytes as the event map.
				var w1, w2 httptest.ResponseRecorder
				w1.Body, w2.Body = new(bytes.Buffer), new(bytes.Buffer)
				s1, s2 := newStreamer(&w1, m), newStreamer(&w2, m)
				s1.seq, s2.seq = 7, 7
				r.Output = its
				if its == nil {
					r.Output = []json.RawMessage{}
				}
				s1.emit("response.completed", event{"response": r})
				s2.emitResponse("response.completed", r)
				if w1.Body.String() != w2.Body.String() || s2.seq != 8 {
					t.Fatalf("emitResponse:\n got %s\nwant %s", w2.Body, w1.Body)
				}
				n++
			}
		}
	}
	t.Logf("%d responses", n)
}

// BenchmarkEncodeResponse: the response of an 11-step shell run (22
// items) encoded whole by encoding/json (raw) and with its items spliced
// in (encodeResponse, what the frontend does).
func BenchmarkEncodeResponse(b *testing.B) {
	call := raw(shellCallItem{ID: "sh_0123456789abcdef0123456789abcdef0123456789abcdef", Type: "shell_call", Status: "completed", CallID: "call_0123456789abcdef",
		Action:      shellActionOut{Commands: []string{"python3 -c 'import pandas as pd; print(pd.read_csv(\"/mnt/data/sales.csv\").describe())'"}},
		Environment: containerRef{Type: "container_reference", ContainerID: "cntr_0123456789abcdef0123456789abcdef"}})
	code := 0
	out := raw(shellOutputItem{ID: "sho_0123456789abcdef0123456789abcdef0123456789abcdef", Type: "shell_call_output", Status: "completed", CallID: "call_0123456789abcdef",
		Output: []tool.CommandOutput{{Stdout: strings.Repeat("count  12.000000\nmean   5.500000\n", 8), Outcome: tool.Outcome{Type: "exit", ExitCode: &code}}}})
	var items []json.RawMessage
	for range 11 {
		items = append(items, call, out)
	}
	instr := "You are a data analyst."
	r := newMeta(&parsed{model: "openai/gpt-5", instructions: &instr}, "cntr_0123456789abcdef0123456789abcdef").response("completed", items, &gateway.Result{}, nil)
	var ns [2]float64
	for i, k := range []string{"raw", "spliced"} {
		b.Run(k, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if k == "raw" {
					raw(r)
				} else {
					encodeResponse(r)
				}
			}
			ns[i] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if i == 1 && ns[0] > 0 {
				b.ReportMetric(ns[1]/ns[0], "spliced/raw")
			}
		})
	}
}

// TestResponseOpenRouterKeys: the response carries what OpenRouter's SDK
// requires: frequency_penalty and presence_penalty (null), and in
// usage.cost_details, whenever it is there, the upstream inference's input
// and output costs (0: Shellgate meters only its tools) beside the tools'
// cost; without a tool run there are no cost_details.
func TestResponseOpenRouterKeys(t *testing.T) {
	m := newMeta(&parsed{model: "m"}, "")
	for _, c := range []struct {
		name string
		res  *gateway.Result
		cost any
	}{
		{"tool ran", &gateway.Result{ToolCallsRequested: 1, ToolCallsExecuted: 1, CostMicroUSD: 3000},
			map[string]any{"server_tool_cost": 0.003, "upstream_inference_input_cost": 0.0, "upstream_inference_output_cost": 0.0}},
		{"no tool", &gateway.Result{}, nil},
	} {
		var got map[string]any
		if err := json.Unmarshal(raw(m.response("completed", nil, c.res, nil)), &got); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"frequency_penalty", "presence_penalty"} {
			if v, ok := got[k]; !ok || v != nil {
				t.Errorf("%s: %s = %v (present %v), want null", c.name, k, v, ok)
			}
		}
		cost := got["usage"].(map[string]any)["cost_details"]
		if !reflect.DeepEqual(cost, c.cost) {
			t.Errorf("%s: cost_details = %v, want %v", c.name, cost, c.cost)
		}
	}
}
