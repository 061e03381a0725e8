//! The report of `gpuslack diagnose`: per GPU, its phases (runs of windows with one verdict),
//! each with the article's diagnostic matrix, the verdict, the evidence and the remedy.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::device::DeviceFacts;
use crate::diagnosis::{self, Class, WindowReport};
use crate::efficiency::SLACK_BELOW;
use crate::sample::Metric;
use crate::thinned::Thinned;

use super::time::utc_hms;

/// Where the numbers came from; a recording is always labelled as one.
#[derive(Debug, Clone)]
pub enum SourceLabel {
    Live { host: String },
    Recorded { name: String, note: String },
}

/// Windows kept per phase for its figures: evenly spread over the phase, however long.
const KEPT_PER_PHASE: usize = 16;

/// Phases shown per GPU; later ones count in the totals and the timeline's tail only, so that
/// a trace that changes verdict every window cannot grow the report without bound.
const MAX_PHASES: usize = 200;

/// A run of consecutive windows of one GPU with the same class: its span, its count and energy
/// exactly, its figures from an evenly thinned subset of its windows.
#[derive(Debug)]
struct Phase {
    class: Class,
    start: f64,
    end: f64,
    count: usize,
    windows: Thinned<WindowReport>,
}

impl Phase {
    fn new(report: WindowReport) -> Phase {
        let mut windows = Thinned::new(KEPT_PER_PHASE);
        let (start, end) = (report.stats.start, report.stats.end);
        let class = report.class;
        windows.push(report);
        Phase {
            class,
            start,
            end,
            count: 1,
            windows,
        }
    }

    fn add(&mut self, report: WindowReport) {
        self.end = report.stats.end;
        self.count += 1;
        self.windows.push(report);
    }

    fn kept(&self) -> &[WindowReport] {
        self.windows.values()
    }

    fn start(&self) -> f64 {
        self.start
    }
    fn end(&self) -> f64 {
        self.end
    }
    fn mean(&self, f: impl Fn(&WindowReport) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = self.kept().iter().filter_map(f).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }
    fn max(&self, f: impl Fn(&WindowReport) -> Option<f64>) -> Option<f64> {
        self.kept().iter().filter_map(f).reduce(f64::max)
    }
    /// The window in the middle of the phase: settled, away from the transitions.
    fn representative(&self) -> &WindowReport {
        let kept = self.kept();
        &kept[kept.len() / 2]
    }
}

pub use crate::diagnosis::Spent;

/// One GPU's phases and totals.
#[derive(Debug, Default)]
struct GpuReport {
    phases: Vec<Phase>,
    /// Phases past [`MAX_PHASES`], counted only.
    more_phases: usize,
    /// The class of the last window added.
    last_class: Option<Class>,
    by_class: BTreeMap<Class, Spent>,
}

/// Collects reports as they stream, then renders them. Memory is bounded by the number of
/// GPUs, not the length of the run: each phase keeps a thinned handful of windows, and at most
/// `MAX_PHASES` phases are kept per GPU.
#[derive(Debug, Default)]
pub struct HumanReport {
    gpus: BTreeMap<u32, GpuReport>,
}

fn fmt_opt(v: Option<f64>, unit: &str, decimals: usize) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.decimals$}{unit}"))
}

/// The evidence's own formats, with "n/a" for what was not sampled.
fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), diagnosis::pct)
}

fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), diagnosis::rate)
}

