#!/usr/bin/env bash
# The health metrics live on the device machine, and what the agent needs root for. Usage:
# health.sh BIN_DIR OUT_DIR. 1. The agent as root, scraped: Xid, ECC, row remapping, PCIe
# replays, NVLink errors, memory temperature, encoder/decoder use, hw.status. 2. A recording
# with the health columns while train.py runs (a fixture for the dashboard tests). 3. The same
# agent as an unprivileged user beside a root process: which reads it loses.
. "$(dirname "$0")/common.sh"
health='^(hw_errors_total|hw_status|hw_temperature|hw_gpu_utilization_ratio|gpuslack_ecc|gpuslack_memory_(remap|retire|swing)|gpuslack_xid|gpuslack_diagnosis_(time|energy)|hw_energy|target_info)'

echo "== 1. health metrics, as root" >"$out/health.txt"
"$bin" run --seconds 14 --prometheus 127.0.0.1:9465 --usage -v >"$out/usage-root.txt" 2>"$out/agent-root.log" &
agent=$!
sleep 12
scrape 9465 | grep -E "$health" >>"$out/health.txt"
wait "$agent"; echo "agent exit $?" >>"$out/health.txt"
grep -E "Health|Xid|Codec|MemoryTemperature|field" "$out/usage-root.txt" >>"$out/health.txt"

echo "== 2. recording with the health columns beside train.py" >"$out/record.txt"
mkdir -p "$out/h200-health"
python3 "$here/train.py" >"$out/train.log" 2>&1 &
train=$!
sleep 3
"$bin" record --seconds 25 --out "$out/h200-health/samples.csv" >>"$out/record.txt" 2>&1
kill "$train" 2>/dev/null; wait "$train" 2>/dev/null
head -c 1500 "$out/h200-health/samples.csv" >>"$out/record.txt"; echo >>"$out/record.txt"
ls -la "$out/h200-health" >>"$out/record.txt"

echo "== 3. unprivileged agent beside a root process" >"$out/unprivileged.txt"
ls -l /dev/nvidia* >>"$out/unprivileged.txt" 2>&1
id gpuslack >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin gpuslack
cp "$bin" /tmp/gpuslack-unpriv && chmod 755 /tmp/gpuslack-unpriv
python3 "$here/two_processes.py" compute 20 >/dev/null 2>&1 &
compute=$!
sleep 4
setpriv --reuid=gpuslack --regid=gpuslack --clear-groups env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
  /tmp/gpuslack-unpriv run --seconds 12 --prometheus 127.0.0.1:9466 --usage -v >"$out/usage-unpriv.txt" 2>"$out/agent-unpriv.log" &
agent=$!
sleep 10
scrape 9466 | grep -E "^(gpuslack_process_|hw_power_watts|hw_errors_total|gpuslack_ecc|hw_energy)" >>"$out/unprivileged.txt"
wait "$agent"; echo "unprivileged agent exit $?" >>"$out/unprivileged.txt"
wait "$compute"
grep -iE "not supported|permission|denied|cannot|lost" "$out/agent-unpriv.log" | sort | uniq -c >>"$out/unprivileged.txt"
echo "-- root run, same filter:" >>"$out/unprivileged.txt"
grep -iE "not supported|permission|denied|cannot|lost" "$out/agent-root.log" | sort | uniq -c >>"$out/unprivileged.txt"
