package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/identity"
	"github.com/shellgate/shellgate/sandbox/egress"
)

// These tests drive the API-neutral loop (gateway.Execute) over the
// server's gateway.Sandboxes with real sandboxes and the in-process
// scripted model; the client-API frontends are tested in their packages.

// lastResult is the content of the last tool result in req.
func lastResultText(req *gateway.Request) string {
	if r := gatewaytest.LastResult(req); r != nil {
		return r.Content
	}
	return ""
}

func answerWithResult(req *gateway.Request) *gateway.Turn {
	return &gateway.Turn{Parts: []gateway.Part{gatewaytest.Text("result: " + lastResultText(req))}}
}

func runLoop(t *testing.T, e *env, p Principal, sel identity.Request, max int, turns ...gatewaytest.Turn) (*gateway.Result, *gatewaytest.Script, error) {
	t.Helper()
	script := gatewaytest.NewScript(turns...)
	run := &gateway.Run{
		Model:        gateway.Model{Provider: "scripted", Name: "m", Upstream: script},
		Request:      &gateway.Request{Model: "m", Messages: []gateway.Message{{Role: gateway.RoleUser, Parts: []gateway.Part{gatewaytest.Text("go")}}}},
		ServerTools:  map[string]gateway.ServerTool{"shell": gateway.ShellTool{Name: "shell"}},
		Sandboxes:    e.srv.sandboxesFor(p),
		Select:       sel,
		MaxToolCalls: max,
	}
	res, err := gateway.Execute(t.Context(), run)
	if err := e.srv.WaitCalls(t.Context()); err != nil {
		t.Fatal(err)
	}
	return res, script, err
}

