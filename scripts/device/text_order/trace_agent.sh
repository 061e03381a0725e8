#!/usr/bin/env bash
# Step 2 of README.md, on the GPU machine: which functions the agent runs, for the linker's
# symbol ordering. Needs .device-bin/{gpuslack,functions.txt,libentry_trace.so} (prepare.sh)
# and writes one trace per command to $OUT, the agent's first.
set -uo pipefail
bin=.device-bin/gpuslack
out=${OUT:-/tmp/gpuslack-text-order}
mkdir -p "$out"
trace() {
  local name=$1
  shift
  echo "== $name: $*"
  ENTRY_TRACE_FUNCS=.device-bin/functions.txt ENTRY_TRACE_OUT="$out/$name.trace" \
    LD_PRELOAD="$PWD/.device-bin/libentry_trace.so" "$bin" "$@" >>"$out/trace_agent.log" 2>&1
  echo "exit $?; $(tail -1 "$out/trace_agent.log")"
}
# 1. The agent as the overhead benchmark runs it: 25 s covers the energy and limits cadences.
trace 1-run-10hz run --seconds 25 --interval-ms 100 --usage
# 2. Serving Prometheus, scraped twice, and exporting to collectors that are not there.
scrape='import urllib.request as u; print(len(u.urlopen("http://127.0.0.1:9464/metrics").read()))'
(sleep 6; for i in 1 2; do python3 -c "$scrape"; sleep 3; done) &
trace 2-run-export run --seconds 15 --prometheus 127.0.0.1:9464 \
  --otlp-endpoint http://127.0.0.1:4317 --export-interval-ms 2000 -v
wait
trace 3-run-http run --seconds 8 --otlp-endpoint http://127.0.0.1:4318 \
  --otlp-protocol http/protobuf --export-interval-ms 2000
# 3. Recording: the live source without the pipeline. (`diagnose` on live GPUs is the same
# source and the report, which finish.sh traces on the bundled recording.)
trace 4-record record --out "$out/record.csv" --seconds 5
rm -f "$out/record.csv" "$out/record.facts.json"
