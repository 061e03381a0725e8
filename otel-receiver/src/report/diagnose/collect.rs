//! What the report keeps of the windows as they stream in: per GPU its phases (a thinned
//! handful of windows each), its totals per verdict, owners, jobs, health, the timeline's bands
//! and points, what its windows say about its peers, and each remedy's use. Memory is bounded
//! by the number of GPUs, not the length of the run. Every text from outside is escaped here,
//! as a window comes in, so that no renderer needs to care.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::attribution::{GpuProcess, PodContainer};
use crate::diagnosis::{Advice, Class, Spent, WindowReport};
use crate::text;
use crate::thinned::Thinned;

use super::HumanReport;
use crate::report::health::Health;
use crate::report::ranking::{PeerFacts, Settle};
use crate::report::timeline::{Band, Point};

/// Windows kept per phase for its figures: evenly spread over the phase, however long.
const KEPT_PER_PHASE: usize = 16;

/// Phases kept per GPU; later ones count in the totals and the timeline's tail only, so that
/// a trace that changes verdict every window cannot grow the report without bound.
const MAX_PHASES: usize = 200;

/// Points of the timeline's curves kept per GPU, evenly thinned.
const KEPT_POINTS: usize = 1200;

/// Bands of the timeline kept per GPU: past this, neighbours are merged in pairs, so that the
/// picture covers the whole run at a coarser grain rather than its first phases only.
const MAX_BANDS: usize = 2000;

/// Merges neighbouring bands in pairs, each pair taking the class that held longer, then joins
/// neighbours of one class: half the bands, the same span.
fn coarsen(bands: &mut Vec<Band>) {
    let mut merged: Vec<Band> = Vec::with_capacity(bands.len() / 2 + 1);
    for pair in bands.chunks(2) {
        let band = match pair {
            [a, b] => Band {
                start: a.start,
                end: b.end,
                class: if a.end - a.start >= b.end - b.start {
                    a.class
                } else {
                    b.class
                },
            },
            [a] => *a,
            _ => continue,
        };
        match merged.last_mut() {
            Some(last) if last.class == band.class => last.end = band.end,
            _ => merged.push(band),
        }
    }
    *bands = merged;
}

/// Owners remembered per GPU and per phase: a churn of short processes cannot grow memory.
const MAX_OWNERS: usize = 16;

/// A running mean that ignores what was not sampled.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Mean {
    sum: f64,
    n: u32,
}

impl Mean {
    pub(super) fn add(&mut self, v: Option<f64>) {
        if let Some(v) = v {
            self.sum += v;
            self.n += 1;
        }
    }
    pub(super) fn get(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

/// One verdict's totals on one GPU, over every window: exact, whatever was thinned.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ClassTotals {
    pub(super) seconds: f64,
    pub(super) energy_j: f64,
    pub(super) phases: usize,
    pub(super) power_w: Mean,
    pub(super) util_pct: Mean,
    pub(super) sm_pct: Mean,
    /// The headroom's figure (% of peak): how near its peak the nearest unit ran.
    pub(super) headroom_pct: Mean,
    pub(super) dram_pct: Mean,
    pub(super) occupancy_pct: Mean,
}

/// Seconds an owner was seen, the verdicts it was seen in, its identity as recorded.
pub(super) type Owned = (f64, BTreeSet<Class>, Identity);

/// Who an owner is, as recorded: the JSON's `process` or `pod` object beside its label.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Identity {
    /// Boxed: a process is five times a pod's size.
    Process(Box<GpuProcess>),
    Pod(PodContainer),
}

/// Who held a GPU, and in which verdicts.
#[derive(Debug, Clone, Default)]
pub(super) struct Owners {
    /// Label → seconds seen, verdicts seen in, and the identity as recorded (for the JSON).
    pub(super) seen: BTreeMap<String, Owned>,
    /// More owners than were remembered.
    pub(super) more: usize,
}

impl Owners {
    pub(super) fn add(&mut self, label: String, seconds: f64, class: Class, identity: Identity) {
        if let Some(e) = self.seen.get_mut(&label) {
            e.0 += seconds;
            e.1.insert(class);
        } else if self.seen.len() < MAX_OWNERS {
            self.seen
                .insert(label, (seconds, BTreeSet::from([class]), identity));
        } else {
            self.more += 1;
        }
    }

