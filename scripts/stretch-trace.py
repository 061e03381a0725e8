#!/usr/bin/env python3
"""Repeats a recorded trace N times end to end, shifting time, to check that replay memory stays
flat however long the trace. Usage: stretch-trace.py SAMPLES.csv N > long.csv"""
import sys

path, times = sys.argv[1], int(sys.argv[2])
with open(path) as f:
    header = f.readline()
    rows = [line.rstrip("\n").split(",") for line in f]
t_col = header.strip().split(",").index("t")
span = float(rows[-1][t_col]) - float(rows[0][t_col]) + 1.0
out = sys.stdout
out.write(header)
for i in range(times):
    shift = i * span
    for row in rows:
        cells = list(row)
        cells[t_col] = "%.4f" % (float(row[t_col]) + shift)
        out.write(",".join(cells) + "\n")
