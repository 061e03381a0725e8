//! The calibration report: a terminal summary, and a self-contained HTML page that a person can
//! open anywhere: per GPU, the baselines, workloads, validation and cost-of-slack tables, and
//! SVG plots of power, GPU-Util and SM activity over time (a time axis, the workloads as
//! labelled bands) and of each workload's power against the limit; then the GPU-against-GPU
//! and repeatability comparisons.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use gpuslack_receiver::diagnosis::Spent;
use gpuslack_receiver::Class;

use crate::compare::Comparison;
use crate::phases::PhaseSpan;
use crate::profile::GpuProfile;
use crate::session::PlotPoint;
use crate::validate::{is_latency_phase, PhaseCheck, Validation};

fn w(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1} W"))
}

/// What the NVML-only path cannot tell apart, said wherever it is the one that decided.
pub const NVML_PATH_LIMITS: &str = "without GPM, tiny kernels and a kernel spinning on a few SMs look alike (power at a held context's level), as do arithmetic and bandwidth below the memory controller's 60% line; host↔device copies need NVML's PCIe counters or are told from tiny kernels by the memory controller alone";

/// What NVML alone can and cannot say of a latency-bound workload, said beside its phases when
/// the NVML-only path judged them.
pub const NVML_LATENCY_LIMITS: &str = "latency-bound work (every SM waiting on scattered or dependent loads) is beyond what NVML can measure: it sees GPU-Util at 100%, power well above a held context yet short of the limit, and a memory controller neither idle nor saturated. From power alone the verdict leans to latency_bound, at low confidence and naming compute_bound: NVML cannot see that every SM is occupied while no pipe works, so it cannot tell these phases from arithmetic that draws the same power (a register-only FP32 chain), nor a random gather from its sorted fix when their power is alike. Only GPM's SM, pipe and DRAM activity name the case";

