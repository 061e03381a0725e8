#!/usr/bin/env bash
# Calibrates every GPU twice and compares the second run with the first (the 3% repeatability
# check). Keeps both profiles, both terminal outputs, the first run's session (samples, phases,
# facts: the form --from-recording reads) and, with REPORT=1, the second run's HTML under $OUT.
# Usage (device tool, carrying .device-bin): bash scripts/device/calibrate_repeat.sh [SECONDS]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp/gpuslack-calibrate}
mkdir -p "$out"
bin=${GPUSLACK_BIN:-.device-bin/gpuslack}
s=${1:-4}
for run in 1 2; do
    extra=(--save-session "$out/session")
    if [ "$run" = 2 ]; then
        extra=(--compare-with "$out/run1.toml")
        [ "${REPORT:-0}" = 1 ] && extra+=(--report "$out/run2.html")
    fi
    start=$(date +%s)
    timeout 280 "$bin" calibrate --gpu all --seconds-per-workload "$s" --out "$out/run$run.toml" \
        "${extra[@]}" > "$out/run$run.txt" 2> "/tmp/calibrate-run$run.log"
    echo "run $run: exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/run$run.txt"
    tail -3 "/tmp/calibrate-run$run.log"
done
