// Command sandbox benchmarks Shellgate's sandboxes side by side with what a
// user would otherwise run, in one process run, and prints a Markdown report:
// medians and p99 of new sandbox → first `true` (pooled and unpooled), warm
// exec of `true` and `python3 -c 'print(1)'`, the ratios Shellgate ÷ peer,
// and the memory of an idle sandbox.
//
//	sudo go run ./bench/sandbox [-n 200] [-runtimes runsc,crun,runc] [-image default] [-out FILE]
//
// Peers: `podman run --rm` / `podman exec` (runc runtime), `crun run` /
// `crun exec`, `runc run` / `runc exec` and `runsc run` / `runsc exec` on a
// plain bundle of the same read-only rootfs, `bwrap --unshare-all` with the
// rootfs bound read-only, and a bare host fork/exec of `true`,
// `bash -lc true` and /usr/bin/python3.
//
// Everything runs in a private data directory (the images are linked from
// -images); every sandbox, bundle, mount and podman container it starts is
// removed before it exits. The podman image it imports
// (localhost/shellgate-bench-IMAGE) is kept as a cache unless -podman-rmi.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	sgruntime "github.com/shellgate/shellgate/sandbox/runtime"
)

var (
	flagN        = flag.Int("n", 200, "iterations of each warm case (exec into a running sandbox, host fork/exec)")
	flagCold     = flag.Int("cold", 50, "iterations of each new-sandbox case (Shellgate pooled/unpooled, crun/runc/runsc run, bwrap)")
	flagPodmanN  = flag.Int("podman-n", 30, "iterations of each podman case (podman run --rm costs ~0.3 s, podman exec ~0.2 s)")
	flagRuntimes = flag.String("runtimes", "runsc,crun,runc", "Shellgate runtimes to measure")
	flagImage    = flag.String("image", "default", "image name")
	flagImages   = flag.String("images", "/var/lib/shellgate/images", "image store to use (linked into the private data directory)")
	flagOut      = flag.String("out", "", "also write the Markdown report to this file")
	flagPeers    = flag.Bool("peers", true, "measure the peers (podman, crun, runc, runsc, bwrap, host)")
	flagPodman   = flag.Bool("podman", true, "measure podman")
	flagPodmanRM = flag.Bool("podman-rmi", false, "remove the imported podman image at the end")
	flagMemK     = flag.Int("mem-k", 16, "idle sandboxes started at once per runtime for the host memory delta")
	flagMemR     = flag.Int("mem-rounds", 3, "rounds of -mem-k idle sandboxes; the host delta is their median")
)

const pyCmd = "python3 -c 'print(1)'"

// row is one measured case.
type row struct {
	Group  string // groupFirst, groupTrue, groupPy
	System string
	Mine   bool // a Shellgate row (ratios are taken of these)
	Note   string
	d      []time.Duration
}

const (
	groupFirst = "new sandbox → first `true`"
	groupTrue  = "warm exec `true`"
	groupPy    = "warm exec `python3 -c 'print(1)'`"
)

var groups = []string{groupFirst, groupTrue, groupPy}

func (r *row) median() time.Duration { return pct(r.d, 50) }
func (r *row) p99() time.Duration    { return pct(r.d, 99) }

// pct is the nearest-rank percentile.
func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if p == 50 && len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

type bench struct {
	ctx     context.Context
	data    string
	agent   string
	rootfs  string
	rows    []*row
	mem     []memRow
	notes   []string
	cleanup []func()
	hasPy   bool
	hasBash bool
	floor   []floorRow
}

// floorRow is the cost of one command measured by a loop inside a sandbox:
// what a warm exec cannot go below, whatever the agent does.
type floorRow struct {
	Runtime string
	Cmd     string
	Per     time.Duration
}

var floorCmds = []string{"/bin/true", "bash -c true", "bash -lc true"}

// floorK runs per loop, the best of floorRounds loops.
const (
	floorK      = 30
	floorRounds = 3
)

