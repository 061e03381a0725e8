"""Twelve jobs in the busy-but-not-saturated regime and two controls that bind (a bf16 GEMM, a
DRAM-streaming kernel), one after another on one GPU, for issue #46's truth: `gpuslack record
--interval-ms 100` runs around this script, and Nsight Compute's speed-of-light of one step of each
job (sol_jobs.py) labels them (label.py).

Each job runs 11.5 s of steady work, then the GPU rests ~3.5 s. OUT/phases.json gets each job's name,
start (`t0`) and end (`t1`, after the last step finished), steps, achieved rate, and the classes to
accept when ncu could not profile it (`accept`, with `why`): label.py replaces those by ncu's figures
wherever it has them. Plain PyTorch only (no torch_geometric, no downloads); sized for an H100 80GB.

usage: python3 jobs.py OUT         (OUT/phases.json is written; the log goes to standard output)
Environment, for trying the code off the GPU: BUSY_JOBS_DEVICE=cpu BUSY_JOBS_TINY=1 BUSY_JOBS_STEADY_S=0.2
BUSY_JOBS_GAP_S=0 (tiny sizes, short phases); BUSY_JOBS_ONLY=name,name runs those jobs alone."""
import gc
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

DEV = os.environ.get("BUSY_JOBS_DEVICE", "cuda")
TINY = os.environ.get("BUSY_JOBS_TINY") == "1"
STEADY_S = float(os.environ.get("BUSY_JOBS_STEADY_S", "11.5"))
GAP_S = float(os.environ.get("BUSY_JOBS_GAP_S", "3.5"))


def size(full, tiny):
    """The H100 size, or a tiny one for trying the code on a CPU."""
    return tiny if TINY else full


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


class Job:
    """One job: `build()` makes its data and returns (step, work); `work` is (unit, amount per step)
    for the achieved rate, e.g. ("TFLOP/s", flops / 1e12). `accept` and `why`: the classes a label
    falls back to when ncu has no figure for the job, and the reason."""

    def __init__(self, name, what, accept, why, build):
        self.name, self.what, self.accept, self.why, self.build = name, what, accept, why, build


# 1. Graph attention (GAT) layer over a random graph: per-edge gathers, a scatter_reduce amax for the
#    softmax's maximum, index_add_ for its sum and for the messages (2M nodes, 24M edges, 64 features).
def gnn_gat_layer():
    n, e, f = size(2_000_000, 2_000), size(24_000_000, 20_000), 64
    src = torch.randint(0, n, (e,), device=DEV)
    dst = torch.randint(0, n, (e,), device=DEV)
    x = torch.randn(n, f, device=DEV)
    w = torch.randn(f, f, device=DEV) / f**0.5
    a_src = torch.randn(f, device=DEV) / f**0.5
    a_dst = torch.randn(f, device=DEV) / f**0.5
    floor = torch.full((n,), float("-inf"), device=DEV)

    def step():
        h = x @ w
        logit = F.leaky_relu((h @ a_src)[src] + (h @ a_dst)[dst], 0.2)
        top = floor.clone().scatter_reduce_(0, dst, logit, "amax", include_self=True)
        weight = (logit - top[dst]).exp()
        den = torch.zeros(n, device=DEV).index_add_(0, dst, weight)
        msg = h[src] * weight[:, None]
        out = torch.zeros(n, f, device=DEV).index_add_(0, dst, msg)
        return F.elu(out / den.clamp_min(1e-16)[:, None])

    # Nominal bytes: each edge's 256-B row gathered, scaled and scattered.
    return step, ("GB/s", 3 * e * f * 4 / 1e9)


