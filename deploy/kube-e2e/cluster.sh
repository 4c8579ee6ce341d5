#!/usr/bin/env bash
# Starts (up) or tears down (down) make kube-e2e's single-node Kubernetes
# cluster, as root, from the binaries build.sh made:
#   etcd and the control plane on 127.0.0.1 and NODE_IP (a dummy interface
#   this script creates), certificates generated here with openssl;
#   containerd with two runtime handlers, runc and runsc (gVisor's shim,
#   RuntimeClass gvisor), pod sandboxes from a locally built pause image;
#   kubelet (cgroupfs, every pod's cgroup under /shellgate-kube-e2e of each
#   v1 hierarchy, so the host's other cgroups are left alone), kube-proxy
#   (iptables), the CNI bridge plugin on POD_CIDR, and kube-router's
#   firewall alone, which enforces NetworkPolicy (the bridge does not).
# Nothing listens on another interface and nothing is routed off the
# machine: a FORWARD rule drops what pods send anywhere but the pod and
# service ranges. `down` stops everything this script started (by pid, and
# the pods' processes by their cgroups), unmounts what lies under its
# state, deletes the interfaces, iptables chains and rules it and the
# kubelet added, and puts back the sysctls they changed (the kubelet sets
# overcommit and panic ones); it is safe to run twice.
#
# Usage: cluster.sh up|down|env
#   env prints the KUBECONFIG and addresses for the steps (e2e_test.go).
set -euo pipefail
CACHE=${KUBE_E2E_CACHE:-/var/lib/shellgate/kube-e2e}
BIN=$CACHE/bin
STATE=$CACHE/state         # etcd, containerd's and kubelet's roots (wiped by down)
LOGS=$CACHE/logs           # each process's log, kept after down
RUN=/run/shellgate-kube-e2e # pids, sockets, certificates, configs
NODE=kube-e2e
NODE_IP=10.250.0.1
IFACE=sgk-e2e0
BRIDGE=sgk-cni0
POD_CIDR=10.244.0.0/24
SVC_CIDR=10.96.0.0/24
API_SVC_IP=10.96.0.1
CGROUP_ROOT=/shellgate-kube-e2e
PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
# Pods' traffic never leaves the machine: dropped on the way to the
# default route's interface.
OUT_IF=$(ip -o route show default 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -1)
GUARD=(FORWARD -s "$POD_CIDR" -o "${OUT_IF:-eth0}" -m comment --comment shellgate-kube-e2e -j DROP)
export PATH=$BIN:$PATH # containerd finds the shims on PATH

log() { echo "kube-e2e cluster: $*"; }

start() { # start NAME CMD...: in its own session, its pid in $RUN/NAME.pid
	local name=$1
	shift
	setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
	echo $! >"$RUN/$name.pid"
}

wait_for() { # wait_for WHAT SECONDS CMD...
	local what=$1 secs=$2
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	log "$what not ready after ${secs}s; the logs are in $LOGS"
	return 1
}

cert() { # cert NAME CN [O] [SANS]: a client/server certificate signed by the CA
	local name=$1 cn=$2 o=${3:-} sans=${4:-}
	local subj="/CN=$cn"
	[[ -n $o ]] && subj="/O=$o$subj"
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$RUN/pki/$name.key" \
		-subj "$subj" -out "$RUN/pki/$name.csr" 2>/dev/null
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=clientAuth,serverAuth"
		[[ -n $sans ]] && echo "subjectAltName=$sans"
	} >"$RUN/pki/$name.ext"
	openssl x509 -req -in "$RUN/pki/$name.csr" -CA "$RUN/pki/ca.crt" -CAkey "$RUN/pki/ca.key" -CAcreateserial \
		-days 2 -extfile "$RUN/pki/$name.ext" -out "$RUN/pki/$name.crt" 2>/dev/null
}

kubeconfig() { # kubeconfig NAME: for the certificate NAME
	local kc=$RUN/$1.kubeconfig
	kubectl config set-cluster e2e --server="https://$NODE_IP:6443" --certificate-authority="$RUN/pki/ca.crt" --embed-certs --kubeconfig="$kc" >/dev/null
	kubectl config set-credentials u --client-certificate="$RUN/pki/$1.crt" --client-key="$RUN/pki/$1.key" --embed-certs --kubeconfig="$kc" >/dev/null
	kubectl config set-context e2e --cluster=e2e --user=u --kubeconfig="$kc" >/dev/null
	kubectl config use-context e2e --kubeconfig="$kc" >/dev/null
}

