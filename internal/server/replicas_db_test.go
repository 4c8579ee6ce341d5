package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	_ "github.com/jackc/pgx/v5/stdlib" // the admin connection that kills the replicas' ones
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
)

// The database connections die mid-traffic (a PostgreSQL restart or
// failover, here pg_terminate_backend of every backend but the killer's):
// the requests after it succeed on new connections, and every call
// answered 200 is billed exactly once. A call whose bill could not be
// written is not answered 200.
func TestReplicasDatabaseConnectionLoss(t *testing.T) {
	cl := newTestCluster(t, false)
	a, b := cl.replica(t, "node-a"), cl.replica(t, "node-b")
	key := a.keyA
	ca, cb := a.create(key, "on-a"), b.create(key, "on-b")
	kill := backendKiller(t, cl.dsn)
	execOnce := func(r *replica, ref, cmd string) (int, string) {
		body := fmt.Sprintf(`{"commands":[%q]}`, cmd)
		req, _ := http.NewRequest("POST", r.url+"/api/v1/containers/"+ref+"/exec", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Both containers awake, each on its replica, before the traffic.
	for _, x := range []struct {
		r   *replica
		ref string
	}{{a, "on-a"}, {b, "on-b"}} {
		if st, body := execOnce(x.r, x.ref, "true"); st != 200 {
			t.Fatalf("%d %s", st, body)
		}
	}
	var mu sync.Mutex
	answered := map[string]int{} // container → calls answered 200
	var failures []string
	var traffic []func(i int)
	for _, x := range []struct {
		r   *replica
		ref string
		id  string
	}{{a, "on-a", ca.ID}, {b, "on-b", cb.ID}} {
		answered[x.id] = 1
		traffic = append(traffic, func(i int) {
			st, body := execOnce(x.r, x.ref, "echo "+fmt.Sprint(i))
			mu.Lock()
			if st == 200 {
				answered[x.id]++
			} else {
				failures = append(failures, fmt.Sprintf("%s: %d %s", x.ref, st, body))
			}
			mu.Unlock()
		})
	}
	killed := killRounds(kill, 200*time.Millisecond, traffic...)
	if killed == 0 {
		t.Fatal("no backend was terminated")
	}
	for _, f := range failures {
		// A request may fail while its connection dies, but visibly: an
		// error status with a message, never a 200.
		if !strings.Contains(f, `"message"`) {
			t.Errorf("a failure without an error envelope: %s", f)
		}
	}
	t.Logf("%d backends terminated in 5 rounds; answered 200: %v; failed visibly: %d %q", killed, answered, len(failures), failures)
	// The requests after it all succeed.
	kill()
	for i := range 10 {
		for _, x := range []struct {
			r   *replica
			ref string
			id  string
		}{{a, "on-a", ca.ID}, {b, "on-b", cb.ID}} {
			if st, body := execOnce(x.r, x.ref, "true"); st != 200 {
				t.Fatalf("request %d after the connections died: %d %s", i, st, body)
			}
			answered[x.id]++
		}
	}
	// Every call answered 200 has its one usage row; none has two.
	a.srv.WaitCalls(t.Context())
	b.srv.WaitCalls(t.Context())
	got := map[string]int{}
	for _, u := range ledgerOf(t, a.st, "a") {
		got[u.ContainerID] += int(u.Events)
	}
	for id, n := range answered {
		if got[id] != n {
			t.Errorf("container %s: %d usage rows for %d calls answered 200", id, got[id], n)
		}
	}
}

// gwOutcome is how a gateway request ended, as its official client saw
// it: answered complete (200, or a stream ending with its completion
// event) with text, or failed with the API's own error (its envelope or
// its stream's error event), or failed otherwise.
type gwOutcome struct {
	complete, enveloped bool
	text                string // the answer (complete) or the error
}

// gatewayKinds names the requests gatewayRequest sends.
var gatewayKinds = []string{"responses", "responses streamed", "messages", "messages streamed"}

// gatewayRequest sends one gateway request of kind (an index of
// gatewayKinds) for container id through the server at url with the
// official client of its API, to model, which runs a command in it.
func gatewayRequest(ctx context.Context, kind int, url, key, model, id string) gwOutcome {
	oc := openAIAt(url, key)
	ac := anthropicAt(url, key)
	shellTool := option.WithJSONSet("tools", []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_reference", "container_id": id}}})
	msg := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 1000, Messages: userText("go"), Tools: codeExecTool}
	failed := func(err error) gwOutcome {
		var oe *openai.Error
		var ae *anthropic.Error
		switch {
		case errors.As(err, &oe):
			return gwOutcome{enveloped: oe.Message != "", text: oe.RawJSON()}
		case errors.As(err, &ae):
			return gwOutcome{enveloped: strings.Contains(ae.RawJSON(), `"type":"error"`), text: ae.RawJSON()}
		}
		return gwOutcome{enveloped: strings.Contains(err.Error(), `"type":"error"`), text: err.Error()}
	}
	switch kind {
	case 0:
		resp, err := oc.Responses.New(ctx, responses.ResponseNewParams{Model: model}, option.WithJSONSet("input", "go"), shellTool)
		if err != nil {
			return failed(err)
		}
		return gwOutcome{complete: resp.Status == "completed", text: resp.RawJSON()}
	case 1:
		stream := oc.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: model}, option.WithJSONSet("input", "go"), shellTool)
		defer stream.Close()
		var last responses.ResponseStreamEventUnion
		for stream.Next() {
			last = stream.Current()
		}
		if err := stream.Err(); err != nil {
			return failed(err)
		}
		switch last.Type {
		case "response.completed":
			return gwOutcome{complete: true, text: last.RawJSON()}
		case "response.failed":
			return gwOutcome{enveloped: last.Response.Error.Message != "", text: last.RawJSON()}
		}
		return gwOutcome{text: "the stream ended with " + last.Type}
	case 2:
		m, err := ac.Messages.New(ctx, msg, aoption.WithJSONSet("container", id))
		if err != nil {
			return failed(err)
		}
		return gwOutcome{complete: m.StopReason == anthropic.StopReasonEndTurn, text: m.RawJSON()}
	default:
		stream := ac.Messages.NewStreaming(ctx, msg, aoption.WithJSONSet("container", id))
		defer stream.Close()
		var text strings.Builder
		last := ""
		for stream.Next() {
			ev := stream.Current()
			last = ev.Type
			text.WriteString(ev.RawJSON())
		}
		if err := stream.Err(); err != nil {
			return failed(err)
		}
		return gwOutcome{complete: last == "message_stop", text: text.String()}
	}
}

