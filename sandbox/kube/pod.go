package kube

import (
	"encoding/json"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// Pod is sandbox id's pod: the agent as the only container's entrypoint,
// under the RuntimeClass, as a non-root user with no capabilities, no
// privilege escalation, a read-only root filesystem, the RuntimeDefault
// seccomp profile and no service account token. The home and /tmp are
// size-limited emptyDirs; requests equal limits (Guaranteed QoS), so a
// sandbox gets what SPEC §3.1 promises and never more. proxy, when set, is
// the egress proxy's URL for HTTP(S)_PROXY.
func (b *Backend) Pod(id string, lim runtime.Limits, pol *egress.Policy, proxy string) *corev1.Pod {
	return b.pod(id, ObjectName(id), lim, b.cfg.DiskBytes, pol, proxy)
}

// pod is Pod with the home's size limit disk, mounting the credentials
// in Secret secret.
func (b *Backend) pod(id, secret string, lim runtime.Limits, disk int64, pol *egress.Policy, proxy string) *corev1.Pod {
	no, yes := false, true
	uid, gid := b.cfg.UID, b.cfg.GID
	meta := b.meta(id)
	if pol.Enabled() {
		// The egress proxy reads the allowlist of the pod a connection
		// comes from.
		allow, _ := json.Marshal(pol.AllowedDomains)
		meta.Annotations[AnnotationAllow] = string(allow)
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(int64(lim.CPUs*1000), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(lim.MemoryBytes, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(disk, resource.BinarySI),
	}
	req := corev1.ResourceList{
		corev1.ResourceCPU:              lower(b.cfg.CPURequest, res[corev1.ResourceCPU]),
		corev1.ResourceMemory:           lower(b.cfg.MemoryRequest, res[corev1.ResourceMemory]),
		corev1.ResourceEphemeralStorage: res[corev1.ResourceEphemeralStorage],
	}
	env := []corev1.EnvVar{{Name: "HOME", Value: b.cfg.HomeDir}}
	if proxy != "" {
		for _, n := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env = append(env, corev1.EnvVar{Name: n, Value: proxy})
		}
	}
	var rc *string
	if b.cfg.RuntimeClass != "-" {
		rc = &b.cfg.RuntimeClass
	}
	tmp := resource.NewQuantity(lim.TmpBytes, resource.BinarySI)
	diskQ := resource.NewQuantity(disk, resource.BinarySI)
	mode := int32(0o440)
	return &corev1.Pod{
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			RuntimeClassName:             rc,
			RestartPolicy:                corev1.RestartPolicyAlways, // the agent exits when the gateway hangs up
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			ShareProcessNamespace:        &no, // the agent must be PID 1
			HostNetwork:                  false,
			HostPID:                      false,
			HostIPC:                      false,
			Hostname:                     "sandbox",
			DNSPolicy:                    corev1.DNSNone, // names resolve at the egress proxy only
			DNSConfig:                    &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &uid,
				RunAsGroup:     &gid,
				FSGroup:        &gid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "sandbox",
				Image: b.cfg.Image,
				Command: []string{b.cfg.AgentPath,
					"-listen", ":" + strconv.Itoa(int(b.cfg.AgentPort)),
					"-credentials", CredentialsDir,
					"-nproc", strconv.FormatInt(lim.Processes, 10)},
				WorkingDir: b.cfg.HomeDir,
				Env:        env,
				Ports:      []corev1.ContainerPort{{Name: "agent", ContainerPort: b.cfg.AgentPort, Protocol: corev1.ProtocolTCP}},
				Resources:  corev1.ResourceRequirements{Requests: req, Limits: res},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             &yes,
					RunAsUser:                &uid,
					RunAsGroup:               &gid,
					Privileged:               &no,
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "home", MountPath: b.cfg.HomeDir},
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "agent-credentials", MountPath: CredentialsDir, ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: diskQ}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}},
				{Name: "agent-credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: &mode}}},
			},
		},
	}
}

// NetworkPolicy is sandbox id's policy. Ingress: only the gateway's pods,
// only to the agent port. Egress: with no network (pol nil or disabled)
// nothing at all, DNS included; with an allowlist only TCP to the egress
// proxy's pods on its port, which enforce the allowlist by name (no DNS:
// the proxy resolves). The allowlist itself is not expressible as a
// NetworkPolicy (it is by name, not address); it travels on the pod's
// annotation to the proxy.
func (b *Backend) NetworkPolicy(id string, pol *egress.Policy) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	agentPort := intstr.FromInt32(b.cfg.AgentPort)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: b.meta(id),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: idHash(id)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: b.cfg.GatewayLabels}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &agentPort}},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{}, // none: deny all
		},
	}
	if pol.Enabled() {
		proxyPort := intstr.FromInt32(b.cfg.Egress.Port)
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": b.cfg.Egress.Namespace}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: b.cfg.Egress.Labels},
			}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &proxyPort}},
		}}
	}
	return np
}

// lower is the smaller of a and b.
func lower(a, b resource.Quantity) resource.Quantity {
	if a.Cmp(b) < 0 {
		return a
	}
	return b
}
