package server

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/guard"
)

// TestConsoleAssets checks what the server sends for the web console: each
// embedded file with its content type and the security headers (a CSP
// that allows only this origin's script and style and enforces Trusted
// Types), the redirect from /console, a 404 for anything else, and that
// the pages take no key while the API they call still does. The browser
// test of the pages themselves is test/e2e's TestConsole.
func TestConsoleAssets(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := noRedirect.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	checkHeaders := func(path string, resp *http.Response) {
		t.Helper()
		csp := resp.Header.Get("Content-Security-Policy")
		directives := map[string]string{}
		for _, d := range strings.Split(csp, ";") {
			name, val, _ := strings.Cut(strings.TrimSpace(d), " ")
			directives[name] = val
		}
		want := map[string]string{
			"default-src": "'none'", "script-src": "'self'", "style-src": "'self'", "connect-src": "'self'",
			"frame-ancestors": "'none'", "base-uri": "'none'", "form-action": "'none'",
			"require-trusted-types-for": "'script'", "trusted-types": "'none'",
		}
		for k, v := range want {
			if directives[k] != v {
				t.Errorf("%s: CSP %s = %q, want %q (CSP %q)", path, k, directives[k], v, csp)
			}
		}
		if strings.Contains(csp, "unsafe-") || strings.Contains(csp, "*") || strings.Contains(csp, "http") {
			t.Errorf("%s: CSP allows more than this origin: %q", path, csp)
		}
		for k, v := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", path, k, got, v)
			}
		}
	}

	for _, c := range []struct{ path, ctype, contains string }{
		{"/console/", "text/html; charset=utf-8", `<script src="/console/console.js" defer></script>`},
		{"/console/index.html", "text/html; charset=utf-8", "<title>Shellgate console</title>"},
		{"/console/console.js", "text/javascript; charset=utf-8", "'use strict'"},
		{"/console/console.css", "text/css; charset=utf-8", "font-variant-numeric"},
		{"/console/meta.json", "application/json", `"techniques"`},
		{"/console/favicon.svg", "image/svg+xml", "<svg"},
	} {
		resp, body := get(c.path)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != c.ctype || !strings.Contains(body, c.contains) {
			t.Errorf("GET %s: %d %q, body has %q: %v", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.contains, strings.Contains(body, c.contains))
		}
		checkHeaders(c.path, resp)
	}

	// The page loads nothing from elsewhere and has no inline script or
	// style the CSP would have to allow.
	_, page := get("/console/")
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(m[1], "/console/") && !strings.HasPrefix(m[1], "#/") {
			t.Errorf("index.html refers to %q", m[1])
		}
	}
	if regexp.MustCompile(`<script>|<style|style="|\son[a-z]+=`).MatchString(page) {
		t.Errorf("index.html has inline script or style")
	}
	// The script never parses data as HTML.
	_, js := get("/console/console.js")
	if m := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function`).FindString(js); m != "" {
		t.Errorf("console.js uses %s", m)
	}

	// meta.json is the detector's own list.
	_, mj := get("/console/meta.json")
	var meta struct {
		Techniques []string `json:"techniques"`
		Actions    []string `json:"actions"`
		Detector   string   `json:"detector"`
	}
	if err := json.Unmarshal([]byte(mj), &meta); err != nil || !slices.Equal(meta.Techniques, guard.Techniques()) ||
		len(meta.Actions) != 3 || meta.Detector != guard.Version {
		t.Errorf("meta.json %s: %v", mj, err)
	}

	resp, _ := get("/console")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/console/" {
		t.Errorf("GET /console: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	checkHeaders("/console", resp)
	for _, p := range []string{"/console/nope.js", "/console/console", "/console/../server.go", "/console/a/console.js", "/console/%2e%2e/console.go"} {
		resp, body := get(p)
		// 404, or the mux's redirect to the cleaned path, which is
		// outside /console.
		if resp.StatusCode != http.StatusNotFound && !strings.HasPrefix(resp.Header.Get("Location"), "/server.go") {
			t.Errorf("GET %s: %d %q", p, resp.StatusCode, body)
		}
		if resp.StatusCode == http.StatusNotFound {
			checkHeaders(p, resp)
		}
		if strings.Contains(body, "package server") {
			t.Errorf("GET %s served Go source", p)
		}
	}
	if st, _ := e.doH("POST", "/console/", nil, nil); st != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/: %d", st)
	}

	// The pages hold no data: what they show comes from the API, which
	// still wants the key.
	if st, _ := e.doH("GET", "/api/v1/containers", nil, nil); st != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/containers without a key: %d", st)
	}
	if st, _ := e.do("GET", "/api/v1/containers", "sk-sg-wrong", nil); st != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/containers with a wrong key: %d", st)
	}
	if st, _ := e.do("GET", "/api/v1/containers", e.newKey("acme", "prod"), nil); st != http.StatusOK {
		t.Errorf("GET /api/v1/containers with a key: %d", st)
	}
}

// BenchmarkConsoleAsset is one GET of the console's script over loopback
// HTTP from the server (its mux, log line, metrics and security headers)
// and, interleaved, from Go's own http.FileServerFS over the same embedded
// files (what serving the files without Shellgate would take). It reports
// both medians and the ratio.
func BenchmarkConsoleAsset(b *testing.B) {
	e := newEnv(b, "crun", "busybox")
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		b.Fatal(err)
	}
	plain := httptest.NewServer(http.FileServerFS(sub))
	b.Cleanup(plain.Close)
	get := func(url string) {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d", url, resp.StatusCode)
		}
	}
	var ours, std []time.Duration
	for b.Loop() {
		t0 := time.Now()
		get(e.url + "/console/console.js")
		t1 := time.Now()
		get(plain.URL + "/console.js")
		ours, std = append(ours, t1.Sub(t0)), append(std, time.Since(t1))
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Microsecond)
	}
	mo, ms := median(ours), median(std)
	b.ReportMetric(mo, "console-us")
	b.ReportMetric(ms, "fileserver-us")
	b.ReportMetric(mo/ms, "ratio")
}
