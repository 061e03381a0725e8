"""What the copy experiments share (run on the device machine): their CUDA C compiled by NVRTC
for sm_90, with a spin kernel added; kernels loaded and launched through the driver API on the
current PyTorch stream; event timing, optionally queued behind the spin kernel so that the
host's launch latency is not timed (gpuslack's Gpu::time_queued_ms); and the copy check."""
import ctypes
import sys

import torch

cu = ctypes.CDLL("libcuda.so.1")
try:
    _nvrtc = ctypes.CDLL("libnvrtc.so.13")
except OSError:
    _nvrtc = ctypes.CDLL("/usr/local/cuda/lib64/libnvrtc.so.13")

# Added to every source: `spin` holds the stream for ns nanoseconds of the global timer, so that
# the events and the work behind it are queued before the first event fires (nvbench's blocking
# kernel); `empty` measures what an event pair around nothing costs.
_ADDED = b'''
extern "C" __global__ void empty() {}
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
'''
_HOLD_NS = 200_000
# CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_MAX_DYNAMIC_SMEM = 8


def compile_cubin(path):
    """The file at `path`, with the spin kernel, as a cubin for sm_90; exits with NVRTC's log on an error."""
    src = open(path, "rb").read() + _ADDED
    prog = ctypes.c_void_p()
    assert _nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, path.encode(), 0, None, None) == 0
    opts = (ctypes.c_char_p * 1)(b"--gpu-architecture=sm_90")
    if _nvrtc.nvrtcCompileProgram(prog, 1, opts) != 0:
        size = ctypes.c_size_t()
        _nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        _nvrtc.nvrtcGetProgramLog(prog, log)
        sys.exit(log.value.decode())
    size = ctypes.c_size_t()
    _nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    _nvrtc.nvrtcGetCUBIN(prog, cubin)
    return cubin


class Module:
    """A cubin loaded on `device` (made current through PyTorch), launching on its current stream."""

    def __init__(self, cubin, device):
        torch.cuda.set_device(device)
        torch.zeros(1, device=device)  # makes the primary context current for the driver calls
        self.handle = ctypes.c_void_p()
        assert cu.cuModuleLoadData(ctypes.byref(self.handle), cubin) == 0
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.spin = self.fn("spin")

    def fn(self, name, smem=0):
        f = ctypes.c_void_p()
        assert cu.cuModuleGetFunction(ctypes.byref(f), self.handle, name.encode()) == 0, name
        if smem > 48 * 1024:
            assert cu.cuFuncSetAttribute(f, _MAX_DYNAMIC_SMEM, smem) == 0, name
        return f

    def launch(self, f, grid, block, args, smem=0):
        ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in args])
        rc = cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem, self.stream, ptrs, None)
        assert rc == 0, rc

    def times_ms(self, run, reps, queued=False, before=None):
        """Each of `reps` runs between two events, sorted; `before` runs untimed ahead of each."""
        ts = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if before:
                before()
            if queued:
                self.launch(self.spin, 1, 1, [ctypes.c_ulonglong(_HOLD_NS)])
            s.record(); run(); e.record(); e.synchronize()
            ts.append(s.elapsed_time(e))
        return sorted(ts)


def best_and_median_tb_s(bytes_moved, ts):
    """TB/s of the fastest and the median of sorted times in ms."""
    return bytes_moved / (ts[0] / 1e3) / 1e12, bytes_moved / (ts[len(ts) // 2] / 1e3) / 1e12


def copied(a, c):
    """Whether c holds a: a million random f64 and the last 4 KiB compared."""
    torch.cuda.synchronize()
    idx = torch.randint(0, a.numel() // 8, (1 << 20,), device=a.device)
    return torch.equal(a.view(torch.float64)[idx], c.view(torch.float64)[idx]) and torch.equal(a[-4096:], c[-4096:])
