package server

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// Load benchmarks: many clients at once, each side by side with what a
// user would otherwise run, reporting throughput, latency percentiles,
// errors and the process's memory. The server runs in the test process,
// so RSS includes the benchmark's clients (and, for the gateway, the
// scripted model); the Go heap figures are sampled while the load runs.

// memSampler samples the Go heap in use and the process's RSS until
// stopped; reset first clears the kernel's high-water mark (VmHWM).
type memSampler struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	heapPeak atomic.Uint64
	rssPeak  atomic.Uint64
}

func startMem() *memSampler {
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM
	m := &memSampler{stop: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > m.heapPeak.Load() {
				m.heapPeak.Store(ms.HeapInuse)
			}
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// done returns the peaks in MiB: Go heap in use, and VmHWM.
func (m *memSampler) done() (heapMiB, rssMiB float64) {
	close(m.stop)
	m.wg.Wait()
	return float64(m.heapPeak.Load()) / (1 << 20), float64(procStatusKiB("VmHWM")) / 1024
}

// procStatusKiB is a kB field of /proc/self/status.
func procStatusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// load runs n clients at once, each calling one(i) and returning the
// latencies it measured; it reports the wall time, all latencies and the
// errors.
func load(n int, one func(i int) ([]time.Duration, error)) (wall time.Duration, lat []time.Duration, errs []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, err := one(i)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, d...)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	return time.Since(t0), lat, errs
}

const (
	gwClients = 50
	gwCalls   = 5
)

// BenchmarkGatewayConcurrent: 50 streamed Responses requests at once, each
// in a new container (container_auto; crun, busybox) making 5 shell calls
// of `true`, against the scripted model behind the Responses upstream
// adapter. Side by side, what a user would run without the gateway: 50
// clients at once each starting its own sandbox through the library and
// running the same 5 commands (tool.RunShell on the Manager) between the 6
// streamed upstream calls the gateway made, replayed directly against the
// scripted model. Run with -benchtime 1x: each iteration is one round of
// both.
func BenchmarkGatewayConcurrent(b *testing.B) {
	model := scripted.NewServer(stepScript(gwCalls))
	b.Cleanup(model.Close)
	e := newEnv(b, "crun", "busybox", func(c *Config) {
		c.Models = upstream.EveryAPI(model.URL, 60*time.Second)
		c.CallWait = time.Minute
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: gwClients}}
	b.Cleanup(client.CloseIdleConnections)
	path, body, hdr := gatewayBody("responses", "", "", true)
	hdr.Set("Authorization", "Bearer "+e.keyA)
	// One request first, for the upstream requests to replay.
	if err := post(client, e.url+path, body, hdr); err != nil {
		b.Fatal(err)
	}
	rs := replays(model)
	if len(rs) != gwCalls+1 {
		b.Fatalf("the gateway made %d upstream calls, want %d", len(rs), gwCalls+1)
	}
	plan, err := tool.ShellArgs{Commands: []string{"true"}}.Plan()
	if err != nil {
		b.Fatal(err)
	}
	round := 0
	for b.Loop() {
		round++
		model.Reset()
		mem := startMem()
		wall, lat, errs := load(gwClients, func(int) ([]time.Duration, error) {
			t0 := time.Now()
			err := post(client, e.url+path, body, hdr)
			return []time.Duration{time.Since(t0)}, err
		})
		heap, rss := mem.done()
		if got := len(model.Requests()); got != gwClients*(gwCalls+1) {
			errs = append(errs, fmt.Errorf("the model got %d requests, want %d", got, gwClients*(gwCalls+1)))
		}
		dwall, dlat, derrs := load(gwClients, func(i int) ([]time.Duration, error) {
			name := fmt.Sprintf("direct-%d-%d", round, i)
			t0 := time.Now()
			for k, r := range rs {
				if err := post(client, model.URL+r.path, r.body, r.hdr); err != nil {
					return nil, err
				}
				if k < gwCalls {
					if _, err := tool.RunShell(b.Context(), e.mgr, name, plan); err != nil {
						return nil, err
					}
				}
			}
			return []time.Duration{time.Since(t0)}, nil
		})
		for i := range gwClients { // untimed
			e.mgr.Destroy(b.Context(), fmt.Sprintf("direct-%d-%d", round, i))
		}
		for _, err := range append(errs, derrs...) {
			b.Error(err)
		}
		b.ReportMetric(float64(gwClients)/wall.Seconds(), "gateway-req/s")
		b.ReportMetric(float64(gwClients*gwCalls)/wall.Seconds(), "gateway-toolcalls/s")
		b.ReportMetric(percentileMs(lat, 0.5), "gateway-p50-ms")
		b.ReportMetric(percentileMs(lat, 0.99), "gateway-p99-ms")
		b.ReportMetric(float64(len(errs)), "gateway-errors")
		b.ReportMetric(heap, "gateway-heap-peak-MiB")
		b.ReportMetric(rss, "gateway-rss-peak-MiB")
		b.ReportMetric(float64(gwClients)/dwall.Seconds(), "direct-req/s")
		b.ReportMetric(percentileMs(dlat, 0.5), "direct-p50-ms")
		b.ReportMetric(percentileMs(dlat, 0.99), "direct-p99-ms")
		b.ReportMetric(float64(len(derrs)), "direct-errors")
		b.ReportMetric(dwall.Seconds()/wall.Seconds(), "throughput-ratio")
	}
}

const (
	execSessions = 100
	execCommands = 20
)

// BenchmarkExecConcurrent: 100 sessions at once, each a container created
// through the API (crun, busybox) and started by one untimed call, each
// making 20 exec calls of `true` one after another over HTTP; side by
// side, the same 100 × 20 commands on the same containers through the
// library (tool.RunShell on the Manager). Run with -benchtime 1x.
func BenchmarkExecConcurrent(b *testing.B) {
	e := newEnv(b, "crun", "busybox", func(c *Config) { c.CallWait = time.Minute })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: execSessions}}
	b.Cleanup(client.CloseIdleConnections)
	ids := make([]string, execSessions)
	for i := range ids {
		c := e.create(e.keyA, fmt.Sprintf("s%d", i))
		e.exec(e.keyA, c.ID, "true")
		ids[i] = c.ID
	}
	hdr := http.Header{"Authorization": {"Bearer " + e.keyA}, "Content-Type": {"application/json"}}
	body := []byte(`{"commands":["true"]}`)
	plan, err := tool.ShellArgs{Commands: []string{"true"}}.Plan()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		mem := startMem()
		wall, lat, errs := load(execSessions, func(i int) ([]time.Duration, error) {
			var d []time.Duration
			for range execCommands {
				t0 := time.Now()
				if err := post(client, e.url+"/api/v1/containers/"+ids[i]+"/exec", body, hdr); err != nil {
					return d, err
				}
				d = append(d, time.Since(t0))
			}
			return d, nil
		})
		heap, rss := mem.done()
		lwall, llat, lerrs := load(execSessions, func(i int) ([]time.Duration, error) {
			var d []time.Duration
			for range execCommands {
				t0 := time.Now()
				if _, err := tool.RunShell(b.Context(), e.mgr, ids[i], plan); err != nil {
					return d, err
				}
				d = append(d, time.Since(t0))
			}
			return d, nil
		})
		for _, err := range append(errs, lerrs...) {
			b.Error(err)
		}
		n := float64(execSessions * execCommands)
		b.ReportMetric(n/wall.Seconds(), "http-calls/s")
		b.ReportMetric(percentileMs(lat, 0.5), "http-p50-ms")
		b.ReportMetric(percentileMs(lat, 0.99), "http-p99-ms")
		b.ReportMetric(float64(len(errs)), "http-errors")
		b.ReportMetric(heap, "http-heap-peak-MiB")
		b.ReportMetric(rss, "http-rss-peak-MiB")
		b.ReportMetric(n/lwall.Seconds(), "library-calls/s")
		b.ReportMetric(percentileMs(llat, 0.5), "library-p50-ms")
		b.ReportMetric(percentileMs(llat, 0.99), "library-p99-ms")
		b.ReportMetric(float64(len(lerrs)), "library-errors")
		b.ReportMetric(lwall.Seconds()/wall.Seconds(), "throughput-ratio")
	}
}

