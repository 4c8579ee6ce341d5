package broadcast

import (
	"bytes"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.yaml.in/yaml/v3"
)

// Destination is one place traces go: the `broadcast:` list of the serve
// config file (`shellgate serve --config FILE`, beside `providers:`):
//
//	broadcast:
//	  - type: otlp_http                      # the only type today
//	    endpoint: http://127.0.0.1:4318      # no path: /v1/traces is added
//	    name: local                          # optional: the metrics' destination label
//	    headers: {x-team: gateway}           # optional, sent with every export
//	    headers_env: {authorization: OTLP_AUTH}  # optional: header from an environment variable (secrets)
//	    compression: gzip                    # gzip (default) or none
//	    timeout: 10s                         # one export attempt; default 10s
//	    queue_size: 2048                     # traces waiting; full: dropped, counted
//	    max_batch: 256                       # traces per export
//	    batch_delay: 200ms                   # how long a trace waits for others to share its export
//	    retry: {initial_interval: 1s, max_interval: 10s, max_elapsed_time: 30s}
type Destination struct {
	Type        string            `yaml:"type"`
	Endpoint    string            `yaml:"endpoint"`
	Name        string            `yaml:"name"`
	Headers     map[string]string `yaml:"headers"`
	HeadersEnv  map[string]string `yaml:"headers_env"`
	Compression string            `yaml:"compression"`
	Timeout     time.Duration     `yaml:"timeout"`
	QueueSize   int               `yaml:"queue_size"`
	MaxBatch    int               `yaml:"max_batch"`
	BatchDelay  time.Duration     `yaml:"batch_delay"`
	Retry       Retry             `yaml:"retry"`
}

// Retry is the exporter's backoff for retryable failures (429, 502, 503,
// 504, transport errors): the first wait, the longest, and when to give
// up on a batch.
type Retry struct {
	InitialInterval time.Duration `yaml:"initial_interval"`
	MaxInterval     time.Duration `yaml:"max_interval"`
	MaxElapsedTime  time.Duration `yaml:"max_elapsed_time"`
}

// TypeOTLPHTTP is OTLP over HTTP with protobuf bodies.
const TypeOTLPHTTP = "otlp_http"

// Defaults.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultQueueSize = 2048
	DefaultMaxBatch  = 256
	// DefaultBatchDelay is how long the first trace of an export waits
	// for others: a busy server makes a few exports a second, not one per
	// request.
	DefaultBatchDelay = 200 * time.Millisecond
	maxQueueSize      = 1 << 20
)

var (
	destName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)
	headerName = regexp.MustCompile(`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`)
)

