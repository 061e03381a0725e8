//! The JSON-lines contract of `gpuslack replay --format jsonl`: one object per GPU and window.
//! Other tools parse this: fields are only ever added, never renamed or re-typed, and the
//! `schema` field changes if that promise must be broken. docs/OUTPUT.md lists every field.

use serde::Serialize;

use crate::attribution::{GpuProcess, PodContainer};
use crate::diagnosis::{round3, Evidence, WindowReport};
use crate::window::PowerSource;

pub const JSONL_SCHEMA: &str = "gpuslack.window.v1";

#[derive(Debug, Serialize)]
pub struct WindowRecord<'a> {
    pub schema: &'static str,
    pub gpu: u32,
    /// Window bounds, unix seconds.
    pub start: f64,
    pub end: f64,
    pub class: &'static str,
    /// (power / TDP) × SM activity; null without GPM or TDP.
    pub efficiency: Option<f64>,
    /// Power between this GPU's own idle (0) and compute-bound (1) baselines; null without a profile.
    pub calibrated_efficiency: Option<f64>,
    pub expected_power_w: Option<f64>,
    pub power_w: Option<f64>,
    pub power_source: Option<&'static str>,
    pub energy_j: Option<f64>,
    /// NVML's total energy counter (J) as last read at or before the window's end.
    pub energy_counter_j: Option<f64>,
    pub tdp_w: Option<f64>,
    /// Shares 0–1.
    pub sm_active: Option<f64>,
    pub util_gpu: Option<f64>,
    pub util_duty: Option<f64>,
    pub sm_occupancy: Option<f64>,
    pub tensor_active: Option<f64>,
    pub fp32_active: Option<f64>,
    pub fp16_active: Option<f64>,
    pub dram_active: Option<f64>,
    pub pcie_rx_mib_s: Option<f64>,
    pub pcie_tx_mib_s: Option<f64>,
    pub nvlink_rx_mib_s: Option<f64>,
    pub nvlink_tx_mib_s: Option<f64>,
    pub util_mem: Option<f64>,
    pub power_load: Option<f64>,
    pub stalled_s: Option<f64>,
    pub nprocs: Option<f64>,
    /// The job the GPU's processes belong to (Slurm job, pod, container or process group).
    pub job: Option<&'a str>,
    /// The processes last seen holding the GPU in this window.
    pub processes: Option<&'a [GpuProcess]>,
    /// The Kubernetes containers the kubelet assigned the GPU to; null without a kubelet.
    pub pods: Option<&'a [PodContainer]>,
    pub mem_used_bytes: Option<f64>,
    pub samples: u32,
    pub rule: &'static str,
    pub evidence: &'a [Evidence],
    pub remedy: &'static str,
    pub throttle: &'a [String],
    pub missing: &'a [&'static str],
    /// How sure the verdict is: `high`, `medium` or `low` (docs/DIAGNOSIS.md).
    pub confidence: &'static str,
    /// Classes the measured evidence could not rule out.
    pub alternatives: Vec<&'static str>,
    /// Sources the verdict would have rested on that were missing (`gpm`, `pcie`, `nvlink`,
    /// `processes`, `calibration`).
    pub unmeasured: &'a [&'static str],
    /// What the confidence rests on, for people.
    pub confidence_reason: &'a str,
}

fn share(pct: Option<f64>) -> Option<f64> {
    pct.map(|p| round3(p / 100.0))
}

fn r3(v: Option<f64>) -> Option<f64> {
    v.map(round3)
}

impl<'a> WindowRecord<'a> {
    pub fn of(r: &'a WindowReport) -> Self {
        let s = &r.signals;
        WindowRecord {
            schema: JSONL_SCHEMA,
            gpu: r.stats.gpu,
            start: r.stats.start,
            end: r.stats.end,
            class: r.class.as_str(),
            efficiency: r3(r.efficiency),
            calibrated_efficiency: r3(r.calibrated_efficiency),
            expected_power_w: r3(r.expected_power_w),
            power_w: r3(s.power_w),
            power_source: r.stats.power_source.map(|p| match p {
                PowerSource::EnergyCounter => "energy_counter",
                PowerSource::PowerSamples => "power_samples",
            }),
            energy_j: r3(r.stats.energy_j),
            energy_counter_j: r.stats.energy_total_mj.map(|mj| mj / 1000.0),
            tdp_w: r.tdp_w,
            sm_active: share(s.sm_pct),
            util_gpu: share(s.util_pct),
            util_duty: r3(s.util_duty),
            sm_occupancy: share(s.occupancy_pct),
            tensor_active: share(s.tensor_pct),
            fp32_active: share(s.fp32_pct),
            fp16_active: share(s.fp16_pct),
            dram_active: share(s.dram_pct),
            pcie_rx_mib_s: r3(s.pcie_rx_mib_s),
            pcie_tx_mib_s: r3(s.pcie_tx_mib_s),
            nvlink_rx_mib_s: r3(s.nvlink_rx_mib_s),
            nvlink_tx_mib_s: r3(s.nvlink_tx_mib_s),
            util_mem: share(s.util_mem_pct),
            power_load: r3(r.power.load),
            stalled_s: r3(r.stall.map(|st| st.for_s)),
            nprocs: s.nprocs,
            job: r.job.as_deref(),
            processes: r.stats.processes.as_deref().map(Vec::as_slice),
            pods: r.stats.pods.as_deref().map(Vec::as_slice),
            mem_used_bytes: s.mem_used_bytes.map(f64::round),
            samples: r.stats.samples,
            rule: r.rule,
            evidence: &r.evidence,
            remedy: r.remedy(),
            throttle: &r.throttle,
            missing: &r.missing,
            confidence: r.confidence().as_str(),
            alternatives: r.alternatives().iter().map(|c| c.as_str()).collect(),
            unmeasured: &r.assessment.unmeasured,
            confidence_reason: &r.assessment.reason,
        }
    }
}
