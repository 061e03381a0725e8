#!/usr/bin/env python3
"""Calls one NVML function on GPU 0 on a fixed grid until SIGTERM, then prints how many calls it
made and their wall time: the isolation modes of perturb.py, for the reads no gpuslack flag
switches off (only GPM has one, `--no-gpm`).

  energy   nvmlDeviceGetTotalEnergyConsumption   (the agent: every max(10 s, 30 ticks))
  pcie     nvmlDeviceGetPcieThroughput TX and RX (the agent: every 10 s beside GPM, 1 s without)
  procutil nvmlDeviceGetProcessUtilization       (the agent: every 5 s while a process runs)
  gpm      nvmlGpmSampleGet + nvmlGpmMetricsGet of gpuslack's 11 metrics (the agent: every tick)
  cheap    utilization, power, clocks, temperature, memory: the agent's every-tick NVML fields

Usage: nvml_probe.py CALL HZ
"""
import signal
import sys
import time

import pynvml as nv

call, hz = sys.argv[1], float(sys.argv[2])
nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(0)
stop = [False]
signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))

if call == "energy":
    def once():
        nv.nvmlDeviceGetTotalEnergyConsumption(h)
elif call == "pcie":
    def once():
        nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES)
        nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)
elif call == "procutil":
    last = [0]

    def once():
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(h, last[0])
            if samples:
                last[0] = max(s.timeStamp for s in samples)
        except nv.NVMLError_NotFound:
            pass
elif call == "gpm":
    IDS = [nv.NVML_GPM_METRIC_SM_UTIL, nv.NVML_GPM_METRIC_SM_OCCUPANCY,
           nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL, nv.NVML_GPM_METRIC_DRAM_BW_UTIL,
           nv.NVML_GPM_METRIC_FP64_UTIL, nv.NVML_GPM_METRIC_FP32_UTIL, nv.NVML_GPM_METRIC_FP16_UTIL,
           nv.NVML_GPM_METRIC_PCIE_TX_PER_SEC, nv.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
           nv.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, nv.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC]
    bufs = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
    nv.nvmlGpmSampleGet(h, bufs[0])
    turn = [1]

    def once():
        cur, prev = bufs[turn[0]], bufs[1 - turn[0]]
        nv.nvmlGpmSampleGet(h, cur)
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(IDS)
        mg.sample1, mg.sample2 = prev, cur
        for i, m in enumerate(IDS):
            mg.metrics[i].metricId = m
        nv.nvmlGpmMetricsGet(mg)
        turn[0] = 1 - turn[0]
elif call == "cheap":
    def once():
        nv.nvmlDeviceGetUtilizationRates(h)
        nv.nvmlDeviceGetPowerUsage(h)
        nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        nv.nvmlDeviceGetMemoryInfo(h)
else:
    raise SystemExit(f"unknown call {call}")

period = 1.0 / hz
n, busy, worst = 0, 0.0, 0.0
t_next = time.perf_counter()
while not stop[0]:
    a = time.perf_counter()
    once()
    d = time.perf_counter() - a
    n, busy, worst = n + 1, busy + d, max(worst, d)
    t_next += period
    delay = t_next - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    else:
        t_next = time.perf_counter()
print(f"probe {call} at {hz:g} Hz: {n} calls, mean {busy / max(n, 1) * 1e3:.3f} ms wall, "
      f"max {worst * 1e3:.3f} ms", flush=True)