    pub(super) fn add_window(&mut self, w: &WindowReport) {
        let seconds = w.stats.duration_s();
        for p in w.stats.processes.iter().flat_map(|p| p.iter()) {
            self.add(
                process_label(p),
                seconds,
                w.class,
                Identity::Process(Box::new(p.clone())),
            );
        }
        for p in w.stats.pods.iter().flat_map(|p| p.iter()) {
            self.add(pod_label(p), seconds, w.class, Identity::Pod(p.clone()));
        }
    }

    /// Longest held first.
    pub(super) fn ranked(&self) -> Vec<(&String, &Owned)> {
        let mut v: Vec<_> = self.seen.iter().collect();
        v.sort_by(|a, b| (b.1).0.total_cmp(&(a.1).0));
        v
    }
}

/// Every text of a window that came from outside (the job, its processes' names, users, Slurm
/// fields and container, its pods), escaped and capped by `text::name` as the report takes the
/// window in: every form of the report (text, JSON, HTML) then shows it safely, and no format
/// site needs to care.
fn escape_outside_text(report: &mut WindowReport) {
    text::clean_opt_name(&mut report.job);
    text::clean_opt_name(&mut report.profile_origin);
    // The lists are shared between windows: copied only where a name needs escaping.
    if let Some(list) = &mut report.stats.processes {
        let dirty = |p: &GpuProcess| {
            let i = &p.identity;
            [
                &p.name,
                &p.user,
                &p.container_id,
                &p.pod_uid,
                &p.slurm_job,
                &i.job_key,
                &i.slurm_step,
                &i.slurm_array_task,
                &i.slurm_user,
                &i.slurm_account,
                &i.slurm_partition,
                &p.profiler,
            ]
            .into_iter()
            .any(needs_escape)
        };
        if list.iter().any(dirty) {
            for p in std::sync::Arc::make_mut(list) {
                for field in process_texts(p) {
                    text::clean_opt_name(field);
                }
            }
        }
    }
    if let Some(list) = &mut report.stats.pods {
        let dirty = |p: &PodContainer| {
            [&p.pod, &p.namespace, &p.container]
                .into_iter()
                .any(|t| matches!(text::name(t), std::borrow::Cow::Owned(_)))
        };
        if list.iter().any(dirty) {
            for p in std::sync::Arc::make_mut(list) {
                for field in [&mut p.pod, &mut p.namespace, &mut p.container] {
                    text::clean_name(field);
                }
            }
        }
    }
}

/// Whether a name must be escaped or cut to be shown.
fn needs_escape(t: &Option<String>) -> bool {
    t.as_deref()
        .is_some_and(|t| matches!(text::name(t), std::borrow::Cow::Owned(_)))
}

/// The texts of a process that came from outside (the same as `dirty` reads above).
fn process_texts(p: &mut GpuProcess) -> [&mut Option<String>; 12] {
    [
        &mut p.name,
        &mut p.user,
        &mut p.container_id,
        &mut p.pod_uid,
        &mut p.slurm_job,
        &mut p.identity.job_key,
        &mut p.identity.slurm_step,
        &mut p.identity.slurm_array_task,
        &mut p.identity.slurm_user,
        &mut p.identity.slurm_account,
        &mut p.identity.slurm_partition,
        &mut p.profiler,
    ]
}

/// "pid 717 python3 (user root, pgid 715, container 0123456789ab, Slurm job 42)".
pub fn process_label(p: &GpuProcess) -> String {
    let mut s = format!("pid {}", p.pid);
    if let Some(name) = &p.name {
        s += &format!(" {name}");
    }
    let mut more = Vec::new();
    if let Some(user) = &p.user {
        more.push(format!("user {user}"));
    }
    if let Some(job) = &p.slurm_job {
        more.push(format!("Slurm job {job}"));
    }
    if let Some(uid) = &p.pod_uid {
        more.push(format!("pod {uid}"));
    }
    if let Some(id) = &p.container_id {
        more.push(format!(
            "container {}",
            id.chars().take(12).collect::<String>()
        ));
    }
    if let Some(pgid) = p.pgid.filter(|g| *g != p.pid) {
        more.push(format!("pgid {pgid}"));
    }
    if !more.is_empty() {
        s += &format!(" ({})", more.join(", "));
    }
    s
}

/// "pod ns/name, container c".
pub fn pod_label(p: &PodContainer) -> String {
    format!("pod {}/{}, container {}", p.namespace, p.pod, p.container)
}