func TestGatewayLoop(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	pa := Principal{Account: "acme", Workspace: "a"}
	pb := Principal{Account: "acme", Workspace: "b"}

	t.Run("a shell step runs in the sandbox and its result goes back to the model", func(t *testing.T) {
		res, script, err := runLoop(t, e, pa, identity.Request{BodySessionID: "sess-1"}, 0,
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("let me compute"), shellCall("call_1", `awk 'BEGIN{for(i=1;i<=100;i++)s+=i; print s}'`, "echo kept > notes.txt")}},
			gatewaytest.Turn{Reply: answerWithResult})
		if err != nil {
			t.Fatal(err)
		}
		if res.Stop != gateway.StopEnd || len(res.Items) != 3 || res.ToolCallsRequested != 1 || res.ToolCallsExecuted != 1 || res.UpstreamCalls != 2 {
			t.Fatalf("result %+v", res)
		}
		d := res.Items[1].Step.Result.Detail.(*gateway.ShellDetail)
		if len(d.Outputs) != 2 || d.Outputs[0].Stdout != "5050\n" || d.ContainerID != res.ContainerID || !strings.HasPrefix(res.ContainerID, "cntr_") {
			t.Fatalf("detail %+v", d)
		}
		reqs := script.Requests()
		if len(reqs) != 2 || len(reqs[0].Tools) != 1 || reqs[0].Tools[0].Name != "shell" {
			t.Fatalf("requests %+v", reqs)
		}
		var seen struct {
			ContainerID string `json:"container_id"`
			Output      []struct{ Stdout string }
		}
		if err := json.Unmarshal([]byte(lastResultText(&reqs[1])), &seen); err != nil || seen.ContainerID != res.ContainerID || seen.Output[0].Stdout != "5050\n" {
			t.Fatalf("the model saw %q (%v)", lastResultText(&reqs[1]), err)
		}
		// New container: billed at least 30 s, to the ledger as "response".
		if res.CostMicroUSD < 3000 {
			t.Fatalf("cost %d µ$, want the new-container minimum", res.CostMicroUSD)
		}
		if sums := ledgerOf(t, e.st, "a"); len(sums) != 1 || sums[0].ContainerID != res.ContainerID || sums[0].CostMicroUSD != res.CostMicroUSD {
			t.Fatalf("ledger %+v, want one charge of %d", sums, res.CostMicroUSD)
		}
		// The session's next request finds the file, in the same container.
		res2, _, err := runLoop(t, e, pa, identity.Request{HeaderSessionID: "sess-1"}, 0,
			gatewaytest.Turn{Parts: []gateway.Part{shellCall("call_2", "cat notes.txt")}},
			gatewaytest.Turn{Reply: answerWithResult})
		if err != nil || res2.ContainerID != res.ContainerID || !strings.Contains(res2.Items[1].Text, `kept\n`) {
			t.Fatalf("second request: %+v %v", res2, err)
		}
	})

	t.Run("the files a step's commands wrote are reported, by any of its commands", func(t *testing.T) {
		res, script, err := runLoop(t, e, pa, identity.Request{BodySessionID: "changes"}, 0,
			gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "echo a > a.txt")}},
			gatewaytest.Turn{Parts: []gateway.Part{shellCall("c2", "cat a.txt", "true")}},
			// The write is in the first command, the last one writes
			// nothing: the step still reports it.
			gatewaytest.Turn{Parts: []gateway.Part{shellCall("c3", "mkdir -p d && echo bb > d/b.txt", "true")}},
			gatewaytest.Turn{Parts: []gateway.Part{shellCall("c4", "true")}},
			gatewaytest.Turn{Reply: answerWithResult})
		if err != nil || len(res.Items) != 5 {
			t.Fatalf("%+v %v", res, err)
		}
		want := [][]string{{"a.txt"}, nil, {"d/b.txt"}, nil}
		reqs := script.Requests()
		for i, w := range want {
			d := res.Items[i].Step.Result.Detail.(*gateway.ShellDetail)
			var got []string
			for _, f := range d.Changed {
				got = append(got, f.Path)
			}
			if !slices.Equal(got, w) {
				t.Errorf("step %d: changed %q, want %q", i+1, got, w)
			}
			// What the model read says the same.
			var seen struct {
				Files []struct {
					Path  string `json:"path"`
					Bytes int64  `json:"bytes"`
				} `json:"files_changed"`
			}
			if err := json.Unmarshal([]byte(lastResultText(&reqs[i+1])), &seen); err != nil || len(seen.Files) != len(w) {
				t.Errorf("step %d: the model saw %q (%v)", i+1, lastResultText(&reqs[i+1]), err)
			}
			for j, f := range seen.Files {
				if f.Path != "/workspace/home/"+w[j] {
					t.Errorf("step %d: the model saw %+v", i+1, f)
				}
			}
		}
	})

	t.Run("another workspace's container is not found, and nothing runs", func(t *testing.T) {
		c := e.create(e.keyA, "private")
		_, script, err := runLoop(t, e, pb, identity.Request{ContainerReference: c.ID}, 0,
			gatewaytest.Turn{Parts: []gateway.Part{shellCall("call_1", "echo hi")}},
			gatewaytest.Turn{Reply: answerWithResult})
		var re *gateway.RequestError
		if !errors.As(err, &re) || re.Status != http.StatusNotFound || len(script.Requests()) != 1 {
			t.Fatalf("err %v, %d upstream calls", err, len(script.Requests()))
		}
	})

	t.Run("bad arguments and too many commands are results the model reads", func(t *testing.T) {
		many := make([]string, 101)
		for i := range many {
			many[i] = "true"
		}
		res, _, err := runLoop(t, e, pa, identity.Request{}, 0,
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("c1", "shell", `{"commands": "ls"`)}},
			gatewaytest.Turn{Parts: []gateway.Part{shellCall("c2", many...)}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("c3", "shell", map[string]any{"commands": []string{}})}},
			gatewaytest.Turn{Reply: answerWithResult})
		if err != nil || res.Stop != gateway.StopEnd || res.ToolCallsRequested != 3 || res.ToolCallsExecuted != 0 || res.ContainerID != "" {
			t.Fatalf("%+v %v", res, err)
		}
		for i, it := range res.Items[:3] {
			if !it.Step.Result.IsError || it.Step.Result.Detail.(*gateway.ShellDetail).ErrorCode != "invalid_tool_input" {
				t.Errorf("step %d: %+v", i, it.Step.Result)
			}
		}
	})

	t.Run("max_tool_calls: then the model answers without tools", func(t *testing.T) {
		res, script, err := runLoop(t, e, pa, identity.Request{}, 2,
			gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "echo 1")}},
			gatewaytest.Turn{Parts: []gateway.Part{shellCall("c2", "echo 2")}},
			gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("done")}})
		reqs := script.Requests()
		if err != nil || res.ToolCallsExecuted != 2 || len(reqs) != 3 || reqs[2].ToolChoice.Mode != gateway.ChoiceNone || reqs[1].ToolChoice.Mode != "" {
			t.Fatalf("%+v %v, %d requests", res, err, len(reqs))
		}
	})

	t.Run("a client tool call ends the loop after the server steps before it", func(t *testing.T) {
		res, script, err := runLoop(t, e, pa, identity.Request{}, 0,
			gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "echo 1"), gatewaytest.Call("c2", "get_weather", map[string]any{"city": "Paris"})}})
		if err != nil || res.Stop != gateway.StopToolUse || len(res.Items) != 2 || res.Items[0].Kind != gateway.ItemStep || res.Items[1].Kind != gateway.ItemClientCall || len(script.Requests()) != 1 {
			t.Fatalf("%+v %v", res, err)
		}
	})

	t.Run("a cancelled request kills the running command and is still billed", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		script := gatewaytest.NewScript(gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "sleep 30; echo late > late.txt")}})
		run := &gateway.Run{
			Model:       gateway.Model{Upstream: script},
			Request:     &gateway.Request{Messages: []gateway.Message{{Role: gateway.RoleUser, Parts: []gateway.Part{gatewaytest.Text("go")}}}},
			ServerTools: map[string]gateway.ServerTool{"shell": gateway.ShellTool{Name: "shell"}},
			Sandboxes:   e.srv.sandboxesFor(pa),
			Select:      identity.Request{BodySessionID: "cancelled"},
		}
		time.AfterFunc(time.Second, cancel)
		res, err := gateway.Execute(ctx, run)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
		if err := e.srv.WaitCalls(t.Context()); err != nil {
			t.Fatal(err)
		}
		if res.CostMicroUSD < 3000 {
			t.Fatalf("cost %d", res.CostMicroUSD)
		}
		// The session's container is named "cancelled".
		if out := e.exec(e.keyA, "cancelled", "ps -o args | grep -c '^sleep 30' ; test -e late.txt || echo absent"); out.Output[0].Stdout != "0\nabsent\n" {
			t.Fatalf("the command outlived its request: %+v", out.Output)
		}
	})
}

