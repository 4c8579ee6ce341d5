package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellgate/shellgate/internal/mcp"
)

// The MCP server through the official Go SDK's client, against the real
// server on a real runtime: every tool, progress, cancellation, resources
// and list_changed, two workspaces kept apart, metering.

// mcpClient is one MCP session of key's workspace, with what the server
// sent it besides answers.
type mcpClient struct {
	cs *sdk.ClientSession

	mu       sync.Mutex
	progress []*sdk.ProgressNotificationParams
	// progressed and listChanged get a value per notification (never block:
	// buffered generously, dropped when full).
	progressed  chan struct{}
	listChanged chan struct{}
}

func (e *env) mcpClient(t *testing.T, key string) *mcpClient {
	t.Helper()
	hc := mcp.KeyClient(key)
	hc.Transport = busyRetry{hc.Transport}
	return connectMCP(t, &sdk.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: hc, MaxRetries: -1})
}

// busyRetry sends a request again when the workspace's quota of requests
// in flight refused it (429 naming --max-concurrent), up to 2 s. A client
// that calls one tool after another can meet that refusal under a small
// quota (TestMCP's is 3): its previous call's answer reaches it a moment
// before that call's handler returns and gives its place back. A place
// held for good, as by an open session's stream if it were counted (13),
// still fails.
type busyRetry struct{ next http.RoundTripper }

func (b busyRetry) RoundTrip(r *http.Request) (*http.Response, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		resp, err := b.next.RoundTrip(r)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests || (r.Body != nil && r.GetBody == nil) || time.Now().After(deadline) {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil || !bytes.Contains(body, []byte(flagMaxConcurrent)) {
			return resp, nil
		}
		r = r.Clone(r.Context())
		if r.GetBody != nil {
			if r.Body, err = r.GetBody(); err != nil {
				return nil, err
			}
		}
		select {
		case <-r.Context().Done():
			return nil, r.Context().Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func connectMCP(t *testing.T, tr sdk.Transport) *mcpClient {
	t.Helper()
	c := &mcpClient{progressed: make(chan struct{}, 1024), listChanged: make(chan struct{}, 64)}
	client := sdk.NewClient(&sdk.Implementation{Name: "shellgate-test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, r.Params)
			c.mu.Unlock()
			select {
			case c.progressed <- struct{}{}:
			default:
			}
		},
		ResourceListChangedHandler: func(context.Context, *sdk.ResourceListChangedRequest) {
			select {
			case c.listChanged <- struct{}{}:
			default:
			}
		},
	})
	cs, err := client.Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	c.cs = cs
	return c
}

// call calls a tool and decodes its structured result into out (may be
// nil); a failure fails t, the calling (sub)test.
func (c *mcpClient) call(t testing.TB, name string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	p := &sdk.CallToolParams{Name: name, Arguments: args}
	p.SetProgressToken(name)
	res, err := c.cs.CallTool(t.Context(), p)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if out != nil && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured result %s: %v", name, b, err)
		}
	}
	return res
}

// text is a result's text content.
func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

type mcpExec struct {
	ContainerID string `json:"container_id"`
	Output      []struct {
		Stdout, Stderr string
		Outcome        struct {
			Type     string `json:"type"`
			ExitCode *int   `json:"exit_code"`
		} `json:"outcome"`
	} `json:"output"`
	Changed []string `json:"changed_files"`
}

// stdout is the first command's stdout ("" when none ran).
func (o mcpExec) stdout() string {
	if len(o.Output) == 0 {
		return ""
	}
	return o.Output[0].Stdout
}

