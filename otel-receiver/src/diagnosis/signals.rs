//! The handful of numbers the rules look at, derived once per window. Keeping them apart from
//! the rules lets the report and the exporters show exactly what the rules saw.

use serde::Serialize;

use crate::sample::Metric;
use crate::window::WindowStats;

/// Per-window signals; `None` means the source did not provide that metric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Signals {
    /// Mean GPU-Util (%).
    pub util_pct: Option<f64>,
    /// Share of samples with GPU-Util above zero (0–1).
    pub util_duty: Option<f64>,
    /// GPM SM activity (%): mean, spread and peak over the window.
    pub sm_pct: Option<f64>,
    pub sm_std_pct: Option<f64>,
    pub sm_max_pct: Option<f64>,
    pub occupancy_pct: Option<f64>,
    /// The busiest arithmetic pipe (%), and which one it was.
    pub pipe_pct: Option<f64>,
    #[serde(skip)]
    pub pipe_name: Option<&'static str>,
    pub tensor_pct: Option<f64>,
    pub fp32_pct: Option<f64>,
    pub fp16_pct: Option<f64>,
    pub dram_pct: Option<f64>,
    /// PCIe receive + transmit (MiB/s), from GPM.
    pub pcie_mib_s: Option<f64>,
    pub pcie_rx_mib_s: Option<f64>,
    pub pcie_tx_mib_s: Option<f64>,
    /// NVLink receive + transmit (MiB/s), from GPM.
    pub nvlink_mib_s: Option<f64>,
    pub nvlink_rx_mib_s: Option<f64>,
    pub nvlink_tx_mib_s: Option<f64>,
    pub power_w: Option<f64>,
    /// Highest number of processes seen holding a context.
    pub nprocs: Option<f64>,
    pub mem_used_bytes: Option<f64>,
}

fn sum(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

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
        let pcie_rx = w.mean(Metric::GpmPcieRx);
        let pcie_tx = w.mean(Metric::GpmPcieTx);
        let nvlink_rx = w.mean(Metric::GpmNvlinkRx);
        let nvlink_tx = w.mean(Metric::GpmNvlinkTx);
        let sm = w.summary(Metric::GpmSm);
        Signals {
            util_pct: w.mean(Metric::UtilGpu),
            util_duty: w.util_duty,
            sm_pct: sm.map(|s| s.mean),
            sm_std_pct: sm.map(|s| s.std()),
            sm_max_pct: sm.map(|s| s.max),
            occupancy_pct: w.mean(Metric::GpmOcc),
            pipe_pct: busiest.map(|(v, _)| v),
            pipe_name: busiest.map(|(_, n)| n),
            tensor_pct: w.mean(Metric::GpmTensor),
            fp32_pct: w.mean(Metric::GpmFp32),
            fp16_pct: w.mean(Metric::GpmFp16),
            dram_pct: w.mean(Metric::GpmDram),
            pcie_mib_s: sum(pcie_rx, pcie_tx),
            pcie_rx_mib_s: pcie_rx,
            pcie_tx_mib_s: pcie_tx,
            nvlink_mib_s: sum(nvlink_rx, nvlink_tx),
            nvlink_rx_mib_s: nvlink_rx,
            nvlink_tx_mib_s: nvlink_tx,
            power_w: w.power_w,
            nprocs: w.max(Metric::Nprocs),
            mem_used_bytes: w.mean(Metric::MemUsedBytes),
        }
    }

    /// SM activity per unit of GPU-Util (0–1+): how full the SMs are while a kernel is resident.
    /// Near 0 means kernels are resident but nearly empty (tiny kernels); near 1 means real work.
    pub fn intensity(&self) -> Option<f64> {
        let util = self.util_pct.filter(|u| *u >= 1.0)?;
        Some(self.sm_pct? / util)
    }

    /// Whether GPM (SM activity and friends) was sampled.
    pub fn has_gpm(&self) -> bool {
        self.sm_pct.is_some()
    }
}
