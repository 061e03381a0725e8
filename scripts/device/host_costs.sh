#!/usr/bin/env bash
# Runs the host-cost criterion benches (bench-kernels/benches/host_costs.rs), built here with
# `cargo bench -p gpuslack-bench-kernels --no-run` and copied to .device-bin/host_costs.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp/gpuslack-host-costs}
mkdir -p "$out"
timeout 120 .device-bin/host_costs --bench --warm-up-time 1 --measurement-time 3 --noplot 2>&1 \
    | tee "$out/host_costs.txt"
