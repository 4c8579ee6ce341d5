package server

import (
	"bytes"
	"io"
	"net/http"
	"slices"
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
				req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if key != "" {
					req.Header.Set("Authorization", "Bearer "+key)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n == 0 {
					b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
				}
			}
			viaDirect := func() { call(up.URL+"/v1/chat/completions", direct, "") }
			viaShellgate := func() { call(e.url+"/v1/chat/completions", via, e.keyA) }
			viaDirect()
			viaShellgate()
			var d, s []time.Duration
			for b.Loop() {
				t0 := time.Now()
				viaShellgate()
				t1 := time.Now()
				viaDirect()
				s, d = append(s, t1.Sub(t0)), append(d, time.Since(t1))
			}
			median := func(x []time.Duration) float64 {
				slices.Sort(x)
				return float64(x[len(x)/2]) / float64(time.Microsecond)
			}
			ms, md := median(s), median(d)
			b.ReportMetric(ms, "shellgate-µs")
			b.ReportMetric(md, "direct-µs")
			b.ReportMetric(ms-md, "added-µs")
			b.ReportMetric(ms/md, "ratio")
		})
	}
}

// chatEnvB is chatEnv's server for a benchmark: provider "local" is a
// zero-latency scripted upstream.
func chatEnvB(b *testing.B) (*env, *scripted.Server) {
	return chatEnvTB(b, &scripted.Script{Turns: []scripted.Turn{{Text: "The north region's total revenue is 37.5.",
		Usage: scripted.Usage{InputTokens: 30, OutputTokens: 10}}}, Repeat: true})
}
