//! The reports for people: text for a terminal (with a strip per rank drawn by
//! `report::timeline`) and, for a job, an HTML page with an SVG timeline per rank
//! (`report::html`). JSON is the reports' own serde form, written by the CLI.

use std::fmt::Write as _;

use super::{ByVerdict, FleetReport, JobReport, Owner, Rank};
use crate::diagnosis::Class;
use crate::report::{Band, HtmlPage, Point, Timeline};

fn money(cost: Option<f64>) -> String {
    cost.map_or_else(|| "-".to_string(), |c| format!("{c:.2}"))
}

fn verdict_table(out: &mut String, by: &ByVerdict) {
    let all: f64 = by.values().map(|v| v.seconds).sum();
    let _ = writeln!(
        out,
        "  {:<16} {:>12} {:>7} {:>12}",
        "verdict", "GPU-hours", "share", "kWh"
    );
    let mut rows: Vec<_> = by.iter().filter(|(_, v)| v.seconds > 0.0).collect();
    rows.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
    for (class, v) in rows {
        let _ = writeln!(
            out,
            "  {:<16} {:>12.3} {:>6.1}% {:>12.3}{}",
            class,
            v.gpu_hours,
            if all > 0.0 {
                v.seconds / all * 100.0
            } else {
                0.0
            },
            v.energy_kwh,
            if v.slack { "  slack" } else { "" }
        );
    }
}

fn owner_table(out: &mut String, title: &str, owners: &[Owner]) {
    let _ = writeln!(out, "\n{title} by wasted GPU-hours:");
    if owners.is_empty() {
        let _ = writeln!(out, "  (none)");
        return;
    }
    let _ = writeln!(
        out,
        "  {:<28} {:>10} {:>10} {:>6} {:>10}  top cause",
        "name", "GPU-h", "slack GPU-h", "slack", "cost"
    );
    for o in owners {
        let _ = writeln!(
            out,
            "  {:<28} {:>10.2} {:>10.2} {:>5.0}% {:>10}  {}",
            o.name,
            o.gpu_hours,
            o.slack_gpu_hours,
            o.slack_share * 100.0,
            money(o.slack_cost),
            o.top_cause.as_deref().unwrap_or("-")
        );
    }
    let mut causes: Vec<&str> = owners
        .iter()
        .filter_map(|o| o.top_cause.as_deref())
        .collect();
    causes.sort_unstable();
    causes.dedup();
    for cause in causes {
        if let Some(c) = Class::from_name(cause) {
            let _ = writeln!(out, "  remedy for {cause}: {}", c.remedy());
        }
    }
}

/// The fleet report as text.
pub fn fleet_text(r: &FleetReport) -> String {
    let mut out = String::new();
    let f = &r.funnel;
    let pct = |h: f64| {
        if f.allocated_gpu_hours > 0.0 {
            h / f.allocated_gpu_hours * 100.0
        } else {
            0.0
        }
    };
    let _ = writeln!(
        out,
        "Fleet report: the last {} from {}",
        super::promql::range(r.since_s),
        r.prometheus
    );
    let _ = writeln!(out, "\nFunnel (GPU-hours):");
    let _ = writeln!(
        out,
        "  observed  {:>12.2}  all GPU time the agents reported",
        f.observed_gpu_hours
    );
    let _ = writeln!(
        out,
        "  allocated {:>12.2}  100%  a job held the GPU (series with gpuslack_job_id)",
        f.allocated_gpu_hours
    );
    let _ = writeln!(
        out,
        "  active    {:>12.2} {:>4.0}%  allocated, not idle or idle_held",
        f.active_gpu_hours,
        pct(f.active_gpu_hours)
    );
    let _ = writeln!(
        out,
        "  effective {:>12.2} {:>4.0}%  allocated, compute_bound or memory_bound",
        f.effective_gpu_hours,
        pct(f.effective_gpu_hours)
    );
    let _ = writeln!(
        out,
        "  wasted    {:>12.2} {:>4.0}%  allocated minus effective; cost {}",
        f.wasted_gpu_hours,
        pct(f.wasted_gpu_hours),
        money(f.wasted_cost)
    );
    let _ = writeln!(out, "\nGPU time per verdict, whole fleet:");
    verdict_table(&mut out, &r.time_by_verdict);
    owner_table(&mut out, "Top jobs", &r.jobs);
    owner_table(&mut out, "Top teams", &r.teams);
    owner_table(&mut out, "Top users", &r.users);
    let _ = writeln!(out, "\nTeams and users from {}.", r.owners_from);
    refused(&mut out, r.values_refused);
    out
}

/// The line saying how many of the query API's values were left out, if any were.
fn refused(out: &mut String, n: usize) {
    if n > 0 {
        let _ = writeln!(out, "\n{}", refused_values(n));
    }
}

