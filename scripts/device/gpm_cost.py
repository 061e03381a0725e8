#!/usr/bin/env python3
"""Measures what NVML's GPM costs on this GPU: a sample, and computing each metric from a pair.
Run on the device machine; it decides which GPM metrics gpuslack reads and how often."""
import resource
import time

import pynvml as nv

nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(0)
METRICS = {
    "graphics": nv.NVML_GPM_METRIC_GRAPHICS_UTIL,
    "sm": nv.NVML_GPM_METRIC_SM_UTIL,
    "occupancy": nv.NVML_GPM_METRIC_SM_OCCUPANCY,
    "tensor": nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "dram": nv.NVML_GPM_METRIC_DRAM_BW_UTIL,
    "fp64": nv.NVML_GPM_METRIC_FP64_UTIL,
    "fp32": nv.NVML_GPM_METRIC_FP32_UTIL,
    "fp16": nv.NVML_GPM_METRIC_FP16_UTIL,
    "pcie_tx": nv.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    "pcie_rx": nv.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    "nvlink_rx": nv.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    "nvlink_tx": nv.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
}
s1, s2 = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
nv.nvmlGpmSampleGet(h, s1)
time.sleep(0.1)
nv.nvmlGpmSampleGet(h, s2)


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def get(ids):
    mg = nv.c_nvmlGpmMetricsGet_t()
    mg.version = nv.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(ids)
    mg.sample1, mg.sample2 = s1, s2
    for i, m in enumerate(ids):
        mg.metrics[i].metricId = m
    nv.nvmlGpmMetricsGet(mg)
    return [mg.metrics[i].value for i in range(len(ids))]


def cost(name, f, n=50):
    f()
    c0, t0 = cpu(), time.perf_counter()
    for _ in range(n):
        f()
    print("%-28s cpu %8.1f us   wall %8.1f us" % (name, (cpu() - c0) / n * 1e6, (time.perf_counter() - t0) / n * 1e6))


cost("sample_get", lambda: nv.nvmlGpmSampleGet(h, s2))
for name, m in METRICS.items():
    cost("metrics_get " + name, lambda m=m: get([m]))
cost("metrics_get all 12", lambda: get(list(METRICS.values())))
core = ["sm", "occupancy", "tensor", "dram", "fp32", "fp16", "fp64", "pcie_tx", "pcie_rx"]
cost("metrics_get 9 (no nvlink, gr)", lambda: get([METRICS[k] for k in core]))
print(dict(zip(METRICS, get(list(METRICS.values())))))
