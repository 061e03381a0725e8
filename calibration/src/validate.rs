//! Threshold validation: the diagnosis applied to the calibration run's own windows. Each phase
//! ran a known load, so each has a right class; the confusion matrix shows where the rules hold
//! on this GPU, and the article's 0.6 rule is put beside them.

use std::collections::BTreeMap;

use gpuslack_receiver::{Class, WindowReport};
use serde::Serialize;

use crate::phases::{PhaseSpan, TRIM_END_S, TRIM_START_S};

/// The class a phase of this name should get.
pub fn expected_class(phase: &str) -> Option<Class> {
    Some(match phase {
        "idle" | "bare_idle" => Class::Idle,
        "idle_held" | "held_idle" => Class::IdleHeld,
        "tiny" | "tiny_graph" | "tiny_launch" | "tiny_seed" | "tiny_kernels" => Class::LaunchBound,
        "pcie" | "h2d_pcie" | "h2d_pinned" => Class::TransferBound,
        "memory" | "membound_copy" | "device_copy" => Class::MemoryBound,
        "compute_fp32" | "compute_tensor" | "compute_bf16" | "matmul_bf16" | "fp32_fma"
        | "bf16_gemm" => Class::ComputeBound,
        "starved" | "starved_bursts" => Class::InputStarved,
        _ => return None,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseCheck {
    pub phase: String,
    pub gpu: u32,
    pub expected: Class,
    pub windows: usize,
    pub right: usize,
    pub got: BTreeMap<Class, usize>,
    /// The article's (power / TDP) × SM activity, mean over the phase's windows.
    pub efficiency: Option<f64>,
    pub calibrated_efficiency: Option<f64>,
    /// The 0.6 rule calls the phase slacking…
    pub rule_says_slacking: Option<bool>,
    /// …and it really is wasting the GPU (anything but compute- or memory-bound work).
    pub really_slacking: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Validation {
    pub phases: Vec<PhaseCheck>,
    /// Whether GPM was sampled: without it, the NVML-only rules decided.
    pub gpm: bool,
    /// (expected, got) → windows.
    pub confusion: BTreeMap<(Class, Class), usize>,
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Scores every window whose midpoint lies in a trimmed phase with a known right class.
pub fn validate(windows: &[WindowReport], phases: &[PhaseSpan]) -> Validation {
    let mut checks: BTreeMap<(usize, u32), Vec<&WindowReport>> = BTreeMap::new();
    for w in windows {
        let mid = w.stats.midpoint();
        for (i, p) in phases.iter().enumerate() {
            let applies = p.gpus.as_ref().is_none_or(|g| g.contains(&w.stats.gpu));
            if applies
                && expected_class(&p.name).is_some()
                && mid >= p.t0 + TRIM_START_S
                && mid <= p.t1 - TRIM_END_S
            {
                checks.entry((i, w.stats.gpu)).or_default().push(w);
            }
        }
    }
    let mut confusion = BTreeMap::new();
    let mut out = Vec::new();
    for ((i, gpu), ws) in checks {
        let phase = &phases[i];
        let Some(expected) = expected_class(&phase.name) else {
            continue;
        };
        let mut got = BTreeMap::new();
        for w in &ws {
            *got.entry(w.class).or_insert(0) += 1;
            *confusion.entry((expected, w.class)).or_insert(0) += 1;
        }
        let efficiency = mean(ws.iter().filter_map(|w| w.efficiency));
        out.push(PhaseCheck {
            phase: phase.name.clone(),
            gpu,
            expected,
            windows: ws.len(),
            right: got.get(&expected).copied().unwrap_or(0),
            got,
            efficiency,
            calibrated_efficiency: mean(ws.iter().filter_map(|w| w.calibrated_efficiency)),
            rule_says_slacking: efficiency.map(|e| e < 0.6),
            really_slacking: !matches!(
                expected,
                Class::ComputeBound | Class::MemoryBound | Class::Idle
            ),
        });
    }
    Validation {
        phases: out,
        gpm: windows.iter().any(|w| w.signals.has_gpm()),
        confusion,
    }
}

impl Validation {
    pub fn windows(&self) -> usize {
        self.phases.iter().map(|p| p.windows).sum()
    }

    pub fn right(&self) -> usize {
        self.phases.iter().map(|p| p.right).sum()
    }

    /// Where the article's 0.6 rule agrees with what really ran on this GPU, and where not.
    pub fn rule_statement(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for p in &self.phases {
            let (Some(says), Some(e)) = (p.rule_says_slacking, p.efficiency) else {
                continue;
            };
            if p.expected == Class::Idle {
                continue;
            }
            let verdict = match (says, p.really_slacking) {
                (true, true) => "right: it flags real waste",
                (false, false) => "right: healthy work passes",
                (true, false) => "WRONG: healthy work is flagged as slacking",
                (false, true) => "WRONG: waste passes as healthy",
            };
            lines.push(format!(
                "{:<16} efficiency {:.2} → 0.6 rule {}",
                p.phase, e, verdict
            ));
        }
        lines
    }
}
