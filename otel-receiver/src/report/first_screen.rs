//! The first screen of `gpuslack diagnose`: what a person reads before scrolling, 24 lines of
//! 100 columns with the source's header. It says what the job's GPUs did, in words; the slack
//! in time, energy and money; whether the hardware is sound; and the one change to make first,
//! as an instruction naming the code it touches, then the next two. No class id appears on it:
//! ids are for `-v`, `--detail` and the JSON ([`super::words`]).
//!
//! The screen is built from [`Screen`], which the report fills from what it collected; it is
//! laid out here, once, and condensed until it fits.

use std::collections::BTreeSet;

use crate::device::DeviceFacts;
use crate::diagnosis::{Advice, Class, Confidence};

use super::health::Health;
use super::units::{duration, wrap};
use super::words;

/// Lines of a terminal's first screen.
pub const SCREEN_LINES: usize = 24;
/// Columns of a terminal's first screen.
pub const SCREEN_COLUMNS: usize = 100;

/// What the first screen is made of.
#[derive(Debug, Clone)]
pub struct Screen {
    /// The bottom line's paragraph ([`super::BottomLine::text`]).
    pub bottom_line: String,
    /// Whether a price was given: without one, the screen says which flag adds the money.
    pub priced: bool,
    /// Each GPU reported on.
    pub gpus: Vec<GpuDid>,
    /// The fixes for slack, ranked by the GPU time they would recover.
    pub fixes: Vec<Fix>,
    /// The advice for healthy time, when there is no fix: the first screen still names a change.
    pub advice: Option<Fix>,
    /// GPU time covered, over every GPU (s): what a fix's share is of.
    pub seconds: f64,
    /// The hardware's lines, when already said for GPUs shown together.
    pub hardware_lines: Option<Vec<String>>,
    /// The GPUs shown as one ([`Screen::together`]).
    pub together: Option<BTreeSet<u32>>,
}

/// One GPU: what it did, whose it was, its health.
#[derive(Debug, Clone)]
pub struct GpuDid {
    /// Its index.
    pub gpu: u32,
    /// Its model, limits and power range.
    pub facts: DeviceFacts,
    /// Seconds per verdict, longest first.
    pub by_class: Vec<(Class, f64)>,
    /// The jobs that held it, as the agent names them (`pgid:485`, `slurm:4711`).
    pub jobs: Vec<String>,
    /// Who held it longest (`pid 499 python3 (user root)`), when a process list was recorded.
    pub owner: Option<String>,
    /// Whether a process list was recorded at all.
    pub processes_sampled: bool,
    /// Its health over the run.
    pub health: Health,
    /// In its latency-bound time, the mean share of peak (%) of the unit nearest its peak:
    /// "busy, but at 29% of what the GPU can do".
    pub latency_peak_pct: Option<f64>,
}

/// One change to make.
#[derive(Debug, Clone)]
pub struct Fix {
    /// Its number in the report's remedies (`[1]`).
    pub id: usize,
    /// The verdict it fixes.
    pub class: Class,
    /// Which advice it is: what the instruction is asked of.
    pub advice: Advice,
    /// GPU time it would recover (s), or for advice the time it applied to.
    pub seconds: f64,
    /// The GPUs it applies to.
    pub gpus: BTreeSet<u32>,
    /// How sure the verdict is, in its longest phase's typical window.
    pub confidence: Option<Confidence>,
}

impl Screen {
    /// The screen's lines, after `header_lines` lines of the source's header: condensed step by
    /// step (the next changes to one line each, then the GPUs to one line each, then all GPUs
    /// in one line, their hardware in one) until it fits.
    pub fn lines(&self, header_lines: usize) -> Vec<String> {
        let room = SCREEN_LINES.saturating_sub(header_lines);
        let mut lines = self.layout(false, false);
        if lines.len() > room {
            lines = self.layout(true, false);
        }
        if lines.len() > room {
            lines = self.layout(true, true);
        }
        if lines.len() > room && self.gpus.len() > 1 {
            let together = self.together();
            lines = together.layout(true, false);
            if lines.len() > room {
                lines = together.layout(true, true);
            }
        }
        lines
    }

