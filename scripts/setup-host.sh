#!/usr/bin/env bash
# Installs what Shellgate's sandboxes and tests need on a fresh Debian 12
# host: the OCI runtimes (crun and runc from Debian, gVisor's runsc built
# from the Go module proxy at the pinned version), debootstrap and busybox
# for the images, e2fsprogs for the homes, curl and jq for the demo,
# python3 for the egress benchmark's host-side client, iptables for the
# egress firewall's fallback (tested beside nftables).
# With SHELLGATE_TEST_TOOLS=1 (make test sets it) also what only the tests
# need: postgresql for the PostgreSQL store's tests (internal/store/pgtest
# runs its own throwaway cluster; the packaged service is not needed),
# chromium for the web console's test, versitygw for the S3 tests. make demo
# leaves them out: they were most of a fresh machine's setup.
# Idempotent: a second run only checks.
#
# Usage: setup-host.sh [packages|go-tools]: the Debian packages, the tools
# built with Go (runsc, versitygw), or (no argument) both. make demo runs
# only the packages, beside shellgate's build (scripts/demo.sh).
set -euo pipefail
phase="${1:-all}"
case "$phase" in
all | packages | go-tools) ;;
*) echo "usage: setup-host.sh [packages|go-tools]" >&2; exit 2 ;;
esac

RUNSC_VERSION="$(sed -n 's/^const RunscVersion = "\(.*\)"$/\1/p' "$(dirname "$0")/../sandbox/runtime/cli.go")"

if [ "$(id -u)" != 0 ]; then
	echo "setup-host: run as root (sandboxes need mounts, cgroups and OCI runtimes)" >&2
	exit 1
fi

if [ "$phase" != go-tools ]; then
	pkgs=(crun runc debootstrap busybox-static e2fsprogs util-linux mount iproute2 iptables procps ca-certificates curl jq python3)
	if [ "${SHELLGATE_TEST_TOOLS:-0}" = 1 ]; then
		# chromium: the headless browser of the web console's end-to-end test
		# (test/e2e TestConsole, driven by playwright-core from test/console).
		pkgs+=(postgresql chromium)
	fi
	if [ "${SHELLGATE_BENCH_TOOLS:-0}" = 1 ]; then
		pkgs+=(podman bubblewrap hyperfine uidmap)
	fi
	missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	if [ "${#missing[@]}" -gt 0 ]; then
		echo "setup-host: installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
fi
if [ "$phase" = packages ]; then
	echo "setup-host: packages ok"
	exit 0
fi

# gVisor: a static build (a dynamic one cannot re-exec itself inside its
# own empty chroot), pinned, from the Go module proxy.
want="gvisor.dev/gvisor/runsc@${RUNSC_VERSION}"
stamp=/usr/local/lib/shellgate/runsc.version
if ! command -v runsc >/dev/null || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
	echo "setup-host: building $want (a few minutes on a fresh machine)"
	CGO_ENABLED=0 GOBIN=/usr/local/bin go install "$want"
	mkdir -p "$(dirname "$stamp")"
	echo "$want" > "$stamp"
fi
# versitygw: the S3-compatible server the tests of S3 storage and of the
# home archive start on loopback (sandbox/s3store/s3test), pinned, from
# the Go module proxy.
VERSITYGW_VERSION=v1.8.0
want="github.com/versity/versitygw/cmd/versitygw@${VERSITYGW_VERSION}"
stamp=/usr/local/lib/shellgate/versitygw.version
if [ "${SHELLGATE_TEST_TOOLS:-0}" = 1 ] && { ! command -v versitygw >/dev/null || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; }; then
	echo "setup-host: building $want (about 2 minutes)"
	CGO_ENABLED=0 GOBIN=/usr/local/bin go install "$want"
	mkdir -p "$(dirname "$stamp")"
	echo "$want" > "$stamp"
fi
echo "setup-host: ok ($(runsc --version 2>/dev/null | head -1); $(crun --version | head -1); $(runc --version | head -1))"
