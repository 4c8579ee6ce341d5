package sandboxtest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/testenv"
)

// residentScript is a resident process whose running state the sleep
// cases check: a background server (busybox httpd), `sleep 1000`, a
// descriptor open on a home file, and a shell variable counting the lines
// it copied from a FIFO in /tmp to that descriptor.
const residentScript = `mkdir -p /tmp/www && echo served > /tmp/www/x && rm -f /tmp/fifo && mkfifo /tmp/fifo
httpd -f -p 127.0.0.1:8080 -h /tmp/www &
sleep 1000 & echo $! > /tmp/sleep.pid
exec 3>>/workspace/home/held
n=0
while :; do while read l; do n=$((n+1)); echo "$l $n" >&3; done < /tmp/fifo; done`

// stateCheck sends line to the resident and prints what it wrote, the
// command line of the process whose pid was saved, and the server's page.
func stateCheck(line string) string {
	return `i=0; until [ -p /tmp/fifo ] || [ $i -ge 500 ]; do sleep 0.01; i=$((i+1)); done
echo ` + line + ` > /tmp/fifo; i=0; until grep -q '^` + line + ` ' held || [ $i -ge 500 ]; do sleep 0.01; i=$((i+1)); done
grep '^` + line + ` ' held; tr '\0' ' ' < /proc/$(cat /tmp/sleep.pid)/cmdline; echo; wget -qO- http://127.0.0.1:8080/x`
}

