#!/usr/bin/env python3
"""Peer-copy bandwidth between GPU 0 and GPU 1 as PyTorch measures it: the reference for the
seesaw workload's hand-off figure (run on the two-GPU device machine)."""
import time

import torch

n = 64 << 20  # f32: 256 MiB, the seesaw's buffer
a = torch.rand(n, device="cuda:0")
b = torch.empty(n, device="cuda:1")
print("can_device_access_peer(0, 1):", torch.cuda.can_device_access_peer(0, 1))
for _ in range(3):
    b.copy_(a)
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
reps = 20
t = time.perf_counter()
for _ in range(reps):
    b.copy_(a)
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
dt = time.perf_counter() - t
print(f"torch peer copy 0->1: {4 * n * reps / dt / 1e9:.1f} GB/s")
