#!/usr/bin/env bash
# Offline replay throughput and peak RSS by core count (issue #28 part 3), for a host with
# more cores than the dev VM. Usage: offline-cores.sh BIN_DIR OUT_DIR, where BIN_DIR holds
# `gpuslack` (this build), `gpuslack-before` (the build to compare with) and `gen_trace`
# (cargo build --release -p gpuslack-receiver --example gen_trace). It runs on 1, 2, 4 and 8
# cores and on all of them; each figure is the best of three runs, and every run's output is
# checked byte for byte against the before build's on one core.
set -euo pipefail
bin=$1 out=$2
mkdir -p "$out"
lscpu | grep -E "Model name|^CPU\(s\)|MHz" > "$out/cpu.txt" || true
measure() { # CORES BINARY TRACE -> "wall_s peak_kib"
  local cores=$1 exe=$2 trace=$3 best=999 peak=0
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$out/time.txt" taskset -c "0-$((cores - 1))" \
      "$exe" replay "$trace" --format jsonl --tdp-w 700 > "$out/run.jsonl"
    read -r wall kib < "$out/time.txt"
    best=$(python3 -c "print(min($best, $wall))")
    peak=$kib
    cmp -s "$out/run.jsonl" "$out/ref.jsonl" || { echo "OUTPUT DIFFERS: $exe $cores $trace"; exit 1; }
  done
  echo "$best $peak"
}
for units in 1 10 40; do
  trace=/tmp/gen-$units.csv
  "$bin/gen_trace" "$units" > "$trace" 2> "$out/gen-$units.txt"
  samples=$(grep -o '^[0-9]*' "$out/gen-$units.txt")
  "$bin/gpuslack-before" replay "$trace" --format jsonl --tdp-w 700 > "$out/ref.jsonl"
  # 1, 2, 4, 8 cores and every core the host has (the reader parses on at most 8 threads).
  for cores in $(printf '%s\n' 1 2 4 8 "$(nproc)" | sort -nu | awk -v n="$(nproc)" '$1 <= n'); do
    for exe in gpuslack gpuslack-before; do
      [ "$exe" = gpuslack-before ] && [ "$cores" != 1 ] && continue
      read -r wall kib <<< "$(measure "$cores" "$bin/$exe" "$trace")"
      rate=$(python3 -c "print(f'{$samples / $wall / 1e6:.2f}')")
      echo "units=$units samples=$samples build=$exe cores=$cores wall_s=$wall Msamples_per_s=$rate peak_kib=$kib" | tee -a "$out/offline.txt"
    done
  done
  rm -f "$trace"
done
