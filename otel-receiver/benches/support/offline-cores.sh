#!/usr/bin/env bash
# Offline replay throughput and peak RSS by core count (issue #28 part 3), for a host with
# more cores than the dev VM. Usage: offline-cores.sh BIN_DIR OUT_DIR [UNITS...], where BIN_DIR
# holds `gpuslack` (this build), `gpuslack-before` (the build to compare with) and `gen_trace`
# (cargo build --release -p gpuslack-receiver --example gen_trace); a unit is ten minutes of an
# 8-GPU node at 10 Hz (48,000 samples), 144 units a day. For each size it replays the CSV trace
# with both builds and its binary copy (`gpuslack convert`, `.gstrace`) with this one, on 1, 2,
# 4 and 8 cores and on all of them; each figure is the best of three runs, and every run's
# output is checked byte for byte against the before build's on the CSV trace.
set -euo pipefail
bin=$1 out=$2
shift 2
units_list=${*:-1 10 40 144}
mkdir -p "$out"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
lscpu | grep -E "Model name|^CPU\(s\)|MHz" > "$out/cpu.txt" || true
measure() { # CORES BINARY TRACE: sets best (s) and peak (KiB)
  local cores=$1 exe=$2 trace=$3 wall kib
  best=999 peak=0
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$scratch/time.txt" taskset -c "0-$((cores - 1))" \
      "$exe" replay "$trace" --format jsonl --tdp-w 700 > "$scratch/run.jsonl"
    read -r wall kib < "$scratch/time.txt"
    best=$(python3 -c "print(min($best, $wall))")
    peak=$(( kib > peak ? kib : peak ))
    cmp -s "$scratch/run.jsonl" "$scratch/ref.jsonl" || { echo "OUTPUT DIFFERS: $exe $cores $trace"; exit 1; }
  done
}
for units in $units_list; do
  trace=/tmp/gen-$units.csv
  "$bin/gen_trace" "$units" > "$trace" 2> "$scratch/gen.txt"
  samples=$(grep -o "^[0-9]*" "$scratch/gen.txt")
  # The sizes of both traces, and the conversion's own time.
  /usr/bin/time -f "convert: %e s, peak %M KiB" "$bin/gpuslack" convert "$trace" "${trace%.csv}.gstrace" 2>> "$out/traces.txt"
  "$bin/gpuslack-before" replay "$trace" --format jsonl --tdp-w 700 > "$scratch/ref.jsonl"
  # 1, 2, 4, 8 cores and every core the host has (the reader parses on at most 8 threads).
  for cores in $(printf '%s\n' 1 2 4 8 "$(nproc)" | sort -nu | awk -v n="$(nproc)" '$1 <= n'); do
    for run in gpuslack:csv gpuslack:gstrace gpuslack-before:csv; do
      exe=${run%%:*} format=${run##*:}
      [ "$exe" = gpuslack-before ] && [ "$cores" != 1 ] && continue
      measure "$cores" "$bin/$exe" "${trace%.csv}.$format"
      rate=$(python3 -c "print(f'{$samples / $best / 1e6:.2f}')")
      echo "units=$units samples=$samples build=$exe format=$format cores=$cores wall_s=$best Msamples_per_s=$rate peak_kib=$peak" | tee -a "$out/offline.txt"
    done
  done
  rm -f "$trace" "${trace%.csv}.gstrace"
done