/// What a report says of the values it left out: the CLI's warning and the report's own line.
pub fn refused_values(n: usize) -> String {
    format!(
        "{n} values the query API answered were left out: no counter can have them (not a number, infinite, or more than ten million GPUs hold over the range), nor can a timeline point outside the range"
    )
}

/// A rank's verdicts as a `Timeline`, spanning the job's first to last point so that the
/// strips of all ranks line up.
fn timeline(rank: &Rank, span: (f64, f64)) -> Timeline {
    Timeline {
        title: rank.label(),
        bands: rank
            .bands
            .iter()
            .filter_map(|(start, end, class)| {
                Class::from_name(class).map(|class| Band {
                    start: *start,
                    end: *end,
                    class,
                })
            })
            .collect(),
        points: [span.0, span.1]
            .into_iter()
            .map(|t| Point {
                t,
                power_w: None,
                activity_pct: None,
                util_pct: None,
            })
            .collect(),
        power_max_w: None,
        activity_label: "SM active",
    }
}

fn span(r: &JobReport) -> (f64, f64) {
    let start = r
        .ranks
        .iter()
        .flat_map(|k| k.bands.first())
        .map(|b| b.0)
        .fold(f64::MAX, f64::min);
    let end = r
        .ranks
        .iter()
        .flat_map(|k| k.bands.last())
        .map(|b| b.1)
        .fold(f64::MIN, f64::max);
    if start <= end {
        (start, end)
    } else {
        (r.end - r.since_s, r.end)
    }
}

fn job_summary(r: &JobReport) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "Job {}: {} rank(s) on {} node(s), {:.3} GPU-hours; slack {:.3} GPU-hours ({:.0}%), {:.4} kWh, cost {}.",
        r.job,
        r.ranks.len(),
        {
            let mut nodes: Vec<&str> = r.ranks.iter().map(|k| k.node.as_str()).collect();
            nodes.sort_unstable();
            nodes.dedup();
            nodes.len()
        },
        r.gpu_hours,
        r.slack_gpu_hours,
        r.slack_share * 100.0,
        r.slack_kwh,
        money(r.slack_cost)
    );
    if let Some(cause) = &r.top_cause {
        let _ = write!(out, " Top cause: {cause}.");
    }
    out
}

/// One job's report as text, a strip per rank (`colour` for a terminal).
pub fn job_text(r: &JobReport, colour: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", job_summary(r));
    if let Some(f) = &r.finding {
        let _ = writeln!(out, "{}", f.text);
    }
    if let Some(remedy) = &r.remedy {
        let _ = writeln!(out, "Remedy: {remedy}");
    }
    let _ = writeln!(out, "\nGPU time per verdict, all ranks:");
    verdict_table(&mut out, &r.time_by_verdict);
    let s = span(r);
    let _ = writeln!(
        out,
        "\nRanks over time, {} to {} UTC, a cell per {:.0} s:",
        crate::report::utc_hms(s.0),
        crate::report::utc_hms(s.1),
        ((s.1 - s.0) / 60.0).max(r.step_s)
    );
    let width = r.ranks.iter().map(|k| k.label().len()).max().unwrap_or(0);
    let mut legend = Timeline::default();
    for rank in &r.ranks {
        let t = timeline(rank, s);
        legend.bands.extend(t.bands.iter().copied());
        let _ = writeln!(
            out,
            "  {:<width$} {} wait {:>3.0}%  {:>8.0} s",
            rank.label(),
            t.strip(60, colour),
            rank.wait_share * 100.0,
            rank.seconds
        );
    }
    let _ = writeln!(out, "  {:<width$} {}", "", legend.strip_legend(colour));
    refused(&mut out, r.values_refused);
    out
}

/// One job's report as a self-contained HTML page, an SVG timeline per rank.
pub fn job_html(r: &JobReport) -> String {
    let mut page = HtmlPage::new(&format!("gpuslack: job {}", r.job));
    page.paragraph("bottom", &job_summary(r));
    if let Some(f) = &r.finding {
        page.paragraph("", &f.text);
    }
    if let Some(remedy) = &r.remedy {
        page.paragraph("", &format!("Remedy: {remedy}"));
    }
    page.heading("Ranks over time");
    let s = span(r);
    for rank in &r.ranks {
        page.timeline(&timeline(rank, s));
    }
    page.heading("GPU time per rank and verdict");
    let rows: Vec<Vec<String>> = r
        .ranks
        .iter()
        .flat_map(|k| {
            k.time_by_verdict
                .iter()
                .filter(|(_, v)| v.seconds > 0.0)
                .map(|(c, v)| {
                    vec![
                        k.label(),
                        c.clone(),
                        format!("{:.0}", v.seconds),
                        format!("{:.4}", v.energy_kwh),
                    ]
                })
                .collect::<Vec<_>>()
        })
        .collect();
    page.table(&["rank", "verdict", "GPU-seconds", "kWh"], &rows);
    page.finish()
}
