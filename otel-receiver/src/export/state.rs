//! The latest verdict and readings of every GPU, as the exporters see them. The pipeline writes
//! one window at a time; the OTLP reader and the Prometheus endpoint read whenever they
//! collect. Its size is fixed by the number of GPUs, so a stalled exporter never makes it grow.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::delivery::Delivery;
use super::point::{job_attributes, owner_attributes, Attributes, Point};
use super::selection::{Selection, Shape};
use crate::device::DeviceFacts;
use crate::diagnosis::{Class, Spent, WindowReport};
use crate::sample::Metric;
use crate::sample::PodContainer;

/// A counter that keeps counting from the agent's start across resets of the one it follows:
/// NVML's energy and error counters count since the driver loaded, so exporting them as they
/// are would send a delta backend one huge first point at every agent restart, and a driver
/// reload (the counter back near zero) a negative "monotonic" delta.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SinceStart {
    last: Option<f64>,
    total: f64,
}

impl SinceStart {
    /// Takes in a reading of the followed counter.
    pub fn observe(&mut self, reading: f64) {
        if let Some(last) = self.last {
            // Below the last reading, the counter restarted from zero: all of it is new.
            self.total += if reading >= last {
                reading - last
            } else {
                reading
            };
        }
        self.last = Some(reading);
    }

    /// How much the followed counter rose since the first reading.
    pub fn total(&self) -> f64 {
        self.total
    }

    /// Whether a reading was ever taken in.
    pub fn seen(&self) -> bool {
        self.last.is_some()
    }
}

/// The error counters exported as `hw.errors`, counted from the agent's start.
pub const COUNTED_ERRORS: [Metric; 7] = [
    Metric::EccVolatileCorrected,
    Metric::EccVolatileUncorrected,
    Metric::PcieReplays,
    Metric::NvlinkCrcErrors,
    Metric::NvlinkReplayErrors,
    Metric::NvlinkRecoveryErrors,
    Metric::XidEvents,
];

/// What a GPU's counters rose by while one owner held it (or nobody did).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    pub energy_j: f64,
    pub pcie_rx_bytes: f64,
    pub pcie_tx_bytes: f64,
    pub nvlink_rx_bytes: f64,
    pub nvlink_tx_bytes: f64,
    /// The errors of [`COUNTED_ERRORS`], in that order.
    pub errors: [f64; COUNTED_ERRORS.len()],
    /// Time and energy per verdict: the cost of slack.
    pub spent: BTreeMap<Class, Spent>,
}

/// Owners whose counters a GPU keeps, by default: a counter series is named by its owner's
/// attributes (`process.pid`, `container.id`, `k8s.pod.uid`, `gpuslack.job.id`), so each owner
/// gets counters of its own that rise only while it holds the GPU, and the owners' series add
/// up to the GPU's total. Were one series to change its name instead, its first point under the
/// new owner would carry everything since the agent started: a delta backend would count it
/// twice. Past this many, the owner with the least GPU time (never the current one) is folded
/// into the GPU's `other` owner: its series end, and `other` rises by what it had, so the sums
/// still add up. With "nobody" and `other`, a GPU carries at most this many plus two owners'
/// counters, whatever the churn (docs/EXPORT.md, "Series budget").
pub const DEFAULT_OWNER_SERIES: usize = 4;

/// The owner that former owners are folded into.
pub const OTHER_OWNER: (&str, &str) = ("gpuslack.owner", "other");

/// Windows a new verdict must hold before it is announced: idle ↔ idle_held and other
/// borderline pairs otherwise flap with every window. The series carry every window's verdict.
pub const ANNOUNCE_AFTER_WINDOWS: u32 = 3;

impl Counters {
    /// Adds everything `other` counted: a former owner folded into `other`.
    fn absorb(&mut self, other: &Counters) {
        self.energy_j += other.energy_j;
        self.pcie_rx_bytes += other.pcie_rx_bytes;
        self.pcie_tx_bytes += other.pcie_tx_bytes;
        self.nvlink_rx_bytes += other.nvlink_rx_bytes;
        self.nvlink_tx_bytes += other.nvlink_tx_bytes;
        for (mine, theirs) in self.errors.iter_mut().zip(other.errors) {
            *mine += theirs;
        }
        for (class, spent) in &other.spent {
            let mine = self.spent.entry(*class).or_default();
            mine.seconds += spent.seconds;
            mine.energy_j += spent.energy_j;
        }
    }

