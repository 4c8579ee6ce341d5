package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
	"github.com/shellgate/shellgate/testenv"
)

// serveBinary builds shellgate and returns it with a data directory that
// shares the test images, and the environment to run it in.
func serveBinary(t *testing.T) (bin, data string, env []string) {
	t.Helper()
	testenv.NeedRoot(t, "the server runs sandboxes")
	sandboxtest.Skip(t, "crun", "busybox")
	agent, err := agentbin.Build()
	if err != nil {
		t.Fatal(err)
	}
	return sandboxtest.BuildCLI(t), sandboxtest.DataDirWithImages(t), append(os.Environ(), "SHELLGATE_AGENT="+agent)
}

// lastLine is the last line of s (what `keys create` prints last is the key).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// createKey makes a key for acme/prod with `shellgate keys create` in env
// (whose SHELLGATE_DATABASE is where it goes) and returns it.
func createKey(t *testing.T, bin string, env []string) string {
	t.Helper()
	keys := exec.Command(bin, "keys", "create", "--account", "acme", "--workspace", "prod", "--data-dir", t.TempDir())
	keys.Env = env
	out, err := keys.Output()
	if err != nil {
		t.Fatal(err)
	}
	return lastLine(string(out))
}

// startServe starts `shellgate serve` (with extra flags) on a free
// loopback port and waits for /healthz. exited reports the process's end.
func startServe(t *testing.T, bin, data string, env []string, extra ...string) (base string, srv *exec.Cmd, exited chan error, logs *bytes.Buffer) {
	t.Helper()
	return startServeFor(t, bin, data, env, func(string) []string { return extra })
}

// startServeFor is startServe whose extra flags may name its address
// (--advertise-url). A port is chosen by binding :0 and closing it, so
// until serve binds it another process (an outgoing connection of a test
// running beside this one takes its local port from the same range) may
// take it: serve then exits with "address already in use", and a new
// port is tried.
func startServeFor(t *testing.T, bin, data string, env []string, extra func(addr string) []string) (base string, srv *exec.Cmd, exited chan error, logs *bytes.Buffer) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		addr := freeAddr(t)
		base, srv, exited, logs, inUse := tryServe(t, bin, data, env, addr, extra(addr))
		if !inUse {
			return base, srv, exited, logs
		}
		if attempt == 5 {
			t.Fatalf("serve found its port taken five times: %s", logs)
		}
		t.Logf("%s was taken before serve bound it; trying another port", addr)
	}
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// tryServe starts serve on addr and waits for /healthz; inUse reports
// that serve ended because addr was taken.
func tryServe(t *testing.T, bin, data string, env []string, addr string, extra []string) (base string, srv *exec.Cmd, exited chan error, logs *bytes.Buffer, inUse bool) {
	t.Helper()
	srv = exec.Command(bin, append([]string{"serve", "--addr", addr, "--data-dir", data, "--runtime", "crun", "--image", "busybox", "--pool", "0"}, extra...)...)
	srv.Env = env
	logs = &bytes.Buffer{}
	srv.Stderr = logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		// Stop it as an operator would, so its sandboxes sleep and their
		// mounts go; SIGKILL only if that hangs.
		srv.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			exited <- err
		case <-time.After(time.Minute):
			srv.Process.Signal(syscall.SIGKILL)
			t.Errorf("serve did not stop on SIGTERM")
		}
	})
	base = "http://" + addr
	for i := 0; ; i++ {
		select {
		case err := <-exited:
			exited <- err
			// logs is complete: Wait returns after stderr is copied.
			if strings.Contains(logs.String(), "address already in use") {
				return base, srv, exited, logs, true
			}
			t.Fatalf("serve ended before it answered /healthz (%v): %s", err, logs)
		default:
		}
		// Bounded: whatever holds the port before serve does may never answer.
		if resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, srv, exited, logs, false
			}
		}
		if i == 300 {
			t.Fatalf("server did not come up: %s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keyFor makes a key with `shellgate keys create`, which prints it as its
// last line.
func keyFor(t *testing.T, bin, data string) string {
	t.Helper()
	out, err := exec.Command(bin, "keys", "create", "--account", "acme", "--workspace", "prod", "--data-dir", data).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// apiCaller returns a function making one API call with key, as curl
// would, that decodes the JSON answer.
func apiCaller(t *testing.T, base, key string) func(method, path, body string) (int, map[string]any) {
	return func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		st, b := do(t, req)
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, st, b)
		}
		return st, v
	}
}

// createAndRun creates container name through call and runs the command
// line cmd in it.
func createAndRun(t *testing.T, call func(method, path, body string) (int, map[string]any), name, cmd string) {
	t.Helper()
	create, _ := json.Marshal(map[string]string{"name": name})
	if st, c := call("POST", "/api/v1/containers", string(create)); st != 200 {
		t.Fatalf("create: %d %v", st, c)
	}
	run, _ := json.Marshal(map[string][]string{"commands": {cmd}})
	if st, r := call("POST", "/api/v1/containers/"+name+"/exec", string(run)); st != 200 {
		t.Fatalf("exec: %d %v", st, r)
	}
}

