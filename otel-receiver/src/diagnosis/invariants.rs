//! Invariants that hold whatever the thresholds, and the guard that enforces them.
//!
//! The rules' thresholds come from recordings and may move; physics does not. Three statements
//! hold for any GPU and any workload, and a verdict that breaks one is wrong whatever the rule
//! that made it:
//!
//! 1. **Tiny kernels draw nothing.** `launch_bound` means the SMs are mostly empty and the
//!    GPU's time goes to launching: such a GPU draws about a held context's power (tiny
//!    kernels 121 W, held 122.5 W of 700 W on an H200) and moves no data. A window at ≥ 55%
//!    of TDP, or with DRAM ≥ 40% or the tensor pipe ≥ 30% of peak, is doing real work.
//! 2. **Full SMs are not waiting.** SMs ≥ 90% active with a kernel resident in ≥ 98% of the
//!    samples leave no time to be idle or starved: not `idle`, `idle_held` or `input_starved`.
//! 3. **Empty SMs at low power bind nothing.** SMs < 20% active at < 30% of TDP cannot be
//!    bound by a pipe or DRAM, nor wait on latency with kernels resident on them: not
//!    `compute_bound`, `memory_bound` or `latency_bound` (every recorded compute- or
//!    memory-bound job: SM ≥ 69%, ≥ 361 W of 700 W; the latency-bound scatter: SM 100%).
//!
//! The guard runs after every rule (and the rules across GPUs) and re-decides a window that
//! breaks one, from the same readings, with its confidence lowered: so the invariants hold for
//! any threshold values, which the property tests check over generated windows and thresholds.
//! The readings are compared as `replay --format jsonl` writes them (shares and watts rounded
//! to three decimals), so that `shared/tools/contradictions.py` and the guard agree.

use super::evidence::{pct, round3, Evidence};
use super::roofline::top_unit;
use super::{Class, Signals, Thresholds};

/// Invariant 1: tiny kernels draw under this share of TDP…
pub const TINY_POWER_TDP_MAX: f64 = 0.55;
/// …keep DRAM under this share of its peak…
pub const TINY_DRAM_MAX: f64 = 0.40;
/// …and the tensor pipe under this share of its peak.
pub const TINY_TENSOR_MAX: f64 = 0.30;
/// Invariant 2: SMs at least this active…
pub const FULL_SM_MIN: f64 = 0.90;
/// …with a kernel resident in at least this share of the samples are neither idle nor starved.
pub const FULL_DUTY_MIN: f64 = 0.98;
/// Invariant 3: SMs under this active…
pub const EMPTY_SM_MAX: f64 = 0.20;
/// …at under this share of TDP are neither compute- nor memory-bound.
pub const EMPTY_POWER_TDP_MAX: f64 = 0.30;

/// Which invariant a verdict broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invariant {
    /// `launch_bound` on a GPU that draws power or moves data.
    TinyButDrawing,
    /// `idle`, `idle_held` or `input_starved` with the SMs full the whole window.
    FullButWaiting,
    /// `compute_bound`, `memory_bound` or `latency_bound` with the SMs empty at low power.
    EmptyButBound,
}

impl Invariant {
    pub fn as_str(self) -> &'static str {
        match self {
            Invariant::TinyButDrawing => "tiny_kernels_draw_nothing",
            Invariant::FullButWaiting => "full_sms_do_not_wait",
            Invariant::EmptyButBound => "empty_sms_bind_nothing",
        }
    }
}

/// The readings the invariants read, rounded as the JSON lines write them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Shares 0–1.
    pub sm: Option<f64>,
    pub dram: Option<f64>,
    pub tensor: Option<f64>,
    pub duty: Option<f64>,
    pub power_w: Option<f64>,
    /// The TDP the power is set against (the default limit; else the GPU's peak under work).
    pub tdp_w: Option<f64>,
}

impl Reading {
    pub fn of(s: &Signals, duty: Option<f64>, tdp_w: Option<f64>) -> Reading {
        let share = |v: Option<f64>| v.map(|p| round3(p / 100.0));
        Reading {
            sm: share(s.sm_pct),
            dram: share(s.dram_pct),
            tensor: share(s.tensor_pct),
            duty: duty.map(round3),
            power_w: s.power_w.map(round3),
            tdp_w: tdp_w.filter(|t| *t > 0.0),
        }
    }

    fn power_share(&self) -> Option<f64> {
        Some(self.power_w? / self.tdp_w?)
    }

    /// Whether the GPU draws power or moves data beyond anything tiny kernels do.
    fn drawing(&self) -> bool {
        self.power_share().is_some_and(|p| p >= TINY_POWER_TDP_MAX)
            || self.dram.is_some_and(|d| d >= TINY_DRAM_MAX)
            || self.tensor.is_some_and(|t| t >= TINY_TENSOR_MAX)
    }

