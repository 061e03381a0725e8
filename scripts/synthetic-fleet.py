#!/usr/bin/env python3
"""A synthetic gpuslack fleet as OpenMetrics text, for `promtool tsdb create-blocks-from
openmetrics`: the scale benchmark of docs/benchmarks.md ("Fleet at scale") and, tiny, a test.

What it writes is what Prometheus would have scraped from `gpuslack run` on every node at the
export cadence, with the agent's own names and labels:
- `gpuslack_diagnosis_time_seconds_total` per GPU, class and owner, and `hw_energy_joules_total`
  per GPU and owner (the owner's energy: what `gpuslack fleet` reads), the owner series kept as the agent keeps them (the top `--keep-owners` jobs
  by GPU time, "nobody" and `gpuslack_owner="other"` into which the rest are folded), each
  exported at every scrape while kept, constant while its owner is away;
- `gpuslack_diagnosis_ratio`, 1 for the current verdict, with the GPU's labels only (gauges
  name no owner: one series per GPU and class, whatever the churn);
- `gpuslack_job_info`, one per GPU for its current job (rank, world size, Slurm user, account,
  partition);
- `target_info` per node (`host_name`).
Nodes run a sequence of jobs (2–14 h, gaps of up to 45 min with no owner); every other pair of
nodes runs two-node jobs. Each job has a profile (healthy, data-starved, communication-bound,
holding GPUs idle, hung after a while) and each GPU's verdict follows it with persistence.

One family per file (`DIR/time.om`, `energy.om`, `ratio.om`, `info.om`, `target.om`), since an
OpenMetrics family must be contiguous and memory here is small: backfill each into the same
block directory (Prometheus merges overlapping blocks).

    scripts/synthetic-fleet.py --nodes 10 --days 1 --out /tmp/fleet-om
    for f in /tmp/fleet-om/*.om; do promtool tsdb create-blocks-from openmetrics $f /tmp/fleet-tsdb; done
"""
import argparse
import os
import random
import time

CLASSES = ["idle", "idle_held", "compute_bound", "memory_bound", "launch_bound",
           "transfer_bound", "input_starved", "sync_wait", "hung"]
POWER_W = {"idle": 80, "idle_held": 110, "compute_bound": 650, "memory_bound": 500,
           "launch_bound": 250, "transfer_bound": 200, "input_starved": 180, "sync_wait": 350,
           "hung": 130}
PROFILES = {
    "healthy": {"compute_bound": .70, "memory_bound": .15, "sync_wait": .08, "input_starved": .04, "launch_bound": .03},
    "starved": {"compute_bound": .30, "input_starved": .50, "memory_bound": .10, "sync_wait": .10},
    "comm": {"compute_bound": .40, "sync_wait": .45, "memory_bound": .10, "transfer_bound": .05},
    "holder": {"idle_held": .70, "compute_bound": .30},
    "hung": {"compute_bound": .80, "sync_wait": .20},
}
PROFILE_ODDS = [("healthy", .45), ("starved", .2), ("comm", .2), ("holder", .1), ("hung", .05)]
TEAMS = ["vision", "llm-pretrain", "speech", "recsys", "robotics", "research", "infra", "bio"]


def pick(rng, odds):
    x, acc = rng.random(), 0.0
    for name, p in odds:
        acc += p
        if x < acc:
            return name
    return odds[-1][0]


def schedule(seed, steps, step_s, t0):
    """The jobs of one node (or pair of nodes): (start_step, end_step, job) in order."""
    rng = random.Random(seed)
    jobs, s = [], rng.randrange(0, int(2700 / step_s) + 1)
    while s < steps:
        length = int(rng.uniform(2, 14) * 3600 / step_s)
        job = {
            "id": "slurm:%d" % rng.randrange(100000, 999999),
            "profile": pick(rng, PROFILE_ODDS),
            "team": rng.choice(TEAMS),
            "user": "user%02d" % rng.randrange(40),
        }
        jobs.append((s, min(steps, s + length), job))
        s += length + rng.randrange(0, int(2700 / step_s) + 1)
    return jobs


