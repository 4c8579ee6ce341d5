package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/metering"
)

// shellEcho is a model for any number of requests, concurrent ones
// included: it runs cmd through the request's code tool (Responses'
// shell, Messages' bash_code_execution; Gemini's code_execution runs the
// Python code instead), then answers with the result.
type shellEcho struct{ cmd, code string }

func (m shellEcho) Turn(ctx context.Context, req *gateway.Request, onDelta func(gateway.Delta)) (*gateway.Turn, error) {
	t := gatewaytest.EchoResult()
	if gatewaytest.LastResult(req) == nil {
		call := shellCall("c1", m.cmd)
		for _, tl := range req.Tools {
			switch tl.Name {
			case gateway.BashCodeExecution:
				call = gatewaytest.Call("toolu_1", gateway.BashCodeExecution, map[string]string{"command": m.cmd})
			case gateway.CodeExecution:
				call = gatewaytest.Call("c1", gateway.CodeExecution, map[string]string{"code": m.code})
			}
		}
		t = gatewaytest.Turn{Parts: []gateway.Part{call}}
	}
	return gatewaytest.NewScript(t).Turn(ctx, req, onDelta)
}

// failingLedger is the server's ledger whose writes fail while fail is
// set (a database that answers reads but not the bill's insert), and
// which counts the writes tried per usage id.
type failingLedger struct {
	Ledger
	fail atomic.Bool
	mu   sync.Mutex
	ids  map[string]int // usage id → writes tried
}

func (l *failingLedger) Record(ctx context.Context, p Principal, id, containerID string, at time.Time, kind string, bill metering.Bill) error {
	l.mu.Lock()
	l.ids[id]++
	l.mu.Unlock()
	if l.fail.Load() {
		return errors.New("failingLedger: the insert was refused")
	}
	return l.Ledger.Record(ctx, p, id, containerID, at, kind, bill)
}

// tries returns the writes tried per usage id and forgets them.
func (l *failingLedger) tries() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.ids
	l.ids = map[string]int{}
	return out
}

