//! What pays first: the order in which the report offers its changes, and the time each can
//! really win back.
//!
//! A share of time is the wrong measure for some verdicts. A hang is an incident: a job that
//! hangs makes no progress at all, so it comes before any share. Windows whose counters a
//! profiler held describe the profiler, not the job, so they come next. Everything else is
//! ranked by the time a change would recover, and that time leaves out what no change in the
//! job's code can win back: the windows before a GPU (or a process that just started on it)
//! ran its first kernel, the window in which a process ends, and one-window phases, the
//! transitions between two verdicts. On a tie (the same whole percent of the GPU time) a change
//! in code goes before a change in habits. Nothing here lists the classes one by one beyond the
//! two facts that cannot be measured as a share ([`severity`]) and the one remedy that asks for
//! a habit ([`is_habit`]): a new class ranks by its measured time like the others.

use std::collections::{BTreeMap, BTreeSet};

use crate::diagnosis::{Advice, Class, StallKind, WindowReport};

/// Windows a phase needs before its time counts towards a change: a phase of one window sits
/// between two others (a process starting or stopping, a kernel stream ramping up or down),
/// and the detail tables already mark it "short (a transition, most often)".
pub const MIN_PHASE_WINDOWS: usize = 2;

/// GPU-Util (%) from which a window shows a kernel ran: below it a context being created or
/// torn down reads 0.2–0.8% (h200x2-scenarios, h200-diagnose-job), while the smallest real
/// work recorded, tiny kernels, reads 19%.
pub const KERNEL_UTIL_PCT: f64 = 5.0;

/// SM activity (%) from which a window shows a kernel ran, where GPM was read.
pub const KERNEL_SM_PCT: f64 = 1.0;

/// How a verdict's time weighs, before its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Time a change would win back: ranked by how much.
    Slack,
    /// A profiler held the counters: the numbers of those windows are the profiler's, and
    /// every other change on them rests on them.
    Counters,
    /// No progress at all: a hang is not a share of the time but the job stopping.
    Incident,
}

impl Severity {
    /// Its name in the JSON report (`remedies[].severity`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Slack => "slack",
            Severity::Counters => "counters",
            Severity::Incident => "incident",
        }
    }
}

/// The severity of a verdict with the advice the diagnosis chose for it: asked of the
/// [`Advice`] itself, so that rewording a remedy cannot move it in the ranking.
pub fn severity(class: Class, advice: Advice) -> Severity {
    match advice {
        _ if class == Class::Hung => Severity::Incident,
        Advice::HungJob | Advice::Spin => Severity::Incident,
        Advice::Profiler => Severity::Counters,
        _ => Severity::Slack,
    }
}

/// Whether the change asks for a habit (release the GPU when done, schedule it) rather than
/// a change in code: on a tie, code goes first, since it pays on every later run.
pub fn is_habit(class: Class) -> bool {
    matches!(class, Class::IdleHeld | Class::Idle)
}

/// What a fix is ranked by: the larger ranks first ([`rank_key`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    /// Its severity.
    pub severity: Severity,
    /// GPU time a change can win back (s): slack less start-up, tear-down and transitions.
    pub won_s: f64,
    /// Whether it asks for a habit.
    pub habit: bool,
}

/// The sort key of a fix among fixes: severity, then the whole percent of `total_s` it would
/// win back, then code before habit, then the exact seconds. Whole percents make "tied at 19%"
/// a tie, as the reader sees it.
pub fn rank_key(s: &Standing, total_s: f64) -> (Severity, i64, bool, i64) {
    let pct = (100.0 * s.won_s / total_s.max(1e-9)).round() as i64;
    (s.severity, pct, !s.habit, (s.won_s * 1000.0).round() as i64)
}

/// One remedy's time on one GPU, sorted.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Won {
    /// Time a change can win back (s).
    pub won_s: f64,
    /// Start-up, tear-down and one-window phases (s): counted in the totals, never ranked.
    pub aside_s: f64,
}

/// What [`Settle`] reads of a window.
#[derive(Debug, Clone)]
struct Slot {
    class: Class,
    remedy: &'static str,
    start: f64,
    seconds: f64,
    /// Where it is hung: when the stall began.
    hung_since: Option<f64>,
    pids: Option<BTreeSet<u32>>,
    util_pct: Option<f64>,
    sm_pct: Option<f64>,
}

