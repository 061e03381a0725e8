//! The report of `gpuslack diagnose`. It opens with the bottom line (how much of the GPU time
//! and energy was slack, what it cost, the top cause and the fix to try first), then per GPU:
//! whose job it was, its health, one row per verdict with its basis named, the evidence of a
//! typical window, and each remedy once at the end. Its length does not grow with the run:
//! repeated phases of a verdict merge into one row; `--detail` brings back a block per phase.
//!
//! The same collected data renders as text ([`HumanReport::render`]), as one JSON document
//! ([`HumanReport::json`], docs/output.schema.json) and as an HTML page with a timeline per GPU
//! ([`HumanReport::html`]).
//!
//! Here: the report itself, where its numbers came from, the prices and the text's options.
//! `collect` takes the windows in; `summary` ranks the remedies and sums the bottom line that
//! every form shows; `text`, `json` and `html` each render one form.

use std::collections::BTreeMap;

mod collect;
mod html;
mod json;
mod summary;
mod text;

pub use crate::diagnosis::Spent;
pub use collect::{pod_label, process_label};
use collect::{GpuReport, RemedyUse};
pub use json::{DiagnoseDocument, REPORT_SCHEMA};
pub use summary::{is_slack, BottomLine, Remedy};

/// Where the numbers came from; a recording is always labelled as one, and the bundled one as
/// bundled, so that no script takes it for this host's GPUs.
#[derive(Debug, Clone)]
pub enum SourceLabel {
    /// This host's GPUs, sampled now.
    Live {
        /// The host.
        host: String,
        /// The job watched on it (`diagnose -- COMMAND`): "the job `python3 train.py` (2 min
        /// on GPU 0)".
        job: Option<String>,
    },
    /// A trace file given with `--trace`.
    Trace {
        /// Its path.
        name: String,
        /// What the reader should keep in mind about it.
        note: String,
    },
    /// The recording shipped in the binary, shown when the host has no GPU.
    Bundled {
        /// What it recorded.
        name: String,
        /// Why it is shown instead of this host's GPUs.
        reason: String,
    },
}

impl SourceLabel {
    /// `live`, `trace` or `bundled`: the JSON's `source.kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceLabel::Live { .. } => "live",
            SourceLabel::Trace { .. } => "trace",
            SourceLabel::Bundled { .. } => "bundled",
        }
    }

    /// Why the report shows this source.
    pub fn reason(&self) -> String {
        match self {
            SourceLabel::Live { .. } => format!("sampled live on {}", self.name()),
            SourceLabel::Trace { note, .. } => note.clone(),
            SourceLabel::Bundled { reason, .. } => reason.clone(),
        }
    }

    /// What the report is of: the host (and the job watched on it), or the trace.
    pub fn name(&self) -> String {
        match self {
            SourceLabel::Live { host, job: None } => host.clone(),
            SourceLabel::Live {
                host,
                job: Some(job),
            } => format!("{host}, {job}"),
            SourceLabel::Trace { name, .. } | SourceLabel::Bundled { name, .. } => name.clone(),
        }
    }

    /// The label with its text escaped for a terminal (a trace's file name, a watched
    /// command's arguments are anyone's): what every report form is given.
    pub fn shown(&self) -> SourceLabel {
        let m = |t: &str| crate::text::message(t).into_owned();
        match self {
            SourceLabel::Live { host, job } => SourceLabel::Live {
                host: m(host),
                job: job.as_deref().map(m),
            },
            SourceLabel::Trace { name, note } => SourceLabel::Trace {
                name: m(name),
                note: m(note),
            },
            SourceLabel::Bundled { name, reason } => SourceLabel::Bundled {
                name: m(name),
                reason: m(reason),
            },
        }
    }
}

/// Prices for the cost of slack, in the user's currency.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prices {
    /// Price of one GPU-hour (`--price-gpu-hour`).
    pub per_gpu_hour: Option<f64>,
    /// Price of one kWh (`--price-kwh`).
    pub per_kwh: Option<f64>,
}

impl Prices {
    /// The cost of `gpu_hours` and `kwh`, when any price is given.
    pub fn cost(&self, gpu_hours: f64, kwh: f64) -> Option<f64> {
        if self.per_gpu_hour.is_none() && self.per_kwh.is_none() {
            return None;
        }
        Some(self.per_gpu_hour.unwrap_or(0.0) * gpu_hours + self.per_kwh.unwrap_or(0.0) * kwh)
    }
}

/// How to render the text report.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderOptions {
    /// A block per phase, as before the bottom line existed.
    pub detail: bool,
    /// The rule ids beside the verdicts (`-v`).
    pub verbose: bool,
    /// A coloured strip per GPU (stdout is a terminal).
    pub colour_strip: bool,
    /// Prices for the cost of slack in the bottom line.
    pub prices: Prices,
}

/// Collects reports as they stream, then renders them. Memory is bounded by the number of
/// GPUs, not the length of the run: each phase keeps a thinned handful of windows, at most
/// 200 phases are kept per GPU, and the curves are thinned.
#[derive(Debug, Default)]
pub struct HumanReport {
    gpus: BTreeMap<u32, GpuReport>,
    remedies: BTreeMap<&'static str, RemedyUse>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_makes_a_cost_and_none_makes_none() {
        assert_eq!(Prices::default().cost(2.0, 3.0), None);
        let prices = Prices {
            per_gpu_hour: Some(2.5),
            per_kwh: Some(0.2),
        };
        assert_eq!(prices.cost(2.0, 3.0), Some(5.6));
    }
}