    /// Every GPU as one: their time summed per verdict, their hardware in one line. For a node
    /// of many GPUs, where a line each would push the change off the screen.
    fn together(&self) -> Screen {
        let first = &self.gpus[0];
        let mut by_class: Vec<(Class, f64)> = Vec::new();
        for g in &self.gpus {
            for (c, sec) in &g.by_class {
                match by_class.iter_mut().find(|(k, _)| k == c) {
                    Some(e) => e.1 += sec,
                    None => by_class.push((*c, *sec)),
                }
            }
        }
        by_class.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut jobs: Vec<String> = self.gpus.iter().flat_map(|g| g.jobs.clone()).collect();
        jobs.sort();
        jobs.dedup();
        let same_model = self.gpus.iter().all(|g| g.facts.name == first.facts.name);
        let facts = DeviceFacts {
            name: if same_model {
                first.facts.name.clone()
            } else {
                Some("mixed models".into())
            },
            ..DeviceFacts::default()
        };
        let indices: BTreeSet<u32> = self.gpus.iter().map(|g| g.gpu).collect();
        let hardware = self.hardware();
        let hardware = if hardware.len() == 1 {
            hardware
        } else {
            vec![format!(
                "Hardware: {} readings differ by GPU: see each GPU's health line below.",
                self.gpus.len()
            )]
        };
        Screen {
            gpus: vec![GpuDid {
                gpu: 0,
                facts,
                by_class,
                jobs,
                owner: None,
                processes_sampled: self.gpus.iter().any(|g| g.processes_sampled),
                health: Health::default(),
                latency_peak_pct: self
                    .gpus
                    .iter()
                    .filter_map(|g| g.latency_peak_pct)
                    .reduce(f64::max),
            }],
            hardware_lines: Some(hardware),
            together: Some(indices),
            ..self.clone()
        }
    }

    fn layout(&self, short_next: bool, short_gpus: bool) -> Vec<String> {
        let mut out: Vec<String> = vec![String::new()];
        let push = |out: &mut Vec<String>, text: &str, indent: usize| {
            let first = " ".repeat(indent);
            out.extend(
                format!("{first}{}", wrap(text, SCREEN_COLUMNS, indent))
                    .lines()
                    .map(str::to_string),
            );
        };
        let mut bottom = self.bottom_line.clone();
        if !self.priced && !self.fixes.is_empty() {
            bottom += " Put a price on it with --price-gpu-hour P.";
        }
        push(&mut out, &bottom, 0);
        out.push(String::new());
        for g in &self.gpus {
            if short_gpus {
                push(
                    &mut out,
                    &format!("{}: {}", self.gpu_line(g), did_sentence(g, 2)),
                    2,
                );
            } else {
                push(&mut out, &format!("{}:", self.gpu_line(g)), 0);
                push(&mut out, &did_sentence(g, usize::MAX), 2);
            }
        }
        for line in self.hardware() {
            push(&mut out, &line, 0);
        }
        if let Some(line) = self.latency_line() {
            push(&mut out, &line, 0);
        }
        let first = self.fixes.first().or(self.advice.as_ref());
        if let Some(fix) = first {
            out.push(String::new());
            let head = if self.fixes.is_empty() {
                format!(
                    "Change first (nothing is slack; {}):",
                    self.fix_basis(fix, false)
                )
            } else {
                format!("Change first ({}):", self.fix_basis(fix, true))
            };
            push(&mut out, &head, 0);
            push(&mut out, &words::change(fix.advice, fix.class), 2);
        }
        let next: Vec<&Fix> = self.fixes.iter().skip(1).take(2).collect();
        if !next.is_empty() {
            for (rank, fix) in next.iter().enumerate() {
                let prefix = format!(
                    "{}{}. ",
                    if rank == 0 { "Then: " } else { "      " },
                    rank + 2
                );
                let text = format!(
                    "{}, up to {} back ({:.0}%) [{}]: {}",
                    capitalised(words::label(fix.class)),
                    duration(fix.seconds),
                    100.0 * fix.seconds / self.seconds.max(1e-9),
                    fix.id,
                    words::change(fix.advice, fix.class)
                );
                // Two lines at most: the whole remedy is numbered below.
                let keep = if short_next { 1 } else { 2 };
                let wrapped = format!("{prefix}{}", wrap(&text, SCREEN_COLUMNS, prefix.len()));
                let lines: Vec<&str> = wrapped.lines().collect();
                for (i, line) in lines.iter().take(keep).enumerate() {
                    if i + 1 == keep && lines.len() > keep {
                        out.push(clip(&format!("{line} …"), SCREEN_COLUMNS));
                    } else {
                        out.push((*line).to_string());
                    }
                }
            }
        }
        let more = self.fixes.len().saturating_sub(3);
        if more > 0 {
            out.push(format!("      ({more} more in the remedies below.)"));
        }
        out
    }

