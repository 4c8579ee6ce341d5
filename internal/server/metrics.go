package server

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shellgate/shellgate/sandbox"
)

// metrics are the server's Prometheus series, in a registry of its own
// (several servers in one test process do not collide).
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	commands *prometheus.HistogramVec
	// commandBy caches commands' child per outcome (commandOutcomes):
	// WithLabelValues hashes the label and looks it up on every call. A
	// child is made on first use, so /metrics lists only the outcomes seen.
	commandBy [len(commandOutcomes)]atomic.Pointer[prometheus.Observer]
	inflight  prometheus.Gauge
	expired   prometheus.Counter
	// proxied: requests sent on to the node their container is awake on.
	proxied prometheus.Counter

	guardDetections, guardRequests *prometheus.CounterVec
	requestLogs                    *prometheus.CounterVec
}

// commandOutcomes are the values of shellgate_command_duration_seconds'
// outcome label.
var commandOutcomes = [...]string{"exit", "timeout", "error"}

// observeCommand records a command's duration under commandOutcomes[i].
func (m *metrics) observeCommand(i int, seconds float64) {
	o := m.commandBy[i].Load()
	if o == nil {
		c := m.commands.WithLabelValues(commandOutcomes[i])
		o = &c
		m.commandBy[i].Store(o)
	}
	(*o).Observe(seconds)
}

func newMetrics(mgr sandbox.Backend) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shellgate_http_requests_total",
			Help: "HTTP requests by route pattern (\"unmatched\" when no route matched) and status code.",
		}, []string{"route", "code"}),
		commands: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shellgate_command_duration_seconds",
			Help:    "Duration of each command run through the exec API, by outcome (exit, timeout, error).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"outcome"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shellgate_exec_calls_in_flight",
			Help: "Exec calls running or waiting for their container.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shellgate_containers_expired_total",
			Help: "Containers whose files the retention sweep deleted.",
		}),
	}
	m.proxied = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shellgate_requests_proxied_total",
		Help: "Requests proxied to the replica their container is awake on.",
	})
	m.reg.MustRegister(m.proxied)
	m.guardDetections, m.guardRequests = guardMetrics()
	m.requestLogs = logMetrics()
	m.reg.MustRegister(m.requests, m.commands, m.inflight, m.expired, m.guardDetections, m.guardRequests, m.requestLogs,
		sandboxCollector{mgr},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// The warm pool, on backends that keep one (this machine's).
	if pool, ok := mgr.(sandbox.Pool); ok {
		m.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "shellgate_pool_ready",
				Help: "Started sandboxes waiting in the warm pool.",
			}, func() float64 { return float64(pool.PoolReady()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "shellgate_pool_size",
				Help: "Started sandboxes the warm pool keeps ready (--pool).",
			}, func() float64 { return float64(pool.PoolSize()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "shellgate_pool_hits_total",
				Help: "New sandboxes that took a started sandbox from the warm pool. Hit rate: hits / (hits + misses).",
			}, func() float64 { h, _ := pool.PoolStats(); return float64(h) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "shellgate_pool_misses_total",
				Help: "New sandboxes that started cold: the pool was empty or off, or the container's limits differ from the pool's defaults.",
			}, func() float64 { _, m := pool.PoolStats(); return float64(m) }),
		)
	}
	// The egress proxy's connections, bytes and DNS answers (sandboxes
	// with a network allowlist), when the backend runs it in-process.
	if ee, ok := mgr.(sandbox.EgressEngine); ok {
		if eg, _ := ee.Egress(); eg != nil {
			m.reg.MustRegister(eg.Collectors()...)
		}
	}
	return m
}

// sandboxCollector counts the data directory's sandboxes by state when
// scraped. Manager.List never waits for a command, and sees sandboxes
// awake in other Shellgate processes (the CLI) as running too.
type sandboxCollector struct{ mgr sandbox.Backend }

var sandboxesDesc = prometheus.NewDesc("shellgate_sandboxes",
	"Sandboxes of the data directory by state (running: awake in any Shellgate process; sleeping: only the home on disk).",
	[]string{"state"}, nil)

func (sandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sandboxesDesc }

func (c sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	infos, err := c.mgr.List()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(sandboxesDesc, err)
		return
	}
	counts := map[sandbox.Status]int{sandbox.Running: 0, sandbox.Sleeping: 0}
	for _, in := range infos {
		counts[in.Status]++
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), string(st))
	}
}