// do sends req and returns the status and the body.
func do(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// getBody GETs url with header set to value (a key) and returns the status
// and the body.
func getBody(t *testing.T, url, header, value string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set(header, value)
	return do(t, req)
}

// postFile POSTs a multipart form of one file (field "file", named name)
// and then fields (name, value pairs) to url with header set to value (a
// key), and returns the status and the body.
func postFile(t *testing.T, url, header, value, name string, content []byte, fields ...string) (int, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	w, _ := mw.CreateFormFile("file", name)
	w.Write(content)
	for i := 0; i+1 < len(fields); i += 2 {
		mw.WriteField(fields[i], fields[i+1])
	}
	mw.Close()
	req, _ := http.NewRequest("POST", url, &buf)
	req.Header.Set(header, value)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return do(t, req)
}

// TestServe drives the real binary as the README does: `shellgate serve`
// on a loopback port, `shellgate keys create` for a key, then HTTP calls
// as curl makes them, and SIGTERM with a call in flight.
func TestServe(t *testing.T) {
	bin, data, env := serveBinary(t)
	base, srv, exited, logs := startServe(t, bin, data, env)
	key := keyFor(t, bin, data)

	call := apiCaller(t, base, key)

	st, c := call("POST", "/api/v1/containers", `{"name":"e2e"}`)
	if st != 200 || c["status"] != "running" || !strings.HasPrefix(fmt.Sprint(c["id"]), "cntr_") {
		t.Fatalf("create: %d %v", st, c)
	}
	id := c["id"].(string)
	st, r := call("POST", "/api/v1/containers/e2e/exec", `{"commands":["echo hi > f","cat f"]}`)
	if st != 200 || r["container_id"] != id {
		t.Fatalf("exec: %d %v", st, r)
	}
	if o := r["output"].([]any)[1].(map[string]any); o["stdout"] != "hi\n" {
		t.Fatalf("exec: %v", r)
	}
	st, l := call("GET", "/api/v1/containers", "")
	if st != 200 || len(l["data"].([]any)) != 1 {
		t.Fatalf("list: %d %v", st, l)
	}
	if st, e := call("GET", "/api/v1/containers/e2e", ""); st != 200 || e["status"] != "running" {
		t.Fatalf("get: %d %v", st, e)
	}
	req, _ := http.NewRequest("GET", base+"/api/v1/containers", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("without a key: %v %v", resp, err)
	}

	// Eval through the binary: the built-ins act on the container, the
	// continuation (secret from the data directory, claims in the server's
	// database) resumes once, and the usage route lists both charges.
	evalReq := map[string]any{"source": `await ui.ok(); return (await sandbox.exec('cat f'))[0].stdout`,
		"client_functions": map[string][]string{"ui": {"ok"}}, "sandbox": map[string]any{"container_id": "e2e"}}
	evalBody := func() string { b, _ := json.Marshal(evalReq); return string(b) }
	if st, ev := call("POST", "/api/v1/eval", evalBody()); st != 200 || ev["status"] != "interrupted" {
		t.Fatalf("eval: %d %v", st, ev)
	} else {
		evalReq["continuation"] = ev["continuation"]
		evalReq["resolutions"] = []map[string]any{{"interruption_id": "interrupt-1", "value": true}}
	}
	if st, ev := call("POST", "/api/v1/eval", evalBody()); st != 200 || ev["value"] != "hi\n" {
		t.Fatalf("eval resumed: %d %v", st, ev)
	}
	if st, ev := call("POST", "/api/v1/eval", evalBody()); st != 409 || ev["error"].(map[string]any)["code"] != "RUN_CONTINUATION_USED" {
		t.Fatalf("eval resumed twice: %d %v", st, ev)
	}
	if st, u := call("GET", "/api/v1/usage", ""); st != 200 || u["total"].(map[string]any)["events"] != 2.0 {
		t.Fatalf("usage: %d %v", st, u)
	}

	// SIGTERM with a streamed call in flight: the call finishes, the
	// server exits 0, the container sleeps with its files.
	req, _ = http.NewRequest("POST", base+"/api/v1/containers/e2e/exec", strings.NewReader(`{"commands":["sleep 1; echo late >> f"],"stream":true}`))
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
			if ev == "command.started" {
				srv.Process.Signal(syscall.SIGTERM)
			}
		}
	}
	if len(events) == 0 || events[len(events)-1] != "result" {
		t.Fatalf("events after SIGTERM: %v\n%s", events, logs.String())
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("serve after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("serve did not exit after SIGTERM: %s", logs.String())
	}
	list := exec.Command(bin, "sandbox", "--data-dir", data, "list")
	list.Env = env
	lo, err := list.CombinedOutput()
	if err != nil || !strings.Contains(string(lo), id) || !strings.Contains(string(lo), "sleeping") {
		t.Fatalf("sandbox list after shutdown: %v\n%s", err, lo)
	}
	if strings.Contains(logs.String(), key) {
		t.Fatal("the server logged a key")
	}
}

