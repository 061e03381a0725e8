#!/usr/bin/env bash
# The adaptive cadence on the device machine (issue #28): `run --seconds 60 --usage` on an idle
# GPU at the default (adaptive), at --interval-ms 1000 and at --interval-ms 100; then the default
# beside a workload whose phases change (phases.py: nothing, matmuls, a held context, matmuls,
# exit), where the share of time at 100 ms and the triggers show the escalation, with the
# verdict changes the agent logged. Usage: cadence.sh BIN_DIR OUT_DIR
. "$(dirname "$0")/common.sh"

report=$out/cadence.txt
: >"$report"
for mode in adaptive 1000 100; do
  echo "== idle GPU, 60 s, cadence $mode" >>"$report"
  if [ "$mode" = adaptive ]; then
    "$bin" run --seconds 60 --usage >>"$report" 2>&1
  else
    "$bin" run --seconds 60 --interval-ms "$mode" --usage >>"$report" 2>&1
  fi
done
echo "== phased workload (phases.py), 60 s, cadence adaptive" >>"$report"
python3 "$here/phases.py" >"$out/phases.txt" 2>&1 &
work=$!
"$bin" -v run --seconds 60 --usage >"$out/phased-run.txt" 2>&1
wait "$work"
cat "$out/phases.txt" >>"$report"
cat "$out/phased-run.txt" >>"$report"
echo "== done" >>"$report"
