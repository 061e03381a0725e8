#!/usr/bin/env bash
# Pods from the kubelet on the device machine, with the tests' PodResources server (grpcio, the
# kubelet's v1 proto) standing in for a kubelet that assigned GPU 0 to a pod. Usage:
# pods.sh BIN_DIR OUT_DIR, with grpcio and grpcio-tools importable. 1. The agent beside a
# computing process, scraped: the pod on GPU 0's series. 2. `record`, with the GPU named as
# GKE's device plugin names it (nvidiaN): the trace's pods column. 3. The agent unprivileged:
# the root-owned socket refuses it, said once. 4. No socket: nothing said.
. "$(dirname "$0")/common.sh"
repo=$(cd "$here/../../.." && pwd)
report="$out/pods.txt"
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
minor=$(nvidia-smi -q -i 0 | awk -F: '/Minor Number/ {gsub(/ /, "", $2); print $2}')
echo "GPU 0: $uuid, minor number $minor" >"$report"

kubelet() { # SOCKET DEVICE_ID: a server assigning DEVICE_ID to ml/trainer-0's container
  cat >"$out/pods-$2.json" <<EOF
{"podResources": [{"name": "trainer-0", "namespace": "ml", "cpuIds": [2],
  "containers": [{"name": "trainer", "cpuIds": [2],
    "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": ["$2"],
                 "topology": {"nodes": [{"ID": 0}]}}]}]}]}
EOF
  rm -f "$1"
  python3 "$repo/tests/support/podresources_server.py" "$1" "$out/pods-$2.json" "$out/kubelet-calls.jsonl" \
    >/dev/null 2>>"$out/kubelet.log" &
  for _ in $(seq 100); do [ -S "$1" ] && return; sleep 0.1; done
  echo "the PodResources server did not start" >>"$report"
}

echo "== 1. the agent beside a computing process, kubelet assigning $uuid" >>"$report"
sock=/tmp/kubelet-uuid.sock
kubelet "$sock" "$uuid"
server=$!
ls -l "$sock" >>"$report"
python3 "$here/two_processes.py" compute 30 >/dev/null 2>&1 &
compute=$!
sleep 4
"$bin" run --seconds 14 --prometheus 127.0.0.1:9467 --kubelet-socket "$sock" >/dev/null 2>"$out/agent-pods.log" &
agent=$!
sleep 12
scrape 9467 | grep -E '^(hw_power_watts|gpuslack_gpu_assignment|gpuslack_process_sm_activity_ratio)\{' >>"$report"
wait "$agent"; echo "agent exit $?" >>"$report"
grep -iE "kubelet|diagnosis changed" "$out/agent-pods.log" | cut -c1-330 >>"$report"

echo "== 2. record, the GPU named nvidia$minor (GKE)" >>"$report"
sock2=/tmp/kubelet-minor.sock
kubelet "$sock2" "nvidia$minor"
server2=$!
"$bin" record --seconds 4 --kubelet-socket "$sock2" --out "$out/pods.csv" 2>"$out/record.log"
echo "record exit $?; rows with a pods cell: $(grep -c trainer-0 "$out/pods.csv") of $(($(wc -l <"$out/pods.csv") - 1))" >>"$report"
head -1 "$out/pods.csv" | tr ',' '\n' | tail -2 | tr '\n' ' ' >>"$report"; echo >>"$report"
grep -m1 trainer-0 "$out/pods.csv" | rev | cut -d, -f1-4 | rev >>"$report"
kill "$server2" 2>/dev/null

echo "== 3. unprivileged, the same socket" >>"$report"
id gpuslack >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin gpuslack
cp "$bin" /tmp/gpuslack-unpriv && chmod 755 /tmp/gpuslack-unpriv
setpriv --reuid=gpuslack --regid=gpuslack --clear-groups env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
  /tmp/gpuslack-unpriv run --seconds 6 --prometheus 127.0.0.1:9468 --kubelet-socket "$sock" \
  >/dev/null 2>"$out/agent-unpriv.log" &
agent=$!
sleep 5
scrape 9468 | grep -E '^hw_power_watts\{' >>"$report"
wait "$agent"; echo "unprivileged agent exit $?" >>"$report"
grep -i kubelet "$out/agent-unpriv.log" >>"$report"
kill "$server" 2>/dev/null
wait "$compute" 2>/dev/null

echo "== 4. no socket at the default path" >>"$report"
ls -l /var/lib/kubelet/pod-resources/kubelet.sock >>"$report" 2>&1
"$bin" run --seconds 8 --prometheus 127.0.0.1:9469 --usage >"$out/usage-nosock.txt" 2>"$out/agent-nosock.log"
echo "agent exit $?; lines naming the kubelet: $(grep -ci kubelet "$out/agent-nosock.log")" >>"$report"
grep -iE "cpu|rss|resident" "$out/usage-nosock.txt" | head -5 >>"$report"
echo "kubelet calls answered: $(grep -c List "$out/kubelet-calls.jsonl")" >>"$report"
