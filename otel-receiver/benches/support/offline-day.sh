#!/usr/bin/env bash
# Does a long trace replay slower a sample than a shorter one? The 40-unit binary trace (118 MB)
# fits the device host's 300 MiB L3, a day's (144 units, 429 MB) does not. Alternating the two,
# each 40-unit run follows a 144-unit one that evicted it. Output to /dev/null; 4 cores five
# times each, 1 core twice each. Usage: offline-day.sh BIN_DIR OUT_DIR, BIN_DIR holding
# `gpuslack` and `gen_trace`.
set -u
B=$1 out=$2
mkdir -p "$out"
for u in 40 144; do
  "$B/gen_trace" $u > /tmp/d$u.csv 2>/dev/null
  "$B/gpuslack" convert /tmp/d$u.csv /tmp/d$u.gstrace 2>/dev/null
  rm -f /tmp/d$u.csv
done
for round in 1 2 3 4 5; do
  for u in 40 144; do
    for cores in 4 1; do
      [ "$cores" = 1 ] && [ "$round" -gt 2 ] && continue
      /usr/bin/time -f "units=$u cores=$cores %e s %U user %S sys %M KiB" taskset -c 0-$((cores - 1)) \
        "$B/gpuslack" replay /tmp/d$u.gstrace --format jsonl --tdp-w 700 2>&1 >/dev/null | tee -a "$out/day.txt"
    done
  done
done
rm -f /tmp/d40.gstrace /tmp/d144.gstrace
