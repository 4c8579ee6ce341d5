// Package deploy holds the deployment artifacts (Kubernetes manifests, the
// systemd unit, the kind end-to-end script); its tests check them.
package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/testenv"
)

// TestManifests decodes every Kubernetes manifest strictly (unknown or
// misspelt fields fail) into client-go's types, and checks the properties
// the docs promise: 1. RBAC is namespaced (Roles only) and limited to
// pods, secrets, networkpolicies and the egress Service; 2. every
// container is non-root, without privilege escalation, with all
// capabilities dropped and a read-only root; 3. the gateway's ConfigMap
// selects the Kubernetes runtime with a config serve accepts.
func TestManifests(t *testing.T) {
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests")
	}
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	dec := codecs.UniversalDeserializer()
	kinds := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufioReader(b))
		for {
			doc, err := r.Read()
			if err != nil {
				break
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, gvk, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			kinds[gvk.Kind]++
			check(t, f, obj)
		}
	}
	for _, k := range []string{"ConfigMap", "Namespace", "RuntimeClass", "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "DaemonSet", "NetworkPolicy"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in deploy/kubernetes", k)
		}
	}
	if kinds["ClusterRole"]+kinds["ClusterRoleBinding"] > 0 {
		t.Error("1: cluster-wide RBAC")
	}
}

func check(t *testing.T, f string, obj runtime.Object) {
	var pod *corev1.PodSpec
	switch o := obj.(type) {
	case *rbacv1.Role:
		allowed := map[string]bool{"pods": true, "secrets": true, "networkpolicies": true, "services": true}
		for _, r := range o.Rules {
			for _, res := range r.Resources {
				if !allowed[res] {
					t.Errorf("1: %s: role %s grants %s", f, o.Name, res)
				}
			}
			for _, v := range r.Verbs {
				if v == "*" || v == "update" || v == "patch" {
					t.Errorf("1: %s: role %s grants verb %s", f, o.Name, v)
				}
			}
		}
	case *corev1.ConfigMap:
		// 3. the gateway's config selects the Kubernetes runtime and
		// parses as serve parses it.
		var top struct {
			Runtime yaml.Node `yaml:"runtime"`
		}
		if err := yaml.Unmarshal([]byte(o.Data["shellgate.yaml"]), &top); err != nil || top.Runtime.Kind == 0 {
			t.Errorf("3: %s: %s has no runtime section (%v)", f, o.Name, err)
			return
		}
		raw, _ := yaml.Marshal(&top.Runtime)
		if fc, err := kube.ParseFileConfig(raw); err != nil || fc.Namespace != "shellgate" {
			t.Errorf("3: %s: %s: runtime %+v: %v", f, o.Name, fc, err)
		}
	case *appsv1.Deployment:
		pod = &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		pod = &o.Spec.Template.Spec
	}
	if pod == nil {
		return
	}
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("2: %s: pod not forced non-root", f)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("2: %s: container %s security context %+v", f, c.Name, sc)
		}
	}
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// TestSystemdUnit runs systemd-analyze verify on the unit, with ExecStart
// pointed at an executable that exists here (the unit names the installed
// path).
func TestSystemdUnit(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.Missing(t, "systemd-analyze (Debian package systemd)")
	}
	b, err := os.ReadFile("systemd/shellgate.service")
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	unit := filepath.Join(t.TempDir(), "shellgate.service")
	os.WriteFile(unit, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/shellgate", exe)), 0o644)
	out, err := exec.Command(sa, "verify", unit).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestKubeE2EScripts: make kube-e2e's scripts parse (bash -n); they run
// outside make test (the cluster's first build takes long).
func TestKubeE2EScripts(t *testing.T) {
	for _, f := range []string{"build.sh", "cluster.sh", "run.sh"} {
		if out, err := exec.Command("bash", "-n", "kube-e2e/"+f).CombinedOutput(); err != nil {
			t.Fatalf("bash -n %s: %v\n%s", f, err, out)
		}
	}
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
