// Package kubeproxy is the egress proxy's Kubernetes mode (`shellgate
// egress-proxy`): sandbox pods reach the internet only through an
// egress.Explicit proxy (HTTP(S)_PROXY, and a NetworkPolicy that lets them
// reach nothing else), which knows each connection's pod by its source
// address and that pod's allowlist by its shellgate.dev/allowed-domains
// annotation. Pods watches the namespace's sandbox pods for it.
package kubeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/kube"
)

// Selector selects sandbox pods (the labels sandbox/kube gives them).
const Selector = kube.LabelName + "=" + kube.SandboxApp + "," + kube.LabelManagedBy + "=" + kube.ManagedBy

const byIP = "ip"

// Pods indexes a namespace's running sandbox pods by address, from a
// list+watch (an informer): a changed annotation or a deleted pod applies
// from the next connection on.
type Pods struct {
	node string
	inf  cache.SharedIndexInformer
	fac  informers.SharedInformerFactory
}

// NewPods watches the sandbox pods of namespace; with node set, only those
// scheduled on it (the proxy's own node: the Service's
// internalTrafficPolicy is Local).
func NewPods(cs kubernetes.Interface, namespace, node string) (*Pods, error) {
	fac := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = Selector
			if node != "" {
				o.FieldSelector = "spec.nodeName=" + node
			}
		}))
	inf := fac.Core().V1().Pods().Informer()
	if err := inf.AddIndexers(cache.Indexers{byIP: podIPs}); err != nil {
		return nil, err
	}
	return &Pods{node: node, inf: inf, fac: fac}, nil
}

// podIPs are a pod's addresses, the index's keys.
func podIPs(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var out []string
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap().String())
		}
	}
	add(p.Status.PodIP)
	for _, ip := range p.Status.PodIPs {
		if ip.IP != p.Status.PodIP {
			add(ip.IP)
		}
	}
	return out, nil
}

// Start runs the watch until ctx ends and waits (up to timeout) for the
// first list.
func (p *Pods) Start(ctx context.Context, timeout time.Duration) error {
	p.fac.Start(ctx.Done())
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), p.inf.HasSynced) {
		return fmt.Errorf("kubeproxy: pods not listed within %s (RBAC: pods get/list/watch in the namespace?)", timeout)
	}
	return nil
}

// Shutdown stops the watch (after Start's ctx ended) and waits for it.
func (p *Pods) Shutdown() { p.fac.Shutdown() }

// Client is egress.ExplicitConfig.Client: the running sandbox pod whose
// address src is, and its allowlist. Unknown addresses, pods that are not
// running (or are being deleted), host-network pods and pods without a
// valid allowlist annotation are refused.
func (p *Pods) Client(src netip.Addr) (string, egress.Policy, error) {
	objs, err := p.inf.GetIndexer().ByIndex(byIP, src.Unmap().String())
	if err != nil {
		return "", egress.Policy{}, err
	}
	var found []*corev1.Pod
	for _, o := range objs {
		kp := o.(*corev1.Pod)
		if kp.Status.Phase != corev1.PodRunning || kp.DeletionTimestamp != nil || kp.Spec.HostNetwork ||
			kp.Labels[kube.LabelName] != kube.SandboxApp || kp.Labels[kube.LabelManagedBy] != kube.ManagedBy ||
			(p.node != "" && kp.Spec.NodeName != p.node) {
			continue
		}
		found = append(found, kp)
	}
	switch len(found) {
	case 0:
		return "", egress.Policy{}, fmt.Errorf("%s is not a running sandbox pod's address", src)
	case 1:
	default:
		return "", egress.Policy{}, fmt.Errorf("%s is the address of %d running sandbox pods", src, len(found))
	}
	kp := found[0]
	id := kp.Annotations[kube.AnnotationID]
	if id == "" {
		id = kp.Name
	}
	v, present := kp.Annotations[kube.AnnotationAllow]
	pol, err := ParseAnnotation(v, present)
	if err != nil {
		return id, egress.Policy{}, fmt.Errorf("pod %s: %w", kp.Name, err)
	}
	return id, pol, nil
}

// ParseAnnotation reads a shellgate.dev/allowed-domains annotation (a JSON
// array of allowlist entries, as sandbox/kube writes it) into a policy,
// validated as egress.ParsePolicy validates one. present is whether the
// pod has the annotation at all.
func ParseAnnotation(v string, present bool) (egress.Policy, error) {
	if !present {
		return egress.Policy{}, errors.New("no " + kube.AnnotationAllow + " annotation: this sandbox has no network access")
	}
	var domains []string
	if err := json.Unmarshal([]byte(v), &domains); err != nil {
		return egress.Policy{}, fmt.Errorf("annotation %s: want a JSON array of hostnames: %v", kube.AnnotationAllow, err)
	}
	pol := egress.Policy{Type: egress.Allowlist, AllowedDomains: domains}
	if err := pol.Validate(); err != nil {
		return egress.Policy{}, fmt.Errorf("annotation %s: %w", kube.AnnotationAllow, err)
	}
	return pol, nil
}