/// The phase being collected: its time and windows per remedy, and its windows in all.
#[derive(Debug, Clone, Default)]
struct Run {
    class: Option<Class>,
    by_remedy: BTreeMap<&'static str, (Won, usize)>,
    windows: usize,
}

/// A window lately settled, for a hang to claim back: when it started, its remedy and time,
/// and whether that time counts as won back.
#[derive(Debug, Clone, Copy)]
struct Recent {
    start: f64,
    remedy: &'static str,
    seconds: f64,
    won: bool,
}

/// Windows remembered for a hang to claim: a kernel is called hung once it has spun
/// `long_spin_s` (30 s, 15 windows of 2 s), so 64 cover any hang's beginning at the window
/// lengths in use.
const RECENT_WINDOWS: usize = 64;

/// One GPU's windows sorted into the time a change can win back and the time it cannot.
/// Memory is bounded by the remedies and [`RECENT_WINDOWS`], not the run: one phase is open at
/// a time.
#[derive(Debug, Clone, Default)]
pub struct Settle {
    settled: BTreeMap<&'static str, Won>,
    run: Run,
    /// Whether a kernel ran since the GPU's first window, or since the last process started.
    kernel_seen: bool,
    /// The processes on the GPU in the last window, where the source lists them.
    pids: Option<BTreeSet<u32>>,
    /// The last windows, oldest first, at most [`RECENT_WINDOWS`].
    recent: std::collections::VecDeque<Recent>,
}

impl Settle {
    /// Adds one window of this GPU, in time order.
    pub fn add(&mut self, w: &WindowReport) {
        self.push(Slot {
            class: w.class,
            remedy: w.remedy(),
            start: w.stats.start,
            seconds: w.stats.duration_s(),
            hung_since: w
                .stall
                .filter(|_| w.class == Class::Hung)
                .map(|stall| stall.since),
            pids: w
                .stats
                .processes
                .as_ref()
                .map(|list| list.iter().map(|p| p.pid).collect()),
            util_pct: w.signals.util_pct,
            sm_pct: w.signals.sm_pct,
        });
    }

    fn push(&mut self, w: Slot) {
        let (started, ended) = match (&self.pids, &w.pids) {
            (Some(before), Some(now)) => (
                now.difference(before).next().is_some(),
                before.difference(now).next().is_some(),
            ),
            _ => (false, false),
        };
        if started {
            self.kernel_seen = false;
        }
        self.kernel_seen |= w.util_pct.is_some_and(|u| u >= KERNEL_UTIL_PCT)
            || w.sm_pct.is_some_and(|u| u >= KERNEL_SM_PCT);
        // Before the first kernel (of the GPU, or of a process that just started), and the
        // window in which a process ended: start-up and tear-down.
        let aside = !self.kernel_seen || ended;
        self.pids = w.pids;
        if self.run.class != Some(w.class) {
            self.close_run();
            self.run.class = Some(w.class);
        }
        if let Some(since) = w.hung_since {
            self.claim_for_hang(since);
        }
        let (e, windows) = self.run.by_remedy.entry(w.remedy).or_default();
        *windows += 1;
        self.run.windows += 1;
        if aside {
            e.aside_s += w.seconds;
        } else {
            e.won_s += w.seconds;
        }
        if self.recent.len() == RECENT_WINDOWS {
            self.recent.pop_front();
        }
        self.recent.push_back(Recent {
            start: w.start,
            remedy: w.remedy,
            seconds: w.seconds,
            // A hang's own windows are its incident, never a share to win back.
            won: !aside && w.hung_since.is_none(),
        });
    }

    /// The windows since a hang began, settled before it was called one (a kernel spins
    /// `long_spin_s` before it is `hung`: those windows read tiny kernels), are the hang's:
    /// their time is set aside, so no change is ranked for the hang's own beginning.
    fn claim_for_hang(&mut self, since: f64) {
        for r in self.recent.iter_mut().filter(|r| r.won && r.start >= since) {
            let e = self.settled.entry(r.remedy).or_default();
            let moved = r.seconds.min(e.won_s);
            e.won_s -= moved;
            e.aside_s += moved;
            r.won = false;
        }
    }

