#!/usr/bin/env python3
"""A short training job for `gpuslack diagnose -- python3 train.py`: a small CNN fed first by a
slow single-process loader, then from memory; it exits with code 3 so that the pass-through of
the exit code shows."""
import sys
import time

import torch

dev = torch.device("cuda:0")
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step(x):
    loss = torch.nn.functional.cross_entropy(model(x), torch.zeros(x.shape[0], dtype=torch.long, device=dev))
    opt.zero_grad()
    loss.backward()
    opt.step()


end = time.time() + 12
while time.time() < end:  # starved: the host "decodes" each batch for 150 ms
    batch = torch.rand(64, 3, 128, 128)
    time.sleep(0.15)
    step(batch.to(dev))
x = torch.rand(256, 3, 128, 128, device=dev)
end = time.time() + 10
while time.time() < end:  # fed: batches already on the GPU
    step(x)
torch.cuda.synchronize()
print("train.py: done", flush=True)
sys.exit(3)
