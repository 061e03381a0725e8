#!/usr/bin/env bash
# Builds gpuslack's image on this machine from Debian packages, with no registry pulled from:
# mmdebstrap makes the base (Debian 12 "bookworm", variant essential, plus ca-certificates) from
# the Debian archive, podman imports it and builds deploy/container/Containerfile.debian on it
# with vfs storage and chroot isolation (what works without a privileged daemon or overlay).
#
#   deploy/container/build-debian.sh [BINARY]          # localhost/gpuslack:VERSION
#   deploy/container/build-debian.sh --smoke [BINARY]  # then replay a fixture in it, ask /metrics
#   deploy/container/build-debian.sh --print           # the image name only
#
# BINARY defaults to target/release/gpuslack (build it first: `cargo build --release --locked`;
# scripts/dist/build.sh's x86_64 binary, linked against glibc 2.28, does too). The base is
# Debian 12, whose glibc (2.36) runs any of them. GPUSLACK_IMAGE (default localhost/gpuslack),
# GPUSLACK_TAG (default VERSION), GPUSLACK_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# PODMAN (default podman) change the obvious. To push where the cluster pulls from, and point
# deploy/kubernetes/kustomization.yaml's `images:` at it (newName, newTag):
#
#   podman --storage-driver vfs push localhost/gpuslack:0.1.0 docker://REGISTRY/gpuslack:0.1.0
#
# --smoke runs the image with runc and its rlimits lowered (1024 files, 4096 processes): in a VM
# or container without CAP_SYS_RESOURCE, crun and runc cannot set podman's default rlimits
# ("setrlimit RLIMIT_NOFILE: Operation not permitted"), and crun refuses a hybrid cgroup tree
# ("cgroups in hybrid mode not supported").
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
version=$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
if [ -z "$version" ]; then
    echo "build-debian.sh: no [package] version in $root/Cargo.toml" >&2
    exit 1
fi
image="${GPUSLACK_IMAGE:-localhost/gpuslack}:${GPUSLACK_TAG:-$version}"
base=localhost/gpuslack-base:bookworm
smoke=no
case "${1:-}" in
    --print) echo "$image"; exit 0 ;;
    --smoke) smoke=yes; shift ;;
esac
binary=${1:-target/release/gpuslack}
if [ ! -x "$binary" ]; then
    echo "build-debian.sh: $binary is not an executable: build it first (cargo build --release --locked)" >&2
    exit 1
fi
podman="${PODMAN:-podman} --storage-driver vfs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mmdebstrap --quiet --variant=essential --mode=unshare --include=ca-certificates \
    --format=tar bookworm "$work/base.tar" "${GPUSLACK_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
$podman import --quiet "$work/base.tar" "$base" >/dev/null
mkdir "$work/context"
cp "$binary" "$work/context/gpuslack"
$podman build --quiet --isolation chroot --build-arg "BASE=$base" \
    -f deploy/container/Containerfile.debian -t "$image" "$work/context" >/dev/null
echo "built $image"
if [ "$smoke" = yes ]; then
    port=${GPUSLACK_SMOKE_PORT:-19464}
    # Lowered, never raised nor kept: setting even the current values failed here (runc:
    # "error setting rlimit type 6: operation not permitted"); lowering needs no privilege.
    limits="--ulimit nofile=1024:1024 --ulimit nproc=4096:4096"
    # shellcheck disable=SC2086
    $podman --runtime runc --cgroup-manager cgroupfs run --rm --network host $limits \
        -v "$root/tests/fixtures/h200-diagnose-job:/trace:ro" "$image" \
        run --replay /trace/samples.csv --speed 0 --metrics dcgm \
        --prometheus "127.0.0.1:$port" --linger-s 10 >"$work/run.log" 2>&1 &
    agent=$!
    tries=0
    until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
        tries=$((tries + 1))
        if [ "$tries" -gt 100 ] || ! kill -0 "$agent" 2>/dev/null; then
            cat "$work/run.log" >&2
            echo "build-debian.sh: the image never answered /readyz" >&2
            exit 1
        fi
        sleep 0.2
    done
    # Ready means the first window is out, not the last: the replay runs on while it lingers.
    # It is done once the windows it produced stand still for two scrapes a second apart (as
    # tests/common's scrape_settled waits); then the scrape is taken.
    previous=""
    for _ in $(seq 1 9); do
        scrape=$(curl -sf "http://127.0.0.1:$port/metrics" || true)
        produced=$(grep -E '^gpuslack_agent_windows_total.*produced' <<<"$scrape" || true)
        if [ -n "$produced" ] && [ "$produced" = "$previous" ]; then
            break
        fi
        previous=$produced
        sleep 1
    done
    grep -E '^(DCGM_FI_DEV_POWER_USAGE|gpuslack_diagnosis_ratio)' <<<"$scrape"
    wait "$agent"
fi
