"""Which copy kernel shape is fast and steady (run on the device machine): the one-access copy,
grid-stride loops with 1-8 loads in flight per thread, and warp-contiguous runs of 4-16 loads
per thread, at several grid sizes, against the driver's memcpy (PyTorch copy_). 8 GiB arrays,
each run queued behind a spin kernel (no host launch latency timed), best and median of 40
runs, TB/s counting bytes read plus written; every copy checked.

Usage: copy_loops.py copy_loops.cu results.json"""
import ctypes, json, sys, torch

cu = ctypes.CDLL("libcuda.so.1")
nvrtc = ctypes.CDLL("/usr/local/cuda/lib64/libnvrtc.so.13")
src = open(sys.argv[1], "rb").read()
prog = ctypes.c_void_p()
assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"copy_loops.cu", 0, None, None) == 0
opts = (ctypes.c_char_p * 1)(b"--gpu-architecture=sm_90")
rc = nvrtc.nvrtcCompileProgram(prog, 1, opts)
if rc != 0:
    size = ctypes.c_size_t(); nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value); nvrtc.nvrtcGetProgramLog(prog, log)
    sys.exit(log.value.decode())
size = ctypes.c_size_t()
nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
cubin = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetCUBIN(prog, cubin)

dev = torch.device("cuda:0")
torch.zeros(1, device=dev)  # makes the primary context current for the driver calls below
mod = ctypes.c_void_p()
assert cu.cuModuleLoadData(ctypes.byref(mod), cubin) == 0
stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
sms = torch.cuda.get_device_properties(0).multi_processor_count


def fn(name):
    f = ctypes.c_void_p()
    assert cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0
    return f


def launch(f, grid, block, args):
    ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in args])
    assert cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, ptrs, None) == 0


spin = fn("spin")


def times_ms(run, reps=40):
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        launch(spin, 1, 1, [ctypes.c_ulonglong(200_000)])
        s.record(); run(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e))
    return sorted(ts)


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
        f = fn(kernel)
        run = lambda: launch(f, grid, threads, [ap, cp, n2])
    t = times_ms(run)
    torch.cuda.synchronize()
    idx = torch.randint(0, n // 8, (1 << 20,), device=dev)
    ok = torch.equal(a.view(torch.float64)[idx], c.view(torch.float64)[idx]) and torch.equal(a[-4096:], c[-4096:])
    best, median = 2 * n / (t[0] / 1e3) / 1e12, 2 * n / (t[len(t) // 2] / 1e3) / 1e12
    print(f"{label:28s} best {best:.4f} TB/s  median {median:.4f}  checked {ok}", flush=True)
    results.append({"name": label, "best_tb_s": best, "median_tb_s": median, "checked": ok})
json.dump(results, open(sys.argv[2], "w"), indent=1)