    /// Settles the phase: a remedy with fewer than [`MIN_PHASE_WINDOWS`] windows in it is a
    /// transition, whether the phase is that short or the remedy is one stray window in a
    /// longer phase of another (the window where bf16 GEMMs give way to starved bursts reads
    /// input-starved, with the host-wait remedy the bursts after it do not get).
    fn close_run(&mut self) {
        let run = std::mem::take(&mut self.run);
        let in_run = run.windows.min(self.recent.len());
        let first = self.recent.len() - in_run;
        for (remedy, (w, windows)) in run.by_remedy {
            let short = windows < MIN_PHASE_WINDOWS;
            if short {
                for r in self.recent.range_mut(first..) {
                    if r.remedy == remedy {
                        r.won = false;
                    }
                }
            }
            let e = self.settled.entry(remedy).or_default();
            if short {
                e.aside_s += w.won_s + w.aside_s;
            } else {
                e.won_s += w.won_s;
                e.aside_s += w.aside_s;
            }
        }
    }

    /// Every remedy's time so far, the open phase included.
    pub fn totals(&self) -> BTreeMap<&'static str, Won> {
        let mut all = self.clone();
        all.close_run();
        all.settled
    }
}

/// What one GPU's windows say about its peers: a hang and its likely culprit, whom it waits on
/// and who waits on it, and the ranks and profilers the host named on it.
#[derive(Debug, Clone, Default)]
pub struct PeerFacts {
    /// Time it was hung (s).
    pub hung_s: f64,
    /// When its hang began: the stall's start (Unix s).
    pub hung_since: Option<f64>,
    /// The end of its last hung window (Unix s): with `hung_since`, how long the hang has
    /// lasted, the seconds before it was called one included.
    pub hung_until: Option<f64>,
    /// Whether it held its context and ran nothing while its peers spun: the rank that never
    /// joined the collective.
    pub held_in_hang: bool,
    /// Seconds it waited on each busier peer (the straggler), by GPU.
    pub waits_on: BTreeMap<u32, f64>,
    /// Seconds its peers waited on it.
    pub waited_on_s: f64,
    /// The job ranks (`RANK`) of its processes, where the host read them.
    pub ranks: BTreeSet<u32>,
    /// The profilers the host named among its processes, and the seconds each held it.
    pub profilers: BTreeMap<String, f64>,
    /// The processes on it while it was hung, pid to name where known: whom `py-spy dump
    /// --pid` is for. At most [`MAX_RANKS`].
    pub hung_processes: BTreeMap<u32, Option<String>>,
}

/// Ranks kept per GPU: a GPU runs one rank, or a handful in a shared node.
const MAX_RANKS: usize = 8;

impl PeerFacts {
    /// Adds one window of this GPU.
    pub fn add(&mut self, w: &WindowReport) {
        let seconds = w.stats.duration_s();
        if w.class == Class::Hung {
            self.hung_s += seconds;
            let since = w.stall.map_or(w.stats.start, |s| s.since);
            self.hung_since = Some(self.hung_since.map_or(since, |t| t.min(since)));
            self.hung_until = Some(self.hung_until.map_or(w.stats.end, |t| t.max(w.stats.end)));
            self.held_in_hang |= w.stall.is_some_and(|s| s.kind == StallKind::Held);
        }
        if let Some(leader) = w.waits_on {
            *self.waits_on.entry(leader).or_default() += seconds;
        }
        if w.evidence.iter().any(|e| e.signal == "waiting_peers") {
            self.waited_on_s += seconds;
        }
        for p in w.stats.processes.iter().flat_map(|p| p.iter()) {
            if w.class == Class::Hung
                && (self.hung_processes.len() < MAX_RANKS
                    || self.hung_processes.contains_key(&p.pid))
            {
                self.hung_processes.insert(p.pid, p.name.clone());
            }
            if let Some(rank) = p.identity.rank {
                if self.ranks.len() < MAX_RANKS {
                    self.ranks.insert(rank);
                }
            }
            if let Some(tool) = &p.profiler {
                if self.profilers.len() < MAX_RANKS || self.profilers.contains_key(tool) {
                    *self.profilers.entry(tool.clone()).or_default() += seconds;
                }
            }
        }
    }

