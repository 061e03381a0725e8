"""Copy bandwidth against array size (run on the device machine): does a bigger array hide the
fixed cost of a kernel (launch, ramp-up, the last wave's tail) that a 4 GiB copy still pays?
PyTorch's copy_ and the plain one-access-per-thread copy (copy_p1 in bulk_copy.cu) at 1 to 32
GiB per array, timed as launched and queued behind a spin kernel, best and median of 40 runs, TB/s counting bytes read plus written; every copy
checked. Also: how long an empty kernel takes between two events.

Usage: [COPY_SIZES_GIB=4,8] copy_sizes.py bulk_copy.cu results.json"""
import ctypes, json, os, sys, torch

cu = ctypes.CDLL("libcuda.so.1")
nvrtc = ctypes.CDLL("/usr/local/cuda/lib64/libnvrtc.so.13")
src = open(sys.argv[1], "rb").read() + b'''
extern "C" __global__ void empty() {}
// Holds the stream for ns nanoseconds so that the events and the copy behind it are queued
// before the first event fires (nvbench's blocking kernel): the host's launch latency is then
// not timed.
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
'''
prog = ctypes.c_void_p()
assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"bulk_copy.cu", 0, None, None) == 0
opts = (ctypes.c_char_p * 1)(b"--gpu-architecture=sm_90")
assert nvrtc.nvrtcCompileProgram(prog, 1, opts) == 0
size = ctypes.c_size_t()
nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
cubin = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetCUBIN(prog, cubin)

torch.cuda.init()
dev = torch.device("cuda:0")
torch.zeros(1, device=dev)  # makes the primary context current for the driver calls below
mod = ctypes.c_void_p()
assert cu.cuModuleLoadData(ctypes.byref(mod), cubin) == 0
stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


def fn(name):
    f = ctypes.c_void_p()
    assert cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0
    return f


def launch(f, grid, block, args):
    ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in args])
    assert cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, ptrs, None) == 0


def times_ms(run, reps, queued=False):
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if queued:
            launch(spin, 1, 1, [ctypes.c_ulonglong(200_000)])
        s.record(); run(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e))
    return sorted(ts)


empty = fn("empty")
spin = fn("spin")
results = {"copies": []}
for queued in [False, True]:
    t = times_ms(lambda: launch(empty, 1, 32, []), 200, queued)
    print(f"empty kernel between events, queued behind a spin {queued}: best {t[0] * 1e3:.2f} us, median {t[len(t) // 2] * 1e3:.2f} us", flush=True)
    results[f"empty_kernel_us_queued_{queued}"] = [t[0] * 1e3, t[len(t) // 2] * 1e3]
copy = fn("copy_p1")
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
            run = lambda: launch(copy, (n // 16 + 255) // 256, 256, [ap, cp, n2])
        t = times_ms(run, 40, queued)
        torch.cuda.synchronize()
        idx = torch.randint(0, n // 8, (1 << 20,), device=dev)
        ok = torch.equal(a.view(torch.float64)[idx], c.view(torch.float64)[idx]) and torch.equal(a[-4096:], c[-4096:])
        best, median = 2 * n / (t[0] / 1e3) / 1e12, 2 * n / (t[len(t) // 2] / 1e3) / 1e12
        name_q = name + (" queued" if queued else "")
        print(f"{gib:>3} GiB  {name_q:21s} best {best:.4f} TB/s  median {median:.4f}  checked {ok}", flush=True)
        results["copies"].append({"gib": gib, "name": name, "queued": queued, "best_tb_s": best, "median_tb_s": median, "checked": ok})
    del a, c
    torch.cuda.empty_cache()
json.dump(results, open(sys.argv[2], "w"), indent=1)
