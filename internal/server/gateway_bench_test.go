package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	rtrace "runtime/trace"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
)

// The gateway's benchmarks: a request of the Responses or Messages client
// API whose (zero-latency, loopback) scripted model asks for N shell steps
// each running `true` on a warm crun/busybox container, beside what a user
// would do without the gateway: the same N commands through the library
// (tool.RunShell on the same Manager) plus the N+1 upstream calls the
// gateway made, replayed byte for byte directly against the scripted
// model. The difference, divided by N, is the gateway's own overhead per
// tool step (frontend parse and render, the loop, the adapters, the
// server's key check, container record lookups, call lock, metering and
// the changed-files listing after each call).

// stepScript is n shell steps of `true` (on Gemini's code tool, of the
// Python code "pass", which runs as `python3 -c 'pass'`), then an answer.
func stepScript(n int) *scripted.Script {
	args, _ := json.Marshal(map[string]any{"commands": []string{"true"}})
	bashArgs, _ := json.Marshal(map[string]any{"command": "true"})
	s := &scripted.Script{}
	for range n {
		s.Turns = append(s.Turns, scripted.Turn{ToolCalls: []scripted.ToolCall{{Name: "shell|bash_code_execution|code_execution", Arguments: args,
			ArgumentsFor: map[string]json.RawMessage{"bash_code_execution": bashArgs, "code_execution": json.RawMessage(`{"code":"pass"}`)}}},
			Usage: scripted.Usage{InputTokens: 100, OutputTokens: 10}})
	}
	s.Turns = append(s.Turns, scripted.Turn{Text: "Done: {{last_tool_stdout}}", Usage: scripted.Usage{InputTokens: 120, OutputTokens: 5}})
	return s
}

// gatewayBody is a client request of api ("responses" or "messages") to
// the model behind the upstream flavour of the same name, on container id
// (empty: a new container; session: a named session instead).
func gatewayBody(api, container, session string, stream bool) (path string, body []byte, hdr http.Header) {
	return gatewayBodyFor(api, api, container, session, stream)
}

// gatewayBodyFor is gatewayBody to the provider named provider.
func gatewayBodyFor(api, provider, container, session string, stream bool) (path string, body []byte, hdr http.Header) {
	hdr = http.Header{"Content-Type": {"application/json"}}
	var m map[string]any
	switch api {
	case "responses":
		env := map[string]any{"type": "container_auto"}
		if container != "" {
			env = map[string]any{"type": "container_reference", "container_id": container}
		}
		m = map[string]any{"model": provider + "/m", "input": "Run it.", "stream": stream,
			"tools": []any{map[string]any{"type": "shell", "environment": env}}}
		if session != "" {
			m["session_id"] = session
		}
		path = "/v1/responses"
	case "messages":
		m = map[string]any{"model": provider + "/m", "max_tokens": 1000, "stream": stream,
			"messages": []any{map[string]any{"role": "user", "content": "Run it."}},
			"tools":    []any{map[string]any{"type": "code_execution_20250825", "name": "code_execution"}}}
		if container != "" {
			m["container"] = container
		}
		path = "/v1/messages"
		hdr.Set("anthropic-version", "2023-06-01")
	case "gemini":
		// Gemini has no container field: a session names it (the
		// container's name), else each request gets a new one.
		m = map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Run it."}}}},
			"tools": []any{map[string]any{"codeExecution": map[string]any{}}}}
		path = "/v1beta/models/" + provider + "/m:generateContent"
		if stream {
			path = "/v1beta/models/" + provider + "/m:streamGenerateContent?alt=sse"
		}
		if session != "" {
			hdr.Set("x-session-id", session)
		}
	}
	body, _ = json.Marshal(m)
	return path, body, hdr
}

