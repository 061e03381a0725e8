#!/usr/bin/env python3
"""A workload whose phases change, to watch the adaptive cadence escalate: no process for 10 s,
bf16 matmuls for 10 s, a held context with nothing running for 10 s, matmuls for 10 s, then exit.
Each phase's start is printed as `PHASE unix_seconds`.
usage: phases.py"""
import sys
import time


def say(phase):
    print(f"{phase} {time.time():.3f}", flush=True)


say("idle")
time.sleep(10)
import torch  # noqa: E402  (no CUDA context during the first phase)

dev = torch.device("cuda:0")
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
torch.cuda.synchronize()
for phase in ("matmul", "held", "matmul"):
    say(phase)
    end = time.time() + 10
    if phase == "held":
        time.sleep(10)
        continue
    while time.time() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
say("exit")
sys.exit(0)
