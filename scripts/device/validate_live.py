#!/usr/bin/env python3
"""Validates gpuslack's live NVML + GPM source on a real GPU (run on the device machine).

While `gpuslack record` samples GPU 0, this script samples the same GPU independently with
pynvml (power, the energy counter, GPM SM activity) and runs PyTorch workloads in phases:
idle, a held context, an 8192 bf16 matmul loop, a device copy loop, a tiny-kernel loop, pinned
host->device copies and starved bursts. It then compares phase means (gpuslack vs pynvml: power
within 3%, SM activity within 3 points), scores gpuslack's verdicts against the phases, and runs
`gpuslack diagnose` live beside two workloads.

Usage: validate_live.py --bin PATH --out DIR
Writes live.csv, pynvml.csv, phases.json, labels.json, compare.txt and diagnose_*.txt to DIR.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import threading
import time

import pynvml as nv

PHASE_S = 8.0
GAP_S = 2.0
TRIM_S = 1.5

# phase name -> classes that count as right
EXPECT = {
    "idle": ["idle"],
    "idle_held": ["idle_held"],
    "matmul_bf16": ["compute_bound"],
    "device_copy": ["memory_bound"],
    "tiny_kernels": ["launch_bound"],
    "h2d_pinned": ["transfer_bound"],
    "starved_bursts": ["input_starved"],
}


class PynvmlSampler(threading.Thread):
    """Independent reference: power, energy and GPM SM activity every 100 ms."""

    def __init__(self, index, path):
        super().__init__(daemon=True)
        self.handle = nv.nvmlDeviceGetHandleByIndex(index)
        self.path = path
        self.stop = threading.Event()

    def gpm_sm(self, s1, s2):
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = 1
        mg.sample1 = s1
        mg.sample2 = s2
        mg.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
        nv.nvmlGpmMetricsGet(mg)
        return mg.metrics[0].value

    def run(self):
        prev = nv.nvmlGpmSampleAlloc()
        cur = nv.nvmlGpmSampleAlloc()
        nv.nvmlGpmSampleGet(self.handle, prev)
        with open(self.path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["t", "power_mw", "energy_mj", "gpm_sm"])
            while not self.stop.is_set():
                time.sleep(0.1)
                t = time.time()
                power = nv.nvmlDeviceGetPowerUsage(self.handle)
                energy = nv.nvmlDeviceGetTotalEnergyConsumption(self.handle)
                nv.nvmlGpmSampleGet(self.handle, cur)
                try:
                    sm = self.gpm_sm(prev, cur)
                except nv.NVMLError:
                    sm = ""
                prev, cur = cur, prev
                w.writerow(["%.4f" % t, power, energy, sm])


def workloads(torch):
    """(name, setup) pairs: setup allocates and fills the buffers, untimed, and returns the loop
    the phase times. Filling 1 GiB of pinned host memory alone takes seconds of CPU, which would
    otherwise open the transfer phase with a window of nothing but a held context."""
    dev = "cuda:0"

    def matmul_bf16():
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

        def loop(stop):
            while not stop():
                for _ in range(10):
                    a @ b
                torch.cuda.synchronize()
        return loop

    def device_copy():
        src = torch.randn(1 << 30, device=dev)  # 4 GiB of fp32
        dst = torch.empty_like(src)

        def loop(stop):
            while not stop():
                for _ in range(10):
                    dst.copy_(src)
                torch.cuda.synchronize()
        return loop

    def tiny_kernels():
        x = torch.randn(10, 10, device=dev)

        def loop(stop):
            y = x
            while not stop():
                for _ in range(1000):
                    y = y * 0.999 + 0.001
                torch.cuda.synchronize()
        return loop

    def h2d_pinned():
        host = torch.randn(1 << 28, pin_memory=True)  # 1 GiB
        dst = torch.empty(1 << 28, device=dev)

        def loop(stop):
            while not stop():
                dst.copy_(host, non_blocking=True)
                torch.cuda.synchronize()
        return loop

    def starved_bursts():
        a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)

        def loop(stop):
            while not stop():
                for _ in range(8):
                    a @ a
                torch.cuda.synchronize()
                time.sleep(0.08)  # the host "loading the next batch"
        return loop

    return [
        ("matmul_bf16", matmul_bf16),
        ("device_copy", device_copy),
        ("tiny_kernels", tiny_kernels),
        ("h2d_pinned", h2d_pinned),
        ("starved_bursts", starved_bursts),
    ]


def run_for(fn, seconds):
    end = time.time() + seconds
    fn(lambda: time.time() >= end)


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)

    nv.nvmlInit()
    # Stopped with SIGTERM once the phases are done; it flushes every tick, so nothing is lost.
    rec = subprocess.Popen(
        [args.bin, "record", "--out", f"{out}/live.csv", "--interval-ms", "100", "--seconds", "600"],
        stderr=open(f"{out}/record.log", "w"),
    )
    ref = PynvmlSampler(0, f"{out}/pynvml.csv")
    ref.start()
    phases = []
    time.sleep(2)

    t0 = time.time()
    time.sleep(PHASE_S)
    phases.append({"name": "idle", "t0": t0, "t1": time.time()})

    import torch  # importing and touching CUDA creates the context: from here it is held

    torch.zeros(1, device="cuda:0")
    torch.cuda.synchronize()
    time.sleep(GAP_S)
    t0 = time.time()
    time.sleep(PHASE_S)
    phases.append({"name": "idle_held", "t0": t0, "t1": time.time()})

    for name, setup in workloads(torch):
        loop = setup()
        torch.cuda.synchronize()
        time.sleep(GAP_S)
        t0 = time.time()
        run_for(loop, PHASE_S)
        phases.append({"name": name, "t0": t0, "t1": time.time()})
        del loop
        torch.cuda.empty_cache()
        print(f"phase {name} done", flush=True)
    torch.cuda.empty_cache()
    time.sleep(1)
    rec.terminate()
    rec.wait(timeout=30)
    ref.stop.set()
    ref.join()

    with open(f"{out}/phases.json", "w") as f:
        json.dump(phases, f, indent=1)
    labels = {
        "tdp_w": None,
        "segments": [
            {"gpu": 0, "start": p["t0"] + TRIM_S, "end": p["t1"] - TRIM_S, "scenario": p["name"], "accept": EXPECT[p["name"]]}
            for p in phases
        ],
    }
    with open(f"{out}/labels.json", "w") as f:
        json.dump(labels, f, indent=1)

    # gpuslack's own windows (1 s) through its pipeline.
    jl = subprocess.run(
        [args.bin, "replay", f"{out}/live.csv", "--window-s", "1", "--format", "jsonl"],
        capture_output=True, text=True, check=True,
    ).stdout
    windows = [json.loads(l) for l in jl.splitlines()]
    ref_rows = list(csv.DictReader(open(f"{out}/pynvml.csv")))

    lines = []
    head = "%-15s %9s %9s %9s %7s %7s %7s %7s %7s  %s" % (
        "phase", "gs_W", "nvP_W", "nvE_W", "dP_%", "dE_%", "gs_sm", "nv_sm", "d_sm", "gpuslack classes")
    lines.append(head)
    ok = True
    for p in phases:
        a, b = p["t0"] + TRIM_S, p["t1"] - TRIM_S
        ws = [w for w in windows if w["start"] >= a and w["end"] <= b]
        # gpuslack: the pipeline's window power (energy counter) and SM activity.
        gs_w = mean([w["power_w"] for w in ws])
        gs_sm = 100 * mean([w["sm_active"] for w in ws])
        wa = min(w["start"] for w in ws) if ws else a
        wb = max(w["end"] for w in ws) if ws else b
        # pynvml over the same span: mean power reading, and the energy counter's delta.
        rs = [r for r in ref_rows if wa <= float(r["t"]) <= wb]
        nv_p = mean([float(r["power_mw"]) / 1000 for r in rs])
        e = [(float(r["t"]), float(r["energy_mj"])) for r in rs]
        nv_e = (e[-1][1] - e[0][1]) / (e[-1][0] - e[0][0]) / 1000 if len(e) > 1 else float("nan")
        nv_sm = mean([float(r["gpm_sm"]) for r in rs if r["gpm_sm"] not in ("", "nan")])
        dp = 100 * (gs_w - nv_p) / nv_p
        de = 100 * (gs_w - nv_e) / nv_e
        dsm = gs_sm - nv_sm
        classes = {}
        for w in ws:
            classes[w["class"]] = classes.get(w["class"], 0) + 1
        good = abs(dp) <= 3 and abs(dsm) <= 3
        ok &= good
        lines.append("%-15s %9.1f %9.1f %9.1f %7.2f %7.2f %7.2f %7.2f %7.2f  %s%s" % (
            p["name"], gs_w, nv_p, nv_e, dp, de, gs_sm, nv_sm, dsm,
            " ".join(f"{k}x{v}" for k, v in sorted(classes.items())), "" if good else "  <-- off"))
    lines.append("agreement (power within 3% of pynvml's mean power reading, GPM SM within 3 points): "
                 + ("PASS" if ok else "FAIL"))
    lines.append("dE_% compares with pynvml's energy-counter delta over the same span; over a few seconds it")
    lines.append("carries the counter's ~100 ms update steps, so it is shown, not judged")
    text = "\n".join(lines)
    print(text, flush=True)
    with open(f"{out}/compare.txt", "w") as f:
        f.write(text + "\n")

    score = subprocess.run(
        [args.bin, "score", f"{out}/live.csv", f"{out}/labels.json", "--window-s", "1"],
        capture_output=True, text=True,
    )
    print(score.stdout, flush=True)
    with open(f"{out}/compare.txt", "a") as f:
        f.write(score.stdout)

    # diagnose, live, beside two workloads.
    for name, setup in workloads(torch):
        if name not in ("matmul_bf16", "tiny_kernels"):
            continue
        loop = setup()
        torch.cuda.synchronize()
        diag = subprocess.Popen(
            [args.bin, "diagnose", "--seconds", "6"],
            stdout=open(f"{out}/diagnose_{name}.txt", "w"), stderr=subprocess.STDOUT,
        )
        run_for(loop, 8)
        diag.wait(timeout=30)
        print(open(f"{out}/diagnose_{name}.txt").read(), flush=True)


if __name__ == "__main__":
    sys.exit(main())
