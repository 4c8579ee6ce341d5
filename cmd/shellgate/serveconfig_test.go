package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/upstream"
)

// TestParseServeConfig: 1. a runtime-only file selects Kubernetes and has
// no provider part; 2. providers, aliases, broadcast and runtime together split,
// the provider part parsing as before; 3. no runtime: sandboxes here;
// 4. bad files are errors naming the field; 5. database and storage.
func TestParseServeConfig(t *testing.T) {
	sc, err := parseServeConfig([]byte("runtime:\n  backend: kubernetes\n  namespace: sg\n  image: sbx:1\n  egress_proxy: {service: egress, port: 3129}\n"))
	if err != nil || sc.kube == nil || sc.kube.Namespace != "sg" || sc.kube.EgressProxy.Port != 3129 || sc.rest != nil {
		t.Fatalf("1: %+v %v", sc, err)
	}
	sc, err = parseServeConfig([]byte(`providers:
  local: {api: chat_completions, base_url: "http://127.0.0.1:1/v1", models: [m1]}
aliases: {fast: local/m1}
broadcast:
  - {type: otlp_http, endpoint: "http://127.0.0.1:2/v1/traces"}
runtime: {backend: kube, namespace: sg, image: sbx:1}
`))
	if err != nil || sc.kube == nil || sc.kube.Image != "sbx:1" {
		t.Fatalf("2: %+v %v", sc, err)
	}
	ps, err := upstream.ParseConfig(sc.rest, func(string) string { return "" })
	if err != nil || !strings.Contains(fmt.Sprint(ps.Names()), "local") {
		t.Fatalf("2: providers of %q: %v %v", sc.rest, ps, err)
	}
	if m, err := ps.Resolve("fast"); err != nil || m.Provider != "local" || m.Name != "m1" {
		t.Fatalf("2: the alias of %q: %+v %v", sc.rest, m, err)
	}
	sc, err = parseServeConfig([]byte("providers:\n  local: {api: chat_completions, base_url: \"http://127.0.0.1:1/v1\", models: [m1]}\n"))
	if err != nil || sc.kube != nil || sc.rest == nil {
		t.Fatalf("3: %+v %v", sc, err)
	}
	sc, err = parseServeConfig([]byte("database: postgres://u@127.0.0.1:5432/sg\nstorage: s3://bucket/p?endpoint=http://127.0.0.1:9000\n"))
	if err != nil || sc.database != "postgres://u@127.0.0.1:5432/sg" || sc.storage != "s3://bucket/p?endpoint=http://127.0.0.1:9000" || sc.kube != nil || sc.rest != nil {
		t.Fatalf("5: database and storage: %+v %v", sc, err)
	}
	for in, want := range map[string]string{
		"database: {url: x}\n":                                                          "top-level keys: providers, aliases, broadcast, runtime, database, storage",
		"runtimes: {backend: kube}\n":                                                   "runtimes",
		"runtime: kubernetes\n":                                                         "runtime: want a mapping",
		"runtime: {backend: crun, namespace: a, image: b}\n":                            "runtime.backend",
		"runtime: {backend: kube, image: b}\n":                                          "runtime.namespace",
		"runtime: {backend: kube, namespace: a}\n":                                      "runtime.image",
		"runtime: {backend: kube, namespace: Bad_NS, image: b}\n":                       "runtime.namespace",
		"runtime: {backend: kube, namespace: a, image: b, imagee: c}\n":                 "imagee",
		"runtime: {backend: kube, namespace: a, image: b, runtime_class: A/B}":          "runtime.runtime_class",
		"runtime: {backend: kube, namespace: a, image: b, egress_proxy: {port: 70000}}": "runtime.egress_proxy.port",
		"runtime: {backend: kube, namespace: a, image: b, shell: ['']}":                 "runtime.shell[0]",
	} {
		if _, err := parseServeConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("4: %q: got %v, want an error naming %s", in, err, want)
		}
	}
}