// CheckpointSuite covers sleep that keeps the running state: on a runtime
// that checkpoints (runsc) processes, memory, open files and a listening
// server survive Sleep and wake; a checkpoint that cannot be restored wakes
// the sandbox from its files and the next command says so. Elsewhere
// sandboxes wake from their files only, and nothing claims otherwise.
// SHELLGATE_CKPT_CYCLES sets the number of sleep/wake rounds (default 5).
func CheckpointSuite(t *testing.T, rt string) {
	logs := &testenv.Buffer{}
	m, data := Open(t, rt, "busybox", func(c *sandbox.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("manager's warnings:\n%s", logs)
		}
	})
	r, _ := runtime.New(rt, t.TempDir())
	_, keeps := r.(runtime.Checkpointer)
	ctx := context.Background()
	const box = "ckpt"
	start := func(t *testing.T) { startResident(t, m, box) }
	sleep := func(t *testing.T) {
		t.Helper()
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		if st, _ := m.Status(box); st != sandbox.Sleeping {
			t.Fatalf("status after sleep: %s", st)
		}
	}
	start(t)
	first := Run(t, m, box, stateCheck("a"))
	if first.Stdout != "a 1\nsleep 1000 \nserved\n" {
		t.Fatalf("resident not running: %+v", first)
	}
	if !keeps {
		t.Run("01 without checkpoints a sandbox wakes from its files", func(t *testing.T) {
			sleep(t)
			o := Run(t, m, box, "cat held; cat /tmp/sleep.pid 2>/dev/null || echo no-pid")
			if o.Stdout != "a 1\nno-pid\n" || strings.Contains(o.Stderr, "running state") {
				t.Fatalf("after wake: %+v", o)
			}
		})
		return
	}
	t.Run("01 processes, memory, open files and a server survive sleep", func(t *testing.T) {
		cycles := testenv.Count(t, "SHELLGATE_CKPT_CYCLES", 5)
		lost, restarted := 0, 0
		for i := 1; i <= cycles; i++ {
			sleep(t)
			info := infoOf(t, m, box)
			if info.CheckpointBytes == 0 || info.DiskBytes < info.CheckpointBytes {
				t.Fatalf("round %d: checkpoint not counted: %+v", i, info)
			}
			line := fmt.Sprintf("r%d", i)
			o := Run(t, m, box, stateCheck(line))
			if want := fmt.Sprintf("%s %d\nsleep 1000 \nserved\n", line, i-restarted+1); o.Stdout != want || o.Stderr != "" {
				lost++
				t.Errorf("round %d after wake: %+v, want stdout %q", i, o, want)
				// Start over, so that the next rounds test again.
				start(t)
				Run(t, m, box, stateCheck("again"))
				restarted = i
			}
			if _, err := os.Stat(filepath.Join(data, "homes", box+".ckpt")); !os.IsNotExist(err) {
				t.Fatalf("round %d: checkpoint kept after wake: %v", i, err)
			}
			if i%50 == 0 {
				t.Logf("round %d: %d lost", i, lost)
			}
		}
		t.Logf("%d sleep/wake cycles, %d lost", cycles, lost)
	})
	t.Run("01b it wakes in another id range when its own was taken", func(t *testing.T) {
		sleep(t)
		Run(t, m, "taker", "true") // takes the range the sleep freed
		defer m.Destroy(ctx, "taker")
		o := Run(t, m, box, stateCheck("moved"))
		if !strings.HasPrefix(o.Stdout, "moved ") || !strings.HasSuffix(o.Stdout, "\nsleep 1000 \nserved\n") || o.Stderr != "" {
			t.Fatalf("after a wake in another range: %+v", o)
		}
	})
	t.Run("02 sleep during a command waits for it and keeps its output", func(t *testing.T) {
		done := running(t, m, box, "echo started; sleep 0.5; echo finished > finished")
		sleep(t)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		o := Run(t, m, box, "cat finished; "+stateCheck("during"))
		if !strings.HasPrefix(o.Stdout, "finished\nduring ") || !strings.HasSuffix(o.Stdout, "served\n") {
			t.Fatalf("after wake: %+v", o)
		}
	})
	t.Run("03 a corrupt checkpoint wakes from the files and says so", func(t *testing.T) {
		sleep(t)
		img := filepath.Join(data, "homes", box+".ckpt", "checkpoint.img")
		if err := os.WriteFile(img, []byte("not a checkpoint"), 0o600); err != nil {
			t.Fatal(err)
		}
		o := Run(t, m, box, "grep -c . held; cat /tmp/sleep.pid 2>/dev/null || echo no-pid")
		if !strings.HasSuffix(o.Stdout, "no-pid\n") || !strings.Contains(o.Stderr, "running state") || !strings.Contains(o.Stderr, "could not be restored") {
			t.Fatalf("after a corrupt checkpoint: %+v", o)
		}
		if again := Run(t, m, box, "true"); again.Stderr != "" {
			t.Fatalf("the note came twice: %q", again.Stderr)
		}
	})
	t.Run("03b a checkpoint of another image version wakes from the files and says so", func(t *testing.T) {
		start(t)
		sleep(t)
		meta := filepath.Join(data, "homes", box+".ckpt", "meta.json")
		b, err := os.ReadFile(meta)
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.Replace(string(b), `"rootfs":"`, `"rootfs":"/elsewhere`, 1))
		if err := os.WriteFile(meta, b, 0o600); err != nil {
			t.Fatal(err)
		}
		o := Run(t, m, box, "cat /tmp/sleep.pid 2>/dev/null || echo no-pid")
		if o.Stdout != "no-pid\n" || !strings.Contains(o.Stderr, "image was rebuilt") {
			t.Fatalf("after an image change: %+v", o)
		}
	})
	t.Run("04 idle sleep and shutdown keep it too", func(t *testing.T) {
		data2 := DataDir(t)
		cfg := func(idle time.Duration) func(*sandbox.Config) {
			return func(c *sandbox.Config) { c.DataDir, c.IdleTimeout = data2, idle }
		}
		m2, _ := Open(t, rt, "busybox", cfg(100*time.Millisecond))
		startResident(t, m2, "idle")
		Run(t, m2, "idle", stateCheck("a"))
		if !testenv.Eventually(30*time.Second, func() bool { st, _ := m2.Status("idle"); return st == sandbox.Sleeping }) {
			t.Fatal("never slept")
		}
		if o := Run(t, m2, "idle", stateCheck("b")); !strings.HasPrefix(o.Stdout, "b 2\nsleep 1000 \n") {
			t.Fatalf("after an idle sleep: %+v", o)
		}
		if err := m2.Close(ctx); err != nil {
			t.Fatal(err)
		}
		m3, _ := Open(t, rt, "busybox", cfg(-1))
		if o := Run(t, m3, "idle", stateCheck("c")); !strings.HasPrefix(o.Stdout, "c 3\nsleep 1000 \n") {
			t.Fatalf("after a shutdown: %+v", o)
		}
	})
	t.Run("05 destroy removes the checkpoint", func(t *testing.T) {
		start(t)
		sleep(t)
		dir := filepath.Join(data, "homes", box+".ckpt")
		if _, err := os.Stat(dir); err != nil {
			t.Fatal(err)
		}
		if err := m.Destroy(ctx, box); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("checkpoint left after destroy: %v", err)
		}
	})
}

