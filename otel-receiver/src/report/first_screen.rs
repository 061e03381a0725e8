//! The first screen of `gpuslack diagnose`: what a person reads before scrolling, 24 lines of
//! 100 columns with the source's header. It says what the job's GPUs did, in words; the slack
//! in time, energy and money; whether the hardware is sound; and the one change to make first,
//! as an instruction naming the code it touches, then the next two. No class id appears on it:
//! ids are for `-v`, `--detail` and the JSON ([`super::words`]).
//!
//! The screen is built from [`Screen`], which the report fills from what it collected; it is
//! laid out here, once, and condensed until it fits.

use std::collections::{BTreeMap, BTreeSet};

use crate::device::DeviceFacts;
use crate::diagnosis::{pct, Advice, Class, Confidence, Thresholds};

use super::health::Health;
use super::ranking::Severity;
use super::time::utc_hms;
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
    /// A hang: said before anything else, since a job that hangs makes no progress at all.
    pub incident: Option<Incident>,
    /// The GPUs others waited on in their collectives, each with its waiters.
    pub stragglers: Vec<Straggler>,
    /// The profilers the host named on the GPUs, and the seconds each held them.
    pub profilers: BTreeMap<String, f64>,
}

/// A hang: which GPUs stopped, since when, and which one likely caused it.
#[derive(Debug, Clone, PartialEq)]
pub struct Incident {
    /// The GPUs that made no progress.
    pub gpus: BTreeSet<u32>,
    /// The longest any of them was hung (s), from the stall's start.
    pub hung_s: f64,
    /// When the first of them stopped (Unix s).
    pub since: f64,
    /// The GPUs that held their context and ran nothing while the others spun: the ranks that
    /// never joined. Empty where every GPU waits alike.
    pub culprits: BTreeSet<u32>,
    /// The job ranks (`RANK`) on each GPU, where the host read them.
    pub ranks: BTreeMap<u32, BTreeSet<u32>>,
    /// The processes on each GPU while it was hung, pid to name, where the source listed them.
    pub processes: BTreeMap<u32, BTreeMap<u32, Option<String>>>,
    /// The host, where the source knows it (a live run).
    pub host: Option<String>,
}

/// A GPU its peers waited on: the straggler.
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    /// The straggler.
    pub gpu: u32,
    /// Each GPU that waited on it: for how long (s), and that GPU's whole time (s).
    pub waiters: BTreeMap<u32, (f64, f64)>,
    /// Its job ranks, where the host read them.
    pub ranks: BTreeSet<u32>,
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
    /// The peer it waited on longest in its collectives (the straggler), and for how long (s).
    pub waits_on: Option<(u32, f64)>,
    /// The mean DRAM bandwidth (% of peak) of each verdict's windows, where GPM read it: what
    /// the words about memory may claim ([`words::did_measured`]).
    pub dram_pct: BTreeMap<Class, f64>,
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
    /// How its time weighs before its share ([`super::ranking`]).
    pub severity: Severity,
    /// What its windows read.
    pub readings: Readings,
}

/// What a fix's windows read, means over them: the figures its change rests on, shown beside
/// it so that the gap GPU-Util hides is on the first screen (GPU-Util 100% at 0.8% of the SMs
/// and 128 W of 700 W).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Readings {
    /// GPU-Util (%): the share of time a kernel was resident.
    pub util_pct: Option<f64>,
    /// SM activity (%), where GPM read it.
    pub sm_pct: Option<f64>,
    /// Board power (W).
    pub power_w: Option<f64>,
    /// The board's TDP (W), what the power is read against.
    pub tdp_w: Option<f64>,
}

impl Readings {
    /// "Its windows: GPU-Util 100%, yet 0.8% of the SMs active, 128 W of 700 W." The "yet"
    /// only where the SMs fill less of the GPU than GPU-Util suggests by the tiny-kernel rule's
    /// own ratio (`launch_intensity_max`) while kernels are resident half the time or more;
    /// `None` without GPU-Util.
    pub fn sentence(&self) -> Option<String> {
        let util = self.util_pct?;
        let th = Thresholds::default();
        let mut parts = vec![format!("GPU-Util {}", pct(util))];
        match self.sm_pct {
            Some(sm) if util >= 50.0 && sm < util * th.launch_intensity_max => {
                parts[0] += &format!(", yet {} of the SMs active", pct(sm));
            }
            Some(sm) => parts.push(format!("SM activity {}", pct(sm))),
            None => {}
        }
        match (self.power_w, self.tdp_w) {
            (Some(p), Some(tdp)) => parts.push(format!("{p:.0} W of {tdp:.0} W")),
            (Some(p), None) => parts.push(format!("{p:.0} W")),
            _ => {}
        }
        Some(format!("Its windows: {}.", parts.join(", ")))
    }
}

