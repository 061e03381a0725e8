// driver.py adds the spin kernel that queues the timed runs.
// Copy kernels for copy_loops.py: persistent grid-stride loops against the one-access-per-thread
// copy, to see which shape is both fast and steady from run to run (the driver's own memcpy
// varies by 0.1% between runs, the one-access copy by 0.7%).
extern "C" __global__ void copy_p1(const double2 *__restrict__ a, double2 *__restrict__ c, long n2) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n2) c[i] = a[i];
}

// Grid-stride, U independent 16-byte loads in flight per thread, all loaded before any stored.
template <int U> __device__ void copy_gs(const double2 *__restrict__ a, double2 *__restrict__ c, long n2) {
    long stride = (long)gridDim.x * blockDim.x;
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n2; i += U * stride) {
        double2 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = a[i + u * stride];
#pragma unroll
        for (int u = 0; u < U; u++) c[i + u * stride] = v[u];
    }
    for (; i < n2; i += stride) c[i] = a[i];
}

// Each warp moves a contiguous run of 32 * U 16-byte elements per step (U coalesced loads per
// thread, then U stores), warps striding over the array.
template <int U> __device__ void copy_warp(const double2 *__restrict__ a, double2 *__restrict__ c, long n2) {
    long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5;
    long warps = ((long)gridDim.x * blockDim.x) >> 5;
    int lane = threadIdx.x & 31;
    for (long base = warp * 32 * U; base < n2; base += warps * 32 * U) {
        double2 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) { long j = base + u * 32 + lane; if (j < n2) v[u] = a[j]; }
#pragma unroll
        for (int u = 0; u < U; u++) { long j = base + u * 32 + lane; if (j < n2) c[j] = v[u]; }
    }
}

extern "C" {
__global__ void copy_gs1(const double2 *a, double2 *c, long n2) { copy_gs<1>(a, c, n2); }
__global__ void copy_gs2(const double2 *a, double2 *c, long n2) { copy_gs<2>(a, c, n2); }
__global__ void copy_gs4(const double2 *a, double2 *c, long n2) { copy_gs<4>(a, c, n2); }
__global__ void copy_gs8(const double2 *a, double2 *c, long n2) { copy_gs<8>(a, c, n2); }
__global__ void copy_warp4(const double2 *a, double2 *c, long n2) { copy_warp<4>(a, c, n2); }
__global__ void copy_warp8(const double2 *a, double2 *c, long n2) { copy_warp<8>(a, c, n2); }
__global__ void copy_warp16(const double2 *a, double2 *c, long n2) { copy_warp<16>(a, c, n2); }
}
