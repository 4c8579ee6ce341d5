// Package e2e drives the real shellgate binary as a user would, on the real
// runtimes and images. It needs root and the images that `make images`
// builds; it skips with the reason otherwise.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
	"github.com/shellgate/shellgate/testenv"
)

// cli builds the shellgate binary next to a freshly built agent and returns
// a function running it on a private data directory that shares the images.
func cli(t *testing.T) func(args ...string) (stdout, stderr string, code int) {
	t.Helper()
	testenv.NeedRoot(t, "the CLI runs sandboxes")
	agent, err := agentbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	bin := sandboxtest.BuildCLI(t)
	data := sandboxtest.DataDirWithImages(t)
	return func(args ...string) (string, string, int) {
		// A hung CLI is a failure, not a hung suite: SIGTERM after the
		// watchdog, SIGKILL if that does not end it.
		ctx, cancel := context.WithTimeout(context.Background(), cliWatchdog)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 10 * time.Second
		cmd.Env = append(os.Environ(), "SHELLGATE_AGENT="+agent, "SHELLGATE_DATA="+data)
		var so, se strings.Builder
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return so.String(), se.String(), code
	}
}

// cliWatchdog bounds one CLI run in these tests.
const cliWatchdog = 5 * time.Minute

func TestExecBadInput(t *testing.T) {
	sandboxtest.Skip(t, "runc", "busybox")
	run := cli(t)
	many := make([]string, 101)
	for i := range many {
		many[i] = "true"
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"01 no commands", []string{"exec", "--image", "busybox", "--"}, "commands is empty"},
		{"02 101 commands", append([]string{"exec", "--image", "busybox", "--"}, many...), "101 commands in one call: at most 100"},
		{"03 negative timeout", []string{"exec", "--image", "busybox", "--timeout-ms", "-1", "--", "true"}, "timeout_ms must be a positive"},
		{"04 timeout not a number", []string{"exec", "--image", "busybox", "--timeout-ms", "1e99", "--", "true"}, "invalid value"},
		{"05 unknown runtime", []string{"exec", "--image", "busybox", "--runtime", "kata", "--", "true"}, `unknown runtime "kata"`},
		{"06 missing image", []string{"exec", "--image", "nope", "--", "true"}, `image "nope" not found`},
		{"14 sandbox without a verb", []string{"sandbox"}, "usage: shellgate sandbox"},
		{"15 sandbox rm of a bad name", []string{"sandbox", "rm", "../x"}, "sandbox name must be"},
		{"07 bad sandbox name", []string{"exec", "--image", "busybox", "--sandbox", "../x", "--", "true"}, "sandbox name must be"},
		{"08 missing copy-in file", []string{"exec", "--image", "busybox", "--copy-in", "/nonexistent.csv", "--", "true"}, "no such file"},
		{"09 copy-in escaping home", []string{"exec", "--image", "busybox", "--copy-in", "/etc/hostname:../../etc/x", "--", "true"}, "it leaves /workspace/home"},
		{"10 unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"12 memory below the minimum", []string{"exec", "--image", "busybox", "--memory-mb", "10", "--", "true"}, "at least 32 MiB"},
		{"13 zero processes", []string{"exec", "--image", "busybox", "--processes", "0", "--", "true"}, "processes 0: want 16"},
		{"17 mcp without a server", []string{"mcp"}, "--url (or $SHELLGATE_URL) is required"},
		{"18 mcp without a key", []string{"mcp", "--url", "http://127.0.0.1:1"}, "$SHELLGATE_API_KEY is not set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := run(c.args...)
			if code == 0 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q, want %q", code, stderr, c.want)
			}
		})
	}
	t.Run("16 a failed exec leaves no sandbox behind", func(t *testing.T) {
		if out, _, code := run("sandbox", "list"); code != 0 || strings.Count(out, "\n") != 1 {
			t.Fatalf("sandboxes after bad input: exit %d\n%s", code, out)
		}
	})
	t.Run("11 huge timeout is clamped with a note", func(t *testing.T) {
		out, stderr, code := run("exec", "--image", "busybox", "--timeout-ms", "99999999", "--", "echo ok")
		if code != 0 || out != "ok\n" || !strings.Contains(stderr, "clamped to the maximum 300000") {
			t.Fatalf("exit %d, out %q, stderr %q", code, out, stderr)
		}
	})
}

