#!/usr/bin/env bash
# The agent's own cost on the device machine: 20 s at 10 Hz and at 1 Hz on an idle GPU, then
# 20 s at 10 Hz beside a process computing on it (the process list and its SM shares are read
# only where a process runs). Usage: overhead.sh BIN_DIR OUT_DIR
. "$(dirname "$0")/common.sh"

echo "== idle GPU, 10 Hz" >"$out/overhead.txt"
"$bin" run --seconds 20 --interval-ms 100 --usage >>"$out/overhead.txt" 2>&1
echo "== idle GPU, 1 Hz" >>"$out/overhead.txt"
"$bin" run --seconds 20 --interval-ms 1000 --usage >>"$out/overhead.txt" 2>&1
echo "== beside a computing process, 10 Hz" >>"$out/overhead.txt"
python3 "$here/two_processes.py" compute 28 &
compute=$!
sleep 4
"$bin" run --seconds 20 --interval-ms 100 --usage --prometheus 127.0.0.1:9464 >>"$out/overhead.txt" 2>&1 &
agent=$!
sleep 16
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9464/metrics', timeout=5).read().decode())" \
  | grep -E "^gpuslack_process_" >>"$out/overhead.txt"
wait "$agent" "$compute"
# The release build's symbol ordering (link/symbol-order.txt, a release-build step in build.rs):
# how many of the agent's traced functions it still places, beside the memory it saves. Stale
# names cost memory, not correctness, so this reports rather than fails.
echo "== symbol order (scripts/device/text_order)" >>"$out/overhead.txt"
python3 "$here/../text_order/functions.py" check "$bin" "$here/../../../link/symbol-order.txt" \
  >>"$out/overhead.txt" 2>&1 || echo "stale: trace again (scripts/device/text_order/README.md)" >>"$out/overhead.txt"
