#!/usr/bin/env bash
# The binary trace format recorded live (issue #28): `record --out live.gstrace` for 24 s while
# a process computes (bf16 matmuls) and another holds memory, then the trace converted to CSV
# and both replayed on one thread and on eight, each of which must give its format's bytes on
# one (the CSV keeps the time to 0.1 ms, so a rate over a sample's interval may differ in its
# last digit from the binary's); the sizes, and the `diagnose --trace` report of the binary
# recording. Then `run --usage` at the default cadence on the idle GPU.
# Usage: binary_record.sh BIN_DIR OUT_DIR
. "$(dirname "$0")/common.sh"

report=$out/binary-record.txt
: >"$report"
python3 "$here/two_processes.py" hold 20 >/dev/null 2>&1 &
hold=$!
(sleep 6; python3 "$here/two_processes.py" compute 10) >/dev/null 2>&1 &
compute=$!
"$bin" record --out "$out/live.gstrace" --seconds 24 >>"$report" 2>&1
wait "$hold" "$compute"
"$bin" convert "$out/live.gstrace" "$out/live.csv" >>"$report" 2>&1
ls -l "$out/live.gstrace" "$out/live.csv" "$out/live.facts.json" >>"$report" 2>&1
for trace in live.gstrace live.csv; do
  for threads in 1 8; do
    GPUSLACK_TRACE_THREADS=$threads "$bin" replay "$out/$trace" --format jsonl \
      >"$out/replay-$trace-$threads.jsonl" 2>>"$report"
  done
done
for trace in live.gstrace live.csv; do
  cmp -s "$out/replay-$trace-8.jsonl" "$out/replay-$trace-1.jsonl" \
    && echo "same on 8 threads as on 1: $trace" >>"$report" \
    || echo "DIFFERS on 8 threads: $trace" >>"$report"
done
wc -l "$out/replay-live.csv-1.jsonl" >>"$report"
"$bin" replay "$out/live.gstrace" >>"$report" 2>&1
echo "== diagnose --trace live.gstrace" >>"$report"
"$bin" diagnose --trace "$out/live.gstrace" >>"$report" 2>&1
echo "== idle GPU, 30 s, cadence adaptive (the default)" >>"$report"
"$bin" run --seconds 30 --usage >>"$report" 2>&1
rm -f "$out"/replay-*.jsonl "$out/live.csv"
echo "== done" >>"$report"