    /// The change to make first and the next two, one sentence each: the page's list.
    pub fn changes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(fix) = self.fixes.first() {
            out.push(format!(
                "Change first ({}): {}",
                self.fix_basis(fix, true),
                words::change(fix.advice, fix.class)
            ));
        } else if let Some(fix) = &self.advice {
            out.push(format!(
                "Change first (nothing is slack; {}): {}",
                self.fix_basis(fix, false),
                words::change(fix.advice, fix.class)
            ));
        }
        for fix in self.fixes.iter().skip(1).take(2) {
            out.push(format!(
                "Then, {} ({}): {}",
                words::label(fix.class),
                self.fix_basis(fix, true),
                words::change(fix.advice, fix.class)
            ));
        }
        out
    }

    /// "recovers up to 34 s, 24% of the GPU time; tiny kernels on GPU 0; how sure: high".
    fn fix_basis(&self, fix: &Fix, recovers: bool) -> String {
        let share = 100.0 * fix.seconds / self.seconds.max(1e-9);
        let on = if self.gpus.len() > 1 || self.together.is_some() {
            format!(" on GPU {}", gpu_ranges(&fix.gpus))
        } else {
            String::new()
        };
        let sure = fix
            .confidence
            .map_or(String::new(), |c| format!("; how sure: {c}"));
        if recovers {
            format!(
                "up to {} back, {share:.0}% of the GPU time{on}{sure}; [{}] below",
                duration(fix.seconds),
                fix.id
            )
        } else {
            format!(
                "{} {share:.0}% of the time{on}{sure}",
                words::label(fix.class)
            )
        }
    }

    /// "GPU 0 · NVIDIA H200 · 42 s · job pgid:485 · pid 499 python3 (user root, pgid 485)".
    fn gpu_line(&self, g: &GpuDid) -> String {
        let mut parts = match &self.together {
            Some(all) => vec![format!("GPU {} ({} GPUs)", gpu_ranges(all), all.len())],
            None => vec![format!("GPU {}", g.gpu)],
        };
        parts.push(
            g.facts
                .name
                .clone()
                .unwrap_or_else(|| "unknown model".into()),
        );
        let seconds: f64 = g.by_class.iter().map(|(_, s)| s).sum();
        parts.push(duration(seconds));
        if !g.jobs.is_empty() {
            parts.push(format!("job {}", g.jobs.join(", ")));
        }
        match &g.owner {
            Some(o) => parts.push(o.clone()),
            None if g.processes_sampled => parts.push("no process held it".into()),
            None => parts.push("whose job: not recorded".into()),
        }
        parts.join(" · ")
    }

    /// Busy is not fast: where a latency-bound change is among the three the screen names, how
    /// far from its speed the GPU ran and the command that confirms it on one step.
    fn latency_line(&self) -> Option<String> {
        let named = self
            .fixes
            .iter()
            .take(3)
            .chain(self.advice.as_ref())
            .any(|f| f.class == Class::LatencyBound);
        if !named {
            return None;
        }
        let peak = self
            .gpus
            .iter()
            .filter_map(|g| g.latency_peak_pct)
            .reduce(f64::max)?;
        Some(format!(
            "Busy, not fast: the unit nearest its peak ran at {peak:.0}% of it (ncu's line: 60%). Confirm: {}",
            crate::diagnosis::NCU_COMMAND
        ))
    }

    /// Whether the hardware is sound, per GPU (GPUs that read the same share a line), and
    /// what a throttle asks of the reader.
    pub fn hardware(&self) -> Vec<String> {
        if let Some(lines) = &self.hardware_lines {
            return lines.clone();
        }
        let mut said: Vec<(Vec<u32>, String)> = Vec::new();
        for g in &self.gpus {
            let text = hardware_text(g);
            match said.iter_mut().find(|(_, t)| *t == text) {
                Some((gpus, _)) => gpus.push(g.gpu),
                None => said.push((vec![g.gpu], text)),
            }
        }
        let many = self.gpus.len() > 1;
        said.into_iter()
            .map(|(gpus, text)| {
                let on = if many {
                    format!(" (GPU {})", gpu_ranges(&gpus.into_iter().collect()))
                } else {
                    String::new()
                };
                format!("Hardware{on}: {text}")
            })
            .collect()
    }
}

