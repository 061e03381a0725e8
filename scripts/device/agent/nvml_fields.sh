#!/usr/bin/env bash
# The NVML fields of issue #30 (part 5) read live on the device machine, then the overhead runs
# again. Usage: nvml_fields.sh BIN_DIR OUT_DIR (about 3 minutes).
# 1. nvidia-smi's view of the same fields, for comparison. 2. `run --prometheus` on the idle GPU,
# beside a computing process and beside host->device copies, each scraped for the new series
# (the PCIe link generation idle and under load is the evidence for the link finding's rule).
# 3. `record` beside copies: the new trace columns, and `diagnose --trace` of that recording.
# 4. scripts/device/agent/overhead.sh into the same OUT_DIR; then all of it in OUT_DIR/nvml.tar.gz.
. "$(dirname "$0")/common.sh"
new='^(gpuslack_(gr_engine|memory_controller|performance_state|bar1|pcie_link|fan|nvlink_links|xid_errors|gpu_info|pipe_activity)|hw_status)'
fields='^(field|Bar1|PcieLink|Fan|NvlinkState|Limits|Health|Xid|Utilization|PerformanceState|Gpm) '

{
  echo "== nvidia-smi, for comparison"
  nvidia-smi --query-gpu=index,pci.bus_id,serial,vbios_version,driver_version,pstate,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,fan.speed --format=csv
  nvidia-smi -q -d MEMORY | grep -A4 -i bar1
  nvidia-smi -q | grep -iE -A3 "Link Width|PCIe Generation|nvlink" | head -40
  nvidia-smi nvlink --status 2>&1 | head -25
} >"$out/nvml-fields.txt" 2>&1

# run_scraped NAME PORT: the agent for 12 s, scraped after 10 s, its field costs kept.
run_scraped() {
  echo "== $1" >>"$out/nvml-fields.txt"
  "$bin" run --seconds 12 --prometheus "127.0.0.1:$2" --usage -v >"$out/usage-$1.txt" 2>"$out/agent-$1.log" &
  local agent=$!
  sleep 10
  scrape "$2" | grep -E "$new" >>"$out/nvml-fields.txt"
  wait "$agent"; echo "agent exit $?" >>"$out/nvml-fields.txt"
  grep -E "$fields" "$out/usage-$1.txt" >>"$out/nvml-fields.txt"
  grep -iE "not supported|Xid" "$out/agent-$1.log" >>"$out/nvml-fields.txt"
}

# Pinned host->device copies of 1 GiB for SECONDS: load on the PCIe link without kernels.
copies() {
  python3 - "$1" <<'EOF'
import sys, time, torch
end = time.time() + float(sys.argv[1])
host = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
while time.time() < end:
    dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
EOF
}

run_scraped idle 9467

python3 "$here/two_processes.py" compute 16 >/dev/null 2>&1 &
compute=$!
sleep 3
run_scraped compute 9468
wait "$compute"

copies 16 >/dev/null 2>&1 &
copying=$!
sleep 3
run_scraped copies 9469
wait "$copying"

echo "== record 8 s beside copies: the new columns" >>"$out/nvml-fields.txt"
mkdir -p "$out/rec"
copies 12 >/dev/null 2>&1 &
copying=$!
sleep 2
"$bin" record --seconds 8 --out "$out/rec/samples.csv" >>"$out/nvml-fields.txt" 2>&1
wait "$copying"
python3 - "$out/rec/samples.csv" >>"$out/nvml-fields.txt" <<'EOF'
import csv, sys
cols = ["bar1_used", "bar1_total", "pcie_link_gen", "pcie_link_width", "pcie_link_gen_max",
        "pcie_link_width_max", "fan_pct", "nvlink_links_up", "nvlink_links_down", "pstate",
        "util_mem", "gpm_gr", "gpm_fp64", "gpm_fp16", "xid_events", "xid_last"]
rows = list(csv.DictReader(open(sys.argv[1])))
print(f"{len(rows)} rows")
for c in cols:
    vals = [r.get(c, "") for r in rows]
    got = sorted({v for v in vals if v not in ("", "nan")}, key=lambda v: float(v))
    print(f"{c}: {sum(1 for v in vals if v not in ('', 'nan'))} cells, values {got[:6]}")
EOF
cat "$out/rec/samples.facts.json" >>"$out/nvml-fields.txt" 2>&1
echo "== diagnose --trace of that recording (health line)" >>"$out/nvml-fields.txt"
"$bin" diagnose --trace "$out/rec/samples.csv" >>"$out/nvml-fields.txt" 2>&1

bash "$here/overhead.sh" "$1" "$out"
# The device tool returns few files: everything in one archive besides the two summaries.
tar -czf "$out/nvml.tar.gz" -C "$out" --exclude nvml.tar.gz .