// ParseConfig reads the `broadcast:` list of a serve config file (other
// top-level keys are another reader's) and resolves headers_env with
// getenv. No list: none. Each error names the field.
func ParseConfig(b []byte, getenv func(string) string) ([]Destination, error) {
	var top struct {
		Broadcast yaml.Node `yaml:"broadcast"`
	}
	if err := yaml.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("not a valid config: %w", err)
	}
	if top.Broadcast.Kind == 0 {
		return nil, nil
	}
	raw, err := yaml.Marshal(&top.Broadcast)
	if err != nil {
		return nil, fmt.Errorf("broadcast: %w", err)
	}
	var ds []Destination
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&ds); err != nil {
		return nil, fmt.Errorf("broadcast: want a list of destinations: %w", err)
	}
	for i := range ds {
		if err := ds[i].validate(fmt.Sprintf("broadcast[%d]", i), getenv); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// FromEnv is the destinations of SHELLGATE_BROADCAST_OTLP_ENDPOINT
// (comma-separated OTLP/HTTP endpoints), with the headers of
// SHELLGATE_BROADCAST_OTLP_HEADERS ("k1=v1,k2=v2", values URL-encoded as
// in OTEL_EXPORTER_OTLP_HEADERS) on each; none when it is unset.
func FromEnv(getenv func(string) string) ([]Destination, error) {
	list := getenv("SHELLGATE_BROADCAST_OTLP_ENDPOINT")
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var hdr map[string]string
	if h := strings.TrimSpace(getenv("SHELLGATE_BROADCAST_OTLP_HEADERS")); h != "" {
		hdr = map[string]string{}
		for _, kv := range strings.Split(h, ",") {
			k, v, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, fmt.Errorf("SHELLGATE_BROADCAST_OTLP_HEADERS: %q is not key=value", kv)
			}
			uv, err := url.PathUnescape(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("SHELLGATE_BROADCAST_OTLP_HEADERS: header %s: %v", k, err)
			}
			hdr[k] = uv
		}
	}
	var ds []Destination
	for i, ep := range strings.Split(list, ",") {
		d := Destination{Type: TypeOTLPHTTP, Endpoint: strings.TrimSpace(ep), Headers: hdr}
		if err := d.validate(fmt.Sprintf("SHELLGATE_BROADCAST_OTLP_ENDPOINT[%d]", i), getenv); err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

func (d *Destination) validate(at string, getenv func(string) string) error {
	switch d.Type {
	case TypeOTLPHTTP:
	case "":
		return fmt.Errorf("%s.type: required (otlp_http)", at)
	default:
		return fmt.Errorf("%s.type: %q is not otlp_http", at, d.Type)
	}
	u, err := url.Parse(d.Endpoint)
	switch {
	case d.Endpoint == "":
		return fmt.Errorf("%s.endpoint: required, like http://127.0.0.1:4318", at)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%s.endpoint: %q is not an http(s) URL without credentials, query or fragment", at, d.Endpoint)
	}
	if d.Name != "" && !destName.MatchString(d.Name) {
		return fmt.Errorf("%s.name: %q: letters, digits, '_', '.', ':' and '-', at most 64", at, d.Name)
	}
	for k := range d.Headers {
		if !headerName.MatchString(k) {
			return fmt.Errorf("%s.headers: %q is not a header name", at, k)
		}
	}
	for k, env := range d.HeadersEnv {
		if !headerName.MatchString(k) {
			return fmt.Errorf("%s.headers_env: %q is not a header name", at, k)
		}
		v := getenv(env)
		if v == "" {
			return fmt.Errorf("%s.headers_env.%s: the environment variable %s is not set", at, k, env)
		}
		if d.Headers == nil {
			d.Headers = map[string]string{}
		} else if _, dup := d.Headers[k]; dup {
			return fmt.Errorf("%s.headers_env.%s: also in headers", at, k)
		}
		d.Headers[k] = v
	}
	d.HeadersEnv = nil
	for k, v := range d.Headers {
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("%s.headers.%s: a header value has no line breaks", at, k)
		}
	}
	switch d.Compression {
	case "", "gzip", "none":
	default:
		return fmt.Errorf("%s.compression: %q is not gzip or none", at, d.Compression)
	}
	if d.Timeout < 0 || d.QueueSize < 0 || d.QueueSize > maxQueueSize || d.MaxBatch < 0 || d.BatchDelay < 0 ||
		d.Retry.InitialInterval < 0 || d.Retry.MaxInterval < 0 || d.Retry.MaxElapsedTime < 0 {
		return fmt.Errorf("%s: timeout, queue_size (at most %d), max_batch, batch_delay and the retry durations must not be negative", at, maxQueueSize)
	}
	return nil
}

// withDefaults fills in what d leaves out; i of n is its place in the
// list (the default name).
func (d Destination) withDefaults(i, n int) Destination {
	if d.Name == "" {
		d.Name = TypeOTLPHTTP
		if n > 1 {
			d.Name = fmt.Sprintf("%s_%d", TypeOTLPHTTP, i)
		}
	}
	if d.Timeout == 0 {
		d.Timeout = DefaultTimeout
	}
	if d.QueueSize == 0 {
		d.QueueSize = DefaultQueueSize
	}
	if d.MaxBatch == 0 {
		d.MaxBatch = DefaultMaxBatch
	}
	if d.BatchDelay == 0 {
		d.BatchDelay = DefaultBatchDelay
	}
	if d.Retry.InitialInterval == 0 {
		d.Retry.InitialInterval = time.Second
	}
	if d.Retry.MaxInterval == 0 {
		d.Retry.MaxInterval = 10 * time.Second
	}
	if d.Retry.MaxElapsedTime == 0 {
		d.Retry.MaxElapsedTime = 30 * time.Second
	}
	return d
}

// exporterOptions configure otlptracehttp for d: every setting explicit,
// so that the OTEL_EXPORTER_OTLP_* variables of the server's environment
// do not change a configured destination.
func (d Destination) exporterOptions() []otlptracehttp.Option {
	u, _ := url.Parse(d.Endpoint)
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	hdr := map[string]string{}
	for k, v := range d.Headers {
		hdr[k] = v
	}
	comp := otlptracehttp.GzipCompression
	if d.Compression == "none" {
		comp = otlptracehttp.NoCompression
	}
	return []otlptracehttp.Option{
		otlptracehttp.WithEndpointURL(u.String()),
		otlptracehttp.WithHeaders(hdr),
		otlptracehttp.WithCompression(comp),
		otlptracehttp.WithTimeout(d.Timeout),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: d.Retry.InitialInterval,
			MaxInterval: d.Retry.MaxInterval, MaxElapsedTime: d.Retry.MaxElapsedTime}),
	}
}