/// One GPU's health in a sentence or two.
fn hardware_text(g: &GpuDid) -> String {
    let findings = g.health.findings();
    let severe: Vec<&str> = findings
        .iter()
        .filter(|f| f.severe)
        .map(|f| f.text.as_str())
        .collect();
    let mut text = if !severe.is_empty() {
        format!(
            "NOT sound: {}; see the health line below before changing code.",
            severe.join("; ")
        )
    } else if g.health.sampled() {
        let risen = findings
            .iter()
            .filter(|f| !f.signal.starts_with("throttle:"))
            .count();
        if risen == 0 {
            "sound: no Xid, ECC, row-remap, PCIe-replay or link errors.".into()
        } else {
            "sound, with warnings in the health line below.".into()
        }
    } else {
        "not checked: this source has no Xid, ECC or PCIe-replay counters.".into()
    };
    for (reason, seconds) in &g.health.throttle_s {
        let share = 100.0 * seconds / g.health.seconds.max(1e-9);
        text += " ";
        text += &throttle_advice(reason, share, &g.facts);
    }
    text
}

/// One throttle reason, and whether it asks anything of the reader.
fn throttle_advice(reason: &str, share: f64, facts: &DeviceFacts) -> String {
    match reason {
        "sw_power_cap" => {
            let limit = facts.power_limit_w.or(facts.tdp_w);
            let head = format!("At its power limit {share:.0}% of the time (sw_power_cap)");
            match (limit, facts.power_limit_max_w) {
                (Some(limit), Some(max)) if limit + 1.0 >= max => format!(
                    "{head}, already the board's {limit:.0} W maximum: nothing to raise."
                ),
                (Some(limit), Some(max)) => format!(
                    "{head}, set to {limit:.0} W of the board's {max:.0} W: `nvidia-smi -pl {max:.0}` (root) lets it draw more."
                ),
                _ => format!(
                    "{head}; whether it can be raised was not recorded (`nvidia-smi -q -d POWER`)."
                ),
            }
        }
        "sw_thermal_slowdown" | "hw_thermal_slowdown" => format!(
            "Slowed for heat {share:.0}% of the time ({reason}): check the cooling and airflow."
        ),
        "hw_slowdown" | "hw_power_brake_slowdown" => format!(
            "Slowed by its hardware {share:.0}% of the time ({reason}): check the power supply and cooling (`nvidia-smi -q -d PERFORMANCE`)."
        ),
        _ => format!("Clocks held down {share:.0}% of the time ({reason})."),
    }
}

/// "Its time: 29% idle with nothing on it, 19% computing, an arithmetic pipe at 60% …", the `most`
/// longest verdicts.
fn did_sentence(g: &GpuDid, most: usize) -> String {
    let total: f64 = g.by_class.iter().map(|(_, s)| s).sum();
    let parts: Vec<String> = g
        .by_class
        .iter()
        .take(most)
        .map(|(c, s)| {
            let share = 100.0 * s / total.max(1e-9);
            match (c, g.latency_peak_pct) {
                (Class::LatencyBound, Some(peak)) => {
                    format!("{share:.0}% busy, but at {peak:.0}% of what the GPU can do")
                }
                _ => format!("{share:.0}% {}", words::did(*c)),
            }
        })
        .collect();
    format!("Its time: {}.", parts.join(", "))
}

