package server

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/tool"
)

// BenchmarkExecRoundTrip is one exec call of one short command on a warm
// container, through HTTP (loopback, JSON, key check, record lookup, call
// lock, metering, ledger write) and on the library (tool.RunShell on the
// Manager). Each iteration makes one call of each, interleaved, so load on
// the machine hits both alike; it reports both medians, the time HTTP
// adds and the ratio.
func BenchmarkExecRoundTrip(b *testing.B) {
	e := newEnv(b, "crun", "busybox")
	c := e.create(e.keyA, "bench")
	plan, err := tool.ShellArgs{Commands: []string{"true"}}.Plan()
	if err != nil {
		b.Fatal(err)
	}
	viaHTTP := e.execTrue(b, c.ID)
	viaLibrary := func() {
		if _, err := tool.RunShell(b.Context(), e.mgr, c.ID, plan); err != nil {
			b.Fatal(err)
		}
	}
	viaHTTP() // warm: the first call pays for the new container
	sideBySide(b, "ms", "http", viaHTTP, "library", viaLibrary)
}

// execTrue is one POST /api/v1/containers/{id}/exec of `true` with key
// A, as a benchmark's side.
func (e *env) execTrue(b *testing.B, id string) func() {
	body := []byte(`{"commands":["true"]}`)
	url := e.url + "/api/v1/containers/" + id + "/exec"
	return func() {
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.keyA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// sideBySide makes one call of via and then one of direct per iteration
// of b.Loop, so load on the machine hits both alike, and reports both
// medians in unit ("ms" or "µs") as <name>-<unit>, what via adds as
// added-<unit> and via/direct as ratio.
func sideBySide(b *testing.B, unit, viaName string, via func(), directName string, direct func()) {
	var v, d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		via()
		t1 := time.Now()
		direct()
		v, d = append(v, t1.Sub(t0)), append(d, time.Since(t1))
	}
	per := map[string]time.Duration{"ms": time.Millisecond, "µs": time.Microsecond}[unit]
	median := func(x []time.Duration) float64 {
		slices.Sort(x)
		return float64(x[len(x)/2]) / float64(per)
	}
	mv, md := median(v), median(d)
	b.ReportMetric(mv, viaName+"-"+unit)
	b.ReportMetric(md, directName+"-"+unit)
	b.ReportMetric(mv-md, "added-"+unit)
	b.ReportMetric(mv/md, "ratio")
}
