#!/usr/bin/env bash
# Does a long trace replay slower a sample than a shorter one, and which build is faster? The
# 40-unit binary trace (118 MB) fits the device host's 300 MiB L3, a day's (144 units, 429 MB)
# does not. Alternating the two, each 40-unit run follows a 144-unit one that evicted it; the
# builds alternate within each round. Output to /dev/null, 4 cores five times each, 1 core twice
# each; then each build once more on the day's trace with its lines written to a file, whose
# digest must be the same for every build. Usage: offline-day.sh BIN_DIR OUT_DIR [BUILD...],
# BIN_DIR holding `gen_trace` and each BUILD (default `gpuslack`; the first converts).
set -u
B=$1 out=$2
shift 2
builds=("${@:-gpuslack}")
mkdir -p "$out"
for u in 40 144; do
  "$B/gen_trace" $u > /tmp/d$u.csv 2>/dev/null
  "$B/${builds[0]}" convert /tmp/d$u.csv /tmp/d$u.gstrace 2>/dev/null
  rm -f /tmp/d$u.csv
done
for round in 1 2 3 4 5; do
  for u in 40 144; do
    for cores in 4 1; do
      [ "$cores" = 1 ] && [ "$round" -gt 2 ] && continue
      for exe in "${builds[@]}"; do
        /usr/bin/time -f "build=$exe units=$u cores=$cores %e s %U user %S sys %M KiB" \
          taskset -c 0-$((cores - 1)) "$B/$exe" replay /tmp/d$u.gstrace --format jsonl \
          --tdp-w 700 2>&1 >/dev/null | tee -a "$out/day.txt"
      done
    done
  done
done
for exe in "${builds[@]}"; do
  /usr/bin/time -f "build=$exe units=144 cores=4 to a file %e s %U user %S sys %M KiB" \
    taskset -c 0-3 "$B/$exe" replay /tmp/d144.gstrace --format jsonl --tdp-w 700 \
    2>&1 >/tmp/d144.jsonl | tee -a "$out/day.txt"
  echo "build=$exe lines=$(wc -l < /tmp/d144.jsonl) sha256=$(sha256sum < /tmp/d144.jsonl | cut -c1-16)" \
    | tee -a "$out/day.txt"
done
rm -f /tmp/d40.gstrace /tmp/d144.gstrace /tmp/d144.jsonl