    /// What `self` counted beyond `exported`: the part of an owner's counts no export carried.
    fn minus(&self, exported: &Counters) -> Counters {
        let mut rest = self.clone();
        rest.energy_j -= exported.energy_j;
        rest.pcie_rx_bytes -= exported.pcie_rx_bytes;
        rest.pcie_tx_bytes -= exported.pcie_tx_bytes;
        rest.nvlink_rx_bytes -= exported.nvlink_rx_bytes;
        rest.nvlink_tx_bytes -= exported.nvlink_tx_bytes;
        for (mine, theirs) in rest.errors.iter_mut().zip(exported.errors) {
            *mine -= theirs;
        }
        for (class, spent) in &exported.spent {
            let mine = rest.spent.entry(*class).or_default();
            mine.seconds -= spent.seconds;
            mine.energy_j -= spent.energy_j;
        }
        rest
    }

    /// GPU time held, the ranking of owners.
    fn seconds(&self) -> f64 {
        self.spent.values().map(|s| s.seconds).sum()
    }
}

/// One owner's counters, and when it last held the GPU (the end of its last window).
#[derive(Debug, Clone)]
struct Owned {
    owner: Attributes,
    counters: Counters,
    /// The counters as the last collection (an OTLP export, a scrape) carried them: the lean
    /// shape ends a former owner's series once they equal `counters`.
    exported: Counters,
    last_end: f64,
}

/// One GPU's exported view.
#[derive(Debug, Clone)]
pub struct GpuView {
    pub gpu: u32,
    pub facts: DeviceFacts,
    pub report: WindowReport,
    /// Energy (J) since the agent started: NVML's counter followed from its first reading where
    /// it is sampled, else the integral of window power.
    energy: SinceStart,
    energy_from_counter: bool,
    /// Energy integrated from window power, for GPUs without the counter.
    energy_integrated_j: f64,
    /// The error counters of [`COUNTED_ERRORS`], in that order, since the agent started.
    errors: [SinceStart; COUNTED_ERRORS.len()],
    /// The counters split by owner, the current one last touched.
    owned: Vec<Owned>,
    /// Every counter of the GPU since the agent started, whoever held it: the lean shape's
    /// GPU-level counters (PCIe and NVLink bytes, errors).
    total: Counters,
    /// Whether each metric was ever read above zero: the lean shape makes no series of a
    /// health count or an engine that never moved.
    ever_nonzero: [bool; Metric::COUNT],
    /// The clock-event reasons ever seen (bit i: the i-th of the window's reasons).
    throttle_seen: u64,
    /// The export state's window count when this GPU last took one in.
    last_gen: u64,
    /// The last reading of each metric read more slowly than windows close (health counters
    /// every 10 s, memory temperature and encoder use every second): its latest window max.
    held: [Option<f64>; Metric::COUNT],
    /// The verdict last announced, and a different one waiting to hold long enough.
    announced: Class,
    pending: Option<(Class, u32)>,
    /// What `gpuslack.job.info` says of the GPU: its job's attributes and state.
    job: Option<JobSeen>,
    /// Xid events since the agent started, by code ([`GpuView::xid_codes`]).
    xid_codes: BTreeMap<String, f64>,
    /// The NVLinks as last read (every 10 s, so most windows have none of their own).
    nvlinks: Option<Arc<Vec<crate::sample::NvlinkLink>>>,
    /// The PCIe link's shortfall as judged in the last window that read the link (every
    /// 10 s): held between reads, so that `hw.status` does not flap with the windows.
    link_shortfall: Option<crate::hw_health::LinkShortfall>,
}

/// Xid codes a GPU keeps a series of its own for; later codes are counted under `other`. A
/// failing GPU shows two or three codes; this bounds what a flapping driver can make.
pub const MAX_XID_CODES: usize = 8;

/// A GPU's job as the job info point reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSeen {
    /// The job's attributes ([`job_attributes`]), as last seen while a process held the GPU.
    pub attributes: Attributes,
    /// `running` while a process holds the GPU; `allocated_idle` once none does but the kubelet
    /// still assigns the GPU to the same pods: the rank died (or never started) and its GPU
    /// sits allocated and empty, which no verdict of the GPU alone tells from a job's end.
    pub state: &'static str,
    /// The pods the kubelet assigned the GPU to while the job held it.
    pods: Option<Vec<PodContainer>>,
}

impl JobSeen {
    /// The job while a process holds the GPU.
    pub const RUNNING: &'static str = "running";
    /// The job's GPU, assigned and empty.
    pub const ALLOCATED_IDLE: &'static str = "allocated_idle";
}