// An expired container: a reference to it fails the request with 410
// (not 404: it existed); a session whose container expired starts over
// in a new, empty container of the same name.
func TestGatewayExpiredContainers(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	e := newEnv(t, "crun", "busybox", func(c *Config) { c.Now = clock.Now })
	pa := Principal{Account: "acme", Workspace: "a"}
	ref := e.create(e.keyA, "old")
	first, _, err := runLoop(t, e, pa, identity.Request{BodySessionID: "sess-old"}, 0,
		gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "echo before > f.txt")}},
		gatewaytest.EchoResult())
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(31 * 24 * time.Hour)
	if n, err := e.srv.Sweep(t.Context()); err != nil || n != 2 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	_, script, err := runLoop(t, e, pa, identity.Request{ContainerReference: ref.ID}, 0,
		gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "echo hi")}}, gatewaytest.EchoResult())
	var re *gateway.RequestError
	if !errors.As(err, &re) || re.Status != http.StatusGone || len(script.Requests()) != 1 {
		t.Fatalf("reference to an expired container: %v", err)
	}
	res, _, err := runLoop(t, e, pa, identity.Request{BodySessionID: "sess-old"}, 0,
		gatewaytest.Turn{Parts: []gateway.Part{shellCall("c1", "cat f.txt 2>&1 || echo gone")}}, gatewaytest.EchoResult())
	if err != nil || res.ContainerID == first.ContainerID || !strings.Contains(res.Items[1].Text, "gone") {
		t.Fatalf("session after expiry: %+v %v", res, err)
	}
	if got := res.ExpiresAt.Sub(clock.Now()); got < 29*24*time.Hour || got > 31*24*time.Hour {
		t.Fatalf("expires_at %v after now, want the 30-day retention", got)
	}
}

// A gateway request's network_policy: within the operator's allowance for
// the workspace, fixed when its container is made (another policy for an
// existing container is 409).
func TestGatewayNetworkPolicy(t *testing.T) {
	e := newEnv(t, "crun", "busybox", func(c *Config) {
		c.NetworkAllowByWorkspace = map[string]*egress.Policy{"acme/a": {Type: egress.Allowlist, AllowedDomains: []string{"*.example.com"}}}
	})
	ctx := t.Context()
	open := func(p Principal, session, policy string) error {
		sb, err := e.srv.sandboxesFor(p).Open(ctx, identity.Request{BodySessionID: session}, gateway.OpenOptions{NetworkPolicy: []byte(policy)})
		if err == nil {
			sb.Close()
		}
		return err
	}
	status := func(err error) int {
		var re *gateway.RequestError
		if errors.As(err, &re) {
			return re.Status
		}
		return 0
	}
	pa, pb := Principal{Account: "acme", Workspace: "a"}, Principal{Account: "acme", Workspace: "b"}
	allow := `{"type":"allowlist","allowed_domains":["api.example.com"]}`
	if err := open(pa, "net-1", allow); err != nil {
		t.Fatalf("allowed policy: %v", err)
	}
	if err := open(pa, "net-1", allow); err != nil {
		t.Fatalf("the same policy again: %v", err)
	}
	if err := open(pa, "net-1", `{"type":"allowlist","allowed_domains":["www.example.com"]}`); status(err) != http.StatusConflict {
		t.Fatalf("another policy for the container: %v", err)
	}
	if err := open(pa, "net-2", `{"type":"allowlist","allowed_domains":["pypi.org"]}`); status(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "pypi.org") {
		t.Fatalf("a domain outside the workspace's allowance: %v", err)
	}
	if err := open(pb, "net-3", allow); status(err) != http.StatusBadRequest {
		t.Fatalf("a workspace with no allowance: %v", err)
	}
	// The policy reaches the sandbox: its container gets an egress network.
	c, err := e.srv.cfg.Containers.Lookup(ctx, pa, "net-1")
	if err != nil {
		t.Fatal(err)
	}
	set, err := e.srv.sandboxSettings(ctx, c.ID)
	if err != nil || !set.Network.Enabled() || set.Network.AllowedDomains[0] != "api.example.com" {
		t.Fatalf("sandbox settings %+v %v", set, err)
	}
}
