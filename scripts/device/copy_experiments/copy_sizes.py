"""Copy bandwidth against array size (run on the device machine): does a bigger array hide the
fixed cost of a kernel (launch, ramp-up, the last wave's tail) that a 4 GiB copy still pays?
PyTorch's copy_ and the plain one-access-per-thread copy (copy_p1 in bulk_copy.cu) at 1 to 32
GiB per array, timed as launched and queued behind a spin kernel, best and median of 40 runs,
TB/s counting bytes read plus written; every copy checked. Also: how long an empty kernel takes between two events.

Usage: [COPY_SIZES_GIB=4,8] copy_sizes.py bulk_copy.cu results.json"""
import ctypes, json, os, sys, torch

from driver import Module, best_and_median_tb_s, compile_cubin, copied

dev = torch.device("cuda:0")
mod = Module(compile_cubin(sys.argv[1]), dev)
empty = mod.fn("empty")
results = {"copies": []}
for queued in [False, True]:
    t = mod.times_ms(lambda: mod.launch(empty, 1, 32, []), 200, queued)
    print(f"empty kernel between events, queued behind a spin {queued}: best {t[0] * 1e3:.2f} us, median {t[len(t) // 2] * 1e3:.2f} us", flush=True)
    results[f"empty_kernel_us_queued_{queued}"] = [t[0] * 1e3, t[len(t) // 2] * 1e3]
copy = mod.fn("copy_p1")
GiB = 1 << 30
for gib in [int(g) for g in os.environ.get("COPY_SIZES_GIB", "1,2,4,8,16,32").split(",")]:
    n = gib * GiB
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    c = torch.empty(n, dtype=torch.uint8, device=dev)
    a.view(torch.float64).uniform_(0.5, 1.5)
    for name, queued in [("torch copy_", False), ("copy_p1 t256", False), ("torch copy_", True), ("copy_p1 t256", True)]:
        c.zero_()
        if name == "torch copy_":
            run = lambda: c.copy_(a)
        else:
            ap, cp, n2 = ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(c.data_ptr()), ctypes.c_long(n // 16)
            run = lambda: mod.launch(copy, (n // 16 + 255) // 256, 256, [ap, cp, n2])
        best, median = best_and_median_tb_s(2 * n, mod.times_ms(run, 40, queued))
        ok = copied(a, c)
        name_q = name + (" queued" if queued else "")
        print(f"{gib:>3} GiB  {name_q:21s} best {best:.4f} TB/s  median {median:.4f}  checked {ok}", flush=True)
        results["copies"].append({"gib": gib, "name": name, "queued": queued, "best_tb_s": best, "median_tb_s": median, "checked": ok})
    del a, c
    torch.cuda.empty_cache()
json.dump(results, open(sys.argv[2], "w"), indent=1)
