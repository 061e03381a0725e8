#!/usr/bin/env python3
# A copy of shared/tools/degrade_trace.py, the tool verdicts without GPM and at 1 Hz are judged
# with, kept here so that CI (which has no shared/) scores the same forms.
"""Degraded variants of a trace, to measure verdicts as a GPU without GPM or a 1 Hz agent would see them.
usage: python3 degrade_trace.py TRACE.csv OUTDIR  ->  OUTDIR/nogpm.csv (every gpm_* column removed),
OUTDIR/hz1.csv (one row per GPU and second: NVML fields as last read, GPM values averaged), OUTDIR/nogpm_hz1.csv."""
import csv, sys, os, collections, math
src, outdir = sys.argv[1], sys.argv[2]
os.makedirs(outdir, exist_ok=True)
rows = list(csv.DictReader(open(src)))
cols = list(rows[0].keys())
gpm = [c for c in cols if c.startswith("gpm_")]
def write(name, rs, cs):
    with open(os.path.join(outdir, name), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cs, extrasaction="ignore"); w.writeheader(); w.writerows(rs)
def thin(rs):
    b = collections.OrderedDict()
    for r in rs:
        k = (r.get("gpu") or "0", math.floor(float(r["t"])))
        b.setdefault(k, []).append(r)
    out = []
    for (g, sec), grp in b.items():
        o = {"t": f"{sec + 1:.3f}", "gpu": g}
        for c in cols:
            if c in ("t", "gpu"): continue
            vals = [r[c] for r in grp if r.get(c, "") not in ("", "nan")]
            if not vals: o[c] = ""; continue
            if c.startswith("gpm_"):
                o[c] = f"{sum(float(v) for v in vals)/len(vals):.3f}"
            else:
                o[c] = vals[-1]
        out.append(o)
    out.sort(key=lambda r: (float(r["t"]), r["gpu"]))
    return out
nog = [c for c in cols if c not in gpm]
write("nogpm.csv", rows, nog)
t = thin(rows)
hc = cols if "gpu" in cols else ["gpu"] + cols
write("hz1.csv", t, hc)
write("nogpm_hz1.csv", t, [c for c in hc if c not in gpm])
