//go:build kube_e2e

// The same flow as TestSleepWake on a real cluster, for make kube-e2e
// (deploy/kube-e2e/run.sh), with the home archived by kubehome in a local
// directory:
//
//	SHELLGATE_KUBECONFIG=... SHELLGATE_KUBE_IMAGE=shellgate-sandbox:dev go test -tags kube_e2e -run TestCluster ./sandbox/kube/
//
// The test runs on the cluster's node, where pod IPs are routable, and
// dials each agent as the gateway does. (kubectl port-forward cannot reach
// a gVisor pod's agent: it dials in the pod's network namespace on the
// host, and gVisor's netstack serves the pod's ports inside the sandbox.)
package kube_test

import (
	"context"
	"os"
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
	homes, err := homearchive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	arch := kubehome.New(homes)
	b, err := kube.New(cs, kube.Config{Namespace: "shellgate", Image: os.Getenv("SHELLGATE_KUBE_IMAGE"), Archiver: arch})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Wake(ctx, "e2e-1", kube.Options{}); err != nil {
		t.Fatal(err)
	}
	defer b.Destroy(context.Background(), "e2e-1")
	out, err := b.Exec(ctx, "e2e-1", agent.ExecRequest{Shell: []string{"/bin/bash", "-lc"}, Command: "id -u; dmesg | head -1; mkdir -p d && printf kept > d/f && chmod 750 d/f", Dir: kube.HomeDir, TimeoutMs: 30000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out.Stdout)
	// No network check here: nothing may leave the machine, and make
	// kube-e2e's step 08 checks the default deny against a server it
	// makes in a network namespace.
	if !strings.HasPrefix(s, "1000\n") || !strings.Contains(s, "gVisor") {
		t.Fatalf("want uid 1000 and gVisor's dmesg; got %q %q", s, out.Stderr)
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
