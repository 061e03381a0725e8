#!/usr/bin/env bash
# Runs the reference workloads on the device machine and keeps the output under $OUT: once at
# fixed counts (the rates), once for 3 s per part (power, clocks and throttle reasons settled).
# Usage (device tool, carrying .device-bin): bash scripts/device/bench.sh [WORKLOAD...]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp/gpuslack-bench}
mkdir -p "$out"
bin=${GPUSLACK_BIN:-.device-bin/gpuslack}
nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm --format=csv | tee "$out/gpus.csv"
timeout 240 "$bin" bench "$@" 2>&1 | tee "$out/bench-rates.txt"
timeout 240 "$bin" bench "$@" --seconds 3 2>&1 | tee "$out/bench-power.txt"
