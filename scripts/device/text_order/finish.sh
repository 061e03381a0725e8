#!/usr/bin/env bash
# Step 3 of README.md, here: traces of the commands that need no GPU, then the ordering from the
# GPU machine's traces (the directory trace_agent.sh wrote) followed by these.
set -euo pipefail
device_traces=${1:?usage: finish.sh DIR_OF_THE_GPU_MACHINE_TRACES}
cd "$(dirname "$0")/../../.."
here=scripts/device/text_order
bin=target/text-order/gpuslack  # prepare.sh's build, with its symbols
local_traces=$(mktemp -d)
trace() {
  local name=$1
  shift
  ENTRY_TRACE_FUNCS=.device-bin/functions.txt ENTRY_TRACE_OUT="$local_traces/$name.trace" \
    LD_PRELOAD="$PWD/.device-bin/libentry_trace.so" "$bin" "$@" >/dev/null
}
trace 6-diagnose-bundled diagnose
trace 7-replay replay tests/fixtures/h200x2-scenarios/samples.csv
python3 "$here/functions.py" order "$bin" "$device_traces"/*.trace "$local_traces"/*.trace \
  >link/symbol-order.txt
rm -r "$local_traces"
cargo build --release --locked
python3 "$here/functions.py" check target/release/gpuslack link/symbol-order.txt
echo "now measure it: strip it into .device-bin and run scripts/device/overhead.sh there"
