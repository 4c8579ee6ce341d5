#!/usr/bin/env bash
# Builds the single-node cluster of make kube-e2e from the Go module proxy,
# into $KUBE_E2E_CACHE/bin (default /var/lib/shellgate/kube-e2e/bin), each
# component only when its pinned version changed (a stamp beside it):
#   Kubernetes v1.34.3 (kube-apiserver, kube-controller-manager,
#     kube-scheduler, kube-proxy, kubelet, kubectl) and etcd at the version
#     Kubernetes pins, from ./cluster (its own go.mod);
#   containerd v2.4 with ctr and its runc shim;
#   gVisor's containerd shim at the version of Shellgate's runsc (patched:
#     see below);
#   the CNI plugins bridge, host-local, loopback, portmap;
#   kube-router, for its NetworkPolicy firewall (the bridge enforces none);
#   a pause binary for pod sandboxes (no registry: no registry.k8s.io/pause).
# The first build took about 10 minutes on 2 cores (Kubernetes and etcd 8 of them).
set -euo pipefail
cd "$(dirname "$0")"
CACHE=${KUBE_E2E_CACHE:-/var/lib/shellgate/kube-e2e}
BIN=$CACHE/bin
mkdir -p "$BIN"

K8S_VERSION=v1.34.3
CONTAINERD_VERSION=v2.4.2
CNI_VERSION=v1.9.0
KUBE_ROUTER_VERSION=v2.1.0
RUNSC_VERSION="$(sed -n 's/^const RunscVersion = "\(.*\)"$/\1/p' ../../sandbox/runtime/cli.go)"

export CGO_ENABLED=0 GOWORK=off GOFLAGS=-trimpath
# fresh: the stamp of $1 says $2 and the listed binaries exist.
fresh() {
	local name=$1 want=$2
	shift 2
	[[ $(cat "$BIN/.$name.version" 2>/dev/null) == "$want" ]] || return 1
	for b in "$@"; do [[ -x $BIN/$b ]] || return 1; done
}
stamp() { echo "$2" >"$BIN/.$1.version"; }
step() { echo "kube-e2e build: $* ($(date +%H:%M:%S))"; }

want="kubernetes $K8S_VERSION $(sha256sum cluster/go.sum cluster/etcd/main.go cluster/pause/main.go | sha256sum | cut -c1-12)"
k8s=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl)
if ! fresh kubernetes "$want" "${k8s[@]}" etcd pause; then
	step "Kubernetes $K8S_VERSION and etcd (the long one: about 8 minutes the first time on 2 cores)"
	minor=${K8S_VERSION#v1.}
	minor=${minor%%.*}
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
		ld+=" -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	pkgs=()
	for c in "${k8s[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	(cd cluster && go build -ldflags "$ld" -o "$BIN/" "${pkgs[@]}" ./etcd ./pause)
	stamp kubernetes "$want"
fi

want="containerd $CONTAINERD_VERSION"
if ! fresh containerd "$want" containerd ctr containerd-shim-runc-v2; then
	step "containerd $CONTAINERD_VERSION"
	GOBIN=$BIN go install -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
	stamp containerd "$want"
fi

# gVisor's shim lowers its own OOM score to -999, which needs
# CAP_SYS_RESOURCE; root on these machines lacks it (its bounding set), and
# the shim then refuses to start every pod. It is built from a copy of the
# pinned module with that one constant at 0 (the pods' own scores are kept
# at or above containerd's by restrict_oom_score_adj, cluster.sh).
want="gvisor-shim $RUNSC_VERSION oom0"
if ! fresh gvisor-shim "$want" containerd-shim-runsc-v1; then
	step "gVisor's containerd shim $RUNSC_VERSION"
	go mod download "gvisor.dev/gvisor@$RUNSC_VERSION"
	src=$CACHE/src/gvisor
	rm -rf "$src"
	mkdir -p "$CACHE/src"
	cp -r "$(go env GOMODCACHE)/gvisor.dev/gvisor@$RUNSC_VERSION" "$src"
	chmod -R u+w "$src"
	sed -i 's/oomScoreMax = -999/oomScoreMax = 0/' "$src/pkg/shim/v1/manager.go"
	grep -q 'oomScoreMax = 0' "$src/pkg/shim/v1/manager.go" || { echo "build: gVisor's shim changed: no oomScoreMax to patch" >&2; exit 1; }
	(cd "$src" && GOFLAGS="$GOFLAGS -mod=mod" go build -ldflags "-s -w" -o "$BIN/containerd-shim-runsc-v1" ./shim)
	stamp gvisor-shim "$want"
fi

want="cni $CNI_VERSION"
if ! fresh cni "$want" cni/bridge cni/host-local cni/loopback cni/portmap; then
	step "CNI plugins $CNI_VERSION"
	mkdir -p "$BIN/cni"
	GOBIN=$BIN/cni go install -ldflags "-s -w" \
		"github.com/containernetworking/plugins/plugins/main/bridge@$CNI_VERSION" \
		"github.com/containernetworking/plugins/plugins/main/loopback@$CNI_VERSION" \
		"github.com/containernetworking/plugins/plugins/ipam/host-local@$CNI_VERSION" \
		"github.com/containernetworking/plugins/plugins/meta/portmap@$CNI_VERSION"
	stamp cni "$want"
fi
want="kube-router $KUBE_ROUTER_VERSION"
if ! fresh kube-router "$want" kube-router; then
	step "kube-router $KUBE_ROUTER_VERSION (its network policy firewall only)"
	GOBIN=$BIN go install -ldflags "-s -w" "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
	stamp kube-router "$want"
fi
step "all built in $BIN"
