use std::fmt;

use serde::Serialize;

use crate::device::PowerProfile;

/// [`NCU_COMMAND`]'s text, for the remedies that quote it.
macro_rules! ncu_command {
    () => {
        "ncu --profile-from-start off --clock-control none --section SpeedOfLight -c 150 --csv <the job's command>"
    };
}

/// The fixed vocabulary of verdicts (the README's table; docs/DIAGNOSIS.md). Output, tests and
/// exporters use these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// No work and no process holding the GPU.
    Idle,
    /// A process holds the GPU (context, memory) but runs nothing.
    IdleHeld,
    /// SMs busy with real arithmetic, power near the limit: healthy.
    ComputeBound,
    /// DRAM bandwidth near its peak: healthy for that kind of work.
    MemoryBound,
    /// Kernels resident, yet no measured unit at Nsight Compute's 60% line: busy, not fast.
    LatencyBound,
    /// Tiny kernels: GPU-Util may read 100% while SM activity is a few %.
    LaunchBound,
    /// Host↔device copies dominate: PCIe busy, SMs idle.
    TransferBound,
    /// Real work arrives in short bursts between long waits for the host.
    InputStarved,
    /// Multi-GPU: time spent waiting in collectives, pipeline bubbles, stragglers.
    SyncWait,
    /// A kernel has spun for a long time with no progress (a deadlocked collective).
    Hung,
}

