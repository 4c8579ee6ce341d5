package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// FileConfig is the `runtime:` section of a Shellgate config file that
// selects this backend:
//
//	runtime:
//	  backend: kube
//	  namespace: shellgate
//	  image: registry.example/shellgate-sandbox:1
//	  kubeconfig: /etc/shellgate/kubeconfig   # omit in a pod: in-cluster
//	  runtime_class: gvisor
//	  ready_timeout: 2m
type FileConfig struct {
	Backend      string        `yaml:"backend"`
	Namespace    string        `yaml:"namespace"`
	Image        string        `yaml:"image"`
	Kubeconfig   string        `yaml:"kubeconfig"`
	Context      string        `yaml:"context"`
	RuntimeClass string        `yaml:"runtime_class"`
	ReadyTimeout time.Duration `yaml:"ready_timeout"`
}

// ParseFileConfig decodes and checks a `runtime:` section; unknown fields
// are errors.
func ParseFileConfig(b []byte) (FileConfig, error) {
	var fc FileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		return FileConfig{}, fmt.Errorf("runtime: %w", err)
	}
	switch {
	case fc.Backend != "kube":
		return FileConfig{}, fmt.Errorf("runtime.backend %q: want kube", fc.Backend)
	case fc.Namespace == "":
		return FileConfig{}, errors.New("runtime.namespace: required")
	case fc.Image == "":
		return FileConfig{}, errors.New("runtime.image: required (the sandbox image: make image-oci SANDBOX_ROOTFS=...)")
	case fc.ReadyTimeout < 0:
		return FileConfig{}, errors.New("runtime.ready_timeout: must not be negative")
	}
	return fc, nil
}

// RESTConfig is the API server connection: the kubeconfig file when one is
// named, else the pod's in-cluster service account.
func (fc FileConfig) RESTConfig() (*rest.Config, error) {
	if fc.Kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("runtime: no kubeconfig and not in a cluster: %w", err)
		}
		return rc, nil
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: fc.Kubeconfig}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: fc.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("runtime.kubeconfig %s: %w", fc.Kubeconfig, err)
	}
	return rc, nil
}

// Connect makes the clientset and the backend of fc; cfg supplies what a
// file does not set (Archiver, Logger, limits).
func (fc FileConfig) Connect(cfg Config) (*Backend, kubernetes.Interface, error) {
	rc, err := fc.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	cfg.Namespace, cfg.Image = fc.Namespace, fc.Image
	if fc.RuntimeClass != "" {
		cfg.RuntimeClass = fc.RuntimeClass
	}
	if fc.ReadyTimeout > 0 {
		cfg.ReadyTimeout = fc.ReadyTimeout
	}
	b, err := New(cs, cfg)
	return b, cs, err
}

// needed is every API permission the backend uses (deploy/kubernetes/02-rbac.yaml).
var needed = []authorizationv1.ResourceAttributes{
	{Resource: "pods", Verb: "create"}, {Resource: "pods", Verb: "get"}, {Resource: "pods", Verb: "delete"},
	{Resource: "secrets", Verb: "create"}, {Resource: "secrets", Verb: "delete"},
	{Group: "networking.k8s.io", Resource: "networkpolicies", Verb: "create"},
	{Group: "networking.k8s.io", Resource: "networkpolicies", Verb: "delete"},
}

// Check asks the API server (SelfSubjectAccessReview) whether this
// backend's identity may do everything Wake, Sleep and Destroy do in its
// namespace; the error lists what is missing.
func (b *Backend) Check(ctx context.Context) error {
	var missing []string
	for _, ra := range needed {
		ra.Namespace = b.cfg.Namespace
		r, err := b.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("kube: access review in namespace %s: %w", b.cfg.Namespace, err)
		}
		if !r.Status.Allowed {
			missing = append(missing, ra.Verb+" "+ra.Resource)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("kube: not allowed in namespace %s: %v (apply deploy/kubernetes/02-rbac.yaml)", b.cfg.Namespace, missing)
	}
	return nil
}
