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
	body := []byte(`{"commands":["true"]}`)
	url := e.url + "/api/v1/containers/" + c.ID + "/exec"
	viaHTTP := func() {
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
	viaLibrary := func() {
		if _, err := tool.RunShell(b.Context(), e.mgr, c.ID, plan); err != nil {
			b.Fatal(err)
		}
	}
	viaHTTP() // warm: the first call pays for the new container
	var h, l []time.Duration
	for b.Loop() {
		t0 := time.Now()
		viaHTTP()
		t1 := time.Now()
		viaLibrary()
		h, l = append(h, t1.Sub(t0)), append(l, time.Since(t1))
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Millisecond)
	}
	mh, ml := median(h), median(l)
	b.ReportMetric(mh, "http-ms")
	b.ReportMetric(ml, "library-ms")
	b.ReportMetric(mh-ml, "added-ms")
	b.ReportMetric(mh/ml, "ratio")
}