// TestServeKill9Restart: the server is killed with SIGKILL during a
// command; a new server on the same data directory finds every container
// in a true state (sleeping: nothing runs them any more) with every file,
// its own settings kept, and wakes each for the next call.
func TestServeKill9Restart(t *testing.T) {
	bin, data, env := serveBinary(t)
	base, srv, exited, _ := startServe(t, bin, data, env, "--network-allow", "pypi.org")
	key := keyFor(t, bin, data)
	call := apiCaller(t, base, key)
	createAndRun(t, call, "crash", "echo before > f")
	// A container of OpenAI's shape with settings of its own, awake and
	// idle at the kill; and one deleted before it.
	st, own := call("POST", "/v1/containers", `{"name":"own settings","expires_after":{"anchor":"last_active_at","minutes":120},"limits":{"processes":40},"network_policy":{"type":"allowlist","allowed_domains":["pypi.org"]}}`)
	if st != 200 {
		t.Fatalf("create on /v1: %d %v", st, own)
	}
	ownID := own["id"].(string)
	if st, c := call("POST", "/api/v1/containers", `{"name":"gone"}`); st != 200 {
		t.Fatalf("create: %d %v", st, c)
	}
	if st, c := call("DELETE", "/api/v1/containers/gone", ""); st != 200 {
		t.Fatalf("delete: %d %v", st, c)
	}
	// Files written right before the kill: by a call that has answered,
	// and by the command the kill interrupts.
	if st, r := call("POST", "/api/v1/containers/"+ownID+"/exec", `{"commands":["seq 1 1000 > numbers"]}`); st != 200 {
		t.Fatalf("exec: %d %v", st, r)
	}
	req, _ := http.NewRequest("POST", base+"/api/v1/containers/crash/exec", strings.NewReader(`{"commands":["echo during > g; sleep 60"],"stream":true}`))
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "event: command.started" {
			break
		}
	}
	// Let the command write g before the kill: wait until the file is in
	// the home as the host sees it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command("sh", "-c", "cat "+data+"/run/sandboxes/*/private/home/g 2>/dev/null").Output()
		if string(out) == "during\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never wrote g")
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv.Process.Signal(syscall.SIGKILL)
	err = <-exited
	exited <- err
	resp.Body.Close()

	base2, _, _, _ := startServe(t, bin, data, env, "--network-allow", "pypi.org")
	call = apiCaller(t, base2, key)
	st, l := call("GET", "/api/v1/containers?order=asc", "")
	if st != 200 {
		t.Fatalf("list after restart: %d %v", st, l)
	}
	var names []string
	for _, it := range l["data"].([]any) {
		c := it.(map[string]any)
		names = append(names, c["name"].(string))
		if c["status"] != "sleeping" {
			t.Errorf("%s after kill -9 and restart: %v", c["name"], c)
		}
	}
	if strings.Join(names, ",") != "crash,own settings" {
		t.Fatalf("containers after restart: %v", names)
	}
	st, c := call("GET", "/v1/containers/"+ownID, "")
	if st != 200 || c["expires_after"].(map[string]any)["minutes"] != 120.0 || c["limits"].(map[string]any)["processes"] != 40.0 ||
		fmt.Sprint(c["network_policy"]) != "map[allowed_domains:[pypi.org] type:allowlist]" {
		t.Fatalf("own settings after restart: %d %v", st, c)
	}
	if st, c := call("GET", "/api/v1/containers/gone", ""); st != 404 {
		t.Fatalf("a deleted container after restart: %d %v", st, c)
	}
	st, r := call("POST", "/api/v1/containers/crash/exec", `{"commands":["cat f g"]}`)
	if st != 200 {
		t.Fatalf("exec after restart: %d %v", st, r)
	}
	out := r["output"].([]any)[0].(map[string]any)
	usage := r["usage"].(map[string]any)
	if out["stdout"] != "before\nduring\n" || usage["container_start"] != "woken" {
		t.Fatalf("exec after restart: %v", r)
	}
	st, r = call("POST", "/api/v1/containers/"+ownID+"/exec", `{"commands":["wc -l < numbers","ulimit -u"]}`)
	if st != 200 {
		t.Fatalf("exec after restart: %d %v", st, r)
	}
	outs := r["output"].([]any)
	if outs[0].(map[string]any)["stdout"] != "1000\n" || outs[1].(map[string]any)["stdout"] != "40\n" {
		t.Fatalf("own settings' container after restart: %v", r)
	}
}
