#!/usr/bin/env bash
# The bundled demo's recording (tests/fixtures/h100-diagnose-job), in one device call of about
# 4 minutes. Run from the repository root with the release binary at .device-bin/gpuslack
# (GPUSLACK=path says otherwise) and OUT set to the results folder:
#
#   1. `gpuslack doctor`, then `gpuslack record --interval-ms 50` around demo-job.py: the trace,
#      its facts and the job's own phases (phases.json, job.log) into $OUT/demo.tar.gz;
#   2. `gpuslack diagnose -- python3 demo-job.py --seconds 3`: the live report on the same job
#      ($OUT/diagnose-live.txt), that the report and the recording say the same;
#   3. Nsight Compute's SpeedOfLight on one warmed-up step of each phase ($OUT/ncu.csv, '### PHASE'
#      before each phase's CSV, and sol.json by sol.py): the truth the labels come from.
set -u -o pipefail
out=${OUT:?OUT must name the folder for the results}
here=$(cd "$(dirname "$0")" && pwd)
bin=${GPUSLACK:-.device-bin/gpuslack}
export PYTHONUNBUFFERED=1
export PATH=$PATH:/usr/local/cuda/bin
[ -x "$bin" ] || chmod +x "$bin" 2>/dev/null
[ -x "$bin" ] || { echo "no gpuslack binary at $bin (set GPUSLACK)" >&2; exit 1; }
SECONDS=0
work=$(mktemp -d /tmp/demo-job.XXXXXX)

nvidia-smi >"$work/nvidia-smi.txt" 2>&1
"$bin" doctor >"$work/doctor.txt" 2>&1
echo "doctor rc=$?" >>"$work/doctor.txt"
"$bin" record --out "$work/samples.csv" --interval-ms 50 2>"$work/record.log" &
rec=$!
# The recorder stopped whatever happens below (TERM: a background job ignores INT).
trap 'kill -TERM "$rec" 2>/dev/null' EXIT
sleep 2
timeout -k 5 120 python3 "$here/demo-job.py" --phases-out "$work/phases.json" >"$work/job.log" 2>&1
echo "demo-job.py exit $?" >>"$work/job.log"
sleep 2
kill -TERM "$rec"
wait "$rec"
echo "record exit $?" >>"$work/record.log"
trap - EXIT
cp "$here/demo-job.py" "$here/demo-job.sh" "$work/"
tar -czf "$out/demo.tar.gz" -C "$work" .
cp "$work/job.log" "$work/record.log" "$work/doctor.txt" "$out/"
cat "$work/job.log" "$work/record.log"
echo "recorded at $SECONDS s"

timeout -k 5 90 "$bin" diagnose -- python3 "$here/demo-job.py" --seconds 3 >"$out/diagnose-live.txt" 2>&1
echo "diagnose exit $? at $SECONDS s"

: >"$out/ncu.csv"
for phase in one_block_sum torch_sum gemm_bf16 starved_bursts; do
  echo "### $phase" >>"$out/ncu.csv"
  timeout -k 5 60 ncu --profile-from-start off --clock-control none --section SpeedOfLight -c 150 --csv \
    python3 "$here/demo-job.py" --sol "$phase" >>"$out/ncu.csv" 2>>"$out/ncu.log"
  echo "ncu $phase exit $? at $SECONDS s"
done
python3 "$here/sol.py" "$out/ncu.csv" >"$out/sol.json" && cat "$out/sol.json"
rm -rf "$work"
