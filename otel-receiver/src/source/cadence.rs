//! The adaptive cadence: sample at a relaxed tick (1 s) while the verdict is settled, and at
//! the fast tick (100 ms) for a few seconds whenever it is uncertain or changing, then fall
//! back. A pure state machine with no I/O and no clock of its own: it is told each sample and
//! each closed window, in unix seconds of the samples, and answers the tick to use now. The
//! live agent ([`super::live::ticks::LiveTicks`]) and the offline thinning of a 10 Hz trace
//! ([`super::thinning`]) run this same code, so a score of a thinned trace is what the agent
//! would have decided.
//!
//! Why it is safe to relax: the perturbation benchmark (docs/benchmarks.md, "Perturbation")
//! found 10 Hz invisible to decode latency and training throughput, so the relaxed tick is
//! chosen for the agent's own CPU (0.46–0.48% of a core at 10 Hz, 0.077% at 1 Hz on an H200).
//! What 10 Hz buys is resolution where the verdict moves; the triggers below are where it moves.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::diagnosis::{by_elimination, reads_duty, Class, Confidence, StallKind, WindowReport};
use crate::sample::{Metric, Sample};

/// A step in GPU-Util (percentage points) between two consecutive relaxed samples of one GPU
/// that escalates: a phase starting or ending moves it from ~0 to ≥ 29 (tiny eager kernels,
/// h200-reference) or 100; the steady phases of the fixtures move it less between seconds.
pub const STEP_UTIL_PCT: f64 = 25.0;
/// A step in GPM SM activity (points): real work starting or stopping moves it by tens of
/// points; the 1-s averages of a steady phase move by a few.
pub const STEP_SM_PCT: f64 = 15.0;
/// A step in power (W): a held context alone adds ~45 W on an H200 (78 → 125 W), any real work
/// hundreds; NVML's power reading is already a 1-s average on Hopper, so its noise is a few W.
pub const STEP_POWER_W: f64 = 40.0;

/// What made the policy escalate, counted for `run --usage` and `score --cadence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Trigger {
    /// The start: there is no verdict yet.
    Start,
    /// A GPU's window has a class other than its previous window's.
    Transition,
    /// A window's verdict is `low` confidence.
    LowConfidence,
    /// A kernel spins without progress and is not yet called `hung`.
    SuspectedHang,
    /// The verdict rests on how GPU-Util comes and goes within the window (tiny kernels,
    /// bursts, copies at partial GPU-Util: [`reads_duty`]), which two samples a window
    /// cannot show: at 1 Hz such windows read the wrong class of the two
    /// (docs/DIAGNOSIS.md, `FEW_SAMPLES`), so they are read at the fast tick while it lasts.
    Duty,
    /// The verdict was chosen by elimination (no rule matched, [`by_elimination`]): it rests
    /// on window means near their thresholds, which two samples move across them.
    Elimination,
    /// A step in GPU-Util, SM activity or power between two relaxed samples, or a process
    /// starting or exiting: the window in progress is changing, before it closes.
    Step,
}

impl Trigger {
    /// Every trigger, in the order `run --usage` lists them.
    pub const ALL: [Trigger; 7] = [
        Trigger::Start,
        Trigger::Transition,
        Trigger::LowConfidence,
        Trigger::SuspectedHang,
        Trigger::Duty,
        Trigger::Elimination,
        Trigger::Step,
    ];

    /// The trigger's name in `run --usage` and `score` output.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::Transition => "transition",
            Trigger::LowConfidence => "low_confidence",
            Trigger::SuspectedHang => "suspected_hang",
            Trigger::Duty => "duty",
            Trigger::Elimination => "elimination",
            Trigger::Step => "step",
        }
    }
}

/// The adaptive cadence's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptive {
    /// The tick while every verdict is settled.
    pub relaxed: Duration,
    /// The tick while escalated; GPM needs ≥ 100 ms between two samples.
    pub fast: Duration,
    /// How long the fast tick holds after the last trigger (s): a trigger at `t` keeps it
    /// until `t + hold_s`, and a new one extends it.
    pub hold_s: f64,
}

impl Default for Adaptive {
    /// 1 s relaxed, 100 ms for 6 s: three 2-s windows, as many as the export state waits before
    /// it announces a changed verdict, so the windows that decide a change are read at 10 Hz.
    fn default() -> Self {
        Adaptive {
            relaxed: Duration::from_secs(1),
            fast: Duration::from_millis(100),
            hold_s: 6.0,
        }
    }
}

