package egress

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the engine's counters; the server registers Collectors.
type metrics struct {
	conns *prometheus.CounterVec // by kind and verdict
	bytes *prometheus.CounterVec // by direction
	dns   *prometheus.CounterVec // by verdict
}

func newMetrics() *metrics {
	m := &metrics{
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shellgate_egress_connections_total",
			Help: "Sandbox connections through the egress proxy, by kind (http, tls, connect) and verdict (allowed, denied, failed).",
		}, []string{"kind", "verdict"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shellgate_egress_bytes_total",
			Help: "Bytes through the egress proxy, by direction (sent: from sandboxes, received: to them).",
		}, []string{"direction"}),
		dns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shellgate_egress_dns_queries_total",
			Help: "DNS questions from sandboxes, by verdict (allowed: answered; denied: NXDOMAIN, never forwarded).",
		}, []string{"verdict"}),
	}
	// Every series exists from the start, at zero.
	for _, k := range []string{"http", "tls", "connect"} {
		for _, v := range []string{Allowed, Denied, Failed} {
			m.conns.WithLabelValues(k, v)
		}
	}
	m.bytes.WithLabelValues("sent")
	m.bytes.WithLabelValues("received")
	m.dns.WithLabelValues(Allowed)
	m.dns.WithLabelValues(Denied)
	return m
}

// Collectors are the engine's Prometheus metrics, for the server to
// register.
func (e *Engine) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.metrics.conns, e.metrics.bytes, e.metrics.dns}
}

// reporter counts, logs and hands on records.
type reporter struct {
	metrics *metrics
	log     *slog.Logger
	onConn  func(Record)
}

// report counts a record, logs it and hands it to Config.OnConn.
func (e *reporter) report(r Record) {
	if r.Kind != "dns" {
		e.metrics.conns.WithLabelValues(r.Kind, r.Verdict).Inc()
		e.metrics.bytes.WithLabelValues("sent").Add(float64(r.Sent))
		e.metrics.bytes.WithLabelValues("received").Add(float64(r.Received))
	}
	e.log.Info("egress", "sandbox", r.Sandbox, "kind", r.Kind, "host", r.Host, "port", r.Port,
		"verdict", r.Verdict, "reason", r.Reason, "sent", r.Sent, "received", r.Received, "upstream", r.Upstream)
	if e.onConn != nil {
		e.onConn(r)
	}
}
