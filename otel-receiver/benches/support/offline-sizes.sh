#!/usr/bin/env bash
# Offline replay throughput and peak RSS of two builds at three trace sizes (10, 40 and 144
# units of ten minutes of an 8-GPU node at 10 Hz; 144 is a day, 6,912,000 samples) on 1, 2 and
# 4 cores and on all of them, the builds alternated run by run so that a host's drift touches
# both alike; then each build's busiest threads (thread-times.py) on the day at four cores, and
# the day's CSV at four cores. Every output is checked against the first build's.
# Usage: offline-sizes.sh BIN_DIR OUT_DIR BEFORE AFTER, BIN_DIR holding `gen_trace`, both
# builds and thread-times.py. Lines: BUILD UNITS FORMAT CORES wall_s user_s sys_s peak_KiB.
set -u
B=$1 out=$2 before=$3 after=$4
mkdir -p "$out"
lscpu | grep -E "Model name|^CPU\(s\)|L3" >"$out/cpu.txt"
all=$(nproc)
for u in 10 40 144; do
  "$B/gen_trace" $u >/tmp/s$u.csv 2>/dev/null
  "$B/$before" convert /tmp/s$u.csv /tmp/s$u.gstrace 2>>"$out/sizes.txt"
  [ $u = 144 ] || rm -f /tmp/s$u.csv
done
one() { # BUILD UNITS FORMAT CORES
  /usr/bin/time -f "$1 $2 $3 $4 %e %U %S %M" -o /tmp/time.txt taskset -c 0-$(($4 - 1)) \
    "$B/$1" replay /tmp/s$2.$3 --format jsonl --tdp-w 700 >/tmp/run.jsonl
  cat /tmp/time.txt >>"$out/sizes.txt"
  if [ "$1" = "$before" ]; then
    cp /tmp/run.jsonl /tmp/ref-$2.jsonl
  elif ! cmp -s /tmp/run.jsonl /tmp/ref-$2.jsonl; then
    echo "OUTPUT DIFFERS: $1 $2 $3 $4" >>"$out/sizes.txt"
  fi
}
for u in 10 40 144; do
  for cores in 1 2 4 $all; do
    runs=3
    [ $cores = 4 ] && runs=5
    for _ in $(seq $runs); do
      one "$before" $u gstrace $cores
      one "$after" $u gstrace $cores
    done
  done
done
for _ in 1 2; do
  one "$before" 144 csv 4
  one "$after" 144 csv 4
done
for exe in "$before" "$after"; do
  taskset -c $((all - 1)) python3 "$B/thread-times.py" "$out/threads.txt" -- taskset -c 0-3 "$B/$exe" replay \
    /tmp/s144.gstrace --format jsonl --tdp-w 700 >/dev/null
done
rm -f /tmp/s*.csv /tmp/s*.gstrace /tmp/ref-*.jsonl /tmp/run.jsonl /tmp/time.txt
