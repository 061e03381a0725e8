//! One reading of one GPU at one instant: the unit every source produces and every later stage
//! consumes. Every metric is optional because a trace may carry any subset of columns and a live
//! driver may lack a field; stages downstream must say what they could not see rather than guess.

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

/// The metrics a [`Sample`] can carry. The order is the trace format's column order when
/// `record` writes a file; each variant's [`Metric::column`] is its CSV header name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// GPU-Util (%): share of the sample period in which any kernel was resident.
    UtilGpu,
    /// Memory-controller utilisation (%), NVML's coarse figure.
    UtilMem,
    /// `nvmlDeviceGetPowerUsage` (mW): a one-second average on Hopper.
    PowerMw,
    /// Instantaneous power field value (mW).
    PowerInstMw,
    /// Averaged power field value (mW).
    PowerAvgMw,
    /// NVML total energy counter (mJ since driver load); its deltas give a window's true mean power.
    EnergyMj,
    SmMhz,
    MemMhz,
    TempC,
    /// Performance state, 0 (P0, fastest) to 15.
    Pstate,
    MemUsedBytes,
    MemTotalBytes,
    /// Number of processes holding a compute context on the GPU.
    Nprocs,
    /// Enforced power limit (mW).
    PowerLimitMw,
    /// Default power limit (mW): the board's TDP as shipped.
    PowerDefaultLimitMw,
    /// Temperature at which the GPU starts to slow down (°C).
    TempSlowdownC,
    /// GPM graphics-engine activity (%).
    GpmGr,
    /// GPM SM activity (%): share of SM cycles with at least one warp resident.
    GpmSm,
    /// GPM SM occupancy (%).
    GpmOcc,
    /// GPM tensor-pipe activity (%).
    GpmTensor,
    /// GPM DRAM bandwidth utilisation (%).
    GpmDram,
    GpmFp32,
    GpmFp16,
    GpmFp64,
    /// GPM integer-pipe activity (%): `NVML_GPM_METRIC_INTEGER_UTIL`. Sorts, top-k, hashing
    /// and index arithmetic keep this pipe busy while every floating-point pipe reads ~0, so
    /// without it integer-heavy work and latency-bound work look the same.
    GpmInt,
    /// GPM tensor-pipe activity split by instruction (%): half-precision matrix (HMMA: fp16,
    /// bf16, tf32, fp8), integer matrix (IMMA: int8, int4) and FP64 matrix (DFMA) work.
    /// `GpmTensor` is any of them; the split says which kind of GEMM keeps the cores busy.
    GpmHmma,
    GpmImma,
    GpmDfma,
    /// GPM PCIe transmit rate (MiB/s).
    GpmPcieTx,
    /// GPM PCIe receive rate (MiB/s).
    GpmPcieRx,
    /// GPM NVLink transmit rate (MiB/s), summed over links.
    GpmNvlinkTx,
    /// GPM NVLink receive rate (MiB/s), summed over links.
    GpmNvlinkRx,
    /// `nvmlDeviceGetPcieThroughput` transmit (MiB/s): a 20 ms sample, on any GPU, GPM or not.
    NvmlPcieTx,
    /// `nvmlDeviceGetPcieThroughput` receive (MiB/s).
    NvmlPcieRx,
    /// NVML's NVLink data-throughput counters, differenced (MiB/s): on any GPU with NVLink.
    NvmlNvlinkTx,
    NvmlNvlinkRx,
    /// HBM temperature (°C), NVML's memory-temperature field.
    MemTempC,
    /// Video encoder and decoder utilisation (%).
    UtilEnc,
    UtilDec,
    /// ECC errors since the driver loaded (volatile) and over the board's life (aggregate).
    EccVolatileCorrected,
    EccVolatileUncorrected,
    EccAggregateCorrected,
    EccAggregateUncorrected,
    /// Rows remapped for corrected and uncorrected errors; 1 when a remap waits for a reset,
    /// 1 when a remap failed (Ampere and later).
    RemapCorrected,
    RemapUncorrected,
    RemapPending,
    RemapFailed,
    /// Pages retired for single- and double-bit errors, 1 when a retirement waits for a
    /// reset (before Ampere).
    RetiredSingleBit,
    RetiredDoubleBit,
    RetiredPending,
    /// PCIe replays since the driver loaded.
    PcieReplays,
    /// NVLink CRC, replay and recovery errors, summed over links.
    NvlinkCrcErrors,
    NvlinkReplayErrors,
    NvlinkRecoveryErrors,
    /// Xid events the agent received since it started, and the last one's code.
    XidEvents,
    XidLast,
    /// BAR1 (the window through which the host and peers map device memory) in use and its
    /// size (bytes): `nvmlDeviceGetBAR1MemoryInfo`, every 10 s (370–480 µs of CPU a read on an H200).
    Bar1UsedBytes,
    Bar1TotalBytes,
    /// The PCIe link as trained now (generation, lanes) and the most this GPU and slot allow
    /// (`nvmlDeviceGetMaxPcieLinkGeneration` / `Width`: the GPU's and the system's together).
    /// In the trace rather than the facts so that a replayed health report sees both.
    PcieLinkGen,
    PcieLinkWidth,
    PcieLinkGenMax,
    PcieLinkWidthMax,
    /// Fan speed (% of the fan's maximum), averaged over the board's fans; absent on passively
    /// cooled boards (SXM, most PCIe data-centre cards).
    FanPct,
    /// NVLink links active and links present but inactive (`nvmlDeviceGetNvLinkState`).
    NvlinkLinksUp,
    NvlinkLinksDown,
}