// post sends one request and reads the whole answer; an error for any
// status but 200, an empty body or an error event in a stream.
func post(client *http.Client, url string, body []byte, hdr http.Header) error {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	for k, v := range hdr {
		if k != "Content-Length" {
			req.Header[k] = v
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK || len(out) == 0:
		return fmt.Errorf("status %d: %.300s", resp.StatusCode, out)
	case bytes.Contains(out, []byte("event: error")) || bytes.Contains(out, []byte(`"type":"response.failed"`)):
		return fmt.Errorf("error event: %.300s", out)
	}
	return nil
}

// replays are the upstream requests the model received, to send again.
type replay struct {
	path string
	body []byte
	hdr  http.Header
}

func replays(model *scripted.Server) []replay {
	var out []replay
	for _, r := range model.Requests() {
		out = append(out, replay{r.Path, r.Raw, r.Header.Clone()})
	}
	return out
}

// gatewaySteps are the two request sizes of BenchmarkGatewayStep: the
// overhead of a step is the slope between them. Twenty steps apart, the
// noise of one request's wall time (scheduling on shared CPUs) is divided
// by twenty in the slope; 21 steps stay within max_tool_calls (30), and
// the longer conversation (each step re-sends everything before it) is
// charged to the gateway, as a real run's would be.
var gatewaySteps = [2]int{1, 21}

// stepSample is one iteration's measure of a request size: the gateway's
// request minus its direct equivalent, in wall time, CPU time and heap
// objects allocated.
type stepSample struct {
	wall, cpu time.Duration
	allocs    int64
	gw, dir   time.Duration // wall time of each side
	// bare is wall less the time spent in the sandbox's Manager.Exec on
	// each side (the commands themselves, whose jitter under load is most
	// of wall's noise).
	bare time.Duration
	// own and exch are each step's own time and upstream exchange (see
	// stepClock), [0] the gateway's and [1] the direct side's.
	own, exch [2][]time.Duration
}

// timedExec is an Executor that adds up the time its commands take, and
// records each in clock.
type timedExec struct {
	ex    tool.Executor
	d     time.Duration
	clock *stepClock
}

func (t *timedExec) Exec(ctx context.Context, name string, cmd sandbox.Command) (sandbox.Result, error) {
	t0 := time.Now()
	res, err := t.ex.Exec(ctx, name, cmd)
	t.d += time.Since(t0)
	t.clock.add(true, t0, time.Now())
	return res, err
}

// stepClock is the timeline of the request being measured: its upstream
// exchanges (from the HTTP client's RoundTrip to the answer's last byte
// read) and its commands (Manager.Exec), in order. What a side does in a
// step beyond the command and the upstream call is the gap between the
// model's answer and the next request to the model, less the commands run
// in it: on the gateway's side, decoding the answer, the loop, the tool's
// bookkeeping, the result and encoding the next request; on the direct
// side, the library's RunShell (the same Manager.Exec) and nothing else.
type stepClock struct {
	mu     sync.Mutex
	events []clockEvent
}

type clockEvent struct {
	cmd        bool // else an upstream exchange
	start, end time.Time
}

func (c *stepClock) add(cmd bool, start, end time.Time) {
	c.mu.Lock()
	c.events = append(c.events, clockEvent{cmd, start, end})
	c.mu.Unlock()
}

// take returns the events recorded since the last take and forgets them.
func (c *stepClock) take() []clockEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev := c.events
	c.events = nil
	return ev
}

// stepGaps splits a request's timeline into its steps: for each exchange after
// the first, own is the gap since the previous exchange's answer less the
// commands in it, exch the exchange's own duration.
func stepGaps(ev []clockEvent) (own, exch []time.Duration) {
	var prev time.Time
	var cmds time.Duration
	for _, e := range ev {
		switch {
		case e.cmd:
			cmds += e.end.Sub(e.start)
		case !prev.IsZero():
			own = append(own, e.start.Sub(prev)-cmds)
			exch = append(exch, e.end.Sub(e.start))
			fallthrough
		default:
			prev, cmds = e.end, 0
		}
	}
	return own, exch
}

// clockTransport records each exchange of its client in clock: from
// RoundTrip to the read that ends the answer's body (or its Close).
type clockTransport struct {
	rt    http.RoundTripper
	clock *stepClock
	side  string // "gateway" or "direct", in the runtime trace
}

func (t clockTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	// The exchange's start in the runtime trace (-test.trace), for
	// bench/exchtrace; nothing when the trace is off.
	rtrace.Log(r.Context(), "exchange", t.side)
	start := time.Now()
	resp, err := t.rt.RoundTrip(r)
	if err == nil {
		resp.Body = &clockBody{ReadCloser: resp.Body, start: start, clock: t.clock}
	}
	return resp, err
}