/// Wraps `text` at `width` columns, indenting continuation lines by `indent` spaces.
fn wrap(text: &str, width: usize, indent: usize) -> String {
    let mut out = String::new();
    let mut col = indent;
    for word in text.split_whitespace() {
        if col > indent && col + 1 + word.chars().count() > width {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            col = indent;
        } else if col > indent {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += word.chars().count();
    }
    out
}

const LABEL: usize = 15;

impl HumanReport {
    pub fn add(&mut self, report: WindowReport) {
        let gpu = self.gpus.entry(report.stats.gpu).or_default();
        gpu.by_class.entry(report.class).or_default().add(&report);
        let same = gpu.last_class == Some(report.class);
        gpu.last_class = Some(report.class);
        let full = gpu.phases.len() >= MAX_PHASES;
        match gpu.phases.last_mut() {
            Some(phase) if same && gpu.more_phases == 0 => phase.add(report),
            _ if full => {
                if !same {
                    gpu.more_phases += 1;
                }
            }
            _ => gpu.phases.push(Phase::new(report)),
        }
    }

    /// Keeps only the GPUs in `keep` (those a watched command used).
    pub fn retain_gpus(&mut self, keep: &std::collections::BTreeSet<u32>) {
        self.gpus.retain(|gpu, _| keep.contains(gpu));
    }

    /// The GPUs reported on.
    pub fn gpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.gpus.keys().copied()
    }

    /// The report as one JSON document: per GPU, time and energy per verdict and each phase
    /// with its figures, evidence and remedy.
    pub fn json(&self, facts: impl Fn(u32) -> DeviceFacts) -> serde_json::Value {
        let gpus: Vec<serde_json::Value> = self
            .gpus
            .iter()
            .map(|(gpu, r)| {
                let f = facts(*gpu);
                let total: f64 = r.by_class.values().map(|s| s.seconds).sum();
                let by_verdict: serde_json::Map<String, serde_json::Value> = r
                    .by_class
                    .iter()
                    .map(|(c, s)| {
                        (
                            c.as_str().to_string(),
                            serde_json::json!({
                                "seconds": s.seconds,
                                "energy_j": s.energy_j.round(),
                                "share": if total > 0.0 { s.seconds / total } else { 0.0 },
                            }),
                        )
                    })
                    .collect();
                let phases: Vec<serde_json::Value> = r
                    .phases
                    .iter()
                    .map(|p| {
                        let rep = p.representative();
                        serde_json::json!({
                            "start": p.start(),
                            "end": p.end(),
                            "class": p.class.as_str(),
                            "windows": p.count,
                            "power_w": p.mean(|w| w.signals.power_w),
                            "util_gpu": p.mean(|w| w.signals.util_pct.map(|u| u / 100.0)),
                            "sm_active": p.mean(|w| w.signals.sm_pct.map(|u| u / 100.0)),
                            "rule": rep.rule,
                            "evidence": rep.evidence.iter().map(|e| e.text.as_str()).collect::<Vec<_>>(),
                            "remedy": rep.remedy(),
                        })
                    })
                    .collect();
                serde_json::json!({
                    "gpu": gpu,
                    "name": f.name,
                    "uuid": f.uuid,
                    "time_by_verdict": by_verdict,
                    "phases": phases,
                    "more_phases": r.more_phases,
                })
            })
            .collect();
        serde_json::json!({ "gpus": gpus })
    }

    /// Time and energy per verdict, per GPU.
    pub fn spent(&self) -> BTreeMap<u32, BTreeMap<Class, Spent>> {
        self.gpus
            .iter()
            .map(|(gpu, r)| (*gpu, r.by_class.clone()))
            .collect()
    }

    pub fn render(
        &self,
        out: &mut impl Write,
        source: &SourceLabel,
        facts: impl Fn(u32) -> DeviceFacts,
    ) -> io::Result<()> {
        match source {
            SourceLabel::Live { host } => writeln!(out, "gpuslack diagnose — live GPUs on {host}")?,
            SourceLabel::Recorded { name, note } => {
                writeln!(
                    out,
                    "gpuslack diagnose — RECORDED TRACE, not this machine's GPUs"
                )?;
                writeln!(out, "  trace: {name}")?;
                writeln!(out, "  {}", wrap(note, 92, 2))?;
            }
        }
        if self.gpus.is_empty() {
            writeln!(out, "\nNo samples: nothing to diagnose.")?;
        }
        for (gpu, report) in &self.gpus {
            self.render_gpu(out, *gpu, report, &facts(*gpu))?;
        }
        Ok(())
    }

    fn render_gpu(
        &self,
        out: &mut impl Write,
        gpu: u32,
        report: &GpuReport,
        facts: &DeviceFacts,
    ) -> io::Result<()> {
        let phases = &report.phases;
        let tdp = phases.iter().flat_map(|p| p.kept()).find_map(|w| w.tdp_w);
        writeln!(out)?;
        let name = facts.name.as_deref().unwrap_or("unknown model");
        match facts.mig_parent {
            Some(parent) => writeln!(
                out,
                "GPU {gpu} · {name} · MIG instance of GPU {parent}: its power, clocks and temperature are GPU {parent}'s"
            )?,
            None => writeln!(out, "GPU {gpu} · {name} · TDP {}", fmt_opt(tdp, " W", 0))?,
        }
        writeln!(
            out,
            "  time by verdict: {}",
            cost_of_slack(&report.by_class)
        )?;
        let mut timeline: Vec<String> = phases
            .iter()
            .map(|p| format!("{}–{} {}", utc_hms(p.start()), utc_hms(p.end()), p.class))
            .collect();
        if report.more_phases > 0 {
            timeline.push(format!(
                "… {} more phases (in the totals above)",
                report.more_phases
            ));
        }
        writeln!(
            out,
            "  timeline (UTC):  {}",
            wrap(&timeline.join(" │ "), 100, 19)
        )?;
        // Single-window phases between longer ones are transitions: timeline only.
        let detailed: Vec<&Phase> = if phases.iter().any(|p| p.count >= 2) {
            phases.iter().filter(|p| p.count >= 2).collect()
        } else {
            phases.iter().collect()
        };
        for phase in detailed {
            render_phase(out, phase, facts)?;
        }
        Ok(())
    }
}

