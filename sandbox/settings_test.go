package sandbox_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestSettings: a sandbox starts with the settings its SettingsFunc gives
// (zero fields the defaults), and a sandbox whose settings cannot be had
// or are unusable is not started and leaves nothing behind.
func TestSettings(t *testing.T) {
	m, _ := sandboxtest.Open(t, "crun", "busybox")
	boom := errors.New("no record")
	m.SetSettings(func(ctx context.Context, name string) (sandbox.Settings, error) {
		switch name {
		case "own":
			return sandbox.Settings{Limits: runtime.Limits{Processes: 20}, HomeBytes: 16 << 20}, nil
		case "broken":
			return sandbox.Settings{}, boom
		case "tiny":
			return sandbox.Settings{Limits: runtime.Limits{MemoryBytes: 1 << 20}}, nil
		}
		return sandbox.Settings{}, nil
	})
	run := func(name, cmd string) (sandbox.Result, error) {
		return m.Exec(t.Context(), name, sandbox.Command{Command: cmd, TimeoutMs: 10_000, MaxBytes: 4096})
	}
	t.Run("01 own settings over the defaults", func(t *testing.T) {
		res, err := run("own", "ulimit -u; df -k /workspace/home | tail -n 1 | awk '{print $2}'")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Fields(string(res.Stdout))
		if len(lines) != 2 || lines[0] != "20" {
			t.Fatalf("ulimit: %q %q", res.Stdout, res.Stderr)
		}
		// The home's file system is a little smaller than its 16 MiB image.
		if kb, err := strconv.Atoi(lines[1]); err != nil || kb > 16<<10 || kb < 16<<10*7/10 {
			t.Fatalf("home of %s KiB, want about 16 MiB", lines[1])
		}
		def, err := run("plain", "ulimit -u")
		if err != nil || strings.TrimSpace(string(def.Stdout)) != "64" {
			t.Fatalf("defaults (sandboxtest.Limits): %q %v", def.Stdout, err)
		}
	})
	t.Run("02 settings that cannot be had or used start nothing", func(t *testing.T) {
		if _, err := run("broken", "true"); !errors.Is(err, boom) {
			t.Fatalf("broken: %v", err)
		}
		if _, err := run("tiny", "true"); err == nil || !strings.Contains(err.Error(), "memory") {
			t.Fatalf("tiny: %v", err)
		}
		for _, name := range []string{"broken", "tiny"} {
			if _, err := m.Status(name); !errors.Is(err, sandbox.ErrNotFound) {
				t.Fatalf("%s after a failed start: %v", name, err)
			}
		}
	})
}