/// One row per class, the one place a class is described: its id, whether it is healthy, how a
/// job's rank counts it (the Prometheus job rules, the Datadog monitor), its words for people,
/// its remedy and one-line instruction, its colour (CIE L* 96.5 … 20, 8.5 apart: neighbouring
/// bands part on a greyscale print), its 256-colour code and its letter. The JSON schema, the
/// deploy rules and the docs' class lists are checked against it (`class_table_tests`).
pub const CLASSES: [ClassInfo; 10] = [
    ClassInfo {
        class: Class::Idle,
        id: "idle",
        healthy: true,
        rank: Rank::Neither,
        label: "idle",
        did: "idle with nothing on it",
        remedy: "Nothing runs and nothing holds the GPU. If a job should be here, check the scheduler and the job's device selection (CUDA_VISIBLE_DEVICES); otherwise this is free capacity.",
        instruction: Some("Nothing is wasted here: nothing held the GPU. If a job should have used it, check its CUDA_VISIBLE_DEVICES and the scheduler."),
        colour: "#f5f5f5",
        ansi: 255,
        letter: '.',
    },
    ClassInfo {
        class: Class::IdleHeld,
        id: "idle_held",
        healthy: false,
        rank: Rank::Neither,
        label: "held but idle",
        did: "held by a process that ran nothing",
        remedy: "A process holds a context and memory but runs nothing, which costs ~45 W over bare idle and blocks others. Find it (nvidia-smi --query-compute-apps=pid,name,used_memory --format=csv) and release the GPU, or give it work; if it is one rank of a job, look at the others.",
        instruction: Some("Release the GPU when its work is done: let the process exit, or free its memory (del the model and optimizer, then torch.cuda.empty_cache()); if it is one rank waiting for the others, look at them."),
        colour: "#a8aeba",
        ansi: 247,
        letter: 'h',
    },
    ClassInfo {
        class: Class::ComputeBound,
        id: "compute_bound",
        healthy: true,
        rank: Rank::Working,
        label: "compute-limited",
        did: "computing, an arithmetic pipe at 60% of its peak or more",
        remedy: "Healthy: the arithmetic units are busy. To go faster, use the tensor cores with lower precision (bf16/fp8 via torch.autocast), or do less arithmetic; if a power cap or thermal slowdown is listed, the limit, not the code, sets the pace.",
        instruction: Some("Nothing is wasted here; to go faster, if the matmuls are not already in bf16, run them on the tensor cores: `with torch.autocast(\"cuda\", dtype=torch.bfloat16):` around the forward pass."),
        colour: "#0e651d",
        ansi: 28,
        letter: 'C',
    },
    ClassInfo {
        class: Class::MemoryBound,
        id: "memory_bound",
        healthy: true,
        rank: Rank::Working,
        label: "memory-limited",
        did: "moving data, DRAM at 60% of its peak or more",
        remedy: "Healthy for bandwidth-bound work. To go faster, move fewer bytes: fuse element-wise ops (torch.compile), keep activations in bf16, improve reuse (larger tiles, better layouts).",
        instruction: Some("Nothing is wasted here; to go faster, move fewer bytes: fuse element-wise ops with torch.compile(model) and, if they are not already, keep activations in bf16."),
        colour: "#509dd9",
        ansi: 68,
        letter: 'M',
    },
    ClassInfo {
        class: Class::LatencyBound,
        id: "latency_bound",
        healthy: false,
        rank: Rank::Working,
        label: "busy, not fast",
        did: "busy, but with no unit near its peak",
        remedy: concat!(
                "Busy, not fast: kernels are resident, yet no unit the counters measure (DRAM, the tensor and floating-point pipes) reaches 60% of its peak, so the warps wait on latency: dependent or scattered loads, atomics, small or unfused kernels, too little work in flight. Confirm it on one step: ",
                ncu_command!(),
                ", with torch.cuda.profiler.start() and .stop() (cudaProfilerStart/Stop) around one warmed-up step (under 60% on both compute and memory is its \"latency issues\"). Then give each kernel more independent work: fuse small ops (torch.compile), grow the batch, capture the step in a CUDA graph; in kernels of your own, coalesce the accesses and raise occupancy."
            ),
        instruction: Some("Confirm on one step with `ncu --section SpeedOfLight` (under 60% on both compute and memory is latency), then give each kernel more work: fuse small ops with torch.compile, grow the batch; in kernels of your own, coalesce accesses and raise occupancy."),
        colour: "#259088",
        ansi: 30,
        letter: 'L',
    },
    ClassInfo {
        class: Class::LaunchBound,
        id: "launch_bound",
        healthy: false,
        rank: Rank::Working,
        label: "tiny kernels",
        did: "running kernels too small to fill it",
        remedy: "Tiny kernels: the GPU spends its time launching, not computing. Fuse ops (torch.compile, or a hand-fused kernel), capture the step in a CUDA graph, grow the batch, use mixed precision (torch.autocast), and stop creating small tensors on the host every step.",
        instruction: Some("Fuse the small kernels: model = torch.compile(model, mode=\"reduce-overhead\"), which also captures the step in a CUDA graph (or capture it yourself with torch.cuda.graph); then grow the batch."),
        colour: "#bc3681",
        ansi: 162,
        letter: 'l',
    },
    ClassInfo {
        class: Class::TransferBound,
        id: "transfer_bound",
        healthy: false,
        rank: Rank::Working,
        label: "host↔device copies",
        did: "copying data between host and GPU",
        remedy: "Host↔device copies dominate. Keep data on the GPU between steps, pin host memory (pin_memory=True), copy with non_blocking=True on a side stream so copies overlap compute, and move preprocessing onto the GPU (DALI).",
        instruction: Some("Cut the copies: keep tensors on the GPU between steps, build the DataLoader with pin_memory=True, and copy with .to(\"cuda\", non_blocking=True) so copies overlap compute."),
        colour: "#562c8a",
        ansi: 55,
        letter: 't',
    },
    ClassInfo {
        class: Class::InputStarved,
        id: "input_starved",
        healthy: false,
        rank: Rank::Working,
        label: "starved of input",
        did: "waiting for input between short bursts of work",
        remedy: "The GPU waits for input between bursts of real work. Raise DataLoader num_workers to the CPU cores the job has per GPU (len(os.sched_getaffinity(0)) divided by its GPUs on the node), set pin_memory=True and persistent_workers=True, prefetch, decode on the GPU (NVIDIA DALI), and check the storage and CPU throughput.",
        instruction: Some("Feed the GPU faster: DataLoader(..., num_workers=len(os.sched_getaffinity(0)) // gpus_per_node, pin_memory=True, persistent_workers=True, prefetch_factor=4); if that is not enough, decode on the GPU (NVIDIA DALI)."),
        colour: "#ffb674",
        ansi: 215,
        letter: 's',
    },
    ClassInfo {
        class: Class::SyncWait,
        id: "sync_wait",
        healthy: false,
        rank: Rank::Waiting,
        label: "waiting on peers",
        did: "waiting for the other GPUs",
        remedy: "Time is lost waiting for other GPUs. Overlap communication with compute (DDP bucket sizes, no_sync for accumulation), balance pipeline stages and add micro-batches against bubbles, find and fix the straggler; profile with nsys profile --stats=true.",
        instruction: Some("Overlap communication with compute: `with model.no_sync():` on gradient-accumulation steps, tune DDP(bucket_cap_mb=...), balance the pipeline stages; find the straggler with `nsys profile --stats=true`."),
        colour: "#f6dc74",
        ansi: 221,
        letter: 'w',
    },
    ClassInfo {
        class: Class::Hung,
        id: "hung",
        healthy: false,
        rank: Rank::Waiting,
        label: "hung",
        did: "stuck in a kernel that made no progress",
        remedy: "A kernel spins without progress after collective traffic stopped: a deadlocked or mismatched collective (one rank skipped or reordered it). Dump every rank's stack (py-spy dump), run with NCCL_DEBUG=INFO, set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a collective timeout, then restart the job.",
        instruction: Some("Dump every rank's stack (`py-spy dump --pid PID`), rerun with NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a timeout in init_process_group(timeout=...), then restart the job."),
        colour: "#640b09",
        ansi: 88,
        letter: 'X',
    },
];

