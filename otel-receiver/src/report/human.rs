//! The report of `gpuslack diagnose`: per GPU, its phases (runs of windows with one verdict),
//! each with the article's diagnostic matrix, the verdict, the evidence and the remedy.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::device::DeviceFacts;
use crate::diagnosis::{self, Class, WindowReport};
use crate::efficiency::SLACK_BELOW;
use crate::sample::Metric;

use super::time::utc_hms;

/// Where the numbers came from; a recording is always labelled as one.
#[derive(Debug, Clone)]
pub enum SourceLabel {
    Live { host: String },
    Recorded { name: String, note: String },
}

/// A run of consecutive windows of one GPU with the same class.
#[derive(Debug)]
struct Phase {
    class: Class,
    windows: Vec<WindowReport>,
}

impl Phase {
    fn start(&self) -> f64 {
        self.windows.first().map_or(0.0, |w| w.stats.start)
    }
    fn end(&self) -> f64 {
        self.windows.last().map_or(0.0, |w| w.stats.end)
    }
    fn mean(&self, f: impl Fn(&WindowReport) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = self.windows.iter().filter_map(f).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }
    fn max(&self, f: impl Fn(&WindowReport) -> Option<f64>) -> Option<f64> {
        self.windows.iter().filter_map(f).reduce(f64::max)
    }
    /// The window in the middle of the phase: settled, away from the transitions.
    fn representative(&self) -> &WindowReport {
        &self.windows[self.windows.len() / 2]
    }
}

/// Collects reports, then renders them. Holds every window of the run: meant for the seconds
/// or minutes of a `diagnose`, not for an agent that runs for days.
#[derive(Debug, Default)]
pub struct HumanReport {
    gpus: BTreeMap<u32, Vec<Phase>>,
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
        let phases = self.gpus.entry(report.stats.gpu).or_default();
        match phases.last_mut() {
            Some(phase) if phase.class == report.class => phase.windows.push(report),
            _ => phases.push(Phase {
                class: report.class,
                windows: vec![report],
            }),
        }
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
        for (gpu, phases) in &self.gpus {
            self.render_gpu(out, *gpu, phases, &facts(*gpu))?;
        }
        Ok(())
    }

    fn render_gpu(
        &self,
        out: &mut impl Write,
        gpu: u32,
        phases: &[Phase],
        facts: &DeviceFacts,
    ) -> io::Result<()> {
        let tdp = phases.iter().flat_map(|p| &p.windows).find_map(|w| w.tdp_w);
        writeln!(out)?;
        let name = facts.name.as_deref().unwrap_or("unknown model");
        match facts.mig_parent {
            Some(parent) => writeln!(
                out,
                "GPU {gpu} · {name} · MIG instance of GPU {parent}: its power, clocks and temperature are GPU {parent}'s"
            )?,
            None => writeln!(out, "GPU {gpu} · {name} · TDP {}", fmt_opt(tdp, " W", 0))?,
        }
        let total: usize = phases.iter().map(|p| p.windows.len()).sum();
        let mut time: BTreeMap<Class, usize> = BTreeMap::new();
        for p in phases {
            *time.entry(p.class).or_default() += p.windows.len();
        }
        let mut shares: Vec<(Class, usize)> = time.into_iter().collect();
        shares.sort_by_key(|s| std::cmp::Reverse(s.1));
        let shares: Vec<String> = shares
            .iter()
            .map(|(c, n)| format!("{c} {:.0}%", 100.0 * *n as f64 / total as f64))
            .collect();
        writeln!(out, "  time by verdict: {}", shares.join(", "))?;
        let timeline: Vec<String> = phases
            .iter()
            .map(|p| format!("{}–{} {}", utc_hms(p.start()), utc_hms(p.end()), p.class))
            .collect();
        writeln!(
            out,
            "  timeline (UTC):  {}",
            wrap(&timeline.join(" │ "), 100, 19)
        )?;
        // Single-window phases between longer ones are transitions: timeline only.
        let detailed: Vec<&Phase> = if phases.iter().any(|p| p.windows.len() >= 2) {
            phases.iter().filter(|p| p.windows.len() >= 2).collect()
        } else {
            phases.iter().collect()
        };
        for phase in detailed {
            render_phase(out, phase, facts)?;
        }
        Ok(())
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
        wrap(phase.class.remedy(), 100, LABEL + 4)
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
    use super::wrap;

    #[test]
    fn wraps_at_width_with_indent() {
        assert_eq!(wrap("aaa bbb ccc", 9, 2), "aaa bbb\n  ccc");
    }
}