impl GpuView {
    fn new(gpu: u32, facts: &DeviceFacts, report: &WindowReport) -> GpuView {
        GpuView {
            gpu,
            facts: facts.clone(),
            report: report.clone(),
            energy: SinceStart::default(),
            energy_from_counter: report.stats.energy_total_mj.is_some(),
            energy_integrated_j: 0.0,
            errors: [SinceStart::default(); COUNTED_ERRORS.len()],
            owned: Vec::new(),
            total: Counters::default(),
            ever_nonzero: [false; Metric::COUNT],
            throttle_seen: 0,
            last_gen: 0,
            held: [None; Metric::COUNT],
            announced: report.class,
            pending: None,
            job: None,
            xid_codes: BTreeMap::new(),
            nvlinks: None,
            link_shortfall: None,
        }
    }

    /// The GPU's job, for its `gpuslack.job.info` point: `None` when no job holds it and the
    /// kubelet assigns it to none.
    pub fn job(&self) -> Option<&JobSeen> {
        self.job.as_ref()
    }

    /// Follows the GPU's job across a window: the job of its processes; else, where the kubelet
    /// still assigns the GPU to the pods the last job ran in, that job, allocated and idle;
    /// else, assigned to pods no job was seen in, the pods alone.
    fn follow_job(&mut self, report: &WindowReport) {
        let pods = report.stats.pods.as_deref().filter(|p| !p.is_empty());
        let held = report
            .stats
            .processes
            .as_deref()
            .is_some_and(|p| !p.is_empty());
        if let Some(attributes) = job_attributes(report).filter(|_| held) {
            self.job = Some(JobSeen {
                attributes,
                state: JobSeen::RUNNING,
                pods: pods.cloned(),
            });
            return;
        }
        let Some(pods) = pods.filter(|_| !held) else {
            self.job = None;
            return;
        };
        match &mut self.job {
            Some(seen) if seen.pods.as_ref() == Some(pods) => seen.state = JobSeen::ALLOCATED_IDLE,
            _ => {
                let mut attributes = Attributes::new();
                if let Some(pod) = crate::attribution::pod_owner_of(pods) {
                    attributes.push(("k8s.pod.name", pod.pod.to_string()));
                    attributes.push(("k8s.namespace.name", pod.namespace.to_string()));
                }
                self.job = Some(JobSeen {
                    attributes,
                    state: JobSeen::ALLOCATED_IDLE,
                    pods: Some(pods.clone()),
                });
            }
        }
    }

    /// `metric`'s maximum in the latest window that read it.
    pub fn held(&self, metric: Metric) -> Option<f64> {
        self.held[metric as usize]
    }

    /// Xid events since the agent started by code (`"79"`, `"other"`). NVML's count and last
    /// code are read together once a second: each rise of the count is filed under the last
    /// code of its window (the highest, where a window read two), so two Xids of different codes
    /// within one read are both filed under one.
    pub fn xid_codes(&self) -> impl Iterator<Item = (&str, f64)> {
        self.xid_codes.iter().map(|(code, n)| (code.as_str(), *n))
    }

    /// The PCIe link below its maximum, as judged where it was last read.
    pub fn link_shortfall(&self) -> Option<crate::hw_health::LinkShortfall> {
        self.link_shortfall
    }

    /// Each NVLink's state and error counts, as last read.
    pub fn nvlinks(&self) -> &[crate::sample::NvlinkLink] {
        self.nvlinks.as_deref().map_or(&[], |l| l.as_slice())
    }

    /// Files `n` new Xid events under `code`.
    fn count_xid(&mut self, code: Option<f64>, n: f64) {
        let code = match code.filter(|c| *c > 0.0) {
            Some(c) => format!("{c:.0}"),
            None => "unknown".to_string(),
        };
        let key = if self.xid_codes.contains_key(&code) || self.xid_codes.len() < MAX_XID_CODES {
            code
        } else {
            "other".to_string()
        };
        *self.xid_codes.entry(key).or_default() += n;
    }

    /// Whether the error counter `i` of [`COUNTED_ERRORS`] was ever read.
    pub fn error_counted(&self, i: usize) -> bool {
        self.errors[i].seen()
    }

    /// Energy (J) since the agent started.
    pub fn energy_j(&self) -> f64 {
        if self.energy_from_counter {
            self.energy.total()
        } else {
            self.energy_integrated_j
        }
    }

    /// Every counter of the GPU since the agent started, whoever held it.
    pub fn total(&self) -> &Counters {
        &self.total
    }