impl Metric {
    /// At most 128: [`Sample`] keeps a bit per metric in a [`MetricBits`].
    pub const COUNT: usize = 65;

    pub const ALL: [Metric; Metric::COUNT] = [
        Metric::UtilGpu,
        Metric::UtilMem,
        Metric::PowerMw,
        Metric::PowerInstMw,
        Metric::PowerAvgMw,
        Metric::EnergyMj,
        Metric::SmMhz,
        Metric::MemMhz,
        Metric::TempC,
        Metric::Pstate,
        Metric::MemUsedBytes,
        Metric::MemTotalBytes,
        Metric::Nprocs,
        Metric::PowerLimitMw,
        Metric::PowerDefaultLimitMw,
        Metric::TempSlowdownC,
        Metric::GpmGr,
        Metric::GpmSm,
        Metric::GpmOcc,
        Metric::GpmTensor,
        Metric::GpmDram,
        Metric::GpmFp32,
        Metric::GpmFp16,
        Metric::GpmFp64,
        Metric::GpmInt,
        Metric::GpmHmma,
        Metric::GpmImma,
        Metric::GpmDfma,
        Metric::GpmPcieTx,
        Metric::GpmPcieRx,
        Metric::GpmNvlinkTx,
        Metric::GpmNvlinkRx,
        Metric::NvmlPcieTx,
        Metric::NvmlPcieRx,
        Metric::NvmlNvlinkTx,
        Metric::NvmlNvlinkRx,
        Metric::MemTempC,
        Metric::UtilEnc,
        Metric::UtilDec,
        Metric::EccVolatileCorrected,
        Metric::EccVolatileUncorrected,
        Metric::EccAggregateCorrected,
        Metric::EccAggregateUncorrected,
        Metric::RemapCorrected,
        Metric::RemapUncorrected,
        Metric::RemapPending,
        Metric::RemapFailed,
        Metric::RetiredSingleBit,
        Metric::RetiredDoubleBit,
        Metric::RetiredPending,
        Metric::PcieReplays,
        Metric::NvlinkCrcErrors,
        Metric::NvlinkReplayErrors,
        Metric::NvlinkRecoveryErrors,
        Metric::XidEvents,
        Metric::XidLast,
        Metric::Bar1UsedBytes,
        Metric::Bar1TotalBytes,
        Metric::PcieLinkGen,
        Metric::PcieLinkWidth,
        Metric::PcieLinkGenMax,
        Metric::PcieLinkWidthMax,
        Metric::FanPct,
        Metric::NvlinkLinksUp,
        Metric::NvlinkLinksDown,
    ];

