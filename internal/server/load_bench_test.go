package server

import (
	"bufio"
	"context"
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

// memSampler samples the Go heap in use and the process's anonymous RSS
// until stopped; start first clears the kernel's high-water mark of the
// whole RSS (VmHWM). The whole RSS counts the pages of the executable that
// were touched, file-backed and shared: the test binary links every
// backend and its test doubles (client-go's fake clientset among them,
// 180 MiB of binary), and these pages are most of its RSS. RssAnon is the
// memory the process made: heap, stacks, the runtime's own.
type memSampler struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	heapPeak atomic.Uint64
	anonPeak atomic.Int64 // KiB
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
			if a := procStatusKiB("RssAnon"); a > m.anonPeak.Load() {
				m.anonPeak.Store(a)
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

// done returns the peaks in MiB: Go heap in use, VmHWM (the whole RSS)
// and the anonymous RSS.
func (m *memSampler) done() (heapMiB, rssMiB, anonMiB float64) {
	close(m.stop)
	m.wg.Wait()
	return float64(m.heapPeak.Load()) / (1 << 20), float64(procStatusKiB("VmHWM")) / 1024, float64(m.anonPeak.Load()) / 1024
}

// report stops m and reports its peaks as name-heap-peak-MiB,
// name-rss-peak-MiB and name-rss-anon-peak-MiB, each followed by suffix.
func (m *memSampler) report(b *testing.B, name, suffix string) {
	heap, rss, anon := m.done()
	b.ReportMetric(heap, name+"-heap-peak-MiB"+suffix)
	b.ReportMetric(rss, name+"-rss-peak-MiB"+suffix)
	b.ReportMetric(anon, name+"-rss-anon-peak-MiB"+suffix)
}

// reportLoad reports a load's median and 99th-percentile latencies and
// its errors as name-p50-ms, name-p99-ms and name-errors.
func reportLoad(b *testing.B, name string, lat []time.Duration, errs []error) {
	b.ReportMetric(percentileMs(lat, 0.5), name+"-p50-ms")
	b.ReportMetric(percentileMs(lat, 0.99), name+"-p99-ms")
	b.ReportMetric(float64(len(errs)), name+"-errors")
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
		mem.report(b, "gateway", "")
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
		reportLoad(b, "gateway", lat, errs)
		b.ReportMetric(float64(gwClients)/dwall.Seconds(), "direct-req/s")
		reportLoad(b, "direct", dlat, derrs)
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
		mem.report(b, "http", "")
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
		reportLoad(b, "http", lat, errs)
		b.ReportMetric(n/lwall.Seconds(), "library-calls/s")
		reportLoad(b, "library", llat, lerrs)
		b.ReportMetric(lwall.Seconds()/wall.Seconds(), "throughput-ratio")
	}
}

// BenchmarkFileTransfer: one file of 64 MiB and one of 1 GiB uploaded
// (multipart, generated as it is sent) and downloaded through the
// workspace files API (/api/v1/files) and a container's files API
// (/api/v1/containers/{id}/files), each beside `cp` of a file of the same
// size on the same disk (the server's data directory; the copy is synced
// like the server's; the page cache is left alone, so every read, cp's
// and the downloads', is of a file just written). It reports MiB/s of each, the ratio to cp and the peak Go heap
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
				mem := startMem()
				t0 := time.Now()
				n := fn()
				d := time.Since(t0)
				mem.report(b, name, "-"+tag)
				if n != size {
					b.Errorf("%s %s: %d bytes", name, tag, n)
				}
				b.ReportMetric(mib/d.Seconds(), name+"-MiB/s-"+tag)
				b.ReportMetric(cp.Seconds()/d.Seconds(), name+"-vs-cp-"+tag)
			}
			transfer("workspace-upload", func() int64 {
				st, body := e.streamedUpload(b, "/api/v1/files", nil, size)
				e.must(st, body, &f)
				return f.SizeBytes
			})
			transfer("workspace-download", func() int64 { return e.streamedDownload(b, "/api/v1/files/"+f.ID+"/content") })
			var cf ContainerFile
			transfer("container-upload", func() int64 {
				st, body := e.streamedUpload(b, "/api/v1/containers/"+c.ID+"/files", map[string]string{"path": "big-" + tag}, size)
				e.must(st, body, &cf)
				return cf.Bytes
			})
			transfer("container-download", func() int64 { return e.streamedDownload(b, "/api/v1/containers/"+c.ID+"/files/"+cf.ID+"/content") })
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

