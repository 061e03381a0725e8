/// Every number the rules compare against, in one place, with why it is where it is. The
/// defaults come from the H200 recordings in `tests/fixtures` and hold for any GPU whose GPM
/// reports the same percentages; power-based fallbacks scale with the GPU's TDP or profile.
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
    /// A pipe (tensor, FP32, FP16, FP64) this busy (%) means real arithmetic.
    pub pipe_busy_pct: f64,
    /// DRAM bandwidth this high (%) means memory-bound (device copy: 89%; bf16 GEMM: 18%).
    pub dram_busy_pct: f64,
    /// PCIe traffic (MiB/s, rx + tx) above which copies may dominate…
    pub transfer_pcie_mib_s: f64,
    /// …when the SMs are below this (%).
    pub transfer_sm_max_pct: f64,
    /// NVLink traffic (MiB/s, rx + tx) that counts as collective communication.
    pub collective_nvlink_mib_s: f64,
    /// A spin: GPU-Util at least this (%)…
    pub spin_util_pct: f64,
    /// …SM activity at least this (%), nearly constant (spread below `spin_sm_std_pct`)…
    pub spin_sm_min_pct: f64,
    pub spin_sm_std_pct: f64,
    /// …and pipes, DRAM below this (%) and no NVLink traffic: busy doing nothing.
    pub spin_quiet_pct: f64,
    /// A spin that began when collective traffic stopped is a hang after this long (s).
    pub hang_after_s: f64,
    /// Any spin is a hang after this long (s).
    pub long_spin_s: f64,
    /// Two GPUs of one collective whose SM activity differs by this much (points): the busier
    /// is the straggler the other waits for.
    pub straggler_gap_pct: f64,
    /// Without GPM: GPU-Util at least `spin_util_pct` and power above this share of TDP is
    /// taken as compute-bound…
    pub busy_power_frac: f64,
    /// …and kernels resident at power below this share of TDP as tiny kernels.
    pub tiny_power_frac: f64,
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
            pipe_busy_pct: 40.0,
            dram_busy_pct: 60.0,
            transfer_pcie_mib_s: 1024.0,
            transfer_sm_max_pct: 10.0,
            collective_nvlink_mib_s: 64.0,
            spin_util_pct: 95.0,
            spin_sm_min_pct: 5.0,
            spin_sm_std_pct: 1.0,
            spin_quiet_pct: 1.0,
            hang_after_s: 10.0,
            long_spin_s: 120.0,
            straggler_gap_pct: 20.0,
            busy_power_frac: 0.8,
            tiny_power_frac: 0.3,
            clock_reason_share: 0.25,
        }
    }
}
