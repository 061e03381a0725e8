#!/usr/bin/env python3
"""Two processes on one GPU: `compute` runs bf16 matmuls, `hold` holds 10 GiB and sleeps.
usage: two_processes.py compute|hold SECONDS"""
import sys
import time

import torch

role, seconds = sys.argv[1], float(sys.argv[2])
dev = torch.device("cuda:0")
end = time.time() + seconds
if role == "compute":
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    while time.time() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
else:
    held = torch.empty(10 << 30, dtype=torch.uint8, device=dev)
    held.fill_(1)
    torch.cuda.synchronize()
    time.sleep(max(0.0, end - time.time()))