// A gateway request's bill is written before its answer: when the ledger
// takes no write, a request that ran commands is answered with the API's
// 503 error (or ends its stream with the API's error event), never as
// complete; each request's writes are of its one usage id, tried
// billTries times; once the ledger takes writes again each request
// answered complete has exactly one usage row.
func TestGatewayBillBeforeAnswer(t *testing.T) {
	fl := &failingLedger{ids: map[string]int{}}
	models := gatewaytest.Models{"echo": shellEcho{cmd: "echo ran", code: `print("ran")`},
		"slow": shellEcho{cmd: "echo started; sleep 2"},
		"text": gatewaytest.NewScript(gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Text("hello")}})}
	e := newEnv(t, "crun", "default", func(c *Config) {
		c.Models = models
		fl.Ledger = c.Ledger
		c.Ledger = fl
	})
	e.srv.cfg.Logs = e.st.Logs() // the request logs say what ran
	e.setLogging(t, e.keyA, map[string]any{"enabled": true})
	c := e.create(e.keyA, "billed")
	oc := openAIAt(e.url, e.keyA)
	ac := anthropicAt(e.url, e.keyA)
	shellTool := option.WithJSONSet("tools", []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_reference", "container_id": c.ID}}})
	msgParams := anthropic.MessageNewParams{Model: "echo/m", MaxTokens: 1000, Messages: userText("go"), Tools: codeExecTool}
	gc := geminiClient(t, e, e.keyA)
	// Gemini names the container by session (x-session-id: its name).
	gcfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{CodeExecution: &genai.ToolCodeExecution{}}},
		HTTPOptions: &genai.HTTPOptions{Headers: http.Header{"X-Session-Id": {c.Name}}}}
	geminiFailed := func(t *testing.T, err error) string {
		var ge genai.APIError
		if !errors.As(err, &ge) || ge.Code != http.StatusServiceUnavailable || ge.Status != "UNAVAILABLE" || !strings.Contains(ge.Message, "not billed") {
			t.Fatalf("error %#v", err)
		}
		return "503"
	}
	geminiRan := func(t *testing.T, parts []*genai.Part) {
		if _, text := partKinds(parts); !strings.Contains(text, "ran") {
			t.Fatalf("parts %q", text)
		}
	}

	// Each request, its outcome: "" when answered complete (with the
	// command's output), else what the client saw.
	requests := []struct {
		name string
		do   func(t *testing.T) string
	}{
		{"Responses", func(t *testing.T) string {
			resp, err := oc.Responses.New(t.Context(), responses.ResponseNewParams{Model: "echo/m"}, option.WithJSONSet("input", "go"), shellTool)
			var ae *openai.Error
			switch {
			case errors.As(err, &ae):
				if ae.StatusCode != http.StatusServiceUnavailable || ae.Type != "server_error" || !strings.Contains(ae.Message, "not billed") {
					t.Errorf("error %d %s: %s", ae.StatusCode, ae.Type, ae.RawJSON())
				}
				return "503"
			case err != nil:
				t.Fatal(err)
			}
			if resp.Status != "completed" || !strings.Contains(resp.OutputText(), "ran") {
				t.Fatalf("%s", resp.RawJSON())
			}
			return ""
		}},
		{"Responses streamed", func(t *testing.T) string {
			stream := oc.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{Model: "echo/m"}, option.WithJSONSet("input", "go"), shellTool)
			defer stream.Close()
			var last string
			var failed responses.ResponseStreamEventUnion
			for stream.Next() {
				ev := stream.Current()
				if last == "response.completed" || last == "response.failed" {
					t.Fatalf("%s after %s", ev.Type, last)
				}
				last = ev.Type
				if ev.Type == "response.failed" {
					failed = ev
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			switch last {
			case "response.completed":
				return ""
			case "response.failed":
				if !strings.Contains(failed.Response.Error.Message, "not billed") {
					t.Errorf("failed: %s", failed.RawJSON())
				}
				return last
			}
			t.Fatalf("the stream ended with %q", last)
			return ""
		}},
		{"Messages", func(t *testing.T) string {
			m, err := ac.Messages.New(t.Context(), msgParams, aoption.WithJSONSet("container", c.ID))
			var ae *anthropic.Error
			switch {
			case errors.As(err, &ae):
				if ae.StatusCode != http.StatusServiceUnavailable || !strings.Contains(ae.RawJSON(), `"type":"overloaded_error"`) || !strings.Contains(ae.RawJSON(), "not billed") {
					t.Errorf("error %d: %s", ae.StatusCode, ae.RawJSON())
				}
				return "503"
			case err != nil:
				t.Fatal(err)
			}
			if bs := blocks(t, m); len(bs) < 2 || gatewaytest.JSONAt(bs[1], "content", "stdout") != "ran\n" || m.Container.ID != c.ID {
				t.Fatalf("%s", m.RawJSON())
			}
			return ""
		}},
		{"Messages streamed", func(t *testing.T) string {
			stream := ac.Messages.NewStreaming(t.Context(), msgParams, aoption.WithJSONSet("container", c.ID))
			defer stream.Close()
			var events []string
			for stream.Next() {
				events = append(events, stream.Current().Type)
			}
			err := stream.Err()
			last := ""
			if len(events) > 0 {
				last = events[len(events)-1]
			}
			switch {
			case err == nil && last == "message_stop":
				return ""
			case err != nil && last != "message_stop" && strings.Contains(err.Error(), "overloaded_error") && strings.Contains(err.Error(), "not billed"):
				return "error event"
			}
			t.Fatalf("events %v, err %v", events, err)
			return ""
		}},
		{"Gemini", func(t *testing.T) string {
			resp, err := gc.Models.GenerateContent(t.Context(), "echo/m", genai.Text("go"), gcfg)
			if err != nil {
				return geminiFailed(t, err)
			}
			geminiRan(t, resp.Candidates[0].Content.Parts)
			return ""
		}},
		{"Gemini streamed", func(t *testing.T) string {
			var parts []*genai.Part
			var last *genai.GenerateContentResponse
			for chunk, err := range gc.Models.GenerateContentStream(t.Context(), "echo/m", genai.Text("go"), gcfg) {
				if err != nil {
					if last != nil && len(last.Candidates) > 0 && last.Candidates[0].FinishReason != "" {
						t.Fatalf("an error after the last chunk: %v", err)
					}
					return geminiFailed(t, err)
				}
				if len(chunk.Candidates) > 0 && chunk.Candidates[0].Content != nil {
					parts = append(parts, chunk.Candidates[0].Content.Parts...)
				}
				last = chunk
			}
			if last == nil || len(last.Candidates) == 0 || last.Candidates[0].FinishReason != genai.FinishReasonStop {
				t.Fatalf("the stream ended with %+v", last)
			}
			geminiRan(t, parts)
			return ""
		}},
	}
	rows := func() int {
		t.Helper()
		n := 0
		for _, u := range ledgerOf(t, e.st, "a") {
			if u.ContainerID != c.ID {
				t.Fatalf("a usage row of container %s", u.ContainerID)
			}
			n += int(u.Events)
		}
		return n
	}

	fl.fail.Store(true)
	for _, r := range requests {
		t.Run(r.name+" unbilled", func(t *testing.T) {
			if got := r.do(t); got == "" {
				t.Fatal("answered complete without its bill")
			}
			tries := fl.tries()
			if len(tries) != 1 {
				t.Fatalf("usage ids written: %v, want the request's one", tries)
			}
			for id, n := range tries {
				if n != billTries || !strings.HasPrefix(id, "use") {
					t.Fatalf("usage %q written %d times, want %d", id, n, billTries)
				}
			}
		})
	}
	if n := rows(); n != 0 {
		t.Fatalf("%d usage rows while the ledger took none", n)
	}
	// Each unbilled request's log says it failed, why, and what ran.
	logs := e.requestLogs(t, e.keyA, "")
	if len(logs.Data) != len(requests) {
		t.Fatalf("%d request logs for %d requests", len(logs.Data), len(requests))
	}
	for _, l := range logs.Data {
		r := e.logRecord(t, e.keyA, l.ID)
		ran := false
		for _, it := range r.Items {
			ran = ran || it.Command != "" && strings.Contains(it.Stdout, "ran")
		}
		if l.Status != "failed" || !strings.Contains(r.Error, "not billed") || !ran || l.ContainerID == nil || *l.ContainerID != c.ID {
			t.Errorf("%s log: status %s (%d), error %q, items %+v", l.API, l.Status, l.HTTPStatus, r.Error, r.Items)
		}
	}
	fl.fail.Store(false)
	for i, r := range requests {
		t.Run(r.name+" billed", func(t *testing.T) {
			if got := r.do(t); got != "" {
				t.Fatalf("answered %q with a working ledger", got)
			}
			if n := rows(); n != i+1 {
				t.Fatalf("%d usage rows after %d requests answered complete", n, i+1)
			}
			if tries := fl.tries(); len(tries) != 1 {
				t.Fatalf("usage ids written: %v, want the request's one, once", tries)
			}
		})
	}
	// A client that goes away mid-command: the command is killed, and the
	// sandbox time it used is billed all the same, once.
	t.Run("client gone mid-command, still billed", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		stream := oc.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "slow/m"}, option.WithJSONSet("input", "go"), shellTool)
		for stream.Next() {
			if stream.Current().Type == "response.shell_call_output_content.delta" {
				cancel()
			}
		}
		stream.Close()
		if ctx.Err() == nil {
			t.Fatal("the command's output never came")
		}
		want := len(requests) + 1
		n := rows()
		for i := 0; i < 100 && n != want; i++ {
			time.Sleep(50 * time.Millisecond)
			n = rows()
		}
		if n != want {
			t.Fatalf("%d usage rows, want %d: the abandoned request billed once", n, want)
		}
		if tries := fl.tries(); len(tries) != 1 {
			t.Fatalf("usage ids written: %v", tries)
		}
	})
	// A request that ran no command has nothing to bill, and is answered.
	t.Run("no command, no bill", func(t *testing.T) {
		fl.fail.Store(true)
		defer fl.fail.Store(false)
		resp, err := oc.Responses.New(t.Context(), responses.ResponseNewParams{Model: "text/m"}, option.WithJSONSet("input", "go"), shellTool)
		if err != nil || resp.OutputText() != "hello" {
			t.Fatalf("%v %v", resp, err)
		}
		if tries := fl.tries(); len(tries) != 0 {
			t.Fatalf("bill written for a request that ran nothing: %v", tries)
		}
	})
}
