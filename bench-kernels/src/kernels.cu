// Reference kernels for gpuslack's workloads, compiled at run time with NVRTC for the device's
// own architecture (sm_90 on an H200). Every kernel writes every element it owns, so results
// can be checked against a CPU reference on random inputs.

extern "C" {

// ---- tiny: the article's anti-pattern and its fixes -------------------------------------------

// One tiny operation over a few elements: the useful work of one eager launch.
__global__ void tiny_step(float *x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = fmaf(x[i], a, b);
}

// The same `steps` operations fused into one launch: each thread keeps its element in a
// register for all of them.
__global__ void tiny_fused(float *x, float a, float b, int n, int steps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int s = 0; s < steps; ++s) v = fmaf(v, a, b);
    x[i] = v;
}

// ---- memory: BabelStream's five kernels, 16-byte accesses, grid-stride -------------------------

__global__ void stream_copy(const double2 *__restrict__ a, double2 *__restrict__ c, long n2) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n2; i += (long)gridDim.x * blockDim.x)
        __stcs(&c[i], __ldcs(&a[i]));
}

__global__ void stream_scale(double2 *__restrict__ b, const double2 *__restrict__ c, double s, long n2) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n2; i += (long)gridDim.x * blockDim.x) {
        double2 v = __ldcs(&c[i]);
        __stcs(&b[i], make_double2(s * v.x, s * v.y));
    }
}

__global__ void stream_add(const double2 *__restrict__ a, const double2 *__restrict__ b, double2 *__restrict__ c, long n2) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n2; i += (long)gridDim.x * blockDim.x) {
        double2 x = __ldcs(&a[i]), y = __ldcs(&b[i]);
        __stcs(&c[i], make_double2(x.x + y.x, x.y + y.y));
    }
}

__global__ void stream_triad(double2 *__restrict__ a, const double2 *__restrict__ b, const double2 *__restrict__ c, double s, long n2) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n2; i += (long)gridDim.x * blockDim.x) {
        double2 x = __ldcs(&b[i]), y = __ldcs(&c[i]);
        __stcs(&a[i], make_double2(x.x + s * y.x, x.y + s * y.y));
    }
}

// Dot product: each block reduces its part; partial sums go to `partial[blockIdx.x]`.
__global__ void stream_dot(const double2 *__restrict__ a, const double2 *__restrict__ b, double *partial, long n2) {
    __shared__ double sums[1024];
    double sum = 0.0;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n2; i += (long)gridDim.x * blockDim.x) {
        double2 x = __ldcs(&a[i]), y = __ldcs(&b[i]);
        sum += x.x * y.x + x.y * y.y;
    }
    sums[threadIdx.x] = sum;
    __syncthreads();
    for (int offset = blockDim.x / 2; offset > 0; offset /= 2) {
        if (threadIdx.x < offset) sums[threadIdx.x] += sums[threadIdx.x + offset];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

// ---- compute: an FP32 FMA chain on the non-tensor pipes ----------------------------------------

// Each thread runs 8 independent chains of `iters` dependent FMAs, seeded from `seed`, and
// writes their sum: 16 * iters flops per thread, no memory traffic in the loop.
__global__ void fma_chain(const float *__restrict__ seed, float *__restrict__ out, int iters, float a, float b) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float s = seed[t];
    float v0 = s, v1 = s + 1.0f, v2 = s + 2.0f, v3 = s + 3.0f, v4 = s + 4.0f, v5 = s + 5.0f, v6 = s + 6.0f, v7 = s + 7.0f;
    for (int i = 0; i < iters; ++i) {
        v0 = fmaf(v0, a, b); v1 = fmaf(v1, a, b); v2 = fmaf(v2, a, b); v3 = fmaf(v3, a, b);
        v4 = fmaf(v4, a, b); v5 = fmaf(v5, a, b); v6 = fmaf(v6, a, b); v7 = fmaf(v7, a, b);
    }
    out[t] = ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7));
}

}

extern "C" {

// The same values as reference::random_unit on the host: SplitMix64 of (seed ^ i * K), mapped
// to [0.5, 1.5).
__device__ unsigned long long splitmix64(unsigned long long x) {
    x += 0x9E3779B97F4A7C15ULL;
    unsigned long long z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Holds the stream for `ns` nanoseconds of the GPU's global timer, so that whatever the host
// queues behind it starts without waiting for the host (see Gpu::time_queued_ms).
__global__ void hold_stream(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

__global__ void init_random(double *x, long n, unsigned long long seed) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        unsigned long long bits = splitmix64(seed ^ ((unsigned long long)i * 0xD6E8FEB86659FD93ULL));
        x[i] = 0.5 + (double)(bits >> 11) / 9007199254740992.0;
    }
}

}

