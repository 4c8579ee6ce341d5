package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/testenv"
)

// These tests run the real Run on a loopback listener and talk to it like
// a client does, over raw connections where a client misbehaves. Only the
// stream test needs a sandbox; the others serve routes that use none, over
// noSandboxes.

// noSandboxes is a backend for routes that never reach a sandbox
// (/healthz, /metrics, workspace files): any other call panics.
type noSandboxes struct{ sandbox.Backend }

func (noSandboxes) Runtime() string                       { return "none" }
func (noSandboxes) Defaults() sandbox.Settings            { return sandbox.Settings{} }
func (noSandboxes) SetSettings(sandbox.SettingsFunc)      {}
func (noSandboxes) List() ([]sandbox.Info, error)         { return nil, nil }
func (noSandboxes) Close(context.Context) error           { return nil }
func (noSandboxes) Status(string) (sandbox.Status, error) { return "", sandbox.ErrNotFound }
func (noSandboxes) Sleep(context.Context, string) error   { return nil }
func (noSandboxes) Destroy(context.Context, string) error { return nil }
func (noSandboxes) Create(context.Context, string) error  { return errors.New("no sandboxes here") }

// runServer serves e with Run on a loopback port until the test ends,
// and fails the test if Run does.
func runServer(t *testing.T, e *env) string {
	t.Helper()
	stop, done := serveRun(t, e, 5*time.Second)
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return strings.TrimPrefix(e.url, "http://")
}

// serveRun starts e's Run on a loopback port (e.url) with grace; stop
// cancels Run's context and done delivers what Run returned. When the test
// ends, Run is stopped and waited for.
func serveRun(t *testing.T, e *env, grace time.Duration) (stop context.CancelFunc, done <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.url = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		result <- e.srv.Run(ctx, ln, grace)
		close(ended)
	}()
	t.Cleanup(func() {
		cancel()
		<-ended
	})
	return cancel, result
}

// connLimitsServer is a server without sandboxes whose connections are
// bounded by lim.
func connLimitsServer(t *testing.T, lim ConnLimits) (*env, string) {
	e := newServerOn(t, noSandboxes{}, t.TempDir(), func(c *Config) { c.Conns = lim })
	return e, runServer(t, e)
}

// rawConn is a client connection that sends what the test writes.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialFrom(t *testing.T, src, addr string) *rawConn {
	t.Helper()
	d := net.Dialer{}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// get sends GET path on c and reads the answer (the deadline only keeps
// a broken server from hanging the test).
func (c *rawConn) get(path string) (*http.Response, error) {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: shellgate\r\n\r\n", path); err != nil {
		return nil, err
	}
	return c.response()
}

func (c *rawConn) response() (*http.Response, error) {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, err
}

// closedByServer waits for the server to close c: true on EOF (or a
// reset), false if c is still open after the test's patience.
func (c *rawConn) closedByServer() bool {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := c.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// metric reads one series of the server's /metrics.
func metric(t *testing.T, client *http.Client, url, name string) float64 {
	t.Helper()
	resp, err := client.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// TestConnsLockoutServer is the server of TestIdleConnsDoNotLockOut, run
// in a process of its own with 200 open files (ulimit -n 200).
func TestConnsLockoutServer(t *testing.T) {
	if os.Getenv("SHELLGATE_CONNS_HELPER") == "" {
		t.Skip("the server of TestIdleConnsDoNotLockOut, run by it")
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 200, Max: 200}); err != nil {
		t.Fatal(err)
	}
	_, addr := connLimitsServer(t, ConnLimits{})
	fmt.Printf("ADDR %s\n", addr)
	io.Copy(io.Discard, os.Stdin) // until the test ends
}

// The reproduction of issue 29's item 2: under `ulimit -n 200` a client
// without a key opens 1000 connections to /healthz and keeps them idle;
// the server stays open to the next request. Before the connection caps,
// it stopped accepting after ~190 (accept4: too many open files).
func TestIdleConnsDoNotLockOut(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestConnsLockoutServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SHELLGATE_CONNS_HELPER=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("server process: %v\n%s", err, stderr.String())
		}
	})
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		t.Fatalf("server process: %q %v\n%s", line, err, stderr.String())
	}
	go io.Copy(io.Discard, out)

	const hoard = 1000
	answered := 0
	for range hoard {
		c := dialFrom(t, "", addr)
		resp, err := c.get("/healthz")
		if err != nil || resp.StatusCode != http.StatusOK {
			break
		}
		answered++
	}
	if answered < hoard {
		t.Errorf("the server answered %d of %d connections, then locked out", answered, hoard)
	}
	// The timeout only keeps a locked-out server from hanging the test.
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("a new client after %d idle connections: %v", answered, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a new client: %d", resp.StatusCode)
	}
	held := metric(t, client, "http://"+addr, "shellgate_http_connections")
	evicted := metric(t, client, "http://"+addr, "shellgate_http_connections_evicted_total")
	t.Logf("%d connections answered; the server holds %v, evicted %v", answered, held, evicted)
	// Half the open files, at most half of them from one address.
	if held > 100 || evicted < hoard-100 {
		t.Fatalf("the server holds %v connections and evicted %v", held, evicted)
	}
}

