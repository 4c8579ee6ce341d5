package responses

import (
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
