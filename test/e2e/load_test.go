package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/testenv"
)

// TestServeUnderAbuse is the load test of the server's edge (docs/limits.md):
// while one source holds 1,000 idle connections and its workspace sends
// oversized bodies and hammers creates, ten other workspaces each run 20
// execs at once. Every well-behaved request must succeed with its own
// output, a new client must still be served, and the server's RSS must
// come back to within 20% of where it started. It counts; it never times.
//
// The abuser connects from 127.0.0.2 and everyone else from 127.0.0.1:
// loopback is a /8, so these are two sources as far as the server can tell.
func TestServeUnderAbuse(t *testing.T) {
	bin, data, env := serveBinary(t)
	const sweep = 2 * time.Second
	base, srv, _, logs := startServe(t, bin, data, env, "--sweep-every", sweep.String())
	addr := strings.TrimPrefix(base, "http://")
	key := func(account, workspace string) string {
		t.Helper()
		out, err := exec.Command(bin, "keys", "create", "--account", account, "--workspace", workspace, "--data-dir", data).Output()
		if err != nil {
			t.Fatal(err)
		}
		return lastLine(string(out))
	}
	const workspaces, execs = 10, 20
	good := make([]string, workspaces)
	for i := range good {
		good[i] = key("acme", fmt.Sprintf("w%d", i))
	}
	evil := key("evil", "x")

	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64}}
	}
	goodClient, evilClient := from("127.0.0.1"), from("127.0.0.2")
	t.Cleanup(goodClient.CloseIdleConnections)
	t.Cleanup(evilClient.CloseIdleConnections)
	call := func(c *http.Client, method, path, key string, body io.Reader, n int64) (int, []byte, error) {
		req, err := http.NewRequest(method, base+path, body)
		if err != nil {
			return 0, nil, err
		}
		if n >= 0 {
			req.ContentLength = n
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	jsonBody := func(s string) (io.Reader, int64) { return strings.NewReader(s), int64(len(s)) }

	// The steady state the RSS is measured against: every workspace has
	// its container awake and has run a command.
	for i, k := range good {
		b, n := jsonBody(fmt.Sprintf(`{"name":"load%d"}`, i))
		if st, out, err := call(goodClient, "POST", "/api/v1/containers", k, b, n); err != nil || st != 200 {
			t.Fatalf("create in w%d: %d %s %v", i, st, out, err)
		}
		b, n = jsonBody(`{"commands":["true"]}`)
		if st, out, err := call(goodClient, "POST", fmt.Sprintf("/api/v1/containers/load%d/exec", i), k, b, n); err != nil || st != 200 {
			t.Fatalf("first exec in w%d: %d %s %v", i, st, out, err)
		}
	}
	// RSS here is the server's anonymous memory (RssAnon): what the load
	// could leave held. The file-backed rest is the executable's pages,
	// which grow as code runs for the first time and the kernel can drop.
	rss := func() int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", srv.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "RssAnon:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
		t.Fatal("no RssAnon")
		return 0
	}
	// The load runs twice: the first round brings the server to its
	// steady state (caches, pools, code run once), the second must give
	// back what it took.
	round := func(r int) {
		// 1,000 idle keep-alive connections from the abuser's address, each
		// having made one request, held open.
		var idle []net.Conn
		t.Cleanup(func() {
			for _, c := range idle {
				c.Close()
			}
		})
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
		held := 0
		for range 1000 {
			c, err := d.Dial("tcp", addr)
			if err != nil {
				continue // refused at the door: that is the server defending itself
			}
			idle = append(idle, c)
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				continue
			}
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				held++
			}
			c.SetDeadline(time.Time{})
		}
		t.Logf("round %d: the abuser's idle connections that were served once: %d of 1000", r, held)

		// A new client is still served.
		if st, out, err := call(from("127.0.0.1"), "GET", "/healthz", "", nil, 0); err != nil || st != 200 {
			t.Fatalf("a new client behind 1,000 idle connections: %d %s %v", st, out, err)
		}

		ctx, stopAbuse := context.WithCancel(t.Context())
		var abuse sync.WaitGroup
		var abuserAnswers sync.Map // status -> count
		count := func(st int) {
			v, _ := abuserAnswers.LoadOrStore(st, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}
		// Oversized bodies: 64 MiB of eval source announced, and streamed with
		// no length at all.
		for i := range 4 {
			abuse.Add(1)
			go func() {
				defer abuse.Done()
				for j := 0; ctx.Err() == nil && j < 25; j++ {
					big := io.MultiReader(strings.NewReader(`{"source":"`), io.LimitReader(zeros{}, 64<<20), strings.NewReader(`"}`))
					n := int64(64<<20 + 13)
					if i%2 == 1 {
						n = -1 // chunked
					}
					st, _, err := call(evilClient, "POST", "/api/v1/eval", evil, big, n)
					if err == nil {
						count(st)
					}
				}
			}()
		}
		// Hammered creates.
		for range 4 {
			abuse.Add(1)
			go func() {
				defer abuse.Done()
				for j := 0; ctx.Err() == nil && j < 50; j++ {
					b, n := jsonBody(fmt.Sprintf(`{"name":"spam-%s"}`, rand.Text()[:12]))
					st, _, err := call(evilClient, "POST", "/api/v1/containers", evil, b, n)
					if err == nil {
						count(st)
					}
				}
			}()
		}

		// Ten workspaces, 20 execs each at once: every one succeeds with its
		// own output.
		var wg sync.WaitGroup
		var failed atomic.Int64
		for w := range workspaces {
			for x := range execs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					want := fmt.Sprintf("w%d-%d", w, x)
					b, n := jsonBody(fmt.Sprintf(`{"commands":["echo %s"]}`, want))
					st, out, err := call(goodClient, "POST", fmt.Sprintf("/api/v1/containers/load%d/exec", w), good[w], b, n)
					var r struct {
						Output []struct {
							Stdout string `json:"stdout"`
						} `json:"output"`
					}
					if err != nil || st != 200 || json.Unmarshal(out, &r) != nil || len(r.Output) != 1 || r.Output[0].Stdout != want+"\n" {
						failed.Add(1)
						t.Errorf("exec %s: %d %s %v", want, st, out, err)
					}
				}()
			}
		}
		wg.Wait()
		stopAbuse()
		abuse.Wait()
		answers := map[int]int64{}
		abuserAnswers.Range(func(k, v any) bool { answers[k.(int)] = v.(*atomic.Int64).Load(); return true })
		t.Logf("round %d: the abuser's answers by status: %v", r, answers)
		if failed.Load() > 0 {
			t.Fatalf("%d of %d well-behaved execs failed; server log:\n%s", failed.Load(), workspaces*execs, tail(logs.String(), 40))
		}
		if answers[200] > 100 {
			t.Errorf("the abuser made %d containers, over the default quota", answers[200])
		}

		// Everything of the abuser's is let go: its connections close, and the
		// server's memory comes back.
		for _, c := range idle {
			c.Close()
		}
		idle = nil
		// The abuser's containers are deleted: awake ones hold memory of
		// their own (the agent's connection), which is not the load's.
		st, out, err := call(goodClient, "GET", "/api/v1/containers?limit=100", evil, nil, 0)
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err != nil || st != 200 || json.Unmarshal(out, &list) != nil {
			t.Fatalf("the abuser's containers: %d %s %v", st, out, err)
		}
		for _, c := range list.Data {
			if st, out, err := call(goodClient, "DELETE", "/api/v1/containers/"+c.ID, evil, nil, 0); err != nil || st != 200 {
				t.Fatalf("delete %s: %d %s %v", c.ID, st, out, err)
			}
		}
	}
	sample := func() int64 {
		// The least over three sweeps (each gives memory back).
		low := rss()
		for range 3 {
			time.Sleep(sweep)
			low = min(low, rss())
		}
		return low
	}
	round(1)
	start := sample()
	round(2)
	if !testenv.Eventually(30*time.Second, func() bool { return rss() <= start+start/5 }) {
		t.Errorf("RSS %d MiB after the second round, %d MiB after the first: not back within 20%%", rss()>>20, start>>20)
	}
	t.Logf("RSS: %d MiB after the first round, %d MiB after the second", start>>20, rss()>>20)
}

// zeros reads as an endless run of '0'.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
