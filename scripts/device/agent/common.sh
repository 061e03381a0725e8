# Sourced by the agent's device scripts, which are run as `NAME.sh BIN_DIR OUT_DIR`: the binary,
# the output folder, CUDA's libraries, and a scrape of the agent's HTTP endpoint.
set -u
bin=$1/gpuslack
out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# scrape PORT [PATH]: what the agent serves there, /metrics unless PATH says otherwise.
scrape() { python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$1${2:-/metrics}', timeout=5).read().decode())"; }
