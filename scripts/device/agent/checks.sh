#!/usr/bin/env bash
# The agent's live checks on the device machine (one H200): SIGTERM against a local Rotel,
# two processes on one GPU attributed apart, `diagnose -- python3 train.py`, and the agent's
# own cost at 10 Hz and 1 Hz. Usage: checks.sh BIN_DIR OUT_DIR (BIN_DIR holds gpuslack,
# rotel-agent and the libpython3.11 it links).
. "$(dirname "$0")/common.sh"

echo "== 1. SIGTERM against a local Rotel" >"$out/sigterm.txt"
LD_LIBRARY_PATH=$1 "$1/rotel-agent" start --exporter blackhole --otlp-grpc-endpoint 127.0.0.1:4317 \
  --otlp-http-endpoint 127.0.0.1:4318 --debug-log metrics --debug-log logs >"$out/rotel.log" 2>&1 &
rotel=$!
sleep 1
"$bin" run --otlp-endpoint http://127.0.0.1:4317 --export-interval-ms 60000 2>"$out/agent-sigterm.log" &
agent=$!
sleep 8
killed_at=$(date -u +%H:%M:%S.%N)
kill -TERM "$agent"
wait "$agent"; echo "agent exit $? (TERM sent at $killed_at UTC)" >>"$out/sigterm.txt"
sleep 1
kill "$rotel"
grep -E "windows produced|SIGTERM" "$out/agent-sigterm.log" >>"$out/sigterm.txt"
grep -E "Received (metrics|logs)" "$out/rotel.log" | sed 's/\x1b\[[0-9;]*m//g' >>"$out/sigterm.txt"

echo "== 2. two processes on one GPU" >"$out/processes.txt"
python3 "$here/two_processes.py" hold 24 &
hold=$!
sleep 3
python3 "$here/two_processes.py" compute 20 &
compute=$!
echo "hold pid $hold, compute pid $compute" >>"$out/processes.txt"
"$bin" run --prometheus 127.0.0.1:9464 --seconds 18 2>/dev/null &
agent=$!
sleep 14
scrape 9464 /metrics | grep -E "^gpuslack_process_|^hw_power_watts|^gpuslack_diagnosis_ratio.*} 1" >>"$out/processes.txt"
wait "$agent" "$compute" "$hold"

echo "== 3. diagnose -- python3 train.py" >"$out/diagnose.txt"
"$bin" diagnose -- python3 "$here/train.py" >>"$out/diagnose.txt" 2>"$out/diagnose.err"
echo "exit code $?" >>"$out/diagnose.txt"
cat "$out/diagnose.err" >>"$out/diagnose.txt"

"$here/overhead.sh" "$1" "$out"