/// How a job's rank counts a class in the rules that judge a job (docs/DEPLOY.md): making
/// progress, waiting on its peers, or neither (idle, held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rank {
    Working,
    Waiting,
    Neither,
}

/// A class's row of [`CLASSES`].
#[derive(Debug, Clone, Copy)]
pub struct ClassInfo {
    pub class: Class,
    /// The fixed vocabulary's id (`latency_bound`).
    pub id: &'static str,
    /// Whether the GPU does useful work at its hardware's pace.
    pub healthy: bool,
    pub rank: Rank,
    /// A short name for table rows and lists (at most 18 characters).
    pub label: &'static str,
    /// What a GPU was doing under it, after "N% of its time".
    pub did: &'static str,
    /// What to do about it, in the article's terms.
    pub remedy: &'static str,
    /// The remedy's one change, as an instruction naming the code it touches.
    pub instruction: Option<&'static str>,
    /// Its colour (`#rrggbb`) and the nearest 256-colour terminal code.
    pub colour: &'static str,
    pub ansi: u8,
    /// Its letter in a colourless strip.
    pub letter: char,
}

impl Class {
    pub const ALL: [Class; 10] = [
        Class::Idle,
        Class::IdleHeld,
        Class::ComputeBound,
        Class::MemoryBound,
        Class::LatencyBound,
        Class::LaunchBound,
        Class::TransferBound,
        Class::InputStarved,
        Class::SyncWait,
        Class::Hung,
    ];

    pub fn as_str(self) -> &'static str {
        self.info().id
    }

    pub fn from_name(name: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// Whether this class means the GPU does useful work at its hardware's pace.
    pub fn is_healthy(self) -> bool {
        self.info().healthy
    }

    /// What a GPU with `profile` draws when it does what this class says: the power a report
    /// sets beside the measured one. Here, not in `device`, because classes are the
    /// diagnosis's vocabulary; the profile only holds measured levels.
    pub fn expected_power_w(self, profile: &PowerProfile) -> f64 {
        match self {
            Class::Idle => profile.idle_w,
            Class::IdleHeld | Class::Hung => profile.held_idle_w,
            Class::LaunchBound => profile.tiny_w,
            Class::TransferBound => profile.pcie_w,
            Class::MemoryBound => profile.memory_w,
            Class::ComputeBound => profile.compute_tensor_w.max(profile.compute_fp32_w),
            // Waiting, starved and latency-bound GPUs sit between held idle and real work; no
            // profile level measures them.
            Class::InputStarved | Class::SyncWait | Class::LatencyBound => profile.held_idle_w,
        }
    }

    /// What to do about it, in the article's terms.
    pub fn remedy(self) -> &'static str {
        self.info().remedy
    }

    /// This class's row of [`CLASSES`].
    pub fn info(self) -> &'static ClassInfo {
        &CLASSES[self as usize]
    }
}

