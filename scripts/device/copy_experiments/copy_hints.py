"""Cache hints for the copy (run on the device machine): the one-access-per-thread copy with each
pairing of load and store hints in copy_hints.cu, against the driver's memcpy (PyTorch copy_), on
every GPU of the machine. 8 GiB arrays, queued behind a spin kernel, best and median of 40 runs,
each run after a dot-like read of two other arrays (the bench's sequence leaves L2 so before a
copy); TB/s counting bytes read plus written; every copy checked.

Usage: copy_hints.py copy_hints.cu results.json"""
import ctypes, json, sys, torch

from driver import Module, best_and_median_tb_s, compile_cubin, copied

cubin = compile_cubin(sys.argv[1])
results = []
for gpu in range(torch.cuda.device_count()):
    dev = torch.device(f"cuda:{gpu}")
    mod = Module(cubin, dev)
    sms = torch.cuda.get_device_properties(gpu).multi_processor_count
    n = 8 << 30
    a, b, c, x = (torch.empty(n, dtype=torch.uint8, device=dev) for _ in range(4))
    for t in (a, b, x):
        t.view(torch.float64).uniform_(0.5, 1.5)
    out = torch.zeros(1, dtype=torch.float64, device=dev)
    n2 = ctypes.c_long(n // 16)
    ap, bp, cp, xp, op = (ctypes.c_void_p(t.data_ptr()) for t in (a, b, c, x, out))
    reader = mod.fn("read_two")
    before = lambda: mod.launch(reader, sms * 16, 256, [bp, xp, op, n2])
    cases = [("torch copy_", None)] + [(f"copy_l{l}_s{s_}", f"copy_l{l}_s{s_}") for l in range(5) for s_ in range(4)]
    names = ["plain", "cs", "lu", "nc", "nc.L1::no_allocate"]
    snames = ["plain", "cs", "wt", "cg"]
    for label, kernel in cases:
        c.zero_()
        if kernel is None:
            run = lambda: c.copy_(a)
        else:
            f = mod.fn(kernel)
            run = lambda: mod.launch(f, (n // 16 + 255) // 256, 256, [ap, cp, n2])
            l, s_ = int(kernel[6]), int(kernel[9])
            label = f"load {names[l]:18s} store {snames[s_]:5s}"
        best, median = best_and_median_tb_s(2 * n, mod.times_ms(run, 40, queued=True, before=before))
        ok = copied(a, c)
        print(f"gpu {gpu}  {label:36s} best {best:.4f} TB/s  median {median:.4f}  checked {ok}", flush=True)
        results.append({"gpu": gpu, "name": label, "best_tb_s": best, "median_tb_s": median, "checked": ok})
    del a, b, c, x
    torch.cuda.empty_cache()
json.dump(results, open(sys.argv[2], "w"), indent=1)
