"""Copy-bandwidth experiment (run on the device machine): the plain one-access-per-thread copy
against TMA bulk copies (cp.async.bulk through shared memory, bulk_copy.cu) and against offsets
between the two arrays (STREAM's OFFSET), with PyTorch's copy_ beside each. 4 GiB arrays, best
and median of 20 runs; every copy is checked.

Usage: copy_shapes.py bulk_copy.cu results.json
Results of 2026-11-30: docs/validation/h200-copy-experiments.txt."""
import ctypes, sys, json, torch

from driver import Module, best_and_median_tb_s, compile_cubin, copied

dev = torch.device("cuda:0")
GiB = 1 << 30
N = 4 * GiB  # bytes per array
pad = 8 << 20
mod = Module(compile_cubin(sys.argv[1]), dev)
big = torch.empty(2 * N + 2 * pad, dtype=torch.uint8, device=dev)
a = big[:N]
a.view(torch.float64).uniform_(0.5, 1.5)
torch.cuda.synchronize()
sms = torch.cuda.get_device_properties(0).multi_processor_count


def timeit(run, reps=20):
    return best_and_median_tb_s(2 * N, mod.times_ms(run, reps))


results = []
def report(name, tb):
    print(f"{name:40s} best {tb[0]:.3f} TB/s  median {tb[1]:.3f}", flush=True)
    results.append({"name": name, "best_tb_s": tb[0], "median_tb_s": tb[1]})

for off in [0, 4096, 65536, 256 * 1024 + 128, 1 << 20, (3 << 20) + 512, 5 << 20]:
    c = big[N + pad + off - (pad if off == 0 else 0): N + pad + off - (pad if off == 0 else 0) + N]
    c.zero_()
    report(f"torch copy_ off={off}", timeit(lambda: c.copy_(a)))
    f = mod.fn("copy_p1")
    n2 = ctypes.c_long(N // 16)
    ap, cp = ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(c.data_ptr())
    for threads in [256, 512, 1024]:
        grid = (N // 16 + threads - 1) // threads
        c.zero_()
        report(f"p1 t{threads} off={off}", timeit(lambda: mod.launch(f, grid, threads, [ap, cp, n2])))
        assert copied(a, c)
    if off not in (0, 65536, 1 << 20):
        continue
    nbytes = ctypes.c_long(N)
    for ch, st in [(2, 8), (4, 4), (4, 8), (8, 2), (8, 4), (8, 8), (16, 2), (16, 4), (32, 2), (32, 3), (64, 2)]:
        smem = ch * 1024 * st
        f = mod.fn(f"copy_bulk_{ch}k_{st}", smem)
        per_sm = max(1, min(16, (220 * 1024) // smem))
        for k in sorted({1, 2, 4, per_sm}):
            if k > per_sm:
                continue
            c.zero_()
            report(f"bulk {ch}k x{st} grid={k}/SM off={off}", timeit(lambda: mod.launch(f, sms * k, 32, [ap, cp, nbytes], smem)))
            assert copied(a, c), f"bulk {ch}k {st} wrong"
json.dump(results, open(sys.argv[2], "w"), indent=1)
best = max(results, key=lambda r: r["best_tb_s"])
print("BEST", best)
