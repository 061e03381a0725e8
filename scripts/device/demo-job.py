#!/usr/bin/env python3
"""The job behind the recording bundled in gpuslack (tests/fixtures/h100-diagnose-job): the
pitch in one run. GPU-Util reads 100% for a whole phase while the card draws little more than a
held context, because a hand-written reduction is launched with one block; then the same sum
done right, a phase computing at full speed and one starved of input, for contrast.

    python3 demo-job.py                 # the recorded run: phases of PHASE_S seconds
    python3 demo-job.py --seconds 2     # a quick run of every phase
    python3 demo-job.py --sol PHASE     # one warmed-up step of PHASE between
                                        # cudaProfilerStart/Stop, for ncu --profile-from-start off

Each phase prints its start ("phase NAME at T") and what it achieved (GB/s, TFLOP/s), so the
report's timeline and the labels can be checked against the job itself. The one-block kernel is
CuPy's RawKernel over a PyTorch tensor (the way custom CUDA reaches a PyTorch job without a
build step); everything else is PyTorch.
"""
import argparse
import json
import sys
import time

import cupy
import torch

PHASES = ["one_block_sum", "torch_sum", "gemm_bf16", "starved_bursts"]
# The pitch is the longest phase: the report's "Change first" is the one that wins most back.
PHASE_S = {"one_block_sum": 14.0, "torch_sum": 5.0, "gemm_bf16": 7.0, "starved_bursts": 7.0}

ONE_BLOCK = cupy.RawKernel(r"""
extern "C" __global__ void loss_sum(const float* x, unsigned long long n, float* out) {
    // One block walks the whole array: the launch below asks for grid (1,), so one SM of the
    // GPU's 132 does all of it while GPU-Util reads 100%.
    float acc = 0.0f;
    for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    __shared__ float part[1024];
    part[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < blockDim.x; ++i) s += part[i];
        *out = s;
    }
}
""", "loss_sum")

dev = torch.device("cuda")
losses = torch.rand(1 << 26, device=dev)  # 64M per-token losses, 256 MiB
total = torch.zeros(1, device=dev)
a = torch.randn((8192, 8192), device=dev, dtype=torch.bfloat16)
b = torch.randn((8192, 8192), device=dev, dtype=torch.bfloat16)
s = torch.randn((2048, 2048), device=dev)
torch.cuda.synchronize()
LOSS_BYTES = losses.numel() * 4


def one_block_step():
    x = cupy.asarray(losses)
    out = cupy.asarray(total)
    ONE_BLOCK((1,), (1024,), (x, cupy.uint64(x.size), out))
    torch.cuda.synchronize()
    return LOSS_BYTES


def torch_sum_step():
    for _ in range(100):
        torch.sum(losses)
    torch.cuda.synchronize()
    return 100 * LOSS_BYTES


def gemm_step():
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    return 10 * 2 * 8192**3


def starved_step():
    global s
    for _ in range(3):
        s = torch.tanh(s @ s)
    torch.cuda.synchronize()
    time.sleep(0.08)  # the host preparing the next batch, one thread, no prefetch
    return 0


STEPS = {
    "one_block_sum": (one_block_step, "GB/s"),
    "torch_sum": (torch_sum_step, "GB/s"),
    "gemm_bf16": (gemm_step, "TFLOP/s"),
    "starved_bursts": (starved_step, "steps/s"),
}


def run(name, seconds):
    step, unit = STEPS[name]
    t0 = time.time()
    print(f"phase {name} at {t0:.2f}", flush=True)
    done = steps = 0
    while time.time() - t0 < seconds:
        done += step()
        steps += 1
    t1 = time.time()
    rate = steps / (t1 - t0) if unit == "steps/s" else done / (t1 - t0) / (1e9 if unit == "GB/s" else 1e12)
    print(f"end {name} at {t1:.2f}: {steps} steps, {rate:.1f} {unit}", flush=True)
    return {"name": name, "t0": round(t0, 2), "t1": round(t1, 2), "steps": steps,
            "rate": round(rate, 2), "unit": unit}


def sol(name):
    step, _ = STEPS[name]
    for _ in range(3):
        step()
    cudart = torch.cuda.cudart()
    cudart.cudaProfilerStart()
    step()
    cudart.cudaProfilerStop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, help="every phase this long (default: PHASE_S)")
    ap.add_argument("--sol", choices=PHASES, help="one warmed-up step of PHASE, for ncu")
    ap.add_argument("--phases-out", help="write the phases' JSON here")
    args = ap.parse_args()
    if args.sol:
        sol(args.sol)
        return 0
    phases = [run(n, args.seconds or PHASE_S[n]) for n in PHASES]
    print("done", flush=True)
    if args.phases_out:
        with open(args.phases_out, "w") as f:
            json.dump(phases, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
