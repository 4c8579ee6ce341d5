package main

import (
	"bufio"
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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/testenv"
)

// podsAPIServer serves one namespace's pod list (and a watch that never
// sends anything) as an API server would; the streaming list clients try
// first is refused, as by an API server without it.
func podsAPIServer(t *testing.T, pods ...corev1.Pod) (kubeconfig string, selectors chan string) {
	selectors = make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || r.URL.Path != "/api/v1/namespaces/sg/pods" {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		q := r.URL.Query()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonBadRequest, Code: 400, Message: "no streaming lists here"})
		case q.Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			select {
			case selectors <- q.Get("labelSelector") + " " + q.Get("fieldSelector"):
			default:
			}
			json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
				ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: pods})
		}
	}))
	t.Cleanup(srv.Close)
	kubeconfig = writeKubeconfig(t, srv.URL)
	return kubeconfig, selectors
}

// TestEgressProxyCommand runs `shellgate egress-proxy` against an API
// server with one sandbox pod: 1. it lists only the sandbox pods of its
// node; 2. the pod's CONNECTs are judged by its annotation, a stranger's
// refused; 3. /metrics counts them; 4. it stops cleanly on its context.
// (Allowed connections are TestExplicitProxy's, in sandbox/egress/kubeproxy:
// this binary resolves names with the host's resolver, which a test must
// not reach.)
func TestEgressProxyCommand(t *testing.T) {
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "shellgate-x", Namespace: "sg", ResourceVersion: "5",
			Labels:      map[string]string{kube.LabelName: kube.SandboxApp, kube.LabelManagedBy: kube.ManagedBy},
			Annotations: map[string]string{kube.AnnotationID: "x", kube.AnnotationAllow: `["allowed.test"]`}},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.41"},
	}
	kc, selectors := podsAPIServer(t, pod)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	mport, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	proxy := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runEgressProxy(ctx, []string{"--kubeconfig", kc, "--namespace", "sg", "--node", "n1", "--listen", proxy,
			"--metrics-listen", fmt.Sprintf("127.0.0.1:%d", mport), "--log-format", "text"})
	}()
	// 1.
	select {
	case sel := <-selectors:
		if want := "app.kubernetes.io/name=shellgate-sandbox,app.kubernetes.io/managed-by=shellgate spec.nodeName=n1"; sel != want {
			t.Errorf("1: listed with %q, want %q", sel, want)
		}
	case err := <-done:
		t.Fatalf("1: egress-proxy ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("1: egress-proxy never listed pods")
	}
	var ok bool
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end) && !ok; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", proxy); err == nil {
			c.Close()
			ok = true
		}
	}
	if !ok {
		t.Fatal("egress-proxy is not listening")
	}
	// 2.
	connect := func(src, target string) (int, string) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp4", proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct{ src, target, want string }{
		{"127.0.0.41", "other.test:443", "other.test is not in this sandbox's network allowlist"},
		{"127.0.0.41", "allowed.test:22", "port 22 is not allowed"},
		{"127.0.0.42", "allowed.test:443", "127.0.0.42 is not a running sandbox pod's address"},
	} {
		if code, body := connect(tc.src, tc.target); code != 403 || !strings.Contains(body, tc.want) {
			t.Errorf("2: CONNECT %s from %s: %d %q, want 403 %q", tc.target, tc.src, code, body, tc.want)
		}
	}
	// 3. A connection is counted once it has ended, just after its client
	// saw the end.
	const want = `shellgate_egress_connections_total{kind="connect",verdict="denied"} 3`
	var b []byte
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", mport))
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), want) {
			break
		}
	}
	if !strings.Contains(string(b), want) {
		t.Errorf("3: /metrics lacks %s:\n%s", want, b)
	}
	// 4.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("4: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("4: egress-proxy did not stop")
	}
}

// TestEgressProxyManifest: the DaemonSet's arguments are flags the command
// takes (it then fails only for want of a cluster).
func TestEgressProxyManifest(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/04-egress-proxy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "args: "); ok {
			if err := json.Unmarshal([]byte(v), &args); err != nil {
				t.Fatalf("args %s: %v", v, err)
			}
		}
	}
	if len(args) < 2 || args[0] != "egress-proxy" {
		t.Fatalf("the DaemonSet runs %q, want egress-proxy", args)
	}
	err = commands[args[0]].run(context.Background(), append(args[1:], "--kubeconfig", filepath.Join(t.TempDir(), "none")))
	if err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("egress-proxy %q: %v, want only the missing kubeconfig", args[1:], err)
	}
}