    /// Whether `metric` was ever read above zero.
    pub fn ever_nonzero(&self, metric: Metric) -> bool {
        self.ever_nonzero[metric as usize]
    }

    /// Whether the `i`-th clock-event reason of a window's shares was ever seen.
    pub fn throttle_seen(&self, i: usize) -> bool {
        i < 64 && self.throttle_seen & (1 << i) != 0
    }

    /// Each owner's attributes (empty: nobody held the GPU) and its counters.
    pub fn owners(&self) -> impl Iterator<Item = (&Attributes, &Counters)> {
        self.owned.iter().map(|o| (&o.owner, &o.counters))
    }

    /// The lean shape's owners: the current one, the owner-less series (nobody held the GPU, and
    /// what no export carried of a former owner), and at most one former owner whose last
    /// counts no collection has carried yet. A former owner's series end once a collection
    /// carried their last value: the backend keeps that value, so a sum over a range still adds
    /// up, and nothing is counted twice (no series takes over what another already exported).
    fn lean_counters_of(&mut self, report: &WindowReport) -> &mut Counters {
        let owner = owner_attributes(report);
        let former = |o: &Owned| !o.owner.is_empty() && o.owner != owner;
        self.owned
            .retain(|o| !(former(o) && o.counters == o.exported));
        loop {
            let waiting: Vec<usize> = (0..self.owned.len())
                .filter(|i| former(&self.owned[*i]))
                .collect();
            let Some(oldest) = waiting
                .iter()
                .copied()
                .min_by(|a, b| self.owned[*a].last_end.total_cmp(&self.owned[*b].last_end))
                .filter(|_| waiting.len() > 1)
            else {
                break;
            };
            let gone = self.owned.remove(oldest);
            let rest = gone.counters.minus(&gone.exported);
            match self.owned.iter_mut().find(|o| o.owner.is_empty()) {
                Some(o) => o.counters.absorb(&rest),
                None => self.owned.push(Owned {
                    owner: Attributes::new(),
                    counters: rest,
                    exported: Counters::default(),
                    last_end: gone.last_end,
                }),
            }
        }
        let i = match self.owned.iter().position(|o| o.owner == owner) {
            Some(i) => i,
            None => {
                self.owned.push(Owned {
                    owner,
                    counters: Counters::default(),
                    exported: Counters::default(),
                    last_end: report.stats.end,
                });
                self.owned.len() - 1
            }
        };
        self.owned[i].last_end = report.stats.end;
        &mut self.owned[i].counters
    }

    /// The counters of the owner of `report`'s window, made if it is new; past `kept` owners
    /// (besides "nobody" and `other`), the one with the least GPU time is folded into `other`.
    fn counters_of(&mut self, report: &WindowReport, kept: usize) -> &mut Counters {
        let owner = owner_attributes(report);
        let i = match self.owned.iter().position(|o| o.owner == owner) {
            Some(i) => i,
            None => {
                let other = vec![(OTHER_OWNER.0, OTHER_OWNER.1.to_string())];
                let named = |o: &Owned| !o.owner.is_empty() && o.owner != other;
                while !owner.is_empty() && self.owned.iter().filter(|o| named(o)).count() >= kept {
                    let Some(least) = (0..self.owned.len())
                        .filter(|i| named(&self.owned[*i]))
                        .min_by(|a, b| {
                            let (a, b) = (&self.owned[*a], &self.owned[*b]);
                            a.counters
                                .seconds()
                                .total_cmp(&b.counters.seconds())
                                .then(a.last_end.total_cmp(&b.last_end))
                        })
                    else {
                        break;
                    };
                    let gone = self.owned.remove(least);
                    match self.owned.iter_mut().find(|o| o.owner == other) {
                        Some(o) => o.counters.absorb(&gone.counters),
                        None => self.owned.push(Owned {
                            owner: other.clone(),
                            counters: gone.counters,
                            exported: Counters::default(),
                            last_end: gone.last_end,
                        }),
                    }
                }
                self.owned.push(Owned {
                    owner,
                    counters: Counters::default(),
                    exported: Counters::default(),
                    last_end: report.stats.end,
                });
                self.owned.len() - 1
            }
        };
        self.owned[i].last_end = report.stats.end;
        &mut self.owned[i].counters
    }