extern "C" {

// The same four kernels with four independent 16-byte accesses in flight per thread per
// iteration: more bytes in flight per SM, which HBM3e needs to approach its peak.
#define U4_LOOP(BODY)                                                                          \
    long stride = (long)gridDim.x * blockDim.x;                                                \
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;                                      \
    for (; i + 3 * stride < n2; i += 4 * stride) {                                             \
        BODY(i) BODY(i + stride) BODY(i + 2 * stride) BODY(i + 3 * stride)                     \
    }                                                                                          \
    for (; i < n2; i += stride) { BODY(i) }

#define COPY(j) c[j] = a[j];
#define SCALE(j) { double2 v = c[j]; b[j] = make_double2(s * v.x, s * v.y); }
#define ADD(j) { double2 x = a[j], y = b[j]; c[j] = make_double2(x.x + y.x, x.y + y.y); }
#define TRIAD(j) { double2 x = b[j], y = c[j]; a[j] = make_double2(x.x + s * y.x, x.y + s * y.y); }

__global__ void stream_copy_u4(const double2 *__restrict__ a, double2 *__restrict__ c, long n2) { U4_LOOP(COPY) }
__global__ void stream_scale_u4(double2 *__restrict__ b, const double2 *__restrict__ c, double s, long n2) { U4_LOOP(SCALE) }
__global__ void stream_add_u4(const double2 *__restrict__ a, const double2 *__restrict__ b, double2 *__restrict__ c, long n2) { U4_LOOP(ADD) }
__global__ void stream_triad_u4(double2 *__restrict__ a, const double2 *__restrict__ b, const double2 *__restrict__ c, double s, long n2) { U4_LOOP(TRIAD) }

}

// ---- memory, a third style: tiles of U 16-byte elements per thread, every load issued before
// any store, one tile per thread over a grid that covers the arrays once (no loop) -------------

template <int U, class K> __device__ void stream_tile(const K &k, long n2) {
    long first = blockIdx.x * (long)blockDim.x * U + threadIdx.x;
    typename K::Loaded v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        long i = first + (long)u * blockDim.x;
        if (i < n2) v[u] = k.load(i);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
        long i = first + (long)u * blockDim.x;
        if (i < n2) k.store(i, v[u]);
    }
}

struct Pair { double2 x, y; };

// Loads and stores with the streaming (evict-first) cache hint, or plain ones: which is faster
// depends on the GPU, so both are candidates.
template <bool CS> __device__ double2 load2(const double2 *p) { return CS ? __ldcs(p) : *p; }
template <bool CS> __device__ void store2(double2 *p, double2 v) { if (CS) __stcs(p, v); else *p = v; }

template <bool CS> struct CopyOp {
    const double2 *a; double2 *c;
    typedef double2 Loaded;
    __device__ Loaded load(long i) const { return load2<CS>(&a[i]); }
    __device__ void store(long i, Loaded v) const { store2<CS>(&c[i], v); }
};
template <bool CS> struct ScaleOp {
    double2 *b; const double2 *c; double s;
    typedef double2 Loaded;
    __device__ Loaded load(long i) const { return load2<CS>(&c[i]); }
    __device__ void store(long i, Loaded v) const { store2<CS>(&b[i], make_double2(s * v.x, s * v.y)); }
};
template <bool CS> struct AddOp {
    const double2 *a, *b; double2 *c;
    typedef Pair Loaded;
    __device__ Loaded load(long i) const { Pair p = {load2<CS>(&a[i]), load2<CS>(&b[i])}; return p; }
    __device__ void store(long i, Loaded v) const { store2<CS>(&c[i], make_double2(v.x.x + v.y.x, v.x.y + v.y.y)); }
};
template <bool CS> struct TriadOp {
    double2 *a; const double2 *b, *c; double s;
    typedef Pair Loaded;
    __device__ Loaded load(long i) const { Pair p = {load2<CS>(&b[i]), load2<CS>(&c[i])}; return p; }
    __device__ void store(long i, Loaded v) const { store2<CS>(&a[i], make_double2(v.x.x + s * v.y.x, v.x.y + s * v.y.y)); }
};

// Kernels stream_<op>_t<U> (streaming hints) and stream_<op>_p<U> (plain accesses).
#define STREAM_TILED(TAG, CS, U)                                                                        \
    __global__ void stream_copy_##TAG##U(const double2 *a, double2 *c, long n2) {                       \
        CopyOp<CS> k = {a, c}; stream_tile<U>(k, n2); }                                                  \
    __global__ void stream_scale_##TAG##U(double2 *b, const double2 *c, double s, long n2) {            \
        ScaleOp<CS> k = {b, c, s}; stream_tile<U>(k, n2); }                                              \
    __global__ void stream_add_##TAG##U(const double2 *a, const double2 *b, double2 *c, long n2) {      \
        AddOp<CS> k = {a, b, c}; stream_tile<U>(k, n2); }                                                \
    __global__ void stream_triad_##TAG##U(double2 *a, const double2 *b, const double2 *c, double s, long n2) { \
        TriadOp<CS> k = {a, b, c, s}; stream_tile<U>(k, n2); }

