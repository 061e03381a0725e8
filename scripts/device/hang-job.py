#!/usr/bin/env python3
"""A job that hangs on one GPU, for a recording with its process list (tests/fixtures/
h100-hang-job): 6 s of bf16 GEMMs, then a kernel of 24 one-warp blocks waiting on a flag that
nothing writes, as a rank waits in a collective whose peer died. The wait is bounded by the
GPU's own timer (SPIN_S), so the GPU is never left hung.

    python3 hang-job.py [--spin-s 75] [--phases-out FILE]
"""
import argparse
import json
import time

import cupy
import torch

SPIN = cupy.RawKernel(r"""
extern "C" __global__ void wait_for_peer(volatile const int* flag, unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (*flag == 0 && now - start < ns);
}
""", "wait_for_peer")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spin-s", type=float, default=75.0)
    ap.add_argument("--phases-out")
    args = ap.parse_args()
    dev = torch.device("cuda")
    a = torch.randn((8192, 8192), device=dev, dtype=torch.bfloat16)
    flag = cupy.zeros(1, dtype=cupy.int32)
    torch.cuda.synchronize()
    phases = []
    t0 = time.time()
    print(f"phase gemm_bf16 at {t0:.2f}", flush=True)
    while time.time() - t0 < 6.0:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    t1 = time.time()
    phases.append({"name": "gemm_bf16", "t0": round(t0, 2), "t1": round(t1, 2)})
    print(f"phase wait_for_peer at {t1:.2f}", flush=True)
    SPIN((24,), (32,), (flag, cupy.uint64(int(args.spin_s * 1e9))))
    cupy.cuda.Device(0).synchronize()
    t2 = time.time()
    phases.append({"name": "wait_for_peer", "t0": round(t1, 2), "t1": round(t2, 2)})
    print(f"end wait_for_peer at {t2:.2f}", flush=True)
    if args.phases_out:
        with open(args.phases_out, "w") as f:
            json.dump(phases, f, indent=1)


if __name__ == "__main__":
    main()