/// Advice that follows the evidence where the class's own remedy would send the user the wrong
/// way: the same class, a different cause.
pub mod advice {
    /// A kernel spinning on one GPU with no collective before it.
    pub const SPIN: &str = "A kernel has spun without progress: it waits on a flag nobody writes (a device-side wait, a custom collective, a persistent kernel whose producer died). Find it with cuda-gdb (attach, `info cuda kernels`) or py-spy dump of the host threads, check the code that should release it, and kill or restart the job.";
    /// A job all of whose GPUs stopped together and make no progress.
    pub const HUNG_JOB: &str = "Every GPU of this job stopped at the same moment and none has made progress since: a deadlocked or mismatched collective (one rank skipped, reordered or never reached it). Dump every rank's stack (py-spy dump --pid), look first at the rank named as differing, run with NCCL_DEBUG=INFO, set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a collective timeout, then restart the job.";
    /// Memory use swinging by a large share of the GPU each second.
    pub const ALLOCATION_CHURN: &str = "Allocation churn: the loop allocates and frees device memory every step, and the GPU waits on cudaMalloc/cudaFree and on filling fresh buffers. Allocate once and reuse the buffers (preallocate, or keep tensors alive across steps), drop torch.cuda.empty_cache() from the loop, and let the caching allocator keep its blocks (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation).";
    /// One long kernel occupying a few SMs with fat blocks.
    pub const FEW_BLOCKS: &str = "One long kernel runs on a few SMs: its grid is too small for the GPU (a serial reduction or scan launched with one block). Launch enough blocks to fill every SM (at least one per SM, better several), split the work with a grid-stride loop or a two-pass reduction, or use a library primitive (CUB's DeviceReduce, torch.sum) that does.";
    /// Without GPM: every SM occupied, no memory traffic, power a little above a held context.
    pub const ON_CHIP_OR_SPIN: &str = "A kernel occupies every SM without touching device memory: integer or on-chip work, or a kernel spinning on a flag. Without SM counters the two read the same; if it stays flat and the job makes no progress, treat it as a hang (py-spy dump the host threads, cuda-gdb `info cuda kernels`); if it is real work, profile it with nsys/ncu to see which units it keeps busy.";
    /// DRAM bandwidth nearest its peak on a GPU the kernels only partly fill, pipes quiet: each
    /// byte fetched feeds little arithmetic (LLM decode at small batch, embedding lookups,
    /// element-wise and normalisation kernels).
    pub const LOW_INTENSITY_MEMORY: &str = "Memory-bound at low arithmetic intensity: DRAM bandwidth binds while the SMs and pipes have room, so each byte read feeds little arithmetic. Reuse each byte more: for LLM decode, batch more requests per step (continuous batching, a larger max batch), quantise the weights (int8/fp8/int4) and the KV cache (fp8), and use paged or grouped-query attention; elsewhere fuse element-wise and normalisation ops into their producers (torch.compile) and keep tensors in bf16. Faster kernels will not help: the bytes are the limit.";
    /// A pipe nearest its peak, but on SMs the kernels fill only partly: small or few blocks,
    /// or gaps between kernels.
    pub const PARTLY_FILLED_COMPUTE: &str = "Compute-bound on a GPU the kernels only partly fill: arithmetic is the nearest limit, but the SMs hold warps only part of the time. Small GEMMs leave SMs without tiles: batch or group them (torch.bmm, grouped GEMM, larger batches), prefer shapes that are multiples of 128, capture the step in a CUDA graph or torch.compile it to close the gaps between kernels; where several processes share the GPU, each gets a share of its time.";
    /// FP32 arithmetic with the tensor cores idle.
    pub const FP32_NO_TENSOR: &str = "Compute-bound in FP32 with the tensor cores idle: the FP32 pipe peaks at a small fraction of the tensor cores' rate. Allow TF32 for matrix products and convolutions (torch.set_float32_matmul_precision('high'), torch.backends.cudnn.allow_tf32 = True), or run in bf16 under torch.autocast; if FP32 accuracy is required, the pipe, not the code, is the limit.";
    /// The tensor pipe busy well under its peak with the SMs held: layouts, tiles and the ops
    /// between the matrix products.
    pub const TENSOR_PARTLY: &str = "Compute-bound on the tensor cores, but they run well under their peak: the rest of the time goes to layout conversions, odd-shaped or small tiles and the element-wise ops between the matrix products. The counters cannot see a model's layout or dtype: for convolutions not already in channels_last, convert them (model.to(memory_format=torch.channels_last)) and set torch.backends.cudnn.benchmark = True; if not already in bf16, run in it (or allow TF32); batch or group small GEMMs and prefer dimensions that are multiples of 128; fuse the element-wise ops (torch.compile).";
    /// Host↔device copies both ways at once: an optimizer or activations offloaded to the host.
    pub const OFFLOAD_BOTH_WAYS: &str = "Copies run both ways over PCIe while the GPU is partly idle: state offloaded to the host (an optimizer step on the CPU, activation offloading) comes and goes every step. Pin the host buffers (pin_memory), copy with non_blocking=True on a side stream so the copies overlap compute, prefetch the next parameters while this layer computes, or keep the optimizer state on the GPU if memory allows (or shard it across GPUs instead of offloading).";
    /// The GPU waits on its host at a steady pace, or a profiler serialises its kernels.
    pub const HOST_PACED: &str = "Kernels are resident a steady share of every sample, not in bursts: the host sets the pace. First check whether a profiler is attached: Nsight Compute replays and serialises every kernel it profiles, and Nsight Systems or DCGM profiling hold the performance counters; if one ran, these numbers describe the profiler, not the job. Otherwise the loop waits on its host every step: remove synchronisations from the step (.item(), .cpu(), torch.cuda.synchronize(), printing tensors), move preprocessing off the main thread (DataLoader workers, DALI), and capture the step in a CUDA graph.";
    /// A profiler holds the performance counters.
    pub const PROFILER: &str = "A profiler held the GPU's performance counters in this window (Nsight Compute, Nsight Systems or DCGM profiling): the counters the verdict needs were taken or frozen, and a profiler that replays kernels also serialises them. Judge the job from windows without the profiler; if no profiler should run here, find the process that holds the counters (CUDA_INJECTION64_PATH or NSYS_* in its environment, dcgmi profile --pause).";
    /// Latency-bound with DRAM moving a good share of its peak and no pipe at work: the warps
    /// wait on loads that arrive a sector at a time (a random scatter: DRAM 29%, pipes ≤ 2%).
    pub const LATENCY_SCATTERED: &str = concat!(
        "Latency-bound on memory accesses: DRAM moves a share of its bandwidth while no pipe works, so the warps wait on loads and atomics that arrive a sector at a time (gathers, scatters, index_add_, embedding lookups over random indices), not on bandwidth. If the indices are reused across steps, sort them once or use a segmented reduction (CSR sparse products, torch_scatter) so neighbouring threads touch neighbouring addresses; in custom kernels coalesce the accesses, keep hot data in shared memory or L2 (cudaAccessPolicyWindow) and keep more independent loads in flight per thread. Confirm on one step: ",
        ncu_command!(),
        ", with torch.cuda.profiler.start() and .stop() (cudaProfilerStart/Stop) around one warmed-up step."
    );
    /// Latency-bound in a Python or PyTorch process (by its name): the time goes to many kernels
    /// each too small or too dependent to reach a unit's peak; advice the counters cannot check
    /// is hedged.
    pub const LATENCY_PYTORCH: &str = concat!(
        "Latency-bound in a Python job: kernels are resident but none drives a unit near its peak, the signature of many small or unfused kernels and dependent steps. If it is PyTorch: fuse them (model = torch.compile(model)), capture the step in a CUDA graph (torch.compile(mode=\"reduce-overhead\")), grow the batch so each kernel has more independent work, and run in bf16 under torch.autocast if not already; for convolutions, channels_last if not already. Other frameworks have the same levers (jax.jit, larger batches). Confirm on one step: ",
        ncu_command!(),
        ", with torch.cuda.profiler.start() and .stop() (cudaProfilerStart/Stop) around one warmed-up step."
    );
    /// Latency-bound in kernels of the job's own: coalescing and occupancy.
    pub const LATENCY_CUSTOM: &str = concat!(
        "Latency-bound: kernels are resident but none drives a unit near its peak. In kernels of your own, coalesce the memory accesses (neighbouring threads, neighbouring addresses), raise occupancy (fewer registers or less shared memory per block, more blocks), keep more independent loads in flight per thread and avoid atomics on shared addresses; for framework code, fuse small ops and grow the batch. Confirm on one step: ",
        ncu_command!(),
        ", with torch.cuda.profiler.start() and .stop() (cudaProfilerStart/Stop) around one warmed-up step."
    );
}

/// The Nsight Compute command that confirms a latency verdict on one step: its SpeedOfLight
/// section, below 60% on both compute and memory, is ncu's "latency issues". Profiling starts
/// where the program calls cudaProfilerStart (torch.cuda.profiler.start()) and stops at
/// cudaProfilerStop, so one warmed-up step is measured, at the clocks the job runs at.
pub const NCU_COMMAND: &str = ncu_command!();

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