    /// The CSV column name in the trace format.
    pub fn column(self) -> &'static str {
        match self {
            Metric::UtilGpu => "util_gpu",
            Metric::UtilMem => "util_mem",
            Metric::PowerMw => "power_mw",
            Metric::PowerInstMw => "power_inst_mw",
            Metric::PowerAvgMw => "power_avg_mw",
            Metric::EnergyMj => "energy_mj",
            Metric::SmMhz => "sm_mhz",
            Metric::MemMhz => "mem_mhz",
            Metric::TempC => "temp_c",
            Metric::Pstate => "pstate",
            Metric::MemUsedBytes => "mem_used",
            Metric::MemTotalBytes => "mem_total",
            Metric::Nprocs => "nprocs",
            Metric::PowerLimitMw => "power_limit_mw",
            Metric::PowerDefaultLimitMw => "power_default_limit_mw",
            Metric::TempSlowdownC => "temp_slowdown_c",
            Metric::GpmGr => "gpm_gr",
            Metric::GpmSm => "gpm_sm",
            Metric::GpmOcc => "gpm_occ",
            Metric::GpmTensor => "gpm_tensor",
            Metric::GpmDram => "gpm_dram",
            Metric::GpmFp32 => "gpm_fp32",
            Metric::GpmFp16 => "gpm_fp16",
            Metric::GpmFp64 => "gpm_fp64",
            Metric::GpmInt => "gpm_int",
            Metric::GpmHmma => "gpm_hmma",
            Metric::GpmImma => "gpm_imma",
            Metric::GpmDfma => "gpm_dfma",
            Metric::GpmPcieTx => "gpm_pcie_tx",
            Metric::GpmPcieRx => "gpm_pcie_rx",
            Metric::GpmNvlinkTx => "gpm_nvlink_tx",
            Metric::GpmNvlinkRx => "gpm_nvlink_rx",
            Metric::NvmlPcieTx => "nvml_pcie_tx",
            Metric::NvmlPcieRx => "nvml_pcie_rx",
            Metric::NvmlNvlinkTx => "nvml_nvlink_tx",
            Metric::NvmlNvlinkRx => "nvml_nvlink_rx",
            Metric::MemTempC => "mem_temp_c",
            Metric::UtilEnc => "util_enc",
            Metric::UtilDec => "util_dec",
            Metric::EccVolatileCorrected => "ecc_volatile_corrected",
            Metric::EccVolatileUncorrected => "ecc_volatile_uncorrected",
            Metric::EccAggregateCorrected => "ecc_aggregate_corrected",
            Metric::EccAggregateUncorrected => "ecc_aggregate_uncorrected",
            Metric::RemapCorrected => "remap_corrected",
            Metric::RemapUncorrected => "remap_uncorrected",
            Metric::RemapPending => "remap_pending",
            Metric::RemapFailed => "remap_failed",
            Metric::RetiredSingleBit => "retired_single_bit",
            Metric::RetiredDoubleBit => "retired_double_bit",
            Metric::RetiredPending => "retired_pending",
            Metric::PcieReplays => "pcie_replays",
            Metric::NvlinkCrcErrors => "nvlink_crc_errors",
            Metric::NvlinkReplayErrors => "nvlink_replay_errors",
            Metric::NvlinkRecoveryErrors => "nvlink_recovery_errors",
            Metric::XidEvents => "xid_events",
            Metric::XidLast => "xid_last",
            Metric::Bar1UsedBytes => "bar1_used",
            Metric::Bar1TotalBytes => "bar1_total",
            Metric::PcieLinkGen => "pcie_link_gen",
            Metric::PcieLinkWidth => "pcie_link_width",
            Metric::PcieLinkGenMax => "pcie_link_gen_max",
            Metric::PcieLinkWidthMax => "pcie_link_width_max",
            Metric::FanPct => "fan_pct",
            Metric::NvlinkLinksUp => "nvlink_links_up",
            Metric::NvlinkLinksDown => "nvlink_links_down",
        }
    }

    pub fn from_column(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.column() == name)
    }

    /// Percentages are bounded; the reader rejects values far outside 0–100 for these.
    pub fn is_percent(self) -> bool {
        matches!(
            self,
            Metric::UtilGpu
                | Metric::UtilMem
                | Metric::UtilEnc
                | Metric::UtilDec
                | Metric::GpmGr
                | Metric::GpmSm
                | Metric::GpmOcc
                | Metric::GpmTensor
                | Metric::GpmDram
                | Metric::GpmFp32
                | Metric::GpmFp16
                | Metric::GpmFp64
                | Metric::GpmInt
                | Metric::GpmHmma
                | Metric::GpmImma
                | Metric::GpmDfma
                | Metric::FanPct
        )
    }

    /// GPM's metrics: rates between two GPM samples, absent on GPUs before Hopper.
    pub fn is_gpm(self) -> bool {
        self >= Metric::GpmGr && self <= Metric::GpmNvlinkRx
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A set of [`Metric`]s, bit `i` for [`Metric::ALL`]`[i]`: wide enough for every metric.
pub type MetricBits = u128;

const _: () = assert!(Metric::COUNT <= MetricBits::BITS as usize);

/// One reading of one GPU. `t` is unix seconds; `clk_reasons` is NVML's clock-event (throttle)
/// bitmask, kept apart from the numeric metrics because it is a set of flags, not a quantity.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub t: f64,
    pub gpu: u32,
    pub clk_reasons: Option<u64>,
    /// Each metric's value where its bit in `present` is set, 0 where it is not (so that two
    /// samples with the same metrics compare equal): 416 bytes instead of the 832 of an
    /// `Option` each, which the offline reader builds and the windows read once a row.
    values: [f64; Metric::COUNT],
    /// Bit `i` set when `values[i]` was read: the windows visit the metrics a sample has, not
    /// all of them (a trace of 20 columns would cost as much as one of 52).
    present: MetricBits,
    /// The processes holding the GPU, where the process list was read (once a second).
    pub processes: Option<std::sync::Arc<Vec<GpuProcess>>>,
    /// The Kubernetes containers the kubelet assigned the GPU to, read with the process list
    /// where a kubelet answers; empty when it assigned the GPU to none.
    pub pods: Option<std::sync::Arc<Vec<PodContainer>>>,
    /// Each NVLink the GPU has, its state and error counters, read every 10 s (GPUs with
    /// NVLink): which link of 18 is down or erring, where the metrics give only the counts.
    pub nvlinks: Option<std::sync::Arc<Vec<NvlinkLink>>>,
}

