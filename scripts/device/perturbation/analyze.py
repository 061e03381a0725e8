#!/usr/bin/env python3
"""The table of perturb.py's runs: each mode's ratio to "off", per metric.

Per round, ratio = metric(mode) / metric(off) of the same round (latency: > 1 is slower;
steps/s: < 1 is slower). Reported: the median of the per-round ratios with a 95% bootstrap
interval (10,000 resamples of whole rounds, percentile method, seeded), and in the JSON also the
geometric mean of the ratios with a 95% t-interval on the paired log-ratios. Standard library
only, so that it runs where perturb.py ran and on a machine without numpy.
Usage: analyze.py perturb.json [summary.json]  (markdown on stdout)
"""
import json
import math
import random
import statistics
import sys

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
        17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000}


def t975(df):
    keys = sorted(k for k in T975 if k <= df)
    return T975[keys[-1]] if keys else T975[1]


METRICS = [("graph ITL p50", lambda r: r["graph"]["p50_us"]),
           ("graph ITL p99", lambda r: r["graph"]["p99_us"]),
           ("eager ITL p50", lambda r: r["eager"]["p50_us"]),
           ("eager ITL p99", lambda r: r["eager"]["p99_us"]),
           ("train steps/s", lambda r: r["train"]["steps_per_s"])]
EXTRA = [("graph ITL mean", lambda r: r["graph"]["mean_us"]),
         ("graph ITL p99.9", lambda r: r["graph"]["p999_us"]),
         ("eager ITL mean", lambda r: r["eager"]["mean_us"]),
         ("eager ITL p99.9", lambda r: r["eager"]["p999_us"])]


def stats(ratios, rng):
    n = len(ratios)
    med = statistics.median(ratios)
    boots = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(10000))
    logs = [math.log(x) for x in ratios]
    m = statistics.fmean(logs)
    half = t975(n - 1) * statistics.stdev(logs) / math.sqrt(n) if n > 1 else float("nan")
    return {"n": n, "median": med, "boot_lo": boots[249], "boot_hi": boots[9750],
            "geomean": math.exp(m), "t_lo": math.exp(m - half), "t_hi": math.exp(m + half),
            "ratios": ratios}


def main():
    data = json.load(open(sys.argv[1]))
    rounds = data["rounds"]
    modes = [m for m in data["meta"]["modes"] if m != "off"]
    rng = random.Random(2026)
    out = {"meta": data["meta"], "rounds": len(rounds), "modes": {}}
    off_abs = {}
    for name, f in METRICS + EXTRA:
        off_abs[name] = statistics.median(f(r) for rd in rounds for r in rd["runs"] if r["mode"] == "off")
    for mode in modes:
        out["modes"][mode] = {}
        for name, f in METRICS + EXTRA:
            ratios = []
            for rd in rounds:
                by = {r["mode"]: r for r in rd["runs"]}
                if mode in by and "off" in by:
                    ratios.append(f(by[mode]) / f(by["off"]))
            out["modes"][mode][name] = stats(ratios, rng)
    meta = data["meta"]
    print(f"{len(rounds)} rounds; each run: {meta['graph_s']} s graph decode, {meta['eager_s']} s eager "
          f"decode, {meta['n_train']} ResNet-50 steps; {meta['device']}, torch {meta['torch']}, "
          f"{meta['date_utc']}\n")
    print("Ratio to off: median of the per-round ratios [95% bootstrap CI over rounds]. "
          "Latency > 1 and steps/s < 1 mean slower.\n")
    names = [n for n, _ in METRICS]
    print("| mode | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    print("| off (absolute, median of runs) | " + " | ".join(
        f"{off_abs[n]:.1f} µs" if "ITL" in n else f"{off_abs[n]:.3f}" for n in names) + " |")
    for mode in modes:
        cells = []
        for n in names:
            s = out["modes"][mode][n]
            cells.append(f"{s['median']:.4f} [{s['boot_lo']:.4f}, {s['boot_hi']:.4f}]")
        print(f"| {mode} | " + " | ".join(cells) + " |")
    print("\nGeometric mean of the per-round ratios [95% t-interval on paired log-ratios]:\n")
    print("| mode | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for mode in modes:
        cells = []
        for n in names:
            s = out["modes"][mode][n]
            cells.append(f"{s['geomean']:.4f} [{s['t_lo']:.4f}, {s['t_hi']:.4f}]")
        print(f"| {mode} | " + " | ".join(cells) + " |")
    xn = [n for n, _ in EXTRA]
    print("\nTails and means (median ratio [bootstrap 95% CI]):\n")
    print("| mode | " + " | ".join(xn) + " |")
    print("|---|" + "---|" * len(xn))
    print("| off (absolute) | " + " | ".join(f"{off_abs[n]:.1f} µs" for n in xn) + " |")
    for mode in modes:
        cells = [f"{out['modes'][mode][n]['median']:.4f} [{out['modes'][mode][n]['boot_lo']:.4f}, "
                 f"{out['modes'][mode][n]['boot_hi']:.4f}]" for n in xn]
        print(f"| {mode} | " + " | ".join(cells) + " |")
    bad = [(rd_i, r["mode"], r["sampler"]) for rd_i, rd in enumerate(rounds) for r in rd["runs"]
           if r["mode"] != "off" and (r["sampler"].get("rc") not in (0,) or not r["sampler"].get("alive_at_end", True))]
    print(f"\nsampler runs that died early or exited non-zero: {len(bad)}" + (f" {bad[:5]}" if bad else ""))
    out["off_absolute"] = off_abs
    if len(sys.argv) > 2:
        json.dump(out, open(sys.argv[2], "w"), indent=1)


main()
