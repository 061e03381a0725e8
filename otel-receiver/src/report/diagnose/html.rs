//! The report as one self-contained page, filled into [`HtmlPage`] (report/html.rs, the one
//! home of the page's markup and style): a title that names the job, where and when it ran;
//! the hang, the bottom line and the changes; then per GPU its timeline, who held it, a row per
//! verdict and one per phase; the remedies last.

use std::collections::{BTreeMap, BTreeSet};

use crate::device::DeviceFacts;
use crate::diagnosis::Class;
use crate::report::html::HtmlPage;
use crate::report::time::{utc_date, utc_hms};
use crate::report::timeline::Timeline;
use crate::report::units::{duration, energy, fmt_opt, pct};
use crate::report::words;

use super::collect::ClassTotals;
use super::{HumanReport, Prices, SourceLabel};

impl HumanReport {
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
            SourceLabel::Live { host, .. } => format!("host {host}"),
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
            SourceLabel::Live { .. } => format!("Live GPUs on {}.", source.name()),
            SourceLabel::Trace { name, note } => {
                format!("Recorded trace {name}, not this machine's GPUs: {note}")
            }
            SourceLabel::Bundled { name, reason } => {
                format!("Bundled recording {name}, not this machine's GPUs: {reason}")
            }
        };
        page.paragraph("note", &origin);
        let summary = self.summary(prices);
        let screen = self.screen(source, &summary, prices, &facts);
        // A hang first, as on the terminal: the job made no progress at all.
        if let Some(incident) = &screen.incident {
            page.paragraph("incident", &incident.line());
        }
        page.paragraph("bottom", &summary.bottom.text(prices));
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
                        format!("[{}]", summary.remedy_id(rep.remedy())),
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
        let rows: Vec<Vec<String>> = summary
            .remedies
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
