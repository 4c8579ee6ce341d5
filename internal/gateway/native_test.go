package gateway_test

import (
	"fmt"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/tool"
)

// countTool is counting under the name "count".
type countTool struct{ counting }

func (countTool) Function() gateway.Tool {
	return gateway.Tool{Name: "count", Parameters: []byte(`{"type":"object"}`)}
}

// TestHostedSteps: the loop's side of engine auto (native.go) — which
// tools go to the provider, the provider's runs as steps, and what the
// model reads of them next. No sandbox is given: opening one would panic.
func TestHostedSteps(t *testing.T) {
	zero := 0
	hosted := func(id string) gateway.Part {
		return gateway.Part{Kind: gateway.PartHosted, Hosted: &gateway.HostedCall{ID: id, Tool: gateway.NativeShell, Kind: gateway.HostedBash,
			Code: []string{"echo hi"}, Outputs: []tool.CommandOutput{{Stdout: "hi\n", Outcome: tool.Outcome{Type: "exit", ExitCode: &zero}}}}}
	}
	run := func(hosting gateway.Hosting, vendorSandbox bool, turns ...gatewaytest.Turn) (*gateway.Result, *gatewaytest.Script) {
		t.Helper()
		n := 0
		script := gatewaytest.NewScript(turns...)
		r := &gateway.Run{
			Model:       gateway.Model{API: gateway.APIResponses, Native: []string{gateway.NativeShell}, VendorSandbox: vendorSandbox, Upstream: script},
			Request:     &gateway.Request{Messages: []gateway.Message{{Role: gateway.RoleUser, Parts: []gateway.Part{gatewaytest.Text("go")}}}},
			ServerTools: map[string]gateway.ServerTool{"shell": gateway.ShellTool{Name: "shell"}, "count": countTool{counting{&n}}},
			Hosting:     map[string]gateway.Hosting{},
		}
		if hosting != 0 {
			r.Hosting["shell"] = hosting
		}
		res, err := gateway.Execute(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		return res, script
	}
	tools := func(s *gatewaytest.Script) string {
		var out []string
		for _, tl := range s.Requests()[0].Tools {
			out = append(out, tl.Name+"/"+tl.Native)
		}
		return fmt.Sprint(out)
	}

	t.Run("01 the provider's run is a native step of the tool; nothing runs here", func(t *testing.T) {
		res, s := run(gateway.HostAuto, false, gatewaytest.Turn{Parts: []gateway.Part{hosted("h1"), gatewaytest.Text("done")}})
		if tools(s) != "[count/ shell/shell]" {
			t.Fatalf("tools %s", tools(s))
		}
		st := res.Items[0].Step
		d, _ := st.Result.Detail.(*gateway.ShellDetail)
		if len(res.Items) != 2 || !st.Native || st.Call.ID != "h1" || st.Call.Arguments != `{"commands":["echo hi"]}` || d == nil || d.Outputs[0].Stdout != "hi\n" ||
			res.Items[1].Text != "done" || res.ToolCallsRequested != 1 || res.ToolCallsNative != 1 || res.ToolCallsExecuted != 0 || res.Stop != gateway.StopEnd {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("02 vendor_tools sandbox keeps a vendor type in the sandbox, not engine auto", func(t *testing.T) {
		_, s := run(gateway.HostVendor, true, gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("done")}})
		if tools(s) != "[count/ shell/]" {
			t.Fatalf("tools %s", tools(s))
		}
		_, s = run(gateway.HostAuto, true, gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("done")}})
		if tools(s) != "[count/ shell/shell]" {
			t.Fatalf("tools %s", tools(s))
		}
	})
	t.Run("03 runs of a hosted tool the upstream was not given are not shown", func(t *testing.T) {
		res, s := run(0, false, gatewaytest.Turn{Parts: []gateway.Part{hosted("h1"), gatewaytest.Text("done")}})
		if tools(s) != "[count/ shell/]" || len(res.Items) != 1 || res.Items[0].Text != "done" || res.ToolCallsRequested != 0 {
			t.Fatalf("tools %s, %+v", tools(s), res)
		}
	})
	t.Run("04 a provider's run past Shellgate's own limits is shown as it ran", func(t *testing.T) {
		h := hosted("h1")
		for len(h.Hosted.Code) <= tool.MaxCommands {
			h.Hosted.Code = append(h.Hosted.Code, "true")
			h.Hosted.Outputs = append(h.Hosted.Outputs, h.Hosted.Outputs[0])
		}
		res, _ := run(gateway.HostAuto, false, gatewaytest.Turn{Parts: []gateway.Part{h}})
		st := res.Items[0].Step
		d := st.Result.Detail.(*gateway.ShellDetail)
		if st.Result.IsError || len(d.Plan.Commands) != tool.MaxCommands+1 || len(d.Outputs) != tool.MaxCommands+1 {
			t.Fatalf("%v: %d commands, %d outputs", st.Result.IsError, len(d.Plan.Commands), len(d.Outputs))
		}
	})
	t.Run("05 beside a sandbox step, the model reads the provider's run as a call and its result", func(t *testing.T) {
		res, s := run(gateway.HostAuto, false,
			gatewaytest.Turn{Parts: []gateway.Part{hosted("h1"), gatewaytest.Call("c1", "count", map[string]any{})}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("done")}})
		msgs := s.Requests()[1].Messages
		asst, user := msgs[len(msgs)-2], msgs[len(msgs)-1]
		if len(asst.Parts) != 2 || asst.Parts[0].Kind != gateway.PartToolCall || asst.Parts[0].Call.Name != "shell" || asst.Parts[0].Call.ID != "h1" ||
			len(user.Parts) != 2 || user.Parts[0].Result.CallID != "h1" || user.Parts[0].Result.Content != `{"output":[{"stdout":"hi\n","stderr":"","outcome":{"type":"exit","exit_code":0}}]}` ||
			user.Parts[1].Result.CallID != "c1" {
			t.Fatalf("assistant %+v, user %+v", asst.Parts, user.Parts)
		}
		if res.ToolCallsRequested != 2 || res.ToolCallsNative != 1 || res.ToolCallsExecuted != 1 {
			t.Fatalf("%+v", res)
		}
	})
}