/// "input_starved 41% (2 min 10 s, 0.12 kWh), compute_bound 30% (…)": each verdict's share of
/// the GPU's time, its time and its energy, largest first.
pub fn cost_of_slack(by_class: &BTreeMap<Class, Spent>) -> String {
    let total: f64 = by_class.values().map(|s| s.seconds).sum();
    let mut shares: Vec<(&Class, &Spent)> = by_class.iter().collect();
    shares.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
    let parts: Vec<String> = shares
        .iter()
        .map(|(c, s)| {
            format!(
                "{c} {:.0}% ({}, {})",
                100.0 * s.seconds / total.max(1e-9),
                duration(s.seconds),
                energy(s.energy_j)
            )
        })
        .collect();
    parts.join(", ")
}

/// "45 s", "3 min 20 s", "2 h 05 min".
pub fn duration(seconds: f64) -> String {
    let s = seconds.round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

/// Energy for people: J, kJ, or kWh.
pub fn energy(joules: f64) -> String {
    if joules >= 360_000.0 {
        format!("{:.2} kWh", joules / 3.6e6)
    } else if joules >= 10_000.0 {
        format!("{:.0} kJ", joules / 1000.0)
    } else {
        format!("{joules:.0} J")
    }
}

fn row(out: &mut impl Write, label: &str, value: String, flag: Option<String>) -> io::Result<()> {
    match flag {
        Some(flag) => writeln!(out, "    {label:<LABEL$}{value:<44} {flag}"),
        None => writeln!(out, "    {label:<LABEL$}{value}"),
    }
}

fn render_phase(out: &mut impl Write, phase: &Phase, facts: &DeviceFacts) -> io::Result<()> {
    let stat = |m: Metric| move |w: &WindowReport| w.stats.mean(m);
    let power = phase.mean(|w| w.signals.power_w);
    let tdp = phase.mean(|w| w.tdp_w);
    let util = phase.mean(|w| w.signals.util_pct);
    let sm = phase.mean(|w| w.signals.sm_pct);
    let eff = phase.mean(|w| w.efficiency);
    writeln!(out)?;
    writeln!(
        out,
        "  ▸ {}–{} UTC ({:.0} s)  {}",
        utc_hms(phase.start()),
        utc_hms(phase.end()),
        phase.end() - phase.start(),
        phase.class
    )?;

    let p_tdp = power.zip(tdp).map(|(p, t)| p / t);
    row(
        out,
        "power",
        format!(
            "{} of {} TDP ({})",
            fmt_opt(power, " W", 0),
            fmt_opt(tdp, " W", 0),
            fmt_opt(p_tdp, "", 2)
        ),
        p_tdp
            .filter(|f| *f < SLACK_BELOW)
            .map(|_| "✗ under 60% of TDP".into()),
    )?;
    let overstated = util.zip(sm).filter(|(u, s)| *u >= 20.0 && *s < u / 2.0);
    row(
        out,
        "GPU-Util / SM",
        format!("GPU-Util {}  ·  SM active {}", pct(util), pct(sm)),
        overstated.map(|(u, s)| format!("✗ GPU-Util overstates the work {:.0}×", u / s.max(0.1))),
    )?;
    row(
        out,
        "pipes / DRAM",
        format!(
            "tensor {}  fp32 {}  fp16 {}  ·  DRAM {}",
            pct(phase.mean(|w| w.signals.tensor_pct)),
            pct(phase.mean(|w| w.signals.fp32_pct)),
            pct(phase.mean(|w| w.signals.fp16_pct)),
            pct(phase.mean(|w| w.signals.dram_pct))
        ),
        None,
    )?;
    let mem_total = phase
        .mean(stat(Metric::MemTotalBytes))
        .or(facts.mem_total_bytes);
    let swing = phase
        .max(|w| w.stats.mem_swing_bytes_per_s)
        .zip(mem_total)
        .map(|(s, t)| 100.0 * s / t);
    let gib = |b: f64| b / f64::from(1u32 << 30);
    let used = phase.mean(|w| w.signals.mem_used_bytes).map(gib);
    let memory = match (used, swing) {
        (None, _) => format!(
            "use not sampled; {} total",
            fmt_opt(mem_total.map(gib), " GiB", 0)
        ),
        (Some(_), None) => format!("{} used", fmt_opt(used, " GiB", 1)),
        (Some(_), Some(swing)) => format!(
            "{} used of {}, swings up to {}/s",
            fmt_opt(used, " GiB", 1),
            fmt_opt(mem_total.map(gib), " GiB", 0),
            pct(Some(swing))
        ),
    };
    row(
        out,
        "memory",
        memory,
        swing
            .filter(|s| *s > 30.0)
            .map(|_| "✗ swings over 30%/s".into()),
    )?;
    let temp = phase.max(|w| w.stats.max(Metric::TempC));
    let slowdown = phase
        .mean(stat(Metric::TempSlowdownC))
        .or(facts.temp_slowdown_c);
    let temp_flag = match (temp, slowdown) {
        (Some(t), Some(s)) if t >= s - 5.0 => Some("✗ near thermal slowdown".to_string()),
        (Some(t), _) if t > 85.0 => Some("✗ over 85 °C".to_string()),
        (Some(t), _)
            if t < 40.0
                && p_tdp.is_some_and(|f| f < 0.3)
                && !matches!(phase.class, Class::Idle | Class::IdleHeld) =>
        {
            Some("cool and low power: compute has stopped".to_string())
        }
        _ => None,
    };
    row(
        out,
        "temperature",
        format!(
            "max {} (slowdown at {})",
            fmt_opt(temp, " °C", 0),
            fmt_opt(slowdown, " °C", 0)
        ),
        temp_flag,
    )?;
    row(
        out,
        "PCIe / NVLink",
        format!(
            "PCIe rx {} tx {}  ·  NVLink rx {} tx {}",
            rate(phase.mean(|w| w.signals.pcie_rx_mib_s)),
            rate(phase.mean(|w| w.signals.pcie_tx_mib_s)),
            rate(phase.mean(|w| w.signals.nvlink_rx_mib_s)),
            rate(phase.mean(|w| w.signals.nvlink_tx_mib_s))
        ),
        None,
    )?;
    let rep = phase.representative();
    let throttle = if rep.throttle.is_empty() {
        "none".to_string()
    } else {
        rep.throttle.join(", ")
    };
    row(
        out,
        "clocks",
        format!(
            "SM {}  ·  P{}  ·  throttle: {throttle}",
            fmt_opt(phase.mean(stat(Metric::SmMhz)), " MHz", 0),
            fmt_opt(phase.max(|w| w.stats.max(Metric::Pstate)), "", 0),
        ),
        None,
    )?;
    row(
        out,
        "efficiency",
        format!("{} = power/TDP × SM activity", fmt_opt(eff, "", 2)),
        eff.filter(|e| *e < SLACK_BELOW && !phase.class.is_healthy())
            .map(|_| "✗ under 0.6: slacking".into()),
    )?;
    if let Some(cal) = phase.mean(|w| w.calibrated_efficiency) {
        let expected = phase.mean(|w| w.expected_power_w);
        row(
            out,
            "calibrated",
            format!(
                "{cal:.2} of the way from idle to compute power; {} expected",
                fmt_opt(expected, " W", 0)
            ),
            rep.profile_origin.as_ref().map(|o| format!("({o})")),
        )?;
    }
    writeln!(
        out,
        "    {:<LABEL$}{}  (rule: {})",
        "verdict",
        phase.class.as_str().to_uppercase(),
        rep.rule
    )?;
    for e in &rep.evidence {
        writeln!(out, "    {:<LABEL$}· {}", "", wrap(&e.text, 100, LABEL + 6))?;
    }
    writeln!(
        out,
        "    {:<LABEL$}{}",
        "remedy",
        wrap(rep.remedy(), 100, LABEL + 4)
    )?;
    if !rep.missing.is_empty() {
        writeln!(
            out,
            "    {:<LABEL$}{}",
            "not measured",
            wrap(&rep.missing.join("; "), 100, LABEL + 4)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_width_with_indent() {
        assert_eq!(wrap("aaa bbb ccc", 9, 2), "aaa bbb\n  ccc");
    }

    #[test]
    fn time_and_energy_read_like_people_write_them() {
        assert_eq!(duration(45.0), "45 s");
        assert_eq!(duration(200.0), "3 min 20 s");
        assert_eq!(duration(7500.0), "2 h 05 min");
        assert_eq!(energy(500.0), "500 J");
        assert_eq!(energy(50_000.0), "50 kJ");
        assert_eq!(energy(8.28e6), "2.30 kWh");
        let by_class: BTreeMap<Class, Spent> = [
            (
                Class::InputStarved,
                Spent {
                    seconds: 41.0,
                    energy_j: 8.28e6,
                },
            ),
            (
                Class::ComputeBound,
                Spent {
                    seconds: 59.0,
                    energy_j: 40_000.0,
                },
            ),
        ]
        .into();
        assert_eq!(
            cost_of_slack(&by_class),
            "compute_bound 59% (59 s, 40 kJ), input_starved 41% (41 s, 2.30 kWh)"
        );
    }
}
