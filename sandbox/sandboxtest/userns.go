package sandboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/shellgate/shellgate/sandbox"
)

// Host id ranges of sandboxes: slot N is 100000+N·65536 onwards.
const (
	firstHostID = 100000
	rangeSize   = 65536
)

// UserNSSuite checks that every sandbox runs in its own user namespace:
// its processes and the files they create have host ids of its own range,
// above every host account; homes stay 1000:1000 on disk; the shared image
// is never changed; per-uid kernel limits are not shared between sandboxes.
func UserNSSuite(t *testing.T, rt string) {
	Skip(t, rt, "busybox")
	before := imageState(t, "busybox")
	m, data := Open(t, rt, "busybox")
	ctx := context.Background()

	t.Run("01 two sandboxes have disjoint host id ranges above every host account", func(t *testing.T) {
		bases := map[string]uint32{}
		for _, name := range []string{"ns-a", "ns-b"} {
			Run(t, m, name, "touch /var/tmp/made-here")
			// A running command's processes too, not only the agent.
			running := make(chan struct{})
			cctx, cancel := context.WithCancel(ctx)
			var once sync.Once
			done := make(chan error, 1)
			go func() {
				_, err := m.Exec(cctx, name, sandbox.Command{Command: "echo up; exec sleep 60", TimeoutMs: 60000, MaxBytes: 100,
					OnOutput: func(byte, []byte) { once.Do(func() { close(running) }) }})
				done <- err
			}()
			select {
			case <-running:
			case err := <-done:
				cancel()
				t.Fatalf("%s: command ended early: %v", name, err)
			}
			cid := containerOf(t, data, name)
			procs := hostProcs(cid)
			cancel()
			<-done

			// The file's host owner is the range's 1000.
			st := statT(t, filepath.Join(data, "run", "sandboxes", cid, "layer", "upper", "var", "tmp", "made-here"))
			if st.Uid != st.Gid || st.Uid < firstHostID+1000 {
				t.Fatalf("%s: a file created in the writable layer is %d:%d on the host, want the sandbox range's 1000", name, st.Uid, st.Gid)
			}
			base := st.Uid - 1000
			if (base-firstHostID)%rangeSize != 0 {
				t.Errorf("%s: range base %d is not 100000+N*65536", name, base)
			}
			if len(procs) == 0 {
				t.Fatalf("%s: no host process found in cgroup /shellgate/%s", name, cid)
			}
			for pid, ids := range procs {
				for _, id := range ids {
					if id < base || id >= base+rangeSize {
						t.Errorf("%s: host process %d (%s) runs with id %d, outside the sandbox's range %d..%d", name, pid, comm(pid), id, base, base+rangeSize-1)
					}
				}
			}
			for other, ob := range bases {
				if base < ob+rangeSize && ob < base+rangeSize {
					t.Errorf("%s (base %d) and %s (base %d) share host ids", name, base, other, ob)
				}
			}
			bases[name] = base
			for _, acct := range hostAccounts(t) {
				if acct >= base && acct < base+rangeSize {
					t.Errorf("%s: host account id %d is inside the sandbox's range", name, acct)
				}
			}
		}
	})

	t.Run("02 the home is 1000:1000 on disk and wakes in another range", func(t *testing.T) {
		const name = "ns-home"
		if o := Run(t, m, name, "echo one > f && mkdir d && echo two > d/g && stat -c '%u:%g' f d d/g"); o.Stdout != "1000:1000\n1000:1000\n1000:1000\n" {
			t.Fatalf("inside: %q %q", o.Stdout, o.Stderr)
		}
		if err := m.WriteFile(ctx, name, "up/loaded.txt", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		first := rangeOf(t, m, data, name)
		if err := m.Sleep(ctx, name); err != nil {
			t.Fatal(err)
		}
		// Another sandbox takes the range that was freed; the home wakes
		// in a different one.
		Run(t, m, "ns-taker", "true")
		second := rangeOf(t, m, data, name)
		if second == first {
			t.Fatalf("the home woke in the same range %d although another sandbox took it", first)
		}
		if o := Run(t, m, name, "cat f d/g up/loaded.txt && echo three > f2 && stat -c '%u:%g' f2"); o.Stdout != "one\ntwo\nx1000:1000\n" {
			t.Fatalf("home in range %d after range %d: %q %q", second, first, o.Stdout, o.Stderr)
		}
		if err := m.Sleep(ctx, name); err != nil {
			t.Fatal(err)
		}
		img := filepath.Join(data, "homes", name+".img")
		for _, p := range []string{"/", "/f", "/d", "/d/g", "/up", "/up/loaded.txt", "/f2"} {
			if uid, gid := diskOwner(t, img, p); uid != 1000 || gid != 1000 {
				t.Errorf("%s in the home image is %d:%d on disk, want 1000:1000", p, uid, gid)
			}
		}
	})

	t.Run("03 the shared image is never changed", func(t *testing.T) {
		Run(t, m, "ns-a", "touch /var/tmp/again; ls -l /bin/busybox >/dev/null")
		if err := m.Sleep(ctx, "ns-a"); err != nil {
			t.Fatal(err)
		}
		after := imageState(t, "busybox")
		if len(after) != len(before) {
			t.Errorf("image had %d entries, now %d", len(before), len(after))
		}
		for p, st := range before {
			if after[p] != st {
				t.Errorf("image entry %s changed: %s -> %s", p, st, after[p])
			}
		}
		if left := mountsUnder(filepath.Join(ImagesDir(), "busybox")); len(left) > 0 {
			t.Errorf("mounts on the image: %v", left)
		}
	})

	t.Run("04 no host account reaches the home through the data directory", func(t *testing.T) {
		// The sandbox directories are searchable by others (the runtime
		// enters them as the slot's base id) and the mount table names
		// them. Host uid 1000 owns the home's files on disk, and nobody
		// stands for every other account: neither may read them, through
		// the host's mount or the container's idmapped one.
		if o := Run(t, m, "ns-a", "echo secret > secret.txt; chmod 644 secret.txt"); exitCode(o) != 0 {
			t.Fatalf("%+v %q", o.Outcome, o.Stderr)
		}
		dir := filepath.Join(data, "run", "sandboxes", containerOf(t, data, "ns-a"))
		for _, p := range []string{filepath.Join(dir, "private", "home", "secret.txt"), filepath.Join(dir, "mapped-home", "secret.txt")} {
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("root cannot see %s: %v", p, err)
			}
			for _, uid := range []uint32{1000, 65534} {
				cmd := exec.Command("/bin/cat", p)
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
				if out, err := cmd.Output(); err == nil || strings.Contains(string(out), "secret") {
					t.Errorf("host uid %d read %s: %q %v", uid, p, out, err)
				}
			}
		}
	})
}

