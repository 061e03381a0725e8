//! The report of `gpuslack diagnose`. It opens with the bottom line (how much of the GPU time
//! and energy was slack, what it cost, the top cause and the fix to try first), then per GPU:
//! whose job it was, its health, one row per verdict with its basis named, the evidence of a
//! typical window, and each remedy once at the end. Its length does not grow with the run:
//! repeated phases of a verdict merge into one row; `--detail` brings back a block per phase.
//!
//! The same collected data renders as text ([`HumanReport::render`]), as one JSON document
//! ([`HumanReport::json`], docs/output.schema.json) and as an HTML page with a timeline per GPU
//! ([`HumanReport::html`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::device::DeviceFacts;
use crate::diagnosis::{self, Class};

use super::html::HtmlPage;
use super::time::{utc_date, utc_hms};
use super::timeline::Timeline;
use super::units::{duration, energy, fmt_opt, pct};
use super::words;

mod collect;
mod summary;
mod text;

pub use collect::{pod_label, process_label};
use collect::{ClassTotals, GpuReport, RemedyUse};
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

    /// The page's title, what a shared link shows: the job, where it ran, and when.
    /// "gpuslack diagnose · job pgid:485 · trace samples.csv · 2026-12-01 22:08:04–22:08:46 UTC".
    fn page_title(&self, source: &SourceLabel) -> String {
        let mut parts = vec!["gpuslack diagnose".to_string()];
        let jobs: BTreeSet<&String> = self.gpus.values().flat_map(|g| &g.jobs).collect();
        if !jobs.is_empty() {
            let shown: Vec<&str> = jobs.iter().take(3).map(|j| j.as_str()).collect();
            let more = jobs.len().saturating_sub(3);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            parts.push(format!("job {}{more}", shown.join(", ")));
        }
        parts.push(match source {
            SourceLabel::Live { host } => format!("host {host}"),
            SourceLabel::Trace { name, .. } | SourceLabel::Bundled { name, .. } => {
                let file = std::path::Path::new(name)
                    .file_name()
                    .map_or(name.clone(), |f| f.to_string_lossy().into_owned());
                format!("trace {file}")
            }
        });
        let start = self
            .gpus
            .values()
            .filter_map(|g| g.bands.first().map(|b| b.start))
            .reduce(f64::min);
        let end = self
            .gpus
            .values()
            .filter_map(|g| g.bands.last().map(|b| b.end))
            .reduce(f64::max);
        if let (Some(start), Some(end)) = (start, end) {
            let to = if utc_date(end) == utc_date(start) {
                utc_hms(end)
            } else {
                format!("{} {}", utc_date(end), utc_hms(end))
            };
            parts.push(format!("{} {}–{to} UTC", utc_date(start), utc_hms(start)));
        }
        parts.join(" · ")
    }

    /// The report as a self-contained HTML page: the bottom line, a timeline per GPU, the
    /// tables, the remedies.
    pub fn html(
        &self,
        source: &SourceLabel,
        prices: &Prices,
        facts: impl Fn(u32) -> DeviceFacts,
    ) -> String {
        let mut page = HtmlPage::new(&self.page_title(source));
        let origin = match source {
            SourceLabel::Live { host } => format!("Live GPUs on {host}."),
            SourceLabel::Trace { name, note } => {
                format!("Recorded trace {name}, not this machine's GPUs: {note}")
            }
            SourceLabel::Bundled { name, reason } => {
                format!("Bundled recording {name}, not this machine's GPUs: {reason}")
            }
        };
        page.paragraph("note", &origin);
        let remedies = self.remedies();
        let screen = self.screen(source, prices, &remedies, &facts);
        // A hang first, as on the terminal: the job made no progress at all.
        if let Some(incident) = &screen.incident {
            page.paragraph("incident", &incident.line());
        }
        page.paragraph("bottom", &self.bottom_line(prices).text(prices));
        for line in screen.straggler_lines() {
            page.paragraph("note", &line);
        }
        for line in screen.hardware() {
            page.paragraph("note", &line);
        }
        for change in screen.changes() {
            page.paragraph("change", &change);
        }
        let timelines: BTreeMap<u32, Timeline> = self.timelines(&facts).into_iter().collect();
        for (gpu, r) in &self.gpus {
            let f = facts(*gpu);
            page.heading(&format!(
                "GPU {gpu} · {}{}",
                f.name.as_deref().unwrap_or("unknown model"),
                f.uuid
                    .as_deref()
                    .map_or(String::new(), |u| format!(" · {u}"))
            ));
            if let Some(t) = timelines.get(gpu) {
                page.timeline(t);
            }
            let who: Vec<String> = r
                .owners
                .ranked()
                .iter()
                .map(|(o, (s, _, _))| format!("{o} ({})", duration(*s)))
                .collect();
            page.paragraph(
                "note",
                &format!(
                    "Who: {}. Health: {}.",
                    if who.is_empty() {
                        "not recorded".into()
                    } else {
                        who.join("; ")
                    },
                    r.health.summary()
                ),
            );
            let total = r.seconds();
            let mut rows: Vec<(&Class, &ClassTotals)> = r.by_class.iter().collect();
            rows.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
            let rows: Vec<Vec<String>> = rows
                .iter()
                .map(|(c, t)| {
                    vec![
                        format!("{} ({})", words::label(**c), c.as_str()),
                        t.phases.to_string(),
                        duration(t.seconds),
                        format!("{:.0}%", 100.0 * t.seconds / total.max(1e-9)),
                        energy(t.energy_j),
                        fmt_opt(t.power_w.get(), " W", 0),
                        pct(t.util_pct.get()),
                        pct(t.sm_pct.get()),
                    ]
                })
                .collect();
            page.table(
                &[
                    "verdict", "phases", "time", "share", "energy", "power", "GPU-Util", "SM",
                ],
                &rows,
            );
            // Every phase kept, a one-window one marked as short (a transition, most often),
            // so that each band of the timeline has its row.
            let mut phase_rows: Vec<Vec<String>> = r
                .phases
                .iter()
                .map(|p| {
                    let rep = p.representative();
                    vec![
                        format!(
                            "{} {}–{}",
                            utc_date(p.start),
                            utc_hms(p.start),
                            utc_hms(p.end)
                        ),
                        format!("{} ({})", words::label(p.class), p.class.as_str()),
                        if p.count < 2 {
                            "1 (short)".to_string()
                        } else {
                            p.count.to_string()
                        },
                        fmt_opt(p.mean(|w| w.signals.power_w), " W", 0),
                        pct(p.mean(|w| w.signals.sm_pct)),
                        rep.confidence().to_string(),
                        rep.evidence
                            .first()
                            .map_or(String::new(), |e| e.text.clone()),
                        format!("[{}]", self.remedy_id(&remedies, rep.remedy())),
                    ]
                })
                .collect();
            if r.more_phases > 0 {
                phase_rows.push(vec![
                    format!("… {} more phases", r.more_phases),
                    "counted in the table above, not kept one by one".into(),
                ]);
            }
            page.table(
                &[
                    "phase (UTC)",
                    "verdict",
                    "windows",
                    "power (phase mean)",
                    "SM (phase mean)",
                    "how sure",
                    "evidence (typical window)",
                    "remedy",
                ],
                &phase_rows,
            );
        }
        page.heading("Remedies");
        let rows: Vec<Vec<String>> = remedies
            .iter()
            .map(|r| {
                vec![
                    format!("[{}]", r.id),
                    format!("{} ({})", words::label(r.class), r.class.as_str()),
                    r.text.to_string(),
                ]
            })
            .collect();
        page.table(&["", "verdict", "what to do"], &rows);
        page.finish()
    }
}

/// Energy for people, in kWh (what calibration, Grafana and a power bill use); in J only for

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
