#!/usr/bin/env bash
# The perturbation benchmark (issue #28): does `gpuslack run` beside a job slow its tokens or
# its training steps? Decode and training on GPU 0, with the agent off, at its default
# (adaptive) cadence, at 10 Hz, at 1 Hz, at 10 Hz without GPM (and any probe modes named),
# interleaved in shuffled rounds; then the table. Usage: run.sh BIN_DIR OUT_DIR [perturb.py flags, e.g. --modes ... --rounds N]
# Writes OUT_DIR/perturb.json (raw, per token), perturb.md (the table), summary.json, perturb.log
# and samplers.log (each agent's and probe's own output, its --usage table included).
. "$(dirname "$0")/../agent/common.sh"
set -o pipefail
shift 2
nvidia-smi --query-gpu=name,serial,driver_version,temperature.gpu,power.draw,clocks.sm,clocks.mem --format=csv >"$out/perturb.log" 2>&1
PYTHONUNBUFFERED=1 python3 "$here/perturb.py" --bin "$bin" --out "$out" "$@" 2>&1 | tee -a "$out/perturb.log"
rc=$?
python3 "$here/analyze.py" "$out/perturb.json" "$out/summary.json" >"$out/perturb.md" 2>>"$out/perturb.log"
cat "$out/perturb.md"
exit $rc
