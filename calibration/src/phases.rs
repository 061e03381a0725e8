//! A calibration session is a list of phases (what ran when); each phase's samples become one
//! set of means. Phases are trimmed at both ends so ramps and tails do not skew the baseline.

use std::collections::BTreeMap;
use std::path::Path;

use gpuslack_receiver::files::{self, Input};
use gpuslack_receiver::sample::{Metric, Sample};
use gpuslack_receiver::window::ClockReasonCounts;
use serde::{Deserialize, Serialize};

/// One workload's time span (`phases.json`: name, t0, t1; unix seconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseSpan {
    pub name: String,
    pub t0: f64,
    pub t1: f64,
    /// GPUs the phase applies to; all when absent.
    #[serde(default)]
    pub gpus: Option<Vec<u32>>,
}

#[derive(Debug, thiserror::Error)]
pub enum PhasesError {
    /// Unreadable, not a regular file, or past its cap (the error names the file and cap).
    #[error(transparent)]
    Read(#[from] files::ReadError),
    #[error("{path}: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: phase {index} ({name}): ends before it starts")]
    Backwards {
        path: String,
        index: usize,
        name: String,
    },
}

pub fn load_phases(path: &Path) -> Result<Vec<PhaseSpan>, PhasesError> {
    let shown = path.display().to_string();
    let text = files::read_text(path, Input::Phases)?;
    let phases: Vec<PhaseSpan> =
        serde_json::from_str(&text).map_err(|source| PhasesError::Parse {
            path: shown.clone(),
            source,
        })?;
    if let Some((index, p)) = phases.iter().enumerate().find(|(_, p)| p.t1 <= p.t0) {
        return Err(PhasesError::Backwards {
            path: shown,
            index,
            name: p.name.clone(),
        });
    }
    Ok(phases)
}

/// Seconds left out at the start of a phase (power and clocks ramp, the 1 s power average
/// lags) and at its end.
pub const TRIM_START_S: f64 = 1.5;
pub const TRIM_END_S: f64 = 0.5;

/// What one GPU did during one phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseStats {
    pub name: String,
    pub gpu: u32,
    pub t0: f64,
    pub t1: f64,
    pub samples: u64,
    /// Mean power: from the energy counter over the trimmed phase where it was sampled at both
    /// ends, else the mean of the power readings.
    pub power_w: Option<f64>,
    pub util_pct: Option<f64>,
    pub sm_pct: Option<f64>,
    pub tensor_pct: Option<f64>,
    pub fp32_pct: Option<f64>,
    pub dram_pct: Option<f64>,
    pub pcie_rx_mib_s: Option<f64>,
    pub sm_mhz: Option<f64>,
    pub temp_c_max: Option<f64>,
    /// Clock-event reasons active in at least a quarter of the samples (GPU idle left out).
    pub throttle: Vec<String>,
}

#[derive(Default)]
struct Acc {
    n: u64,
    sums: BTreeMap<Metric, (f64, u64)>,
    temp_max: Option<f64>,
    energy: Option<((f64, f64), (f64, f64))>,
    reasons: ClockReasonCounts,
}

impl Acc {
    fn add(&mut self, s: &Sample) {
        self.n += 1;
        for m in [
            Metric::PowerMw,
            Metric::UtilGpu,
            Metric::GpmSm,
            Metric::GpmTensor,
            Metric::GpmFp32,
            Metric::GpmDram,
            Metric::GpmPcieRx,
            Metric::SmMhz,
        ] {
            if let Some(v) = s.get(m) {
                let e = self.sums.entry(m).or_default();
                e.0 += v;
                e.1 += 1;
            }
        }
        if let Some(t) = s.get(Metric::TempC) {
            self.temp_max = Some(self.temp_max.map_or(t, |m: f64| m.max(t)));
        }
        if let Some(e) = s.get(Metric::EnergyMj) {
            self.energy = Some(match self.energy {
                None => ((s.t, e), (s.t, e)),
                Some((first, _)) => (first, (s.t, e)),
            });
        }
        if let Some(mask) = s.clk_reasons {
            self.reasons.add(mask);
        }
    }

    fn mean(&self, m: Metric) -> Option<f64> {
        self.sums
            .get(&m)
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| s / *n as f64)
    }
}

/// Means per phase and GPU, streaming over the samples once. Phases may overlap the gaps
/// between them; samples outside every trimmed phase are ignored.
pub fn phase_stats(samples: impl Iterator<Item = Sample>, phases: &[PhaseSpan]) -> Vec<PhaseStats> {
    let mut accs: BTreeMap<(usize, u32), Acc> = BTreeMap::new();
    for s in samples {
        for (i, p) in phases.iter().enumerate() {
            let applies = p.gpus.as_ref().is_none_or(|g| g.contains(&s.gpu));
            if applies && s.t >= p.t0 + TRIM_START_S && s.t <= p.t1 - TRIM_END_S {
                accs.entry((i, s.gpu)).or_default().add(&s);
            }
        }
    }
    accs.into_iter()
        .map(|((i, gpu), a)| {
            let p = &phases[i];
            let from_energy = a.energy.and_then(|((t0, e0), (t1, e1))| {
                (t1 - t0 >= 1.0 && e1 >= e0).then(|| (e1 - e0) / (t1 - t0) / 1000.0)
            });
            let throttle = a
                .reasons
                .throttling(0.25)
                .into_iter()
                .map(String::from)
                .collect();
            PhaseStats {
                name: p.name.clone(),
                gpu,
                t0: p.t0,
                t1: p.t1,
                samples: a.n,
                power_w: from_energy.or(a.mean(Metric::PowerMw).map(|mw| mw / 1000.0)),
                util_pct: a.mean(Metric::UtilGpu),
                sm_pct: a.mean(Metric::GpmSm),
                tensor_pct: a.mean(Metric::GpmTensor),
                fp32_pct: a.mean(Metric::GpmFp32),
                dram_pct: a.mean(Metric::GpmDram),
                pcie_rx_mib_s: a.mean(Metric::GpmPcieRx),
                sm_mhz: a.mean(Metric::SmMhz),
                temp_c_max: a.temp_max,
                throttle,
            }
        })
        .collect()
}