// apiServer answers the SelfSubjectAccessReviews serve asks at startup,
// allowing everything or nothing, and counts them.
func apiServer(t *testing.T, allowed bool) (kubeconfig string, reviews *atomic.Int32) {
	reviews = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		// The request body may be protobuf: only the answer matters here.
		reviews.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
			"status": map[string]any{"allowed": allowed}})
	}))
	t.Cleanup(srv.Close)
	kubeconfig = writeKubeconfig(t, srv.URL)
	return kubeconfig, reviews
}

// TestServeKubernetesConfig runs `serve --config` with a runtime section:
// 1. an identity without the RBAC fails at startup naming what is missing;
// 2. flags for this machine's sandboxes are refused with it; 3. with the
// RBAC the server serves on the Kubernetes backend (/healthz names it).
func TestServeKubernetesConfig(t *testing.T) {
	write := func(kc string) string {
		p := filepath.Join(t.TempDir(), "shellgate.yaml")
		os.WriteFile(p, []byte("runtime:\n  backend: kubernetes\n  namespace: sg\n  image: sbx:1\n  kubeconfig: "+kc+"\n"), 0o600)
		return p
	}
	kc, reviews := apiServer(t, false)
	err := runServe(t.Context(), []string{"--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--config", write(kc)})
	if err == nil || !strings.Contains(err.Error(), "not allowed in namespace sg") || !strings.Contains(err.Error(), "02-rbac.yaml") || reviews.Load() == 0 {
		t.Fatalf("1: %v (%d reviews)", err, reviews.Load())
	}

	err = runServe(t.Context(), []string{"--data-dir", t.TempDir(), "--pool", "2", "--runtime", "crun", "--config", write(kc)})
	if err == nil || !strings.Contains(err.Error(), "--pool applies to sandboxes on this machine") || !strings.Contains(err.Error(), "--runtime") {
		t.Fatalf("2: %v", err)
	}

	kc, _ = apiServer(t, true)
	cfgFile := write(kc)
	var body string
	var cancel context.CancelFunc
	var done chan error
	// The port is chosen by binding :0 and closing it: until serve binds
	// it, another process may take it, and then another one is tried.
	for attempt := 1; body == ""; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		var ctx context.Context
		ctx, cancel = context.WithCancel(t.Context())
		done = make(chan error, 1)
		go func() {
			done <- runServe(ctx, []string{"--data-dir", t.TempDir(), "--addr", addr, "--log-format", "text", "--config", cfgFile})
		}()
		client := &http.Client{Timeout: 2 * time.Second}
		retry := false
	poll:
		for i := 0; i < 200; i++ {
			resp, err := client.Get("http://" + addr + "/healthz")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
				break
			}
			select {
			case err := <-done:
				cancel()
				if err != nil && strings.Contains(err.Error(), "address already in use") && attempt < 5 {
					retry = true
					break poll
				}
				t.Fatalf("3: serve ended: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		if body == "" && !retry {
			cancel()
			t.Fatalf("3: serve did not answer /healthz within 10s: %v", <-done)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("3: serve: %v", err)
	}
	if !strings.Contains(body, `"runtime":"kubernetes/gvisor"`) {
		t.Fatalf("3: /healthz %q", body)
	}
}

// A flag wins over its environment variable, which wins over the file.
func TestOrConfig(t *testing.T) {
	t.Setenv("SHELLGATE_TEST_OR_CONFIG", "")
	if got := orConfig("", "SHELLGATE_TEST_OR_CONFIG", "file"); got != "file" {
		t.Errorf("nothing but the file: %q", got)
	}
	if got := orConfig("flag", "SHELLGATE_TEST_OR_CONFIG", "file"); got != "flag" {
		t.Errorf("flag and file: %q", got)
	}
	t.Setenv("SHELLGATE_TEST_OR_CONFIG", "env")
	if got := orConfig("", "SHELLGATE_TEST_OR_CONFIG", "file"); got != "" {
		t.Errorf("env and file: %q, want \"\" (the opener reads the env)", got)
	}
}

// writeKubeconfig writes a kubeconfig for the API server at url (a token
// user, one context) and returns its path.
func writeKubeconfig(t *testing.T, url string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+url+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
