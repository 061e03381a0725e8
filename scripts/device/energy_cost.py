#!/usr/bin/env python3
"""What reading the total energy counter costs, two ways (run on the device machine):
nvmlDeviceGetTotalEnergyConsumption against nvmlDeviceGetFieldValues with
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION (83), alone and together with the two power fields
gpuslack already reads every tick (186 instant, 185 average). CPU and wall time per call, and
whether the two agree: both counters are read back to back, and each one's value is checked to
advance at the rate the power reading implies.

Usage: energy_cost.py"""
import time
import pynvml as nv

nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(0)
ENERGY, INSTANT, AVERAGE = 83, 186, 185


def cost(label, call, n):
    call()
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        call()
    c1, w1 = time.process_time(), time.perf_counter()
    print(f"{label:52s} cpu {1e6 * (c1 - c0) / n:9.1f} us  wall {1e6 * (w1 - w0) / n:9.1f} us  ({n} calls)", flush=True)


def field_energy():
    v = nv.nvmlDeviceGetFieldValues(h, [ENERGY])[0]
    assert v.nvmlReturn == 0, v.nvmlReturn
    return v.value.ullVal


cost("nvmlDeviceGetTotalEnergyConsumption", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h), 50)
cost("nvmlDeviceGetFieldValues [83]", field_energy, 2000)
cost("nvmlDeviceGetFieldValues [186, 185]", lambda: nv.nvmlDeviceGetFieldValues(h, [INSTANT, AVERAGE]), 2000)
cost("nvmlDeviceGetFieldValues [186, 185, 83]", lambda: nv.nvmlDeviceGetFieldValues(h, [INSTANT, AVERAGE, ENERGY]), 2000)

print("agreement, 20 pairs 0.5 s apart: api_mj field_mj diff_mj | field advance vs power*dt", flush=True)
prev = None
for i in range(20):
    api = nv.nvmlDeviceGetTotalEnergyConsumption(h)
    fld = field_energy()
    t = time.perf_counter()
    p = nv.nvmlDeviceGetPowerUsage(h)
    if prev:
        dt = t - prev[0]
        print(f"  {api} {fld} {fld - api:+d} | field +{fld - prev[2]} mJ, api +{api - prev[1]} mJ, power {p / 1000:.1f} W x {dt:.3f} s = {p * dt:.0f} mJ", flush=True)
    prev = (t, api, fld)
    time.sleep(0.5)
# How often the field value changes: read it back to back for 0.2 s.
vals, t0 = [], time.perf_counter()
while time.perf_counter() - t0 < 0.2:
    vals.append((time.perf_counter() - t0, field_energy()))
changes = [t for (t, v), (_, pv) in zip(vals[1:], vals) if v != pv]
print(f"field 83 read {len(vals)} times in 0.2 s, changed {len(changes)} times; gaps between changes (ms): {[round(1e3 * (b - a), 1) for a, b in zip(changes, changes[1:])][:12]}")