/// "0–3, 5, 7": runs of consecutive GPUs as ranges.
fn gpu_ranges(gpus: &BTreeSet<u32>) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for g in gpus {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == *g => *end = *g,
            _ => runs.push((*g, *g)),
        }
    }
    runs.iter()
        .map(|(a, b)| match b - a {
            0 => a.to_string(),
            1 => format!("{a}, {b}"),
            _ => format!("{a}–{b}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    }
}

/// `text` cut to `width` characters, with an ellipsis where it was cut.
fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32) -> GpuDid {
        GpuDid {
            gpu: index,
            facts: DeviceFacts {
                name: Some("NVIDIA H200".into()),
                tdp_w: Some(700.0),
                power_limit_max_w: Some(700.0),
                ..DeviceFacts::default()
            },
            by_class: vec![
                (Class::LaunchBound, 34.0),
                (Class::TransferBound, 28.0),
                (Class::ComputeBound, 20.0),
            ],
            jobs: vec!["pgid:485".into()],
            owner: Some("pid 499 python3 (user root, pgid 485)".into()),
            processes_sampled: true,
            health: Health::default(),
            latency_peak_pct: None,
        }
    }

    fn fix(id: usize, class: Class, seconds: f64) -> Fix {
        Fix {
            id,
            class,
            advice: Advice::Own,
            seconds,
            gpus: BTreeSet::from([0]),
            confidence: Some(Confidence::High),
        }
    }

    fn screen(gpus: u32, fixes: usize) -> Screen {
        let all = [
            fix(1, Class::LaunchBound, 34.0),
            fix(2, Class::TransferBound, 28.0),
            fix(3, Class::InputStarved, 16.0),
            fix(4, Class::IdleHeld, 4.0),
        ];
        Screen {
            bottom_line: "Bottom line: 57% of the GPU time (1 min 22 s of 2 min 24 s) and 26% of the energy were slack: 0.023 GPU-hours and 0.0031 kWh. Largest cause: tiny kernels (24% of the GPU time).".into(),
            priced: false,
            gpus: (0..gpus).map(gpu).collect(),
            fixes: all.into_iter().take(fixes).collect(),
            advice: Some(fix(5, Class::ComputeBound, 20.0)),
            seconds: 82.0 * f64::from(gpus),
            hardware_lines: None,
            together: None,
        }
    }

    #[test]
    fn the_screen_fits_and_names_the_change_without_class_ids() {
        for gpus in [1, 2, 8] {
            for fixes in [0, 1, 4] {
                for header in [1, 4] {
                    let lines = screen(gpus, fixes).lines(header);
                    let text = lines.join("\n");
                    assert!(
                        lines.len() + header <= SCREEN_LINES,
                        "{gpus} GPUs, {fixes} fixes: {} lines\n{text}",
                        lines.len()
                    );
                    assert!(
                        lines.iter().all(|l| l.chars().count() <= SCREEN_COLUMNS),
                        "{text}"
                    );
                    assert!(text.contains("Change first ("), "{text}");
                    for class in Class::ALL {
                        if class.as_str().contains('_') {
                            assert!(!text.contains(class.as_str()), "{class}: {text}");
                        }
                    }
                    if fixes > 0 {
                        assert!(text.contains("torch.compile"), "{text}");
                        assert!(text.contains("up to 34 s back"), "{text}");
                    }
                }
            }
        }
    }

    #[test]
    fn gpus_in_a_run_read_as_a_range() {
        assert_eq!(
            gpu_ranges(&BTreeSet::from([0, 1, 2, 3, 5, 7, 8])),
            "0–3, 5, 7, 8"
        );
        let text = screen(8, 4).lines(3).join("\n");
        assert!(text.contains("GPU 0–7 (8 GPUs)"), "{text}");
    }

    #[test]
    fn a_power_cap_says_whether_it_can_be_raised() {
        let mut facts = DeviceFacts {
            tdp_w: Some(700.0),
            power_limit_max_w: Some(700.0),
            ..DeviceFacts::default()
        };
        let at_max = throttle_advice("sw_power_cap", 7.0, &facts);
        assert!(at_max.contains("7% of the time"), "{at_max}");
        assert!(at_max.contains("nothing to raise"), "{at_max}");
        facts.power_limit_w = Some(500.0);
        let capped = throttle_advice("sw_power_cap", 7.0, &facts);
        assert!(
            capped.contains("set to 500 W of the board's 700 W"),
            "{capped}"
        );
        assert!(capped.contains("nvidia-smi -pl 700"), "{capped}");
        facts.power_limit_max_w = None;
        assert!(throttle_advice("sw_power_cap", 7.0, &facts).contains("not recorded"));
    }
}