func TestIdleConnTimeout(t *testing.T) {
	_, addr := connLimitsServer(t, ConnLimits{IdleTimeout: 200 * time.Millisecond})
	c := dialFrom(t, "", addr)
	if resp, err := c.get("/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatal(resp, err)
	}
	if !c.closedByServer() {
		t.Fatal("an idle keep-alive connection is still open")
	}
}

func TestMaxHeaderBytes(t *testing.T) {
	e, _ := connLimitsServer(t, ConnLimits{})
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for _, c := range []struct {
		name   string
		header int
		want   int
	}{
		{"01 headers under the cap", 48 << 10, http.StatusOK},
		// http.Server allows 4 KiB over MaxHeaderBytes.
		{"02 headers over the cap", DefaultMaxHeaderBytes + 8<<10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.url+"/healthz", nil)
			req.Header.Set("X-Padding", strings.Repeat("a", c.header))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("%d-byte header: %d, want %d", c.header, resp.StatusCode, c.want)
			}
		})
	}
}

// TestBodyStall: an upload that stops sending is cut and its connection
// freed; one that sends slowly but steadily — for several stall timeouts
// in all — is stored whole.
func TestBodyStall(t *testing.T) {
	const stall = time.Second
	e, addr := connLimitsServer(t, ConnLimits{StallTimeout: stall})

	t.Run("01 a stalled upload is answered 408 and its connection closed", func(t *testing.T) {
		c := dialFrom(t, "", addr)
		var part bytes.Buffer
		mw := multipart.NewWriter(&part)
		fw, _ := mw.CreateFormFile("file", "stalled.bin")
		fw.Write(bytes.Repeat([]byte("x"), 1<<10))
		fmt.Fprintf(c, "POST /api/v1/files HTTP/1.1\r\nHost: shellgate\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
			e.keyA, mw.FormDataContentType(), 1<<20)
		c.Write(part.Bytes()) // and then nothing
		resp, err := c.response()
		if err != nil {
			t.Fatalf("no answer to a stalled upload: %v", err)
		}
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("stalled upload: %d", resp.StatusCode)
		}
		if !c.closedByServer() {
			t.Fatal("the stalled upload's connection is still open")
		}
		if !testenv.Eventually(10*time.Second, func() bool { return e.srv.conns.open() == 0 }) {
			t.Fatalf("the server still holds %d connections", e.srv.conns.open())
		}
	})

	t.Run("02 a slow but steady upload is stored", func(t *testing.T) {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		const chunks, chunk = 40, 4 << 10
		go func() {
			fw, _ := mw.CreateFormFile("file", "steady.bin")
			for range chunks {
				// The pace is the test's input: a chunk every tenth of
				// the stall timeout, four stall timeouts in all.
				time.Sleep(stall / 10)
				if _, err := fw.Write(bytes.Repeat([]byte("y"), chunk)); err != nil {
					pw.CloseWithError(err)
					return
				}
			}
			pw.CloseWithError(mw.Close())
		}()
		req, _ := http.NewRequest("POST", e.url+"/api/v1/files", pr)
		req.Header.Set("Authorization", "Bearer "+e.keyA)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		client := &http.Client{Transport: &http.Transport{}}
		defer client.CloseIdleConnections()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var f struct {
			Bytes int64 `json:"size_bytes"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&f); err != nil || resp.StatusCode != http.StatusOK || f.Bytes != chunks*chunk {
			t.Fatalf("steady upload: %d %+v %v", resp.StatusCode, f, err)
		}
	})
}

// TestMaxConnsPerIP: one address's busy connections (each still sending
// its headers) fill its cap; its next connection is refused with a 503,
// and another address is served.
func TestMaxConnsPerIP(t *testing.T) {
	const perIP = 4
	e, addr := connLimitsServer(t, ConnLimits{MaxConnsPerIP: perIP, MaxConns: 64, HeaderTimeout: time.Minute})
	for range perIP {
		c := dialFrom(t, "127.0.0.2", addr)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: shellgate\r\n") // never ends its headers
	}
	if !testenv.Eventually(10*time.Second, func() bool { return e.srv.conns.open() == perIP }) {
		t.Fatalf("the server holds %d connections, want %d", e.srv.conns.open(), perIP)
	}
	over := dialFrom(t, "127.0.0.2", addr)
	resp, err := over.response()
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a connection over the per-address cap: %v %v", resp, err)
	}
	other := dialFrom(t, "127.0.0.3", addr)
	if resp, err := other.get("/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("another address: %v %v", resp, err)
	}
	if n := e.srv.conns.refused.Load(); n != 1 {
		t.Fatalf("%d connections refused, want 1", n)
	}
}

// TestStreamOutlivesConnTimeouts: an SSE exec stream silent for many
// times the idle and stall timeouts runs to its end.
func TestStreamOutlivesConnTimeouts(t *testing.T) {
	const short = 100 * time.Millisecond
	e := newServer(t, "crun", "busybox", func(c *Config) {
		c.Conns = ConnLimits{IdleTimeout: short, StallTimeout: short, HeaderTimeout: short}
	})
	runServer(t, e)
	e.create(e.keyA, "long")
	ch, _ := e.streamExec(e.keyA, "long", map[string]any{"commands": []string{"sleep 2; echo done"}})
	ev := waitEvent(t, ch, "result")
	var r execResponse
	if err := json.Unmarshal(ev.data, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Output) != 1 || r.Output[0].Stdout != "done\n" {
		t.Fatalf("stream: %s", ev.data)
	}
}
