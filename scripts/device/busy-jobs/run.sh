#!/usr/bin/env bash
# The busy-jobs recording for issue #46, in two device calls (one call runs 10 minutes at most), with
# an optional one-minute check before them:
#
#   scripts/device/busy-jobs/run.sh record        (~5 min) `gpuslack record --interval-ms 100` around
#       jobs.py, `gpuslack doctor`, then each job's kernels a step (sol_jobs.py --count). Back in $OUT:
#       busy-jobs.tar.gz (samples.csv, samples.facts.json, phases.json, jobs.log, record.log,
#       doctor.txt, kernels.json and the scripts), and jobs.log, record.log for a first look.
#   scripts/device/busy-jobs/run.sh check         (~1 min, optional, first) every job built and run for
#       4 steps, one of them under torch.profiler: $OUT/kernels.json holds each job's kernels a step
#       (against ncu's -c) or its error; a job that fails here would be missing from the recording.
#   scripts/device/busy-jobs/run.sh ncu [JOB...]  (<= 9 min) Nsight Compute's SpeedOfLight on one
#       warmed-up step of each job (or those named), `timeout` 60 s a job, within a budget of 500 s in
#       all: jobs past it are listed as skipped in ncu.log (run them in a later call). Back in $OUT:
#       ncu.csv ('### JOB' before each job's CSV, as sol.py reads it), sol.json, ncu.log.
#
# Run from the repository root with the release binary at .device-bin/gpuslack (GPUSLACK=path says
# otherwise). Tunables: NCU_COUNT (kernels profiled a job, 150), NCU_TIMEOUT_S (60), NCU_BUDGET_S (500).
# Then, here: unpack the tar into the fixture's folder, put ncu.csv and sol.json beside it, and run
# label.py on that folder (README.md beside this script).
set -u -o pipefail

usage() { echo "usage: $0 record | check | ncu [JOB...]  (with OUT set to the results folder)" >&2; exit 2; }
[ $# -ge 1 ] || usage
mode=$1
shift
out=${OUT:?OUT must name the folder for the results}
here=$(cd "$(dirname "$0")" && pwd)
bin=${GPUSLACK:-.device-bin/gpuslack}
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$out"

record() {
  [ -x "$bin" ] || { echo "no gpuslack binary at $bin (set GPUSLACK)" >&2; exit 1; }
  local work rec
  work=$(mktemp -d /tmp/busy-jobs.XXXXXX)
  nvidia-smi >"$work/nvidia-smi.txt" 2>&1
  "$bin" doctor >"$work/doctor.txt" 2>&1
  echo "doctor rc=$?" >>"$work/doctor.txt"
  "$bin" record --out "$work/samples.csv" --interval-ms 100 2>"$work/record.log" &
  rec=$!
  # The recorder stopped whatever happens below (TERM: a background job ignores INT).
  trap 'kill -TERM "$rec" 2>/dev/null' EXIT
  sleep 3
  python3 "$here/jobs.py" "$work" >"$work/jobs.log" 2>&1
  echo "jobs.py exit $?" >>"$work/jobs.log"
  sleep 3
  kill -TERM "$rec"
  wait "$rec"
  echo "record exit $?" >>"$work/record.log"
  trap - EXIT
  # Kernels in one step of each job: whether ncu's -c saw whole steps. Not part of the trace.
  timeout -k 5 100 python3 "$here/sol_jobs.py" --count "$work/kernels.json" >"$work/count.log" 2>&1
  echo "count exit $?" >>"$work/count.log"
  cp "$here/jobs.py" "$here/sol_jobs.py" "$here/sol.py" "$work/"
  tar -czf "$out/busy-jobs.tar.gz" -C "$work" .
  cp "$work/jobs.log" "$work/record.log" "$out/"
  cat "$work/jobs.log" "$work/record.log" "$work/count.log"
  rm -rf "$work"
}

find_ncu() {
  command -v ncu && return
  local c
  for c in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    [ -x "$c" ] && { echo "$c"; return; }
  done
  return 1
}

profile() {
  local ncu count per_job budget started job left limit t rc pgid parts
  ncu=$(find_ncu) || { echo "ncu not found (PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute)" >&2; exit 1; }
  count=${NCU_COUNT:-150}
  per_job=${NCU_TIMEOUT_S:-60}
  budget=${NCU_BUDGET_S:-500}
  local jobs=("$@")
  if [ ${#jobs[@]} -eq 0 ]; then
    mapfile -t jobs < <(python3 "$here/sol_jobs.py" --list) || { echo "sol_jobs.py --list failed" >&2; exit 1; }
  fi
  "$ncu" --version >"$out/ncu.log" 2>&1
  parts=$(mktemp -d /tmp/busy-ncu.XXXXXX)
  started=$SECONDS
  for job in "${jobs[@]}"; do
    left=$((budget - (SECONDS - started)))
    if [ "$left" -lt 20 ]; then
      echo "$job skipped: the budget of ${budget} s is spent" | tee -a "$out/ncu.log"
      continue
    fi
    limit=$((left < per_job ? left : per_job))
    t=$SECONDS
    # Each job's output to its own file: a timed-out ncu's target can still print after `timeout`
    # returns (h100-everyday's convnext profile landed under the next job's '###' that way).
    # timeout leads a process group of its own; whatever of it outlives ncu is waited for, then killed,
    # so that no target still holds the profiler when the next job starts.
    timeout -k 10 "$limit" "$ncu" --profile-from-start off --clock-control none --section SpeedOfLight \
      -c "$count" --csv python3 "$here/sol_jobs.py" "$job" >"$parts/$job.csv" 2>"$parts/$job.log" &
    pgid=$!
    wait "$pgid"
    rc=$?
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 -- "-$pgid" 2>/dev/null || break
      sleep 2
    done
    kill -KILL -- "-$pgid" 2>/dev/null && echo "$job: killed what was left of its process group" >>"$parts/$job.log"
    echo "$job rc=$rc $((SECONDS - t)) s (limit ${limit} s; 124 = timed out)" | tee -a "$out/ncu.log"
  done
  : >"$out/ncu.csv"
  for job in "${jobs[@]}"; do
    [ -e "$parts/$job.csv" ] || continue
    echo "### $job" >>"$out/ncu.csv"
    cat "$parts/$job.csv" >>"$out/ncu.csv"
    { echo "--- $job"; cat "$parts/$job.log"; } >>"$out/ncu.log"
  done
  rm -rf "$parts"
  python3 "$here/sol.py" "$out/ncu.csv" >"$out/sol.json"
  cat "$out/sol.json"
}

check() {
  timeout -k 5 150 python3 "$here/sol_jobs.py" --count "$out/kernels.json" 2>&1 | tee "$out/check.log"
  cat "$out/kernels.json"
}

case $mode in
  record) [ $# -eq 0 ] || usage; record ;;
  check) [ $# -eq 0 ] || usage; check ;;
  ncu) profile "$@" ;;
  *) usage ;;
esac