up() {
	if [[ -e $RUN ]]; then
		log "a cluster from an earlier run is still here: tearing it down first"
		down
	fi
	mkdir -p "$RUN/pki" "$RUN/cni" "$STATE" "$LOGS"
	rm -f "$LOGS"/*.log

	# The node's address on an interface of its own, so the pods reach the API
	# server (through the kubernetes Service) without any real network.
	ip link add "$IFACE" type bridge # no dummy driver in every kernel: an empty bridge holds the address as well
	ip addr add "$NODE_IP/32" dev "$IFACE"
	ip link set "$IFACE" up
	# Saved to be put back by down: the two set here, and those the kubelet
	# sets for itself (overcommit, panic on oops and after 10 s, keys).
	for s in net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables vm.overcommit_memory vm.panic_on_oom \
		kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes; do
		echo "$s=$(sysctl -n "$s")" >>"$RUN/sysctl.saved"
	done
	sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
	iptables -I "${GUARD[@]}"

	log "certificates"
	openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$RUN/pki/ca.key" \
		-subj "/CN=shellgate-kube-e2e-ca" -days 2 -out "$RUN/pki/ca.crt" 2>/dev/null
	cert apiserver kube-apiserver "" "IP:$NODE_IP,IP:$API_SVC_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert admin kube-e2e-admin system:masters
	cert apiserver-kubelet kube-apiserver-kubelet-client system:masters
	cert controller-manager system:kube-controller-manager
	cert scheduler system:kube-scheduler
	cert proxy system:kube-proxy
	cert kubelet "system:node:$NODE" system:nodes "IP:$NODE_IP,DNS:$NODE"
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$RUN/pki/sa.key" 2>/dev/null
	openssl pkey -in "$RUN/pki/sa.key" -pubout -out "$RUN/pki/sa.pub"
	for k in admin controller-manager scheduler proxy kubelet; do kubeconfig "$k"; done

	log "etcd"
	start etcd etcd --name e2e --data-dir "$STATE/etcd" --listen-client-urls http://127.0.0.1:23790 \
		--advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23800 \
		--initial-advertise-peer-urls http://127.0.0.1:23800 --initial-cluster e2e=http://127.0.0.1:23800 \
		--listen-metrics-urls http://127.0.0.1:23810 --quota-backend-bytes 2147483648
	wait_for etcd 30 curl -sf http://127.0.0.1:23790/health

	log "kube-apiserver"
	start kube-apiserver kube-apiserver --etcd-servers http://127.0.0.1:23790 \
		--bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443 \
		--service-cluster-ip-range "$SVC_CIDR" --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--client-ca-file "$RUN/pki/ca.crt" --tls-cert-file "$RUN/pki/apiserver.crt" --tls-private-key-file "$RUN/pki/apiserver.key" \
		--kubelet-client-certificate "$RUN/pki/apiserver-kubelet.crt" --kubelet-client-key "$RUN/pki/apiserver-kubelet.key" \
		--kubelet-certificate-authority "$RUN/pki/ca.crt" --kubelet-preferred-address-types InternalIP \
		--service-account-issuer https://kubernetes.default.svc.cluster.local --service-account-key-file "$RUN/pki/sa.pub" \
		--service-account-signing-key-file "$RUN/pki/sa.key" --allow-privileged=true --profiling=false
	wait_for kube-apiserver 90 kubectl --kubeconfig "$RUN/admin.kubeconfig" get --raw /readyz

	log "kube-controller-manager, kube-scheduler"
	start kube-controller-manager kube-controller-manager --kubeconfig "$RUN/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$RUN/controller-manager.kubeconfig" --authorization-kubeconfig "$RUN/controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
		--service-account-private-key-file "$RUN/pki/sa.key" --root-ca-file "$RUN/pki/ca.crt" \
		--cluster-signing-cert-file "$RUN/pki/ca.crt" --cluster-signing-key-file "$RUN/pki/ca.key" \
		--service-cluster-ip-range "$SVC_CIDR" --allocate-node-cidrs=false --profiling=false
	start kube-scheduler kube-scheduler --kubeconfig "$RUN/scheduler.kubeconfig" \
		--authentication-kubeconfig "$RUN/scheduler.kubeconfig" --authorization-kubeconfig "$RUN/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --profiling=false

	log "containerd (runc and runsc), CNI bridge on $POD_CIDR"
	cat >"$RUN/cni/10-bridge.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "kube-e2e", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$RUN/cni-ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
	cat >"$RUN/runsc.toml" <<EOF
binary_name = "$(command -v runsc)"
root = "$RUN/runsc"
log_path = "$LOGS/runsc-%ID%.log"
[runsc_config]
  platform = "systrap"
  systrap-disable-fast-path = "true"
  systrap-disable-syscall-patching = "true"
EOF
	cat >"$RUN/containerd.toml" <<EOF
version = 3
root = "$STATE/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$RUN/containerd.sock"
[ttrpc]
  address = "$RUN/containerd.sock.ttrpc"
[debug]
  address = "$RUN/containerd-debug.sock"
[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "$STATE/opt"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$PAUSE_IMAGE"
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    # Root here lacks CAP_SYS_RESOURCE: no OOM score below containerd's
    # (the kubelet asks -998 for pod sandboxes, which runc cannot set).
    restrict_oom_score_adj = true
    tolerate_missing_hugetlb_controller = true
    disable_hugetlb_controller = true
    enable_criu = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "$(command -v runc)"
          Root = "$RUN/runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
        runtime_type = "io.containerd.runsc.v1"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "$RUN/runsc.toml"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$BIN/cni"]
      conf_dir = "$RUN/cni"
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
EOF
	start containerd containerd --config "$RUN/containerd.toml"
	wait_for containerd 30 ctr --address "$RUN/containerd.sock" version
	# The images run.sh wrote (OCI layouts, tagged "dev"), under the names
	# the manifests use (a bare name is docker.io/library/NAME to the CRI).
	for img in pause:localhost/pause shellgate:docker.io/library/shellgate sandbox:docker.io/library/shellgate-sandbox; do
		ctr --address "$RUN/containerd.sock" -n k8s.io images import --base-name "${img#*:}" "$CACHE/images/${img%%:*}.tar" >/dev/null
	done
	ctr --address "$RUN/containerd.sock" -n k8s.io images tag --force localhost/pause:dev "$PAUSE_IMAGE" >/dev/null

	log "kubelet"
	for h in /sys/fs/cgroup/*/; do mkdir -p "$h${CGROUP_ROOT#/}"; done
	cat >"$RUN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $RUN/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $RUN/pki/kubelet.crt
tlsPrivateKeyFile: $RUN/pki/kubelet.key
containerRuntimeEndpoint: unix://$RUN/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
cgroupsPerQOS: true
podLogsDirectory: $STATE/pod-logs
failCgroupV1: false
failSwapOn: false
resolvConf: /etc/resolv.conf
# Images come from local archives and cannot be pulled again: never
# collect them; and no eviction for this machine's full-ish disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
serializeImagePulls: false
maxPods: 50
EOF
	start kubelet kubelet --config "$RUN/kubelet.yaml" --kubeconfig "$RUN/kubelet.kubeconfig" --root-dir "$STATE/kubelet" \
		--hostname-override "$NODE" --node-ip "$NODE_IP" --cert-dir "$RUN/pki"
	local k="kubectl --kubeconfig $RUN/admin.kubeconfig"
	wait_for "node $NODE" 90 $k wait --for=condition=Ready "node/$NODE" --timeout=1s
	$k label --overwrite node "$NODE" shellgate.dev/gvisor=true >/dev/null

	log "kube-proxy"
	cat >"$RUN/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $RUN/proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
hostnameOverride: $NODE
conntrack: {maxPerCore: 0}
EOF
	start kube-proxy kube-proxy --config "$RUN/kube-proxy.yaml"
	wait_for kube-proxy 30 curl -sf http://127.0.0.1:10256/healthz

	log "kube-router (NetworkPolicy firewall only)"
	start kube-router kube-router --kubeconfig "$RUN/admin.kubeconfig" --hostname-override "$NODE" \
		--run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
		--health-port 20244 --metrics-port 0 --iptables-sync-period 1m
	wait_for kube-router 60 curl -sf http://127.0.0.1:20244/healthz
	log "up: $($k version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1), node $NODE Ready"
}

