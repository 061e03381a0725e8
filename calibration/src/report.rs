//! The calibration report: a terminal summary, and a self-contained HTML page with SVG plots —
//! power, GPU-Util and SM activity over time with the workload bands, and each workload's power
//! against the limit — that a person can open anywhere.

use std::fmt::Write as _;

use gpuslack_receiver::WindowReport;

use crate::phases::PhaseSpan;
use crate::profile::GpuProfile;
use crate::validate::Validation;

fn w(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1} W"))
}

/// What the NVML-only path cannot tell apart, said wherever it is the one that decided.
pub const NVML_PATH_LIMITS: &str = "without GPM, tiny kernels and a kernel spinning on a few SMs look alike (power at a held context's level), as do arithmetic and bandwidth below the memory controller's 60% line; host↔device copies need NVML's PCIe counters or are told from tiny kernels by the memory controller alone";

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
    let got = |p: &crate::validate::PhaseCheck| {
        p.got
            .iter()
            .map(|(c, n)| format!("{c}×{n}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
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
            p.expected.as_str(),
            got(p)
        );
    }
    if !v.gpm || nvml_only.is_some() {
        let _ = writeln!(out, "  the NVML-only path: {NVML_PATH_LIMITS}");
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

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 180.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One time series plot with the workload bands behind it.
fn series_svg(
    title: &str,
    unit_max: f64,
    points: &[(f64, f64)],
    phases: &[PhaseSpan],
    t0: f64,
    t1: f64,
    color: &str,
) -> String {
    let x = |t: f64| 40.0 + (t - t0) / (t1 - t0).max(1e-9) * (WIDTH - 50.0);
    let y = |v: f64| 10.0 + (1.0 - (v / unit_max).clamp(0.0, 1.0)) * (HEIGHT - 30.0);
    let mut svg = format!("<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\"><title>{}</title>", esc(title));
    for (i, p) in phases.iter().enumerate() {
        let fill = if i % 2 == 0 { "#eef3fb" } else { "#f7f1e8" };
        let _ = write!(
            svg,
            "<rect x=\"{:.1}\" y=\"10\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" fill=\"#555\">{}</text>",
            x(p.t0),
            (x(p.t1) - x(p.t0)).max(1.0),
            HEIGHT - 30.0,
            x(p.t0) + 2.0,
            HEIGHT - 8.0,
            esc(&p.name)
        );
    }
    let path: Vec<String> = points
        .iter()
        .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
        .collect();
    let _ = write!(
        svg,
        "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/><text x=\"4\" y=\"18\" font-size=\"11\">{}</text><text x=\"4\" y=\"{:.0}\" font-size=\"9\">0</text><text x=\"4\" y=\"30\" font-size=\"9\">{unit_max:.0}</text></svg>",
        path.join(" "),
        esc(title),
        HEIGHT - 22.0
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
            esc(name),
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

pub fn html(
    profile: &GpuProfile,
    validation: &Validation,
    nvml_only: Option<&Validation>,
    windows: &[WindowReport],
    phases: &[PhaseSpan],
) -> String {
    let t0 = windows.first().map_or(0.0, |w| w.stats.start);
    let t1 = windows.last().map_or(1.0, |w| w.stats.end);
    let limit = profile.power_limit_w.or(profile.tdp_w).unwrap_or(700.0);
    let mid = |w: &WindowReport| w.stats.midpoint();
    let power: Vec<(f64, f64)> = windows
        .iter()
        .filter_map(|w| w.signals.power_w.map(|p| (mid(w), p)))
        .collect();
    let util: Vec<(f64, f64)> = windows
        .iter()
        .filter_map(|w| w.signals.util_pct.map(|p| (mid(w), p)))
        .collect();
    let sm: Vec<(f64, f64)> = windows
        .iter()
        .filter_map(|w| w.signals.sm_pct.map(|p| (mid(w), p)))
        .collect();
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>gpuslack calibration</title><style>body{{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}}pre{{background:#f5f5f5;padding:1em;overflow-x:auto}}</style></head><body><h1>gpuslack calibration</h1><pre>{}</pre><h2>Power (W)</h2>{}<h2>GPU-Util (%) — the number that lies</h2>{}<h2>SM activity (%) — the number that does not</h2>{}<h2>Power per workload</h2>{}</body></html>\n",
        esc(&terminal(profile, validation, nvml_only)),
        series_svg("power, W", limit, &power, phases, t0, t1, "#c0392b"),
        series_svg("GPU-Util, %", 100.0, &util, phases, t0, t1, "#7f8c8d"),
        series_svg("SM activity, %", 100.0, &sm, phases, t0, t1, "#27ae60"),
        bars_svg(profile)
    )
}
