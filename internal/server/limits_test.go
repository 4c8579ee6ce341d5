package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestContainerLimits: a container's own limits are what its sandbox runs
// with, read from inside (the cgroup, the process rlimit, the home's
// size), on its first start and again after it slept and woke.
func TestContainerLimits(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	var small containerObject
	st, b := e.do("POST", "/api/v1/containers", e.keyA, map[string]any{"name": "small",
		"limits": map[string]any{"cpus": 0.5, "memory_mb": 48, "processes": 32, "disk_mb": 24}})
	e.must(st, b, &small)
	if small.Limits != (limitsObject{CPUs: 0.5, MemoryMB: 48, Processes: 32, DiskMB: 24}) || small.MemoryLimit != "48m" {
		t.Fatalf("%s", b)
	}
	plain := e.create(e.keyA, "plain")
	def := e.mgr.Defaults()

	probe := []string{
		"cat /proc/self/cgroup",
		"ulimit -u",
		"df -k /workspace/home | tail -n 1 | awk '{print $2}'",
	}
	check := func(t *testing.T, ref string, mem int64, quota int64, procs int64, diskMB int64) {
		t.Helper()
		r := e.exec(e.keyA, ref, probe...)
		out := make([]string, len(r.Output))
		for i, o := range r.Output {
			out[i] = strings.TrimSpace(o.Stdout)
			if *o.Outcome.ExitCode != 0 {
				t.Fatalf("%q: %+v", probe[i], o)
			}
		}
		// The sandbox's cgroup, read on the host where the container
		// names it (cgroup v1 here: memory and cpu controllers).
		gotMem, gotQuota := hostCgroup(t, out[0])
		if gotMem != mem {
			t.Errorf("memory limit %d, want %d", gotMem, mem)
		}
		if gotQuota != quota {
			t.Errorf("cpu quota %d per 100000 µs, want %d", gotQuota, quota)
		}
		if out[1] != strconv.FormatInt(procs, 10) {
			t.Errorf("ulimit -u %s, want %d", out[1], procs)
		}
		// ext4 keeps some of the image for itself: the file system is
		// smaller than the image, but not by much.
		kb, _ := strconv.ParseInt(out[2], 10, 64)
		if kb > diskMB<<10 || kb < diskMB<<10*7/10 {
			t.Errorf("home of %d KiB, want about %d MiB", kb, diskMB)
		}
	}
	t.Run("01 the container's own limits", func(t *testing.T) {
		check(t, "small", 48<<20, 50000, 32, 24)
	})
	t.Run("02 a container without limits runs on the defaults", func(t *testing.T) {
		check(t, plain.ID, def.Limits.MemoryBytes, int64(def.Limits.CPUs*100000), def.Limits.Processes, def.HomeBytes>>20)
	})
	t.Run("03 the limits hold after sleep and wake", func(t *testing.T) {
		if err := e.mgr.Sleep(t.Context(), small.ID); err != nil {
			t.Fatal(err)
		}
		check(t, "small", 48<<20, 50000, 32, 24)
	})
	t.Run("04 a command over the memory limit is killed inside the container only", func(t *testing.T) {
		r := e.exec(e.keyA, "small", "dd if=/dev/zero of=/dev/null bs=100M count=1", "echo still-here")
		if !strings.Contains(r.Output[0].Stderr, "out-of-memory killer: the sandbox's memory limit is 48 MiB") {
			t.Fatalf("100 MiB in a 48 MiB container: %+v", r.Output[0])
		}
		if r.Output[1].Stdout != "still-here\n" {
			t.Fatalf("after the OOM: %+v", r.Output[1])
		}
	})
	t.Run("05 limits beyond the server's maximum are refused", func(t *testing.T) {
		max := e.srv.maxLimits()
		for _, l := range []map[string]any{
			{"memory_mb": max.MemoryBytes>>20 + 1},
			{"cpus": float64(max.CPUMillis)/1000 + 1},
			{"processes": max.Processes + 1},
			{"disk_mb": max.DiskBytes>>20 + 1},
			{"memory_mb": 8},
			{"cpus": 0},
			{"processes": "many"},
		} {
			st, b := e.do("POST", "/api/v1/containers", e.keyA, map[string]any{"limits": l})
			if st != http.StatusBadRequest {
				t.Fatalf("%v: %d %s", l, st, b)
			}
			envelope(t, st, b)
		}
	})
}

// hostCgroup reads the memory limit and CPU quota of the cgroup that a
// process's /proc/self/cgroup names, from the host's cgroup v1 or v2 tree.
func hostCgroup(t *testing.T, procSelfCgroup string) (mem, quota int64) {
	t.Helper()
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%v (the sandbox's /proc/self/cgroup: %q)", err, procSelfCgroup)
		}
		return strings.TrimSpace(string(b))
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return n
	}
	paths := map[string]string{}
	for _, line := range strings.Split(procSelfCgroup, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 {
			for _, c := range strings.Split(f[1], ",") {
				paths[c] = f[2]
			}
		}
	}
	if p, ok := paths["memory"]; ok {
		return num(read(filepath.Join("/sys/fs/cgroup/memory", p, "memory.limit_in_bytes"))),
			num(read(filepath.Join("/sys/fs/cgroup/cpu", paths["cpu"], "cpu.cfs_quota_us")))
	}
	p := paths[""]
	q, _, _ := strings.Cut(read(filepath.Join("/sys/fs/cgroup", p, "cpu.max")), " ")
	return num(read(filepath.Join("/sys/fs/cgroup", p, "memory.max"))), num(q)
}