/// How a source is paced: one tick always, or the adaptive policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CadenceMode {
    /// The same tick always (`--interval-ms N`).
    Constant(Duration),
    /// Relaxed, escalated to the fast tick when the verdict is uncertain or changing.
    Adaptive(Adaptive),
}

impl CadenceMode {
    /// The longest tick the mode uses: the per-field periods (energy, limits…) are derived
    /// from it, so they stay the same absolute periods whichever tick is in force.
    pub fn base(&self) -> Duration {
        match self {
            CadenceMode::Constant(tick) => *tick,
            CadenceMode::Adaptive(a) => a.relaxed.max(a.fast),
        }
    }

    /// The shortest tick the mode uses.
    pub fn fastest(&self) -> Duration {
        match self {
            CadenceMode::Constant(tick) => *tick,
            CadenceMode::Adaptive(a) => a.relaxed.min(a.fast),
        }
    }
}

/// What the policy remembers of one GPU's last sample.
#[derive(Debug, Clone, Copy, Default)]
struct LastSample {
    t: f64,
    util_pct: Option<f64>,
    sm_pct: Option<f64>,
    power_w: Option<f64>,
    nprocs: Option<f64>,
}

impl LastSample {
    fn of(s: &Sample) -> LastSample {
        LastSample {
            t: s.t,
            util_pct: s.get(Metric::UtilGpu),
            sm_pct: s.get(Metric::GpmSm),
            power_w: s.get(Metric::PowerMw).map(|mw| mw / 1000.0),
            nprocs: s.get(Metric::Nprocs),
        }
    }

    /// Whether `now` differs from this sample by a step that escalates. A field either lacks
    /// is no step: a slow field read on one tick and not the next says nothing.
    fn stepped_to(&self, now: &LastSample) -> bool {
        let step = |a: Option<f64>, b: Option<f64>, limit: f64| matches!((a, b), (Some(a), Some(b)) if (a - b).abs() >= limit);
        step(self.util_pct, now.util_pct, STEP_UTIL_PCT)
            || step(self.sm_pct, now.sm_pct, STEP_SM_PCT)
            || step(self.power_w, now.power_w, STEP_POWER_W)
            || step(self.nprocs, now.nprocs, 1.0)
    }
}

/// Time and ticks spent at each tick, and the triggers seen.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CadenceSplit {
    /// Ticks taken at the fast tick.
    pub fast_ticks: u64,
    /// Ticks taken at the relaxed tick.
    pub relaxed_ticks: u64,
    /// Seconds covered by fast ticks (ticks × the fast tick).
    pub fast_s: f64,
    /// Seconds covered by relaxed ticks.
    pub relaxed_s: f64,
    /// How often each trigger fired, in [`Trigger::ALL`]'s order.
    pub triggers: [u64; Trigger::ALL.len()],
}

impl CadenceSplit {
    /// The share of the time spent at the fast tick (0 when no tick was taken).
    pub fn fast_share(&self) -> f64 {
        let total = self.fast_s + self.relaxed_s;
        if total > 0.0 {
            self.fast_s / total
        } else {
            0.0
        }
    }

