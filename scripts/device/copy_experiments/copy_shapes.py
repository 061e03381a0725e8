"""Copy-bandwidth experiment (run on the device machine): the plain one-access-per-thread copy
against TMA bulk copies (cp.async.bulk through shared memory, bulk_copy.cu) and against offsets
between the two arrays (STREAM's OFFSET), with PyTorch's copy_ beside each. 4 GiB arrays, best
and median of 20 runs; every copy is checked.

Usage: copy_shapes.py bulk_copy.cu results.json
Results of 2026-11-30: docs/validation/h200-copy-experiments.txt."""
import ctypes, sys, json, torch

cu = ctypes.CDLL("libcuda.so.1")
nvrtc = ctypes.CDLL("/usr/local/cuda/lib64/libnvrtc.so.13")
src = open(sys.argv[1], "rb").read()
prog = ctypes.c_void_p()
assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"bulk_copy.cu", 0, None, None) == 0
opts = (ctypes.c_char_p * 1)(b"--gpu-architecture=sm_90")
rc = nvrtc.nvrtcCompileProgram(prog, 1, opts)
size = ctypes.c_size_t()
nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
log = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetProgramLog(prog, log)
assert rc == 0, log.value.decode()
nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
cubin = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetCUBIN(prog, cubin)

torch.cuda.init()
dev = torch.device("cuda:0")
GiB = 1 << 30
N = 4 * GiB  # bytes per array
pad = 8 << 20
big = torch.empty(2 * N + 2 * pad, dtype=torch.uint8, device=dev)
base = big.data_ptr()
a = big[:N]
a.view(torch.float64).uniform_(0.5, 1.5)
torch.cuda.synchronize()
mod = ctypes.c_void_p()
assert cu.cuModuleLoadData(ctypes.byref(mod), cubin) == 0
sms = torch.cuda.get_device_properties(0).multi_processor_count
stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

def fn(name, smem=0):
    f = ctypes.c_void_p()
    assert cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0
    if smem > 48 * 1024:
        assert cu.cuFuncSetAttribute(f, 8, smem) == 0, name
    return f

def launch(f, grid, block, smem, args):
    ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in args])
    rc = cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem, stream, ptrs, None)
    assert rc == 0, rc

def timeit(run, reps=20):
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); run(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return 2 * N / (ts[0] / 1e3) / 1e12, 2 * N / (ts[len(ts) // 2] / 1e3) / 1e12

results = []
def report(name, tb):
    print(f"{name:40s} best {tb[0]:.3f} TB/s  median {tb[1]:.3f}", flush=True)
    results.append({"name": name, "best_tb_s": tb[0], "median_tb_s": tb[1]})

def check(c):
    torch.cuda.synchronize()
    idx = torch.randint(0, N // 8, (1 << 20,), device=dev)
    ok = torch.equal(a.view(torch.float64)[idx], c.view(torch.float64)[idx]) and torch.equal(a[-4096:], c[-4096:])
    return ok

for off in [0, 4096, 65536, 256 * 1024 + 128, 1 << 20, (3 << 20) + 512, 5 << 20]:
    c = big[N + pad + off - (pad if off == 0 else 0): N + pad + off - (pad if off == 0 else 0) + N]
    c.zero_()
    report(f"torch copy_ off={off}", timeit(lambda: c.copy_(a)))
    f = fn("copy_p1")
    n2 = ctypes.c_long(N // 16)
    ap, cp = ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(c.data_ptr())
    for threads in [256, 512, 1024]:
        grid = (N // 16 + threads - 1) // threads
        c.zero_()
        report(f"p1 t{threads} off={off}", timeit(lambda: launch(f, grid, threads, 0, [ap, cp, n2])))
        assert check(c)
    if off not in (0, 65536, 1 << 20):
        continue
    nbytes = ctypes.c_long(N)
    for ch, st in [(2, 8), (4, 4), (4, 8), (8, 2), (8, 4), (8, 8), (16, 2), (16, 4), (32, 2), (32, 3), (64, 2)]:
        smem = ch * 1024 * st
        f = fn(f"copy_bulk_{ch}k_{st}", smem)
        per_sm = max(1, min(16, (220 * 1024) // smem))
        for k in sorted({1, 2, 4, per_sm}):
            if k > per_sm:
                continue
            c.zero_()
            report(f"bulk {ch}k x{st} grid={k}/SM off={off}", timeit(lambda: launch(f, sms * k, 32, smem, [ap, cp, nbytes])))
            assert check(c), f"bulk {ch}k {st} wrong"
json.dump(results, open(sys.argv[2], "w"), indent=1)
best = max(results, key=lambda r: r["best_tb_s"])
print("BEST", best)
