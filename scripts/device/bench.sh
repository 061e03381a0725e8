#!/usr/bin/env bash
# Runs the reference workloads on the device machine and keeps the output under $OUT.
# Usage (device tool, carrying .device-bin): bash scripts/device/bench.sh [WORKLOAD...]
set -euo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp/gpuslack-bench}
mkdir -p "$out"
bin=${GPUSLACK_BIN:-.device-bin/gpuslack}
nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm --format=csv | tee "$out/gpus.csv"
"$bin" bench "$@" --seconds 3 --format json > "$out/bench.json" 2> "$out/bench.log" || { cat "$out/bench.log"; exit 1; }
"$bin" bench "$@" --seconds 3 2>&1 | tee "$out/bench.txt"