// BenchmarkFileTransfer: one file of 64 MiB and one of 1 GiB uploaded
// (multipart, generated as it is sent) and downloaded through the
// workspace files API (/api/v1/files) and a container's files API
// (/api/v1/containers/{id}/files), each beside `cp` of a file of the same
// size on the same disk (the server's data directory; the copy is synced
// like the server's, and dropped from the page cache first for a cold
// read). It reports MiB/s of each, the ratio to cp and the peak Go heap
// and RSS of the process during each transfer: these must not grow with
// the file. Run with -benchtime 1x.
func BenchmarkFileTransfer(b *testing.B) {
	mgr, data := sandboxtest.Open(b, "crun", "busybox", func(c *sandbox.Config) { c.HomeBytes = 3 << 30 })
	e := newServerOn(b, mgr, data, func(c *Config) { c.MaxUploadBytes = 2 << 30; c.MaxFileBytes = 2 << 30 })
	newTestServer(b, e)
	c := e.create(e.keyA, "files")
	e.exec(e.keyA, c.ID, "true")
	for b.Loop() {
		for _, size := range []int64{64 << 20, 1 << 30} {
			tag := fmt.Sprintf("%dMiB", size>>20)
			mib := float64(size) / (1 << 20)
			// cp on the same disk.
			src, dst := filepath.Join(data, "cp-src"), filepath.Join(data, "cp-dst")
			if err := writeZeros(src, size); err != nil {
				b.Fatal(err)
			}
			os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
			t0 := time.Now()
			if out, err := exec.Command("sh", "-c", "cp "+src+" "+dst+" && sync "+dst).CombinedOutput(); err != nil {
				b.Fatalf("cp: %v %s", err, out)
			}
			cp := time.Since(t0)
			os.Remove(src)
			os.Remove(dst)
			b.ReportMetric(mib/cp.Seconds(), "cp-MiB/s-"+tag)

			var f orFile
			transfer := func(name string, fn func() int64) {
				os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
				mem := startMem()
				t0 := time.Now()
				n := fn()
				d := time.Since(t0)
				heap, rss := mem.done()
				if n != size {
					b.Errorf("%s %s: %d bytes", name, tag, n)
				}
				b.ReportMetric(mib/d.Seconds(), name+"-MiB/s-"+tag)
				b.ReportMetric(cp.Seconds()/d.Seconds(), name+"-vs-cp-"+tag)
				b.ReportMetric(heap, name+"-heap-peak-MiB-"+tag)
				b.ReportMetric(rss, name+"-rss-peak-MiB-"+tag)
			}
			download := func(path string) int64 {
				req, _ := http.NewRequest("GET", e.url+path, nil)
				req.Header.Set("Authorization", "Bearer "+e.keyA)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				defer resp.Body.Close()
				n, _ := io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("GET %s: %d", path, resp.StatusCode)
				}
				return n
			}
			transfer("workspace-upload", func() int64 {
				st, body := e.streamedUpload(b, "/api/v1/files", nil, size)
				e.must(st, body, &f)
				return f.SizeBytes
			})
			transfer("workspace-download", func() int64 { return download("/api/v1/files/" + f.ID + "/content") })
			var cf ContainerFile
			transfer("container-upload", func() int64 {
				st, body := e.streamedUpload(b, "/api/v1/containers/"+c.ID+"/files", map[string]string{"path": "big-" + tag}, size)
				e.must(st, body, &cf)
				return cf.Bytes
			})
			transfer("container-download", func() int64 { return download("/api/v1/containers/" + c.ID + "/files/" + cf.ID + "/content") })
			if st, body := e.do("DELETE", "/api/v1/files/"+f.ID, e.keyA, nil); st != http.StatusOK {
				b.Errorf("deleting the workspace file: %d %s", st, body)
			}
			e.exec(e.keyA, c.ID, "rm -f big-"+tag)
		}
	}
}

func writeZeros(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, zeros{}, size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