/// One NVLink of a GPU as NVML reads it (`nvmlDeviceGetNvLinkState`,
/// `nvmlDeviceGetNvLinkErrorCounter`): the error counters count since the driver loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvlinkLink {
    /// The link's index, 0 to 17.
    pub link: u32,
    /// Whether the link is active.
    pub up: bool,
    /// Data CRC, replay and recovery errors on this link, where the driver counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<u64>,
}

impl Sample {
    pub fn new(t: f64, gpu: u32) -> Sample {
        Sample {
            t,
            gpu,
            clk_reasons: None,
            values: [0.0; Metric::COUNT],
            present: 0,
            processes: None,
            pods: None,
            nvlinks: None,
        }
    }

    pub fn get(&self, metric: Metric) -> Option<f64> {
        let i = metric.index();
        (self.present & (1 << i) != 0).then(|| self.values[i])
    }

    pub fn set(&mut self, metric: Metric, value: f64) {
        self.values[metric.index()] = value;
        self.present |= 1 << metric.index();
    }

    /// The metrics this sample carries and their values, in [`Metric::ALL`]'s order.
    pub fn metrics(&self) -> impl Iterator<Item = (Metric, f64)> + '_ {
        let mut left = self.present;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            let i = left.trailing_zeros() as usize;
            left &= left - 1;
            Some((Metric::ALL[i], self.values[i]))
        })
    }

    /// The bit of each metric it carries (bit `i` for [`Metric::ALL`]`[i]`), whose values
    /// [`Sample::metrics`] gives in the same order.
    pub fn metric_bits(&self) -> MetricBits {
        self.present
    }

    /// Replaces every metric with `values`, one for each bit of `bits` from the lowest (as
    /// [`Sample::metric_bits`] and [`Sample::metrics`] give them): a packed row made a sample
    /// again without a pass over every metric. Bits past [`Metric::COUNT`] and bits beyond
    /// the values given are left out.
    pub fn set_metrics(&mut self, bits: MetricBits, values: &[f64]) {
        let bits = bits & (MetricBits::MAX >> (MetricBits::BITS as usize - Metric::COUNT));
        // Most rows carry the metrics the one before did: only those it no longer carries go
        // back to 0, so that two samples with the same metrics compare equal.
        let mut stale = self.present & !bits;
        while stale != 0 {
            self.values[stale.trailing_zeros() as usize] = 0.0;
            stale &= stale - 1;
        }
        let mut left = bits;
        for &v in values {
            if left == 0 {
                break;
            }
            self.values[left.trailing_zeros() as usize] = v;
            left &= left - 1;
        }
        self.present = bits & !left;
        while left != 0 {
            self.values[left.trailing_zeros() as usize] = 0.0;
            left &= left - 1;
        }
    }

    /// Builder form of [`Sample::set`], handy in tests and sources.
    pub fn with(mut self, metric: Metric, value: f64) -> Sample {
        self.set(metric, value);
        self
    }

    /// True when no metric and no clock-event mask was read: such a row carries no information.
    pub fn is_empty(&self) -> bool {
        self.clk_reasons.is_none()
            && self.processes.is_none()
            && self.pods.is_none()
            && self.nvlinks.is_none()
            && self.present == 0
    }

    /// A GPM pair read before the driver refreshed its counters: NVML documents that two GPM
    /// samples must be over 100 ms apart, and a pair that falls within one refresh has equal
    /// counters, so every rate reads exactly 0 and DRAM bandwidth, 0 divided by 0, is NaN (a
    /// recorder writes it empty or `nan`). A real idle GPU still shows a trickle of PCIe
    /// traffic and a defined DRAM value. Such a pair says nothing about the GPU: it is not a 0.
    pub fn has_stale_gpm(&self) -> bool {
        let mut gpm = Metric::ALL.into_iter().filter(|m| m.is_gpm());
        self.get(Metric::GpmSm).is_some()
            && self.get(Metric::GpmDram).is_none()
            && gpm.all(|m| self.get(m).is_none_or(|v| v == 0.0))
    }

    /// Forgets every GPM value (a stale pair, or a source told to ignore GPM).
    pub fn clear_gpm(&mut self) {
        for m in Metric::ALL.into_iter().filter(|m| m.is_gpm()) {
            self.values[m.index()] = 0.0;
            self.present &= !(1 << m.index());
        }
    }
}

