package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// FileConfig is the `runtime:` section of a Shellgate config file that
// selects this backend (`shellgate serve --config FILE`):
//
//	runtime:
//	  backend: kubernetes                     # or kube
//	  namespace: shellgate
//	  image: registry.example/shellgate-sandbox:1
//	  kubeconfig: /etc/shellgate/kubeconfig   # omit in a pod: in-cluster
//	  runtime_class: gvisor
//	  ready_timeout: 2m
//	  shell: [/bin/bash, -lc]                 # how the image runs a command line
//	  requests: {cpu: 250m, memory: 256Mi}    # what a pod asks the scheduler for (at most its limits)
//	  egress_proxy:                           # sandboxes with a network allowlist
//	    namespace: shellgate
//	    service: shellgate-egress
//	    port: 3128
//	    labels: {app.kubernetes.io/name: shellgate-egress}
type FileConfig struct {
	Backend      string          `yaml:"backend"`
	Namespace    string          `yaml:"namespace"`
	Image        string          `yaml:"image"`
	Kubeconfig   string          `yaml:"kubeconfig"`
	Context      string          `yaml:"context"`
	RuntimeClass string          `yaml:"runtime_class"`
	ReadyTimeout time.Duration   `yaml:"ready_timeout"`
	Shell        []string        `yaml:"shell"`
	Requests     FileRequests    `yaml:"requests"`
	EgressProxy  FileEgressProxy `yaml:"egress_proxy"`
}

// FileRequests is the `requests:` of a FileConfig: Kubernetes quantities
// (Config.CPURequest, MemoryRequest).
type FileRequests struct {
	CPU    string `yaml:"cpu"`
	Memory string `yaml:"memory"`
}

// FileEgressProxy is the `egress_proxy:` of a FileConfig (EgressProxy).
type FileEgressProxy struct {
	Namespace string            `yaml:"namespace"`
	Service   string            `yaml:"service"`
	Port      int32             `yaml:"port"`
	Labels    map[string]string `yaml:"labels"`
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
	case fc.Backend != "kube" && fc.Backend != "kubernetes":
		return FileConfig{}, fmt.Errorf("runtime.backend %q: want kubernetes (or kube); without a runtime section sandboxes run on this machine", fc.Backend)
	case fc.Namespace == "":
		return FileConfig{}, errors.New("runtime.namespace: required")
	case fc.Image == "":
		return FileConfig{}, errors.New("runtime.image: required (the sandbox image: make image-oci SANDBOX_ROOTFS=...)")
	case fc.ReadyTimeout < 0:
		return FileConfig{}, errors.New("runtime.ready_timeout: must not be negative")
	case fc.EgressProxy.Port < 0 || fc.EgressProxy.Port > 65535:
		return FileConfig{}, fmt.Errorf("runtime.egress_proxy.port %d: want 1-65535", fc.EgressProxy.Port)
	case fc.RuntimeClass != "" && fc.RuntimeClass != "-" && len(validation.IsDNS1123Subdomain(fc.RuntimeClass)) > 0:
		return FileConfig{}, fmt.Errorf("runtime.runtime_class %q: not a RuntimeClass name", fc.RuntimeClass)
	case len(validation.IsDNS1123Label(fc.Namespace)) > 0:
		return FileConfig{}, fmt.Errorf("runtime.namespace %q: not a namespace name", fc.Namespace)
	}
	for i, a := range fc.Shell {
		if a == "" {
			return FileConfig{}, fmt.Errorf("runtime.shell[%d]: empty", i)
		}
	}
	for name, v := range map[string]string{"cpu": fc.Requests.CPU, "memory": fc.Requests.Memory} {
		if q, err := resource.ParseQuantity(v); v != "" && (err != nil || q.Sign() <= 0) {
			return FileConfig{}, fmt.Errorf("runtime.requests.%s %q: want a positive Kubernetes quantity (e.g. 250m CPU, 256Mi memory)", name, v)
		}
	}
	return fc, nil
}

// RESTConfig is the API server connection: the kubeconfig file when one is
// named, else the pod's in-cluster service account.
func (fc FileConfig) RESTConfig() (*rest.Config, error) {
	if fc.Kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no kubeconfig and not in a cluster: %w", err)
		}
		return rc, nil
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: fc.Kubeconfig}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: fc.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", fc.Kubeconfig, err)
	}
	return rc, nil
}

// Connect makes the clientset and the backend of fc; cfg supplies what a
// file does not set (Archiver, Logger, limits).
func (fc FileConfig) Connect(cfg Config) (*Backend, kubernetes.Interface, error) {
	rc, err := fc.RESTConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("runtime: %w", err) // the serve config's section
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
	if fc.Requests.CPU != "" {
		cfg.CPURequest = resource.MustParse(fc.Requests.CPU) // checked by ParseFileConfig
	}
	if fc.Requests.Memory != "" {
		cfg.MemoryRequest = resource.MustParse(fc.Requests.Memory)
	}
	e := fc.EgressProxy
	if e.Namespace != "" {
		cfg.Egress.Namespace = e.Namespace
	}
	if e.Service != "" {
		cfg.Egress.Service = e.Service
	}
	if e.Port != 0 {
		cfg.Egress.Port = e.Port
	}
	if e.Labels != nil {
		cfg.Egress.Labels = e.Labels
	}
	b, err := New(cs, cfg)
	return b, cs, err
}

// needed is every API permission the backend uses (deploy/kubernetes/02-rbac.yaml).
var needed = []authorizationv1.ResourceAttributes{
	{Resource: "pods", Verb: "create"}, {Resource: "pods", Verb: "get"}, {Resource: "pods", Verb: "delete"},
	{Resource: "pods", Verb: "list"}, // Sandboxes.List: every replica's pods
	{Resource: "secrets", Verb: "create"}, {Resource: "secrets", Verb: "delete"},
	{Resource: "secrets", Verb: "get"}, // adopting another replica's pod
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