// InotifySuite checks that one sandbox taking every inotify instance its
// user may have leaves another sandbox able to create one: per-uid kernel
// limits are charged per sandbox, not to one shared host user.
func InotifySuite(t *testing.T, rt string) {
	m, _ := Open(t, rt, "default")
	ctx := context.Background()
	const hog = `python3 - <<'EOF'
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while n < 100000:
    if libc.inotify_init() < 0:
        break
    n += 1
print("held", n, os.strerror(ctypes.get_errno()), flush=True)
time.sleep(120)
EOF`
	const probe = `python3 - <<'EOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
print("ok" if fd >= 0 else "failed: " + os.strerror(ctypes.get_errno()))
EOF`
	Run(t, m, "probe", "true") // started before the hog holds anything
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	held := make(chan string, 1)
	var out strings.Builder
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		_, err := m.Exec(hctx, "hog", sandbox.Command{Command: hog, TimeoutMs: 180000, MaxBytes: 4096, OnOutput: func(_ byte, b []byte) {
			mu.Lock()
			defer mu.Unlock()
			out.Write(b)
			if s := out.String(); strings.HasSuffix(s, "\n") {
				select {
				case held <- s:
				default:
				}
			}
		}})
		done <- err
	}()
	var report string
	select {
	case report = <-held:
	case err := <-done:
		t.Fatalf("the hog ended before it held its instances: %v %q", err, out.String())
	}
	var n int
	if _, err := fmt.Sscanf(report, "held %d", &n); err != nil || n == 0 {
		t.Fatalf("hog: %q", report)
	}
	t.Logf("hog: %s", strings.TrimSpace(report))
	res, err := m.Exec(ctx, "probe", sandbox.Command{Command: probe, TimeoutMs: 60000, MaxBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	// The hog must still be holding its instances: it only ends when
	// cancelled.
	select {
	case err := <-done:
		t.Fatalf("the hog ended before the probe ran: %v", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("hog: %v", err)
	}
	if string(res.Stdout) != "ok\n" {
		t.Errorf("after another sandbox took %d inotify instances (%s), inotify_init in this one: %q %q", n, strings.TrimSpace(report), res.Stdout, res.Stderr)
	}
}

// SlotCrashSuite checks how host id ranges are handed out between
// processes sharing a data directory, and that crash cleanup frees the
// range of a killed process's sandbox: a live process's sandbox never gets
// it before the cleanup, the next one does after.
func SlotCrashSuite(t *testing.T, rt string) {
	Skip(t, rt, "busybox")
	data := DataDirWithImages(t)
	ctx := context.Background()
	m1, _ := Open(t, rt, "busybox", func(c *sandbox.Config) { c.DataDir = data })
	Run(t, m1, "early", "true")
	early := slotOf(t, data, "early")

	cmd := startKeepCLI(t, rt, data, "--home-mb", "32")
	crashed := slotOf(t, data, "crashy")
	crashedDir := filepath.Join(data, "run", "sandboxes", containerOf(t, data, "crashy"))
	if crashed == early {
		t.Fatalf("two processes' sandboxes share slot %d", early)
	}
	cmd.Process.Kill()
	cmd.Wait()

	// The killed process's sandbox is still there: its range is not free.
	Run(t, m1, "live", "true")
	if live := slotOf(t, data, "live"); live == crashed || live == early {
		t.Errorf("a live sandbox got slot %d (crashed sandbox's %d, early %d)", live, crashed, early)
	}

	// A new process cleans up the orphan and frees its range. (Slots are
	// host-wide: a sandbox of another test may take it at once, so the
	// check is that the orphan no longer holds it.)
	m2, _ := Open(t, rt, "busybox", func(c *sandbox.Config) { c.DataDir = data })
	b, err := os.ReadFile(filepath.Join(sandbox.SlotsDir, strconv.Itoa(crashed)))
	if err != nil || strings.TrimSpace(string(b)) == crashedDir {
		t.Errorf("slot %d after cleanup: %q %v, want it freed", crashed, b, err)
	}
	Run(t, m2, "after", "true")
	if after := slotOf(t, data, "after"); after == early {
		t.Errorf("after cleanup a new sandbox got slot %d, held by a live one", after)
	}
	if o := Run(t, m2, "crashy", "cat keep.txt"); o.Stdout != "precious\n" {
		t.Errorf("home lost after crash: %q %q", o.Stdout, o.Stderr)
	}
	// m2 closes first (cleanups run last-in first-out) and checks that no
	// mount is left under the data directory: put m1's sandboxes to sleep.
	for _, n := range []string{"early", "live"} {
		if err := m1.Sleep(ctx, n); err != nil {
			t.Error(err)
		}
	}
}

// containerOf returns the container id of the awake sandbox name.
func containerOf(t testing.TB, data, name string) string {
	t.Helper()
	metas, _ := filepath.Glob(filepath.Join(data, "run", "sandboxes", "*", "meta.json"))
	for _, p := range metas {
		var md struct{ Home string }
		b, _ := os.ReadFile(p)
		if json.Unmarshal(b, &md) == nil && filepath.Base(md.Home) == name+".img" {
			return filepath.Base(filepath.Dir(p))
		}
	}
	t.Fatalf("no running container for sandbox %s", name)
	return ""
}

// slotOf returns the id range slot held by the awake sandbox name.
func slotOf(t testing.TB, data, name string) int {
	t.Helper()
	dir := filepath.Join(data, "run", "sandboxes", containerOf(t, data, name))
	slots, _ := filepath.Glob(filepath.Join(sandbox.SlotsDir, "*"))
	for _, p := range slots {
		if b, _ := os.ReadFile(p); strings.TrimSpace(string(b)) == dir {
			n, err := strconv.Atoi(filepath.Base(p))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("sandbox %s (%s) holds no slot", name, dir)
	return -1
}

// rangeOf wakes name and returns the host uid its commands run as.
func rangeOf(t testing.TB, m *sandbox.Manager, data, name string) uint32 {
	t.Helper()
	Run(t, m, name, "touch /var/tmp/range-probe")
	cid := containerOf(t, data, name)
	return statT(t, filepath.Join(data, "run", "sandboxes", cid, "layer", "upper", "var", "tmp", "range-probe")).Uid
}

// hostProcs returns the host processes in the container's cgroup with
// their real, effective, saved and filesystem uids and gids.
func hostProcs(cid string) map[int][]uint32 {
	out := map[int][]uint32{}
	member := regexp.MustCompile(`(?m):/shellgate/` + regexp.QuoteMeta(cid) + `(/|$)`)
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		cg, err := os.ReadFile(filepath.Join(p, "cgroup"))
		if err != nil || !member.Match(cg) {
			continue
		}
		status, err := os.ReadFile(filepath.Join(p, "status"))
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(p))
		var ids []uint32
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				ids = append(ids, parseIDs(rest)...)
			} else if rest, ok := strings.CutPrefix(line, "Gid:"); ok {
				ids = append(ids, parseIDs(rest)...)
			}
		}
		out[pid] = ids
	}
	return out
}