    /// Takes in one window's readings; `kept` owners keep counters of their own (the full
    /// shape). `collected` is the window count at the last collection, `gen` this window's.
    fn add(&mut self, report: &WindowReport, kept: usize, shape: Shape, collected: u64, gen: u64) {
        // A collection since this GPU's last window carried every owner's counts as they are.
        if self.last_gen > 0 && collected >= self.last_gen {
            for o in &mut self.owned {
                o.exported.clone_from(&o.counters);
            }
        }
        self.last_gen = gen;
        let stats = &report.stats;
        let seconds = stats.duration_s();
        let s = &report.signals;
        let energy_before = self.energy_j();
        // The first window's energy counts from its first reading, not its last.
        if let Some(first) = stats.energy_first_mj.filter(|_| !self.energy.seen()) {
            self.energy.observe(first / 1000.0);
        }
        if let Some(mj) = stats.energy_total_mj {
            self.energy.observe(mj / 1000.0);
        }
        self.energy_integrated_j += report.energy_j();
        let energy_delta = self.energy_j() - energy_before;
        let mut error_deltas = [0.0; COUNTED_ERRORS.len()];
        for ((counter, metric), delta) in self
            .errors
            .iter_mut()
            .zip(COUNTED_ERRORS)
            .zip(&mut error_deltas)
        {
            if let Some(v) = stats.max(metric) {
                let before = counter.total();
                counter.observe(v);
                *delta = counter.total() - before;
            }
        }
        for metric in Metric::ALL {
            if let Some(v) = stats.max(metric) {
                self.held[metric as usize] = Some(v);
                self.ever_nonzero[metric as usize] |= v > 0.0;
            }
        }
        if stats.clock_reasons.samples() > 0 {
            for (i, (_, share)) in stats.clock_reasons.shares().enumerate() {
                if share > 0.0 && i < 64 {
                    self.throttle_seen |= 1 << i;
                }
            }
        }
        if stats.max(Metric::PcieLinkGen).is_some() {
            self.link_shortfall = crate::hw_health::link_shortfall(stats);
        }
        if stats.nvlinks.is_some() {
            self.nvlinks.clone_from(&stats.nvlinks);
        }
        if let Some(i) = COUNTED_ERRORS.iter().position(|m| *m == Metric::XidEvents) {
            if error_deltas[i] > 0.0 {
                self.count_xid(stats.max(Metric::XidLast), error_deltas[i]);
            }
        }
        let count = |c: &mut Counters| {
            c.energy_j += energy_delta;
            c.pcie_rx_bytes += s.pcie_rx_mib_s.unwrap_or(0.0) * MIB * seconds;
            c.pcie_tx_bytes += s.pcie_tx_mib_s.unwrap_or(0.0) * MIB * seconds;
            c.nvlink_rx_bytes += s.nvlink_rx_mib_s.unwrap_or(0.0) * MIB * seconds;
            c.nvlink_tx_bytes += s.nvlink_tx_mib_s.unwrap_or(0.0) * MIB * seconds;
            for (total, delta) in c.errors.iter_mut().zip(error_deltas) {
                *total += delta;
            }
            c.spent.entry(report.class).or_default().add(report);
        };
        count(&mut self.total);
        count(match shape {
            Shape::Full => self.counters_of(report, kept),
            Shape::Lean => self.lean_counters_of(report),
        });
        self.follow_job(report);
        self.report = report.clone();
    }

    /// The change to announce after this window, if the new verdict has held long enough.
    fn announce(&mut self) -> Option<ClassChange> {
        let class = self.report.class;
        if class == self.announced {
            self.pending = None;
            return None;
        }
        let held = match self.pending {
            Some((pending, n)) if pending == class => n + 1,
            _ => 1,
        };
        if held < ANNOUNCE_AFTER_WINDOWS {
            self.pending = Some((class, held));
            return None;
        }
        let from = std::mem::replace(&mut self.announced, class);
        self.pending = None;
        Some(ClassChange {
            gpu: self.gpu,
            from: Some(from),
            to: class,
        })
    }
}

/// A GPU whose verdict changed: what the log records announce.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassChange {
    pub gpu: u32,
    pub from: Option<Class>,
    pub to: Class,
}

