//! The handful of numbers the rules look at, derived once per window. Keeping them apart from
//! the rules lets the report and the exporters show exactly what the rules saw.
//!
//! Link rates come from GPM where it was sampled and from NVML's own counters otherwise
//! (`nvmlDeviceGetPcieThroughput`, the NVLink throughput fields), so a GPU without GPM still
//! has them; `pcie_source` and `nvlink_source` say which.

use serde::Serialize;

use crate::sample::Metric;
use crate::window::WindowStats;

/// Per-window signals; `None` means the source did not provide that metric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Signals {
    /// Mean GPU-Util (%).
    pub util_pct: Option<f64>,
    /// Median GPU-Util (%): the level a steady kernel keeps, whatever one reading says.
    pub util_median_pct: Option<f64>,
    /// Share of samples with GPU-Util above zero (0–1).
    pub util_duty: Option<f64>,
    /// Mean memory-controller utilisation (%): NVML's share of time device memory was read or
    /// written. Coarse, but every GPU has it.
    pub util_mem_pct: Option<f64>,
    /// GPM SM activity (%): mean, median, robust spread and peak over the window.
    pub sm_pct: Option<f64>,
    pub sm_median_pct: Option<f64>,
    pub sm_spread_pct: Option<f64>,
    pub sm_max_pct: Option<f64>,
    pub occupancy_pct: Option<f64>,
    /// The busiest arithmetic pipe (%), and which one it was.
    pub pipe_pct: Option<f64>,
    #[serde(skip)]
    pub pipe_name: Option<&'static str>,
    pub tensor_pct: Option<f64>,
    pub fp32_pct: Option<f64>,
    pub fp16_pct: Option<f64>,
    pub fp64_pct: Option<f64>,
    pub dram_pct: Option<f64>,
    /// PCIe receive + transmit (MiB/s), from GPM or NVML.
    pub pcie_mib_s: Option<f64>,
    pub pcie_rx_mib_s: Option<f64>,
    pub pcie_tx_mib_s: Option<f64>,
    #[serde(skip)]
    pub pcie_source: Option<&'static str>,
    /// NVLink receive + transmit (MiB/s), from GPM or NVML.
    pub nvlink_mib_s: Option<f64>,
    pub nvlink_rx_mib_s: Option<f64>,
    pub nvlink_tx_mib_s: Option<f64>,
    #[serde(skip)]
    pub nvlink_source: Option<&'static str>,
    pub power_w: Option<f64>,
    /// Share of samples (0–1) in which the GPU was held back by its power limit.
    pub power_capped_share: Option<f64>,
    /// Highest number of processes seen holding a context.
    pub nprocs: Option<f64>,
    pub mem_used_bytes: Option<f64>,
    pub mem_total_bytes: Option<f64>,
    /// Fastest change of memory in use between two samples (bytes/s).
    pub mem_swing_bytes_per_s: Option<f64>,
}

