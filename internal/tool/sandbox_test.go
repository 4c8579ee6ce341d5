package tool_test

import (
	"context"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestShellInSandbox is the tool layer's shaping of real output, on every
// runtime: what sandboxtest's conformance suite checks below it (bytes kept
// and counted), this checks as the model sees it (U+FFFD, the cap in
// characters, the truncation marker).
func TestShellInSandbox(t *testing.T) {
	sandboxtest.EachRuntime(t, shellInSandbox)
}

func shellInSandbox(t *testing.T, rt string) {
	m, _ := sandboxtest.Open(t, rt, "busybox")
	const box = "tool"
	i64 := func(v int64) *int64 { return &v }
	// Each case's call, planned and run as the gateway does.
	shell := func(t *testing.T, a tool.ShellArgs) (out []tool.CommandOutput) {
		t.Helper()
		p, err := a.Plan()
		if err == nil {
			out, err = tool.RunShell(context.Background(), m, box, p)
		}
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Run("03 unicode and non-UTF-8 output", func(t *testing.T) {
		o := shell(t, tool.ShellArgs{Commands: []string{`printf 'héllo 世界 🎉\n'; printf 'a\377b\n' >&2`}})[0]
		if o.Stdout != "héllo 世界 🎉\n" {
			t.Errorf("unicode: %q", o.Stdout)
		}
		if o.Stderr != "a\uFFFDb\n" {
			t.Errorf("invalid UTF-8 should become U+FFFD: %q", o.Stderr)
		}
	})
	t.Run("06 output flood is capped and marked", func(t *testing.T) {
		o := shell(t, tool.ShellArgs{Commands: []string{"yes", "yes >&2"}, TimeoutMs: i64(1000), MaxOutputLength: i64(1000)})
		for i, c := range o {
			s := c.Stdout
			if i == 1 {
				s = c.Stderr
			}
			if !strings.HasPrefix(s, strings.Repeat("y\n", 500)) || !strings.Contains(s, tool.TruncationMarker) {
				t.Errorf("command %d: not capped and marked: %.80q… (%d chars)", i, s, len(s))
			}
		}
	})
	t.Run("07 a 100 MB line without newline", func(t *testing.T) {
		// The security case's 1 GB line is sandboxtest's conformance case
		// 07, on every runtime; the cut and its byte count in the marker
		// are the same code for a tenth of it.
		o := shell(t, tool.ShellArgs{Commands: []string{"dd if=/dev/zero bs=1000000 count=100 2>/dev/null | tr '\\0' x"}, TimeoutMs: i64(tool.MaxTimeoutMs)})[0]
		code := -1000
		if o.Outcome.Type == "exit" && o.Outcome.ExitCode != nil {
			code = *o.Outcome.ExitCode
		}
		if code != 0 || !strings.HasPrefix(o.Stdout, strings.Repeat("x", tool.DefaultMaxOutput)) || !strings.Contains(o.Stdout, "95 MiB") {
			t.Errorf("outcome %+v, stdout %d chars, tail %q", o.Outcome, len(o.Stdout), o.Stdout[max(0, len(o.Stdout)-100):])
		}
	})
}
