// Copy kernels for scripts/device/copy_experiments/copy_shapes.py: the plain copy (one 16-byte
// access per thread) and TMA bulk copies global -> shared -> global, CHUNK bytes a piece and
// STAGES pieces in flight per block. On an H200 the bulk copies reached at most 4.07 TB/s, the
// plain copy 4.30 (docs/validation/h200-copy-experiments.txt); the bench keeps the plain one.
extern "C" {
__global__ void copy_p1(const double2 *a, double2 *c, long n2) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n2) c[i] = a[i];
}
}

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

// One thread per block moves CHUNK-byte pieces global -> shared -> global with the TMA engine,
// STAGES pieces in flight; block b takes pieces b, b + gridDim.x, ...
template <int CHUNK, int STAGES> __device__ void bulk_copy(const char *a, char *c, long bytes) {
    extern __shared__ __align__(128) char buf[];
    __shared__ __align__(8) unsigned long long bar[STAGES];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < STAGES; ++s)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_u32(&bar[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    long pieces = (bytes + CHUNK - 1) / CHUNK;
    long mine = pieces > blockIdx.x ? (pieces - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    auto load = [&](long j) {
        int s = j % STAGES;
        long off = (blockIdx.x + j * gridDim.x) * (long)CHUNK;
        unsigned n = (unsigned)min((long)CHUNK, bytes - off);
        unsigned b = smem_u32(&bar[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(n) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(smem_u32(buf + s * CHUNK)), "l"(a + off), "r"(n), "r"(b) : "memory");
    };
    for (long j = 0; j < STAGES - 1 && j < mine; ++j) load(j);
    for (long j = 0; j < mine; ++j) {
        int s = j % STAGES;
        unsigned parity = (j / STAGES) & 1, done;
        do {
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(smem_u32(&bar[s])), "r"(parity) : "memory");
        } while (!done);
        long off = (blockIdx.x + j * gridDim.x) * (long)CHUNK;
        unsigned n = (unsigned)min((long)CHUNK, bytes - off);
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                     :: "l"(c + off), "r"(smem_u32(buf + s * CHUNK)), "r"(n) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        if (j + STAGES - 1 < mine) load(j + STAGES - 1);
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

#define BULK(CH, ST) __global__ void copy_bulk_##CH##k_##ST(const char *a, char *c, long bytes) { bulk_copy<CH * 1024, ST>(a, c, bytes); }
extern "C" {
BULK(2, 8) BULK(4, 4) BULK(4, 8) BULK(8, 2) BULK(8, 4) BULK(8, 8) BULK(16, 2) BULK(16, 4) BULK(32, 2) BULK(32, 3) BULK(64, 2)
}
