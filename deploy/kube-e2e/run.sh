#!/usr/bin/env bash
# make kube-e2e: Shellgate's Kubernetes backend on a real single-node
# cluster built here from Go modules (build.sh), started as root on this
# machine (cluster.sh), with deploy/kubernetes/ applied as a user would and
# the end-to-end steps of e2e_test.go run against it; then sandbox/kube's
# TestCluster and the benchmarks (bench_test.go) on the same cluster. The
# cluster is always torn down, also when a step fails (KEEP=1 leaves it up;
# `deploy/kube-e2e/cluster.sh down` then takes it down).
#
# Prints "kube-e2e: N/N steps passed" and the time. Needs root, runsc
# (scripts/setup-host.sh), PostgreSQL and versitygw (SHELLGATE_TEST_TOOLS=1
# scripts/setup-host.sh) and an image built by `shellgate image build`
# (SANDBOX_IMAGE, default: default).
set -euo pipefail
start=$(date +%s)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
CACHE=${KUBE_E2E_CACHE:-/var/lib/shellgate/kube-e2e}
DATA_DIR=${DATA_DIR:-/var/lib/shellgate}
SANDBOX_IMAGE=${SANDBOX_IMAGE:-default}
export KUBE_E2E_CACHE=$CACHE

[[ $(id -u) == 0 ]] || { echo "kube-e2e: run as root (it starts a kubelet and containerd)" >&2; exit 2; }
rootfs=$(readlink -f "$DATA_DIR/images/$SANDBOX_IMAGE/rootfs" 2>/dev/null || true)
[[ -d $rootfs ]] || { echo "kube-e2e: no image $SANDBOX_IMAGE under $DATA_DIR/images (make images)" >&2; exit 2; }

# ipset for kube-router's firewall, openssl for the cluster's certificates.
missing=()
for tool in ipset openssl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [[ ${#missing[@]} -gt 0 ]]; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
"$here/build.sh"

echo "kube-e2e: images (gateway, sandbox from $SANDBOX_IMAGE, pause)"
make -s -C "$repo" build >/dev/null
mkdir -p "$CACHE/images"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(
	cd "$repo"
	go run ./cmd/ociimage -kind gateway -o "$tmp/shellgate" -shellgate bin/shellgate -agent bin/shellgate-agent >/dev/null
	go run ./cmd/ociimage -kind binary -o "$tmp/pause" -bin "$CACHE/bin/pause" >/dev/null
	go run ./cmd/ociimage -kind sandbox -o "$tmp/sandbox" -rootfs "$rootfs" -agent bin/shellgate-agent >/dev/null
)
for i in shellgate pause sandbox; do tar -C "$tmp/$i" -cf "$CACHE/images/$i.tar" .; done
rm -rf "$tmp"/*

status=0
# pod_logs keeps every pod's log of the namespace beside the cluster's.
pod_logs() {
	for p in $(kubectl -n shellgate get pods -o name 2>/dev/null); do
		kubectl -n shellgate logs --all-containers "$p" >"$CACHE/logs/pod-${p#pod/}.log" 2>&1 || true
	done
}
trap 'pod_logs; KEEP=${KEEP:-0}; [[ $KEEP == 1 ]] && echo "kube-e2e: KEEP=1, the cluster stays up" || "$here/cluster.sh" down; rm -rf "$tmp"' EXIT
"$here/cluster.sh" up
eval "$("$here/cluster.sh" env)"
export KUBECONFIG KUBE_E2E_NODE_IP KUBE_E2E_STATE
export SHELLGATE_BIN=$repo/bin/shellgate PATH=$CACHE/bin:$PATH

echo "kube-e2e: steps"
cd "$repo"
go test -tags kube_e2e -count=1 -timeout 30m -v -run 'TestKubeE2E$' ./deploy/kube-e2e/ 2>&1 | tee "$tmp/steps.log" || status=1
echo "kube-e2e: sandbox/kube's TestCluster on the cluster"
if SHELLGATE_KUBECONFIG=$KUBECONFIG SHELLGATE_KUBE_IMAGE=shellgate-sandbox:dev \
	go test -tags kube_e2e -count=1 -timeout 10m -v -run 'TestCluster$' ./sandbox/kube/ >"$CACHE/logs/testcluster.log" 2>&1; then
	echo "--- PASS: TestKubeE2E/12_sandbox/kube's_TestCluster" >>"$tmp/steps.log"
else
	tail -20 "$CACHE/logs/testcluster.log"
	echo "--- FAIL: TestKubeE2E/12_sandbox/kube's_TestCluster" >>"$tmp/steps.log"
	status=1
fi
passed=$(grep -c -- '^    --- PASS: TestKubeE2E/\|^--- PASS: TestKubeE2E/' "$tmp/steps.log" || true)
failed=$(grep -c -- '^    --- FAIL: TestKubeE2E/\|^--- FAIL: TestKubeE2E/' "$tmp/steps.log" || true)
echo "kube-e2e: $passed/$((passed + failed)) steps passed in $(($(date +%s) - start)) s (logs: $CACHE/logs)"
exit $status