/// A run of consecutive windows of one GPU with the same class: its span, its count and energy
/// exactly, its figures from an evenly thinned subset of its windows.
#[derive(Debug)]
pub(super) struct Phase {
    pub(super) class: Class,
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) count: usize,
    pub(super) energy_j: f64,
    pub(super) windows: Thinned<WindowReport>,
    pub(super) owners: Owners,
}

impl Phase {
    pub(super) fn new(report: WindowReport) -> Phase {
        let mut phase = Phase {
            class: report.class,
            start: report.stats.start,
            end: report.stats.end,
            count: 0,
            energy_j: 0.0,
            windows: Thinned::new(KEPT_PER_PHASE),
            owners: Owners::default(),
        };
        phase.add(report);
        phase
    }

    pub(super) fn add(&mut self, report: WindowReport) {
        self.end = report.stats.end;
        self.count += 1;
        self.energy_j += report.energy_j();
        self.owners.add_window(&report);
        self.windows.push(report);
    }

    pub(super) fn kept(&self) -> &[WindowReport] {
        self.windows.values()
    }

    pub(super) fn seconds(&self) -> f64 {
        self.end - self.start
    }

    pub(super) fn mean(&self, f: impl Fn(&WindowReport) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = self.kept().iter().filter_map(f).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }
    pub(super) fn max(&self, f: impl Fn(&WindowReport) -> Option<f64>) -> Option<f64> {
        self.kept().iter().filter_map(f).reduce(f64::max)
    }
    /// The window in the middle of the phase: settled, away from the transitions.
    pub(super) fn representative(&self) -> &WindowReport {
        let kept = self.kept();
        &kept[kept.len() / 2]
    }
}

/// One GPU's phases and totals.
#[derive(Debug)]
pub(super) struct GpuReport {
    pub(super) phases: Vec<Phase>,
    /// Phases past [`MAX_PHASES`], counted only.
    pub(super) more_phases: usize,
    /// The class of the last window added.
    pub(super) last_class: Option<Class>,
    pub(super) by_class: BTreeMap<Class, ClassTotals>,
    pub(super) health: Health,
    pub(super) points: Thinned<Point>,
    /// The timeline's bands: one per phase until [`MAX_BANDS`], coarser past it.
    pub(super) bands: Vec<Band>,
    pub(super) owners: Owners,
    /// Whether any window said who held the GPU (a `processes` column, a live source).
    pub(super) processes_sampled: bool,
    pub(super) jobs: BTreeSet<String>,
    pub(super) tdp_w: Option<f64>,
    /// Whether SM activity (GPM) was sampled: the curve shows GPU-Util otherwise.
    pub(super) sm_sampled: bool,
    /// Its windows' time per remedy, start-up, tear-down and transitions set aside.
    pub(super) settle: Settle,
    /// What its windows say about its peers: a hang, whom it waits on, its ranks.
    pub(super) peers: PeerFacts,
}

impl Default for GpuReport {
    fn default() -> Self {
        GpuReport {
            phases: Vec::new(),
            more_phases: 0,
            last_class: None,
            by_class: BTreeMap::new(),
            health: Health::default(),
            points: Thinned::new(KEPT_POINTS),
            bands: Vec::new(),
            owners: Owners::default(),
            processes_sampled: false,
            jobs: BTreeSet::new(),
            tdp_w: None,
            sm_sampled: false,
            settle: Settle::default(),
            peers: PeerFacts::default(),
        }
    }
}

impl GpuReport {
    pub(super) fn seconds(&self) -> f64 {
        self.by_class.values().map(|t| t.seconds).sum()
    }
}

/// A remedy and where it applied: each is printed once, and the ranked fixes refer to it.
#[derive(Debug, Clone, Default)]
pub(super) struct RemedyUse {
    /// Which advice it is, for its one-line instruction.
    pub(super) advice: Advice,
    /// Seconds per class it was the remedy of.
    pub(super) seconds: BTreeMap<Class, f64>,
    pub(super) energy_j: f64,
    pub(super) gpus: BTreeSet<u32>,
    /// Means over its windows: what the first screen shows beside the change.
    pub(super) util_pct: Mean,
    pub(super) sm_pct: Mean,
    pub(super) power_w: Mean,
}

impl RemedyUse {
    pub(super) fn seconds(&self) -> f64 {
        self.seconds.values().sum()
    }
    /// The class it was most often the remedy of.
    pub(super) fn class(&self) -> Class {
        self.seconds
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(Class::Idle, |(c, _)| *c)
    }
}