type clockBody struct {
	io.ReadCloser
	start time.Time
	clock *stepClock
	done  bool
}

func (b *clockBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.done {
		b.done = true
		b.clock.add(false, b.start, time.Now())
	}
	return n, err
}

func (b *clockBody) Close() error {
	if !b.done {
		b.done = true
		b.clock.add(false, b.start, time.Now())
	}
	return b.ReadCloser.Close()
}

// clockBackend is the server's sandbox backend with each command recorded
// in clock (around the same Manager.Exec as timedExec's).
type clockBackend struct {
	sandbox.Backend
	clock *stepClock
}

func (c clockBackend) Exec(ctx context.Context, name string, cmd sandbox.Command) (sandbox.Result, error) {
	t0 := time.Now()
	res, err := c.Backend.Exec(ctx, name, cmd)
	c.clock.add(true, t0, time.Now())
	return res, err
}

// commandTime is the time the server's commands have taken, from its
// shellgate_command_duration_seconds histogram (observed around the same
// Manager.Exec call as timedExec's).
func commandTime(b *testing.B, s *Server) time.Duration {
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "shellgate_command_duration_seconds" {
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// BenchmarkGatewayStep: one iteration is, for each of gatewaySteps, one
// gateway request of that many steps and, right after it, the library +
// direct-upstream equivalent (the same commands on the same container, the
// same upstream request bytes replayed to the same scripted model). It
// reports the gateway's own overhead (gateway − direct) per step — the
// slope between the two sizes, so it leaves out what a request costs once
// (the client's HTTP exchange, the key check, opening the container, the
// ledger write) — and that per request cost (the overhead of the 1-step
// request less one step), in wall time, in CPU time of this process
// (server, scripted model and clients; not the sandbox's processes: less
// distorted than wall time when other processes share the CPUs) and in
// heap allocations (a count, independent of the load, but it counts every
// goroutine of the process, so background work adds to either side).
//
// Each iteration gives one slope of each kind, computed from that
// iteration's own four requests; the reported value is the median of these
// per-iteration slopes, so a burst of load spoils the iterations it hits,
// not the estimate.
//
// excl-cmd-µs/step is the same wall-time slope with the time of the
// commands themselves taken out on both sides (Manager.Exec, timed by the
// server's command histogram and by a timing wrapper around the library's
// executor): what issue 8 calls the overhead beyond the command. A
// command's own time (≈ 5–10 ms for `true` in crun on a loaded machine)
// varies by milliseconds from one run to the next, which no pairing of
// gateway and direct requests cancels; without it the estimate is stable
// enough to compare with a 100 µs target.
//
// step-total-µs measures the same thing step by step instead of as a
// slope: each side's timeline (stepClock: every upstream exchange, from the
// HTTP client's RoundTrip to its answer's last byte, and every
// Manager.Exec) gives, for each step, the time from the model's answer to
// the next request to the model less the commands in between (its own
// time) and the next exchange's duration; step-total-µs is the median,
// over every step of every request, of the gateway's own time plus
// exchange less its direct twin's for the same step. Its two parts are
// step-own-µs (the own times' difference: decoding, the loop, the tool's
// bookkeeping, encoding) and step-exch-µs (the exchanges' difference: the
// same bytes, so only what the gateway's state does to the HTTP exchange,
// e.g. which threads are awake), each a median of per-step differences;
// step-gw-µs and step-direct-µs are the two sides' own times. It leaves
// out what the slope also charges to the gateway outside the steps
// (rendering and writing a longer answer at the end). Hundreds of short
// intervals, each measured where it happens, make it steadier than the
// slope between two requests' wall times.
func BenchmarkGatewayStep(b *testing.B) {
	var ps []upstream.Provider
	var models [2]*scripted.Server
	clock := &stepClock{}
	// Both sides' upstream clients: the same transport settings, each
	// exchange recorded.
	newClient := func(side string) *http.Client {
		return &http.Client{Transport: clockTransport{rt: &http.Transport{MaxIdleConnsPerHost: 8}, clock: clock, side: side}}
	}
	upClient := newClient("gateway")
	b.Cleanup(upClient.CloseIdleConnections)
	for i, n := range gatewaySteps {
		models[i] = scripted.NewServer(stepScript(n))
		b.Cleanup(models[i].Close)
		for _, api := range []string{"responses", "messages", "gemini", "chat_completions"} {
			base := models[i].URL + "/v1"
			if api == "gemini" {
				base = models[i].URL + "/v1beta"
			}
			ps = append(ps, upstream.Provider{Name: fmt.Sprintf("%s%d", api, n), API: api,
				Endpoint: upstream.Endpoint{BaseURL: base, APIKey: "sk-scripted", Timeout: 30 * time.Second, Client: upClient}})
		}
	}
	e := newEnv(b, "crun", "busybox", func(c *Config) {
		c.Models = upstream.NewProviders(ps...)
		c.Sandboxes = clockBackend{Backend: c.Sandboxes, clock: clock}
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}} // the client's, to the gateway
	b.Cleanup(client.CloseIdleConnections)
	directClient := newClient("direct") // the direct side's, to the model
	b.Cleanup(directClient.CloseIdleConnections)
	// chat_completions is a Responses client on a Chat Completions
	// upstream (vLLM, Ollama, OpenRouter: the other APIs' clients on it
	// differ only in the client's own wire format).
	runs := 0 // -count runs each sub-benchmark again on this env: a name each
	for _, api := range []string{"responses", "messages", "gemini", "chat_completions"} {
		b.Run(api, func(b *testing.B) {
			runs++
			c := e.create(e.keyA, fmt.Sprintf("bench-%s-%d", api, runs))
			e.exec(e.keyA, c.ID, "true") // starts it
			command := "true"
			if api == "gemini" {
				command = "python3 -c 'pass'" // what its code tool runs (not found in busybox: the same on both sides)
			}
			plan, err := tool.ShellArgs{Commands: []string{command}}.Plan()
			if err != nil {
				b.Fatal(err)
			}
			var runs [2]func(swap bool) stepSample
			for i, n := range gatewaySteps {
				model := models[i]
				container, session := c.ID, ""
				if api == "gemini" {
					container, session = "", c.Name
				}
				clientAPI := api
				if api == "chat_completions" {
					clientAPI = "responses"
				}
				path, body, hdr := gatewayBodyFor(clientAPI, fmt.Sprintf("%s%d", api, n), container, session, false)
				hdr.Set("Authorization", "Bearer "+e.keyA)
				viaGateway := func() {
					if err := post(client, e.url+path, body, hdr); err != nil {
						b.Fatal(err)
					}
				}
				model.Reset()
				viaGateway()
				rs := replays(model)
				if len(rs) != n+1 {
					b.Fatalf("the gateway made %d upstream calls, want %d", len(rs), n+1)
				}
				timed := &timedExec{ex: e.mgr, clock: clock}
				direct := func() {
					for i, r := range rs {
						if err := post(directClient, model.URL+r.path, r.body, r.hdr); err != nil {
							b.Fatal(err)
						}
						if i < n {
							out, err := tool.RunShell(b.Context(), timed, c.ID, plan)
							if err != nil || len(out) != 1 || out[0].Outcome.ExitCode == nil || (*out[0].Outcome.ExitCode != 0 && command == "true") {
								b.Fatalf("library: %v %+v", err, out)
							}
						}
					}
				}
				direct()
				runs[i] = func(swap bool) stepSample {
					model.Reset()
					var wall, cpu, cmds [2]time.Duration
					var objs [2]uint64
					order := []int{0, 1}
					if swap {
						order = []int{1, 0}
					}
					var own, exch [2][]time.Duration
					for _, k := range order {
						f := []func(){viaGateway, direct}[k]
						x0 := commandTime(b, e.srv)
						timed.d = 0
						clock.take()
						a0, c0, t0 := allocs(), cpuTime(), time.Now()
						f()
						wall[k], cpu[k], objs[k] = time.Since(t0), cpuTime()-c0, allocs()-a0
						own[k], exch[k] = stepGaps(clock.take())
						if len(own[k]) != n {
							b.Fatalf("the timeline has %d steps, want %d", len(own[k]), n)
						}
						cmds[k] = timed.d
						if k == 0 {
							cmds[k] = commandTime(b, e.srv) - x0
						}
					}
					return stepSample{wall: wall[0] - wall[1], cpu: cpu[0] - cpu[1], allocs: int64(objs[0]) - int64(objs[1]),
						gw: wall[0], dir: wall[1], bare: (wall[0] - cmds[0]) - (wall[1] - cmds[1]), own: own, exch: exch}
				}
			}
			steps := gatewaySteps[1] - gatewaySteps[0]
			var perStep, perReq, cpuStep, cpuReq, objStep, objReq, bareStep, bareReq []float64
			var gw, dir []time.Duration
			var ownGw, ownDir, ownDiff, exchDiff, totalDiff []float64
			// The order of the gateway request and its direct twin
			// alternates from one iteration to the next, so that neither
			// side always gets the warmer caches of running second.
			for i := 0; b.Loop(); i++ {
				s0, s1 := runs[0](i%2 == 1), runs[1](i%2 == 1)
				ws := us(s1.wall-s0.wall) / float64(steps)
				cs := us(s1.cpu-s0.cpu) / float64(steps)
				os := float64(s1.allocs-s0.allocs) / float64(steps)
				perStep, perReq = append(perStep, ws), append(perReq, us(s0.wall)-ws)
				cpuStep, cpuReq = append(cpuStep, cs), append(cpuReq, us(s0.cpu)-cs)
				objStep, objReq = append(objStep, os), append(objReq, float64(s0.allocs)-os)
				gw, dir = append(gw, s1.gw), append(dir, s1.dir)
				for _, s := range []stepSample{s0, s1} {
					for k := range s.own[0] {
						ownGw, ownDir = append(ownGw, us(s.own[0][k])), append(ownDir, us(s.own[1][k]))
						ownDiff = append(ownDiff, us(s.own[0][k]-s.own[1][k]))
						exchDiff = append(exchDiff, us(s.exch[0][k]-s.exch[1][k]))
						totalDiff = append(totalDiff, us(s.own[0][k]+s.exch[0][k]-s.own[1][k]-s.exch[1][k]))
					}
				}
				bs := us(s1.bare-s0.bare) / float64(steps)
				bareStep, bareReq = append(bareStep, bs), append(bareReq, us(s0.bare)-bs)
			}
			b.ReportMetric(medianMs(gw), "gateway-ms")
			b.ReportMetric(medianMs(dir), "direct-ms")
			b.ReportMetric(medianMs(gw)/medianMs(dir), "ratio")
			b.ReportMetric(median(perStep), "overhead-µs/step")
			b.ReportMetric(median(perReq), "overhead-µs/request")
			b.ReportMetric(median(bareStep), "excl-cmd-µs/step")
			b.ReportMetric(median(bareReq), "excl-cmd-µs/request")
			b.ReportMetric(median(totalDiff), "step-total-µs")
			b.ReportMetric(median(ownGw), "step-gw-µs")
			b.ReportMetric(median(ownDir), "step-direct-µs")
			b.ReportMetric(median(ownDiff), "step-own-µs")
			b.ReportMetric(median(exchDiff), "step-exch-µs")
			b.ReportMetric(median(cpuStep), "cpu-µs/step")
			b.ReportMetric(median(cpuReq), "cpu-µs/request")
			b.ReportMetric(median(objStep), "allocs/step")
			b.ReportMetric(median(objReq), "allocs/request")
		})
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// median is the median of v (the mean of the middle two for an even
// count); v is sorted.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// allocs is how many heap objects this process has allocated. It is
// runtime.ReadMemStats's count, exact (it stops the world and flushes every
// P's cache), where runtime/metrics' /gc/heap/allocs:objects counts a small
// object's whole span when a P takes it, so a request's count was off by
// up to a span's objects.
func allocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func medianMs(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2]) / float64(time.Millisecond)
}

func percentileMs(d []time.Duration, p float64) float64 {
	slices.Sort(d)
	i := int(float64(len(d))*p+0.999999) - 1
	return float64(d[max(0, min(i, len(d)-1))]) / float64(time.Millisecond)
}