/// The verdicts a workload's windows got, with how many of each: `launch_bound×10 idle×1`.
fn got(check: &PhaseCheck) -> String {
    check
        .got
        .iter()
        .map(|(class, n)| format!("{class}×{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the NVML-only path (the GPU's own, or the one run beside GPM) judged a latency phase.
fn nvml_judged_latency(v: &Validation, nvml_only: Option<&Validation>) -> bool {
    let judged = if v.gpm { nvml_only } else { Some(v) };
    judged.is_some_and(|j| j.phases.iter().any(|p| is_latency_phase(&p.phase)))
}

fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// The validation of the path the GPU's samples allow and, for a GPU with GPM, of the
/// NVML-only path on the same windows, phase by phase.
fn write_validation(out: &mut String, v: &Validation, nvml_only: Option<&Validation>) {
    let path = if v.gpm {
        "GPM"
    } else {
        "NVML only: this GPU has no GPM"
    };
    let _ = writeln!(
        out,
        "  validation ({path}): {}/{} windows classified as their workload",
        v.right(),
        v.windows()
    );
    if let Some(n) = nvml_only {
        let _ = writeln!(
            out,
            "  validation without GPM (as a GPU without it, or --no-gpm, would judge): {}/{}",
            n.right(),
            n.windows()
        );
    }
    for p in &v.phases {
        let other = nvml_only
            .and_then(|n| {
                n.phases
                    .iter()
                    .find(|q| q.phase == p.phase && q.gpu == p.gpu)
            })
            .map(|q| format!("   without GPM: {}", got(q)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "    {:<16} expected {:<14} got {}{other}",
            p.phase,
            expected(p),
            got(p)
        );
    }
    if !v.gpm || nvml_only.is_some() {
        let _ = writeln!(out, "  the NVML-only path: {NVML_PATH_LIMITS}");
        if nvml_judged_latency(v, nvml_only) {
            let _ = writeln!(out, "  {NVML_LATENCY_LIMITS}");
        }
    }
}

/// The phase's right class, and the other side where its unit sits on the line.
fn expected(p: &PhaseCheck) -> String {
    match p.also {
        Some(also) => format!("{} or {}", p.expected.as_str(), also.as_str()),
        None => p.expected.as_str().to_string(),
    }
}

pub fn terminal(
    profile: &GpuProfile,
    validation: &Validation,
    nvml_only: Option<&Validation>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {} · driver {} · limit {} · {} · {}",
        profile.model.as_deref().unwrap_or("GPU"),
        profile.uuid.as_deref().unwrap_or("(no UUID)"),
        profile.driver.as_deref().unwrap_or("?"),
        w(profile.power_limit_w.or(profile.tdp_w)),
        profile.date,
        profile.source
    );
    let limit = profile.power_limit_w.or(profile.tdp_w);
    let _ = writeln!(
        out,
        "  {:<18} {:>10} {:>8}",
        "baseline", "power", "of limit"
    );
    for (name, value) in profile.baselines() {
        let share = value
            .zip(limit)
            .map_or_else(|| "-".into(), |(v, l)| format!("{:.0}%", 100.0 * v / l));
        let _ = writeln!(out, "  {name:<18} {:>10} {share:>8}", w(value));
    }
    let _ = writeln!(out, "  workloads:");
    for s in &profile.workloads {
        let _ = writeln!(
            out,
            "    {:<16} {:>9}  GPU-Util {:>5}  SM {:>6}  SM clock {:>6}  max {:>5}  {}",
            s.name,
            w(s.power_w),
            s.util_pct.map_or("-".into(), |v| format!("{v:.0}%")),
            s.sm_pct.map_or("-".into(), |v| format!("{v:.1}%")),
            s.sm_mhz.map_or("-".into(), |v| format!("{v:.0}")),
            s.temp_c_max.map_or("-".into(), |v| format!("{v:.0}°C")),
            if s.throttle.is_empty() {
                String::new()
            } else {
                format!("throttle: {}", s.throttle.join(","))
            }
        );
    }
    write_validation(&mut out, validation, nvml_only);
    let _ = writeln!(out, "  the article's 0.6 rule on this GPU:");
    for line in validation.rule_statement() {
        let _ = writeln!(out, "    {line}");
    }
    out
}

/// Time and energy per verdict over the session, for the terminal.
pub fn spent_terminal(spent: &BTreeMap<Class, Spent>) -> String {
    let total: f64 = spent.values().map(|s| s.seconds).sum();
    let mut out = String::from("  time and energy per verdict (the cost of slack):\n");
    for (class, s) in spent.iter().filter(|(_, s)| s.seconds > 0.0) {
        let _ = writeln!(
            out,
            "    {:<16} {:>6.0} s {:>4.0}%  {:>8.1} Wh",
            class.as_str(),
            s.seconds,
            100.0 * s.seconds / total.max(1e-9),
            s.energy_j / 3600.0
        );
    }
    out
}

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 200.0;
/// Left margin (the value labels) and the plot's bottom edge (above the time axis).
const LEFT: f64 = 44.0;
const BOTTOM: f64 = 160.0;
const TOP: f64 = 30.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A workload's name as a person reads it: `membound_copy` → "membound copy".
fn readable(name: &str) -> String {
    name.replace('_', " ")
}

/// Time-axis ticks over `span_s` seconds: a round step giving at most ten of them.
fn tick_step_s(span_s: f64) -> f64 {
    [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
    ]
    .into_iter()
    .find(|step| span_s / step <= 10.0)
    .unwrap_or(7200.0)
}

fn tick_label(s: f64, step: f64) -> String {
    if step >= 60.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{s:.0} s")
    }
}

/// One time series plot: the workloads as labelled bands behind it (labels on two staggered
/// rows so that short neighbours do not overwrite each other, the full name as a tooltip), a
/// time axis in seconds from the session's start, and the value axis.
fn series_svg(
    title: &str,
    unit_max: f64,
    points: &[(f64, f64)],
    phases: &[PhaseSpan],
    (t0, t1): (f64, f64),
    color: &str,
) -> String {
    let span = (t1 - t0).max(1e-9);
    let x = |t: f64| LEFT + (t - t0) / span * (WIDTH - LEFT - 10.0);
    let y = |v: f64| TOP + (1.0 - (v / unit_max).clamp(0.0, 1.0)) * (BOTTOM - TOP);
    let mut svg = format!(
        "<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\"><title>{}</title>",
        esc(title)
    );
    for (i, p) in phases.iter().filter(|p| p.t1 > t0 && p.t0 < t1).enumerate() {
        let fill = if i % 2 == 0 { "#eef3fb" } else { "#f7f1e8" };
        let label_y = if i % 2 == 0 { 12.0 } else { 24.0 };
        let _ = write!(
            svg,
            "<g><title>{name}: {:.0}–{:.0} s</title><rect x=\"{:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\"/><text x=\"{:.1}\" y=\"{label_y}\" font-size=\"10\" fill=\"#444\">{name}</text></g>",
            p.t0 - t0,
            p.t1 - t0,
            x(p.t0.max(t0)),
            (x(p.t1.min(t1)) - x(p.t0.max(t0))).max(1.0),
            BOTTOM - TOP,
            x(p.t0.max(t0)) + 2.0,
            name = esc(&readable(&p.name)),
        );
    }
    let step = tick_step_s(span);
    let mut tick = 0.0;
    while tick <= span + 1e-9 {
        let tx = x(t0 + tick);
        let _ = write!(
            svg,
            "<line x1=\"{tx:.1}\" x2=\"{tx:.1}\" y1=\"{BOTTOM}\" y2=\"{:.0}\" stroke=\"#888\"/><text x=\"{tx:.1}\" y=\"{:.0}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            BOTTOM + 4.0,
            BOTTOM + 16.0,
            tick_label(tick, step)
        );
        tick += step;
    }
    let path: Vec<String> = points
        .iter()
        .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
        .collect();
    let _ = write!(
        svg,
        "<line x1=\"{LEFT}\" x2=\"{:.0}\" y1=\"{BOTTOM}\" y2=\"{BOTTOM}\" stroke=\"#888\"/><polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/><text x=\"{:.0}\" y=\"{:.0}\" font-size=\"10\" text-anchor=\"end\">time since the session started</text><text x=\"4\" y=\"{:.0}\" font-size=\"10\">0</text><text x=\"4\" y=\"{:.0}\" font-size=\"10\">{unit_max:.0}</text></svg>",
        WIDTH - 10.0,
        path.join(" "),
        WIDTH - 10.0,
        HEIGHT - 2.0,
        BOTTOM,
        TOP + 8.0,
    );
    svg
}

/// Each workload's power as a bar against the limit.
fn bars_svg(profile: &GpuProfile) -> String {
    let limit = profile.power_limit_w.or(profile.tdp_w).unwrap_or(1.0);
    let rows: Vec<(&str, f64)> = profile
        .workloads
        .iter()
        .filter_map(|s| s.power_w.map(|p| (s.name.as_str(), p)))
        .collect();
    let h = 24.0 * rows.len() as f64 + 20.0;
    let mut svg = format!("<svg viewBox=\"0 0 {WIDTH} {h}\" width=\"{WIDTH}\" height=\"{h}\" role=\"img\"><title>Power per workload against the limit</title>");
    let scale = (WIDTH - 260.0) / limit;
    for (i, (name, p)) in rows.iter().enumerate() {
        let y = 10.0 + 24.0 * i as f64;
        let _ = write!(
            svg,
            "<text x=\"4\" y=\"{:.0}\" font-size=\"11\">{}</text><rect x=\"140\" y=\"{y:.0}\" width=\"{:.1}\" height=\"16\" fill=\"#4a78c2\"/><text x=\"{:.1}\" y=\"{:.0}\" font-size=\"11\">{p:.0} W ({:.0}%)</text>",
            y + 12.0,
            esc(&readable(name)),
            p * scale,
            146.0 + p * scale,
            y + 12.0,
            100.0 * p / limit
        );
    }
    let _ = write!(
        svg,
        "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"4\" y2=\"{1:.0}\" stroke=\"#c0392b\" stroke-dasharray=\"4 3\"/><text x=\"{2:.1}\" y=\"{1:.0}\" font-size=\"10\" fill=\"#c0392b\">limit {limit:.0} W</text></svg>",
        140.0 + limit * scale,
        h - 2.0,
        144.0 + limit * scale - 60.0
    );
    svg
}

/// An HTML table: a header row, then the rows; every cell escaped.
fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table><tr>");
    for h in head {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", esc(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

fn pct(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}%"))
}

/// One GPU's part of the report.
pub struct GpuSection<'a> {
    pub profile: &'a GpuProfile,
    pub validation: &'a Validation,
    /// The same windows judged without GPM, for a GPU that has it.
    pub nvml_only: Option<&'a Validation>,
    pub plots: &'a [PlotPoint],
    /// Time and energy per verdict over the session.
    pub spent: Option<&'a BTreeMap<Class, Spent>>,
}

fn section_html(s: &GpuSection, phases: &[PhaseSpan]) -> String {
    let p = s.profile;
    // The workloads this GPU ran: in a session of several GPUs each runs its own in turn.
    let gpu = p.gpu_index().unwrap_or(0);
    let phases: Vec<PhaseSpan> = phases
        .iter()
        .filter(|ph| ph.gpus.as_ref().is_none_or(|g| g.contains(&gpu)))
        .cloned()
        .collect();
    let phases = phases.as_slice();
    let limit = p.power_limit_w.or(p.tdp_w);
    let mut out = String::new();
    let _ = write!(
        out,
        "<h2>GPU {} · {}</h2>",
        p.gpu_index().unwrap_or(0),
        esc(p.model.as_deref().unwrap_or("GPU"))
    );
    out.push_str(&table(
        &["UUID", "driver", "power limit", "calibrated", "from"],
        &[vec![
            p.uuid.clone().unwrap_or_else(|| "(none)".into()),
            p.driver.clone().unwrap_or_else(|| "?".into()),
            w(limit),
            p.date.clone(),
            p.source.clone(),
        ]],
    ));
    out.push_str("<h3>Baselines</h3>");
    let baselines: Vec<Vec<String>> = p
        .baselines()
        .into_iter()
        .map(|(name, value)| {
            let share = value.zip(limit).map(|(v, l)| 100.0 * v / l);
            vec![name.to_string(), w(value), pct(share, 0)]
        })
        .collect();
    out.push_str(&table(&["baseline", "power", "of limit"], &baselines));
    out.push_str("<h3>Workloads</h3>");
    let workloads: Vec<Vec<String>> = p
        .workloads
        .iter()
        .map(|x| {
            vec![
                readable(&x.name),
                w(x.power_w),
                pct(x.util_pct, 0),
                pct(x.sm_pct, 1),
                x.sm_mhz.map_or("-".into(), |v| format!("{v:.0} MHz")),
                x.temp_c_max.map_or("-".into(), |v| format!("{v:.0} °C")),
                x.throttle.join(", "),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "workload",
            "power",
            "GPU-Util",
            "SM activity",
            "SM clock",
            "max temperature",
            "throttle",
        ],
        &workloads,
    ));
    let v = s.validation;
    let _ = write!(
        out,
        "<h3>Validation: the diagnosis on the session's own windows</h3><p>{}/{} windows classified as their workload ({}).{}</p>",
        v.right(),
        v.windows(),
        if v.gpm { "with GPM" } else { "NVML only: this GPU has no GPM" },
        s.nvml_only.map_or(String::new(), |n| format!(
            " Without GPM, as a GPU without it or <code>--no-gpm</code> would judge: {}/{}.",
            n.right(),
            n.windows()
        ))
    );
    let checks: Vec<Vec<String>> = v
        .phases
        .iter()
        .map(|c| {
            let other = s
                .nvml_only
                .and_then(|n| {
                    n.phases
                        .iter()
                        .find(|q| q.phase == c.phase && q.gpu == c.gpu)
                })
                .map(got)
                .unwrap_or_else(|| "-".into());
            vec![readable(&c.phase), expected(c), got(c), other]
        })
        .collect();
    out.push_str(&table(
        &["workload", "expected", "got", "got without GPM"],
        &checks,
    ));
    if !v.gpm || s.nvml_only.is_some() {
        let _ = write!(out, "<p>The NVML-only path: {}.</p>", esc(NVML_PATH_LIMITS));
        if nvml_judged_latency(v, s.nvml_only) {
            let _ = write!(out, "<p>{}.</p>", esc(&upper_first(NVML_LATENCY_LIMITS)));
        }
    }
    out.push_str("<h3>The article's 0.6 rule on this GPU</h3><ul>");
    for line in v.rule_statement() {
        let _ = write!(out, "<li>{}</li>", esc(&line));
    }
    out.push_str("</ul>");
    if let Some(spent) = s.spent {
        let total_s: f64 = spent.values().map(|x| x.seconds).sum();
        let rows: Vec<Vec<String>> = spent
            .iter()
            .filter(|(_, x)| x.seconds > 0.0)
            .map(|(class, x)| {
                vec![
                    class.as_str().into(),
                    format!("{:.0} s", x.seconds),
                    pct(Some(100.0 * x.seconds / total_s.max(1e-9)), 0),
                    format!("{:.1} Wh", x.energy_j / 3600.0),
                ]
            })
            .collect();
        out.push_str("<h3>Time and energy per verdict over the session (the cost of slack)</h3>");
        out.push_str(&table(&["verdict", "GPU time", "share", "energy"], &rows));
    }
    let t0 = s.plots.first().map_or(0.0, |x| x.t - 1.0);
    let t1 = s.plots.last().map_or(1.0, |x| x.t + 1.0);
    let series = |f: fn(&PlotPoint) -> Option<f64>| -> Vec<(f64, f64)> {
        s.plots
            .iter()
            .filter_map(|x| f(x).map(|v| (x.t, v)))
            .collect()
    };
    let _ = write!(
        out,
        "<h3>Power (W)</h3>{}<h3>GPU-Util (%): the number that lies</h3>{}<h3>SM activity (%): the number that does not</h3>{}<h3>Power per workload</h3>{}",
        series_svg("power, W", limit.unwrap_or(700.0), &series(|x| x.power_w), phases, (t0, t1), "#c0392b"),
        series_svg("GPU-Util, %", 100.0, &series(|x| x.util_pct), phases, (t0, t1), "#7f8c8d"),
        series_svg("SM activity, %", 100.0, &series(|x| x.sm_pct), phases, (t0, t1), "#27ae60"),
        bars_svg(p)
    );
    out
}

fn comparison_html(c: &Comparison) -> String {
    let rows: Vec<Vec<String>> = c
        .differences
        .iter()
        .map(|d| {
            vec![
                d.baseline.to_string(),
                format!("{:.1} W", d.first_w),
                format!("{:.1} W", d.second_w),
                format!("{:+.1}%", d.change_pct()),
            ]
        })
        .collect();
    let mut out = format!("<h3>{}</h3>", esc(&c.title));
    out.push_str(&table(
        &[
            "baseline",
            c.labels.0.as_str(),
            c.labels.1.as_str(),
            "change",
        ],
        &rows,
    ));
    if let Some(verdict) = c.verdict() {
        let _ = write!(out, "<p><strong>{}</strong></p>", esc(&verdict));
    }
    out
}

/// The whole report: one page, a section per GPU, then the comparisons (GPU against GPU, and
/// each GPU against its earlier calibration).
pub fn page(sections: &[GpuSection], phases: &[PhaseSpan], comparisons: &[Comparison]) -> String {
    let mut out = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>gpuslack calibration</title><style>body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}table{border-collapse:collapse;margin:.5em 0 1em}th,td{border:1px solid #ccc;padding:.2em .6em;text-align:left}th{background:#f0f0f0}</style></head><body><h1>gpuslack calibration</h1>",
    );
    for s in sections {
        out.push_str(&section_html(s, phases));
    }
    if !comparisons.is_empty() {
        out.push_str("<h2>Comparisons</h2>");
        for c in comparisons {
            out.push_str(&comparison_html(c));
        }
    }
    out.push_str("</body></html>\n");
    out
}
