"""Cache hints for the copy (run on the device machine): the one-access-per-thread copy with each
pairing of load and store hints in copy_hints.cu, against the driver's memcpy (PyTorch copy_), on
every GPU of the machine. 8 GiB arrays, queued behind a spin kernel, best and median of 40 runs,
each run after a dot-like read of two other arrays (the bench's sequence leaves L2 so before a
copy); TB/s counting bytes read plus written; every copy checked.

Usage: copy_hints.py copy_hints.cu results.json"""
import ctypes, json, sys, torch

cu = ctypes.CDLL("libcuda.so.1")
nvrtc = ctypes.CDLL("/usr/local/cuda/lib64/libnvrtc.so.13")
src = open(sys.argv[1], "rb").read()
prog = ctypes.c_void_p()
assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"copy_hints.cu", 0, None, None) == 0
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


def fn(name):
    f = ctypes.c_void_p()
    assert cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0
    return f


def launch(f, grid, block, args):
    ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in args])
    assert cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, ptrs, None) == 0


def times_ms(run, reps=40, before=None):
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if before:
            before()
        launch(spin, 1, 1, [ctypes.c_ulonglong(200_000)])
        s.record(); run(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e))
    return sorted(ts)


results = []
for gpu in range(torch.cuda.device_count()):
    torch.cuda.set_device(gpu)
    dev = torch.device(f"cuda:{gpu}")
    torch.zeros(1, device=dev)
    mod = ctypes.c_void_p()
    assert cu.cuModuleLoadData(ctypes.byref(mod), cubin) == 0
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    sms = torch.cuda.get_device_properties(gpu).multi_processor_count
    spin = fn("spin")
    n = 8 << 30
    a, b, c, x = (torch.empty(n, dtype=torch.uint8, device=dev) for _ in range(4))
    for t in (a, b, x):
        t.view(torch.float64).uniform_(0.5, 1.5)
    out = torch.zeros(1, dtype=torch.float64, device=dev)
    n2 = ctypes.c_long(n // 16)
    ap, bp, cp, xp, op = (ctypes.c_void_p(t.data_ptr()) for t in (a, b, c, x, out))
    reader = fn("read_two")
    before = lambda: launch(reader, sms * 16, 256, [bp, xp, op, n2])
    cases = [("torch copy_", None)] + [(f"copy_l{l}_s{s_}", f"copy_l{l}_s{s_}") for l in range(5) for s_ in range(4)]
    names = ["plain", "cs", "lu", "nc", "nc.L1::no_allocate"]
    snames = ["plain", "cs", "wt", "cg"]
    for label, kernel in cases:
        c.zero_()
        if kernel is None:
            run = lambda: c.copy_(a)
        else:
            f = fn(kernel)
            run = lambda: launch(f, (n // 16 + 255) // 256, 256, [ap, cp, n2])
            l, s_ = int(kernel[6]), int(kernel[9])
            label = f"load {names[l]:18s} store {snames[s_]:5s}"
        t = times_ms(run, before=before)
        torch.cuda.synchronize()
        idx = torch.randint(0, n // 8, (1 << 20,), device=dev)
        ok = torch.equal(a.view(torch.float64)[idx], c.view(torch.float64)[idx]) and torch.equal(a[-4096:], c[-4096:])
        best, median = 2 * n / (t[0] / 1e3) / 1e12, 2 * n / (t[len(t) // 2] / 1e3) / 1e12
        print(f"gpu {gpu}  {label:36s} best {best:.4f} TB/s  median {median:.4f}  checked {ok}", flush=True)
        results.append({"gpu": gpu, "name": label, "best_tb_s": best, "median_tb_s": median, "checked": ok})
    del a, b, c, x
    torch.cuda.empty_cache()
json.dump(results, open(sys.argv[2], "w"), indent=1)