func TestExecJSONAndReuse(t *testing.T) {
	sandboxtest.Skip(t, "runc", "busybox")
	run := cli(t)
	out, stderr, code := run("exec", "--image", "busybox", "--runtime", "runc", "--sandbox", "reuse", "--json", "--", "echo hi > f; cat f", "exit 4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		ContainerID string               `json:"container_id"`
		Output      []tool.CommandOutput `json:"output"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.ContainerID != "reuse" || len(got.Output) != 2 || got.Output[0].Stdout != "hi\n" || *got.Output[1].Outcome.ExitCode != 4 {
		t.Fatalf("%s", out)
	}
	// A second invocation sees the home of the first.
	out, _, code = run("exec", "--image", "busybox", "--runtime", "runc", "--sandbox", "reuse", "--", "cat f")
	if code != 0 || out != "hi\n" {
		t.Fatalf("reuse: exit %d %q", code, out)
	}
	// The sandbox is listed, and removing it deletes its home.
	out, _, code = run("sandbox", "list")
	if code != 0 || !strings.Contains(out, "reuse ") || !strings.Contains(out, "sleeping") {
		t.Fatalf("sandbox list: exit %d %q", code, out)
	}
	if out, _, code = run("sandbox", "rm", "reuse"); code != 0 || out != "removed sandbox reuse\n" {
		t.Fatalf("sandbox rm: exit %d %q", code, out)
	}
	if _, stderr, code := run("sandbox", "rm", "reuse"); code == 0 || !strings.Contains(stderr, "sandbox not found: reuse") {
		t.Fatalf("second rm: exit %d %q", code, stderr)
	}
	if out, _, _ = run("exec", "--image", "busybox", "--runtime", "runc", "--sandbox", "reuse", "--", "ls"); out != "lost+found\noutput\n" {
		t.Fatalf("home survived rm: %q", out)
	}
	// The exit code of the last command is the CLI's.
	if _, _, code = run("exec", "--image", "busybox", "--runtime", "runc", "--", "exit 7"); code != 7 {
		t.Fatalf("exit code %d, want 7", code)
	}
}

// TestCSVExample is the README's example end to end: a CSV copied into a
// sandbox, and python3 with pandas answering a question about it, on every
// runtime that works here.
func TestCSVExample(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	var csv strings.Builder
	csv.WriteString("order_id,region,quantity,unit_price\n")
	regions := []string{"north", "south", "east", "west"}
	var northCents int64
	for i := 1; i <= 5000; i++ {
		r := regions[rng.Intn(len(regions))]
		q, cents := rng.Intn(20)+1, rng.Intn(10000)+1
		if r == "north" {
			northCents += int64(q * cents)
		}
		fmt.Fprintf(&csv, "%d,%s,%d,%d.%02d\n", i, r, q, cents/100, cents%100)
	}
	path := filepath.Join(t.TempDir(), "sales.csv")
	os.WriteFile(path, []byte(csv.String()), 0o644)
	want := fmt.Sprintf("%d.%02d\n", northCents/100, northCents%100)

	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) {
			sandboxtest.Skip(t, rt, "default")
			run := cli(t)
			out, stderr, code := run("exec", "--runtime", rt, "--copy-in", path+":data/sales.csv", "--",
				`python3 -c "import pandas as pd; df = pd.read_csv('data/sales.csv'); print('%.2f' % (df[df.region == 'north'].quantity * df[df.region == 'north'].unit_price).sum())"`)
			if code != 0 || out != want {
				t.Fatalf("exit %d, got %q, want %q; stderr %s", code, out, want, stderr)
			}
		})
	}
}

// TestEvalFromTheShell drives the secure eval as a script would: a client
// function interrupts, the shell resumes with the token, and the sandbox
// built-ins act on a real sandbox's home.
func TestEvalFromTheShell(t *testing.T) {
	sandboxtest.Skip(t, "runc", "busybox")
	run := cli(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "plan.js")
	os.WriteFile(script, []byte(`
await sandbox.writeFile("nums.txt", "4\n5\n6\n");
await sandbox.exec(["echo ran >> runs.log"]);
const ok = await ui.confirm({question: "sum the numbers?"});
if (!ok) return "declined";
const [r, n] = await sandbox.exec(["awk '{s+=$1} END {print s}' nums.txt", "wc -l < runs.log"]);
return {sum: Number(r.stdout.trim()), exit: r.exit_code, runs: Number(n.stdout.trim())};
`), 0o644)
	base := []string{"eval", script, "--client-functions", "ui.confirm", "--sandbox", "evalbox", "--image", "busybox", "--runtime", "runc"}
	out, stderr, code := run(base...)
	if code != 3 {
		t.Fatalf("want exit 3 (interrupted), got %d: %s %s", code, out, stderr)
	}
	var first struct {
		Status        string `json:"status"`
		Continuation  string `json:"continuation"`
		Interruptions []struct {
			ID               string `json:"id"`
			HostFunctionName string `json:"host_function_name"`
		} `json:"interruptions"`
	}
	if err := json.Unmarshal([]byte(out), &first); err != nil || first.Status != "interrupted" || len(first.Interruptions) != 1 || first.Interruptions[0].HostFunctionName != "ui.confirm" {
		t.Fatalf("%v: %s", err, out)
	}
	// The append ran once, before the interruption; the resume answers it
	// from the ledger instead of running it again, so runs.log has one line.
	out, stderr, code = run(append(base, "--continuation", first.Continuation, "--resolve", first.Interruptions[0].ID+"=true")...)
	if code != 0 || strings.TrimSpace(out) != `{"status":"completed","value":{"sum":15,"exit":0,"runs":1}}` { // the guest's key order
		t.Fatalf("resume: exit %d %s %s", code, out, stderr)
	}
	// A tampered token fails before any effect.
	bad := first.Continuation[:len(first.Continuation)-4] + "AAAA"
	out, _, code = run(append(base, "--continuation", bad, "--resolve", first.Interruptions[0].ID+"=true")...)
	if code != 1 || !strings.Contains(out, "RUN_PROTOCOL_ERROR") {
		t.Fatalf("tampered token: exit %d %s", code, out)
	}
	if _, stderr, code = run("eval", script, "--sandbox", "../etc"); code == 0 || !strings.Contains(stderr, "sandbox name must be") {
		t.Fatalf("bad sandbox name: exit %d %s", code, stderr)
	}
}

// TestExecAnonymousSandbox: without --sandbox the CLI's sandbox is removed
// after the call; with --keep it stays and its id is printed for reuse.
func TestExecAnonymousSandbox(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) {
			sandboxtest.Skip(t, rt, "busybox")
			run := cli(t)
			in := filepath.Join(t.TempDir(), "in.txt")
			os.WriteFile(in, []byte("copied\n"), 0o644)
			out, stderr, code := run("exec", "--image", "busybox", "--runtime", rt, "--copy-in", in, "--", "cat in.txt")
			if code != 0 || out != "copied\n" {
				t.Fatalf("exit %d, out %q, stderr %q", code, out, stderr)
			}
			if strings.Contains(stderr, "container_id") {
				t.Errorf("an id was printed for a sandbox that is gone: %q", stderr)
			}
			if list, _, code := run("sandbox", "list"); code != 0 || strings.Count(list, "\n") != 1 {
				t.Fatalf("anonymous sandbox left behind: exit %d\n%s", code, list)
			}

			out, stderr, code = run("exec", "--image", "busybox", "--runtime", rt, "--keep", "--", "echo kept > f")
			if code != 0 {
				t.Fatalf("--keep: exit %d %q %q", code, out, stderr)
			}
			_, rest, ok := strings.Cut(stderr, "[container_id ")
			id, _, _ := strings.Cut(rest, ":")
			if !ok || id == "" {
				t.Fatalf("no id printed with --keep: %q", stderr)
			}
			if list, _, _ := run("sandbox", "list"); !strings.Contains(list, id+" ") {
				t.Fatalf("kept sandbox %s not listed:\n%s", id, list)
			}
			if out, _, code := run("exec", "--image", "busybox", "--runtime", rt, "--sandbox", id, "--", "cat f"); code != 0 || out != "kept\n" {
				t.Fatalf("reuse of %s: exit %d %q", id, code, out)
			}
		})
	}
}
