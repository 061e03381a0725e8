#!/usr/bin/env bash
# hw.energy under delta temporality, live: the agent exports to a local Rotel every 2 s for 12 s
# while a process computes; Rotel's debug log shows each export's hw.energy delta, and the
# agent's own /metrics the cumulative count from its start. Usage: energy_delta.sh BIN_DIR OUT.
. "$(dirname "$0")/common.sh"
LD_LIBRARY_PATH=$1 "$1/rotel-agent" start --exporter blackhole --otlp-grpc-endpoint 127.0.0.1:4317 \
  --otlp-http-endpoint 127.0.0.1:4318 --debug-log metrics --debug-log-verbosity detailed >"$out/rotel.log" 2>&1 &
rotel=$!
sleep 1
python3 "$here/two_processes.py" compute 16 >/dev/null 2>&1 &
compute=$!
sleep 2
"$bin" run --seconds 12 --otlp-endpoint http://127.0.0.1:4317 --temporality delta \
  --export-interval-ms 2000 --prometheus 127.0.0.1:9467 2>"$out/agent.log" &
agent=$!
sleep 11
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9467/metrics', timeout=5).read().decode())" \
  | grep -E '^(hw_energy|gpuslack_diagnosis_energy|gpuslack_diagnosis_time)' | grep -v ' 0$' >"$out/metrics.txt"
wait "$agent"; echo "agent exit $?" >>"$out/metrics.txt"
nvidia-smi --query-gpu=total_energy_consumption --format=csv >>"$out/metrics.txt" 2>&1
sleep 1
kill "$rotel" "$compute" 2>/dev/null
sed 's/\x1b\[[0-9;]*m//g' "$out/rotel.log" | grep -A12 -E 'Name: hw\.energy|name: hw\.energy|hw\.energy' | head -120 >"$out/energy-points.txt"
