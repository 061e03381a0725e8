#!/usr/bin/env bash
# Step 1 of README.md, here: a release build, its function list and the tracer, in .device-bin/.
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=scripts/device/text_order
cargo build --release --locked
mkdir -p .device-bin
python3 "$here/functions.py" list target/release/gpuslack >.device-bin/functions.txt
strip -o .device-bin/gpuslack target/release/gpuslack
gcc -O2 -Wall -shared -fPIC -o .device-bin/libentry_trace.so "$here/entry_trace.c"
mkdir -p target/text-order
cp target/release/gpuslack target/text-order/gpuslack  # symbols for finish.sh
echo "now on the GPU machine, carrying .device-bin: $here/trace_agent.sh"
