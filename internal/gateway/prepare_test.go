package gateway_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
)

// preparing is a scripted upstream that is a gateway.Preparer: it records
// what each Prepare saw and checks that each Turn starts only once the
// Prepares of the turns before it (each of which ran tools) have returned.
type preparing struct {
	*gatewaytest.Script
	t        *testing.T
	mu       sync.Mutex
	done     int   // Prepares returned
	turns    int   // Turns started
	prepared []int // len(req.Messages) of each Prepare
	streamed []bool
}

func (u *preparing) Prepare(ctx context.Context, req *gateway.Request, stream bool) {
	u.mu.Lock()
	u.prepared = append(u.prepared, len(req.Messages))
	u.streamed = append(u.streamed, stream)
	u.mu.Unlock()
	if req.Encoded == nil {
		u.t.Error("Prepare got a request without the run's memo")
	}
	if last := req.Messages[len(req.Messages)-1]; last.Role != gateway.RoleAssistant {
		u.t.Errorf("Prepare's conversation ends with a %s message, not the model's turn", last.Role)
	}
	time.Sleep(20 * time.Millisecond) // longer than the tools: the Turn must wait
	u.mu.Lock()
	u.done++
	u.mu.Unlock()
}

func (u *preparing) Turn(ctx context.Context, req *gateway.Request, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	u.mu.Lock()
	if u.done != u.turns {
		u.t.Errorf("turn %d started after %d Prepares had returned, want %d", u.turns+1, u.done, u.turns)
	}
	u.turns++
	u.mu.Unlock()
	return u.Script.Turn(ctx, req, onDelta)
}

// counting is a server tool that answers at once.
type counting struct{ n *int }

func (c counting) Function() gateway.Tool { return gateway.ShellFunction("shell") }

func (c counting) Run(ctx context.Context, sb gateway.SandboxFunc, call gateway.ToolCall, onOutput func(cmd, stream int, text string)) gateway.StepResult {
	*c.n++
	return gateway.StepResult{Content: "ok", Executed: true}
}

// TestPreparerOverlapsTools: the loop calls an upstream's Prepare with the
// conversation up to each turn that runs server tools, and only for
// those (not for a turn that ends the run, nor one that calls a client
// tool), streamed or not, and never lets the next Turn overlap it.
func TestPreparerOverlapsTools(t *testing.T) {
	args := map[string]any{"commands": []string{"true"}}
	for _, stream := range []bool{false, true} {
		steps := 0
		u := &preparing{t: t, Script: gatewaytest.NewScript(
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("c1", "shell", args)}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("two at once"), gatewaytest.Call("c2", "shell", args), gatewaytest.Call("c3", "shell", args)}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("c4", "shell", args), gatewaytest.Call("c5", "client_fn", args)}},
		)}
		run := &gateway.Run{
			Model:       gateway.Model{Provider: "p", Name: "m", Upstream: u},
			Request:     &gateway.Request{Messages: []gateway.Message{{Role: gateway.RoleUser, Parts: []gateway.Part{gatewaytest.Text("go")}}}},
			ServerTools: map[string]gateway.ServerTool{"shell": counting{&steps}},
		}
		if stream {
			run.Sink = nopSink{}
		}
		res, err := gateway.Execute(context.Background(), run)
		if err != nil {
			t.Fatal(err)
		}
		if res.Stop != gateway.StopToolUse || res.UpstreamCalls != 3 || steps != 4 {
			t.Fatalf("stream=%v: stop %s after %d upstream calls and %d steps, want tool_use after 3 and 4", stream, res.Stop, res.UpstreamCalls, steps)
		}
		// Turns 1 and 2 ran tools: Prepare saw [user, assistant] and
		// [user, assistant, results, assistant]; turn 3 calls a client tool.
		if len(u.prepared) != 2 || u.prepared[0] != 2 || u.prepared[1] != 4 {
			t.Fatalf("stream=%v: Prepare saw conversations of %v messages, want [2 4]", stream, u.prepared)
		}
		for _, s := range u.streamed {
			if s != stream {
				t.Fatalf("Prepare was told stream=%v in a run with stream=%v", s, stream)
			}
		}
	}
}

type nopSink struct{}

func (nopSink) TextDelta(string)                           {}
func (nopSink) TextDone(string)                            {}
func (nopSink) ClientCall(gateway.ToolCall)                {}
func (nopSink) StepStart(*gateway.Step)                    {}
func (nopSink) StepOutput(*gateway.Step, int, int, string) {}
func (nopSink) StepDone(*gateway.Step)                     {}
