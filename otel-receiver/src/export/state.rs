//! The latest verdict and readings of every GPU, as the exporters see them. The pipeline writes
//! one window at a time; the OTLP reader and the Prometheus endpoint read whenever they
//! collect. Its size is fixed by the number of GPUs, so a stalled exporter never makes it grow.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::delivery::Delivery;
use crate::device::DeviceFacts;
use crate::diagnosis::{Class, WindowReport};

/// One GPU's exported view.
#[derive(Debug, Clone)]
pub struct GpuView {
    pub gpu: u32,
    pub facts: DeviceFacts,
    pub report: WindowReport,
    /// Bytes over PCIe and NVLink since the agent started, integrated from GPM's rates.
    pub pcie_rx_bytes: f64,
    pub pcie_tx_bytes: f64,
    pub nvlink_rx_bytes: f64,
    pub nvlink_tx_bytes: f64,
    /// Energy counter (J): NVML's total when sampled, else the integral of window power since
    /// the agent started.
    pub energy_j: f64,
    pub energy_from_counter: bool,
}

/// A GPU whose verdict changed: what the log records announce.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassChange {
    pub gpu: u32,
    pub from: Option<Class>,
    pub to: Class,
}

#[derive(Debug, Default)]
pub struct ExportState {
    gpus: BTreeMap<u32, GpuView>,
    /// What became of what the agent produced: exported beside the GPUs' metrics.
    delivery: Arc<Delivery>,
    /// When the last window arrived, for `/healthz`.
    last_window: Option<Instant>,
    /// Per-process series per GPU (the top processes by SM share).
    top_processes: usize,
}

const MIB: f64 = 1024.0 * 1024.0;

impl ExportState {
    pub fn with_delivery(delivery: Arc<Delivery>) -> Self {
        ExportState {
            delivery,
            top_processes: super::catalogue::DEFAULT_TOP_PROCESSES,
            ..ExportState::default()
        }
    }

    /// Keeps per-process series for the `top` processes of each GPU by SM share.
    pub fn with_top_processes(mut self, top: usize) -> Self {
        self.top_processes = top;
        self
    }

    pub fn top_processes(&self) -> usize {
        self.top_processes
    }

    pub fn delivery(&self) -> &Arc<Delivery> {
        &self.delivery
    }

    /// How long ago the last window arrived, if one has.
    pub fn last_window_age(&self) -> Option<std::time::Duration> {
        self.last_window.map(|t| t.elapsed())
    }

    pub fn gpus(&self) -> impl Iterator<Item = &GpuView> {
        self.gpus.values()
    }

    pub fn get(&self, gpu: u32) -> Option<&GpuView> {
        self.gpus.get(&gpu)
    }

    /// Takes in one window; returns the change of verdict, if any.
    pub fn update(&mut self, report: &WindowReport, facts: &DeviceFacts) -> Option<ClassChange> {
        let gpu = report.stats.gpu;
        self.last_window = Some(Instant::now());
        self.delivery.window_produced();
        let seconds = report.stats.duration_s();
        let s = &report.signals;
        let counter_j = report.stats.energy_total_mj.map(|mj| mj / 1000.0);
        match self.gpus.get_mut(&gpu) {
            Some(view) => {
                let from = view.report.class;
                view.pcie_rx_bytes += s.pcie_rx_mib_s.unwrap_or(0.0) * MIB * seconds;
                view.pcie_tx_bytes += s.pcie_tx_mib_s.unwrap_or(0.0) * MIB * seconds;
                view.nvlink_rx_bytes += s.nvlink_rx_mib_s.unwrap_or(0.0) * MIB * seconds;
                view.nvlink_tx_bytes += s.nvlink_tx_mib_s.unwrap_or(0.0) * MIB * seconds;
                match counter_j {
                    Some(j) if view.energy_from_counter || view.energy_j == 0.0 => {
                        view.energy_j = j;
                        view.energy_from_counter = true;
                    }
                    _ if !view.energy_from_counter => {
                        view.energy_j += s.power_w.unwrap_or(0.0) * seconds;
                    }
                    _ => {}
                }
                view.facts = facts.clone();
                view.report = report.clone();
                (from != report.class).then_some(ClassChange {
                    gpu,
                    from: Some(from),
                    to: report.class,
                })
            }
            None => {
                self.gpus.insert(
                    gpu,
                    GpuView {
                        gpu,
                        facts: facts.clone(),
                        report: report.clone(),
                        pcie_rx_bytes: s.pcie_rx_mib_s.unwrap_or(0.0) * MIB * seconds,
                        pcie_tx_bytes: s.pcie_tx_mib_s.unwrap_or(0.0) * MIB * seconds,
                        nvlink_rx_bytes: s.nvlink_rx_mib_s.unwrap_or(0.0) * MIB * seconds,
                        nvlink_tx_bytes: s.nvlink_tx_mib_s.unwrap_or(0.0) * MIB * seconds,
                        energy_j: counter_j.unwrap_or(s.power_w.unwrap_or(0.0) * seconds),
                        energy_from_counter: counter_j.is_some(),
                    },
                );
                Some(ClassChange {
                    gpu,
                    from: None,
                    to: report.class,
                })
            }
        }
    }
}
