#!/usr/bin/env python3
"""Runs the workloads whose verdicts gpuslack must get right, in timed phases on GPU 0, while
`gpuslack record` (with GPM, and a second one with --no-gpm) samples the GPU. Run on the device
machine by scripts/device/record_verdicts.sh.

Phases: idle, a held context, eager tiny kernels, the same in a CUDA graph, a device copy, bf16
and fp32 GEMMs, pinned and pageable host<->device copies, bursts of work between host waits,
allocation churn (40 GiB allocated, filled and freed with empty_cache every step), one long
kernel on a single 1024-thread block, a random gather, a ResNet-18 training loop starved by a
slow single-process loader and the same loop fed by workers, a small transformer training in
bf16, and a kernel spinning on a flag nobody writes (bounded by the GPU's own timer: it ends by
itself after SPIN_S, so the GPU is never left hung).

Writes phases.json and labels.json (accepted classes per phase, trimmed by TRIM_S at each end)
to the output folder. Usage: verdicts.py OUTDIR
"""
import json
import os
import sys
import time

import cupy
import torch

PHASE_S = 7.0
GAP_S = 2.0
TRIM_S = 1.5
SPIN_S = 75.0

OUT = sys.argv[1]
phases = []
dev = torch.device("cuda:0")


def phase(name, accept, seconds=PHASE_S, trim_start=TRIM_S):
    """Decorator-like helper: runs body(deadline) for `seconds` and records the phase."""

    def run(body):
        torch.cuda.synchronize()
        t0 = time.time()
        deadline = t0 + seconds
        body(deadline)
        torch.cuda.synchronize()
        t1 = time.time()
        phases.append({"name": name, "t0": t0, "t1": t1, "gpus": [0], "accept": accept,
                       "trim_start": trim_start})
        print(f"{name}: {t1 - t0:.1f} s", flush=True)
        time.sleep(GAP_S)

    return run


def idle_phase(name, accept):
    t0 = time.time()
    time.sleep(PHASE_S)
    phases.append({"name": name, "t0": t0, "t1": time.time(), "gpus": [0], "accept": accept,
                   "trim_start": TRIM_S})
    time.sleep(GAP_S)


# Bare idle: no context yet in this process (the recorders keep NVML from loading libcuda).
idle_phase("idle", ["idle"])
torch.zeros(1, device=dev)
torch.cuda.synchronize()
time.sleep(2)
idle_phase("idle_held", ["idle_held"])

small = torch.randn(10, 10, device=dev)


@phase("tiny_eager", ["launch_bound"])
def _(deadline):
    x = small
    while time.time() < deadline:
        for _ in range(200):
            x = x * 1.0001 + 0.0001


graph = torch.cuda.CUDAGraph()
static = small.clone()
with torch.cuda.graph(graph):
    y = static
    for _ in range(200):
        y = y * 1.0001 + 0.0001


@phase("tiny_graph", ["launch_bound"])
def _(deadline):
    while time.time() < deadline:
        for _ in range(20):
            graph.replay()
        torch.cuda.synchronize()


a = torch.empty(1 << 30, dtype=torch.float32, device=dev).fill_(1.0)  # 4 GiB
b = torch.empty_like(a)


@phase("device_copy", ["memory_bound"])
def _(deadline):
    while time.time() < deadline:
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize()


del a, b
m16 = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)


@phase("gemm_bf16", ["compute_bound"])
def _(deadline):
    while time.time() < deadline:
        for _ in range(10):
            torch.matmul(m16, m16)
        torch.cuda.synchronize()


torch.backends.cuda.matmul.allow_tf32 = False
m32 = torch.randn(8192, 8192, device=dev)


@phase("gemm_fp32", ["compute_bound"])
def _(deadline):
    while time.time() < deadline:
        torch.matmul(m32, m32)
        torch.cuda.synchronize()


del m16, m32
host_pinned = torch.empty(1 << 28, dtype=torch.float32).pin_memory()  # 1 GiB
host_pinned.fill_(1.0)
host_pageable = torch.ones(1 << 28, dtype=torch.float32)
on_gpu = torch.empty(1 << 28, dtype=torch.float32, device=dev)


@phase("h2d_pinned", ["transfer_bound"])
def _(deadline):
    while time.time() < deadline:
        on_gpu.copy_(host_pinned, non_blocking=True)
        torch.cuda.synchronize()


@phase("d2h_pinned", ["transfer_bound"])
def _(deadline):
    while time.time() < deadline:
        host_pinned.copy_(on_gpu, non_blocking=True)
        torch.cuda.synchronize()


@phase("h2d_pageable", ["transfer_bound"])
def _(deadline):
    while time.time() < deadline:
        on_gpu.copy_(host_pageable)
        torch.cuda.synchronize()


del host_pinned, host_pageable, on_gpu
burst = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)


@phase("starved_bursts", ["input_starved"])
def _(deadline):
    while time.time() < deadline:
        for _ in range(20):
            torch.matmul(burst, burst)
        torch.cuda.synchronize()
        time.sleep(0.08)