// Gateway requests while the database connections die: each request the
// client saw answered complete after its command ran has its usage row,
// and a request whose bill could not be written is the API's 503 or its
// stream's error event, never a completion. Through B for a container
// awake on A (replayed to A, billed there only) and on B for B's own.
func TestReplicasGatewayDatabaseConnectionLoss(t *testing.T) {
	cl := newTestCluster(t, false)
	// The command's output, not its text: a result that shows it ran.
	models := gatewaytest.Models{"echo": shellEcho{cmd: "echo gw-$((6*7))"}}
	a := cl.replica(t, "node-a", func(c *Config) { c.Models = models })
	b := cl.replica(t, "node-b", func(c *Config) { c.Models = models })
	key := a.keyA
	ca, cb := a.create(key, "gw-a"), b.create(key, "gw-b")
	a.exec(key, "gw-a", "true") // awake on A
	b.exec(key, "gw-b", "true") // awake on B
	kill := backendKiller(t, cl.dsn)
	type count struct{ ran, complete, enveloped, other int }
	var mu sync.Mutex
	counts := map[string]*count{ca.ID: {ran: 1}, cb.ID: {ran: 1}} // the execs above
	var others []string
	send := func(via *replica, id string, kind int) {
		o := gatewayRequest(t.Context(), kind, via.url, key, "echo/m", id)
		mu.Lock()
		defer mu.Unlock()
		c := counts[id]
		switch {
		case o.complete && strings.Contains(o.text, "gw-42"):
			c.ran++
		case o.complete:
			c.complete++ // its step failed before its command ran: nothing to bill
		case o.enveloped:
			c.enveloped++
		default:
			c.other++
			others = append(others, fmt.Sprintf("%s %s: %s", gatewayKinds[kind], id, o.text))
		}
	}
	killed := killRounds(kill, 300*time.Millisecond,
		func(i int) { send(b, ca.ID, i%len(gatewayKinds)) },
		func(i int) { send(b, cb.ID, i%len(gatewayKinds)) })
	if killed == 0 {
		t.Fatal("no backend was terminated")
	}
	// The requests after it all succeed, each kind, each way.
	kill()
	for kind := range gatewayKinds {
		for _, id := range []string{ca.ID, cb.ID} {
			o := gatewayRequest(t.Context(), kind, b.url, key, "echo/m", id)
			if !o.complete || !strings.Contains(o.text, "gw-42") {
				t.Fatalf("%s after the connections died: %s", gatewayKinds[kind], o.text)
			}
			counts[id].ran++
		}
	}
	for _, o := range others {
		// A request may fail while its connection dies, but visibly, in
		// its API's error shape.
		t.Errorf("a failure that is not the API's error: %s", o)
	}
	a.srv.WaitCalls(t.Context())
	b.srv.WaitCalls(t.Context())
	for id, c := range counts {
		rows := countRows(t, a, id)
		t.Logf("%s: %d backends terminated; answered complete after running: %d, complete without running: %d, API errors: %d; usage rows: %d",
			id, killed, c.ran, c.complete, c.enveloped, rows)
		// Every completion that ran has its row; a row more can only be
		// a request whose bill was written but reported failed (its
		// connection died after the commit, every retry too): answered
		// with an error, never a completion.
		if rows < c.ran || rows > c.ran+c.enveloped {
			t.Errorf("container %s: %d usage rows for %d requests answered complete after running a command (%d API errors)", id, rows, c.ran, c.enveloped)
		}
	}
}

// backendKiller returns a function that terminates every other connection
// to dsn's database (the replicas' pooled ones) and says how many, over an
// admin connection of its own, closed when t ends.
func backendKiller(t *testing.T, dsn string) func() int {
	t.Helper()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	admin.SetMaxOpenConns(1)
	return func() int {
		var n int
		if err := admin.QueryRowContext(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// killRounds runs each of traffic over and over (i = 0, 1, …), each in its
// own goroutine, while it terminates the replicas' backends five times,
// every apart; it stops the traffic every after the last and says how
// many backends it terminated.
func killRounds(kill func() int, every time.Duration, traffic ...func(i int)) int {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, f := range traffic {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f(i)
			}
		})
	}
	killed := 0
	for range 5 {
		time.Sleep(every)
		killed += kill()
	}
	time.Sleep(every)
	close(stop)
	wg.Wait()
	return killed
}
