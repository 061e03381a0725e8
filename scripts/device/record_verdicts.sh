#!/usr/bin/env bash
# Records the verdict fixtures on the device machine: two `gpuslack record`s side by side (with
# GPM and with --no-gpm, so both paths see the same workloads), the bench workloads, then the
# PyTorch phases of verdicts.py; `gpuslack run` beside the spin, so the live hang verdict shows
# in its log. Usage: record_verdicts.sh BIN_DIR OUT_DIR
set -u
bin=$1/gpuslack
out=$2
mkdir -p "$out/gpm" "$out/nogpm"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$bin" record --out "$out/gpm/samples.csv" --interval-ms 100 2>"$out/record-gpm.log" &
rec_gpm=$!
"$bin" record --no-gpm --out "$out/nogpm/samples.csv" --interval-ms 100 2>"$out/record-nogpm.log" &
rec_nogpm=$!
sleep 3
here=$(cd "$(dirname "$0")" && pwd)
# The live agent beside every phase: its verdict changes are logged with their time.
"$bin" run 2>"$out/run.log" &
agent=$!
PYTHONUNBUFFERED=1 python3 "$here/verdicts.py" "$out/gpm" >"$out/verdicts.log" 2>&1
echo "verdicts.py exit $?" >>"$out/verdicts.log"
kill -TERM "$agent"
wait "$agent"
"$bin" bench tiny memory compute pcie starved --seconds 4 --format json >"$out/bench.json" 2>"$out/bench.log"
echo "bench exit $?" >>"$out/bench.log"
sleep 2
# TERM, not INT: a non-interactive shell starts background jobs with SIGINT ignored.
kill -TERM "$rec_gpm" "$rec_nogpm"
wait "$rec_gpm" "$rec_nogpm"
python3 "$here/bench_labels.py" "$out/bench.json" "$out/gpm"
cp "$out/gpm/phases.json" "$out/gpm/labels.json" "$out/nogpm/"
for d in gpm nogpm; do
  "$bin" score "$out/$d/samples.csv" "$out/$d/labels.json" >"$out/score-$d.txt" 2>&1
done
# The agent's own cost with the new fields (NVML's PCIe and NVLink counters), GPU idle.
"$bin" run --seconds 20 --usage >"$out/overhead-10hz.txt" 2>&1
