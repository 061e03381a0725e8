#!/usr/bin/env python3
"""A small PyTorch job for `gpuslack diagnose -- python3 scripts/device/diagnose-job.py` on a
real GPU: four phases of about 7 s each, one per kind of time the report tells apart. A context
held with nothing running, tiny eager kernels (launch-bound), bf16 GEMMs (compute-bound), and
bursts of work between 80 ms host waits (input-starved). Prints each phase's start, so the
report's timeline can be checked against it."""
import time

import torch

PHASE_S = 7.0


def phase(name):
    print(f"phase {name} at {time.time():.1f}", flush=True)
    return time.time() + PHASE_S


dev = torch.device("cuda")
x = torch.zeros((10, 10), device=dev)
torch.cuda.synchronize()

end = phase("idle_held")
while time.time() < end:
    time.sleep(0.1)

end = phase("tiny_kernels")
while time.time() < end:
    for _ in range(1000):
        x = x + 1
    torch.cuda.synchronize()

a = torch.randn((8192, 8192), device=dev, dtype=torch.bfloat16)
b = torch.randn((8192, 8192), device=dev, dtype=torch.bfloat16)
end = phase("gemm_bf16")
while time.time() < end:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()

s = torch.randn((2048, 2048), device=dev)
end = phase("starved_bursts")
while time.time() < end:
    for _ in range(3):
        s = torch.tanh(s @ s)
    torch.cuda.synchronize()
    time.sleep(0.08)
print("done", flush=True)
