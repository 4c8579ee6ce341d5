// Package otlptest is an OTLP/HTTP trace receiver for tests: a real HTTP
// server on loopback that decodes each export (protobuf, gzip or not)
// into an ExportTraceServiceRequest and keeps it, answering 200 — or, as
// told, another status, or not at all until released.
package otlptest

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver is a test collector's /v1/traces.
type Receiver struct {
	URL string // base URL, http://127.0.0.1:PORT
	srv *httptest.Server

	mu       sync.Mutex
	status   int
	hang     chan struct{} // not nil: requests wait for it to close
	attempts int
	headers  []http.Header
	exports  []*coltracepb.ExportTraceServiceRequest
	errs     []error
	arrived  chan struct{} // one send per request, without waiting
}

// NewReceiver starts a receiver answering 200.
func NewReceiver() *Receiver {
	r := &Receiver{status: http.StatusOK, arrived: make(chan struct{}, 1024)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL
	return r
}

// Close releases requests held and stops the server.
func (r *Receiver) Close() {
	r.Release()
	r.srv.CloseClientConnections()
	r.srv.Close()
}

// SetStatus makes the receiver answer status (after reading the body).
func (r *Receiver) SetStatus(status int) {
	r.mu.Lock()
	r.status = status
	r.mu.Unlock()
}

// Hang makes requests wait, unanswered, until Release.
func (r *Receiver) Hang() {
	r.mu.Lock()
	if r.hang == nil {
		r.hang = make(chan struct{})
	}
	r.mu.Unlock()
}

// Release lets the requests held by Hang go on, and later ones through.
func (r *Receiver) Release() {
	r.mu.Lock()
	if r.hang != nil {
		close(r.hang)
		r.hang = nil
	}
	r.mu.Unlock()
}

// Arrived receives one value per request, when its body is read.
func (r *Receiver) Arrived() <-chan struct{} { return r.arrived }

// WaitArrived waits for n requests (counted from now) or d.
func (r *Receiver) WaitArrived(n int, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for i := range n {
		select {
		case <-r.arrived:
		case <-t.C:
			return fmt.Errorf("%d of %d requests arrived within %s", i, n, d)
		}
	}
	return nil
}

// Attempts counts the requests received, whatever the answer.
func (r *Receiver) Attempts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts
}

// Headers are the headers of each request.
func (r *Receiver) Headers() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

// Exports are the requests answered 200, decoded.
func (r *Receiver) Exports() []*coltracepb.ExportTraceServiceRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*coltracepb.ExportTraceServiceRequest(nil), r.exports...)
}

// Errors are the requests that could not be decoded.
func (r *Receiver) Errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// Spans are the spans of every export answered 200, in order.
func (r *Receiver) Spans() []*tracepb.Span {
	var out []*tracepb.Span
	for _, e := range r.Exports() {
		for _, rs := range e.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				out = append(out, ss.Spans...)
			}
		}
	}
	return out
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	req2, err := decode(req)
	r.mu.Lock()
	r.attempts++
	r.headers = append(r.headers, req.Header.Clone())
	status, hang := r.status, r.hang
	if err != nil {
		r.errs = append(r.errs, err)
	}
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	if hang != nil {
		select {
		case <-hang:
		case <-req.Context().Done():
			return
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if status != http.StatusOK {
		http.Error(w, "receiver told to fail", status)
		return
	}
	r.mu.Lock()
	r.exports = append(r.exports, req2)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Write(b)
}

func decode(req *http.Request) (*coltracepb.ExportTraceServiceRequest, error) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		return nil, fmt.Errorf("%s %s: want POST /v1/traces", req.Method, req.URL.Path)
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		return nil, fmt.Errorf("content type %q", ct)
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			return nil, err
		}
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		return nil, err
	}
	var out coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Attr is the value of span's attribute key (nil when absent).
func Attr(attrs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

// Str, Int, Float and Bool read an attribute of a type ("" / 0 / false
// when absent or of another type).
func Str(attrs []*commonpb.KeyValue, key string) string { return Attr(attrs, key).GetStringValue() }
func Int(attrs []*commonpb.KeyValue, key string) int64  { return Attr(attrs, key).GetIntValue() }
func Float(attrs []*commonpb.KeyValue, key string) float64 {
	return Attr(attrs, key).GetDoubleValue()
}
func Bool(attrs []*commonpb.KeyValue, key string) bool { return Attr(attrs, key).GetBoolValue() }