    fn full(&self) -> bool {
        self.sm.is_some_and(|s| s >= FULL_SM_MIN) && self.duty.is_some_and(|d| d >= FULL_DUTY_MIN)
    }

    fn empty(&self) -> bool {
        self.sm.is_some_and(|s| s < EMPTY_SM_MAX)
            && self.power_share().is_some_and(|p| p < EMPTY_POWER_TDP_MAX)
    }
}

/// The invariant `class` breaks on these readings, if any.
pub fn violated(class: Class, r: &Reading) -> Option<Invariant> {
    match class {
        Class::LaunchBound if r.drawing() => Some(Invariant::TinyButDrawing),
        Class::Idle | Class::IdleHeld | Class::InputStarved if r.full() => {
            Some(Invariant::FullButWaiting)
        }
        Class::ComputeBound | Class::MemoryBound | Class::LatencyBound if r.empty() => {
            Some(Invariant::EmptyButBound)
        }
        _ => None,
    }
}

/// A re-decided verdict: the class the readings allow, and the evidence that says why.
#[derive(Debug, Clone, PartialEq)]
pub struct Redecided {
    pub class: Class,
    pub broken: Invariant,
    pub evidence: Evidence,
}

/// Re-decides a verdict that breaks an invariant, from the same readings; `None` when it
/// breaks none. The result never breaks one (the property tests hold it to that).
pub fn guard(class: Class, s: &Signals, r: &Reading, th: &Thresholds) -> Option<Redecided> {
    let broken = violated(class, r)?;
    let bound = || -> Class {
        match top_unit(s) {
            // With GPM: the top unit's side of the speed-of-light line.
            Some(top) => top.class(th),
            // Without GPM: the memory controller busy most of the resident time is bandwidth.
            _ => {
                let busy = (s.util_pct.unwrap_or(100.0) / 100.0).clamp(0.5, 1.0);
                if s.util_mem_pct.unwrap_or(0.0) / busy >= th.util_mem_busy_pct {
                    Class::MemoryBound
                } else {
                    Class::ComputeBound
                }
            }
        }
    };
    let quiet = || -> Class {
        let util = s.util_pct.unwrap_or(0.0);
        if util < th.active_util_pct.clamp(0.0, 5.0) {
            if s.nprocs.is_some_and(|n| n < 1.0) {
                Class::Idle
            } else {
                Class::IdleHeld
            }
        } else if s.util_duty.is_none_or(|d| d >= 0.75) {
            Class::LaunchBound
        } else {
            Class::InputStarved
        }
    };
    let first = match broken {
        Invariant::TinyButDrawing | Invariant::FullButWaiting => bound(),
        Invariant::EmptyButBound => quiet(),
    };
    // One step more at most: a class chosen above that breaks another invariant falls back to
    // `input_starved`, which only full SMs forbid, and no window is both full and empty or both
    // full-SM-forbidden and launch-forbidden at once (see the module's docs).
    let decided = match violated(first, r) {
        None => first,
        Some(_) if violated(Class::InputStarved, r).is_none() => Class::InputStarved,
        Some(_) => bound(),
    };
    let sm =
        r.sm.map_or_else(|| "unmeasured".to_string(), |v| pct(v * 100.0).to_string());
    let power = match (r.power_w, r.tdp_w) {
        (Some(p), Some(t)) => format!("{p:.0} W, {} of TDP", pct(p / t * 100.0)),
        (Some(p), None) => format!("{p:.0} W"),
        _ => "power unmeasured".into(),
    };
    let text = match broken {
        Invariant::TinyButDrawing => format!(
            "the rules said {class} (tiny kernels), but the GPU draws {power} (DRAM {}, tensor pipe {}, SMs {sm}): tiny kernels draw a held context's power and move no data, so real kernels run",
            r.dram.map_or_else(|| "unmeasured".into(), |v| pct(v * 100.0).to_string()),
            r.tensor.map_or_else(|| "unmeasured".into(), |v| pct(v * 100.0).to_string()),
        ),
        Invariant::FullButWaiting => format!(
            "the rules said {class}, but the SMs are {sm} active with a kernel resident in {} of the samples: full SMs are not waiting",
            pct(r.duty.unwrap_or(0.0) * 100.0),
        ),
        Invariant::EmptyButBound => format!(
            "the rules said {class}, but the SMs are {sm} active at {power}: empty SMs at low power bind nothing"
        ),
    };
    Some(Redecided {
        class: decided,
        broken,
        evidence: Evidence::new("invariant", 1.0, None, text),
    })
}

#[cfg(test)]
#[path = "invariants_tests.rs"]
mod tests;
