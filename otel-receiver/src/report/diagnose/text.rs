//! The report as text for a terminal: the source, the first screen, then per GPU whose job it
//! was, its health, a row per verdict and the evidence of a typical window, `--detail`'s block
//! per phase, and each remedy once at the end.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::device::DeviceFacts;
use crate::diagnosis::{Class, WindowReport};
use crate::efficiency::SLACK_BELOW;
use crate::report::time::utc_hms;
use crate::report::timeline::Timeline;
use crate::report::units::{duration, energy, fmt_opt, pct, rate, wrap};
use crate::report::words;
use crate::sample::Metric;

use super::collect::{ClassTotals, GpuReport, Phase};
use super::summary::Summary;
use super::{HumanReport, RenderOptions, SourceLabel};

/// The width of a row's label.
const LABEL: usize = 15;

impl HumanReport {
    /// The text report.
    pub fn render(
        &self,
        out: &mut impl Write,
        source: &SourceLabel,
        options: &RenderOptions,
        facts: impl Fn(u32) -> DeviceFacts,
    ) -> io::Result<()> {
        match source {
            SourceLabel::Live { .. } => {
                writeln!(out, "gpuslack diagnose — live GPUs on {}", source.name())?
            }
            SourceLabel::Trace { name, note } => {
                writeln!(
                    out,
                    "gpuslack diagnose — RECORDED TRACE, not this machine's GPUs"
                )?;
                writeln!(out, "  trace: {name}")?;
                writeln!(out, "  {}", wrap(note, 92, 2))?;
            }
            SourceLabel::Bundled { name, reason } => {
                writeln!(
                    out,
                    "gpuslack diagnose — BUNDLED RECORDING, not this machine's GPUs"
                )?;
                writeln!(out, "  trace: {}", wrap(name, 100, 9))?;
                writeln!(out, "  {}", wrap(reason, 100, 2))?;
            }
        }
        if self.gpus.is_empty() {
            writeln!(out, "\nNo samples: nothing to diagnose.")?;
            return Ok(());
        }
        // The first screen: what the GPUs did, the slack, the change to make first.
        let header_lines = match source {
            SourceLabel::Live { .. } => 1,
            SourceLabel::Trace { note, .. } => 2 + wrap(note, 100, 2).lines().count(),
            SourceLabel::Bundled { name, reason } => {
                1 + wrap(name, 100, 9).lines().count() + wrap(reason, 100, 2).lines().count()
            }
        };
        let summary = self.summary(&options.prices);
        let screen = self.screen(source, &summary, &options.prices, &facts);
        for line in screen.lines(header_lines) {
            writeln!(out, "{line}")?;
        }
        writeln!(
            out,
            "\n{:─<100}",
            "── the details: per GPU, then every remedy "
        )?;
        let timelines: BTreeMap<u32, Timeline> = if options.colour_strip {
            self.timelines(&facts).into_iter().collect()
        } else {
            BTreeMap::new()
        };
        for (gpu, report) in &self.gpus {
            let f = facts(*gpu);
            self.render_gpu(out, *gpu, report, &f, options, &summary, timelines.get(gpu))?;
            if options.detail {
                render_detail(out, report, &f, options, &summary)?;
            }
        }
        writeln!(out)?;
        writeln!(out, "Remedies:")?;
        let ids = options.verbose || options.detail;
        for r in &summary.remedies {
            let text = if ids {
                format!("[{}] {} — {}", r.id, r.class, r.text)
            } else {
                format!("[{}] {}", r.id, r.text)
            };
            writeln!(out, "  {}", wrap(&text, 100, 6))?;
        }
        if !options.detail {
            writeln!(
                out,
                "\n(--detail: a block per phase with every figure; -v: the verdicts' ids and the rules that decided them)"
            )?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn render_gpu(
        &self,
        out: &mut impl Write,
        gpu: u32,
        report: &GpuReport,
        facts: &DeviceFacts,
        options: &RenderOptions,
        summary: &Summary,
        strip: Option<&Timeline>,
    ) -> io::Result<()> {
        writeln!(out)?;
        // Class ids where the reader asked for them; words otherwise.
        let ids = options.verbose || options.detail;
        let name = facts.name.as_deref().unwrap_or("unknown model");
        let uuid = facts
            .uuid
            .as_deref()
            .map_or(String::new(), |u| format!(" · {u}"));
        match facts.mig_parent {
            Some(parent) => writeln!(
                out,
                "GPU {gpu} · {name} · MIG instance of GPU {parent}: its power, clocks and temperature are GPU {parent}'s"
            )?,
            None => writeln!(
                out,
                "GPU {gpu} · {name} · TDP {}{uuid}",
                fmt_opt(report.tdp_w.or(facts.tdp_w), " W", 0)
            )?,
        }
        if let Some(note) = facts.spec.as_ref().and_then(|s| s.unknown_note()) {
            writeln!(out, "    {:<LABEL$}{note}", "spec")?;
        }
        // Whose job.
        let who = if report.owners.seen.is_empty() {
            if report.processes_sampled {
                "no process held it".to_string()
            } else {
                "not recorded (no process list in this source)".to_string()
            }
        } else {
            let ranked = report.owners.ranked();
            let mut parts: Vec<String> = ranked
                .iter()
                .take(3)
                .map(|(o, (_, classes, _))| {
                    let classes: Vec<&str> = classes.iter().map(|c| words::name(*c, ids)).collect();
                    format!("{o} during {}", classes.join(", "))
                })
                .collect();
            let more = ranked.len().saturating_sub(3) + report.owners.more;
            if more > 0 {
                parts.push(format!("{more} more"));
            }
            parts.join("; ")
        };
        writeln!(out, "    {:<LABEL$}{}", "who", wrap(&who, 100, LABEL + 4))?;
        if !report.jobs.is_empty() {
            let jobs: Vec<&str> = report.jobs.iter().map(String::as_str).collect();
            writeln!(out, "    {:<LABEL$}{}", "job", jobs.join(", "))?;
        }
        writeln!(
            out,
            "    {:<LABEL$}{}",
            "health",
            wrap(&report.health.summary(), 100, LABEL + 4)
        )?;
        if let Some(t) = strip {
            writeln!(out, "    {:<LABEL$}{}", "timeline", t.strip(72, true))?;
            writeln!(
                out,
                "    {:<LABEL$}{}",
                "",
                wrap(&t.strip_legend(true), 160, LABEL + 4)
            )?;
        }
        // One row per verdict: every phase of it merged.
        let total = report.seconds();
        writeln!(
            out,
            "    per verdict, its phases merged; power, GPU-Util and SM are means over all its windows:"
        )?;
        writeln!(
            out,
            "    {:<19}{:>6} {:>10} {:>6} {:>12} {:>7} {:>9} {:>7}  remedy",
            "verdict", "phases", "time", "share", "energy", "power", "GPU-Util", "SM"
        )?;
        let mut rows: Vec<(&Class, &ClassTotals)> = report.by_class.iter().collect();
        rows.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
        for (class, t) in &rows {
            let remedy = report
                .phases
                .iter()
                .filter(|p| p.class == **class)
                .max_by(|a, b| a.count.cmp(&b.count))
                .map(|p| summary.remedy_id(p.representative().remedy()))
                .map_or(String::new(), |id| format!("[{id}]"));
            writeln!(
                out,
                "    {:<19}{:>6} {:>10} {:>5.0}% {:>12} {:>7} {:>9} {:>7}  {}",
                words::name(**class, ids),
                t.phases,
                duration(t.seconds),
                100.0 * t.seconds / total.max(1e-9),
                energy(t.energy_j),
                fmt_opt(t.power_w.get(), " W", 0),
                pct(t.util_pct.get()),
                pct(t.sm_pct.get()),
                remedy
            )?;
        }
        // Why: the evidence of one typical window per verdict.
        writeln!(
            out,
            "    why (the evidence of a typical window: the middle of the verdict's longest phase)"
        )?;
        for (class, _) in &rows {
            let Some(phase) = report
                .phases
                .iter()
                .filter(|p| p.class == **class)
                .max_by(|a, b| a.count.cmp(&b.count))
            else {
                continue;
            };
            let rep = phase.representative();
            let mut text = format!(
                "{}–{}: {}",
                utc_hms(rep.stats.start),
                utc_hms(rep.stats.end),
                rep.evidence
                    .iter()
                    .filter(|e| e.signal != "headroom")
                    .take(2)
                    .map(|e| e.text.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            if let Some(h) = rep
                .headroom
                .filter(|_| !matches!(rep.class, Class::Idle | Class::IdleHeld))
            {
                text += &format!("; headroom: {}", h.text());
            }
            if options.verbose {
                text += &format!(" (rule: {})", rep.rule);
            }
            writeln!(
                out,
                "    {:<19}{}",
                words::name(**class, ids),
                wrap(&text, 100, 23)
            )?;
        }
        if report.more_phases > 0 {
            writeln!(
                out,
                "    ({} later phases are counted in the rows above but not kept for --detail)",
                report.more_phases
            )?;
        }
        Ok(())
    }
}

/// Every kept phase of a GPU as a block of figures: `--detail`.
fn render_detail(
    out: &mut impl Write,
    report: &GpuReport,
    facts: &DeviceFacts,
    options: &RenderOptions,
    summary: &Summary,
) -> io::Result<()> {
    let mut timeline: Vec<String> = report
        .phases
        .iter()
        .map(|p| format!("{}–{} {}", utc_hms(p.start), utc_hms(p.end), p.class))
        .collect();
    if report.more_phases > 0 {
        timeline.push(format!(
            "… {} more phases (in the totals above)",
            report.more_phases
        ));
    }
    writeln!(
        out,
        "    {:<LABEL$}{}",
        "phases (UTC)",
        wrap(&timeline.join(" │ "), 100, LABEL + 4)
    )?;
    // Single-window phases between longer ones are transitions: timeline only.
    let phases = &report.phases;
    let detailed: Vec<&Phase> = if phases.iter().any(|p| p.count >= 2) {
        phases.iter().filter(|p| p.count >= 2).collect()
    } else {
        phases.iter().collect()
    };
    for phase in detailed {
        render_phase(out, phase, facts, options, summary)?;
    }
    Ok(())
}

fn row(out: &mut impl Write, label: &str, value: String, flag: Option<String>) -> io::Result<()> {
    match flag {
        Some(flag) => writeln!(out, "      {label:<LABEL$}{value:<44} {flag}"),
        None => writeln!(out, "      {label:<LABEL$}{value}"),
    }
}

/// Whether a class means kernels or copies are running: the flags about work that stopped or
/// power that is low fit only the others.
fn work_runs(class: Class) -> bool {
    !matches!(class, Class::Idle | Class::IdleHeld | Class::Hung)
}

fn render_phase(
    out: &mut impl Write,
    phase: &Phase,
    facts: &DeviceFacts,
    options: &RenderOptions,
    summary: &Summary,
) -> io::Result<()> {
    let stat = |m: Metric| move |w: &WindowReport| w.stats.mean(m);
    let power = phase.mean(|w| w.signals.power_w);
    let tdp = phase.mean(|w| w.tdp_w);
    let util = phase.mean(|w| w.signals.util_pct);
    let sm = phase.mean(|w| w.signals.sm_pct);
    let eff = phase.mean(|w| w.efficiency);
    writeln!(out)?;
    writeln!(
        out,
        "    ▸ {}–{} UTC ({})  {} · figures: phase means over {} windows",
        utc_hms(phase.start),
        utc_hms(phase.end),
        duration(phase.seconds()),
        phase.class,
        phase.count
    )?;
    let p_tdp = power.zip(tdp).map(|(p, t)| p / t);
    row(
        out,
        "power",
        format!(
            "{} of {} TDP ({}), {}",
            fmt_opt(power, " W", 0),
            fmt_opt(tdp, " W", 0),
            p_tdp.map_or("n/a".into(), |f| format!("{:.0}%", 100.0 * f)),
            energy(phase.energy_j)
        ),
        // Under 60% of TDP is slack only where work runs: on an idle GPU it is expected.
        p_tdp
            .filter(|f| *f < SLACK_BELOW && work_runs(phase.class))
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
        // Cool and low power says work stopped: true of a held or hung GPU, wrong where
        // tiny kernels or copies run (they draw little and stay cool while working).
        (Some(t), _)
            if t < 40.0
                && p_tdp.is_some_and(|f| f < 0.3)
                && matches!(phase.class, Class::IdleHeld | Class::Hung) =>
        {
            Some("cool and low power: no work is running".to_string())
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
            "vs its profile",
            format!(
                "draws {:.0}% of the way from its own idle to its full-compute power; {} expected for {}",
                100.0 * cal,
                fmt_opt(expected, " W", 0),
                phase.class
            ),
            rep.profile_origin.as_ref().map(|o| format!("({o})")),
        )?;
    }
    if !phase.owners.seen.is_empty() {
        let who: Vec<&str> = phase
            .owners
            .ranked()
            .iter()
            .take(3)
            .map(|(o, _)| o.as_str())
            .collect();
        writeln!(
            out,
            "      {:<LABEL$}{}",
            "who",
            wrap(&who.join("; "), 100, LABEL + 6)
        )?;
    }
    let rule = if options.verbose {
        format!("  (rule: {})", rep.rule)
    } else {
        String::new()
    };
    writeln!(
        out,
        "      {:<LABEL$}{}  {}{rule} — evidence from the typical window {}–{}:",
        "verdict",
        phase.class.as_str().to_uppercase(),
        rep.assessment.phrase(),
        utc_hms(rep.stats.start),
        utc_hms(rep.stats.end),
    )?;
    if !rep.assessment.reason.is_empty() {
        writeln!(
            out,
            "      {:<LABEL$}· {}",
            "",
            wrap(&rep.assessment.reason, 100, LABEL + 6)
        )?;
    }
    for e in &rep.evidence {
        writeln!(
            out,
            "      {:<LABEL$}· {}",
            "",
            wrap(&e.text, 100, LABEL + 8)
        )?;
    }
    writeln!(
        out,
        "      {:<LABEL$}[{}] below",
        "remedy",
        summary.remedy_id(rep.remedy())
    )?;
    if !rep.missing.is_empty() {
        writeln!(
            out,
            "      {:<LABEL$}{}",
            "not measured",
            wrap(&rep.missing.join("; "), 100, LABEL + 6)
        )?;
    }
    Ok(())
}