#[derive(Debug, Default)]
pub struct ExportState {
    gpus: BTreeMap<u32, GpuView>,
    /// What became of what the agent produced: exported beside the GPUs' metrics.
    delivery: Arc<Delivery>,
    /// When the last window arrived, for `/healthz`.
    last_window: Option<Instant>,
    /// Per-process series per GPU (the top processes by SM share).
    top_processes: usize,
    /// Owners with counters of their own per GPU ([`DEFAULT_OWNER_SERIES`]).
    owner_series: usize,
    /// The metrics exported and their shape: applied here, once, for OTLP and Prometheus.
    selection: Selection,
    /// Every GPU's points, made at the first collection after a window and shared by every
    /// instrument and scrape until the next: an OTLP collection asks once per instrument.
    points: Mutex<Option<Arc<Vec<Point>>>>,
    /// Windows taken in so far, and their count when a collection last made the points: what
    /// tells the lean shape that an export carried an owner's last counts.
    gen: u64,
    collected: AtomicU64,
    /// Why the source is not open yet, while the agent waits for it (no NVML: a driver that
    /// loads after the agent): what `/healthz` and `/readyz` say meanwhile.
    waiting_for_source: Option<String>,
}

const MIB: f64 = 1024.0 * 1024.0;

impl ExportState {
    pub fn with_delivery(delivery: Arc<Delivery>) -> Self {
        ExportState {
            delivery,
            top_processes: super::catalogue::DEFAULT_TOP_PROCESSES,
            owner_series: DEFAULT_OWNER_SERIES,
            ..ExportState::default()
        }
    }

    /// Keeps per-process series for the `top` processes of each GPU by SM share.
    pub fn with_top_processes(mut self, top: usize) -> Self {
        self.top_processes = top;
        self
    }

    /// Exports the metrics of `selection`, in its shape.
    pub fn with_selection(mut self, selection: Selection) -> Self {
        self.selection = selection;
        self
    }

    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// Notes that the agent waits for its source, and why (`None`: it opened).
    pub fn set_waiting_for_source(&mut self, reason: Option<String>) {
        self.waiting_for_source = reason;
    }

    /// Why the agent still waits for its source, if it does.
    pub fn waiting_for_source(&self) -> Option<&str> {
        self.waiting_for_source.as_deref()
    }

    /// Keeps counters of their own for `n` owners of each GPU (at least 1: the current one).
    pub fn with_owner_series(mut self, n: usize) -> Self {
        self.owner_series = n.max(1);
        self
    }

    pub fn owner_series(&self) -> usize {
        self.owner_series.max(1)
    }

    pub fn top_processes(&self) -> usize {
        self.top_processes
    }

    pub fn delivery(&self) -> &Arc<Delivery> {
        &self.delivery
    }

    /// How long ago the last window arrived, if one has.
    pub fn last_window_age(&self) -> Option<std::time::Duration> {
        self.last_window.map(|t| t.elapsed())
    }

    pub fn gpus(&self) -> impl Iterator<Item = &GpuView> {
        self.gpus.values()
    }

    /// The cache of [`ExportState::points`] (`export/points.rs`), emptied by each window.
    pub(super) fn points_cache(&self) -> &std::sync::Mutex<Option<Arc<Vec<Point>>>> {
        &self.points
    }

    /// Notes that a collection made the points of every window taken in so far.
    pub(super) fn mark_collected(&self) {
        self.collected.store(self.gen, Ordering::Relaxed);
    }

    pub fn get(&self, gpu: u32) -> Option<&GpuView> {
        self.gpus.get(&gpu)
    }

    /// Takes in one window; returns the change of verdict to announce, if any: a GPU's first
    /// verdict at once, a change once it has held [`ANNOUNCE_AFTER_WINDOWS`] windows.
    pub fn update(&mut self, report: &WindowReport, facts: &DeviceFacts) -> Option<ClassChange> {
        let gpu = report.stats.gpu;
        self.last_window = Some(Instant::now());
        if let Ok(cached) = self.points.get_mut() {
            *cached = None;
        }
        self.delivery.window_produced();
        let mut first = false;
        let view = self.gpus.entry(gpu).or_insert_with(|| {
            first = true;
            GpuView::new(gpu, facts, report)
        });
        view.facts = facts.clone();
        self.gen += 1;
        view.add(
            report,
            self.owner_series.max(1),
            self.selection.shape(),
            self.collected.load(Ordering::Relaxed),
            self.gen,
        );
        if first {
            return Some(ClassChange {
                gpu,
                from: None,
                to: report.class,
            });
        }
        view.announce()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_followed_from_the_start_survives_a_reset() {
        let mut c = SinceStart::default();
        for reading in [1_000.0, 1_010.0, 1_025.0, 4.0, 9.0] {
            c.observe(reading);
        }
        // 10 + 15 before the driver reload, 4 + 5 after it; never the 1,000 before the start.
        assert_eq!(c.total(), 34.0);
    }
}
