#!/usr/bin/env python3
"""Adds the phases of a `gpuslack bench --format json` run to a recording's phases.json and
labels.json: each measured part with the classes that count as right for it.
usage: bench_labels.py BENCH.json DIR"""
import json
import os
import sys

# (workload, variant prefix) -> accepted classes; parts not listed are left unlabelled.
ACCEPT = {
    ("tiny", "eager"): ["launch_bound"],
    ("tiny", "alloc_copy_per_step"): ["launch_bound", "transfer_bound"],
    ("tiny", "graph"): ["launch_bound"],
    ("memory", ""): ["memory_bound"],
    ("compute", ""): ["compute_bound"],
    ("pcie", ""): ["transfer_bound"],
    ("starved", ""): ["input_starved"],
}
TRIM_S = 1.0

bench_path, out = sys.argv[1], sys.argv[2]
rows = json.load(open(bench_path))
phases = json.load(open(os.path.join(out, "phases.json")))
labels = json.load(open(os.path.join(out, "labels.json")))
seen = set()
for r in rows:
    # BabelStream's five kernels run interleaved: one span, labelled once.
    span = (r["gpu"], r["started"], r["ended"])
    if span in seen:
        continue
    seen.add(span)
    accept = next((a for (w, v), a in ACCEPT.items()
                   if r["workload"] == w and r["variant"].startswith(v)), None)
    name = f"bench_{r['workload']}_{r['variant']}"
    phases.append({"name": name, "t0": r["started"], "t1": r["ended"], "gpus": [r["gpu"]]})
    if accept and r["ended"] - r["started"] > 2 * TRIM_S + 1.0:
        labels["segments"].append({"gpu": r["gpu"], "start": r["started"] + TRIM_S,
                                   "end": r["ended"] - 0.5, "scenario": name,
                                   "accept": accept})
phases.sort(key=lambda p: p["t0"])
labels["segments"].sort(key=lambda s: s["start"])
json.dump(phases, open(os.path.join(out, "phases.json"), "w"), indent=1)
json.dump(labels, open(os.path.join(out, "labels.json"), "w"), indent=1)