func (b *bench) floorIn(m *sandbox.Manager, rt string) error {
	if !b.hasBash {
		return nil
	}
	for _, c := range floorCmds {
		loop := fmt.Sprintf(`s=$(date +%%s%%N); for i in $(seq %d); do %s; done; e=$(date +%%s%%N); echo $(( (e-s)/%d ))`, floorK, c, floorK)
		best := time.Duration(math.MaxInt64)
		for range floorRounds {
			res, err := m.Exec(b.ctx, "bench-warm", sandbox.Command{Command: loop, TimeoutMs: 120_000, MaxBytes: 1024})
			if err != nil {
				return err
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
			if err != nil || res.ExitCode != 0 {
				return fmt.Errorf("floor loop %q: exit %d, %q %q", c, res.ExitCode, res.Stdout, res.Stderr)
			}
			best = min(best, time.Duration(ns))
		}
		b.floor = append(b.floor, floorRow{rt, c, best})
	}
	return nil
}

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime)
	log.SetOutput(os.Stderr)
	if os.Geteuid() != 0 {
		log.Fatal("run as root: sandboxes need root")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &bench{ctx: ctx}
	err := b.run()
	b.clean()
	if err != nil {
		log.Fatal(err)
	}
}

func (b *bench) clean() {
	for i := len(b.cleanup) - 1; i >= 0; i-- {
		b.cleanup[i]()
	}
	b.cleanup = nil
}

func (b *bench) atExit(f func()) { b.cleanup = append(b.cleanup, f) }

func (b *bench) run() error {
	start := time.Now()
	load0 := loadavg()
	var err error
	imgDir := filepath.Join(*flagImages, *flagImage)
	if _, err := os.Stat(filepath.Join(imgDir, "image.json")); err != nil {
		return fmt.Errorf("image %q not found in %s (build it with `go run ./cmd/shellgate image build`): %w", *flagImage, *flagImages, err)
	}
	// The store names an image by a link to its current version; runc
	// refuses a bundle whose rootfs path goes through a symlink.
	if b.rootfs, err = filepath.EvalSymlinks(filepath.Join(imgDir, "rootfs")); err != nil {
		return err
	}
	b.hasPy = exists(filepath.Join(b.rootfs, "usr/bin/python3"))
	b.hasBash = exists(filepath.Join(b.rootfs, "bin/bash")) || exists(filepath.Join(b.rootfs, "usr/bin/bash"))
	if b.data, err = os.MkdirTemp("/var/tmp", "shellgate-bench-"); err != nil {
		return err
	}
	b.atExit(func() {
		// runsc leaves its null-netns bind mount in its state directory.
		for _, mp := range mountsUnder(b.data) {
			unix.Unmount(mp, unix.MNT_DETACH)
		}
		os.RemoveAll(b.data)
	})
	if err := os.Symlink(*flagImages, filepath.Join(b.data, "images")); err != nil {
		return err
	}
	log.Printf("building the agent")
	if b.agent, err = agentbin.Build(); err != nil {
		return err
	}
	b.atExit(func() { os.RemoveAll(filepath.Dir(b.agent)) })

	for _, rt := range strings.Split(*flagRuntimes, ",") {
		if rt = strings.TrimSpace(rt); rt == "" {
			continue
		}
		if err := b.shellgate(rt); err != nil {
			return fmt.Errorf("shellgate %s: %w", rt, err)
		}
		if err := b.memory(rt); err != nil {
			return fmt.Errorf("memory %s: %w", rt, err)
		}
	}
	if *flagPeers {
		if err := b.peers(); err != nil {
			return err
		}
	}
	report := b.report(start, load0)
	fmt.Print(report)
	if *flagOut != "" {
		if err := os.WriteFile(*flagOut, []byte(report), 0o644); err != nil {
			return err
		}
	}
	log.Printf("done in %s", time.Since(start).Round(time.Second))
	return nil
}