def simulate_gpu(rng, jobs, steps):
    """Per step: (class, job or None)."""
    out = [("idle", None)] * steps
    for start, end, job in jobs:
        odds = sorted(PROFILES[job["profile"]].items())
        hang_at = start + int((end - start) * 0.6) if job["profile"] == "hung" else end
        cls = pick(rng, odds)
        for s in range(start, end):
            if s >= hang_at:
                cls = "hung"
            elif rng.random() > 0.95:
                cls = pick(rng, odds)
            out[s] = (cls, job)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--first-node", type=int, default=0,
                    help="start numbering here: a large fleet in chunks (keep it even: pairs)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--step-s", type=int, default=10, help="the export (scrape) cadence")
    ap.add_argument("--keep-owners", type=int, default=4, help="the agent's --owner-series")
    ap.add_argument("--end", type=float, default=None, help="last timestamp (default: now)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--families", default="time,energy,ratio,info,target",
                    help="which files to write (the others are computed and dropped: small disks)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    steps = int(a.days * 86400 / a.step_s)
    end = a.end if a.end is not None else float(int(time.time()))
    t0 = end - (steps - 1) * a.step_s
    ts = ["%d" % (t0 + i * a.step_s) for i in range(steps)]
    wanted = set(a.families.split(","))
    files = {k: open(os.path.join(a.out, k + ".om") if k in wanted else os.devnull, "w", buffering=1 << 22)
             for k in ("time", "energy", "ratio", "info", "target")}
    files["time"].write("# TYPE gpuslack_diagnosis_time_seconds counter\n# UNIT gpuslack_diagnosis_time_seconds seconds\n")
    files["energy"].write("# TYPE hw_energy_joules counter\n# UNIT hw_energy_joules joules\n")
    files["ratio"].write("# TYPE gpuslack_diagnosis_ratio gauge\n")
    files["info"].write("# TYPE gpuslack_job_info gauge\n")
    files["target"].write("# TYPE target_info gauge\n")
    samples = 0
    series = 0
    for node in range(a.first_node, a.first_node + a.nodes):
        host = "node-%05d" % node
        inst = 'instance="%s:9464",job="gpuslack"' % host
        tw = files["target"]
        for t in ts:
            tw.write('target_info{%s,host_name="%s"} 1 %s\n' % (inst, host, t))
        samples += steps
        series += 1
        pair = node // 2
        two_node = pair % 2 == 0 and (pair * 2 + 1) < a.first_node + a.nodes
        jobs = schedule(a.seed * 1_000_003 + (pair if two_node else 10_000 + node), steps, a.step_s, t0)
        for g in range(a.gpus):
            rng = random.Random(a.seed * 7919 + node * 131 + g)
            timeline = simulate_gpu(rng, jobs, steps)
            gpu = '%s,hw_id="GPU-%05d-%d",gpuslack_gpu_index="%d"' % (inst, node, g, g)
            # Owner series: key -> [first_step, last_step (exclusive), label text, {class: [values]}]
            owners = {}
            running = {}  # key -> {class: seconds, energy}
            kept = []  # job keys kept, oldest first
            cur_key = None
            live = {}

            def open_owner(key, labels, s):
                owners[key] = [s, None, labels, {c: [] for c in CLASSES}, {c: [] for c in CLASSES}]
                running[key] = ({c: 0 for c in CLASSES}, {c: 0 for c in CLASSES})
                live[key] = True

            open_owner("nobody", "", 0)
            for s in range(steps):
                cls, job = timeline[s]
                key = job["id"] if job else "nobody"
                if key != cur_key and job is not None and key not in owners:
                    if len(kept) >= a.keep_owners:
                        victim = min(kept, key=lambda k: sum(running[k][0].values()))
                        kept.remove(victim)
                        if "other" not in owners:
                            open_owner("other", ',gpuslack_owner="other"', s)
                        for c in CLASSES:
                            running["other"][0][c] += running[victim][0][c]
                            running["other"][1][c] += running[victim][1][c]
                        owners[victim][1] = s
                        del live[victim]
                    open_owner(key, ',gpuslack_job_id="%s"' % key, s)
                    kept.append(key)
                cur_key = key
                running[key][0][cls] += a.step_s
                running[key][1][cls] += POWER_W[cls] * a.step_s
                for k in live:
                    sec, joule = running[k]
                    o = owners[k]
                    for c in CLASSES:
                        o[3][c].append(sec[c])
                        o[4][c].append(joule[c])
            w_time, w_energy = files["time"], files["energy"]
            for k, (first, last, labels, secs, joules) in owners.items():
                for c in CLASSES:
                    head = '{%s%s,gpuslack_diagnosis_class="%s"} ' % (gpu, labels, c)
                    lt = "gpuslack_diagnosis_time_seconds_total" + head
                    w_time.write("".join("%s%d %s\n" % (lt, v, ts[first + i]) for i, v in enumerate(secs[c])))
                    samples += len(secs[c])
                    series += 1
                # The owner's energy, over its verdicts: one series.
                le = "hw_energy_joules_total{%s%s} " % (gpu, labels)
                total = [sum(joules[c][i] for c in CLASSES) for i in range(len(joules[CLASSES[0]]))]
                w_energy.write("".join("%s%d %s\n" % (le, v, ts[first + i]) for i, v in enumerate(total)))
                samples += len(total)
                series += 1
            # Gauges: the current verdict, with the GPU's labels only, as the agent's; the
            # owner is on the info series, one per job that held the GPU.
            w_ratio, w_info = files["ratio"], files["info"]
            for c in CLASSES:
                head = 'gpuslack_diagnosis_ratio{%s,gpuslack_diagnosis_class="%s"} ' % (gpu, c)
                w_ratio.write("".join("%s%d %s\n" % (head, 1 if timeline[i][0] == c else 0, ts[i]) for i in range(steps)))
            samples += 9 * steps
            series += 9
            segments, s = [], 0
            while s < steps:
                job = timeline[s][1]
                e = s
                while e < steps and timeline[e][1] is job:
                    e += 1
                segments.append((s, e, job))
                s = e
            for s, e, job in segments:
                if job:
                    rank = g + (8 * (node % 2) if two_node else 0)
                    head = ('gpuslack_job_info{%s,gpuslack_job_id="%s",gpuslack_job_rank="%d",gpuslack_job_world_size="%d",'
                            'slurm_job_user="%s",slurm_job_account="%s",slurm_job_partition="gpu",gpuslack_job_state="running"} 1 '
                            % (gpu, job["id"], rank, a.gpus * (2 if two_node else 1), job["user"], job["team"]))
                    w_info.write("".join("%s%s\n" % (head, ts[i]) for i in range(s, e)))
                    samples += e - s
                    series += 1
    for f in files.values():
        f.write("# EOF\n")
        f.close()
    print("nodes=%d gpus=%d steps=%d series=%d samples=%d start=%d end=%d" % (
        a.nodes, a.nodes * a.gpus, steps, series, samples, t0, end))


if __name__ == "__main__":
    main()