# pids_in CGROUP: the processes in a cgroup subtree of every v1 hierarchy.
pids_in() {
	for h in /sys/fs/cgroup/*/; do
		if [[ -d $h${1#/} ]]; then find "$h${1#/}" -name cgroup.procs -exec cat {} + 2>/dev/null || true; fi
	done | sort -u
}

down() {
	local k="kubectl --kubeconfig $RUN/admin.kubeconfig"
	# The node's processes first, so that nothing restarts what the pods'
	# teardown stops; then the pods' processes by their cgroups.
	for name in kubelet kube-router kube-proxy kube-scheduler kube-controller-manager; do
		[[ -f $RUN/$name.pid ]] && kill "$(cat "$RUN/$name.pid")" 2>/dev/null || true
	done
	if [[ -S $RUN/containerd.sock ]]; then
		# The shims (and gVisor's sandboxes) are not containerd's children.
		pkill -TERM -f "^$BIN/containerd-shim" 2>/dev/null || true
	fi
	for ((round = 0; round < 10; round++)); do
		pids=$(pids_in "$CGROUP_ROOT")
		[[ -z $pids ]] && break
		kill -9 $pids 2>/dev/null || true
		sleep 0.3
	done
	pkill -KILL -f "^$BIN/containerd-shim" 2>/dev/null || true
	pkill -KILL -f -- "--root $RUN/runsc" 2>/dev/null || true
	for name in containerd kube-apiserver etcd; do
		[[ -f $RUN/$name.pid ]] && kill "$(cat "$RUN/$name.pid")" 2>/dev/null || true
	done
	for name in kubelet kube-router kube-proxy kube-scheduler kube-controller-manager containerd kube-apiserver etcd; do
		if [[ -f $RUN/$name.pid ]]; then
			pid=$(cat "$RUN/$name.pid")
			for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
			kill -9 "$pid" 2>/dev/null || true
		fi
	done
	# What lies under our state: pods' volumes, containers' rootfs, netns.
	for dir in "$STATE" "$RUN"; do
		findmnt -rn -o TARGET | { grep -E "^$dir(/|$)" || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	done
	# The pods' cgroups, deepest first.
	for h in /sys/fs/cgroup/*/; do
		[[ -d $h${CGROUP_ROOT#/} ]] && find "$h${CGROUP_ROOT#/}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	if [[ -x $BIN/kube-proxy ]]; then kube-proxy --cleanup >/dev/null 2>&1 || true; fi
	if [[ -x $BIN/kube-router ]]; then kube-router --cleanup-config >/dev/null 2>&1 || true; fi
	# The kubelet's own chains (KUBE-FIREWALL, canaries), which kube-proxy
	# --cleanup leaves: the rules that jump to a KUBE- chain, then the chains.
	for ipt in iptables ip6tables; do
		for table in filter nat mangle; do
			rules=$($ipt -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -v '^-A KUBE-' || true)
			while IFS= read -r r; do
				[[ -n $r ]] && eval "$ipt -t $table ${r/-A /-D }" 2>/dev/null || true
			done <<<"$rules"
			for chain in $($ipt -t "$table" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do
				$ipt -t "$table" -F "$chain" 2>/dev/null || true
			done
			for chain in $($ipt -t "$table" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do
				$ipt -t "$table" -X "$chain" 2>/dev/null || true
			done
		done
	done
	while iptables -D "${GUARD[@]}" 2>/dev/null; do :; done
	# kube-router's ipsets, once no rule refers to them.
	for set in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)' || true); do ipset destroy "$set" 2>/dev/null || true; done
	ip link del "$BRIDGE" 2>/dev/null || true
	ip link del "$IFACE" 2>/dev/null || true
	if [[ -f $RUN/sysctl.saved ]]; then
		while IFS= read -r kv; do sysctl -qw "$kv" || true; done <"$RUN/sysctl.saved"
	fi
	# What the kubelet, containerd and the CNI plugins keep at fixed paths:
	# the pods' logs and their links, the device-plugin socket, the CNI
	# results cache, the shims' sockets. Only what this cluster's names
	# mark, and a directory only once it is empty.
	rm -rf /var/log/pods/{shellgate,default,kube-system}_* /var/lib/cni/results/{kube-e2e,cni-loopback}-* \
		/var/lib/kubelet/device-plugins/kubelet.sock
	find /var/log/containers -maxdepth 1 -xtype l -delete 2>/dev/null || true
	pgrep -x containerd >/dev/null || find /run/containerd/s -maxdepth 1 -type s -delete 2>/dev/null || true
	for d in /var/log/pods /var/log/containers /var/lib/cni/results /var/lib/cni /var/lib/kubelet/device-plugins \
		/var/lib/kubelet /run/containerd/s /run/containerd; do
		rmdir "$d" 2>/dev/null || true
	done
	rm -rf "$STATE" "$RUN"
	log "down"
}

env_() {
	echo "KUBECONFIG=$RUN/admin.kubeconfig"
	echo "KUBE_E2E_NODE_IP=$NODE_IP"
	echo "KUBE_E2E_CONTAINERD=$RUN/containerd.sock"
	echo "KUBE_E2E_STATE=$STATE"
}

case ${1:-} in
up) up ;;
down) down ;;
env) env_ ;;
*) echo "usage: cluster.sh up|down|env" >&2; exit 2 ;;
esac