    /// The triggers as `name=count` words.
    pub fn triggers_line(&self) -> String {
        Trigger::ALL
            .iter()
            .zip(self.triggers)
            .map(|(t, n)| format!("{}={n}", t.name()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The policy's state: until when the fast tick holds, each GPU's last sample and class.
#[derive(Debug, Clone)]
pub struct CadencePolicy {
    mode: CadenceMode,
    /// The fast tick holds while a sample's time is before this (unix s).
    fast_until: Option<f64>,
    /// The latest sample time seen: the policy's "now".
    now: Option<f64>,
    last: BTreeMap<u32, LastSample>,
    classes: BTreeMap<u32, Class>,
    split: CadenceSplit,
}

impl CadencePolicy {
    /// A policy in `mode`. An adaptive one starts escalated: there is no verdict yet.
    pub fn new(mode: CadenceMode) -> CadencePolicy {
        CadencePolicy {
            mode,
            fast_until: None,
            now: None,
            last: BTreeMap::new(),
            classes: BTreeMap::new(),
            split: CadenceSplit::default(),
        }
    }

    /// The mode it runs.
    pub fn mode(&self) -> CadenceMode {
        self.mode
    }

    /// The tick to use for the tick after a sample at `t` (unix s).
    pub fn tick_at(&self, t: f64) -> Duration {
        match self.mode {
            CadenceMode::Constant(tick) => tick,
            CadenceMode::Adaptive(a) => {
                if self.fast_until.is_none_or(|until| t < until) {
                    // No sample yet counts as escalated (the start trigger).
                    a.fast
                } else {
                    a.relaxed
                }
            }
        }
    }

    /// Whether the fast tick is in force at `t`.
    pub fn is_fast_at(&self, t: f64) -> bool {
        match self.mode {
            CadenceMode::Constant(_) => false,
            CadenceMode::Adaptive(a) => self.tick_at(t) == a.fast,
        }
    }

    /// Counts one interval of `tick` that has just elapsed, for the time split. The caller
    /// books the tick it waited, not the one in force after the sample: a trigger the sample
    /// or its windows fire changes the *next* interval, which is booked when it has elapsed.
    pub fn count_tick(&mut self, tick: Duration) {
        let fast = match self.mode {
            CadenceMode::Constant(_) => false,
            CadenceMode::Adaptive(a) => tick == a.fast,
        };
        let seconds = tick.as_secs_f64();
        if fast {
            self.split.fast_ticks += 1;
            self.split.fast_s += seconds;
        } else {
            self.split.relaxed_ticks += 1;
            self.split.relaxed_s += seconds;
        }
    }

    /// One sample read: moves the policy's clock to its time and escalates on a step from
    /// the same GPU's previous sample, where that one was read at the relaxed tick.
    pub fn observe_sample(&mut self, s: &Sample) -> Option<Trigger> {
        let CadenceMode::Adaptive(_) = self.mode else {
            return None;
        };
        let mut fired = None;
        if self.fast_until.is_none() {
            self.fast_until = Some(s.t);
            fired = self.escalate(s.t, Trigger::Start);
        }
        self.now = Some(self.now.map_or(s.t, |n| n.max(s.t)));
        let now = LastSample::of(s);
        // Only a step across a relaxed tick: this GPU's previous sample was followed by one.
        let stepped = self
            .last
            .get(&s.gpu)
            .is_some_and(|prev| !self.is_fast_at(prev.t) && prev.stepped_to(&now));
        self.last.insert(s.gpu, now);
        if stepped {
            fired = self.escalate(s.t, Trigger::Step);
        }
        fired
    }

    /// One closed window: escalates when its class differs from the GPU's previous window,
    /// when it is `low` confidence, when a kernel spins in it and is not yet `hung`, when its
    /// verdict reads GPU-Util's duty, or when it was chosen by elimination.
    pub fn observe_window(&mut self, r: &WindowReport) -> Option<Trigger> {
        let CadenceMode::Adaptive(_) = self.mode else {
            return None;
        };
        let previous = self.classes.insert(r.stats.gpu, r.class);
        let trigger = if previous.is_some_and(|c| c != r.class) {
            Some(Trigger::Transition)
        } else if r.confidence() == Confidence::Low {
            Some(Trigger::LowConfidence)
        } else if r.class != Class::Hung && r.stall.is_some_and(|s| s.kind == StallKind::Spin) {
            Some(Trigger::SuspectedHang)
        } else if reads_duty(r.rule, r.signals.util_pct) {
            Some(Trigger::Duty)
        } else if by_elimination(r.rule) {
            Some(Trigger::Elimination)
        } else {
            None
        };
        // A window is known once it closed: the policy's now, else the window's own end.
        let t = self.now.unwrap_or(r.stats.end);
        trigger.and_then(|trigger| self.escalate(t, trigger))
    }

    fn escalate(&mut self, t: f64, trigger: Trigger) -> Option<Trigger> {
        let CadenceMode::Adaptive(a) = self.mode else {
            return None;
        };
        let until = t + a.hold_s;
        self.fast_until = Some(self.fast_until.map_or(until, |u| u.max(until)));
        if let Some(i) = Trigger::ALL.iter().position(|&x| x == trigger) {
            self.split.triggers[i] += 1;
        }
        Some(trigger)
    }

    /// The time split and trigger counts so far.
    pub fn split(&self) -> &CadenceSplit {
        &self.split
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adaptive() -> CadencePolicy {
        CadencePolicy::new(CadenceMode::Adaptive(Adaptive::default()))
    }

    const FAST: Duration = Duration::from_millis(100);
    const RELAXED: Duration = Duration::from_secs(1);

    fn idle(t: f64) -> Sample {
        Sample::new(t, 0)
            .with(Metric::UtilGpu, 0.0)
            .with(Metric::GpmSm, 0.0)
            .with(Metric::PowerMw, 78_000.0)
            .with(Metric::Nprocs, 0.0)
    }

    /// A policy past its start: relaxed from `t`.
    fn settled() -> (CadencePolicy, f64) {
        let mut p = adaptive();
        p.observe_sample(&idle(1000.0));
        // The start holds 6 s.
        assert_eq!(p.tick_at(1005.9), FAST);
        assert_eq!(p.tick_at(1006.0), RELAXED);
        p.observe_sample(&idle(1006.0));
        (p, 1006.0)
    }

    /// A report of `class`, high confidence and no stall, for a window ending at `end`.
    fn report(gpu: u32, class: Class, end: f64) -> WindowReport {
        let mut pipeline = crate::Pipeline::new(2.0, crate::Diagnoser::default());
        let mut s = idle(end - 1.0);
        s.gpu = gpu;
        pipeline.push(&s).expect("a sample in order");
        let mut r = pipeline.finish().pop().expect("the window in progress");
        r.class = class;
        r.assessment.confidence = Confidence::High;
        r.stall = None;
        r
    }

    #[test]
    fn a_constant_mode_never_changes_its_tick() {
        let mut p = CadencePolicy::new(CadenceMode::Constant(FAST));
        assert_eq!(p.observe_sample(&idle(0.0)), None);
        assert_eq!(p.observe_window(&report(0, Class::Idle, 2.0)), None);
        assert_eq!(p.observe_window(&report(0, Class::Hung, 4.0)), None);
        assert_eq!(p.tick_at(0.0), FAST);
        assert_eq!(p.tick_at(1e9), FAST);
        p.count_tick(FAST);
        assert_eq!(p.split().relaxed_ticks, 1);
        assert_eq!(p.split().fast_share(), 0.0);
    }

    #[test]
    fn it_starts_fast_and_relaxes_exactly_when_the_hold_expires() {
        let mut p = adaptive();
        assert_eq!(p.tick_at(0.0), FAST, "no sample yet: no verdict yet");
        assert_eq!(p.observe_sample(&idle(1000.0)), Some(Trigger::Start));
        assert_eq!(p.tick_at(1000.0), FAST);
        assert_eq!(p.tick_at(1005.999), FAST);
        assert_eq!(p.tick_at(1006.0), RELAXED);
        assert_eq!(p.split().triggers[0], 1);
    }

    #[test]
    fn a_transition_escalates_and_a_steady_class_does_not() {
        let (mut p, t) = settled();
        assert_eq!(p.observe_window(&report(0, Class::Idle, t)), None);
        assert_eq!(p.observe_window(&report(0, Class::Idle, t)), None);
        assert_eq!(p.tick_at(t), RELAXED);
        assert_eq!(
            p.observe_window(&report(0, Class::ComputeBound, t)),
            Some(Trigger::Transition)
        );
        assert_eq!(p.tick_at(t + 5.99), FAST);
        assert_eq!(p.tick_at(t + 6.0), RELAXED);
        // Another GPU's first window is no transition.
        assert_eq!(p.observe_window(&report(1, Class::Idle, t)), None);
    }

    #[test]
    fn a_low_confidence_window_escalates_and_a_medium_one_does_not() {
        let (mut p, t) = settled();
        let mut r = report(0, Class::TransferBound, t);
        r.assessment.confidence = Confidence::Medium;
        assert_eq!(p.observe_window(&r), None);
        r.assessment.confidence = Confidence::Low;
        assert_eq!(p.observe_window(&r), Some(Trigger::LowConfidence));
        assert_eq!(p.tick_at(t + 1.0), FAST);
    }

    #[test]
    fn a_spin_not_yet_hung_escalates_and_a_hung_one_does_not() {
        use crate::diagnosis::Stall;
        let (mut p, t) = settled();
        let spin = Stall {
            kind: StallKind::Spin,
            since: t - 10.0,
            for_s: 10.0,
            stopped_at: None,
            after_traffic: true,
        };
        let mut r = report(0, Class::LaunchBound, t);
        r.stall = Some(Stall {
            kind: StallKind::Held,
            ..spin
        });
        assert_eq!(p.observe_window(&r), None, "a held context is no hang");
        r.stall = Some(spin);
        assert_eq!(p.observe_window(&r), Some(Trigger::SuspectedHang));
        let (mut p, t) = settled();
        let mut hung = report(0, Class::Hung, t);
        hung.stall = Some(spin);
        p.observe_window(&report(0, Class::Hung, t));
        assert_eq!(p.observe_window(&hung), None, "a called hang is a verdict");
    }

    #[test]
    fn steps_at_each_threshold_escalate_and_just_under_do_not() {
        let cases: [(Metric, f64, f64); 4] = [
            (Metric::UtilGpu, 0.0, STEP_UTIL_PCT),
            (Metric::GpmSm, 0.0, STEP_SM_PCT),
            (Metric::PowerMw, 78_000.0, 78_000.0 + STEP_POWER_W * 1000.0),
            (Metric::Nprocs, 0.0, 1.0),
        ];
        for (metric, from, to) in cases {
            let (mut p, t) = settled();
            let under = from + (to - from) * 0.99;
            assert_eq!(
                p.observe_sample(&idle(t + 1.0).with(metric, under)),
                None,
                "{metric:?} just under its step"
            );
            let (mut p, t) = settled();
            assert_eq!(
                p.observe_sample(&idle(t + 1.0).with(metric, to)),
                Some(Trigger::Step),
                "{metric:?} at its step"
            );
            assert_eq!(p.tick_at(t + 1.0), FAST);
            assert_eq!(p.tick_at(t + 7.0), RELAXED);
        }
    }

    #[test]
    fn a_step_while_fast_does_not_extend_but_a_window_trigger_does() {
        let (mut p, t) = settled();
        assert_eq!(
            p.observe_sample(&idle(t + 1.0).with(Metric::UtilGpu, 100.0)),
            Some(Trigger::Step)
        );
        // Bursty work flickers at 10 Hz: steps between fast samples say nothing new.
        assert_eq!(p.observe_sample(&idle(t + 1.1)), None);
        assert_eq!(p.tick_at(t + 7.0), RELAXED);
        // A window trigger at t + 4 extends the hold to t + 10.
        p.observe_sample(&idle(t + 4.0));
        let mut low = report(0, Class::Idle, t + 4.0);
        low.assessment.confidence = Confidence::Low;
        assert_eq!(p.observe_window(&low), Some(Trigger::LowConfidence));
        assert_eq!(p.tick_at(t + 9.99), FAST);
        assert_eq!(p.tick_at(t + 10.0), RELAXED);
        assert_eq!(
            p.split().triggers_line(),
            "start=1 transition=0 low_confidence=1 suspected_hang=0 duty=0 elimination=0 step=1"
        );
    }

    #[test]
    fn each_gpu_steps_from_its_own_previous_sample() {
        let (mut p, t) = settled();
        let mut other = idle(t);
        other.gpu = 1;
        // GPU 1's first sample comes while the start still holds, at 10 Hz.
        other.t = 1005.0;
        assert_eq!(p.observe_sample(&other), None);
        // At t + 1 GPU 0 is steady; GPU 1 has stepped, but from a sample read at 10 Hz.
        assert_eq!(p.observe_sample(&idle(t + 1.0)), None);
        let mut busy = other.clone().with(Metric::UtilGpu, 100.0);
        busy.t = t + 1.0;
        assert_eq!(p.observe_sample(&busy), None, "its previous tick was fast");
        // A second later, across a relaxed tick, GPU 1 steps back down: that escalates.
        let mut down = other.with(Metric::UtilGpu, 0.0);
        down.t = t + 2.0;
        assert_eq!(p.observe_sample(&down), Some(Trigger::Step));
    }

    #[test]
    fn a_field_one_sample_lacks_is_no_step() {
        let (mut p, t) = settled();
        let mut s = Sample::new(t + 1.0, 0).with(Metric::UtilGpu, 0.0);
        s.set(Metric::PowerMw, 78_000.0);
        assert_eq!(p.observe_sample(&s), None);
        assert_eq!(
            p.observe_sample(&Sample::new(t + 2.0, 0).with(Metric::GpmSm, 90.0)),
            None,
            "SM activity was not in the previous sample"
        );
    }

    #[test]
    fn the_split_counts_time_at_each_tick() {
        let mut p = adaptive();
        p.observe_sample(&idle(0.0));
        for _ in 0..60 {
            p.count_tick(FAST);
        }
        for _ in 0..6 {
            p.count_tick(RELAXED);
        }
        let s = p.split();
        assert_eq!((s.fast_ticks, s.relaxed_ticks), (60, 6));
        assert!((s.fast_share() - 0.5).abs() < 1e-9, "{}", s.fast_share());
    }
}