impl Screen {
    /// The screen's lines, after `header_lines` lines of the source's header: condensed step by
    /// step (the next changes to one line each, then the GPUs to one line each, then all GPUs
    /// in one line, their hardware in one) until it fits.
    pub fn lines(&self, header_lines: usize) -> Vec<String> {
        let room = SCREEN_LINES.saturating_sub(header_lines);
        let mut lines = self.layout(false, false, false);
        for (short_next, short_gpus, terse) in [
            (true, false, false),
            (true, true, false),
            (true, true, true),
        ] {
            if lines.len() > room {
                lines = self.layout(short_next, short_gpus, terse);
            }
        }
        if lines.len() > room && self.gpus.len() > 1 {
            let together = self.together();
            for (short_gpus, terse) in [(false, false), (true, false), (true, true)] {
                lines = together.layout(true, short_gpus, terse);
                if lines.len() <= room {
                    break;
                }
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
                // The straggler most waited on, with every GPU's wait on it.
                waits_on: self
                    .gpus
                    .iter()
                    .filter_map(|g| g.waits_on)
                    .fold(BTreeMap::<u32, f64>::new(), |mut all, (leader, s)| {
                        *all.entry(leader).or_default() += s;
                        all
                    })
                    .into_iter()
                    .max_by(|a, b| a.1.total_cmp(&b.1)),
                // The lowest of the GPUs': words for them all claim no more than the least.
                dram_pct: self.gpus.iter().fold(BTreeMap::new(), |mut all, g| {
                    for (c, d) in &g.dram_pct {
                        let e = all.entry(*c).or_insert(*d);
                        *e = f64::min(*e, *d);
                    }
                    all
                }),
            }],
            hardware_lines: Some(hardware),
            together: Some(indices),
            ..self.clone()
        }
    }

    /// The screen at one level of condensing: `terse` keeps one next change and drops the
    /// count of the others (they are numbered below).
    fn layout(&self, short_next: bool, short_gpus: bool, terse: bool) -> Vec<String> {
        let mut out: Vec<String> = vec![String::new()];
        let push = |out: &mut Vec<String>, text: &str, indent: usize| {
            let first = " ".repeat(indent);
            out.extend(
                format!("{first}{}", wrap(text, SCREEN_COLUMNS, indent))
                    .lines()
                    .map(str::to_string),
            );
        };
        if let Some(incident) = &self.incident {
            push(&mut out, &incident.line(), 0);
            out.push(String::new());
        }
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
        for line in self.straggler_lines() {
            push(&mut out, &line, 0);
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
            if !terse {
                if let Some(line) = fix.readings.sentence() {
                    push(&mut out, &line, 2);
                }
            }
            push(&mut out, &self.change(fix), 2);
        }
        let next: Vec<&Fix> = self
            .fixes
            .iter()
            .skip(1)
            .take(if terse { 1 } else { 2 })
            .collect();
        if !next.is_empty() {
            for (rank, fix) in next.iter().enumerate() {
                let prefix = format!(
                    "{}{}. ",
                    if rank == 0 { "Then: " } else { "      " },
                    rank + 2
                );
                let text = format!(
                    "{}, up to {} back ({:.0}%) [{}]: {}",
                    capitalised(words::fix_label(fix.advice, fix.class)),
                    duration(fix.seconds),
                    100.0 * fix.seconds / self.seconds.max(1e-9),
                    fix.id,
                    self.change(fix)
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
        if more > 0 && !terse {
            out.push(format!("      ({more} more in the remedies below.)"));
        }
        out
    }

    /// The change to make first and the next two, one sentence each: the page's list.
    pub fn changes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(fix) = self.fixes.first() {
            let readings = fix
                .readings
                .sentence()
                .map_or(String::new(), |r| format!(" {r}"));
            out.push(format!(
                "Change first ({}):{readings} {}",
                self.fix_basis(fix, true),
                self.change(fix)
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
                words::fix_label(fix.advice, fix.class),
                self.fix_basis(fix, true),
                self.change(fix)
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
        if fix.severity == Severity::Incident {
            let first = self
                .incident
                .as_ref()
                .filter(|i| !i.culprits.is_empty())
                .map_or(String::new(), |i| {
                    format!("; GPU {} first", gpu_ranges(&i.culprits))
                });
            return format!(
                "the hang, before any share of time{first}; [{}] below",
                fix.id
            );
        }
        if fix.severity == Severity::Counters {
            return format!(
                "a profiler held the counters for {}{on}: those windows describe it, not the job{sure}; [{}] below",
                duration(fix.seconds),
                fix.id
            );
        }
        if recovers {
            format!(
                "up to {} back, {share:.0}% of the GPU time{on}{sure}; [{}] below",
                duration(fix.seconds),
                fix.id
            )
        } else {
            format!(
                "{} {share:.0}% of the time{on}{sure}",
                words::fix_label(fix.advice, fix.class)
            )
        }
    }

    /// The change a fix asks for, naming the GPU at fault where the screen knows it: the
    /// straggler a wait is on, the profiler that held the counters.
    fn change(&self, fix: &Fix) -> String {
        let change = words::change(fix.advice, fix.class);
        if fix.class == Class::SyncWait {
            if let Some(s) = self.stragglers.first() {
                return format!(
                    "GPU {}{} is the straggler GPU {} waits on: even out its share of the work or find what slows that rank (`nsys profile --stats=true` on it). {change}",
                    s.gpu,
                    ranks_of(&s.ranks),
                    gpu_ranges(&s.waiters.keys().copied().collect())
                );
            }
        }
        if fix.advice == Advice::Profiler && !self.profilers.is_empty() {
            let names: Vec<&str> = self.profilers.keys().map(String::as_str).collect();
            return format!("{} held the counters. {change}", names.join(" and "));
        }
        change
    }

    /// "Straggler: GPU 1. GPU 0 waits on it 20 s (13% of its time) in their collectives …"
    pub fn straggler_lines(&self) -> Vec<String> {
        self.stragglers
            .iter()
            .map(|s| {
                let waiters: Vec<String> = s
                    .waiters
                    .iter()
                    .map(|(g, (sec, of))| {
                        format!(
                            "GPU {g} waits on it {} ({:.0}% of its time)",
                            duration(*sec),
                            100.0 * sec / of.max(1e-9)
                        )
                    })
                    .collect();
                format!(
                    "Straggler: GPU {}{}. {} in their collectives.",
                    s.gpu,
                    ranks_of(&s.ranks),
                    waiters.join("; ")
                )
            })
            .collect()
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
    let share = |s: f64| 100.0 * s / total.max(1e-9);
    let parts: Vec<String> = g
        .by_class
        .iter()
        .take(most)
        .map(|(c, s)| match g.waits_on {
            // Busy is not fast: how far from what the GPU can do.
            _ if *c == Class::LatencyBound && g.latency_peak_pct.is_some() => format!(
                "{:.0}% busy, but at {:.0}% of what the GPU can do",
                share(*s),
                g.latency_peak_pct.unwrap_or(0.0)
            ),
            // The wait on a named straggler is said as such; the rest of the wait as before.
            Some((leader, on)) if *c == Class::SyncWait && on > 0.0 => {
                let on = on.min(*s);
                let mut text = format!("{:.0}% waiting for GPU {leader}, the straggler", share(on));
                if *s - on >= 0.5 {
                    text += &format!(", {:.0}% {}", share(*s - on), words::did(*c));
                }
                text
            }
            _ => format!(
                "{:.0}% {}",
                share(*s),
                words::did_measured(*c, g.dram_pct.get(c).copied())
            ),
        })
        .collect();
    format!("Its time: {}.", parts.join(", "))
}

/// " (rank 3)", " (ranks 0, 1)", or nothing where no rank was read.
fn ranks_of(ranks: &BTreeSet<u32>) -> String {
    match ranks.len() {
        0 => String::new(),
        1 => format!(" (rank {})", gpu_ranges(ranks)),
        _ => format!(" (ranks {})", gpu_ranges(ranks)),
    }
}

impl Incident {
    /// The screen's first line: which GPU, since when, and what to do now.
    pub fn line(&self) -> String {
        let on = self
            .host
            .as_deref()
            .map_or(String::new(), |h| format!(" on {h}"));
        let gpu = |g: u32| {
            let ranks = self.ranks.get(&g).cloned().unwrap_or_default();
            format!("GPU {g}{}", ranks_of(&ranks))
        };
        // "pid 4242 python3", and the `py-spy dump` to run, for the GPUs given.
        let named = |gpus: &BTreeSet<u32>| {
            let all: Vec<(u32, &Option<String>)> = gpus
                .iter()
                .filter_map(|g| self.processes.get(g))
                .flat_map(|p| p.iter().map(|(pid, name)| (*pid, name)))
                .collect();
            let who: Vec<String> = all
                .iter()
                .map(|(pid, name)| match name {
                    Some(n) => format!("pid {pid} {n}"),
                    None => format!("pid {pid}"),
                })
                .collect();
            let dump = match all.as_slice() {
                [(pid, _)] => format!("`py-spy dump --pid {pid}`"),
                _ => "`py-spy dump --pid PID`".to_string(),
            };
            (who, dump)
        };
        let stopped = match self.gpus.iter().next() {
            Some(only) if self.gpus.len() == 1 => format!("{}{on} made no progress", gpu(*only)),
            _ => format!(
                "GPUs {}{on} stopped together and made no progress",
                gpu_ranges(&self.gpus)
            ),
        };
        let mut text = format!(
            "HUNG: {stopped} for {} from {} UTC.",
            duration(self.hung_s),
            utc_hms(self.since)
        );
        // Said in two lines: the change below gives the rest (NCCL_DEBUG, a timeout, restart).
        if self.gpus.len() == 1 {
            let (who, dump) = named(&self.gpus);
            let who = if who.is_empty() {
                String::new()
            } else {
                format!(" of {}", who.join(", "))
            };
            text += &format!(" Now: find the spinning kernel (cuda-gdb, `info cuda kernels`) and the host threads{who} ({dump}).");
        } else if self.culprits.is_empty() {
            let (who, _) = named(&self.gpus);
            let who = if who.is_empty() {
                String::new()
            } else {
                format!(" ({})", who.join(", "))
            };
            text += &format!(
                " Now: `py-spy dump --pid PID` on every rank{who} to find the one that differs."
            );
        } else {
            let culprits: Vec<String> = self.culprits.iter().map(|g| gpu(*g)).collect();
            let (who, dump) = named(&self.culprits);
            let who = if who.is_empty() {
                String::new()
            } else {
                format!(", {},", who.join(", "))
            };
            let verb = if self.culprits.len() == 1 {
                "held its context and never joined"
            } else {
                "held their contexts and never joined"
            };
            text += &format!(
                " Likely culprit: {}{who} {verb}. Now: {dump} on it first, then every rank.",
                culprits.join(", ")
            );
        }
        text
    }
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
            waits_on: None,
            dram_pct: BTreeMap::new(),
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
            severity: Severity::Slack,
            readings: Readings::default(),
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
            incident: None,
            stragglers: Vec::new(),
            profilers: BTreeMap::new(),
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
    fn a_hang_opens_the_screen_naming_the_gpu_its_rank_and_host() {
        let mut s = screen(2, 4);
        s.incident = Some(Incident {
            gpus: BTreeSet::from([0, 1]),
            hung_s: 14.0,
            since: 1796025974.0,
            culprits: BTreeSet::from([1]),
            ranks: BTreeMap::from([(0, BTreeSet::from([0])), (1, BTreeSet::from([1]))]),
            processes: BTreeMap::new(),
            host: Some("node-7".into()),
        });
        s.fixes.insert(
            0,
            Fix {
                severity: Severity::Incident,
                ..fix(9, Class::Hung, 28.0)
            },
        );
        let lines = s.lines(1);
        assert!(lines.len() < SCREEN_LINES, "{lines:?}");
        let text = lines
            .join(" ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            text.starts_with("HUNG: GPUs 0, 1 on node-7 stopped together and made no progress for 14 s from 08:06:14 UTC. Likely culprit: GPU 1 (rank 1) held its context and never joined."),
            "{text}"
        );
        assert!(
            text.contains(
                "Change first (the hang, before any share of time; GPU 1 first; [9] below):"
            ),
            "{text}"
        );
        // Every GPU waiting alike: no culprit, every rank's stack.
        if let Some(i) = s.incident.as_mut() {
            i.culprits.clear();
        }
        let text = s.lines(1).join(" ");
        assert!(
            text.contains("on every rank to find the one that differs"),
            "{text}"
        );
    }

    #[test]
    fn a_hang_names_the_process_of_the_rank_that_never_joined() {
        let one_line = |i: &Incident| i.line().split_whitespace().collect::<Vec<_>>().join(" ");
        let mut incident = Incident {
            gpus: BTreeSet::from([0, 1]),
            hung_s: 14.0,
            since: 1796025974.0,
            culprits: BTreeSet::from([1]),
            ranks: BTreeMap::from([(1, BTreeSet::from([1]))]),
            processes: BTreeMap::from([
                (0, BTreeMap::from([(4241, Some("python3".to_string()))])),
                (1, BTreeMap::from([(4242, Some("python3".to_string()))])),
            ]),
            host: None,
        };
        assert_eq!(
            one_line(&incident),
            "HUNG: GPUs 0, 1 stopped together and made no progress for 14 s from 08:06:14 UTC. Likely culprit: GPU 1 (rank 1), pid 4242 python3, held its context and never joined. Now: `py-spy dump --pid 4242` on it first, then every rank."
        );
        // Every GPU alike: each rank's process is listed, the dump asked of them all.
        incident.culprits.clear();
        assert!(one_line(&incident).ends_with(
            "Now: `py-spy dump --pid PID` on every rank (pid 4241 python3, pid 4242 python3) to find the one that differs."
        ));
        // One GPU, its process unnamed: the pid alone, and the dump for it.
        incident.gpus = BTreeSet::from([0]);
        incident.processes = BTreeMap::from([(0, BTreeMap::from([(7, None)]))]);
        assert!(
            one_line(&incident).ends_with("and the host threads of pid 7 (`py-spy dump --pid 7`).")
        );
        // Without a process list: the placeholder, as before.
        incident.processes.clear();
        assert!(one_line(&incident).ends_with("the host threads (`py-spy dump --pid PID`)."));
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

    /// The "yet" comes at the tiny-kernel rule's own ratio: SM activity under a quarter of
    /// GPU-Util (`launch_intensity_max`), and GPU-Util at half the time or more.
    #[test]
    fn the_readings_say_yet_only_where_the_sms_fill_less_than_gpu_util_suggests() {
        let ratio = Thresholds::default().launch_intensity_max;
        let read = |util: f64, sm: Option<f64>, power: Option<f64>| Readings {
            util_pct: Some(util),
            sm_pct: sm,
            power_w: power,
            tdp_w: Some(700.0),
        };
        assert_eq!(
            read(100.0, Some(0.8), Some(128.0)).sentence().as_deref(),
            Some("Its windows: GPU-Util 100%, yet 0.8% of the SMs active, 128 W of 700 W.")
        );
        let under = read(100.0, Some(100.0 * ratio - 0.1), Some(300.0));
        assert!(under
            .sentence()
            .expect("util")
            .contains(", yet 25% of the SMs active"));
        assert_eq!(
            read(100.0, Some(100.0 * ratio), Some(300.0))
                .sentence()
                .as_deref(),
            Some("Its windows: GPU-Util 100%, SM activity 25%, 300 W of 700 W.")
        );
        // Under half the time resident, few SMs are a starved or idle GPU's, not GPU-Util's lie.
        let starved = read(49.0, Some(1.0), Some(150.0));
        assert!(!starved.sentence().expect("util").contains("yet"));
        assert!(read(50.0, Some(1.0), Some(150.0))
            .sentence()
            .expect("util")
            .contains("yet"));
        // Without GPM: GPU-Util and power only, no claim about the SMs.
        assert_eq!(
            read(100.0, None, Some(128.0)).sentence().as_deref(),
            Some("Its windows: GPU-Util 100%, 128 W of 700 W.")
        );
        assert_eq!(Readings::default().sentence(), None);
    }
}