# 2. A small decoder's training step: 2 pre-norm blocks (d 2048, 16 heads, flash SDPA), vocab 32768,
#    batch 8 x 1024 tokens, bf16 autocast, fused AdamW.
class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.proj = torch.nn.Linear(d, d, bias=False)
        self.fc1 = torch.nn.Linear(d, 4 * d, bias=False)
        self.fc2 = torch.nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Decoder(torch.nn.Module):
    def __init__(self, vocab, d, heads, layers):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def llm_train_step():
    vocab, d, heads, layers = size(32768, 512), size(2048, 128), size(16, 4), 2
    b, t = size(8, 2), size(1024, 64)
    model = Decoder(vocab, d, heads, layers).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    tokens = torch.randint(0, vocab, (b, t + 1), device=DEV)

    def step():
        with torch.autocast(DEV, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    matmul_params = layers * 12 * d * d + d * vocab
    attention = layers * 4 * b * heads * t * t * (d // heads) / 2 * 3.5  # causal, forward and backward
    return step, ("TFLOP/s", (6 * matmul_params * b * t + attention) / 1e12)


# 3. Recommendation-model embedding lookups: 8 fp32 tables of 4M x 128, batch 65536, 32 ids a bag,
#    summed (F.embedding_bag, as nn.EmbeddingBag runs it), ids uniform at random.
def embedding_bag_lookup():
    tables, rows, dim = 8, size(4_000_000, 1_000), 128
    batch, bag = size(65536, 64), 32
    weights = [torch.randn(rows, dim, device=DEV) for _ in range(tables)]
    ids = [torch.randint(0, rows, (batch, bag), device=DEV) for _ in range(tables)]

    def step():
        return torch.cat([F.embedding_bag(i, w, mode="sum") for i, w in zip(ids, weights)], dim=1)

    # Nominal bytes: every 512-B row looked up, and its id.
    return step, ("GB/s", tables * batch * bag * (dim * 4 + 8) / 1e9)


# 4. Attention without flash, as "eager" implementations write it: QK^T, causal mask, fp32 softmax,
#    dropout, PV, forward and backward; bf16, batch 8, 16 heads, 2048 tokens, head dim 64.
def attention_eager_train():
    b, h, t, dh = size(8, 1), 16, size(2048, 64), 64
    q, k, v = (torch.randn(b, h, t, dh, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad_out = torch.randn(b, h, t, dh, device=DEV, dtype=torch.bfloat16)
    mask = torch.ones(t, t, device=DEV, dtype=torch.bool).triu(1)
    scale = dh**-0.5

    def step():
        s = (q @ k.transpose(-2, -1)) * scale
        s = s.masked_fill(mask, float("-inf"))
        p = F.dropout(torch.softmax(s.float(), dim=-1).to(q.dtype), 0.1)
        o = p @ v
        return torch.autograd.grad(o, (q, k, v), grad_out)

    return step, ("TFLOP/s", 6 * 2 * b * h * t * t * dh / 1e12)  # 2 products forward, 4 backward


# 5. Sampling the next token as generation libraries do: temperature, top-k 50, top-p 0.9 (a sort and
#    a cumsum over each row), multinomial; batch 512 of 128256-wide fp32 logits.
def sampling_top_p():
    b, vocab = size(512, 4), 128256
    logits = torch.randn(b, vocab, device=DEV) * 3

    def step():
        scores = logits / 0.8
        kth = torch.topk(scores, 50, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
        ordered, order = torch.sort(scores, descending=False, dim=-1)
        drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - 0.9
        drop[..., -1:] = False
        scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
        return torch.multinomial(scores.softmax(dim=-1), 1)

    # Nominal bytes: the logits read once and written once by each of 6 full-width passes.
    return step, ("GB/s", 12 * b * vocab * 4 / 1e9)


# 6. Scans: cumsum of 256M fp32 (one long scan), cumprod along rows of 8192 x 16384 bf16,
#    logcumsumexp along rows of 2048 x 32768 fp32.
def scans():
    x1 = torch.randn(size(256 * 2**20, 10_000), device=DEV)
    x2 = (torch.rand(size(8192, 8), 16384, device=DEV) * 0.01 + 0.995).to(torch.bfloat16)
    x3 = torch.randn(size(2048, 4), 32768, device=DEV)

    def step():
        return torch.cumsum(x1, 0), torch.cumprod(x2, 1), torch.logcumsumexp(x3, 1)

    nbytes = x1.numel() * 4 + x2.numel() * 2 + x3.numel() * 4
    return step, ("GB/s", 2 * nbytes / 1e9)  # read and written once


# 7. Sparse product: a random CSR matrix 2M x 2M with 40M non-zeros (fp32) times a dense 2M x 64
#    (torch.sparse.mm, cuSPARSE's SpMM): every non-zero gathers a 256-B row at random.
def sparse_csr_spmm():
    n, nnz, f = size(2_000_000, 2_000), size(40_000_000, 20_000), 64
    where = torch.randint(0, n, (2, nnz), device=DEV)
    a = torch.sparse_coo_tensor(where, torch.rand(nnz, device=DEV), (n, n)).coalesce().to_sparse_csr()
    del where
    dense = torch.randn(n, f, device=DEV)

    def step():
        return torch.sparse.mm(a, dense)

    nnz = a.values().numel()
    return step, ("GB/s", (nnz * (f * 4 + 12) + n * f * 4) / 1e9)  # rows gathered, indices, output


# 8. Retrieval top-k: the 100 best of 1M candidate scores (fp32) for each of 512 queries.
def topk_1m_candidates():
    scores = torch.randn(size(512, 4), size(2**20, 4096), device=DEV)

    def step():
        return torch.topk(scores, 100, dim=1)

    return step, ("GB/s", scores.numel() * 4 / 1e9)


# 9. Histograms: bincount of 256M int64 ids into 65536 bins (global atomics; bincount reads min and
#    max back to the host each call), histc of 256M fp32 into 1000 bins.
def histogram_bincount():
    m = size(256 * 2**20, 100_000)
    ids = torch.randint(0, 65536, (m,), device=DEV)
    vals = torch.randn(m, device=DEV)

    def step():
        return torch.bincount(ids, minlength=65536), torch.histc(vals, bins=1000, min=-4.0, max=4.0)

    return step, ("GB/s", m * 12 / 1e9)


# 10. A batch of small GEMMs: 8192 products of 256 x 256 bf16 matrices in one bmm (85 FLOP a byte).
def bmm_small_batch():
    b = size(8192, 8)
    x = torch.randn(b, 256, 256, device=DEV, dtype=torch.bfloat16)
    y = torch.randn_like(x)

    def step():
        return torch.bmm(x, y)

    return step, ("TFLOP/s", 2 * b * 256**3 / 1e12)


# 11. The normalisation half of a transformer layer: layer_norm then softmax over 8192-wide bf16 rows
#     (16384 of them), forward and backward.
def layernorm_softmax_train():
    r, c = size(16384, 64), 8192
    x = torch.randn(r, c, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(c, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    bias = torch.zeros(c, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    grad_out = torch.randn(r, c, device=DEV, dtype=torch.bfloat16)

    def step():
        p = torch.softmax(F.layer_norm(x, (c,), w, bias), dim=-1)
        return torch.autograd.grad(p, (x, w, bias), grad_out)

    # Nominal bytes: 2 passes forward (read, write) each, 3 and 3 backward, of r x c bf16.
    return step, ("GB/s", 10 * r * c * 2 / 1e9)


# 12. Group-by on hashed keys: a 64-bit multiply-xorshift hash of 100M int64 keys, a 24-bit bucket,
#     a stable sort by bucket (int32 keys, int64 positions) and the payload gathered in that order.
def hash_sort_by_key():
    m = size(100_000_000, 100_000)
    keys = torch.randint(0, 2**62, (m,), device=DEV)
    payload = torch.randn(m, device=DEV)

    def step():
        h = keys * -7046029254386353131  # 0x9E3779B97F4A7C15, wrapping
        h = h ^ (h >> 31)
        h = h * -4658895280553007687  # 0xBF58476D1CE4E5B9
        h = h ^ (h >> 29)
        bucket = (h & (2**24 - 1)).to(torch.int32)
        _, order = torch.sort(bucket, stable=True)
        return payload[order]

    return step, ("Mkeys/s", m / 1e6)


# 13. Control that binds the tensor pipe: 8192^3 bf16 GEMMs.
def control_bf16_gemm():
    n = size(8192, 128)
    a = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    b = torch.randn_like(a)
    return (lambda: a @ b), ("TFLOP/s", 2 * n**3 / 1e12)


# 14. Control that binds DRAM: STREAM's "scale" (dst = 3 x src) over 4 GiB. An elementwise kernel, not
#     copy_: a contiguous copy_ is a cudaMemcpy, which ncu does not profile.
def control_stream_scale():
    src = torch.randn(size(2**30, 10_000), device=DEV)
    dst = torch.empty_like(src)
    return (lambda: torch.mul(src, 3.0, out=dst)), ("GB/s", 2 * src.numel() * 4 / 1e9)  # read and written


LATENCY = ["latency_bound"]
JOBS = [
    Job("gnn_gat_layer_fp32", "GAT layer: gathers, scatter_reduce amax, index_add_; 2M nodes, 24M random edges",
        LATENCY, "random 256-B row gathers and atomic scatters (h100-everyday's index_add_ ran at 33 / 29 under ncu)",
        gnn_gat_layer),
    Job("llm_train_step_bf16", "decoder training step: 2 blocks d 2048, vocab 32k, 8 x 1024 tokens, bf16 autocast, fused AdamW",
        ["compute_bound", "latency_bound"], "bf16 GEMMs are most of the step, with norms, GELU, the loss and AdamW between them",
        llm_train_step),
    Job("embedding_bag_lookup", "8 embedding_bag sums over 4M x 128 fp32 tables, batch 65536, 32 ids a bag",
        ["memory_bound", "latency_bound"], "whole 512-B rows at random: DRAM streams each row, but every row is its own access",
        embedding_bag_lookup),
    Job("attention_eager_train_bf16", "attention without flash: QK^T, mask, fp32 softmax, dropout, PV, forward and backward; 8 x 16 heads x 2048 tokens",
        ["memory_bound", "latency_bound"], "the 2048 x 2048 score tensors pass through DRAM several times; the products are a third of the time",
        attention_eager_train),
    Job("control_bf16_gemm_8k", "control: 8192^3 bf16 GEMMs", ["compute_bound"], "cuBLAS's bf16 GEMM runs the tensor pipe near its peak",
        control_bf16_gemm),
    Job("sampling_top_p_128k", "next-token sampling: temperature, top-k 50, top-p 0.9 (sort, cumsum), multinomial; 512 x 128256 logits",
        LATENCY, "segmented sort, scans and a multinomial draw: many passes with little arithmetic and short rows a block",
        sampling_top_p),
    Job("scan_cumsum_cumprod", "cumsum of 256M fp32, cumprod along 16384-wide bf16 rows, logcumsumexp along 32768-wide fp32 rows",
        LATENCY, "scans chain each tile on the one before (a long cumsum read DRAM at 10% and SMs at 48% elsewhere)",
        scans),
    Job("sparse_csr_spmm", "torch.sparse.mm: random CSR 2M x 2M, 40M non-zeros, times dense 2M x 64 fp32",
        ["latency_bound", "memory_bound"], "each non-zero gathers a 256-B row of the dense matrix at random",
        sparse_csr_spmm),
    Job("topk_1m_candidates", "torch.topk k=100 over 512 rows of 1M fp32 scores",
        LATENCY, "radix select: several passes over each row, a histogram in shared memory each",
        topk_1m_candidates),
    Job("control_stream_scale_4gib", "control: STREAM scale, dst = 3 x src over 4 GiB fp32", ["memory_bound"],
        "one read and one write a byte: DRAM streams at its peak", control_stream_scale),
    Job("histogram_bincount", "bincount of 256M int64 ids into 65536 bins, histc of 256M fp32 into 1000 bins",
        LATENCY, "atomic increments into bins, and host read-backs of min and max each call",
        histogram_bincount),
    Job("bmm_256x256_bf16_b8192", "8192 GEMMs of 256 x 256 bf16 in one torch.bmm",
        ["memory_bound", "compute_bound"], "85 FLOP a byte, under the H100's ridge (~295): the matrices' bytes set the pace if tiles stream",
        bmm_small_batch),
    Job("layernorm_softmax_train_bf16", "layer_norm then softmax over 16384 x 8192 bf16, forward and backward",
        ["memory_bound", "latency_bound"], "row-wise reductions over 16-KB rows: streaming, with a reduction per row",
        layernorm_softmax_train),
    Job("hash_sort_by_key_100m", "multiply-xorshift hash of 100M int64 keys, stable sort of 24-bit buckets, payload gather",
        ["memory_bound", "latency_bound"], "radix sort streams DRAM (h100-everyday's sort: 69%), the payload gather is random",
        hash_sort_by_key),
]
BY_NAME = {j.name: j for j in JOBS}


def release():
    gc.collect()
    if DEV == "cuda":
        torch.cuda.empty_cache()


def run_phase(job, phases):
    started = time.time()
    step, (unit, per_step) = job.build()
    for _ in range(2):  # the first steps allocate (optimizer state, workspaces, the caching allocator)
        step()
    sync()
    setup_s = time.time() - started
    t0 = time.time()
    n = 0
    while time.time() - t0 < STEADY_S:
        step()
        n += 1
    sync()
    t1 = time.time()
    phases.append({
        "name": job.name, "t0": t0, "t1": t1, "gpus": [0], "iters": n, "accept": job.accept, "why": job.why,
        "what": job.what, "setup_s": round(setup_s, 1), "achieved": {unit: round(per_step * n / (t1 - t0), 2)},
    })
    print(f"{job.name:30s} {n:7d} iters {t1 - t0:5.1f} s {{'{unit}': {per_step * n / (t1 - t0):.2f}}}", flush=True)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    if not os.path.isdir(out):
        sys.exit(f"jobs.py: {out} is not a folder")
    only = [n for n in os.environ.get("BUSY_JOBS_ONLY", "").split(",") if n]
    unknown = [n for n in only if n not in BY_NAME]
    if unknown:
        sys.exit(f"jobs.py: BUSY_JOBS_ONLY names unknown jobs {unknown}; known: {sorted(BY_NAME)}")
    phases = []
    for job in [BY_NAME[n] for n in only] or JOBS:
        try:
            run_phase(job, phases)
        except Exception as e:  # one job's failure (out of memory, a missing kernel) leaves the others
            print(f"skipped: {job.name} {e!r:.300}", flush=True)
            try:
                sync()
            except Exception:
                pass
        release()
        time.sleep(GAP_S)
    with open(os.path.join(out, "phases.json"), "w") as f:
        json.dump(phases, f, indent=1)
    print(len(phases), "phases", flush=True)


if __name__ == "__main__":
    main()