// CheckpointArchiveSuite runs two runsc managers over separate data
// directories — two nodes — sharing one home archive over the Objects
// that open returns: a sandbox slept on one node wakes on the other with
// its running state, each checkpoint is used once (taken out of the
// archive at wake), and one that does not verify wakes the sandbox from
// its files with the note.
func CheckpointArchiveSuite(t *testing.T, open func(t *testing.T) homearchive.Objects) {
	ctx := context.Background()
	obj := open(t)
	ar := homearchive.New(obj)
	withArchive := func(c *sandbox.Config) { c.HomeArchive = ar }
	mA, dataA := Open(t, "runsc", "busybox", withArchive)
	mB, _ := Open(t, "runsc", "busybox", withArchive)
	const box = "roamer"
	startResident(t, mA, box)
	Run(t, mA, box, stateCheck("a"))
	stored := func(t *testing.T) []string {
		t.Helper()
		keys, err := obj.List(ctx, box+"/checkpoint/")
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	sleep := func(t *testing.T, m *sandbox.Manager) {
		t.Helper()
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		if len(stored(t)) == 0 {
			t.Fatal("no checkpoint in the archive after sleep")
		}
	}
	t.Run("01 slept on A, woken on B with its processes, and back", func(t *testing.T) {
		sleep(t, mA)
		if _, err := os.Stat(filepath.Join(dataA, "homes", box+".ckpt")); !os.IsNotExist(err) {
			t.Fatalf("A kept its checkpoint after archiving it: %v", err)
		}
		if o := Run(t, mB, box, stateCheck("b")); o.Stdout != "b 2\nsleep 1000 \nserved\n" || o.Stderr != "" {
			t.Fatalf("woken on B: %+v", o)
		}
		if left := stored(t); len(left) != 0 {
			t.Fatalf("the checkpoint stayed in the archive after its wake: %v", left)
		}
		sleep(t, mB)
		if o := Run(t, mA, box, stateCheck("c")); o.Stdout != "c 3\nsleep 1000 \nserved\n" || o.Stderr != "" {
			t.Fatalf("woken on A again: %+v", o)
		}
	})
	t.Run("02 a checkpoint that does not verify wakes from the files and says so", func(t *testing.T) {
		sleep(t, mA)
		for _, k := range stored(t) {
			if strings.Contains(k, "/chunks/") {
				if err := obj.Put(ctx, k, strings.NewReader("tampered"), 8); err != nil {
					t.Fatal(err)
				}
			}
		}
		o := Run(t, mB, box, "grep -c . held; cat /tmp/sleep.pid 2>/dev/null || echo no-pid")
		if o.Stdout != "3\nno-pid\n" || !strings.Contains(o.Stderr, "could not be fetched from storage") {
			t.Fatalf("after a tampered checkpoint: %+v", o)
		}
	})
}

// startResident starts residentScript in the named sandbox, over an
// empty held file.
func startResident(t *testing.T, m *sandbox.Manager, name string) {
	t.Helper()
	Run(t, m, name, "rm -f held")
	if res, err := m.Exec(context.Background(), name, sandbox.Command{Command: residentScript, Resident: true}); err != nil || res.ExitCode != 0 {
		t.Fatalf("resident: %v %+v", err, res)
	}
}

func infoOf(t *testing.T, m *sandbox.Manager, name string) sandbox.Info {
	t.Helper()
	list, err := m.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if in.Name == name {
			return in
		}
	}
	t.Fatalf("%s not listed", name)
	return sandbox.Info{}
}
