#!/usr/bin/env bash
# The agent's soak: 24 hours of simulated time (h200x2-scenarios repeated end to end) through
# `gpuslack run --replay`, against two collectors that flap: a real Rotel stopped for 10 s every
# 30 s (gRPC), and the faulty collector answering 20 requests 200 then 20 requests 503 (HTTP).
# Every 10 s it notes each agent's resident memory and open file descriptors; at the end it
# checks that delivered + dropped = produced. Not part of the default test run (about 8 min).
#
# usage: scripts/soak.sh [SPEED] [REPEATS]   (default 200 and 565: 24 h at 200× in 7.2 min)
# Needs what scripts/test.sh installs (target/test-venv with rotel); writes target/soak/.
set -euo pipefail
cd "$(dirname "$0")/.."
speed=${1:-200}
repeats=${2:-565}
out=target/soak
rm -rf "$out" && mkdir -p "$out"
py=target/test-venv/bin/python
rotel=$("$py" -c 'import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))')
cargo build --release --locked -q
bin=target/release/gpuslack
python3 scripts/stretch-trace.py tests/fixtures/h200x2-scenarios/samples.csv "$repeats" >"$out/day.csv"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
grpc=$(free_port)
http=$(free_port)
faulty=$(free_port)
start_rotel() {
  "$rotel" start --exporter blackhole --otlp-grpc-endpoint "127.0.0.1:$grpc" \
    --otlp-http-endpoint "127.0.0.1:$http" --pid-file "$out/rotel.pid" --log-file "$out/rotel.log" \
    >/dev/null 2>&1 &
  echo $! >"$out/rotel.child"
}
start_rotel
"$py" tests/support/faulty_collector.py flap:20 "$out/faulty.jsonl" "$faulty" &
faulty_pid=$!
sleep 2
"$bin" run --replay "$out/day.csv" --speed "$speed" --otlp-endpoint "http://127.0.0.1:$grpc" \
  --export-interval-ms 500 --otlp-timeout-ms 2000 2>"$out/agent-rotel.log" &
a=$!
"$bin" run --replay "$out/day.csv" --speed "$speed" --otlp-endpoint "http://127.0.0.1:$faulty" \
  --otlp-protocol http/protobuf --export-interval-ms 500 --otlp-timeout-ms 2000 \
  2>"$out/agent-faulty.log" &
b=$!
echo "t_s agent rss_kib fds" >"$out/resources.txt"
started=$(date +%s)
flap=0
while kill -0 "$a" 2>/dev/null || kill -0 "$b" 2>/dev/null; do
  now=$(( $(date +%s) - started ))
  for pair in "rotel:$a" "faulty:$b"; do
    name=${pair%%:*}; pid=${pair##*:}
    if [ -r "/proc/$pid/status" ]; then
      rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
      fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
      echo "$now $name $rss $fds" >>"$out/resources.txt"
    fi
  done
  # Rotel: down 10 s of every 30.
  if [ $((now % 30)) -ge 20 ] && [ $flap = 0 ]; then
    kill "$(cat "$out/rotel.child")" 2>/dev/null || true; flap=1
  elif [ $((now % 30)) -lt 20 ] && [ $flap = 1 ]; then
    start_rotel; flap=0
  fi
  sleep 5
done
wait "$a" || echo "agent (rotel) exit $?" >>"$out/exits.txt"
wait "$b" || echo "agent (faulty) exit $?" >>"$out/exits.txt"
kill "$faulty_pid" "$(cat "$out/rotel.child")" 2>/dev/null || true
for name in rotel faulty; do
  line=$(grep "windows produced" "$out/agent-$name.log" | tail -1)
  echo "$name: $line"
  python3 - "$line" <<'PY'
import re, sys
line = sys.argv[1]
n = lambda w: int(re.search(r"(\d+) " + w, line).group(1))
produced, delivered, dropped, pending = n("windows produced"), n("delivered"), n("dropped"), n("undelivered")
assert delivered + dropped + pending == produced and pending == 0, line
print(f"  accounted: {produced} produced = {delivered} delivered + {dropped} dropped")
PY
done
awk 'NR>1 {k=$2; if (!(k in first)) {first[k]=$3; ffd[k]=$4}; last[k]=$3; lfd[k]=$4; if ($3>max[k]) max[k]=$3}
     END {for (k in first) printf "%s: rss %d KiB at start, %d at end, %d at most; fds %d → %d\n", k, first[k], last[k], max[k], ffd[k], lfd[k]}' "$out/resources.txt"
