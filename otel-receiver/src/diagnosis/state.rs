//! What one GPU's diagnosis remembers between windows: a stall in progress (a kernel spinning
//! without progress, or a context held with nothing running), since when, and when this GPU last
//! carried collective traffic or did real work. A hang is only a hang in hindsight, and once
//! it is one it stays one until there is evidence of progress, not until the noise moves.
//!
//! A spin *starts* only on a flat window (a robust spread of SM activity under a point), but
//! it *continues* through any window that shows no progress: one sample that reads 0, or a
//! wobble of the SM level within its tolerance, does not end it. Progress is collective
//! traffic, pipe or DRAM activity (memory-controller activity or power without GPM), the
//! kernel leaving (GPU-Util falling), the process exiting, or a clear change of the SM level.

use super::{PowerPlace, Signals, Thresholds};
use crate::window::WindowStats;

/// A spin in progress, as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spin {
    None,
    Spinning {
        /// How long the spin has lasted, to the end of this window (s).
        for_s: f64,
        /// Whether it began when this GPU's collective (NVLink) traffic stopped.
        after_traffic: bool,
        /// The SM activity (%) it holds, where GPM was sampled.
        sm_level: Option<f64>,
    },
}

/// How a GPU makes no progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallKind {
    /// A kernel stays resident and does nothing.
    Spin,
    /// A process holds a context and runs nothing.
    Held,
}

/// A GPU making no progress, for the rules across GPUs: a hang is a fact about a job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stall {
    pub kind: StallKind,
    /// When the stall began (s).
    pub since: f64,
    /// How long it has lasted, to the end of this window (s).
    pub for_s: f64,
    /// When this GPU last carried collective traffic or did real work before the stall.
    pub stopped_at: Option<f64>,
    /// Whether it stopped carrying collective traffic when the stall began.
    pub after_traffic: bool,
}

#[derive(Debug, Clone, Copy)]
struct Run {
    kind: StallKind,
    since: f64,
    stopped_at: Option<f64>,
    after_traffic: bool,
    sm_level: Option<f64>,
}

#[derive(Debug, Clone, Default)]
pub struct GpuState {
    run: Option<Run>,
    last_traffic_end: Option<f64>,
    last_busy_end: Option<f64>,
    last_window_end: Option<f64>,
}

/// What one window told the state, for this window's rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    pub spin: Spin,
    pub stall: Option<Stall>,
}

impl GpuState {
    /// Updates the state with one window and where its power sits.
    pub fn observe(
        &mut self,
        w: &WindowStats,
        s: &Signals,
        power: &PowerPlace,
        th: &Thresholds,
    ) -> Observation {
        let load = power.load;
        let window_s = w.duration_s();
        // A gap in the samples breaks any stall: we cannot vouch for what happened unseen. So
        // does a step of the clock back.
        if self
            .last_window_end
            .is_some_and(|end| w.start - end > 2.0 * window_s || w.start < end - window_s)
        {
            self.run = None;
        }
        self.last_window_end = Some(w.end);

        let traffic = s.nvlink_mib_s.unwrap_or(0.0) >= th.collective_nvlink_mib_s;
        let continues = self.run.is_some_and(|run| match run.kind {
            StallKind::Spin => spin_continues(&run, s, load, th),
            StallKind::Held => is_held_quiet(s, power, th),
        });
        if !continues {
            let kind = if is_spin_start(s, load, th) {
                Some(StallKind::Spin)
            } else if is_held_quiet(s, power, th) {
                Some(StallKind::Held)
            } else {
                None
            };
            self.run = kind.map(|kind| Run {
                kind,
                since: w.start,
                stopped_at: self.last_busy_end,
                after_traffic: self
                    .last_traffic_end
                    .is_some_and(|t| t >= w.start - 1.5 * window_s),
                sm_level: s.sm_median_pct,
            });
        }
        if traffic {
            self.last_traffic_end = Some(w.end);
        }
        if traffic || is_busy(s, load) {
            self.last_busy_end = Some(w.end);
        }
        let Some(run) = self.run else {
            return Observation {
                spin: Spin::None,
                stall: None,
            };
        };
        let for_s = w.end - run.since;
        let spin = match run.kind {
            StallKind::Spin => Spin::Spinning {
                for_s,
                after_traffic: run.after_traffic,
                sm_level: run.sm_level,
            },
            StallKind::Held => Spin::None,
        };
        Observation {
            spin,
            stall: Some(Stall {
                kind: run.kind,
                since: run.since,
                for_s,
                stopped_at: run.stopped_at,
                after_traffic: run.after_traffic,
            }),
        }
    }
}