extern "C" {
STREAM_TILED(t, true, 1)
STREAM_TILED(t, true, 2)
STREAM_TILED(t, true, 4)
STREAM_TILED(t, true, 8)
STREAM_TILED(p, false, 1)
STREAM_TILED(p, false, 2)
STREAM_TILED(p, false, 4)
}

// ---- latency: every SM busy, no unit near its peak, and the fixes ------------------------------

extern "C" {

// The gather table's values, the same as reference::gather_value on the host: 24 random bits,
// exact in a float, so a gathered value proves which element was read.
__global__ void latency_init_table(float *table, long n, unsigned long long seed) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        table[i] = (float)(splitmix64(seed ^ ((unsigned long long)i * 0xD6E8FEB86659FD93ULL)) >> 40);
}

// One full cycle over `mask + 1` (a power of two) elements: next[i] = (A·i + C) mod 2^k with A ≡ 1
// (mod 4) and C odd (Hull–Dobell), as reference::chase_next. Each step jumps far across the
// table, and the GPU cannot know the formula: every step is a real dependent load.
__global__ void latency_init_chase(unsigned *next, long n, unsigned long long mask) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        next[i] = (unsigned)((6364136223846793005ULL * (unsigned long long)i + 1442695040888963407ULL) & mask);
}

// The scatter's items, as reference::scatter_item: a random bin in the low bits, a weight above.
__global__ void latency_init_items(unsigned *items, long n, unsigned long long seed) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        items[i] = (unsigned)splitmix64(seed ^ ((unsigned long long)i * 0xD6E8FEB86659FD93ULL));
}

// Random 4-byte gather: each access wants 4 bytes and makes DRAM move a 32-byte sector.
__global__ void latency_gather(const float *__restrict__ table, const unsigned *__restrict__ idx, float *__restrict__ out, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = table[idx[i]];
}

// The fix: the same kernel over the indices sorted, so a warp's accesses share sectors and
// DRAM pages. A kernel of its own so that profilers can tell the two apart.
__global__ void latency_gather_sorted(const float *__restrict__ table, const unsigned *__restrict__ idx, float *__restrict__ out, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = table[idx[i]];
}

// Dependent loads: each thread follows its own chain `steps` times; the next address is the
// value just loaded, so each thread has one load in flight at a time.
__global__ void latency_chase(const unsigned *__restrict__ next, unsigned *__restrict__ pos, int steps) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned p = pos[t];
    for (int s = 0; s < steps; ++s) p = next[p];
    pos[t] = p;
}

#define SCATTER_BINS 8192

// Random atomicAdd scatter: every item is an atomic on a global bin, serialised in L2.
__global__ void latency_scatter(const unsigned *__restrict__ items, unsigned *bins, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        unsigned v = items[i];
        atomicAdd(&bins[v & (SCATTER_BINS - 1)], (v >> 13) & 15u);
    }
}

// The fix: each block adds into its own copy of the bins in shared memory, then adds each of
// its non-zero bins to the global ones once.
__global__ void latency_scatter_smem(const unsigned *__restrict__ items, unsigned *bins, long n) {
    __shared__ unsigned local[SCATTER_BINS];
    for (int b = threadIdx.x; b < SCATTER_BINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        unsigned v = items[i];
        atomicAdd(&local[v & (SCATTER_BINS - 1)], (v >> 13) & 15u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < SCATTER_BINS; b += blockDim.x)
        if (local[b] != 0) atomicAdd(&bins[b], local[b]);
}

// A streaming copy, 16-byte accesses, grid-stride: efficient work when the grid fills the GPU.
// Launched with fewer blocks than SMs (the under-filled grid) and at full width (the fix);
// two names so that profilers can tell the launches apart. No __restrict__: each thread has
// one load in flight, as a plain copy does, so the narrow grid's bandwidth is set by its few
// SMs, not by how far the compiler batches the loop.
__global__ void latency_copy_narrow(const double2 *a, double2 *c, long n2) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n2; i += (long)gridDim.x * blockDim.x)
        c[i] = a[i];
}

__global__ void latency_copy_full(const double2 *a, double2 *c, long n2) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n2; i += (long)gridDim.x * blockDim.x)
        c[i] = a[i];
}

}
