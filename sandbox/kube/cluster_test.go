//go:build kube_e2e

// The same flow as TestSleepWake on a real cluster, for deploy/kind-e2e.sh,
// with the home archived by kubehome in a local directory:
//
//	SHELLGATE_KUBECONFIG=... SHELLGATE_KUBE_IMAGE=shellgate-sandbox:dev go test -tags kube_e2e -run TestCluster ./sandbox/kube/
//
// The test runs outside the cluster, where pod IPs are not routable: it
// reaches each agent through `kubectl port-forward` (the API server's
// tunnel into the pod; the agent still demands its TLS certificate pin and
// token).
package kube_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shellgate/shellgate/sandbox/agent"
	"github.com/shellgate/shellgate/sandbox/homearchive"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/kube/kubehome"
)

func TestCluster(t *testing.T) {
	kc := os.Getenv("SHELLGATE_KUBECONFIG")
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("SHELLGATE_KUBECONFIG=%q: %v", kc, err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dial := func(ctx context.Context, addr string, c agent.Credentials) (*agent.Client, error) {
		ip, port, _ := net.SplitHostPort(addr)
		pods, err := cs.CoreV1().Pods("shellgate").List(ctx, metav1.ListOptions{FieldSelector: "status.podIP=" + ip})
		if err != nil || len(pods.Items) != 1 {
			return nil, fmt.Errorf("pod at %s: %v", ip, err)
		}
		pf := exec.CommandContext(ctx, "kubectl", "--kubeconfig", kc, "-n", "shellgate", "port-forward", "pod/"+pods.Items[0].Name, ":"+port)
		out, _ := pf.StdoutPipe()
		if err := pf.Start(); err != nil {
			return nil, err
		}
		t.Cleanup(func() { pf.Process.Kill(); pf.Wait() })
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			// "Forwarding from 127.0.0.1:41234 -> 7070"
			if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "Forwarding" && strings.HasPrefix(f[2], "127.0.0.1:") {
				return agent.DialTCP(ctx, f[2], c)
			}
		}
		return nil, fmt.Errorf("kubectl port-forward gave no local port")
	}
	homes, err := homearchive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	arch := kubehome.New(homes)
	b, err := kube.New(cs, kube.Config{Namespace: "shellgate", Image: os.Getenv("SHELLGATE_KUBE_IMAGE"), Dial: dial, Archiver: arch})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Wake(ctx, "e2e-1", kube.Options{}); err != nil {
		t.Fatal(err)
	}
	defer b.Destroy(context.Background(), "e2e-1")
	out, err := b.Exec(ctx, "e2e-1", agent.ExecRequest{Shell: []string{"/bin/bash", "-lc"}, Command: "id -u; dmesg | head -1; mkdir -p d && printf kept > d/f && chmod 750 d/f; curl -sS -m 5 https://example.com >/dev/null && echo NET", Dir: kube.HomeDir, TimeoutMs: 30000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out.Stdout)
	if !strings.HasPrefix(s, "1000\n") || !strings.Contains(s, "gVisor") || strings.Contains(s, "NET") {
		t.Fatalf("want uid 1000, gVisor's dmesg, no network; got %q %q", s, out.Stderr)
	}
	if err := b.Sleep(ctx, "e2e-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("shellgate").Get(ctx, kube.ObjectName("e2e-1"), metav1.GetOptions{}); err == nil {
		t.Fatal("pod still there after sleep")
	}
	// Wake in a new pod: the home comes back from the archive.
	if err := b.Wake(ctx, "e2e-1", kube.Options{}); err != nil {
		t.Fatal(err)
	}
	out, err = b.Exec(ctx, "e2e-1", agent.ExecRequest{Shell: []string{"/bin/bash", "-lc"}, Command: "stat -c %a d/f; cat d/f", Dir: kube.HomeDir, TimeoutMs: 30000}, nil)
	if err != nil || string(out.Stdout) != "750\nkept" {
		t.Fatalf("home after wake: %q %q %v", out.Stdout, out.Stderr, err)
	}
	if err := b.Destroy(ctx, "e2e-1"); err != nil {
		t.Fatal(err)
	}
	if m, err := arch.Load(ctx, "e2e-1"); m != nil || err != nil {
		t.Fatalf("archive after destroy: %+v %v", m, err)
	}
}