torch.cuda.empty_cache()


@phase("allocation_churn", ["input_starved", "launch_bound", "memory_bound"])
def _(deadline):
    while time.time() < deadline:
        x = torch.empty(40 << 30, dtype=torch.uint8, device=dev)
        x.fill_(1)
        torch.cuda.synchronize()
        del x
        torch.cuda.empty_cache()


ONE_BLOCK = cupy.RawKernel(r"""
extern "C" __global__ void one_block_sum(const float* x, unsigned long long n, int reps,
                                         float* out) {
    float acc = 0.0f;
    for (int r = 0; r < reps; ++r)
        for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) acc += x[i] * 1.0001f;
    __shared__ float part[1024];
    part[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < blockDim.x; ++i) s += part[i];
        *out = s;
    }
}
""", "one_block_sum")
xs = cupy.ones(1 << 26, dtype=cupy.float32)  # 256 MiB
out1 = cupy.zeros(1, dtype=cupy.float32)


@phase("one_block_reduction", ["launch_bound"])
def _(deadline):
    while time.time() < deadline:
        ONE_BLOCK((1,), (1024,), (xs, cupy.uint64(xs.size), cupy.int32(4), out1))
        cupy.cuda.Device(0).synchronize()


del xs
table = torch.randn(1 << 30, device=dev)  # 4 GiB
index = torch.randint(0, 1 << 30, (1 << 27,), device=dev)


@phase("random_gather", ["memory_bound"])
def _(deadline):
    while time.time() < deadline:
        for _ in range(10):
            table[index].sum()
        torch.cuda.synchronize()


del table, index
torch.cuda.empty_cache()

import torchvision  # noqa: E402


class SlowImages(torch.utils.data.Dataset):
    """Random images with a CPU cost per item, like JPEG decoding and augmentation."""

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, 224, 224, generator=g)
        for _ in range(4):
            img = torch.nn.functional.avg_pool2d(img[None], 3, 1, 1)[0]
        return img, i % 1000


def train(deadline, loader):
    model = torchvision.models.resnet18().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        if time.time() >= deadline:
            break
        x = x.to(dev, non_blocking=True).to(memory_format=torch.channels_last)
        y = y.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


@phase("train_starved_loader", ["input_starved"], seconds=20.0, trim_start=4.0)
def _(deadline):
    train(deadline, torch.utils.data.DataLoader(SlowImages(), batch_size=64, num_workers=0))


@phase("train_fed_loader", ["compute_bound", "memory_bound", "input_starved"], seconds=20.0,
       trim_start=6.0)
def _(deadline):
    loader = torch.utils.data.DataLoader(SlowImages(), batch_size=64, num_workers=12,
                                         pin_memory=True, persistent_workers=False,
                                         prefetch_factor=4)
    train(deadline, loader)


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(d, 16, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                       torch.nn.Linear(4 * d, d))
        self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    def forward(self, x):
        h = self.n1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.n2(x))


@phase("transformer_train", ["compute_bound", "memory_bound"], seconds=15.0, trim_start=4.0)
def _(deadline):
    model = torch.nn.Sequential(*[Block(2048) for _ in range(8)]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(16, 1024, 2048, device=dev)
    while time.time() < deadline:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()


torch.cuda.empty_cache()
SPIN = cupy.RawKernel(r"""
extern "C" __global__ void spin(volatile const int* flag, unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (*flag == 0 && now - start < ns);
}
""", "spin")
flag = cupy.zeros(1, dtype=cupy.int32)


@phase("spin_no_collective", ["launch_bound", "hung"], seconds=SPIN_S)
def _(deadline):
    # 24 one-warp blocks: ~18% of the 132 SMs, like the rank of a deadlocked collective.
    SPIN((24,), (32,), (flag, cupy.uint64(int(SPIN_S * 1e9))))
    cupy.cuda.Device(0).synchronize()


spin_phase = phases[-1]
with open(os.path.join(OUT, "phases.json"), "w") as f:
    json.dump([{k: p[k] for k in ("name", "t0", "t1", "gpus")} for p in phases], f, indent=1)
segments = []
for p in phases:
    if p["name"] == "spin_no_collective":
        # gpuslack's bound: hung within 60 s of the spin's start, and for the rest of it.
        segments.append({"gpu": 0, "start": p["t0"] + 60.0, "end": p["t1"] - 0.5,
                         "scenario": "spin_after_60s", "accept": ["hung"]})
        segments.append({"gpu": 0, "start": p["t0"] + TRIM_S, "end": p["t0"] + 60.0,
                         "scenario": "spin_first_minute", "accept": p["accept"]})
        continue
    segments.append({"gpu": 0, "start": p["t0"] + p["trim_start"], "end": p["t1"] - 0.5,
                     "scenario": p["name"], "accept": p["accept"]})
with open(os.path.join(OUT, "labels.json"), "w") as f:
    json.dump({"tdp_w": None, "segments": segments}, f, indent=1)
print("spin phase", spin_phase["t0"], spin_phase["t1"], flush=True)
