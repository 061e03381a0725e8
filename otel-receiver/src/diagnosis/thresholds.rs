/// Every number the rules compare against, in one place, with why it is where it is. The
/// defaults come from the H200 recordings in `tests/fixtures` and hold for any GPU whose GPM
/// reports the same percentages; power-based thresholds are shares of the GPU's own span from
/// a held context to its peak (its profile, or fractions of its TDP), so they scale with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// Below this mean GPU-Util (%) no kernel was resident for any meaningful time.
    pub active_util_pct: f64,
    /// Below this mean SM activity (%) the SMs did no meaningful work.
    pub active_sm_pct: f64,
    /// Tiny kernels: kernels resident at least this share of the time (GPU-Util %)…
    pub launch_util_pct: f64,
    /// …while the SMs are this empty per unit of GPU-Util (tiny graph replay: 0.011; the
    /// starved trainer: 0.8).
    pub launch_intensity_max: f64,
    /// Above this SM activity (%) work is not "tiny" whatever the ratio says.
    pub launch_sm_max_pct: f64,
    /// Input starvation: real work resident less than this share of the time (GPU-Util %).
    pub starved_util_max_pct: f64,
    /// Compute- or memory-bound need the SMs at least this busy (%).
    pub busy_sm_pct: f64,
    /// The busy share ([`super::Signals::busy_share`]): GPU-Util at or above this (%) reads a
    /// kernel resident the whole window, and SM activity's mean against its busiest reading
    /// says how much of it the work filled (a window straddling the start of the work)…
    pub resident_whole_util_pct: f64,
    /// …at or above this (%), GPU-Util itself is the share the kernels ran; below it pauses
    /// are the story and the burst rules judge the window…
    pub resident_most_util_pct: f64,
    /// …and never less than this share: below it the window is the idle part's.
    pub busy_share_min: f64,
    /// Without GPM, compute is judged from power only with a kernel resident at least this
    /// share of the time (GPU-Util %).
    pub compute_power_util_pct: f64,
    /// Kernels absent at least the rest of this share of the time (GPU-Util % under it) while
    /// the host streams data in or out wait on the host (a fed loader, an offloaded optimizer).
    pub host_waits_util_pct: f64,
    /// FP32 work with the tensor pipe under this (%) leaves the tensor cores idle (the FP32
    /// GEMM: tensor 0%): the TF32/bf16 advice.
    pub tensor_idle_pct: f64,
    /// The tensor pipe under this (%, per busy share) with the SMs held runs well under its
    /// peak (a convnet: 45%; GEMMs of 2048: 64%; bf16 GEMM 8192³: 94%).
    pub tensor_partly_pct: f64,
    /// Nsight Compute's speed-of-light line (%): the unit nearest its peak (DRAM or a measured
    /// pipe), per busy share, binds the window at or above it (`compute_bound`,
    /// `memory_bound`); below it on every unit, with kernels resident, the window is
    /// `latency_bound` (ncu's "latency issues"). h100-everyday under ncu: the scatter's
    /// compute 33% / DRAM 29% is latency; the sort's DRAM 69% and the FP32 GEMM's 87% bind.
    pub bound_line_pct: f64,
    /// Points either side of `bound_line_pct` within which a verdict is `medium` and names the
    /// other side as its alternative (55–65%: ncu's own figures and GPM's differ by up to 10
    /// points on the pipes; flash attention at ncu's 59% accepts both).
    pub bound_band_pct: f64,
    /// The least busy share the line is set against: a pause forgives at most this much of the
    /// window, so a unit binds only where it ran at the line for at least 0.75 × 60% = 45% of
    /// the window (issue #46: no bound window without a unit at 45%; the FP8 GEMM's last
    /// window, kernels resident half of it, tensor 43.7%, is not shown to bind).
    pub bound_busy_share_min: f64,
    /// A latency-bound window whose DRAM moves at least this share of its peak (%) waits on
    /// memory arriving a sector at a time (a random gather: SM 100%, DRAM 38–58%); below it,
    /// on dependent arithmetic, on-chip memory or units GPM does not count: the words differ,
    /// the class does not.
    pub latency_dram_pct: f64,
    /// …while the busiest pipe stays under this (%): no arithmetic to speak of, so the words
    /// name the loads (the random scatter: tensor 1.4%, FP32 under 2%; BERT's pipes: 20–30%).
    pub latency_pipe_quiet_pct: f64,
    /// The roofline rule: with kernels resident most of the time (GPU-Util ≥ 50%), SMs that hold
    /// warps at least this share of the resident time (%) run real kernels, not tiny ones: a CUDA
    /// graph of tiny kernels fills 1.1%, eager tiny kernels 0.2%, one fat block 0.8%, a spin on
    /// 24 blocks 18.2%; LLM decode in CUDA graphs 69%, a GEMM beside a tiny-kernel loop 76%.
    pub roofline_sm_pct: f64,
    /// …and a pipe or DRAM must run at least this share of its peak (%) for the window to be
    /// bound by it: a spin and tiny kernels draw on neither (0–1%), and below this the SMs wait
    /// on something no counter names (the partial rule's elimination decides).
    pub roofline_floor_pct: f64,
    /// Memory-controller utilisation (NVML, %) this high means memory-bound without GPM: the
    /// speed-of-light line (`bound_line_pct`, 60% of DRAM's bandwidth) as NVML's busy time
    /// reads it. NVML's figure runs 1.29–1.34× GPM's DRAM bandwidth on every busy job recorded
    /// (h100-busy, h100-everyday, h200-middle-ground: 29.4 → 39.5, 51.1 → 67.0, 69.7 → 90.0,
    /// on both SKUs), so 60% of DRAM reads 78% (device copy: 100%; bf16 GEMM: 25%).
    pub util_mem_busy_pct: f64,
    /// Memory-controller utilisation (%) under which nothing reaches device memory (tiny
    /// kernels and a spinning kernel: 0%; pinned host→device copies: 2%).
    pub util_mem_quiet_pct: f64,
    /// PCIe traffic (MiB/s, rx + tx) above which copies may dominate…
    pub transfer_pcie_mib_s: f64,
    /// …when the SMs are below this (%)…
    pub transfer_sm_max_pct: f64,
    /// …and GPU-Util, which counts a busy copy engine, is at least this (%)…
    pub transfer_util_pct: f64,
    /// …or, without GPM, when power is under this share of the span above a held context.
    pub transfer_power_load_max: f64,
    /// NVLink traffic (MiB/s, rx + tx) that counts as collective communication.
    pub collective_nvlink_mib_s: f64,
    /// A spin: GPU-Util at least this (%)…
    pub spin_util_pct: f64,
    /// …SM activity nearly constant (robust spread below this, points) when it starts…
    pub spin_sm_spread_pct: f64,
    /// …and pipes, DRAM below this (%) and no NVLink traffic: busy doing nothing.
    pub spin_quiet_pct: f64,
    /// A spin nobody started with collective traffic is a hang only with at least this much of
    /// the SMs occupied (%): a kernel spinning on one block looks exactly like tiny kernels.
    pub spin_sm_min_pct: f64,
    /// A spin continues while its SM level stays within this many points…
    pub spin_level_points: f64,
    /// …or this share of the level, whichever is larger: noise is not progress.
    pub spin_level_share: f64,
    /// A spin that began when collective traffic stopped is a hang after this long (s).
    pub hang_after_s: f64,
    /// Any spin is a hang after this long (s): flagged within a minute of its start.
    pub long_spin_s: f64,
    /// Two GPUs of one collective whose SM activity differs by this much (points): the busier
    /// is the straggler the other waits for.
    pub straggler_gap_pct: f64,
    /// Without GPM: power load (0 at a held context, 1 at the GPU's peak) at which a GPU with a
    /// kernel always resident is doing real work (FP32 FMA chain: 0.51; bf16 GEMM: 0.98).
    pub busy_power_load: f64,
    /// Without GPM: power load from which a kernel always resident is more likely a unit at
    /// its peak than latency-bound work. Power cannot tell the two apart (a register-only
    /// FP32 FMA chain draws 0.51; a softmax that leaves every unit under the line draws 0.99),
    /// so both sides stay `low` and name the other; the line only sets which is likelier. Every
    /// GEMM recorded (bf16, fp8, fp32, fp64, on an H100 and H200s) drew 0.93–1.0; the
    /// latency-bound jobs of h100-busy and h100-everyday drew 0.38–0.79.
    pub compute_power_load: f64,
    /// Without GPM: power load under which a quiet GPU draws nothing beyond its context
    /// (held idle: 0.00; the starved trainer between readings: 0.04).
    pub quiet_power_load: f64,
    /// Without GPM: power load under which resident kernels draw nothing: tiny kernels or a
    /// spin (tiny graph: −0.01; spinning collective: 0.01; FP32 FMA chain: 0.51).
    pub idle_power_load: f64,
    /// Without GPM: a kernel resident in every sample (GPU-Util's median at `spin_util_pct`),
    /// the memory controller idle, and power at least this far above a held context (but under
    /// `idle_power_load`) occupies every SM: a spin or on-chip work, not tiny kernels.
    /// h200-nogpm-lookalikes: a spin on all 132 SMs 136.5 W (load 0.029) against a held
    /// context at 117 W; one-block spin 117.3 W (−0.005), one-block stream 120.3 W (0.001),
    /// eager tiny kernels 116.3 W (−0.006); h200-verdicts' spin on 24 blocks 124.4 W (0.008).
    pub all_sm_power_load: f64,
    /// Without GPM: power load per unit of GPU-Util at which intermittent kernels are real
    /// work (starved bursts: 1.35; starved trainer: 0.74; tiny kernels: ≤ 0).
    pub work_load_per_util: f64,
    /// Without GPM: a power load under this is within a baseline's error (~6 W on an H200)
    /// and decides nothing.
    pub noise_power_load: f64,
    /// Without link rates: a GPU power-capped in at least this share of its samples…
    pub capped_share: f64,
    /// …with a mean power load under this is running bursts that hit the cap between waits
    /// (the pipeline seesaw: 0.69; the waiting rank: 0.44; a steady GEMM: 0.98).
    pub capped_bursts_load_max: f64,
    /// Without GPM, two GPUs of one job whose power loads differ by this much: the busier is
    /// the straggler.
    pub straggler_load_gap: f64,
    /// Occupancy per unit of SM activity at which the few active SMs hold fat blocks (one
    /// 1024-thread block: 0.5) rather than tiny kernels (a CUDA graph of tiny kernels: 0.01).
    pub fat_block_occupancy_ratio: f64,
    /// Memory in use changing by this share of the GPU's memory per second is allocation
    /// churn (the article's 30%/s).
    pub churn_share_per_s: f64,
    /// Clock-event reasons active in at least this share of a window's samples are reported.
    pub clock_reason_share: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            active_util_pct: 1.0,
            active_sm_pct: 0.5,
            launch_util_pct: 5.0,
            launch_intensity_max: 0.25,
            launch_sm_max_pct: 30.0,
            starved_util_max_pct: 50.0,
            busy_sm_pct: 80.0,
            resident_whole_util_pct: 95.0,
            resident_most_util_pct: 50.0,
            busy_share_min: 0.5,
            compute_power_util_pct: 80.0,
            host_waits_util_pct: 90.0,
            tensor_idle_pct: 1.0,
            tensor_partly_pct: 70.0,
            bound_line_pct: 60.0,
            bound_band_pct: 5.0,
            bound_busy_share_min: 0.75,
            latency_dram_pct: 25.0,
            latency_pipe_quiet_pct: 5.0,
            roofline_sm_pct: 30.0,
            roofline_floor_pct: 5.0,
            util_mem_busy_pct: 78.0,
            util_mem_quiet_pct: 1.0,
            transfer_pcie_mib_s: 1024.0,
            transfer_sm_max_pct: 10.0,
            transfer_util_pct: 10.0,
            transfer_power_load_max: 0.15,
            collective_nvlink_mib_s: 64.0,
            spin_util_pct: 95.0,
            spin_sm_spread_pct: 1.0,
            spin_quiet_pct: 1.0,
            spin_sm_min_pct: 5.0,
            spin_level_points: 2.0,
            spin_level_share: 0.25,
            hang_after_s: 10.0,
            long_spin_s: 30.0,
            straggler_gap_pct: 20.0,
            busy_power_load: 0.4,
            compute_power_load: 0.85,
            quiet_power_load: 0.025,
            idle_power_load: 0.1,
            all_sm_power_load: 0.015,
            work_load_per_util: 0.25,
            noise_power_load: 0.01,
            capped_share: 0.25,
            capped_bursts_load_max: 0.85,
            straggler_load_gap: 0.3,
            fat_block_occupancy_ratio: 0.2,
            churn_share_per_s: 0.3,
            clock_reason_share: 0.25,
        }
    }
}