func parseIDs(s string) []uint32 {
	var ids []uint32
	for _, f := range strings.Fields(s) {
		if v, err := strconv.ParseUint(f, 10, 32); err == nil {
			ids = append(ids, uint32(v))
		}
	}
	return ids
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// hostAccounts returns the uids and gids of /etc/passwd and /etc/group.
func hostAccounts(t testing.TB) []uint32 {
	var ids []uint32
	for _, f := range []string{"/etc/passwd", "/etc/group"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Split(line, ":"); len(f) > 2 {
				if v, err := strconv.ParseUint(f[2], 10, 32); err == nil {
					ids = append(ids, uint32(v))
				}
			}
		}
	}
	return ids
}

func statT(t testing.TB, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatalf("host view: %v", err)
	}
	return &st
}

var debugfsOwner = regexp.MustCompile(`User:\s+(\d+)\s+Group:\s+(\d+)`)

// diskOwner reads a file's owner straight from an unmounted ext4 image.
func diskOwner(t testing.TB, img, p string) (uid, gid int) {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "stat "+p, img).CombinedOutput()
	m := debugfsOwner.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("debugfs stat %s in %s: %v: %s", p, img, err, out)
	}
	uid, _ = strconv.Atoi(string(m[1]))
	gid, _ = strconv.Atoi(string(m[2]))
	return uid, gid
}

// imageState records owner, mode and change time of every entry of an
// image's rootfs: a chown or chmod changes the change time.
func imageState(t testing.TB, img string) map[string]string {
	t.Helper()
	root := filepath.Join(ImagesDir(), img, "rootfs")
	state := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		state[p] = fmt.Sprintf("%d:%d %o ctime %d.%09d", st.Uid, st.Gid, st.Mode, st.Ctim.Sec, st.Ctim.Nsec)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return state
}
