package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
)

// BenchmarkChatPassThrough is one Chat Completions call through Shellgate
// (key check, body parse, model resolution, server-tool check, forward,
// copy back) beside the same call made directly to the zero-latency
// scripted upstream. Each iteration makes one of each, interleaved, so
// load on the machine hits both alike; it reports both medians, the
// microseconds Shellgate adds and the ratio. Sub-benchmarks: a JSON answer
// and an SSE stream.
func BenchmarkChatPassThrough(b *testing.B) {
	e, up := chatEnvB(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "sse"
		}
		b.Run(name, func(b *testing.B) {
			body := func(model string) []byte {
				s := `{"model":"` + model + `","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is the total revenue of the north region?"}],"temperature":0.2`
				if stream {
					s += `,"stream":true,"stream_options":{"include_usage":true}`
				}
				return []byte(s + "}")
			}
			direct, via := body("m1"), body("local/m1")
			call := func(url string, body []byte, key string) {
				if err := chatCall(client, url, key, body); err != nil {
					b.Fatal(err)
				}
			}
			viaDirect := func() { call(up.URL+"/v1/chat/completions", direct, "") }
			viaShellgate := func() { call(e.url+"/v1/chat/completions", via, e.keyA) }
			viaDirect()
			viaShellgate()
			sideBySide(b, "µs", "shellgate", viaShellgate, "direct", viaDirect)
		})
	}
}

// chatCall posts one Chat Completions body to url (with key as the bearer
// token unless empty) and reads the whole answer, which must be a 200 with
// a body.
func chatCall(client *http.Client, url, key string, body []byte) error {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || n == 0 {
		return fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
	}
	return nil
}

// chatEnvB is chatEnv's server for a benchmark: provider "local" is a
// zero-latency scripted upstream.
func chatEnvB(b *testing.B) (*env, *scripted.Server) {
	return chatEnvTB(b, &scripted.Script{Turns: []scripted.Turn{{Text: "The north region's total revenue is 37.5.",
		Usage: scripted.Usage{InputTokens: 30, OutputTokens: 10}}}, Repeat: true})
}

// BenchmarkChatPassThroughLoad is the pass-through at saturation: 32
// clients at once, each sending its next Chat Completions call as soon as
// its last one is answered, first all directly to the zero-latency
// scripted upstream and then all through Shellgate (the order alternating
// from one iteration to the next), every call checked for a 200. The
// client, Shellgate and the upstream share this process and its cores,
// so the measured requests/s of the two sides are of the whole system;
// the process's CPU time per call, through Shellgate minus directly, is
// Shellgate's own (its server side, its upstream client side), and the
// cores it has divided by that is the rate at which Shellgate alone would
// saturate them (capacity-req/s), the figure to set beside another
// gateway's measured saturation.
func BenchmarkChatPassThroughLoad(b *testing.B) {
	const workers, perSide = 32, 4000
	e, up := chatEnvB(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	body := func(model string) []byte {
		return []byte(`{"model":"` + model + `","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is the total revenue of the north region?"}],"temperature":0.2}`)
	}
	type side struct {
		url, key string
		body     []byte
	}
	direct := side{url: up.URL + "/v1/chat/completions", body: body("m1")}
	via := side{url: e.url + "/v1/chat/completions", key: e.keyA, body: body("local/m1")}
	call := func(s side) error { return chatCall(client, s.url, s.key, s.body) }
	// round makes perSide calls of s on workers goroutines and returns its
	// wall and CPU time.
	round := func(s side) (wall, cpu time.Duration) {
		var next atomic.Int64
		var failed atomic.Pointer[error]
		var wg sync.WaitGroup
		c0, t0 := cpuTime(), time.Now()
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= perSide {
					if err := call(s); err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			})
		}
		wg.Wait()
		wall, cpu = time.Since(t0), cpuTime()-c0
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
		return wall, cpu
	}
	round(direct) // connections opened, code and caches warm
	round(via)
	var dRate, vRate, ratio, own []float64
	swap := false
	for b.Loop() {
		var dw, dc, vw, vc time.Duration
		if swap {
			vw, vc = round(via)
			dw, dc = round(direct)
		} else {
			dw, dc = round(direct)
			vw, vc = round(via)
		}
		swap = !swap
		dr, vr := perSide/dw.Seconds(), perSide/vw.Seconds()
		dRate, vRate, ratio = append(dRate, dr), append(vRate, vr), append(ratio, vr/dr)
		own = append(own, us(vc-dc)/perSide)
	}
	ownCPU := median(own)
	b.ReportMetric(median(dRate), "direct-req/s")
	b.ReportMetric(median(vRate), "shellgate-req/s")
	b.ReportMetric(median(ratio), "ratio")
	b.ReportMetric(ownCPU, "own-cpu-µs/req")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0))*1e6/ownCPU, "capacity-req/s")
}
