#!/usr/bin/env bash
# End-to-end check of Shellgate's Kubernetes sandbox backend on a real
# cluster: kind with gVisor (runsc) as a containerd runtime handler.
#
# IT CANNOT RUN ON THE MACHINES SHELLGATE IS DEVELOPED ON (no cluster, no
# registry, no network beyond the Go proxy, Debian and npm). Run it on a
# workstation with docker, kind >= 0.30, kubectl and network access.
#
# What it does:
#   1. builds the static binaries and the OCI images (make image-oci; the
#      sandbox image from SANDBOX_ROOTFS, default: the image `shellgate
#      image build` made under the data directory);
#   2. creates a kind cluster whose node has runsc installed and registered
#      with containerd as handler "runsc", labels it shellgate.dev/gvisor;
#   3. loads both images into the node, applies deploy/kubernetes/;
#   4. runs sandbox/kube's tests against the cluster (SHELLGATE_KUBECONFIG),
#      which wake a sandbox pod under RuntimeClass gvisor, run a command
#      through the agent over TLS, check `dmesg` shows gVisor, sleep it
#      (its home archived by kubehome) and check the pod, Secret and
#      NetworkPolicy are gone, wake it in a new pod with the file it wrote;
#   5. waits for the gateway Deployment (serve with the ConfigMap's
#      runtime: kubernetes), makes a key in it, and through its API creates
#      a container, runs `id -u` and `dmesg` in its pod and deletes it.
#   6. waits for the egress proxy DaemonSet (`shellgate egress-proxy`):
#      ready once it has listed the node's sandbox pods (RBAC works).
#
# Usage: deploy/kind-e2e.sh [--keep]     (--keep: leave the cluster)
# Needs: docker, kind, kubectl, skopeo (to turn the OCI layouts into
#        archives kind can load), curl.
set -euo pipefail

CLUSTER=${CLUSTER:-shellgate-e2e}
RUNSC_URL=${RUNSC_URL:-https://storage.googleapis.com/gvisor/releases/release/latest/x86_64}
DATA_DIR=${DATA_DIR:-/var/lib/shellgate}
SANDBOX_ROOTFS=${SANDBOX_ROOTFS:-}
KEEP=0
[[ ${1:-} == --keep ]] && KEEP=1

cd "$(dirname "$0")/.."
for tool in docker kind kubectl skopeo curl; do
	command -v "$tool" >/dev/null || { echo "kind-e2e: $tool is required" >&2; exit 2; }
done

echo "== 1. images"
if [[ -z $SANDBOX_ROOTFS ]]; then
	SANDBOX_ROOTFS=$(readlink -f "$DATA_DIR/images/default/rootfs" 2>/dev/null || true)
	[[ -n $SANDBOX_ROOTFS ]] || { echo "kind-e2e: set SANDBOX_ROOTFS (run \`shellgate image build\` first)" >&2; exit 2; }
fi
make image-oci SANDBOX_ROOTFS="$SANDBOX_ROOTFS"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; [[ $KEEP == 1 ]] || kind delete cluster --name "$CLUSTER"' EXIT
skopeo copy oci:bin/oci/shellgate:dev docker-archive:"$tmp/shellgate.tar":shellgate:dev
skopeo copy oci:bin/oci/sandbox:dev docker-archive:"$tmp/sandbox.tar":shellgate-sandbox:dev

echo "== 2. cluster with gVisor"
cat >"$tmp/kind.yaml" <<'KIND'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true # Calico below: kindnet does not enforce NetworkPolicy
containerdConfigPatches:
  - |-
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
KIND
kind create cluster --name "$CLUSTER" --config "$tmp/kind.yaml" --wait 0s
node="$CLUSTER-control-plane"
for bin in runsc containerd-shim-runsc-v1; do
	curl -fsSL "$RUNSC_URL/$bin" -o "$tmp/$bin"
	curl -fsSL "$RUNSC_URL/$bin.sha512" -o "$tmp/$bin.sha512"
	(cd "$tmp" && sha512sum -c "$bin.sha512")
	docker cp "$tmp/$bin" "$node:/usr/local/bin/$bin"
	docker exec "$node" chmod 0755 "/usr/local/bin/$bin"
done
docker exec "$node" systemctl restart containerd
kubectl apply -f https://raw.githubusercontent.com/projectcalico/calico/v3.29.1/manifests/calico.yaml
kubectl wait --for=condition=Ready node --all --timeout=300s
kubectl label node "$node" shellgate.dev/gvisor=true --overwrite
kubectl taint node "$node" node-role.kubernetes.io/control-plane- || true

echo "== 3. load images, apply manifests"
kind load image-archive "$tmp/shellgate.tar" --name "$CLUSTER"
kind load image-archive "$tmp/sandbox.tar" --name "$CLUSTER"
kubectl apply -f deploy/kubernetes/

echo "== 4. sandbox/kube against the cluster"
kubectl config view --raw --minify --context "kind-$CLUSTER" >"$tmp/kubeconfig"
SHELLGATE_KUBECONFIG="$tmp/kubeconfig" SHELLGATE_KUBE_IMAGE=shellgate-sandbox:dev \
	go test -tags kube_e2e -count=1 -v -run TestCluster ./sandbox/kube/

echo "== 5. the gateway (serve --config with runtime: kubernetes) through its API"
kubectl -n shellgate rollout status deploy/shellgate --timeout=5m
KEY=$(kubectl -n shellgate exec deploy/shellgate -- /usr/local/bin/shellgate keys create --data-dir /var/lib/shellgate --account e2e --workspace w | tail -n 1)
kubectl -n shellgate port-forward svc/shellgate 18080:8080 >/dev/null &
pf=$!
trap 'kill $pf 2>/dev/null || true; rm -rf "$tmp"; [[ $KEEP == 1 ]] || kind delete cluster --name "$CLUSTER"' EXIT
for _ in $(seq 50); do curl -fsS http://127.0.0.1:18080/healthz >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS http://127.0.0.1:18080/healthz | grep -q '"runtime":"kubernetes/gvisor"'
curl -fsS -H "Authorization: Bearer $KEY" -d '{"name":"e2e"}' http://127.0.0.1:18080/api/v1/containers >/dev/null
out=$(curl -fsS -H "Authorization: Bearer $KEY" -d '{"commands":["id -u","dmesg | head -1"]}' http://127.0.0.1:18080/api/v1/containers/e2e/exec)
grep -q '"stdout":"1000\\n"' <<<"$out" || { echo "kind-e2e: exec through the gateway: $out" >&2; exit 1; }
grep -q 'gVisor' <<<"$out" || { echo "kind-e2e: not under gVisor: $out" >&2; exit 1; }
curl -fsS -X DELETE -H "Authorization: Bearer $KEY" http://127.0.0.1:18080/api/v1/containers/e2e >/dev/null

echo "== 6. the egress proxy"
kubectl -n shellgate rollout status ds/shellgate-egress --timeout=5m
kubectl -n shellgate logs ds/shellgate-egress | grep -q '"msg":"egress proxy listening"' \
	|| { echo "kind-e2e: the egress proxy did not start" >&2; exit 1; }
echo "kind-e2e: OK"
