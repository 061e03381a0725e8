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
        // Every SM busy, no unit near its peak: the latency workload's patterns, and the
        // verdict recordings' random gather.
        "latency_gather" | "latency_chase" | "latency_scatter" | "random_gather" => {
            Class::LatencyBound
        }
        // The latency workload's fixes are what they are, as Nsight Compute measured them on
        // an H100 (2026-12-05, docs/benchmarks.md): the sorted gather (DRAM 88%) and the
        // full-width copy (90%) stream from DRAM; the pre-reduced scatter runs 4.9× faster
        // yet still leaves every unit under the line (DRAM 39%, compute 16%): latency-bound.
        "fix_gather_sorted" | "fix_full_grid" => Class::MemoryBound,
        "fix_scatter_smem" => Class::LatencyBound,
        // A quarter as many blocks as SMs: the few SMs that run it stream well, but DRAM
        // reaches 51% and nothing else binds (ncu: "latency issues", a grid too small).
        "underfilled_grid" => Class::LatencyBound,
        _ => return None,
    })
}

/// The other class that is as right for a phase whose binding unit sits on the 60% line (in
/// the 55–65% band, where Nsight Compute's verdict turns on a point or two): the random
/// 4-byte gather moves 64 bytes of DRAM a value, which Nsight Compute put at 60.6% of the
/// H100's DRAM peak (GPM 60.5%), so `memory_bound` is as right as `latency_bound` there.
pub fn also_right(phase: &str) -> Option<Class> {
    match phase {
        "latency_gather" => Some(Class::MemoryBound),
        _ => None,
    }
}

/// The calibration phase of each variant of the `latency` bench workload: the latency-bound
/// patterns as `latency_*` (the gather's power is the latency baseline), their fixes as `fix_*`,
/// the under-filled grid as `underfilled_grid`.
pub fn latency_phase(variant: &str) -> Option<&'static str> {
    Some(match variant {
        "gather_random" => crate::profile::LATENCY_BASELINE_PHASE,
        "gather_sorted" => "fix_gather_sorted",
        "chase" => "latency_chase",
        "scatter_atomic" => "latency_scatter",
        "scatter_smem" => "fix_scatter_smem",
        "copy_narrow_grid" => "underfilled_grid",
        "copy_full_grid" => "fix_full_grid",
        _ => return None,
    })
}

