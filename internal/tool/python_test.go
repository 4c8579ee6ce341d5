package tool_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestPythonKernel is the container's Python kernel on every runtime, in
// the default image: state that carries from call to call, rich outputs,
// errors, a timeout that interrupts and keeps the state, a kernel that
// dies, a sandbox that sleeps, and shell commands beside it.
func TestPythonKernel(t *testing.T) {
	sandboxtest.EachRuntime(t, pythonKernel)
}

func pythonKernel(t *testing.T, rt string) {
	m, data := sandboxtest.Open(t, rt, "default")
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
		// Code that awaits (an asynchronous cell) too.
		if o := py(t, "import asyncio\nawait asyncio.sleep(0)\nwhile True: pass", 1500); o.Outcome.Type != "timeout" || o.Error == nil || o.Error.Name != "Interrupted" {
			t.Errorf("async: %+v", o)
		}
		if o := py(t, "print(x)", 0); o.Stdout != "41\n" || o.Restarted != "" {
			t.Errorf("after the async timeout: %+v", o)
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
	t.Run("08 a sandbox that slept keeps its kernel where it checkpoints, else says so", func(t *testing.T) {
		py(t, "x = 41", 0)
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		if rt != "runsc" {
			o := py(t, "print('x' in globals())", 0)
			if o.Stdout != "False\n" || o.Restarted == "" {
				t.Errorf("after sleep: %+v", o)
			}
			return
		}
		if o := py(t, "print(x + 1)", 0); o.Stdout != "42\n" || o.Restarted != "" || o.Notes != "" {
			t.Fatalf("after sleep and restore: %+v", o)
		}
		// A checkpoint that cannot be restored: the files, a new kernel,
		// and the model is told the running state was lost.
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "homes", box+".ckpt", "pages_meta.img"), []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		o := py(t, "print('x' in globals())", 0)
		if o.Stdout != "False\n" || o.Restarted == "" || !strings.Contains(o.Notes, "running state") {
			t.Errorf("after a corrupt checkpoint: %+v", o)
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

// TestPythonToolCalls is programmatic tool calling on the kernel, on every
// runtime: code calls client tools as async functions; each call pauses
// the execution in the kernel and a resume hands it the result, in the
// same kernel with its state; a tool the code may not call, a tool's
// error, another call while one waits and a sandbox that sleeps each end
// clearly, the kernel alive.
func TestPythonToolCalls(t *testing.T) {
	sandboxtest.EachRuntime(t, pythonToolCalls)
}

func pythonToolCalls(t *testing.T, rt string) {
	m, _ := sandboxtest.Open(t, rt, "default")
	const box = "ptc"
	var k tool.Kernels
	ctx := context.Background()
	tools := []string{"get_weather"}
	run := func(t *testing.T, c tool.PythonCall) tool.PythonOutput {
		t.Helper()
		if c.TimeoutMs == 0 {
			c.TimeoutMs, c.MaxOutputLength = 60_000, 10_000
		}
		c.Tools, c.Denied, c.Caller = tools, []string{"send_email"}, "code_execution_20260120"
		c.ToolParams = map[string][]string{"get_weather": {"city", "unit"}}
		o, err := tool.RunPython(ctx, m, box, c, &k, nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	code := func(t *testing.T, src string) tool.PythonOutput { return run(t, tool.PythonCall{Code: src}) }
	resume := func(t *testing.T, calls []tool.PythonToolCall, result, errText string) tool.PythonOutput {
		t.Helper()
		if len(calls) != 1 {
			t.Fatalf("%d tool calls to resume, want 1", len(calls))
		}
		return run(t, tool.PythonCall{Resume: &tool.PythonResume{Answers: []tool.PythonAnswer{{Call: calls[0].Call, Result: result, Error: errText}}}})
	}

	t.Run("01 two calls, each resumed, in one execution", func(t *testing.T) {
		o := code(t, "x = 41\nprint('before')\n"+
			"try:\n    await send_email(to='a')\nexcept ToolError as e:\n    print('refused:', e)\n"+
			"a = await get_weather(city='Paris')\nprint('got', a)\nb = await get_weather('Oslo', 'C')\nprint(a, b, x + 1)")
		if len(o.ToolCalls) != 1 || o.ToolCalls[0].Name != "get_weather" || string(o.ToolCalls[0].Input) != `{"city":"Paris"}` {
			t.Fatalf("first pause: %+v", o)
		}
		o = resume(t, o.ToolCalls, "sunny", "")
		if len(o.ToolCalls) != 1 || string(o.ToolCalls[0].Input) != `{"city":"Oslo","unit":"C"}` {
			t.Fatalf("second pause: %+v", o)
		}
		o = resume(t, o.ToolCalls, "rainy", "")
		want := "before\nrefused: the tool send_email cannot be called from code: its allowed_callers do not include code_execution_20260120\ngot sunny\nsunny rainy 42\n"
		if o.ToolCalls != nil || o.Stdout != want || o.Outcome.Type != "exit" || *o.Outcome.ExitCode != 0 {
			t.Errorf("end: stdout %q, want %q; %+v", o.Stdout, want, o)
		}
	})
	t.Run("01b arguments that do not fit are a TypeError, before any call", func(t *testing.T) {
		o := code(t, "for args, kw in [(('a', 'b', 'c'), {}), (('a',), {'city': 'b'})]:\n    try:\n        await get_weather(*args, **kw)\n    except TypeError as e:\n        print(e)")
		want := "get_weather() takes at most 2 positional argument(s) (city, unit); pass the input as keyword arguments\nget_weather() got multiple values for argument 'city'\n"
		if o.ToolCalls != nil || o.Stdout != want {
			t.Errorf("stdout %q, want %q; %+v", o.Stdout, want, o)
		}
	})
	t.Run("02 a tool's error is ToolError in the code; a tool not allowed is refused", func(t *testing.T) {
		// The driver refuses a call of a tool not allowed even when code
		// asks for it by hand, without the tool functions.
		o := code(t, "import builtins, json\n"+
			"print(json.loads(builtins.input('\\x1eshellgate-tool ' + json.dumps([{'name': 'rm_rf', 'input': {}}])))[0]['error'])\n"+
			"try:\n    await get_weather(city='Nowhere')\nexcept ToolError as e:\n    print('failed:', e)\n")
		o = resume(t, o.ToolCalls, "", "the tool reported an error: no such city")
		if o.Stdout != "there is no tool 'rm_rf' callable from code in this request (callable: get_weather)\nfailed: the tool reported an error: no such city\n" || o.Error != nil {
			t.Errorf("%q %+v", o.Stdout, o)
		}
	})
	t.Run("03 another call ends the waiting execution; a late resume says why", func(t *testing.T) {
		o := code(t, "y = 1\nawait get_weather(city='Paris')\ny = 2")
		if len(o.ToolCalls) != 1 {
			t.Fatalf("no pause: %+v", o)
		}
		if o2 := code(t, "print(x, y)"); o2.Stdout != "41 1\n" || o2.Restarted != "" {
			t.Errorf("the next call: %+v", o2)
		}
		o = resume(t, o.ToolCalls, "sunny", "")
		if !strings.Contains(o.Expired, "another Python call came") {
			t.Errorf("late resume: %+v", o)
		}
		if o := resume(t, []tool.PythonToolCall{{Call: "0123456789abcdef01234567"}}, "x", ""); !strings.Contains(o.Expired, "no execution") {
			t.Errorf("unknown call: %+v", o)
		}
	})
	t.Run("04 the wait is bounded", func(t *testing.T) {
		o := run(t, tool.PythonCall{Code: "await get_weather(city='Paris')", ToolWait: time.Millisecond})
		if len(o.ToolCalls) != 1 {
			t.Fatalf("no pause: %+v", o)
		}
		// The resume comes later than the bound: the client's start alone
		// takes longer.
		o = resume(t, o.ToolCalls, "sunny", "")
		if !strings.Contains(o.Expired, "waited more than 0 s for the result of get_weather") || !o.ExpiredWaiting {
			t.Errorf("late resume: %+v", o)
		}
		if o := code(t, "print(x)"); o.Stdout != "41\n" {
			t.Errorf("after the bound: %+v", o)
		}
	})
	t.Run("05 a resumed execution is timed and interrupted as any call, the kernel kept", func(t *testing.T) {
		// Code that awaits runs as an asynchronous cell: the interrupt
		// cancels it at an await, or raises Interrupted in its own code.
		for _, tail := range []string{"while True: pass", "import time\ntime.sleep(100)", "import asyncio\nawait asyncio.sleep(100)"} {
			o := code(t, "r = await get_weather(city='Paris')\nprint(r, flush=True)\n"+tail)
			o = run(t, tool.PythonCall{Resume: &tool.PythonResume{Answers: []tool.PythonAnswer{{Call: o.ToolCalls[0].Call, Result: "sunny"}}}, TimeoutMs: 1500, MaxOutputLength: 1000})
			if o.Outcome.Type != "timeout" || o.Stdout != "sunny\n" || o.Error == nil {
				t.Errorf("%s: %+v", tail, o)
			}
			if o := code(t, "print(r, x)"); o.Stdout != "sunny 41\n" || o.Restarted != "" {
				t.Errorf("%s: after the timeout: %+v", tail, o)
			}
		}
	})
	t.Run("05b calls made together pause together and are answered together", func(t *testing.T) {
		o := code(t, "import asyncio\nrs = await asyncio.gather(get_weather('Paris'), get_weather('Oslo'), get_weather('Nowhere'), return_exceptions=True)\nprint(rs)")
		if len(o.ToolCalls) != 3 || string(o.ToolCalls[2].Input) != `{"city":"Nowhere"}` {
			t.Fatalf("calls: %+v", o)
		}
		var answers []tool.PythonAnswer
		for i, r := range []string{"sunny", "rainy", ""} {
			answers = append(answers, tool.PythonAnswer{Call: o.ToolCalls[i].Call, Result: r})
		}
		answers[2].Error = "no such city"
		if o := run(t, tool.PythonCall{Resume: &tool.PythonResume{Answers: answers[:2]}}); !strings.Contains(o.Expired, "must come together (3 calls, 2 results)") {
			t.Errorf("a partial resume: %+v", o)
		}
		o = run(t, tool.PythonCall{Resume: &tool.PythonResume{Answers: answers}})
		if want := "['sunny', 'rainy', ToolError('no such city')]\n"; o.Stdout != want || o.ToolCalls != nil {
			t.Errorf("stdout %q, want %q: %+v", o.Stdout, want, o)
		}
	})
	t.Run("06 a sandbox that sleeps keeps the waiting execution where it checkpoints, else ends it", func(t *testing.T) {
		o := code(t, "await get_weather(city='Paris')")
		if len(o.ToolCalls) != 1 {
			t.Fatalf("no pause: %+v", o)
		}
		if err := m.Sleep(ctx, box); err != nil {
			t.Fatal(err)
		}
		o = resume(t, o.ToolCalls, "sunny", "")
		if rt == "runsc" {
			if o.Expired != "" || len(o.Displays) != 1 || o.Displays[0].Text != "'sunny'" {
				t.Errorf("after sleep and restore: %+v", o)
			}
			return
		}
		if !strings.Contains(o.Expired, "container slept") {
			t.Errorf("after sleep: %+v", o)
		}
	})
}