func TestMCP(t *testing.T) {
	// At most three sessions per workspace (13), and three requests in
	// flight: the sessions' open GET streams must not count (13 has three).
	e := newEnv(t, "crun", "default", func(c *Config) { c.MaxMCPSessions, c.MaxConcurrent = 3, 3 })
	ctx := t.Context()
	a := e.mcpClient(t, e.keyA)

	var own string // the session's container
	t.Run("01 tools have input and output schemas", func(t *testing.T) {
		res, err := a.cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tl := range res.Tools {
			names = append(names, tl.Name)
			if tl.InputSchema == nil || tl.OutputSchema == nil || tl.Description == "" {
				t.Errorf("tool %s: input schema %v, output schema %v, description %q", tl.Name, tl.InputSchema != nil, tl.OutputSchema != nil, tl.Description)
			}
		}
		slices.Sort(names)
		want := []string{"create_container", "delete_container", "eval", "exec", "list_containers", "list_files", "python", "read_file", "write_file"}
		if !slices.Equal(names, want) {
			t.Fatalf("tools %q, want %q", names, want)
		}
	})
	t.Run("02 exec streams progress in the session's container", func(t *testing.T) {
		var out mcpExec
		res := a.call(t, "exec", map[string]any{"commands": []string{"echo hello; echo oops >&2", "echo two > two.txt"}}, &out)
		if res.IsError || len(out.Output) != 2 || out.Output[0].Stdout != "hello\n" || out.Output[0].Stderr != "oops\n" ||
			out.Output[0].Outcome.Type != "exit" || *out.Output[0].Outcome.ExitCode != 0 {
			t.Fatalf("exec: isError %v %+v (%s)", res.IsError, out, text(res))
		}
		if !slices.Contains(out.Changed, "two.txt") {
			t.Fatalf("changed files %q, want two.txt", out.Changed)
		}
		own = out.ContainerID
		a.mu.Lock()
		var streamed []string
		for _, p := range a.progress {
			if p.ProgressToken == "exec" {
				streamed = append(streamed, p.Message)
			}
		}
		a.mu.Unlock()
		if !slices.Contains(streamed, "hello\n") || !slices.Contains(streamed, "oops\n") {
			t.Fatalf("progress messages %q, want hello and oops", streamed)
		}
		var again mcpExec
		a.call(t, "exec", map[string]any{"commands": []string{"cat two.txt"}}, &again)
		if again.ContainerID != own || again.stdout() != "two\n" {
			t.Fatalf("a second call ran in %s (%+v), want the session's %s", again.ContainerID, again, own)
		}
	})
	t.Run("03 a failing command is a tool error with its outcome", func(t *testing.T) {
		var out mcpExec
		res := a.call(t, "exec", map[string]any{"commands": []string{"echo before; exit 3"}}, &out)
		if !res.IsError || len(out.Output) != 1 || out.Output[0].Outcome.ExitCode == nil || *out.Output[0].Outcome.ExitCode != 3 || out.Output[0].Stdout != "before\n" {
			t.Fatalf("exit 3: isError %v %+v", res.IsError, out)
		}
		res = a.call(t, "exec", map[string]any{"commands": []string{"sleep 5"}, "timeout_ms": 300}, &out)
		if !res.IsError || len(out.Output) != 1 || out.Output[0].Outcome.Type != "timeout" {
			t.Fatalf("timeout: isError %v %+v", res.IsError, out)
		}
	})
	t.Run("04 bad input changes nothing", func(t *testing.T) {
		if _, err := a.cs.CallTool(ctx, &sdk.CallToolParams{Name: "no_such_tool"}); err == nil {
			t.Fatal("an unknown tool was not a protocol error")
		}
		for _, c := range []struct {
			name string
			args map[string]any
			want string
		}{
			{"exec", map[string]any{"commands": "ls"}, "commands"},
			{"exec", map[string]any{"commands": []string{}}, "command"},
			{"read_file", map[string]any{"path": "../../etc/passwd"}, "path"},
			{"read_file", map[string]any{"path": "missing.txt"}, "missing"},
			{"exec", map[string]any{"commands": []string{"true"}, "container": "cntr_00000000000000000000000000000000"}, "No container"},
			{"write_file", map[string]any{"path": "x", "content": "!!", "encoding": "base64"}, "base64"},
		} {
			res := a.call(t, c.name, c.args, nil)
			if !res.IsError || !strings.Contains(text(res), c.want) {
				t.Errorf("%s %v: isError %v %q, want an error naming %q", c.name, c.args, res.IsError, text(res), c.want)
			}
		}
		var out mcpExec
		a.call(t, "exec", map[string]any{"commands": []string{"test -e x && echo written || echo absent"}}, &out)
		if out.stdout() != "absent\n" {
			t.Fatalf("the refused write_file wrote: %q", out.stdout())
		}
	})
	t.Run("05 files", func(t *testing.T) {
		var w struct{ Bytes int }
		a.call(t, "write_file", map[string]any{"path": "dir/a.txt", "content": "héllo"}, &w)
		a.call(t, "write_file", map[string]any{"path": "bin.dat", "content": "AAH/", "encoding": "base64"}, nil)
		var r struct {
			Text, Base64 string
			Bytes        int
		}
		if res := a.call(t, "read_file", map[string]any{"path": "/workspace/home/dir/a.txt"}, &r); res.IsError || r.Text != "héllo" || w.Bytes != 6 {
			t.Fatalf("read_file: %+v %s", r, text(res))
		}
		r.Text = ""
		a.call(t, "read_file", map[string]any{"path": "bin.dat"}, &r)
		if r.Base64 != "AAH/" || r.Text != "" {
			t.Fatalf("binary read_file: %+v", r)
		}
		var l struct {
			Files []mcp.File
			Next  string
		}
		a.call(t, "list_files", map[string]any{"limit": 2}, &l)
		if len(l.Files) != 2 || l.Files[0].Path != "bin.dat" || l.Next != l.Files[1].Path {
			t.Fatalf("list_files page: %+v", l)
		}
	})
	t.Run("06 python keeps state", func(t *testing.T) {
		var out struct {
			Stdout  string
			Results []string
			Error   *struct{ Ename string }
		}
		a.call(t, "python", map[string]any{"code": "x = 41\nprint('set')"}, &out)
		res := a.call(t, "python", map[string]any{"code": "x + 1"}, &out)
		if res.IsError || !slices.Equal(out.Results, []string{"42"}) {
			t.Fatalf("python: %+v %s", out, text(res))
		}
		res = a.call(t, "python", map[string]any{"code": "1/0"}, &out)
		if !res.IsError || out.Error == nil || out.Error.Ename != "ZeroDivisionError" {
			t.Fatalf("python raising: isError %v %+v", res.IsError, out)
		}
	})
	t.Run("07 eval interrupts and resumes", func(t *testing.T) {
		var out struct {
			Status        string
			Value         any
			Continuation  string
			Interruptions []struct{ ID string }
		}
		a.call(t, "eval", map[string]any{"source": "const n = await host.ask(20); const f = await sandbox.readFile('two.txt'); return n + 1 + f.trim().length",
			"client_functions": map[string][]string{"host": {"ask"}}, "sandbox": true}, &out)
		if out.Status != "interrupted" || len(out.Interruptions) != 1 || out.Continuation == "" {
			t.Fatalf("eval: %+v", out)
		}
		cont := out.Continuation
		a.call(t, "eval", map[string]any{"continuation": cont, "resolutions": []map[string]any{{"interruption_id": out.Interruptions[0].ID, "value": 21}}}, &out)
		if out.Status != "completed" || out.Value != float64(25) {
			t.Fatalf("resumed eval: %+v", out)
		}
		// Another workspace cannot resume it.
		b := e.mcpClient(t, e.keyB)
		res := b.call(t, "eval", map[string]any{"continuation": cont, "resolutions": []map[string]any{{"interruption_id": "x", "value": 1}}}, &out)
		if !res.IsError || out.Status != "error" {
			t.Fatalf("another workspace resumed a continuation: %+v", out)
		}
	})
	t.Run("08 resources list, read, list_changed", func(t *testing.T) {
		for len(a.listChanged) > 0 {
			<-a.listChanged
		}
		a.call(t, "exec", map[string]any{"commands": []string{"printf 'a,b\\n' > new.csv"}}, nil)
		<-a.listChanged
		res, err := a.cs.ListResources(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		uri := mcp.FileURI(own, "new.csv")
		var uris []string
		for _, r := range res.Resources {
			uris = append(uris, r.URI)
		}
		if !slices.Contains(uris, uri) || !slices.Contains(uris, mcp.FileURI(own, "dir/a.txt")) {
			t.Fatalf("resources %q, want %s and dir/a.txt", uris, uri)
		}
		rr, err := a.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
		if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "a,b\n" || rr.Contents[0].MIMEType != "text/csv; charset=utf-8" {
			t.Fatalf("read %s: %+v %v", uri, rr, err)
		}
		rr, err = a.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcp.FileURI(own, "bin.dat")})
		if err != nil || string(rr.Contents[0].Blob) != "\x00\x01\xff" {
			t.Fatalf("read a binary file: %+v %v", rr, err)
		}
		if _, err := a.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcp.FileURI(own, "nope.txt")}); err == nil {
			t.Fatal("a missing file was read")
		}
	})
	t.Run("09 cancel stops the command", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			p := &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"commands": []string{"echo started; sleep 60; echo late > late.txt"}}}
			p.SetProgressToken("cancelled")
			_, err := a.cs.CallTool(cctx, p)
			done <- err
		}()
		for started := false; !started; {
			<-a.progressed
			a.mu.Lock()
			for _, p := range a.progress {
				started = started || p.ProgressToken == "cancelled" && p.Message == "started\n"
			}
			a.mu.Unlock()
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("a cancelled call answered")
		}
		// The next call gets the container (the call lock was released) and
		// finds no sleep left behind.
		var out mcpExec
		a.call(t, "exec", map[string]any{"commands": []string{"n=0; for c in /proc/[0-9]*/comm; do [ \"$(cat $c 2>/dev/null)\" = sleep ] && n=$((n+1)); done; echo $n; test -e late.txt && echo late || echo early"}}, &out)
		if out.stdout() != "0\nearly\n" {
			t.Fatalf("after the cancel: %q", out.stdout())
		}
	})
	t.Run("10 containers and two workspaces", func(t *testing.T) {
		var c mcp.Container
		a.call(t, "create_container", map[string]any{"name": "mcp-made"}, &c)
		if c.Name != "mcp-made" || c.Status != "running" {
			t.Fatalf("create_container: %+v", c)
		}
		var l struct{ Containers []mcp.Container }
		a.call(t, "list_containers", nil, &l)
		var names []string
		for _, x := range l.Containers {
			names = append(names, x.Name)
		}
		if !slices.Contains(names, "mcp-made") || !slices.ContainsFunc(l.Containers, func(x mcp.Container) bool { return x.ID == own }) {
			t.Fatalf("list_containers: %q", names)
		}
		var out mcpExec
		a.call(t, "exec", map[string]any{"commands": []string{"echo in-named"}, "container": "mcp-made"}, &out)
		if out.ContainerID != c.ID {
			t.Fatalf("exec by name ran in %s, want %s", out.ContainerID, c.ID)
		}

		b := e.mcpClient(t, e.keyB)
		for _, ref := range []string{own, c.ID, "mcp-made"} {
			res := b.call(t, "exec", map[string]any{"commands": []string{"touch /workspace/home/b-was-here"}, "container": ref}, nil)
			if !res.IsError || !strings.Contains(text(res), "No container") {
				t.Fatalf("workspace b ran in a's %s: %s", ref, text(res))
			}
			if res := b.call(t, "delete_container", map[string]any{"container": ref}, nil); !res.IsError {
				t.Fatalf("workspace b deleted a's %s", ref)
			}
		}
		if _, err := b.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcp.FileURI(own, "two.txt")}); err == nil {
			t.Fatal("workspace b read a's file")
		}
		b.call(t, "list_containers", nil, &l)
		if slices.ContainsFunc(l.Containers, func(x mcp.Container) bool { return x.ID == own || x.ID == c.ID }) {
			t.Fatalf("workspace b lists a's containers: %+v", l)
		}
		// a's session with b's key: refused.
		st, body := e.doH("POST", "/mcp", map[string]any{"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
			map[string]string{"Authorization": "Bearer " + e.keyB, "Mcp-Session-Id": a.cs.ID(), "Accept": "application/json, text/event-stream", "Content-Type": "application/json", "Mcp-Protocol-Version": "2025-06-18"})
		if st != http.StatusForbidden {
			t.Fatalf("a's session with b's key: %d %s", st, body)
		}
		if res := a.call(t, "exec", map[string]any{"commands": []string{"test ! -e b-was-here"}}, &out); res.IsError {
			t.Fatal("b's command ran in a's container")
		}

		var d struct {
			ID      string
			Deleted bool
		}
		a.call(t, "delete_container", map[string]any{"container": "mcp-made"}, &d)
		if d.ID != c.ID || !d.Deleted {
			t.Fatalf("delete_container: %+v", d)
		}
		if res := a.call(t, "exec", map[string]any{"commands": []string{"true"}, "container": c.ID}, nil); !res.IsError {
			t.Fatal("exec in a deleted container")
		}
	})
	t.Run("11 without a key", func(t *testing.T) {
		st, _ := e.doH("POST", "/mcp", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"}, map[string]string{"Accept": "application/json, text/event-stream"})
		if st != http.StatusUnauthorized {
			t.Fatalf("no key: %d", st)
		}
	})
	t.Run("12 the stdio bridge passes calls, progress and list_changed through", func(t *testing.T) {
		local, remote := sdk.NewInMemoryTransports()
		done := make(chan error, 1)
		go func() { done <- mcp.Bridge(ctx, e.url+"/mcp", mcp.KeyClient(e.keyA), remote, "test") }()
		c := connectMCP(t, local)
		tools, err := c.cs.ListTools(ctx, nil)
		if err != nil || len(tools.Tools) != 9 {
			t.Fatalf("tools through the bridge: %v %v", tools, err)
		}
		var out mcpExec
		res := c.call(t, "exec", map[string]any{"commands": []string{"echo bridged > bridged.txt; echo streamed"}}, &out)
		if res.IsError || out.stdout() != "streamed\n" || out.ContainerID == own || !strings.HasPrefix(out.ContainerID, "cntr_") {
			t.Fatalf("exec through the bridge: %+v %s", out, text(res))
		}
		<-c.listChanged
		c.mu.Lock()
		n := len(c.progress)
		c.mu.Unlock()
		if n == 0 {
			t.Fatal("no progress through the bridge")
		}
		rr, err := c.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcp.FileURI(out.ContainerID, "bridged.txt")})
		if err != nil || rr.Contents[0].Text != "bridged\n" {
			t.Fatalf("resource through the bridge: %+v %v", rr, err)
		}
		if _, err := c.cs.CallTool(ctx, &sdk.CallToolParams{Name: "no_such_tool"}); err == nil {
			t.Fatal("an unknown tool through the bridge was not a protocol error")
		}
		c.cs.Close()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("bridge ended: %v", err)
		}
	})
	t.Run("13 a workspace's sessions are bounded", func(t *testing.T) {
		e.mcpClient(t, e.keyA) // a's second (the bridge's ended)
		third := e.mcpClient(t, e.keyA)
		tr := &sdk.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: mcp.KeyClient(e.keyA), MaxRetries: -1}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "fourth", Version: "1"}, nil).Connect(ctx, tr, nil)
		if err == nil {
			cs.Close()
			t.Fatal("a fourth session opened")
		}
		if !strings.Contains(err.Error(), "Too Many Requests") {
			t.Fatalf("a fourth session: %v", err)
		}
		e.mcpClient(t, e.keyB) // another workspace's are its own
		third.cs.Close()
		last := e.mcpClient(t, e.keyA) // an ended session makes room
		// Three sessions' streams open, and calls still run.
		var out mcpExec
		if res := last.call(t, "exec", map[string]any{"commands": []string{"echo still"}}, &out); res.IsError || out.stdout() != "still\n" {
			t.Fatalf("a call beside three open sessions: %s", text(res))
		}
	})
	t.Run("14 calls are metered as mcp usage", func(t *testing.T) {
		u := e.getUsage(e.keyA, "")
		for _, c := range u.ByContainer {
			if c.ContainerID == own {
				// Every exec and python call that ran commands is one event;
				// the first paid the new container's 30 s minimum.
				if c.Events < 8 || c.BilledMs < 30000 || c.CostMicroUSD <= 0 {
					t.Fatalf("usage of the session's container: %+v", c)
				}
				return
			}
		}
		t.Fatalf("no usage for %s: %+v", own, u)
	})
}