    /// The peer this GPU waited on longest, and for how long (s).
    pub fn straggler(&self) -> Option<(u32, f64)> {
        self.waits_on
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(g, s)| (*g, *s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window of `class` on GPU 0 held by the processes `pids` (named `python3`).
    fn window(class: Class, pids: &[u32]) -> WindowReport {
        use crate::sample::{GpuProcess, Metric, Sample};
        let mut pipeline = crate::Pipeline::new(2.0, crate::Diagnoser::default());
        let s = Sample::new(1000.0, 0)
            .with(Metric::UtilGpu, 100.0)
            .with(Metric::PowerMw, 120_000.0);
        pipeline.push(&s).expect("a sample in order");
        let mut r = pipeline.finish().pop().expect("the window in progress");
        r.class = class;
        let processes: Vec<GpuProcess> = pids
            .iter()
            .map(|pid| GpuProcess {
                pid: *pid,
                name: Some("python3".into()),
                ..GpuProcess::default()
            })
            .collect();
        r.stats.processes = Some(processes.into());
        r
    }

    #[test]
    fn the_processes_of_a_hung_gpu_are_kept_and_bounded() {
        let mut peers = PeerFacts::default();
        peers.add(&window(Class::ComputeBound, &[1]));
        assert!(peers.hung_processes.is_empty(), "not hung: nobody to dump");
        peers.add(&window(Class::Hung, &[4242]));
        assert_eq!(
            peers.hung_processes,
            BTreeMap::from([(4242, Some("python3".to_string()))])
        );
        let many: Vec<u32> = (100..120).collect();
        peers.add(&window(Class::Hung, &many));
        assert_eq!(peers.hung_processes.len(), MAX_RANKS);
        assert!(peers.hung_processes.contains_key(&4242));
    }

    #[test]
    fn a_hang_outranks_any_share_and_a_profiler_any_slack() {
        let hang = Standing {
            severity: severity(Class::Hung, Advice::HungJob),
            won_s: 1.0,
            habit: false,
        };
        let profiler = Standing {
            severity: severity(Class::InputStarved, Advice::Profiler),
            won_s: 2.0,
            habit: false,
        };
        let big = Standing {
            severity: severity(Class::SyncWait, Advice::Own),
            won_s: 90.0,
            habit: false,
        };
        assert_eq!(hang.severity, Severity::Incident);
        assert_eq!(profiler.severity, Severity::Counters);
        assert_eq!(big.severity, Severity::Slack);
        let mut all = [big, profiler, hang];
        all.sort_by_key(|s| std::cmp::Reverse(rank_key(s, 100.0)));
        assert_eq!(all, [hang, profiler, big]);
    }

    fn slot(class: Class, pids: &[u32], util_pct: f64) -> Slot {
        Slot {
            class,
            remedy: class.remedy(),
            start: 0.0,
            seconds: 2.0,
            hung_since: None,
            pids: Some(pids.iter().copied().collect()),
            util_pct: Some(util_pct),
            sm_pct: None,
        }
    }

    fn won(settle: &Settle, class: Class) -> Won {
        settle
            .totals()
            .get(class.remedy())
            .copied()
            .unwrap_or_default()
    }

    #[test]
    fn windows_before_the_first_kernel_are_start_up() {
        let mut s = Settle::default();
        // A context held, GPU-Util just under the kernel line, then at it.
        for util in [0.0, 0.8, KERNEL_UTIL_PCT - 0.1] {
            s.push(slot(Class::IdleHeld, &[499], util));
        }
        s.push(slot(Class::IdleHeld, &[499], KERNEL_UTIL_PCT));
        s.push(slot(Class::IdleHeld, &[499], 0.0));
        let held = won(&s, Class::IdleHeld);
        assert_eq!(
            held,
            Won {
                won_s: 4.0,
                aside_s: 6.0
            }
        );
        // SM activity at its line counts as a kernel too.
        let mut s = Settle::default();
        s.push(Slot {
            sm_pct: Some(KERNEL_SM_PCT),
            ..slot(Class::LaunchBound, &[7], 0.0)
        });
        s.push(slot(Class::LaunchBound, &[7], 0.0));
        assert_eq!(won(&s, Class::LaunchBound).won_s, 4.0);
    }

    #[test]
    fn a_process_starting_or_ending_is_set_aside() {
        let mut s = Settle::default();
        for _ in 0..3 {
            s.push(slot(Class::InputStarved, &[1], 50.0));
        }
        // A second process starts: its windows until its first kernel are start-up.
        s.push(slot(Class::InputStarved, &[1, 2], 0.0));
        s.push(slot(Class::InputStarved, &[1, 2], 50.0));
        // The first ends: the window it ends in is tear-down.
        s.push(slot(Class::InputStarved, &[2], 50.0));
        s.push(slot(Class::InputStarved, &[2], 50.0));
        assert_eq!(
            won(&s, Class::InputStarved),
            Won {
                won_s: 10.0,
                aside_s: 4.0
            }
        );
    }

    #[test]
    fn a_one_window_phase_is_a_transition() {
        assert_eq!(MIN_PHASE_WINDOWS, 2);
        let mut s = Settle::default();
        s.push(slot(Class::ComputeBound, &[1], 99.0));
        s.push(slot(Class::InputStarved, &[1], 40.0));
        s.push(slot(Class::ComputeBound, &[1], 99.0));
        s.push(slot(Class::LaunchBound, &[1], 20.0));
        s.push(slot(Class::LaunchBound, &[1], 20.0));
        assert_eq!(
            won(&s, Class::InputStarved),
            Won {
                won_s: 0.0,
                aside_s: 2.0
            }
        );
        assert_eq!(
            won(&s, Class::LaunchBound),
            Won {
                won_s: 4.0,
                aside_s: 0.0
            }
        );
        // The open phase counts as it stands: one window is still a transition.
        s.push(slot(Class::TransferBound, &[1], 60.0));
        assert_eq!(won(&s, Class::TransferBound).won_s, 0.0);
    }

    #[test]
    fn the_windows_since_a_hang_began_are_the_hangs_not_a_share_to_win_back() {
        let mut s = Settle::default();
        let at = |class: Class, start: f64| Slot {
            start,
            ..slot(class, &[511], 100.0)
        };
        // Tiny kernels from t = 90, the spin from t = 100: read as tiny kernels for 30 s,
        // then hung, since t = 100.
        for i in 0..20 {
            s.push(at(Class::LaunchBound, 90.0 + 2.0 * f64::from(i)));
        }
        for i in 0..5 {
            s.push(Slot {
                hung_since: Some(100.0),
                ..at(Class::Hung, 130.0 + 2.0 * f64::from(i))
            });
        }
        assert_eq!(
            won(&s, Class::LaunchBound),
            Won {
                won_s: 10.0,
                aside_s: 30.0
            }
        );
        // A later hang claims nothing twice, and nothing from before its start.
        s.push(at(Class::LaunchBound, 140.0));
        s.push(at(Class::LaunchBound, 142.0));
        for i in 0..2 {
            s.push(Slot {
                hung_since: Some(144.0),
                ..at(Class::Hung, 144.0 + 2.0 * f64::from(i))
            });
        }
        assert_eq!(
            won(&s, Class::LaunchBound),
            Won {
                won_s: 14.0,
                aside_s: 30.0
            }
        );
    }

    #[test]
    fn one_stray_window_of_another_remedy_in_a_phase_is_a_transition() {
        let mut s = Settle::default();
        let stray = Slot {
            remedy: "host-paced",
            ..slot(Class::InputStarved, &[1], 49.0)
        };
        s.push(stray.clone());
        for _ in 0..3 {
            s.push(slot(Class::InputStarved, &[1], 1.2));
        }
        let settled = s.totals();
        assert_eq!(
            settled["host-paced"],
            Won {
                won_s: 0.0,
                aside_s: 2.0
            }
        );
        assert_eq!(won(&s, Class::InputStarved).won_s, 6.0);
        // Two windows of it in the phase, apart or together, are the phase's own.
        s.push(stray);
        assert_eq!(
            s.totals()["host-paced"],
            Won {
                won_s: 4.0,
                aside_s: 0.0
            }
        );
    }

    #[test]
    fn on_a_tie_code_goes_before_habit_and_a_percent_more_wins() {
        let habit = Standing {
            severity: Severity::Slack,
            won_s: 8.0,
            habit: is_habit(Class::IdleHeld),
        };
        let code = Standing {
            severity: Severity::Slack,
            won_s: 7.9,
            habit: is_habit(Class::LaunchBound),
        };
        // 8.0 and 7.9 s of 42 s: both 19%.
        assert!(rank_key(&code, 42.0) > rank_key(&habit, 42.0));
        // 8.0 against 7.5 s: 19% against 18%, the habit wins on its share.
        let less = Standing { won_s: 7.5, ..code };
        assert!(rank_key(&habit, 42.0) > rank_key(&less, 42.0));
    }
}
