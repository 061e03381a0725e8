#!/usr/bin/env bash
# A job's identity read live from its processes' environments (docs/EXPORT.md,
# `gpuslack.job.info`): a computing process started as a Slurm step's rank would be, then one
# started as torchrun's, each beside a root agent serving /metrics and `record` writing the
# processes column; then an unprivileged agent, which cannot read root's environ and says so
# once at debug level. Usage: jobs.sh BIN_DIR OUT_DIR.
. "$(dirname "$0")/common.sh"

slurm_env="SLURM_JOB_ID=4711 SLURM_STEP_ID=0 SLURM_ARRAY_TASK_ID=3 SLURM_JOB_USER=alice SLURM_JOB_ACCOUNT=vision SLURM_JOB_PARTITION=h200 RANK=0 LOCAL_RANK=0 WORLD_SIZE=16 MASTER_ADDR=node-a MASTER_PORT=29500"
torch_env="TORCHELASTIC_RUN_ID=run-42 RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 MASTER_ADDR=node-a MASTER_PORT=29400"

for case in slurm torch; do
  eval "vars=\$${case}_env"
  echo "== $case: env $vars python3 two_processes.py compute 16" >"$out/$case.txt"
  env $vars python3 "$here/two_processes.py" compute 16 &
  job=$!
  sleep 4
  "$bin" record --out "$out/$case.csv" --seconds 4 2>/dev/null
  "$bin" run --prometheus 127.0.0.1:9464 --seconds 9 2>/dev/null &
  agent=$!
  sleep 7
  scrape 9464 /metrics | grep -E "^gpuslack_job_info|^gpuslack_diagnosis_ratio.*} 1" >>"$out/$case.txt"
  echo "-- record's processes column, last row:" >>"$out/$case.txt"
  grep -o '"\[{.*}\]"' "$out/$case.csv" | tail -1 >>"$out/$case.txt"
  wait "$agent" "$job"
done

echo "== unprivileged agent beside a root rank" >"$out/unprivileged.txt"
id gpuslack >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin gpuslack
cp "$bin" /tmp/gpuslack-unpriv && chmod 755 /tmp/gpuslack-unpriv
env $slurm_env python3 "$here/two_processes.py" compute 14 &
job=$!
sleep 4
setpriv --reuid=gpuslack --regid=gpuslack --clear-groups env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
  RUST_LOG=gpuslack_receiver::attribution=debug /tmp/gpuslack-unpriv run --prometheus 127.0.0.1:9465 --seconds 8 \
  2>"$out/unprivileged.log" &
agent=$!
sleep 6
scrape 9465 /metrics | grep -E "^gpuslack_job_info" >>"$out/unprivileged.txt"
wait "$agent" "$job"
echo "-- environ debug lines:" >>"$out/unprivileged.txt"
grep -c "environment unreadable" "$out/unprivileged.log" >>"$out/unprivileged.txt"
grep -m1 "environment unreadable" "$out/unprivileged.log" >>"$out/unprivileged.txt"