fn sum(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// A link's receive and transmit rates from GPM if sampled, else from NVML, and which it was.
fn link(
    w: &WindowStats,
    gpm: (Metric, Metric),
    nvml: (Metric, Metric),
) -> (Option<f64>, Option<f64>, Option<&'static str>) {
    let (rx, tx) = (w.mean(gpm.0), w.mean(gpm.1));
    if rx.is_some() || tx.is_some() {
        return (rx, tx, Some("GPM"));
    }
    let (rx, tx) = (w.mean(nvml.0), w.mean(nvml.1));
    let source = (rx.is_some() || tx.is_some()).then_some("NVML");
    (rx, tx, source)
}

/// NVML's clock-event bits for a GPU held back by power: the software cap and the hardware
/// power brake.
const POWER_CAP_BITS: u64 = 0x4 | 0x80;

impl Signals {
    pub fn of(w: &WindowStats) -> Signals {
        let pipes = [
            (Metric::GpmTensor, "tensor"),
            (Metric::GpmFp32, "fp32"),
            (Metric::GpmFp16, "fp16"),
            (Metric::GpmFp64, "fp64"),
        ];
        let busiest = pipes
            .iter()
            .filter_map(|&(m, name)| w.mean(m).map(|v| (v, name)))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let (pcie_rx, pcie_tx, pcie_source) = link(
            w,
            (Metric::GpmPcieRx, Metric::GpmPcieTx),
            (Metric::NvmlPcieRx, Metric::NvmlPcieTx),
        );
        let (nvlink_rx, nvlink_tx, nvlink_source) = link(
            w,
            (Metric::GpmNvlinkRx, Metric::GpmNvlinkTx),
            (Metric::NvmlNvlinkRx, Metric::NvmlNvlinkTx),
        );
        let sm = w.summary(Metric::GpmSm);
        let sm_robust = w.robust(Metric::GpmSm);
        let reasons = &w.clock_reasons;
        Signals {
            util_pct: w.mean(Metric::UtilGpu),
            util_median_pct: w.robust(Metric::UtilGpu).map(|r| r.median),
            util_duty: w.util_duty,
            util_mem_pct: w.mean(Metric::UtilMem),
            sm_pct: sm.map(|s| s.mean),
            sm_median_pct: sm_robust.map(|r| r.median),
            sm_spread_pct: sm_robust.map(|r| r.spread),
            sm_max_pct: sm.map(|s| s.max),
            occupancy_pct: w.mean(Metric::GpmOcc),
            pipe_pct: busiest.map(|(v, _)| v),
            pipe_name: busiest.map(|(_, n)| n),
            tensor_pct: w.mean(Metric::GpmTensor),
            fp32_pct: w.mean(Metric::GpmFp32),
            fp16_pct: w.mean(Metric::GpmFp16),
            fp64_pct: w.mean(Metric::GpmFp64),
            dram_pct: w.mean(Metric::GpmDram),
            pcie_mib_s: sum(pcie_rx, pcie_tx),
            pcie_rx_mib_s: pcie_rx,
            pcie_tx_mib_s: pcie_tx,
            pcie_source,
            nvlink_mib_s: sum(nvlink_rx, nvlink_tx),
            nvlink_rx_mib_s: nvlink_rx,
            nvlink_tx_mib_s: nvlink_tx,
            nvlink_source,
            power_w: w.power_w,
            power_capped_share: (reasons.samples() > 0).then(|| reasons.share_of(POWER_CAP_BITS)),
            nprocs: w.max(Metric::Nprocs),
            mem_used_bytes: w.mean(Metric::MemUsedBytes),
            mem_total_bytes: w.mean(Metric::MemTotalBytes),
            mem_swing_bytes_per_s: w.mem_swing_bytes_per_s,
        }
    }

    /// SM activity per unit of GPU-Util (0–1+): how full the SMs are while a kernel is resident.
    /// Near 0 means kernels are resident but nearly empty (tiny kernels); near 1 means real work.
    pub fn intensity(&self) -> Option<f64> {
        let util = self.util_pct.filter(|u| *u >= 1.0)?;
        Some(self.sm_pct? / util)
    }

    /// Share of the window a kernel was resident, when that is most of it (GPU-Util ≥ 50%).
    /// Activity divided by it is the activity *while working*: a window where a GEMM ran for
    /// 86% of the time is a compute-bound window with a pause, not a half-filled GPU. Below
    /// half, pauses are the story and the burst rules judge the window.
    ///
    /// GPU-Util read once a second can claim a kernel was resident all along in a window whose
    /// first second was still idle (the window straddles the start of the work). Where it reads
    /// ≥ 95%, the SM activity's mean against its busiest reading says how much of the window the
    /// work filled (never less than half: below that the window is the idle part's).
    pub fn busy_share(&self) -> f64 {
        let s = self;
        match s.util_pct {
            Some(util) if util >= 95.0 => match (s.sm_pct, s.sm_max_pct) {
                (Some(mean), Some(max)) if max >= 50.0 => (mean / max).clamp(0.5, 1.0),
                _ => 1.0,
            },
            Some(util) if util >= 50.0 => (util / 100.0).min(1.0),
            _ => 1.0,
        }
    }

    /// Whether GPM (SM activity and friends) was sampled.
    pub fn has_gpm(&self) -> bool {
        self.sm_pct.is_some()
    }

    /// Whether GPU-Util found a kernel resident in most samples: a steady stream of kernels,
    /// not bursts between waits. Without a duty figure, the mean decides.
    pub fn util_steady(&self) -> bool {
        self.util_duty.is_none_or(|d| d >= 0.75)
    }
}
