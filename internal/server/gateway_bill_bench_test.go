package server

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
	"github.com/shellgate/shellgate/internal/metering"
)

// laterLedger is the server's ledger, which, while later is set, writes
// each bill in the background and returns at once: the request is
// answered without waiting for its bill, as the gateway did before issue
// 13. It times the writes it waits for.
type laterLedger struct {
	Ledger
	later atomic.Bool
	bg    sync.WaitGroup
	mu    sync.Mutex
	took  []time.Duration
}

func (l *laterLedger) Record(ctx context.Context, p Principal, id, containerID string, at time.Time, kind string, bill metering.Bill) error {
	if l.later.Load() {
		l.bg.Go(func() { l.Ledger.Record(context.WithoutCancel(ctx), p, id, containerID, at, kind, bill) })
		return nil
	}
	t0 := time.Now()
	err := l.Ledger.Record(ctx, p, id, containerID, at, kind, bill)
	l.mu.Lock()
	l.took = append(l.took, time.Since(t0))
	l.mu.Unlock()
	return err
}

// BenchmarkGatewayBill: the cost of writing a gateway request's bill
// before its answer (issue 13). One iteration is, for each client API,
// one 1-step request (the in-process model asks for `true` on a warm
// crun/busybox container, then answers) billed before the answer, and
// right after it the same request answered without waiting for its bill
// (written in the background, as before). Reported: the median wall time
// of each, their ratio, and the median ledger write (SQLite) the answer
// now waits for.
func BenchmarkGatewayBill(b *testing.B) {
	ll := &laterLedger{}
	models := gatewaytest.Models{"responses": shellEcho{cmd: "true"}, "messages": shellEcho{cmd: "true"}}
	e := newEnv(b, "crun", "busybox", func(c *Config) {
		c.Models = models
		ll.Ledger = c.Ledger
		c.Ledger = ll
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(client.CloseIdleConnections)
	for _, api := range []string{"responses", "messages"} {
		for _, stream := range []bool{false, true} {
			name := api
			if stream {
				name += "-streamed"
			}
			c := e.create(e.keyA, "bill-"+name)
			e.exec(e.keyA, c.ID, "true") // starts it
			b.Run(name, func(b *testing.B) {
				path, body, hdr := gatewayBody(api, c.ID, "", stream)
				hdr.Set("Authorization", "Bearer "+e.keyA)
				send := func(later bool) time.Duration {
					ll.later.Store(later)
					t0 := time.Now()
					if err := post(client, e.url+path, body, hdr); err != nil {
						b.Fatal(err)
					}
					return time.Since(t0)
				}
				send(false)
				send(true)
				ll.mu.Lock()
				ll.took = nil
				ll.mu.Unlock()
				var before, after []time.Duration
				b.ResetTimer()
				for range b.N {
					after = append(after, send(false))
					before = append(before, send(true))
				}
				b.StopTimer()
				ll.bg.Wait()
				ma, mb := medianMs(after), medianMs(before)
				b.ReportMetric(ma*1000, "billed-first-µs/req")
				b.ReportMetric(mb*1000, "billed-later-µs/req")
				b.ReportMetric(ma/mb, "ratio")
				ll.mu.Lock()
				b.ReportMetric(medianMs(ll.took)*1000, "ledger-write-µs")
				ll.mu.Unlock()
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
