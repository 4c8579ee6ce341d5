package tool_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox/runtime"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestPythonKernel is the container's Python kernel on every runtime, in
// the default image: state that carries from call to call, rich outputs,
// errors, a timeout that interrupts and keeps the state, a kernel that
// dies, a sandbox that sleeps, and shell commands beside it.
func TestPythonKernel(t *testing.T) {
	for _, rt := range runtime.Names {
		t.Run(rt, func(t *testing.T) { pythonKernel(t, rt) })
	}
}

func pythonKernel(t *testing.T, rt string) {
	m, _ := sandboxtest.Open(t, rt, "default")
	const box = "py"
	var k tool.Kernels
	ctx := context.Background()
	py := func(t *testing.T, code string, timeoutMs int64) tool.PythonOutput {
		t.Helper()
		c, err := tool.PythonArgs{Code: &code}.Call()
		if err != nil {
			t.Fatal(err)
		}
		if timeoutMs > 0 {
			c.TimeoutMs = timeoutMs
		}
		var streamed strings.Builder
		o, err := tool.RunPython(ctx, m, box, c, &k, func(stream int, text string) {
			if stream == 1 {
				streamed.WriteString(text)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(o.Stdout, strings.TrimSuffix(streamed.String(), "\n")) {
			t.Errorf("streamed stdout %q is not what the result holds %q", streamed.String(), o.Stdout)
		}
		return o
	}
	exit := func(o tool.PythonOutput) int {
		if o.Outcome.Type != "exit" || o.Outcome.ExitCode == nil {
			return -1
		}
		return *o.Outcome.ExitCode
	}
	t.Run("01 state carries from call to call", func(t *testing.T) {
		o := py(t, "x = 41\nimport os\nprint(os.getcwd())", 0)
		if exit(o) != 0 || o.Stdout != "/workspace/home\n" || o.Restarted != "" {
			t.Fatalf("first call: %+v", o)
		}
		o = py(t, "print(x + 1)\nx + 2", 0)
		if o.Stdout != "42\n" || len(o.Displays) != 1 || o.Displays[0].MIME != "text/plain" || o.Displays[0].Text != "43" {
			t.Errorf("second call: %+v", o)
		}
	})
	t.Run("02 an exception is the call's error, the state stays", func(t *testing.T) {
		o := py(t, "y = 1\n1/0", 0)
		if exit(o) != 1 || o.Error == nil || o.Error.Name != "ZeroDivisionError" || len(o.Error.Traceback) == 0 || strings.Contains(strings.Join(o.Error.Traceback, ""), "\x1b") {
			t.Errorf("%+v", o)
		}
		if o := py(t, "print(x, y)", 0); o.Stdout != "41 1\n" {
			t.Errorf("after the error: %+v", o)
		}
	})
	t.Run("02b sys.exit is the call's exit status", func(t *testing.T) {
		for code, want := range map[string]int{"import sys; sys.exit(2)": 2, "import sys; sys.exit()": 0, "import sys; sys.exit('bye')": 1} {
			o := py(t, code, 0)
			if exit(o) != want || o.Error != nil || strings.Contains(o.Stderr, "To exit") || (want == 1 && o.Stderr != "bye\n") {
				t.Errorf("%s: %+v", code, o)
			}
		}
	})
	t.Run("03 a timeout interrupts the code and keeps the kernel", func(t *testing.T) {
		o := py(t, "print('start', flush=True)\nwhile True: pass", 1500)
		if o.Outcome.Type != "timeout" || !strings.HasPrefix(o.Stdout, "start") || !strings.Contains(o.Notes, "interrupted") {
			t.Errorf("%+v", o)
		}
		if o := py(t, "print(x)", 0); o.Stdout != "41\n" || o.Restarted != "" {
			t.Errorf("after the timeout: %+v", o)
		}
	})
	t.Run("04 a figure is an image", func(t *testing.T) {
		o := py(t, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.title('t');", 0)
		var imgs int
		for _, d := range o.Displays {
			if d.IsImage() {
				imgs++
				if d.MIME != "image/png" || !bytes.HasPrefix(d.Data, []byte("\x89PNG")) {
					t.Errorf("not a PNG: %s %d bytes", d.MIME, len(d.Data))
				}
			}
		}
		if imgs != 1 || exit(o) != 0 || len(o.Displays) != 1 {
			t.Errorf("%d images of %d displays, outcome %+v, stderr %q", imgs, len(o.Displays), o.Outcome, o.Stderr)
		}
	})
	t.Run("05 output is capped and marked", func(t *testing.T) {
		code := "print('y' * 100000)"
		c, _ := tool.PythonArgs{Code: &code}.Call()
		c.MaxOutputLength = 1000
		o, err := tool.RunPython(ctx, m, box, c, &k, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(o.Stdout, strings.Repeat("y", 1000)) || !strings.Contains(o.Stdout, tool.TruncationMarker) || !o.Truncated {
			t.Errorf("%.200q", o.Stdout)
		}
	})
	t.Run("06 shell commands share the files and spare the kernel", func(t *testing.T) {
		py(t, "open('from_python.txt', 'w').write('hi')", 0)
		out, err := tool.RunShell(ctx, m, box, tool.Plan{Commands: []string{"cat from_python.txt; sleep 100 &"}, TimeoutMs: 5000, MaxOutputLength: 100})
		if err != nil || out[0].Stdout != "hi" {
			t.Fatalf("%v %+v", err, out)
		}
		if o := py(t, "print(x)", 0); o.Stdout != "41\n" {
			t.Errorf("after a shell command: %+v", o)
		}
	})
	t.Run("07 a kernel that dies is restarted and says so", func(t *testing.T) {
		o := py(t, "import os\nos._exit(3)", 0)
		if !strings.Contains(o.Notes, "exited during this call") {
			t.Errorf("%+v", o)
		}
		o = py(t, "print(x)", 0)
		if o.Restarted == "" || o.Error == nil || o.Error.Name != "NameError" {
			t.Errorf("after the kernel died: %+v", o)
		}
		py(t, "x = 41", 0)
	})
	t.Run("08 a sandbox that slept has a new kernel and says so", func(t *testing.T) {
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		o := py(t, "print('x' in globals())", 0)
		if o.Stdout != "False\n" || o.Restarted == "" {
			t.Errorf("after sleep: %+v", o)
		}
	})
}

// TestPythonArgs are a Python call's bad inputs.
func TestPythonArgs(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{`{"code": 1}`, "not a JSON object"},
		{`{}`, "missing or empty"},
		{`{"code": "  "}`, "missing or empty"},
		{`{"code": "` + strings.Repeat("x", tool.MaxPythonCode+1) + `"}`, "at most 65536"},
		{`{"code": "a\u0000b"}`, "NUL"},
		{`{"code": "1", "timeout_ms": 0}`, "timeout_ms must be a positive"},
	} {
		if _, err := tool.ParsePythonArgs([]byte(c.args)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40s: %v, want %q", c.args, err, c.want)
		}
	}
}
