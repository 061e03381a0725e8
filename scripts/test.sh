#!/usr/bin/env bash
# The test suite, from a fresh Debian machine with Rust: installs what the export tests talk to
# (the Rotel OpenTelemetry collector and grpcio in a Python 3.11 venv, Prometheus from Debian)
# and NVRTC (NVIDIA's wheel, so that the benchmark kernels are compiled for sm_90 without a GPU),
# then runs every test of the workspace and checks the release build. Idempotent: a second run
# reuses what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/test-venv
if ! command -v prometheus >/dev/null || ! command -v curl >/dev/null; then
  if [ "$(id -u)" = 0 ]; then apt=(apt-get); else apt=(sudo apt-get); fi
  "${apt[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends prometheus curl >/dev/null
fi
if [ ! -x "$venv/bin/python" ]; then
  python=$(command -v python3.11 || command -v python3)
  "$python" -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check rotel==0.0.1a15 grpcio==1.85.3 \
  nvidia-cuda-nvrtc==13.5.37

export GPUSLACK_PYTHON="$PWD/$venv/bin/python"
export GPUSLACK_ROTEL
GPUSLACK_ROTEL=$("$GPUSLACK_PYTHON" -c 'import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))')
export GPUSLACK_PROMETHEUS
GPUSLACK_PROMETHEUS=$(command -v prometheus)

nvrtc_lib=$("$GPUSLACK_PYTHON" -c 'import os, nvidia; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))')
export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GPUSLACK_REQUIRE_NVRTC=1

cargo test --workspace --locked

# The release build: it links with build.rs's arguments, and its symbol ordering still packs the
# agent's code (a stale one costs the agent ~2 MiB of memory; scripts/device/text_order).
cargo build --release --locked
python3 scripts/device/text_order/functions.py check target/release/gpuslack link/symbol-order.txt
