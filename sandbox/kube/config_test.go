package kube_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// TestFileConfig: 1. a full section parses; 2. bad ones name the field;
// 3. a kubeconfig file gives its server and context; 4. no kubeconfig
// outside a cluster is a clear error.
func TestFileConfig(t *testing.T) {
	fc, err := kube.ParseFileConfig([]byte("backend: kube\nnamespace: sg\nimage: sbx:1\nruntime_class: kata\nready_timeout: 90s\n"))
	if err != nil || fc.Namespace != "sg" || fc.RuntimeClass != "kata" || fc.ReadyTimeout != 90*time.Second {
		t.Fatalf("1: %+v %v", fc, err)
	}
	for in, want := range map[string]string{
		"backend: crun\nnamespace: a\nimage: b\n":                           "runtime.backend",
		"backend: kube\nimage: b\n":                                         "runtime.namespace",
		"backend: kube\nnamespace: a\n":                                     "runtime.image",
		"backend: kube\nnamespace: a\nimage: b\nnamspace: x\n":              "namspace",
		"backend: kube\nnamespace: a\nimage: b\nrequests: {cpu: lots}\n":    "runtime.requests.cpu",
		"backend: kube\nnamespace: a\nimage: b\nrequests: {memory: -1Gi}\n": "runtime.requests.memory",
	} {
		if _, err := kube.ParseFileConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("2: %q: got %v, want an error naming %s", in, err, want)
		}
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true}
- name: b
  cluster: {server: "https://10.0.0.2:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: "t"}
contexts:
- name: ca
  context: {cluster: a, user: u}
- name: cb
  context: {cluster: b, user: u}
current-context: ca
`), 0o600)
	fc.Kubeconfig, fc.Context = kc, "cb"
	rc, err := fc.RESTConfig()
	if err != nil || rc.Host != "https://10.0.0.2:6443" {
		t.Fatalf("3: %v %v", rc, err)
	}
	fc.Requests = kube.FileRequests{CPU: "1", Memory: "1Gi"}
	b, _, err := fc.Connect(kube.Config{})
	if err != nil || b == nil {
		t.Fatalf("3: connect: %v", err)
	}
	req := b.Pod("x", runtime.Limits{CPUs: 2, MemoryBytes: 4 << 30}, nil, "").Spec.Containers[0].Resources.Requests
	if req.Cpu().MilliValue() != 1000 || req.Memory().Value() != 1<<30 {
		t.Fatalf("3: requests %v", req)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	fc.Kubeconfig = ""
	if _, err := fc.RESTConfig(); err == nil || !strings.Contains(err.Error(), "not in a cluster") {
		t.Fatalf("4: %v", err)
	}
}

// TestCheck: the permission check reports exactly the verbs the API server
// denies.
func TestCheck(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		ra := r.Spec.ResourceAttributes
		r.Status.Allowed = ra.Namespace == "shellgate" && !(ra.Resource == "networkpolicies" && ra.Verb == "create")
		return true, r, nil
	})
	b := newBackend(t, cs, nil)
	err := b.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "[create networkpolicies]") {
		t.Fatalf("got %v, want networkpolicies create missing", err)
	}
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		r.Status.Allowed = true
		return true, r, nil
	})
	if err := b.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}