impl HumanReport {
    /// Adds one window: to its verdict's totals, its phase, the GPU's health, owners and
    /// timeline, and its remedy's use.
    pub fn add(&mut self, mut report: WindowReport) {
        escape_outside_text(&mut report);
        let gpu_index = report.stats.gpu;
        let gpu = self.gpus.entry(gpu_index).or_default();
        let seconds = report.stats.duration_s();
        let energy_j = report.energy_j();
        let same = gpu.last_class == Some(report.class);
        {
            let t = gpu.by_class.entry(report.class).or_default();
            t.seconds += seconds;
            t.energy_j += energy_j;
            if !same {
                t.phases += 1;
            }
            t.power_w.add(report.signals.power_w);
            t.util_pct.add(report.signals.util_pct);
            t.sm_pct.add(report.signals.sm_pct);
            t.headroom_pct
                .add(report.headroom.map(|h| h.fraction * 100.0));
            t.dram_pct.add(report.signals.dram_pct);
            t.occupancy_pct.add(report.signals.occupancy_pct);
        }
        let remedy = self.remedies.entry(report.remedy()).or_default();
        remedy.advice = report.advice;
        *remedy.seconds.entry(report.class).or_default() += seconds;
        remedy.energy_j += energy_j;
        remedy.gpus.insert(gpu_index);
        remedy.util_pct.add(report.signals.util_pct);
        remedy.sm_pct.add(report.signals.sm_pct);
        remedy.power_w.add(report.signals.power_w);
        gpu.health.add(&report);
        gpu.settle.add(&report);
        gpu.peers.add(&report);
        gpu.owners.add_window(&report);
        gpu.processes_sampled |= report.stats.processes.is_some() || report.stats.pods.is_some();
        if let Some(job) = &report.job {
            if gpu.jobs.len() < MAX_OWNERS {
                gpu.jobs.insert(job.clone());
            }
        }
        gpu.tdp_w = gpu.tdp_w.or(report.tdp_w);
        gpu.sm_sampled |= report.signals.sm_pct.is_some();
        gpu.points.push(Point {
            t: report.stats.midpoint(),
            power_w: report.signals.power_w,
            activity_pct: report.signals.sm_pct.or(report.signals.util_pct),
            util_pct: report.signals.util_pct,
        });
        match gpu.bands.last_mut() {
            Some(band) if same => band.end = report.stats.end,
            _ => {
                gpu.bands.push(Band {
                    start: report.stats.start,
                    end: report.stats.end,
                    class: report.class,
                });
                if gpu.bands.len() > MAX_BANDS {
                    coarsen(&mut gpu.bands);
                }
            }
        }
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
    pub fn retain_gpus(&mut self, keep: &BTreeSet<u32>) {
        self.gpus.retain(|gpu, _| keep.contains(gpu));
        for r in self.remedies.values_mut() {
            r.gpus.retain(|g| keep.contains(g));
        }
        self.remedies.retain(|_, r| !r.gpus.is_empty());
    }

    /// The GPUs reported on.
    pub fn gpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.gpus.keys().copied()
    }

    /// Time and energy per verdict, per GPU.
    pub fn spent(&self) -> BTreeMap<u32, BTreeMap<Class, Spent>> {
        self.gpus
            .iter()
            .map(|(gpu, r)| {
                let spent = r
                    .by_class
                    .iter()
                    .map(|(c, t)| {
                        (
                            *c,
                            Spent {
                                seconds: t.seconds,
                                energy_j: t.energy_j,
                            },
                        )
                    })
                    .collect();
                (*gpu, spent)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarsening_halves_the_bands_and_keeps_the_span() {
        let class = |i: usize| {
            if i.is_multiple_of(3) {
                Class::Idle
            } else {
                Class::ComputeBound
            }
        };
        let mut bands: Vec<Band> = (0..10)
            .map(|i| Band {
                start: i as f64,
                end: i as f64 + 1.0,
                class: class(i),
            })
            .collect();
        coarsen(&mut bands);
        assert!(bands.len() <= 5);
        assert_eq!(bands.first().map(|b| b.start), Some(0.0));
        assert_eq!(bands.last().map(|b| b.end), Some(10.0));
        assert!(bands
            .windows(2)
            .all(|w| w[0].end == w[1].start && w[0].class != w[1].class));
    }
}