// mountsUnder lists the mount points below dir, deepest last.
func mountsUnder(dir string) []string {
	raw, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	slices.Reverse(out)
	return out
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// --- Shellgate ---

func (b *bench) open(rt string, pool int) (*sandbox.Manager, error) {
	return sandbox.Open(b.ctx, sandbox.Config{
		DataDir: b.data, Runtime: rt, Image: *flagImage, Agent: b.agent,
		PoolSize: pool, IdleTimeout: -1,
	})
}

func (b *bench) exec(m *sandbox.Manager, name, cmd, want string) (time.Duration, error) {
	t0 := time.Now()
	res, err := m.Exec(b.ctx, name, sandbox.Command{Command: cmd, TimeoutMs: 120_000, MaxBytes: 16384})
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	if res.ExitCode != 0 || string(res.Stdout) != want {
		return d, fmt.Errorf("%q: exit %d, stdout %q, stderr %q", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return d, nil
}

func (b *bench) shellgate(rt string) error {
	name := "Shellgate " + rt
	// Unpooled: a new name with no pool pays home mkfs, mounts and the
	// container start before its first command.
	log.Printf("%s: unpooled first command ×%d", name, *flagCold)
	m, err := b.open(rt, 0)
	if err != nil {
		return err
	}
	unpooled := &row{Group: groupFirst, System: name + " unpooled", Mine: true}
	for i := range *flagCold {
		sb := fmt.Sprintf("bench-u%d", i)
		d, err := b.exec(m, sb, "true", "")
		if err != nil {
			m.Close(b.ctx)
			return err
		}
		unpooled.d = append(unpooled.d, d)
		if err := destroy(b.ctx, m, sb); err != nil {
			m.Close(b.ctx)
			return err
		}
	}
	b.rows = append(b.rows, unpooled)

	// Warm: one sandbox, the same commands again and again.
	if err := m.Create(b.ctx, "bench-warm"); err != nil {
		m.Close(b.ctx)
		return err
	}
	for _, c := range []struct{ group, cmd, want string }{{groupTrue, "true", ""}, {groupPy, pyCmd, "1\n"}} {
		if c.group == groupPy && !b.hasPy {
			continue
		}
		log.Printf("%s: warm %s ×%d", name, c.cmd, *flagN)
		r := &row{Group: c.group, System: name, Mine: true}
		for range 3 { // warm the page cache and the agent
			if _, err := b.exec(m, "bench-warm", c.cmd, c.want); err != nil {
				m.Close(b.ctx)
				return err
			}
		}
		for range *flagN {
			d, err := b.exec(m, "bench-warm", c.cmd, c.want)
			if err != nil {
				m.Close(b.ctx)
				return err
			}
			r.d = append(r.d, d)
		}
		b.rows = append(b.rows, r)
	}
	if err := b.floorIn(m, rt); err != nil {
		m.Close(b.ctx)
		return err
	}
	if err := destroy(b.ctx, m, "bench-warm"); err != nil {
		m.Close(b.ctx)
		return err
	}
	if err := m.Close(b.ctx); err != nil {
		return err
	}

	// Pooled: a new name takes a started sandbox from the pool. Between
	// iterations the previous sandbox is destroyed and the pool refilled.
	log.Printf("%s: pooled first command ×%d", name, *flagCold)
	if m, err = b.open(rt, 1); err != nil {
		return err
	}
	defer m.Close(b.ctx)
	pooled := &row{Group: groupFirst, System: name + " pooled", Mine: true}
	settle := max(unpooled.median(), 50*time.Millisecond)
	misses := 0
	for i := 0; len(pooled.d) < *flagCold; i++ {
		if err := b.waitPool(1, settle); err != nil {
			return err
		}
		before := b.poolHomes()
		sb := fmt.Sprintf("bench-p%d", i)
		d, err := b.exec(m, sb, "true", "")
		if err != nil {
			return err
		}
		after := b.poolHomes()
		taken := false
		for h := range before {
			taken = taken || !after[h]
		}
		// A try that found the pool not yet ready paid a cold start: it is
		// recorded like any other, and counted against the hit rate.
		pooled.d = append(pooled.d, d)
		if !taken {
			misses++
		}
		if err := destroy(b.ctx, m, sb); err != nil {
			return err
		}
	}
	pooled.Note = fmt.Sprintf("pool hit rate %d/%d (misses found the pool not yet refilled and are included)", len(pooled.d)-misses, len(pooled.d))
	b.rows = append(b.rows, pooled)
	return m.Close(b.ctx)
}

// destroy retries Destroy while the home's lock is busy: a process the pool
// filler is forking shares the lock's open file until its exec.
func destroy(ctx context.Context, m *sandbox.Manager, name string) error {
	var err error
	for range 100 {
		if err = m.Destroy(ctx, name); !errors.Is(err, sandbox.ErrBusy) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return err
}

// poolHomes lists the homes of pooled sandboxes (a taken one is renamed).
func (b *bench) poolHomes() map[string]bool {
	es, _ := os.ReadDir(filepath.Join(b.data, "homes", ".pool"))
	out := map[string]bool{}
	for _, e := range es {
		out[e.Name()] = true
	}
	return out
}

// waitPool waits until n pooled sandboxes exist with their container
// started (init.log is written by the runtime CLI call, a process is in the
// container's cgroup), then settle more for the agent to answer and the host
// to go quiet. A sandbox taken before it is ready is detected and dropped by
// the caller.
func (b *bench) waitPool(n int, settle time.Duration) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		es, _ := os.ReadDir(filepath.Join(b.data, "homes", ".pool"))
		ready := 0
		for _, e := range es {
			cid := strings.TrimSuffix(e.Name(), ".img")
			procs, _ := os.ReadFile("/sys/fs/cgroup/memory/shellgate/" + cid + "/cgroup.procs")
			if exists(filepath.Join(b.data, "run", "sandboxes", cid, "init.log")) && len(bytes.TrimSpace(procs)) > 0 {
				ready++
			}
		}
		if ready >= n {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the warm pool did not refill within 60 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(settle)
	return nil
}

// --- memory ---

type memRow struct {
	Runtime          string
	Procs            int
	RSS, PSS         int64 // bytes, summed over the sandbox's processes
	Cgroup           int64 // memory.usage_in_bytes, -1 if absent
	K                int
	HostDeltaPerSbx  int64 // median over rounds of (MemTotal-MemAvailable) delta / K
	Rounds           int
	ProcNames        []string
	CgroupPerSbxMean int64
}

func (b *bench) memory(rt string) error {
	log.Printf("Shellgate %s: idle memory (1 sandbox, then %d at once)", rt, *flagMemK)
	m, err := b.open(rt, 0)
	if err != nil {
		return err
	}
	defer m.Close(b.ctx)
	mr := memRow{Runtime: rt, Cgroup: -1, K: *flagMemK}
	if _, err := b.exec(m, "bench-mem0", "true", ""); err != nil {
		return err
	}
	time.Sleep(time.Second)
	cids := b.running()
	if len(cids) != 1 {
		return fmt.Errorf("expected 1 running sandbox, found %v", cids)
	}
	pids := sandboxPIDs(cids[0])
	for _, p := range pids {
		rss, pss := smapsRollup(p)
		mr.RSS += rss
		mr.PSS += pss
		mr.ProcNames = append(mr.ProcNames, comm(p))
	}
	mr.Procs = len(pids)
	mr.Cgroup = cgroupUsage(cids[0])
	if err := destroy(b.ctx, m, "bench-mem0"); err != nil {
		return err
	}

	// K idle sandboxes at once: the host's own account of what they cost
	// (the agent, the runtime's processes, the layer tmpfs, the overlay,
	// the loop device and ext4 of the home, kernel memory). The median of
	// several rounds, since other processes move MemAvailable too.
	var deltas []int64
	var cg int64
	for round := range *flagMemR {
		time.Sleep(500 * time.Millisecond)
		before := hostUsed()
		for i := range mr.K {
			if _, err := b.exec(m, fmt.Sprintf("bench-mem%d-%d", round, i+1), "true", ""); err != nil {
				return err
			}
		}
		time.Sleep(time.Second)
		after := hostUsed()
		if round == 0 {
			for _, c := range b.running() {
				cg += max(cgroupUsage(c), 0)
			}
		}
		if mr.K > 0 {
			deltas = append(deltas, (after-before)/int64(mr.K))
		}
		for i := range mr.K {
			if err := destroy(b.ctx, m, fmt.Sprintf("bench-mem%d-%d", round, i+1)); err != nil {
				return err
			}
		}
	}
	if mr.K > 0 {
		slices.Sort(deltas)
		mr.HostDeltaPerSbx = deltas[len(deltas)/2]
		mr.Rounds = len(deltas)
		mr.CgroupPerSbxMean = cg / int64(mr.K)
	}
	b.mem = append(b.mem, mr)
	return m.Close(b.ctx)
}

func (b *bench) running() []string {
	es, _ := os.ReadDir(filepath.Join(b.data, "run", "sandboxes"))
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// sandboxPIDs finds a container's processes: those in its memory cgroup or
// whose command line names it (runsc's sandbox and gofer), and all their
// descendants.
func sandboxPIDs(cid string) []int {
	self := os.Getpid()
	ppid := map[int]int{}
	in := map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 {
				f := strings.Fields(string(st[i+1:]))
				if len(f) > 1 {
					ppid[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cg, []byte("/shellgate/"+cid)) || bytes.Contains(cl, []byte(cid)) {
			in[pid] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for p, pp := range ppid {
			if !in[p] && in[pp] {
				in[p], changed = true, true
			}
		}
	}
	var out []int
	for p := range in {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func smapsRollup(pid int) (rss, pss int64) {
	kb := kbFields(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	return kb["Rss:"], kb["Pss:"]
}

// kbFields reads a /proc file of "Key: N kB" lines into bytes by key.
func kbFields(path string) map[string]int64 {
	b, _ := os.ReadFile(path)
	out := map[string]int64{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			out[f[0]] = v << 10
		}
	}
	return out
}

// comm is the process's argv[0] base name (runsc re-executes itself as
// "exe" with argv[0] runsc-sandbox, runsc-gofer).
func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	a0, _, _ := bytes.Cut(b, []byte{0})
	if len(a0) == 0 {
		return "(no argv)" // runsc's systrap stub processes
	}
	return filepath.Base(string(a0))
}

// countNames turns [a a b] into "a ×2, b".
func countNames(names []string) string {
	var order []string
	n := map[string]int{}
	for _, x := range names {
		if n[x] == 0 {
			order = append(order, x)
		}
		n[x]++
	}
	var parts []string
	for _, x := range order {
		if n[x] > 1 {
			parts = append(parts, fmt.Sprintf("%s ×%d", x, n[x]))
		} else {
			parts = append(parts, x)
		}
	}
	return strings.Join(parts, ", ")
}

func cgroupUsage(cid string) int64 {
	b, err := os.ReadFile("/sys/fs/cgroup/memory/shellgate/" + cid + "/memory.usage_in_bytes")
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// hostUsed is MemTotal - MemAvailable in bytes.
func hostUsed() int64 {
	kb := kbFields("/proc/meminfo")
	return kb["MemTotal:"] - kb["MemAvailable:"]
}

// --- peers ---

// timeCmd runs argv and returns its wall time; stdout must equal want.
func (b *bench) timeCmd(want string, argv ...string) (time.Duration, error) {
	cmd := exec.CommandContext(b.ctx, argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(errb.String()))
	}
	if out.String() != want {
		return d, fmt.Errorf("%s: stdout %q, want %q", strings.Join(argv, " "), out.String(), want)
	}
	return d, nil
}

func (b *bench) measure(group, system, note string, n int, want string, argv func(i int) []string, after func(i int)) error {
	log.Printf("%s: %s ×%d", system, group, n)
	r := &row{Group: group, System: system, Note: note}
	for i := -2; i < n; i++ { // two unrecorded warm-up runs
		d, err := b.timeCmd(want, argv(i)...)
		if after != nil {
			after(i)
		}
		if err != nil {
			return err
		}
		if i >= 0 {
			r.d = append(r.d, d)
		}
	}
	b.rows = append(b.rows, r)
	return nil
}

func (b *bench) peers() error {
	n, cold := *flagN, *flagCold
	fixed := func(a ...string) func(int) []string { return func(int) []string { return a } }
	py := "/usr/bin/python3"

	// Bare host fork/exec: what the agent does inside the sandbox.
	host := []struct{ group, system, want string }{
		{groupFirst, "host fork/exec `true`", ""},
		{groupTrue, "host fork/exec `true`", ""},
		{groupTrue, "host fork/exec `env -i … bash -lc true`", ""},
		{groupPy, "host fork/exec `python3 -c 'print(1)'`", "1\n"},
	}
	for _, h := range host {
		a := fixed("/bin/true")
		switch {
		case strings.Contains(h.system, "bash"):
			// Like the sandbox: no inherited environment and an empty
			// home, so the host's own ~/.bashrc does not count.
			home := filepath.Join(b.data, "host-home")
			if err := os.MkdirAll(home, 0o700); err != nil {
				return err
			}
			a = fixed("env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME="+home, "/bin/bash", "-lc", "true")
		case h.group == groupPy:
			if !exists(py) {
				continue
			}
			a = fixed(py, "-c", "print(1)")
		}
		cnt := n
		if h.group == groupFirst {
			cnt = cold
		}
		if err := b.measure(h.group, h.system, "no isolation", cnt, h.want, a, nil); err != nil {
			return err
		}
	}

	// bwrap: a new namespace sandbox per command; there is no warm exec.
	bw := func(args ...string) func(int) []string {
		return fixed(append([]string{"bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", b.rootfs, "/",
			"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--clearenv",
			"--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--"}, args...)...)
	}
	if _, err := exec.LookPath("bwrap"); err == nil {
		if err := b.measure(groupFirst, "bwrap", "new sandbox per command", cold, "", bw("true"), nil); err != nil {
			return err
		}
		if err := b.measure(groupTrue, "bwrap", "new sandbox per command", n, "", bw("true"), nil); err != nil {
			return err
		}
		if b.hasPy {
			if err := b.measure(groupPy, "bwrap", "new sandbox per command", n, "1\n", bw("python3", "-c", "print(1)"), nil); err != nil {
				return err
			}
		}
	} else {
		b.notes = append(b.notes, "bwrap not installed: skipped")
	}

	// The OCI runtimes' own CLIs on a plain bundle of the same rootfs.
	for _, rt := range []string{"crun", "runc", "runsc"} {
		if _, err := exec.LookPath(rt); err != nil {
			b.notes = append(b.notes, rt+" not installed: skipped")
			continue
		}
		if rt == "runsc" && !slices.Contains(strings.Split(*flagRuntimes, ","), "runsc") {
			continue
		}
		if err := b.ociPeer(rt); err != nil {
			return fmt.Errorf("%s peer: %w", rt, err)
		}
	}
	if *flagPodman {
		if _, err := exec.LookPath("podman"); err != nil {
			b.notes = append(b.notes, "podman not installed: skipped")
		} else if err := b.podman(); err != nil {
			return fmt.Errorf("podman: %w", err)
		}
	}
	return nil
}

// ociCLI returns the argv prefix for a runtime CLI with its own state root.
// On a hybrid cgroup host crun needs what Shellgate does too: a private
// mount namespace without the cgroup2 mount.
func ociCLI(rt, root string) []string {
	args := []string{rt, "--root", root}
	if rt == "runsc" {
		// The same flags Shellgate runs runsc with, so the rows compare
		// the same sandbox.
		args = append(args, sgruntime.RunscFlags()...)
	}
	if rt == "crun" && hybridCgroups() {
		return append([]string{"unshare", "--mount", "--propagation", "slave", "sh", "-c",
			`umount /sys/fs/cgroup/unified 2>/dev/null; exec "$0" "$@"`}, args...)
	}
	return args
}

func hybridCgroups() bool {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup/unified", &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP2_SUPER_MAGIC
}

// plainBundle writes a bundle from `runc spec` over the read-only rootfs:
// what a user of the runtime CLI would start from.
func (b *bench) plainBundle(dir string, args ...string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("runc spec: %w: %s", err, out)
	}
	p := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		return err
	}
	spec["root"] = map[string]any{"path": b.rootfs, "readonly": true}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = args
	proc["env"] = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	raw, err = json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(p, raw, 0o600)
}

func (b *bench) ociPeer(rt string) error {
	dir := filepath.Join(b.data, "peer-"+rt)
	root := filepath.Join(dir, "state")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	cli := ociCLI(rt, root)
	del := func(id string) { exec.Command(cli[0], append(cli[1:], "delete", "--force", id)...).Run() }
	runB, sleepB := filepath.Join(dir, "run"), filepath.Join(dir, "sleep")
	if err := b.plainBundle(runB, "true"); err != nil {
		return err
	}
	if err := b.plainBundle(sleepB, "sleep", "infinity"); err != nil {
		return err
	}
	pid := os.Getpid()
	id := func(i int) string { return fmt.Sprintf("sgbench-%s-%d-%d", rt, pid, i+2) }
	note := "plain bundle, read-only rootfs"
	if rt == "crun" && hybridCgroups() {
		note += "; via `unshare -m` + umount cgroup2 (needed on this host)"
	}
	if err := b.measure(groupFirst, rt+" run", note, *flagCold, "",
		func(i int) []string { return append(slices.Clone(cli), "run", "--bundle", runB, id(i)) },
		func(i int) { del(id(i)) }); err != nil {
		return err
	}
	long := fmt.Sprintf("sgbench-%s-%d-long", rt, pid)
	b.atExit(func() { del(long) })
	if out, err := detached(exec.Command(cli[0], append(cli[1:], "run", "--detach", "--bundle", sleepB, long)...), dir); err != nil {
		return fmt.Errorf("start %s: %w: %s", long, err, out)
	}
	ex := func(args ...string) func(int) []string {
		return func(int) []string { return append(append(slices.Clone(cli), "exec", long), args...) }
	}
	if err := b.measure(groupTrue, rt+" exec", note, *flagN, "", ex("true"), nil); err != nil {
		return err
	}
	if b.hasPy {
		if err := b.measure(groupPy, rt+" exec", note, *flagN, "1\n", ex("python3", "-c", "print(1)"), nil); err != nil {
			return err
		}
	}
	del(long)
	return nil
}

// detached runs a command that leaves a container behind: its stdio must
// be files, not pipes, or the container would hold them open and Run would
// wait forever.
func detached(c *exec.Cmd, dir string) (string, error) {
	f, err := os.CreateTemp(dir, "stderr-")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer devnull.Close()
	c.Stdin, c.Stdout, c.Stderr = devnull, devnull, f
	err = c.Run()
	out, _ := os.ReadFile(f.Name())
	return strings.TrimSpace(string(out)), err
}

func (b *bench) podman() error {
	pm := []string{"podman", "--cgroup-manager=cgroupfs", "--runtime", "runc"}
	img := "localhost/shellgate-bench-" + *flagImage
	if exec.Command(pm[0], append(pm[1:], "image", "exists", img)...).Run() != nil {
		log.Printf("podman: importing %s as %s", b.rootfs, img)
		sh := fmt.Sprintf("tar -C %q -c . | podman import - %s", b.rootfs, img)
		if out, err := exec.CommandContext(b.ctx, "sh", "-c", sh).CombinedOutput(); err != nil {
			return fmt.Errorf("import: %w: %s", err, out)
		}
	}
	if *flagPodmanRM {
		b.atExit(func() { exec.Command("podman", "rmi", "-f", img).Run() })
	}
	runArgs := []string{"--network=none", "--ulimit", "nofile=8192:8192", "--ulimit", "nproc=4096:4096"}
	note := "runc runtime, cgroupfs, explicit --ulimit"
	n := *flagPodmanN
	if err := b.measure(groupFirst, "podman run --rm", note, n, "",
		func(int) []string { return slices.Concat(pm, []string{"run", "--rm"}, runArgs, []string{img, "true"}) }, nil); err != nil {
		return err
	}
	name := fmt.Sprintf("sgbench-%d", os.Getpid())
	rm := func() { exec.Command(pm[0], append(pm[1:], "rm", "-f", "-t", "0", name)...).Run() }
	b.atExit(rm)
	if out, err := detached(exec.Command(pm[0], slices.Concat(pm[1:], []string{"run", "-d", "--name", name}, runArgs, []string{img, "sleep", "infinity"})...), b.data); err != nil {
		return fmt.Errorf("podman run -d: %w: %s", err, out)
	}
	ex := func(args ...string) func(int) []string {
		return func(int) []string { return slices.Concat(pm, []string{"exec", name}, args) }
	}
	if err := b.measure(groupTrue, "podman exec", note, n, "", ex("true"), nil); err != nil {
		return err
	}
	if b.hasPy {
		if err := b.measure(groupPy, "podman exec", note, n, "1\n", ex("python3", "-c", "print(1)"), nil); err != nil {
			return err
		}
	}
	return nil
}

// --- report ---

func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func mib(v int64) string { return fmt.Sprintf("%.1f", float64(v)/(1<<20)) }

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func (b *bench) report(start time.Time, load0 string) string {
	var w strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&w, f, a...) }
	var uts unix.Utsname
	unix.Uname(&uts)
	p("Command: `go run ./bench/sandbox %s`  \n", strings.Join(os.Args[1:], " "))
	p("Machine: %d vCPU (%s), kernel %s, %s; image `%s`.  \n", runtime.NumCPU(), cpuModel(),
		unix.ByteSliceToString(uts.Release[:]), time.Now().UTC().Format("2006-01-02 15:04 MST"), *flagImage)
	p("Run took %s; load average before %s, after %s.  \n", time.Since(start).Round(time.Second), load0, loadavg())
	p("Iterations: warm cases n=%d, new-sandbox cases n=%d, podman n=%d (each after 2–3 unrecorded warm-ups). p99 is nearest-rank, so with n≤50 it is the worst or second-worst run.\n\n", *flagN, *flagCold, *flagPodmanN)

	for _, g := range groups {
		p("### %s\n\n| System | n | median ms | p99 ms | note |\n|---|---:|---:|---:|---|\n", g)
		for _, r := range b.rows {
			if r.Group != g {
				continue
			}
			sys := r.System
			if r.Mine {
				sys = "**" + sys + "**"
			}
			p("| %s | %d | %s | %s | %s |\n", sys, len(r.d), ms(r.median()), ms(r.p99()), r.Note)
		}
		p("\n")
	}

	p("### Ratios: Shellgate median ÷ peer median (below 1: Shellgate is faster)\n\n")
	for _, g := range groups {
		var mine, peers []*row
		for _, r := range b.rows {
			if r.Group == g {
				if r.Mine {
					mine = append(mine, r)
				} else {
					peers = append(peers, r)
				}
			}
		}
		if len(mine) == 0 || len(peers) == 0 {
			continue
		}
		p("%s\n\n| Shellgate ÷ | %s |\n|---|", g, strings.Join(mapf(peers, func(r *row) string { return r.System }), " | "))
		for range peers {
			p("---:|")
		}
		p("\n")
		for _, m := range mine {
			p("| %s |", m.System)
			for _, pr := range peers {
				p(" %.2f |", float64(m.median())/float64(pr.median()))
			}
			p("\n")
		}
		p("\n")
	}

	if len(b.floor) > 0 {
		p("### Floor: one command inside a running sandbox\n\n")
		p("A loop of %d runs inside the sandbox (`for i in $(seq %d); do CMD; done`), per run, best of %d loops: the fork/exec cost a warm exec pays whatever the agent does. Shellgate runs each command as `bash -lc CMD`. The last column compares a median with a best-of-%d mean, so it is only a rough estimate of the agent round trip (negative means: within the noise).\n\n", floorK, floorK, floorRounds, floorRounds)
		p("| Runtime | %s | Shellgate warm `true` median − `bash -lc true` here (agent round trip) |\n|---|", strings.Join(mapf(floorCmds, func(c string) string { return "`" + c + "` ms" }), " | "))
		for range floorCmds {
			p("---:|")
		}
		p("---:|\n")
		rts := []string{}
		for _, f := range b.floor {
			if !slices.Contains(rts, f.Runtime) {
				rts = append(rts, f.Runtime)
			}
		}
		for _, rt := range rts {
			p("| %s |", rt)
			var lc time.Duration
			for _, f := range b.floor {
				if f.Runtime == rt {
					p(" %s |", ms(f.Per))
					if f.Cmd == "bash -lc true" {
						lc = f.Per
					}
				}
			}
			over := "?"
			for _, r := range b.rows {
				if r.Group == groupTrue && r.System == "Shellgate "+rt {
					over = ms(r.median() - lc)
				}
			}
			p(" %s |\n", over)
		}
		p("\n")
	}
	if len(b.mem) > 0 {
		p("### Memory of one idle sandbox\n\n")
		p("The headline is the host's own account: host Δ = rise of MemTotal−MemAvailable with K idle sandboxes started at once, per sandbox, median of R rounds — it includes the agent, the runtime's processes, the tmpfs layer, the overlay, the loop device and ext4 of the home, and kernel memory. The rest describes one sandbox after one `true`, idle 1 s: RSS/PSS summed over the container's processes (/proc/PID/smaps_rollup); cgroup = memory.usage_in_bytes of /sys/fs/cgroup/memory/shellgate/CID (includes page cache charged to it).\n\n")
		p("| Runtime | **host Δ per sandbox MiB** (K × R) | **idle sandboxes per GiB** (by host Δ) | processes | RSS MiB | PSS MiB | cgroup MiB | per GiB by PSS |\n|---|---:|---:|---|---:|---:|---:|---:|\n")
		for _, m := range b.mem {
			cg := "n/a"
			if m.Cgroup >= 0 {
				cg = mib(m.Cgroup)
			}
			perPSS, perHost := "n/a", "n/a"
			if m.PSS > 0 {
				perPSS = fmt.Sprintf("%d", (1<<30)/m.PSS)
			}
			host := "below noise"
			if m.HostDeltaPerSbx > 0 {
				perHost = fmt.Sprintf("%d", (1<<30)/m.HostDeltaPerSbx)
				host = mib(m.HostDeltaPerSbx)
			}
			p("| %s | %s (%d × %d) | %s | %d (%s) | %s | %s | %s | %s |\n", m.Runtime, host, m.K, m.Rounds, perHost,
				m.Procs, countNames(m.ProcNames), mib(m.RSS), mib(m.PSS), cg, perPSS)
		}
		p("\n")
	}
	for _, n := range b.notes {
		p("- %s\n", n)
	}
	return w.String()
}

func mapf[T, U any](s []T, f func(T) U) []U {
	out := make([]U, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}
