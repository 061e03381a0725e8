#!/usr/bin/env python3
"""Stretches the hang of a recorded trace and injects the outliers a live GPU produces, to hold
the hang rules to a long hang: the block [START, END) of steady hang is repeated REPEATS times
(the energy counter carried on), every 97th GPM reading of each GPU is replaced by an
unrefreshed GPM pair (every rate 0, DRAM NaN), and every 60 s one GPM reading of SM activity
jumps by 8 points. Deterministic: the same input gives the same output.

usage: stretch-hang.py TRACE.csv START END REPEATS > long.csv"""
import csv
import sys

path, start, end, repeats = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
with open(path, newline="") as f:
    reader = csv.DictReader(f)
    columns = reader.fieldnames
    rows = list(reader)
span = end - start
block = [r for r in rows if start <= float(r["t"]) < end]
gpus = sorted({r.get("gpu") or "0" for r in block})


def energy_rate(gpu):
    """mJ per second of the block, per GPU, to carry the counter on."""
    e = [(float(r["t"]), float(r["energy_mj"])) for r in block
         if (r.get("gpu") or "0") == gpu and r.get("energy_mj")]
    return (e[-1][1] - e[0][1]) / (e[-1][0] - e[0][0]) if len(e) > 1 else 0.0


rates = {g: energy_rate(g) for g in gpus}
gpm = [c for c in columns if c.startswith("gpm_")]
out = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
out.writeheader()
seen = {g: 0 for g in gpus}
last_wobble = {g: None for g in gpus}


def emit(row, shift):
    row = dict(row)
    t = float(row["t"]) + shift
    row["t"] = "%.4f" % t
    g = row.get("gpu") or "0"
    if shift and row.get("energy_mj"):
        row["energy_mj"] = "%.0f" % (float(row["energy_mj"]) + rates.get(g, 0.0) * shift)
    if shift and row.get("gpm_sm") not in (None, "", "nan"):
        seen[g] += 1
        if seen[g] % 97 == 0:
            for c in gpm:
                row[c] = "0.00"
            row["gpm_dram"] = "nan"
        elif last_wobble[g] is None or t - last_wobble[g] >= 60.0:
            last_wobble[g] = t
            row["gpm_sm"] = "%.2f" % (float(row["gpm_sm"]) + 8.0)
    out.writerow(row)


for r in rows:
    if float(r["t"]) < end:
        emit(r, 0.0)
for k in range(1, repeats + 1):
    for r in block:
        emit(r, k * span)
for r in rows:
    if float(r["t"]) >= end:
        emit(r, repeats * span)
