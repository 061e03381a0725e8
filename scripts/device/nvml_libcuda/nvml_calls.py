"""Where an NVML client's resident memory goes, and whether NVML needs libcuda (run on the
device machine). `cuda-only`: dlopen libcuda.so.1 alone. `nvml`: nvmlInit, the largest
mappings, then the calls gpuslack makes (power, energy, clocks, temperature, clock reasons,
utilization, processes, GPM), each with its return code. Run `nvml` once plainly and once under
LD_PRELOAD=refuse_libcuda.so: the answers are the same, 4 MiB less resident.
Results of 2026-11-30: docs/validation/h200-nvml-without-libcuda.txt.

Usage: nvml_calls.py cuda-only|nvml"""
import ctypes, json, os, sys, time

def status():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile"):
            out[k] = int(v.split()[0])
    return out

def big_anon():
    rows, cur = [], None
    for line in open("/proc/self/smaps"):
        h = line.split()
        if "-" in h[0] and not h[0].endswith(":"):
            cur = {"range": h[0], "name": h[5] if len(h) > 5 else "[anon]", "rss": 0}
            rows.append(cur)
        elif h[0] == "Rss:":
            cur["rss"] = int(h[1])
    prev = None
    out = []
    for r in rows:
        if r["rss"] > 4000:
            out.append((r["rss"], r["name"], r["range"], prev))
        prev = r["name"]
    return out

mode = sys.argv[1]
print("start", status())
if mode == "cuda-only":
    lib = ctypes.CDLL("libcuda.so.1")
    print("dlopen libcuda", status())
    print("cuInit", lib.cuInit(0), status())
    print(big_anon())
    sys.exit(0)
nvml = ctypes.CDLL("libnvidia-ml.so.1")
print("init", nvml.nvmlInitWithFlags(0), status())
print("big mappings (rss, name, range, previous mapping's name):", big_anon())
h = ctypes.c_void_p()
print("handle", nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)))
u = ctypes.c_uint(); e = ctypes.c_ulonglong()
print("power", nvml.nvmlDeviceGetPowerUsage(h, ctypes.byref(u)), u.value)
print("energy", nvml.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(e)), e.value)
print("sm clock", nvml.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(u)), u.value)
print("temp", nvml.nvmlDeviceGetTemperature(h, 0, ctypes.byref(u)), u.value)
r = (ctypes.c_ulonglong * 1)()
print("clock reasons", nvml.nvmlDeviceGetCurrentClocksEventReasons(h, r), r[0])
class Util(ctypes.Structure): _fields_ = [("gpu", ctypes.c_uint), ("mem", ctypes.c_uint)]
ut = Util(); print("util", nvml.nvmlDeviceGetUtilizationRates(h, ctypes.byref(ut)), ut.gpu)
maj, mi = ctypes.c_int(), ctypes.c_int()
print("cuda cc", nvml.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(maj), ctypes.byref(mi)), maj.value, mi.value)
v = ctypes.c_int(); print("cuda driver version", nvml.nvmlSystemGetCudaDriverVersion(ctypes.byref(v)), v.value)
cnt = ctypes.c_uint(0)
print("procs", nvml.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(cnt), None), cnt.value)
# GPM: two samples 200 ms apart, SM activity (metric 2 = NVML_GPM_METRIC_SM_UTIL? use 1..3)
s1, s2 = ctypes.c_void_p(), ctypes.c_void_p()
print("gpm alloc", nvml.nvmlGpmSampleAlloc(ctypes.byref(s1)), nvml.nvmlGpmSampleAlloc(ctypes.byref(s2)))
print("gpm get 1", nvml.nvmlGpmSampleGet(h, s1)); time.sleep(0.2); print("gpm get 2", nvml.nvmlGpmSampleGet(h, s2))
class Metric(ctypes.Structure):
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_int), ("value", ctypes.c_double),
                ("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]
class MetricsGet(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", ctypes.c_void_p),
                ("sample2", ctypes.c_void_p), ("metrics", Metric * 98)]
mg = MetricsGet(); mg.version = 1; mg.numMetrics = 3; mg.sample1 = s1; mg.sample2 = s2
for i, mid in enumerate([1, 2, 3]): mg.metrics[i].metricId = mid
print("gpm metrics", nvml.nvmlGpmMetricsGet(ctypes.byref(mg)), [(mg.metrics[i].metricId, mg.metrics[i].nvmlReturn, mg.metrics[i].value) for i in range(3)])
print("end", status())
