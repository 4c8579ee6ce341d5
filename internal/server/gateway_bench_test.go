package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
	"github.com/shellgate/shellgate/internal/tool"
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

// stepScript is n shell steps of `true`, then an answer.
func stepScript(n int) *scripted.Script {
	args, _ := json.Marshal(map[string]any{"commands": []string{"true"}})
	bashArgs, _ := json.Marshal(map[string]any{"command": "true"})
	s := &scripted.Script{}
	for range n {
		s.Turns = append(s.Turns, scripted.Turn{ToolCalls: []scripted.ToolCall{{Name: "shell|bash_code_execution", Arguments: args,
			ArgumentsFor: map[string]json.RawMessage{"bash_code_execution": bashArgs}}}, Usage: scripted.Usage{InputTokens: 100, OutputTokens: 10}})
	}
	s.Turns = append(s.Turns, scripted.Turn{Text: "Done: {{last_tool_stdout}}", Usage: scripted.Usage{InputTokens: 120, OutputTokens: 5}})
	return s
}

// gatewayBody is a client request of api ("responses" or "messages") to
// the model behind the upstream flavour of the same name, on container id
// (empty: a new container; session: a named session instead).
func gatewayBody(api, container, session string, stream bool) (path string, body []byte, hdr http.Header) {
	hdr = http.Header{"Content-Type": {"application/json"}}
	var m map[string]any
	switch api {
	case "responses":
		env := map[string]any{"type": "container_auto"}
		if container != "" {
			env = map[string]any{"type": "container_reference", "container_id": container}
		}
		m = map[string]any{"model": "responses/m", "input": "Run it.", "stream": stream,
			"tools": []any{map[string]any{"type": "shell", "environment": env}}}
		if session != "" {
			m["session_id"] = session
		}
		path = "/v1/responses"
	case "messages":
		m = map[string]any{"model": "messages/m", "max_tokens": 1000, "stream": stream,
			"messages": []any{map[string]any{"role": "user", "content": "Run it."}},
			"tools":    []any{map[string]any{"type": "code_execution_20250825", "name": "code_execution"}}}
		if container != "" {
			m["container"] = container
		}
		path = "/v1/messages"
		hdr.Set("anthropic-version", "2023-06-01")
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

const gatewaySteps = 5

// BenchmarkGatewayStep: one iteration is one gateway request of
// gatewaySteps steps and, interleaved, the library + direct-upstream
// equivalent; it reports both medians, the overhead per step in µs and
// the ratio of the whole requests.
func BenchmarkGatewayStep(b *testing.B) {
	model := scripted.NewServer(stepScript(gatewaySteps))
	b.Cleanup(model.Close)
	e := newEnv(b, "crun", "busybox", func(c *Config) { c.Models = upstream.EveryAPI(model.URL, 30*time.Second) })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	b.Cleanup(client.CloseIdleConnections)
	for _, api := range []string{"responses", "messages"} {
		b.Run(api, func(b *testing.B) {
			c := e.create(e.keyA, "bench-"+api)
			e.exec(e.keyA, c.ID, "true") // starts it
			plan, err := tool.ShellArgs{Commands: []string{"true"}}.Plan()
			if err != nil {
				b.Fatal(err)
			}
			path, body, hdr := gatewayBody(api, c.ID, "", false)
			hdr.Set("Authorization", "Bearer "+e.keyA)
			viaGateway := func() {
				if err := post(client, e.url+path, body, hdr); err != nil {
					b.Fatal(err)
				}
			}
			model.Reset()
			viaGateway()
			rs := replays(model)
			if len(rs) != gatewaySteps+1 {
				b.Fatalf("the gateway made %d upstream calls, want %d", len(rs), gatewaySteps+1)
			}
			direct := func() {
				for i, r := range rs {
					if err := post(client, model.URL+r.path, r.body, r.hdr); err != nil {
						b.Fatal(err)
					}
					if i < gatewaySteps {
						out, err := tool.RunShell(b.Context(), e.mgr, c.ID, plan)
						if err != nil || len(out) != 1 || out[0].Outcome.ExitCode == nil || *out[0].Outcome.ExitCode != 0 {
							b.Fatalf("library: %v %+v", err, out)
						}
					}
				}
			}
			direct()
			var g, d []time.Duration
			for b.Loop() {
				model.Reset()
				t0 := time.Now()
				viaGateway()
				t1 := time.Now()
				direct()
				g, d = append(g, t1.Sub(t0)), append(d, time.Since(t1))
			}
			mg, md := medianMs(g), medianMs(d)
			b.ReportMetric(mg, "gateway-ms")
			b.ReportMetric(md, "direct-ms")
			b.ReportMetric((mg-md)*1000/gatewaySteps, "overhead-µs/step")
			b.ReportMetric(mg/md, "ratio")
		})
	}
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