fn links_quiet(s: &Signals, th: &Thresholds) -> bool {
    s.nvlink_mib_s.unwrap_or(0.0) < th.collective_nvlink_mib_s
        && s.pcie_mib_s.unwrap_or(0.0) < th.transfer_pcie_mib_s
}

/// Real work or communication: what a stalled job did last.
fn is_busy(s: &Signals, load: Option<f64>) -> bool {
    if s.has_gpm() {
        s.sm_median_pct.unwrap_or(0.0) >= 20.0
            || s.pipe_pct.unwrap_or(0.0) >= 10.0
            || s.dram_pct.unwrap_or(0.0) >= 10.0
    } else {
        load.is_some_and(|l| l >= 0.15) && s.util_pct.unwrap_or(0.0) >= 50.0
    }
}

/// Busy doing nothing: a kernel always resident, a steady slice of the SMs occupied, and no
/// arithmetic, memory or link traffic. Without GPM: a kernel always resident that reaches no
/// device memory and draws no power beyond the context.
fn is_spin_start(s: &Signals, load: Option<f64>, th: &Thresholds) -> bool {
    let util_ok = s.util_median_pct.is_some_and(|u| u >= th.spin_util_pct);
    if !util_ok || !links_quiet(s, th) {
        return false;
    }
    if s.has_gpm() {
        s.sm_spread_pct
            .is_some_and(|sd| sd <= th.spin_sm_spread_pct)
            && s.pipe_pct.unwrap_or(0.0) < th.spin_quiet_pct
            && s.dram_pct.unwrap_or(0.0) < th.spin_quiet_pct
    } else {
        let mem_quiet = s.util_mem_pct.map(|m| m < th.util_mem_quiet_pct);
        let power_quiet = load.map(|l| l < th.idle_power_load);
        // Some evidence that nothing is drawn, and none that something is.
        (mem_quiet.is_some() || power_quiet.is_some())
            && mem_quiet != Some(false)
            && power_quiet != Some(false)
    }
}

/// Whether a spin in progress shows no progress in this window.
fn spin_continues(run: &Run, s: &Signals, load: Option<f64>, th: &Thresholds) -> bool {
    let kernel_stays = s.util_median_pct.is_some_and(|u| u >= 50.0);
    let process_stays = s.nprocs.is_none_or(|n| n >= 1.0);
    if !(kernel_stays && process_stays && links_quiet(s, th)) {
        return false;
    }
    if s.has_gpm() {
        let level_held = match (run.sm_level, s.sm_median_pct) {
            (Some(level), Some(now)) => {
                (now - level).abs() <= th.spin_level_points.max(th.spin_level_share * level)
            }
            _ => false,
        };
        level_held
            && s.pipe_pct.unwrap_or(0.0) < th.spin_quiet_pct
            && s.dram_pct.unwrap_or(0.0) < th.spin_quiet_pct
    } else {
        s.util_mem_pct.is_none_or(|m| m < th.util_mem_quiet_pct)
            && load.is_none_or(|l| l < th.transfer_power_load_max)
    }
}

/// A context held and nothing running: no kernel resident, the SMs empty, no traffic, and a
/// process (or, without a process list, the power of one) holding the GPU.
fn is_held_quiet(s: &Signals, power: &PowerPlace, th: &Thresholds) -> bool {
    let held = match s.nprocs {
        Some(n) => n >= 1.0,
        None => power.held == Some(true),
    };
    held && s.util_pct.unwrap_or(0.0) < th.active_util_pct
        && s.sm_pct.unwrap_or(0.0) < th.active_sm_pct
        && power.load.is_none_or(|l| l < th.quiet_power_load)
        && links_quiet(s, th)
}
