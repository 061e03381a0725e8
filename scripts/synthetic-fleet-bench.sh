#!/usr/bin/env bash
# The scale benchmark of docs/benchmarks.md ("Fleet at scale"): Prometheus on the backfilled
# synthetic fleet (scripts/synthetic-fleet.py), then the fleet report's time and memory, the
# job rules' evaluation time and the series count.
#   scripts/synthetic-fleet-bench.sh TSDB_DIR END_UNIX_S [GPUSLACK]
set -euo pipefail
tsdb=$1 end=$2 gpuslack=${3:-target/debug/gpuslack}
port=${PORT:-19690}
work=$(mktemp -d)
cat > "$work/prometheus.yml" <<YML
global:
  scrape_interval: 10s
scrape_configs: []
YML
prometheus --config.file="$work/prometheus.yml" \
  --storage.tsdb.path="$tsdb" --storage.tsdb.retention.time=3650d \
  --web.listen-address=127.0.0.1:$port > "$work/prometheus.log" 2>&1 &
prom=$!
trap 'kill $prom 2>/dev/null || true; wait $prom 2>/dev/null || true' EXIT
for _ in $(seq 120); do curl -sf 127.0.0.1:$port/-/ready > /dev/null && break; sleep 1; done
q() { # an instant query at the data's end, with Prometheus' own timings
  curl -s --get --data-urlencode "query=$1" --data-urlencode "time=$end" --data-urlencode stats=all \
    "127.0.0.1:$port/api/v1/query" | python3 -c '
import json, sys
d = json.load(sys.stdin)
if d["status"] != "success":
    print("error", d.get("error")); sys.exit()
t = d["data"].get("stats", {}).get("timings", {})
s = d["data"].get("stats", {}).get("samples", {})
r = d["data"]["result"]
print("result=%s series=%d eval_s=%.3f samples=%s" % (r[0]["value"][1] if len(r) == 1 else "-", len(r), t.get("evalTotalTime", 0), s.get("totalQueryableSamples", "?")))'
}
echo "series (head + blocks): $(q 'count({__name__=~".+"})')"
echo "per family:"
for m in gpuslack_diagnosis_time_seconds_total hw_energy_joules_total gpuslack_diagnosis_ratio gpuslack_job_info; do
  echo "  $m: $(q "count(last_over_time($m[1d]))")"
done
echo "job rule, GPU-seconds by job and verdict over 5m: $(q 'count(sum by (gpuslack_job_id, gpuslack_diagnosis_class) (rate(gpuslack_diagnosis_time_seconds_total{gpuslack_job_id!=""}[5m])))')"
# The gauges name no owner: the job comes from the GPU's info series, as in gpuslack-jobs.yml
# (the busy share joins at each step of a subquery; the data has no SM activity, so the verdict
# gauge stands in for it).
info='max by (instance, hw_id, gpuslack_job_id) (gpuslack_job_info{gpuslack_job_id!=""})'
echo "job rule, share of a job's ranks waiting (hang): $(q "count(avg by (gpuslack_job_id) (max by (gpuslack_job_id, instance, hw_id) (gpuslack_diagnosis_ratio{gpuslack_diagnosis_class=~\"hung|sync_wait\"} * on (instance, hw_id) group_left (gpuslack_job_id) $info)))")"
echo "job rule, busy share per rank over 5m (straggler): $(q "count(sum by (gpuslack_job_id, instance, hw_id) (avg_over_time((gpuslack_diagnosis_ratio{gpuslack_diagnosis_class=~\"compute_bound|memory_bound\"} * on (instance, hw_id) group_left (gpuslack_job_id) $info)[5m:10s])))")"
m=gpuslack_diagnosis_time_seconds_total r=86400s
rise="((last_over_time($m[$r]) - (last_over_time($m[5m] offset $r) or last_over_time($m[$r]) * 0)) and (resets($m[$r]) == 0)) or increase($m[$r])"
echo "the report's main query, time by job and verdict over 1d: $(q "count(sum by (gpuslack_job_id, k8s_namespace_name, process_owner, gpuslack_diagnosis_class) ($rise))")"
echo "the same with increase() alone: $(q "count(sum by (gpuslack_job_id, gpuslack_diagnosis_class) (increase($m[$r])))")"
for since in 1d 6h; do
  /usr/bin/time -f "fleet report --since $since: %e s wall, %M KB max RSS (the client)" \
    "$gpuslack" fleet --prometheus http://127.0.0.1:$port --since $since --at "$end" --json > "$work/fleet-$since.json"
done
job=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["name"])' "$work/fleet-1d.json")
/usr/bin/time -f "fleet job $job --since 1d: %e s wall, %M KB max RSS" \
  "$gpuslack" fleet job "$job" --prometheus http://127.0.0.1:$port --since 1d --at "$end" > "$work/job.txt"
head -3 "$work/job.txt"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); f=d["funnel"]; print("funnel GPU-h: observed %.0f allocated %.0f active %.0f effective %.0f; top job %s %.1f slack GPU-h (%s)" % (f["observed_gpu_hours"], f["allocated_gpu_hours"], f["active_gpu_hours"], f["effective_gpu_hours"], d["jobs"][0]["name"], d["jobs"][0]["slack_gpu_hours"], d["jobs"][0]["top_cause"]))' "$work/fleet-1d.json"
echo "prometheus peak RSS: $(grep VmHWM /proc/$prom/status)"
echo "blocks on disk: $(du -sh "$tsdb" | cut -f1)"

# The hourly recording rules over the day, as Prometheus' rule manager would have evaluated
# them (24 evaluations of each), then the report from them on a restarted Prometheus.
/usr/bin/time -f "rule backfill, 24 hourly evaluations of both fleet rules: %e s wall, %M KB max RSS (promtool)" \
  promtool tsdb create-blocks-from rules --url=http://127.0.0.1:$port --start=$((end - 86400)) --end=$((end + 3600)) \
  --output-dir="$tsdb" deploy/prometheus/gpuslack-fleet-rules.yml > /dev/null 2>"$work/rules.log" || tail -3 "$work/rules.log"
grep "rule backfill" "$work/rules.log"
kill $prom; wait $prom 2>/dev/null || true
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$tsdb" --storage.tsdb.retention.time=3650d \
  --web.listen-address=127.0.0.1:$port > "$work/prometheus2.log" 2>&1 &
prom=$!
for _ in $(seq 120); do curl -sf 127.0.0.1:$port/-/ready > /dev/null && break; sleep 1; done
/usr/bin/time -f "fleet report --from-rules --since 1d: %e s wall, %M KB max RSS" \
  "$gpuslack" fleet --prometheus http://127.0.0.1:$port --from-rules --since 25h --at $((end + 3600)) --json > "$work/fleet-rules.json"
python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["funnel"]; b=json.load(open(sys.argv[2]))["funnel"]; print("observed GPU-h raw %.2f, from the rules %.2f" % (a["observed_gpu_hours"], b["observed_gpu_hours"]))' "$work/fleet-1d.json" "$work/fleet-rules.json"
