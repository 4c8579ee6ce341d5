package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
)

// BenchmarkRequestLogs is what request logging adds to a gateway request:
// a Responses request whose loopback scripted model asks for one shell
// step (`true` on a warm crun/busybox container) and then answers, from a
// workspace with logging off and, interleaved (alternating which goes
// first), one with logging on (same
// server, each its own warm container). It reports the client's median
// latency of each and their ratio, and how long the background writer
// still worked after the client had its answer (write-µs: shaping and
// storing the record in SQLite, off the client's path).
func BenchmarkRequestLogs(b *testing.B) {
	model := scripted.NewServer(stepScript(1))
	b.Cleanup(model.Close)
	ps := []upstream.Provider{{Name: "responses1", API: "responses",
		Endpoint: upstream.Endpoint{BaseURL: model.URL + "/v1", APIKey: "sk-scripted", Timeout: 30 * time.Second}}}
	e := newEnv(b, "crun", "busybox", func(c *Config) { c.Models = upstream.NewProviders(ps...) })
	e.srv.cfg.Logs = e.st.Logs()
	if st, out := e.do(http.MethodPut, "/api/v1/logging", e.keyA, map[string]any{"enabled": true}); st != http.StatusOK {
		b.Fatalf("%d %s", st, out)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	b.Cleanup(client.CloseIdleConnections)
	send := map[bool]func(){}
	for _, on := range []bool{false, true} {
		key := e.keyB
		if on {
			key = e.keyA
		}
		c := e.create(key, fmt.Sprint("bench-logs-", on))
		e.exec(key, c.ID, "true") // starts it
		path, body, hdr := gatewayBodyFor("responses", "responses1", c.ID, "", false)
		hdr.Set("Authorization", "Bearer "+key)
		send[on] = func() {
			model.Reset()
			if err := post(client, e.url+path, body, hdr); err != nil {
				b.Fatal(err)
			}
		}
		send[on]()
	}
	e.srv.flushLogs()
	var off, on, write []time.Duration
	i := 0
	for b.Loop() {
		// Each first every other iteration: neither gains from the order.
		for _, logged := range [2]bool{i%2 == 0, i%2 != 0} {
			t0 := time.Now()
			send[logged]()
			t1 := time.Now()
			if !logged {
				off = append(off, t1.Sub(t0))
				continue
			}
			e.srv.flushLogs()
			on = append(on, t1.Sub(t0))
			write = append(write, time.Since(t1))
		}
		i++
	}
	b.ReportMetric(medianMs(off), "off-ms")
	b.ReportMetric(medianMs(on), "on-ms")
	b.ReportMetric(medianMs(on)/medianMs(off), "ratio")
	b.ReportMetric(medianMs(write)*1000, "write-µs")
}