// hostUsedMiB is MemTotal − MemAvailable of the host.
func hostUsedMiB() float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var total, avail int64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			total = n
		case "MemAvailable:":
			avail = n
		}
	}
	return float64(total-avail) / 1024
}

// serverMem is the process's RSS now and its Go heap in use after a GC,
// in MiB.
func serverMem() (rss, heap float64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(procStatusKiB("VmRSS")) / 1024, float64(ms.HeapInuse) / (1 << 20)
}

const (
	densitySleeping = 1000
	densityRunning  = 100
)

// BenchmarkContainerDensity: 1,000 containers created through the API
// (crun, busybox) and put to sleep (what the idle timeout does: processes
// stopped, writable layer dropped, home kept), then 100 more created and
// left running (agent up, idle). It reports the server process's RSS and
// Go heap with none, with the sleeping ones and with the running ones
// added, per container; the host's memory (MemTotal − MemAvailable) per
// container, which includes the sandboxes' own processes and kernel
// memory; and the disk a sleeping container keeps. The ratio is a running
// container's host cost to a sleeping one's. Run with -benchtime 1x.
func BenchmarkContainerDensity(b *testing.B) {
	e := newEnv(b, "crun", "busybox")
	for b.Loop() {
		var ids []string
		var mu sync.Mutex
		create := func(n int, prefix string, sleep bool) {
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(n) {
							return
						}
						st, body := e.do("POST", "/api/v1/containers", e.keyA, map[string]string{"name": fmt.Sprintf("%s%d", prefix, i)})
						var c containerObject
						if st != http.StatusOK {
							b.Errorf("create: %d %s", st, body)
							return
						}
						e.must(st, body, &c)
						if sleep {
							if err := e.mgr.Sleep(b.Context(), c.ID); err != nil {
								b.Errorf("sleep: %v", err)
								return
							}
						} else if err := e.mgr.Create(b.Context(), c.ID); err != nil {
							b.Errorf("start: %v", err)
							return
						}
						mu.Lock()
						ids = append(ids, c.ID)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
		}
		time.Sleep(time.Second)
		rss0, heap0 := serverMem()
		host0 := hostUsedMiB()
		du0 := dirMiB(e.data)

		create(densitySleeping, "z", true)
		time.Sleep(2 * time.Second)
		rss1, heap1 := serverMem()
		host1 := hostUsedMiB()
		du1 := dirMiB(e.data)

		create(densityRunning, "r", false)
		time.Sleep(2 * time.Second)
		rss2, heap2 := serverMem()
		host2 := hostUsedMiB()

		running := 0
		for _, id := range ids {
			if st, err := e.mgr.Status(id); err == nil && st == sandbox.Running {
				running++
			}
		}
		b.ReportMetric(rss0, "server-rss-MiB-empty")
		b.ReportMetric(rss1, "server-rss-MiB-1000-sleeping")
		b.ReportMetric(rss2, "server-rss-MiB-plus-100-running")
		b.ReportMetric(heap0, "server-heap-MiB-empty")
		b.ReportMetric(heap1, "server-heap-MiB-1000-sleeping")
		b.ReportMetric(heap2, "server-heap-MiB-plus-100-running")
		b.ReportMetric((rss1-rss0)*1024/densitySleeping, "server-rss-KiB/sleeping")
		b.ReportMetric((rss2-rss1)*1024/densityRunning, "server-rss-KiB/running")
		b.ReportMetric((host1-host0)/densitySleeping, "host-MiB/sleeping")
		b.ReportMetric((host2-host1)/densityRunning, "host-MiB/running")
		b.ReportMetric((du1-du0)/densitySleeping, "disk-MiB/sleeping")
		b.ReportMetric(float64(running), "running")
		b.ReportMetric(float64(len(ids)), "containers")
		if sl := (host1 - host0) / densitySleeping; sl > 0 {
			b.ReportMetric((host2-host1)/densityRunning/sl, "running/sleeping-host-ratio")
		}
		// Untimed: remove them.
		var wg sync.WaitGroup
		ch := make(chan string)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range ch {
					e.mgr.Destroy(context.Background(), id)
				}
			}()
		}
		for _, id := range ids {
			ch <- id
		}
		close(ch)
		wg.Wait()
	}
}

// dirMiB is the disk space (allocated blocks) under dir.
func dirMiB(dir string) float64 {
	out, err := exec.Command("du", "-sk", dir).Output()
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	return float64(n) / 1024
}