/// A Kubernetes container the kubelet assigned a GPU to (PodResources).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PodContainer {
    pub pod: String,
    pub namespace: String,
    pub container: String,
}

/// One process holding one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// GPU memory the process holds (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_bytes: Option<f64>,
    /// Its share of the GPU's SM time, averaged over NVML's samples of the last 5 s (%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_pct: Option<f64>,
    /// Host CPU use, 100 = one core, all threads…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pct: Option<f64>,
    /// …and its busiest thread's (a launch-bound job pegs one at 100% in the driver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job: Option<String>,
    /// The job's identity as its launcher put it in the process environment (`RANK`,
    /// `SLURM_ACCOUNT`, …): what lets ranks on different nodes be told apart and joined into
    /// one job by the engine that aggregates them (docs/EXPORT.md, `gpuslack.job.info`).
    #[serde(default, flatten)]
    pub identity: JobIdentity,
    /// The profiler attached to the process, where its environment or its executable names
    /// one ("Nsight Compute (ncu)", `attribution::procfs`): while it runs, the GPU's counters
    /// are the profiler's, and the window's verdict says so (docs/DIAGNOSIS.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiler: Option<String>,
}

/// What a process's environment says of the job it belongs to, each field where set: a
/// launcher (torchrun, Slurm's `srun`) writes the same job key, account and world size into
/// every rank's environment, on every node, which is what makes a job one across nodes.
/// Carried in the trace's `processes` column under these names, so that a recording replays
/// as the node it was recorded on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobIdentity {
    /// `RANK`: the process's rank in the whole job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// `LOCAL_RANK`: its rank on its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    /// `WORLD_SIZE`: how many ranks the job has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// A key the same on every rank of a torchrun/NCCL job without a scheduler:
    /// `TORCHELASTIC_RUN_ID`, else `MASTER_ADDR:MASTER_PORT` (the rendezvous every rank dials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_key: Option<String>,
    /// `SLURM_STEP_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_step: Option<String>,
    /// `SLURM_ARRAY_TASK_ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_array_task: Option<String>,
    /// `SLURM_JOB_USER`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_user: Option<String>,
    /// `SLURM_JOB_ACCOUNT`: the team a Slurm site bills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_account: Option<String>,
    /// `SLURM_JOB_PARTITION`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_partition: Option<String>,
}

impl JobIdentity {
    /// True when the environment named nothing of the job.
    pub fn is_empty(&self) -> bool {
        *self == JobIdentity::default()
    }
}

