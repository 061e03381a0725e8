#!/usr/bin/env bash
# The latency workloads on one GPU (issue #50), in under 9 minutes:
#   1. `bench latency --seconds 3 --format json`: each pattern and fix, its share of the DRAM
#      peak (DRAM sectors and useful bytes), the fixes' speed-ups, the live readings beside them;
#   2. a live calibration of GPU 0 with every workload, the latency ones included, kept with
#      --save-session (the form `calibrate --from-recording` reads: a tests/fixtures candidate),
#      then `--from-recording` on that session (the validation as CI will run it);
#   3. Nsight Compute's speed of light (and DRAM bytes) of each latency kernel and its fix, at
#      the GPU's own clocks, summarised per kernel by scripts/device/sol.py.
# Usage (device tool, carrying .device-bin): bash scripts/device/latency/run.sh
# Comes back under $OUT (at most 8 files): summary.txt, bench-latency.json, calibrate.txt,
# from-recording.txt, sol.json, latency.tar.gz (all of it: the session folder, the profile,
# the HTML report, the raw ncu CSV and every log).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PATH:/usr/local/cuda/bin
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp/gpuslack-latency}
mkdir -p "$out"
bin=${GPUSLACK_BIN:-.device-bin/gpuslack}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
mkdir -p "$work/logs"
budget_s=${BUDGET_S:-530}
started=$SECONDS
left() { echo $(( budget_s - (SECONDS - started) )); }
note() { echo "[$(( SECONDS - started )) s] $*" | tee -a "$work/summary.txt"; }

# Every latency kernel and its fix (kernels.cu), in the order the workload runs them.
kernels=(latency_gather latency_gather_sorted latency_chase latency_scatter latency_scatter_smem
         latency_copy_narrow latency_copy_full)
regex="^($(IFS='|'; echo "${kernels[*]}"))\$"

nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm,memory.total --format=csv \
    | tee "$work/gpus.csv" >> "$work/summary.txt"
command -v ncu >/dev/null && ncu --version | tail -1 >> "$work/summary.txt"

# 1. bench: 3 s per part, so that power and GPM settle beside each figure.
note "bench latency"
timeout 150 "$bin" bench latency --seconds 3 --format json \
    > "$work/bench-latency.json" 2> "$work/logs/bench.log"
note "bench: exit $?"
tail -3 "$work/logs/bench.log" >> "$work/summary.txt"
# The figures beside the live readings, one line per variant, for a first look.
[ -s "$work/bench-latency.json" ] && python3 - "$work/bench-latency.json" >> "$work/summary.txt" 2>&1 <<'PY'
import json, sys
f = lambda v, d=1: '-' if v is None else f'{v:.{d}f}'
for r in json.load(open(sys.argv[1])):
    d, l = r['details'], r.get('live') or {}
    print(f"{r['variant']:<18} {f(r['value'])} {r['unit']:<12} useful {f(d.get('useful_pct_of_peak'))}% "
          f"speedup {f(d.get('speedup_x'), 2)} | SM {f(l.get('sm_active_pct'))}% "
          f"{l.get('busiest_pipe') or '-'} {f(l.get('busiest_pipe_pct'))}% DRAM {f(l.get('dram_pct'))}% "
          f"{f(l.get('power_w'), 0)} W")
PY

# 2. calibrate GPU 0 with every workload (idle, held, tiny, pcie, memory, compute, latency).
note "calibrate (live, session saved)"
timeout 360 "$bin" calibrate --gpu 0 --seconds-per-workload 5 \
    --save-session "$work/session" --out "$work/profile.toml" --report "$work/report.html" \
    > "$work/calibrate.txt" 2> "$work/logs/calibrate.log"
note "calibrate: exit $?"
if [ -f "$work/session/phases.json" ]; then
    timeout 60 "$bin" calibrate --from-recording "$work/session" \
        > "$work/from-recording.txt" 2> "$work/logs/from-recording.log"
    note "calibrate --from-recording: exit $?"
fi

# 3. Nsight Compute: one run profiling the second launch of every latency kernel (the first
#    is a warm-up); then, while time is left, one run per kernel that run missed.
ncu_csv="$work/ncu.csv"
: > "$ncu_csv"
if command -v ncu >/dev/null; then
    t=$(( $(left) - 30 ))
    if [ "$t" -gt 60 ]; then
        note "ncu: every latency kernel in one run (timeout $(( t < 240 ? t : 240 )) s)"
        echo "### all" >> "$ncu_csv"
        timeout $(( t < 240 ? t : 240 )) ncu --clock-control none --section SpeedOfLight \
            --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv \
            --kernel-id "::regex:${regex}:2" \
            "$bin" bench latency >> "$ncu_csv" 2> "$work/logs/ncu-all.log"
        note "ncu (all): exit $?"
    fi
    for k in "${kernels[@]}"; do
        grep -q "\"$k\"" "$ncu_csv" && continue
        t=$(( $(left) - 15 ))
        if [ "$t" -lt 45 ]; then
            note "ncu: no time left for $k"
            continue
        fi
        note "ncu: $k alone (timeout $(( t < 90 ? t : 90 )) s)"
        echo "### $k" >> "$ncu_csv"
        timeout $(( t < 90 ? t : 90 )) ncu --clock-control none --section SpeedOfLight --csv \
            -k "regex:^${k}\$" --launch-skip 1 -c 1 \
            "$bin" bench latency >> "$ncu_csv" 2> "$work/logs/ncu-$k.log"
        note "ncu ($k): exit $?"
    done
    python3 "$here/../sol.py" --per-kernel "$ncu_csv" > "$work/sol.json" 2> "$work/logs/sol.log"
    note "sol.py: exit $?"
else
    note "ncu not found: no speed of light"
fi

note "done in $(( SECONDS - started )) s"
for f in summary.txt bench-latency.json calibrate.txt from-recording.txt sol.json; do
    [ -f "$work/$f" ] && cp "$work/$f" "$out/$f"
done
tar -czf "$out/latency.tar.gz" -C "$work" .
ls -la "$out"
