#!/usr/bin/env bash
# The live source's overhead benchmark: `gpuslack run --usage` on every GPU at 10 Hz and 1 Hz,
# with the process's mappings and whether libcuda is loaded, 12 s in and 1 s before the end.
# The binary is built here and copied to .device-bin/gpuslack (see docs/benchmarks.md).
set -uo pipefail
bin=${1:-.device-bin/gpuslack}
out=${OUT:-/tmp/gpuslack-overhead}
mkdir -p "$out"
# The process's memory as the kernel counts it, and each mapping over 200 KiB.
snapshot() {
  echo "== $1: /proc/$pid"
  grep -E "VmRSS|VmHWM|RssAnon|RssFile|Threads" "/proc/$pid/status"
  # VmRSS and getrusage's peak come from the kernel's per-CPU counters, which may lag by a few
  # hundred KiB; smaps_rollup walks the page tables.
  echo "smaps_rollup $(grep -E '^Rss:' "/proc/$pid/smaps_rollup")"
  echo "libcuda mappings: $(grep -c libcuda "/proc/$pid/maps")"
  awk '/^[0-9a-f]+-/{name=$6; perm=$2} /^Rss:/{if ($2 > 200) print "  ", $2, "KiB", perm, name}' \
    "/proc/$pid/smaps" | sort -rn -k1
}
for case in "100 30" "1000 60"; do
  set -- $case
  interval_ms=$1 seconds=$2
  log="$out/overhead-${interval_ms}ms.txt"
  "$bin" run --seconds "$seconds" --interval-ms "$interval_ms" --usage >"$log" 2>&1 &
  pid=$!
  sleep 12
  snapshot "12 s in" >"$out/maps-${interval_ms}ms.txt"
  sleep $((seconds - 13))
  snapshot "1 s before the end" >>"$out/maps-${interval_ms}ms.txt"
  wait "$pid"
  cat "$out/maps-${interval_ms}ms.txt" >>"$log" && rm "$out/maps-${interval_ms}ms.txt"
  head -3 "$log"
done
