//! The report of `gpuslack diagnose`. It opens with the bottom line (how much of the GPU time
//! and energy was slack, what it cost, the top cause and the fix to try first), then per GPU:
//! whose job it was, its health, one row per verdict with its basis named, the evidence of a
//! typical window, and each remedy once at the end. Its length does not grow with the run:
//! repeated phases of a verdict merge into one row; `--detail` brings back a block per phase.
//!
//! The same collected data renders as text ([`HumanReport::render`]), as one JSON document
//! ([`HumanReport::json`], docs/output.schema.json) and as an HTML page with a timeline per GPU
//! ([`HumanReport::html`]).

use std::collections::BTreeMap;

use crate::device::DeviceFacts;
use crate::diagnosis;

use super::words;

mod collect;
mod html;
mod summary;
mod text;

pub use collect::{pod_label, process_label};
use collect::{GpuReport, RemedyUse};
pub use summary::{is_slack, BottomLine, Remedy};

/// The version of `diagnose --format json`'s document (docs/OUTPUT.md). Fields are only ever
/// added; a rename or a type change would change it.
pub const REPORT_SCHEMA: &str = "gpuslack.diagnose.v1";

/// Where the numbers came from; a recording is always labelled as one, and the bundled one as
/// bundled, so that no script takes it for this host's GPUs.
#[derive(Debug, Clone)]
pub enum SourceLabel {
    /// This host's GPUs, sampled now.
    Live {
        /// The host, or the job watched on it.
        host: String,
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
            SourceLabel::Live { host } => format!("sampled live on {host}"),
            SourceLabel::Trace { note, .. } => note.clone(),
            SourceLabel::Bundled { reason, .. } => reason.clone(),
        }
    }

    fn name(&self) -> &str {
        match self {
            SourceLabel::Live { host } => host,
            SourceLabel::Trace { name, .. } | SourceLabel::Bundled { name, .. } => name,
        }
    }

    /// The label with its text escaped for a terminal (a trace's file name, a watched
    /// command's arguments are anyone's): what every report form is given.
    pub fn shown(&self) -> SourceLabel {
        let m = |t: &str| crate::text::message(t).into_owned();
        match self {
            SourceLabel::Live { host } => SourceLabel::Live { host: m(host) },
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

pub use crate::diagnosis::Spent;

/// Collects reports as they stream, then renders them. Memory is bounded by the number of
/// GPUs, not the length of the run: each phase keeps a thinned handful of windows, at most
/// 200 phases are kept per GPU, and the curves are thinned.
#[derive(Debug, Default)]
pub struct HumanReport {
    gpus: BTreeMap<u32, GpuReport>,
    remedies: BTreeMap<&'static str, RemedyUse>,
}

impl HumanReport {
    /// The report as one JSON document (schema [`REPORT_SCHEMA`], docs/output.schema.json).
    pub fn json(
        &self,
        source: &SourceLabel,
        prices: &Prices,
        facts: impl Fn(u32) -> DeviceFacts,
    ) -> serde_json::Value {
        use serde_json::json;
        let remedies = self.remedies();
        let bottom = self.bottom_line(prices);
        let gpus: Vec<serde_json::Value> = self
            .gpus
            .iter()
            .map(|(gpu, r)| {
                let f = facts(*gpu);
                let total = r.seconds();
                let by_verdict: serde_json::Map<String, serde_json::Value> = r
                    .by_class
                    .iter()
                    .map(|(c, t)| {
                        (
                            c.as_str().to_string(),
                            json!({
                                "seconds": t.seconds,
                                "energy_j": t.energy_j.round(),
                                "energy_kwh": diagnosis::round3(t.energy_j / 3.6e3) / 1000.0,
                                "share": if total > 0.0 { t.seconds / total } else { 0.0 },
                                "phases": t.phases,
                                "slack": is_slack(*c),
                                "power_w": t.power_w.get().map(diagnosis::round3),
                                "util_gpu": t.util_pct.get().map(|u| diagnosis::round3(u / 100.0)),
                                "sm_active": t.sm_pct.get().map(|u| diagnosis::round3(u / 100.0)),
                                "dram": t.dram_pct.get().map(|u| diagnosis::round3(u / 100.0)),
                                "sm_occupancy": t.occupancy_pct.get().map(|u| diagnosis::round3(u / 100.0)),
                            }),
                        )
                    })
                    .collect();
                let phases: Vec<serde_json::Value> = r
                    .phases
                    .iter()
                    .map(|p| {
                        let rep = p.representative();
                        json!({
                            "start": p.start,
                            "end": p.end,
                            "class": p.class.as_str(),
                            "windows": p.count,
                            "energy_j": p.energy_j.round(),
                            "basis": "phase_mean",
                            "power_w": p.mean(|w| w.signals.power_w),
                            "util_gpu": p.mean(|w| w.signals.util_pct.map(|u| u / 100.0)),
                            "sm_active": p.mean(|w| w.signals.sm_pct.map(|u| u / 100.0)),
                            "evidence_window": {"start": rep.stats.start, "end": rep.stats.end},
                            "rule": rep.rule,
                            "evidence": rep.evidence.iter().map(|e| e.text.as_str()).collect::<Vec<_>>(),
                            "headroom": rep.headroom.map(|h| json!({
                                "resource": h.resource.as_str(),
                                "fraction": h.fraction,
                                "text": h.text(),
                            })),
                            "remedy": rep.remedy(),
                            "remedy_id": self.remedy_id(&remedies, rep.remedy()),
                            "owners": p.owners.ranked().iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                let owners: Vec<serde_json::Value> = r
                    .owners
                    .ranked()
                    .iter()
                    .map(|(o, (s, classes, identity))| {
                        let mut owner = json!({
                            "owner": o,
                            "seconds": s,
                            "classes": classes.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                        });
                        if let (Some(owner), Some(identity)) =
                            (owner.as_object_mut(), identity.as_object())
                        {
                            owner.extend(identity.clone());
                        }
                        owner
                    })
                    .collect();
                json!({
                    "gpu": gpu,
                    "name": f.name,
                    "model": f.name,
                    "uuid": f.uuid,
                    "serial": f.serial,
                    "pci_bus_id": f.pci_bus_id,
                    "vbios": f.vbios,
                    "tdp_w": r.tdp_w.or(f.tdp_w),
                    "mig_parent": f.mig_parent,
                    "spec": f.spec,
                    "seconds": total,
                    "jobs": r.jobs,
                    "owners": owners,
                    "health": {
                        "sampled": r.health.sampled(),
                        "summary": r.health.summary(),
                        "findings": r.health.findings(),
                    },
                    "time_by_verdict": by_verdict,
                    "phases": phases,
                    "more_phases": r.more_phases,
                })
            })
            .collect();
        let remedies_json: Vec<serde_json::Value> = remedies
            .iter()
            .map(|r| {
                json!({
                    "id": r.id,
                    "class": r.class.as_str(),
                    "fix": r.is_fix,
                    "seconds": r.seconds,
                    "gpus": r.gpus,
                    "text": r.text,
                    "change": words::change(r.advice, r.class),
                    "won_back_seconds": r.won_s,
                    "severity": r.severity.as_str(),
                })
            })
            .collect();
        json!({
            "schema": REPORT_SCHEMA,
            "source": {
                "kind": source.kind(),
                "name": source.name(),
                "reason": source.reason(),
            },
            "bottom_line": {
                "text": bottom.text(prices),
                "seconds": bottom.seconds,
                "slack_seconds": bottom.slack_seconds,
                "slack_share": bottom.slack_share(),
                "slack_energy_share": bottom.slack_energy_share(),
                "slack_gpu_hours": bottom.slack_gpu_hours(),
                "slack_kwh": bottom.slack_kwh(),
                "slack_cost": bottom.cost,
                "top_cause": bottom.top_cause.map(|(c, _)| c.as_str()),
                "first_fix": bottom.first_fix.as_ref().map(|r| r.id),
            },
            "remedies": remedies_json,
            "gpus": gpus,
        })
    }
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