/// Whether a phase ran a latency-bound pattern: every SM busy, no unit near its peak.
/// `random_gather` is the verdict recordings' name for the same gather.
pub fn is_latency_phase(phase: &str) -> bool {
    phase.starts_with("latency_") || phase == "random_gather"
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseCheck {
    pub phase: String,
    pub gpu: u32,
    pub expected: Class,
    /// A second class as right as `expected` ([`also_right`]).
    pub also: Option<Class>,
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

/// What one phase's windows added up to so far.
#[derive(Debug, Default)]
struct Tally {
    windows: usize,
    got: BTreeMap<Class, usize>,
    efficiency: (f64, usize),
    calibrated: (f64, usize),
}

fn mean_of((sum, n): (f64, usize)) -> Option<f64> {
    (n > 0).then(|| sum / n as f64)
}

/// Scores windows as they stream: each one whose midpoint lies in a trimmed phase with a known
/// right class counts for that phase. Memory is bounded by the number of phases.
#[derive(Debug)]
pub struct Validator<'a> {
    phases: &'a [PhaseSpan],
    tallies: BTreeMap<(usize, u32), Tally>,
    gpm: bool,
}

impl<'a> Validator<'a> {
    pub fn new(phases: &'a [PhaseSpan]) -> Self {
        Validator {
            phases,
            tallies: BTreeMap::new(),
            gpm: false,
        }
    }

    pub fn add(&mut self, w: &WindowReport) {
        self.gpm |= w.signals.has_gpm();
        let mid = w.stats.midpoint();
        for (i, p) in self.phases.iter().enumerate() {
            let applies = p.gpus.as_ref().is_none_or(|g| g.contains(&w.stats.gpu));
            if applies
                && expected_class(&p.name).is_some()
                && mid >= p.t0 + TRIM_START_S
                && mid <= p.t1 - TRIM_END_S
            {
                let t = self.tallies.entry((i, w.stats.gpu)).or_default();
                t.windows += 1;
                *t.got.entry(w.class).or_insert(0) += 1;
                if let Some(e) = w.efficiency {
                    t.efficiency = (t.efficiency.0 + e, t.efficiency.1 + 1);
                }
                if let Some(e) = w.calibrated_efficiency {
                    t.calibrated = (t.calibrated.0 + e, t.calibrated.1 + 1);
                }
            }
        }
    }

    pub fn finish(self) -> Validation {
        let mut confusion = BTreeMap::new();
        let mut out = Vec::new();
        for ((i, gpu), t) in self.tallies {
            let phase = &self.phases[i];
            let Some(expected) = expected_class(&phase.name) else {
                continue;
            };
            for (class, n) in &t.got {
                *confusion.entry((expected, *class)).or_insert(0) += n;
            }
            let efficiency = mean_of(t.efficiency);
            let also = also_right(&phase.name);
            let count = |c: Option<Class>| c.and_then(|c| t.got.get(&c)).copied().unwrap_or(0);
            out.push(PhaseCheck {
                phase: phase.name.clone(),
                gpu,
                expected,
                also,
                windows: t.windows,
                right: count(Some(expected)) + count(also),
                got: t.got,
                efficiency,
                calibrated_efficiency: mean_of(t.calibrated),
                rule_says_slacking: efficiency.map(|e| e < 0.6),
                really_slacking: !matches!(
                    expected,
                    Class::ComputeBound | Class::MemoryBound | Class::Idle
                ),
            });
        }
        Validation {
            phases: out,
            gpm: self.gpm,
            confusion,
        }
    }
}

/// Scores every window whose midpoint lies in a trimmed phase with a known right class.
pub fn validate(windows: &[WindowReport], phases: &[PhaseSpan]) -> Validation {
    let mut v = Validator::new(phases);
    windows.iter().for_each(|w| v.add(w));
    v.finish()
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
            // The case the rule was written for and the one it is weakest on: every SM busy,
            // so the efficiency rests on power alone.
            let case = if is_latency_phase(&p.phase) {
                " (the latency-bound case: every SM busy, no unit near its peak; SM activity ≈ 1, so power/TDP alone decides)"
            } else {
                ""
            };
            lines.push(format!(
                "{:<16} efficiency {:.2} → 0.6 rule {}{case}",
                p.phase, e, verdict
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant of the latency workload becomes a phase of its own; the fixes and the
    /// under-filled grid have a right class, the patterns are the latency-bound case.
    #[test]
    fn every_latency_variant_has_a_phase_and_the_fixes_a_class() {
        let variants = [
            "gather_random",
            "gather_sorted",
            "chase",
            "scatter_atomic",
            "scatter_smem",
            "copy_narrow_grid",
            "copy_full_grid",
        ];
        let phases: Vec<&str> = variants.iter().filter_map(|v| latency_phase(v)).collect();
        assert_eq!(phases.len(), variants.len());
        let unique: std::collections::BTreeSet<_> = phases.iter().collect();
        assert_eq!(unique.len(), phases.len(), "{phases:?}");
        assert_eq!(latency_phase("gather_random"), Some("latency_gather"));
        assert_eq!(latency_phase("eager"), None);
        for fix in ["fix_gather_sorted", "fix_full_grid"] {
            assert_eq!(expected_class(fix), Some(Class::MemoryBound), "{fix}");
            assert!(!is_latency_phase(fix));
        }
        // As ncu measured them: still under the line after the fix, and a grid too small.
        assert_eq!(
            expected_class("fix_scatter_smem"),
            Some(Class::LatencyBound)
        );
        assert_eq!(
            expected_class("underfilled_grid"),
            Some(Class::LatencyBound)
        );
        assert_eq!(also_right("latency_gather"), Some(Class::MemoryBound));
        assert_eq!(also_right("latency_chase"), None);
        assert!(!is_latency_phase("underfilled_grid"));
        for pattern in [
            "latency_gather",
            "latency_chase",
            "latency_scatter",
            "random_gather",
        ] {
            assert!(is_latency_phase(pattern), "{pattern}");
        }
        assert!(!is_latency_phase("memory"));
    }
}
