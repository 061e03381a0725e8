#!/usr/bin/env bash
# A hang on one GPU with its process list (tests/fixtures/h100-hang-job), one device call of
# about 100 s: `gpuslack record --interval-ms 100` and `gpuslack diagnose -- python3
# hang-job.py` at once, the recording for the fixture, the report as the user sees it live.
# Run from the repository root with the binary at .device-bin/gpuslack and OUT set.
set -u -o pipefail
out=${OUT:?OUT must name the folder for the results}
here=$(cd "$(dirname "$0")" && pwd)
bin=${GPUSLACK:-.device-bin/gpuslack}
export PYTHONUNBUFFERED=1
chmod +x "$bin" 2>/dev/null
"$bin" record --out "$out/samples.csv" --interval-ms 100 2>"$out/record.log" &
rec=$!
trap 'kill -TERM "$rec" 2>/dev/null' EXIT
sleep 2
timeout -k 5 150 "$bin" diagnose -- python3 "$here/hang-job.py" --phases-out "$out/phases.json" \
  >"$out/diagnose-live.txt" 2>&1
echo "diagnose exit $?" >>"$out/diagnose-live.txt"
sleep 2
kill -TERM "$rec"
wait "$rec"
echo "record exit $?" >>"$out/record.log"
trap - EXIT
cp "$here/hang-job.py" "$here/hang-job.sh" "$out/"
head -16 "$out/diagnose-live.txt"; tail -2 "$out/record.log"
