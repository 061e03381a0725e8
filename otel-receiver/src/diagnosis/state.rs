//! What one GPU's diagnosis remembers between windows: whether a spin is in progress, since
//! when, and when collective traffic was last seen. A hang is only a hang in hindsight.

use super::{Signals, Thresholds};
use crate::window::WindowStats;

/// A spin in progress, as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spin {
    None,
    Spinning {
        /// How long the spin has lasted, to the end of this window (s).
        for_s: f64,
        /// Whether it began when collective (NVLink) traffic stopped.
        after_traffic: bool,
    },
}

#[derive(Debug, Clone, Default)]
pub struct GpuState {
    spin_since: Option<f64>,
    last_traffic_end: Option<f64>,
    last_window_end: Option<f64>,
}

impl GpuState {
    /// Updates the state with one window and says whether a spin is in progress.
    pub fn observe(&mut self, w: &WindowStats, s: &Signals, th: &Thresholds) -> Spin {
        let window_s = w.duration_s();
        // A gap in the samples breaks any spin: we cannot vouch for what happened unseen.
        if self
            .last_window_end
            .is_some_and(|end| w.start - end > 2.0 * window_s)
        {
            self.spin_since = None;
        }
        self.last_window_end = Some(w.end);

        let spin = if is_spin(s, th) {
            let since = *self.spin_since.get_or_insert(w.start);
            let after_traffic = self
                .last_traffic_end
                .is_some_and(|t| t >= since - 1.5 * window_s);
            Spin::Spinning {
                for_s: w.end - since,
                after_traffic,
            }
        } else {
            self.spin_since = None;
            Spin::None
        };
        if s.nvlink_mib_s.unwrap_or(0.0) >= th.collective_nvlink_mib_s {
            self.last_traffic_end = Some(w.end);
        }
        spin
    }
}

/// Busy doing nothing: a kernel always resident, a steady slice of the SMs occupied, and no
/// arithmetic, memory or link traffic. Needs GPM; without it a spin cannot be told from work.
fn is_spin(s: &Signals, th: &Thresholds) -> bool {
    let (Some(util), Some(sm), Some(sm_std)) = (s.util_pct, s.sm_pct, s.sm_std_pct) else {
        return false;
    };
    util >= th.spin_util_pct
        && sm >= th.spin_sm_min_pct
        && sm_std <= th.spin_sm_std_pct
        && s.pipe_pct.unwrap_or(0.0) < th.spin_quiet_pct
        && s.dram_pct.unwrap_or(0.0) < th.spin_quiet_pct
        && s.nvlink_mib_s.unwrap_or(0.0) < th.collective_nvlink_mib_s
}
