"""Which copy kernel shape is fast and steady (run on the device machine): the one-access copy,
grid-stride loops with 1-8 loads in flight per thread, and warp-contiguous runs of 4-16 loads
per thread, at several grid sizes, against the driver's memcpy (PyTorch copy_). 8 GiB arrays,
each run queued behind a spin kernel (no host launch latency timed), best and median of 40
runs, TB/s counting bytes read plus written; every copy checked.

Usage: copy_loops.py copy_loops.cu results.json"""
import ctypes, json, sys, torch

from driver import Module, best_and_median_tb_s, compile_cubin, copied

dev = torch.device("cuda:0")
mod = Module(compile_cubin(sys.argv[1]), dev)
sms = torch.cuda.get_device_properties(0).multi_processor_count
n = 8 << 30
a = torch.empty(n, dtype=torch.uint8, device=dev)
c = torch.empty(n, dtype=torch.uint8, device=dev)
a.view(torch.float64).uniform_(0.5, 1.5)
ap, cp, n2 = ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(c.data_ptr()), ctypes.c_long(n // 16)
cases = [("torch copy_", None, 0, 0), ("copy_p1", "copy_p1", (n // 16 + 255) // 256, 256)]
for name in ["copy_gs1", "copy_gs2", "copy_gs4", "copy_gs8", "copy_warp4", "copy_warp8", "copy_warp16"]:
    for threads in [256, 512, 1024]:
        for per_sm in [1, 2, 4, 8, 16, 32]:
            if threads * per_sm > 2048 or (threads * per_sm < 1024):
                continue
            cases.append((f"{name} t{threads} {per_sm}/SM", name, sms * per_sm, threads))
results = []
for label, kernel, grid, threads in cases:
    c.zero_()
    if kernel is None:
        run = lambda: c.copy_(a)
    else:
        f = mod.fn(kernel)
        run = lambda: mod.launch(f, grid, threads, [ap, cp, n2])
    best, median = best_and_median_tb_s(2 * n, mod.times_ms(run, 40, queued=True))
    ok = copied(a, c)
    print(f"{label:28s} best {best:.4f} TB/s  median {median:.4f}  checked {ok}", flush=True)
    results.append({"name": label, "best_tb_s": best, "median_tb_s": median, "checked": ok})
json.dump(results, open(sys.argv[2], "w"), indent=1)