impl GpuProcess {
    /// What names this process's job: the name every rank of it shares, on every node. A Slurm
    /// job id first; then torchrun's rendezvous key, which all the ranks of a multi-node job
    /// share where their pods (a PyTorchJob's, one pod a node) and containers do not; then the
    /// pod, the container, the process group.
    pub fn job(&self) -> Option<String> {
        if let Some(job) = &self.slurm_job {
            return Some(format!("slurm:{job}"));
        }
        if let Some(key) = &self.identity.job_key {
            return Some(format!("torch:{key}"));
        }
        if let Some(uid) = &self.pod_uid {
            return Some(format!("pod:{uid}"));
        }
        if let Some(id) = &self.container_id {
            return Some(format!("container:{}", &id[..id.len().min(12)]));
        }
        self.pgid
            .or(Some(self.pid))
            .map(|pgid| format!("pgid:{pgid}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_round_trips_through_its_column_name() {
        for (i, m) in Metric::ALL.into_iter().enumerate() {
            assert_eq!(m.index(), i, "{m:?} is out of order in ALL");
            assert_eq!(Metric::from_column(m.column()), Some(m));
        }
        assert_eq!(Metric::from_column("call_us"), None);
    }

    #[test]
    fn the_processes_column_carries_the_job_identity_flat() {
        // As `record` writes it and tests/fleet.rs poses nodes with it.
        let cell = r#"[{"pid":4100,"name":"python","rank":1,"local_rank":0,"world_size":2,"job_key":"10.0.0.1:29500","slurm_account":"vision","profiler":"Nsight Compute (ncu)"}]"#;
        let list: Vec<GpuProcess> = serde_json::from_str(cell).expect("a processes cell");
        let p = &list[0];
        assert_eq!((p.identity.rank, p.identity.world_size), (Some(1), Some(2)));
        assert_eq!(p.identity.slurm_account.as_deref(), Some("vision"));
        assert_eq!(p.job().as_deref(), Some("torch:10.0.0.1:29500"));
        assert_eq!(p.profiler.as_deref(), Some("Nsight Compute (ncu)"));
        let written = serde_json::to_string(&list).expect("written");
        assert_eq!(
            serde_json::from_str::<Vec<GpuProcess>>(&written).expect("read back"),
            list
        );
        // A cell of an older recording, without them: no identity, and the same job as before.
        let old: Vec<GpuProcess> = serde_json::from_str(r#"[{"pid":7,"pgid":5}]"#).expect("old");
        assert!(old[0].identity.is_empty());
        assert_eq!(old[0].job().as_deref(), Some("pgid:5"));
        // No profiler read: none written, so older readers of the column see what they knew.
        assert_eq!(old[0].profiler, None);
        assert_eq!(
            serde_json::to_string(&old).expect("written"),
            r#"[{"pid":7,"pgid":5}]"#
        );
        assert!(
            !written.contains("null"),
            "absent fields are left out: {written}"
        );
    }

    #[test]
    fn metrics_set_from_bits_and_values_replace_the_old_ones() {
        let mut s = Sample::new(1.0, 0)
            .with(Metric::UtilGpu, 5.0)
            .with(Metric::FanPct, 30.0);
        let packed = Sample::new(1.0, 0)
            .with(Metric::PowerMw, 80_000.0)
            .with(Metric::NvlinkLinksDown, 2.0);
        let values: Vec<f64> = packed.metrics().map(|(_, v)| v).collect();
        s.set_metrics(packed.metric_bits(), &values);
        assert_eq!(s, packed, "the old metrics gone, their values 0 again");
        // Fewer values than bits, and bits past the last metric: left out.
        s.set_metrics(MetricBits::MAX, &[7.0]);
        assert_eq!(s, Sample::new(1.0, 0).with(Metric::UtilGpu, 7.0));
        s.set_metrics(1 << 100, &[1.0]);
        assert_eq!(s.metric_bits(), 0);
    }

    #[test]
    fn an_unrefreshed_gpm_pair_is_told_from_an_idle_gpu() {
        // Recorded on an H200 (h200x2-scenarios, t=1796026049.1259): every rate 0, DRAM NaN.
        let stale = Sample::new(1.0, 0)
            .with(Metric::UtilGpu, 75.0)
            .with(Metric::GpmSm, 0.0)
            .with(Metric::GpmOcc, 0.0)
            .with(Metric::GpmPcieRx, 0.0);
        assert!(stale.has_stale_gpm());
        // An idle GPU: DRAM reads a defined 0 and the PCIe link carries the driver's polling.
        let idle = stale.clone().with(Metric::GpmDram, 0.0);
        assert!(!idle.has_stale_gpm());
        let trickle = stale.clone().with(Metric::GpmPcieRx, 1.2);
        assert!(!trickle.has_stale_gpm());
        let mut cleared = stale;
        cleared.clear_gpm();
        assert_eq!(
            (cleared.get(Metric::GpmSm), cleared.get(Metric::UtilGpu)),
            (None, Some(75.0))
        );
        assert!(!Metric::NvmlPcieRx.is_gpm() && Metric::GpmNvlinkRx.is_gpm());
    }
}
