//! Diagnosis: one class per GPU per window, with the evidence that decided it and the remedy.
//!
//! Three layers, each in its own module: `signals` derives the numbers the rules read,
//! `rules` is the ordered decision list for one window, `state` carries what needs history
//! (a spin that becomes a hang), and `peers` adds what needs several GPUs (who waits for
//! whom). [`Diagnoser`] runs them over one time slot ("frame") of windows at a time.

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

mod class;
mod confidence;
mod context;
mod evidence;
pub mod invariants;
mod peers;
mod roofline;
mod rules;
mod signals;
mod state;
mod thresholds;

use std::collections::BTreeMap;

pub use class::{advice, Class, NCU_CONFIRM};
pub use confidence::{
    by_elimination, is_measured, reads_duty, source, Assessment, Confidence, FEW_SAMPLES,
    SPEC_ORIGIN_PREFIX,
};
pub use evidence::{pct, rate, round3, Evidence};
pub use roofline::{top_unit, Headroom, Peaks, Resource, TopUnit};
pub use signals::Signals;
pub use state::{Spin, Stall, StallKind};
pub use thresholds::Thresholds;

use crate::device::{DeviceFacts, PowerBaselines, PowerProfile};

use crate::efficiency::effective_efficiency;
use crate::sample::Metric;
use crate::window::WindowStats;
use rules::RuleInput;
use state::GpuState;

/// One GPU's window with its verdict: what the exporters and reports consume.
#[derive(Debug, Clone)]
pub struct WindowReport {
    pub stats: WindowStats,
    pub signals: Signals,
    /// TDP used for the efficiency (W), when known.
    pub tdp_w: Option<f64>,
    /// The article's effective efficiency: (power / TDP) × (SM activity / 100).
    pub efficiency: Option<f64>,
    /// Power placed between this GPU's own idle (0) and compute-bound (1) baselines.
    pub calibrated_efficiency: Option<f64>,
    /// What this GPU draws, by its profile, when it does what the class says.
    pub expected_power_w: Option<f64>,
    /// Where the power profile came from, when there is one.
    pub profile_origin: Option<String>,
    pub class: Class,
    /// The rule of the decision list that decided.
    pub rule: &'static str,
    pub evidence: Vec<Evidence>,
    /// What to do: the class's remedy, or advice that follows the evidence.
    pub remedy: &'static str,
    /// Where power sat between a held context and the GPU's peak, when known.
    pub power: PowerPlace,
    /// No progress in this window, and since when: what the rules across GPUs read.
    pub stall: Option<Stall>,
    /// The job this GPU belongs to, when the source knows: the rules across GPUs judge one
    /// job's GPUs together.
    pub job: Option<String>,
    /// Throttling and other conditions reported beside the class (power cap, thermal, P-state).
    pub throttle: Vec<String>,
    /// Signals the diagnosis wanted but the source did not provide.
    pub missing: Vec<&'static str>,
    /// The resource nearest its peak in this window and how near (the roofline), where any
    /// was measured.
    pub headroom: Option<Headroom>,
    /// The invariant the rules' verdict broke, which the guard re-decided
    /// ([`invariants`]); `None` for nearly every window.
    pub invariant: Option<invariants::Invariant>,
    /// What power is set against for the invariants: the TDP, else the GPU's peak under work.
    invariant_tdp_w: Option<f64>,
    /// The peaks the headroom sets link traffic, DRAM and, without GPM, compute against.
    peaks: Peaks,
    /// Whether the power baselines were measured on this GPU or its model (a calibration run
    /// or a built-in profile), not TDP fractions or a specification: verdicts resting on power
    /// are `medium` at best until they are.
    pub baselines_calibrated: bool,
    /// How sure the verdict is, what it could not rule out, and which sources were missing;
    /// set once the rules across GPUs have run ([`Diagnoser::diagnose_frame`]).
    pub assessment: Assessment,
}

impl WindowReport {
    pub fn remedy(&self) -> &'static str {
        self.remedy
    }

    pub fn confidence(&self) -> Confidence {
        self.assessment.confidence
    }

    /// Classes the verdict could not rule out.
    pub fn alternatives(&self) -> &[Class] {
        &self.assessment.alternatives
    }

    /// Re-decides a verdict that breaks an invariant whatever the thresholds (`invariants.rs`):
    /// the last step before the verdict is judged, after the rules across GPUs.
    fn enforce_invariants(&mut self, th: &Thresholds) {
        let reading =
            invariants::Reading::of(&self.signals, self.stats.util_duty, self.invariant_tdp_w);
        let Some(fixed) = invariants::guard(self.class, &self.signals, &reading, th) else {
            return;
        };
        self.class = fixed.class;
        self.rule = "invariant";
        self.invariant = Some(fixed.broken);
        self.evidence.insert(0, fixed.evidence);
        // A profiler's advice stays: the counters the verdict rests on were the profiler's.
        if self.remedy != advice::PROFILER {
            self.remedy = self.class.remedy();
        }
    }

    /// The headroom of the final verdict (after the rules across GPUs and the guard), and its
    /// line among the evidence where work runs: it reaches the log record and the report with
    /// the rest.
    fn set_headroom(&mut self) {
        self.headroom = roofline::headroom(&self.signals, self.class, self.peaks);
        if let Some(h) = self
            .headroom
            .filter(|_| !matches!(self.class, Class::Idle | Class::IdleHeld))
        {
            self.evidence.push(Evidence::new(
                "headroom",
                h.fraction,
                None,
                format!("headroom: {}", h.text()),
            ));
        }
    }

    /// Judges the verdict as it stands now (after the rules across GPUs).
    fn assess(&mut self, th: &Thresholds) {
        let evidence: Vec<&'static str> = self.evidence.iter().map(|e| e.signal).collect();
        self.assessment = confidence::assess(&confidence::Inputs {
            class: self.class,
            rule: self.rule,
            signals: &self.signals,
            power: self.power,
            calibrated: self.baselines_calibrated,
            evidence: &evidence,
            samples: self.stats.samples,
            profiler_process: self
                .evidence
                .iter()
                .find(|e| e.signal == "profiler_process")
                .map(|e| e.text.as_str()),
            thresholds: th,
        });
    }

    /// Energy the GPU used in the window (J): the energy counter's where the window measured
    /// it, else mean power × the window's length; 0 when neither was sampled.
    pub fn energy_j(&self) -> f64 {
        let seconds = self.stats.duration_s();
        self.stats
            .energy_j
            .or(self.signals.power_w.map(|w| w * seconds))
            .unwrap_or(0.0)
    }
}

/// Time and energy one GPU spent in one verdict: the cost of slack.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    pub seconds: f64,
    pub energy_j: f64,
}

impl Spent {
    /// Adds one window.
    pub fn add(&mut self, report: &WindowReport) {
        self.seconds += report.stats.duration_s();
        self.energy_j += report.energy_j();
    }
}

/// Where a window's power sits against the GPU's own baselines: the NVML-only stand-in for SM
/// activity, since every GPU has a power sensor and most have no GPM.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PowerPlace {
    /// 0 at a held context, 1 at the GPU's peak under real work ([`PowerBaselines::load`]).
    pub load: Option<f64>,
    /// `load` per unit of GPU-Util: what the resident kernels draw while resident (tiny
    /// kernels ≤ 0; bursts of real work ≥ 0.7).
    pub intensity: Option<f64>,
    /// Whether the power says a context is held (closer to held idle than to bare idle).
    pub held: Option<bool>,
}

impl PowerPlace {
    fn of(signals: &Signals, baselines: Option<&PowerBaselines>) -> PowerPlace {
        let (Some(power), Some(base)) = (signals.power_w, baselines) else {
            return PowerPlace::default();
        };
        let load = base.load(power);
        let util = signals.util_pct.filter(|u| *u >= 1.0);
        PowerPlace {
            load,
            intensity: load.zip(util).map(|(l, u)| l / (u / 100.0)),
            held: Some(power >= base.held_threshold_w()),
        }
    }
}

/// Runs the diagnosis over frames of windows, keeping per-GPU state between them.
#[derive(Debug, Clone, Default)]
pub struct Diagnoser {
    thresholds: Thresholds,
    /// Facts for every GPU (a trace's facts.json, or flags)…
    default_facts: DeviceFacts,
    /// …and per GPU where the live source knows better.
    facts: BTreeMap<u32, DeviceFacts>,
    /// `--tdp-w`: overrides whatever the facts say.
    tdp_override_w: Option<f64>,
    /// Calibrated power profiles per GPU…
    profiles: BTreeMap<u32, PowerProfile>,
    /// …and one for GPUs without their own (a built-in model profile).
    default_profile: Option<PowerProfile>,
    states: BTreeMap<u32, GpuState>,
    /// Each GPU's PCIe peak per direction (MiB/s), from its link as last sampled.
    pcie_peaks: BTreeMap<u32, f64>,
    /// Published DRAM bandwidth (GB/s) per GPU, and for GPUs without their own: the SKU
    /// table's, which the headroom quotes as the absolute peak.
    dram_peaks_gb_s: BTreeMap<u32, f64>,
    default_dram_peak_gb_s: Option<f64>,
    /// The GPUs whose GPM has been read, each with how many windows in a row have lacked it
    /// since: GPM falling silent on such a GPU while it works is a profiler holding the
    /// counters, not a GPU without GPM.
    gpm_seen: BTreeMap<u32, u32>,
}

impl Diagnoser {
    pub fn new(thresholds: Thresholds) -> Self {
        Diagnoser {
            thresholds,
            ..Diagnoser::default()
        }
    }

    pub fn with_default_facts(mut self, facts: DeviceFacts) -> Self {
        self.default_facts = facts;
        self
    }

    pub fn with_tdp_override(mut self, tdp_w: Option<f64>) -> Self {
        self.tdp_override_w = tdp_w;
        self
    }

    pub fn set_profile(&mut self, gpu: u32, profile: PowerProfile) {
        self.profiles.insert(gpu, profile);
    }

    pub fn with_default_profile(mut self, profile: Option<PowerProfile>) -> Self {
        self.default_profile = profile;
        self
    }

    /// The DRAM bandwidth (GB/s) of GPUs without their own, from the SKU table.
    pub fn with_default_dram_peak_gb_s(mut self, gb_s: Option<f64>) -> Self {
        self.default_dram_peak_gb_s = gb_s;
        self
    }

    /// One GPU's DRAM bandwidth (GB/s), from the SKU table.
    pub fn set_dram_peak_gb_s(&mut self, gpu: u32, gb_s: f64) {
        self.dram_peaks_gb_s.insert(gpu, gb_s);
    }

    pub fn profile(&self, gpu: u32) -> Option<&PowerProfile> {
        self.profiles.get(&gpu).or(self.default_profile.as_ref())
    }

    pub fn set_facts(&mut self, gpu: u32, facts: DeviceFacts) {
        self.facts.insert(gpu, facts);
    }

    pub fn facts(&self, gpu: u32) -> &DeviceFacts {
        self.facts.get(&gpu).unwrap_or(&self.default_facts)
    }

    /// TDP for a window: the flag, else the default limit last sampled for this GPU, else the
    /// facts.
    fn tdp_w(&self, w: &WindowStats) -> Option<f64> {
        self.tdp_override_w.or(self.facts(w.gpu).tdp_w)
    }

    /// Limits and totals are sampled rarely (every 10 s live): what a window carries is kept as
    /// this GPU's facts until the next reading.
    fn learn_facts(&mut self, w: &WindowStats) {
        let sampled = [
            w.mean(Metric::PowerDefaultLimitMw).map(|mw| mw / 1000.0),
            w.mean(Metric::PowerLimitMw).map(|mw| mw / 1000.0),
            w.mean(Metric::TempSlowdownC),
            w.mean(Metric::MemTotalBytes),
        ];
        if sampled.iter().all(Option::is_none) {
            return;
        }
        let default = self.default_facts.clone();
        let facts = self.facts.entry(w.gpu).or_insert(default);
        let [tdp, limit, slowdown, mem_total] = sampled;
        facts.tdp_w = tdp.or(facts.tdp_w);
        facts.power_limit_w = limit.or(facts.power_limit_w);
        facts.temp_slowdown_c = slowdown.or(facts.temp_slowdown_c);
        facts.mem_total_bytes = mem_total.or(facts.mem_total_bytes);
    }

    /// Diagnoses every GPU's window of one time slot, then explains them against each other.
    pub fn diagnose_frame(&mut self, frame: Vec<WindowStats>) -> Vec<WindowReport> {
        let mut reports: Vec<WindowReport> =
            frame.into_iter().map(|w| self.diagnose_window(w)).collect();
        peers::explain(&mut reports, &self.thresholds);
        for r in &mut reports {
            r.enforce_invariants(&self.thresholds);
            r.set_headroom();
            r.assess(&self.thresholds);
        }
        reports
    }

    fn diagnose_window(&mut self, stats: WindowStats) -> WindowReport {
        self.learn_facts(&stats);
        let signals = Signals::of(&stats);
        let tdp_w = self.tdp_w(&stats);
        let profile = self.profile(stats.gpu).cloned();
        let baselines: Option<PowerBaselines> = profile
            .as_ref()
            .map(PowerProfile::baselines)
            .or_else(|| tdp_w.map(PowerBaselines::from_tdp));
        let th = &self.thresholds;
        let power = PowerPlace::of(&signals, baselines.as_ref());
        let invariant_tdp_w = tdp_w.or(baselines.as_ref().map(|b| b.peak_w));
        let observed = self
            .states
            .entry(stats.gpu)
            .or_default()
            .observe(&stats, &signals, &power, th);
        let (verdict, rule) = rules::classify(&RuleInput {
            signals: &signals,
            spin: observed.spin,
            power,
            baselines,
            thresholds: th,
        });
        let rules::Verdict {
            class,
            mut evidence,
            advice,
        } = verdict;
        let mut remedy = advice.unwrap_or(class.remedy());
        if let Some(churn) = churn_evidence(&signals, self.facts(stats.gpu), th) {
            if !matches!(class, Class::ComputeBound | Class::Hung) {
                evidence.push(churn);
                remedy = advice::ALLOCATION_CHURN;
            }
        }
        if let Some(advice) = context::both_ways_advice(&signals, class) {
            evidence.push(context::both_ways_evidence(&signals));
            remedy = advice;
        }
        if let Some(paced) = context::host_paced_evidence(&signals, stats.samples, class, rule) {
            evidence.push(paced);
            remedy = advice::HOST_PACED;
        }
        if let Some(shared) = stats
            .processes
            .as_deref()
            .and_then(|p| context::shared_evidence(p))
        {
            evidence.push(shared);
        }
        let gpm_silent = if signals.has_gpm() {
            self.gpm_seen.insert(stats.gpu, 0);
            None
        } else {
            self.gpm_seen.get_mut(&stats.gpu).map(|run| {
                *run += 1;
                *run
            })
        };
        if let Some(profiler) = context::profiler_evidence(&signals, &stats, gpm_silent) {
            evidence.insert(0, profiler);
            remedy = advice::PROFILER;
        }
        // The host naming the profiler is the surer of the two sources: its line goes first.
        if let Some(profiler) = stats
            .processes
            .as_deref()
            .and_then(|p| context::profiler_process_evidence(p))
        {
            evidence.insert(0, profiler);
            remedy = advice::PROFILER;
        }
        let throttle = self.throttle(&stats, &signals);
        let missing = missing(&signals, tdp_w, power);
        let pcie_peak_mib_s = self.pcie_peak(&stats);
        let dram_gb_s = self
            .dram_peaks_gb_s
            .get(&stats.gpu)
            .copied()
            .or(self.default_dram_peak_gb_s);
        let power_limit_w = self.facts(stats.gpu).power_limit_w.or(tdp_w);
        let job = stats
            .processes
            .as_deref()
            .and_then(|p| crate::attribution::job_of(p));
        let baselines_calibrated = profile
            .as_ref()
            .is_some_and(|p| confidence::is_measured(&p.origin));
        let calibrated_efficiency = profile
            .as_ref()
            .zip(signals.power_w)
            .and_then(|(p, w)| p.calibrated_efficiency(w));
        WindowReport {
            efficiency: effective_efficiency(signals.power_w, tdp_w, signals.sm_pct),
            calibrated_efficiency,
            expected_power_w: profile.as_ref().map(|p| class.expected_power_w(p)),
            profile_origin: profile.map(|p| p.origin),
            stats,
            signals,
            tdp_w,
            class,
            rule,
            evidence,
            remedy,
            power,
            stall: observed.stall,
            job,
            throttle,
            missing,
            headroom: None,
            peaks: Peaks {
                pcie_mib_s: pcie_peak_mib_s,
                power_limit_w,
                dram_gb_s,
            },
            invariant: None,
            invariant_tdp_w,
            baselines_calibrated,
            assessment: Assessment::default(),
        }
    }

    /// This GPU's PCIe peak per direction (MiB/s) from the link generation and width last
    /// sampled (every 10 s live): the roofline's peak for host↔device traffic. The link's
    /// maximum, where NVML read it: an idle link trains down to a lower generation to save
    /// power, and its current generation would understate what copies can reach.
    fn pcie_peak(&mut self, w: &WindowStats) -> Option<f64> {
        let gen = w.max(Metric::PcieLinkGenMax).or(w.max(Metric::PcieLinkGen));
        let width = w
            .max(Metric::PcieLinkWidthMax)
            .or(w.max(Metric::PcieLinkWidth));
        if let (Some(gen), Some(width)) = (gen, width) {
            if let Some(peak) = roofline::pcie_peak_mib_s(gen, width) {
                self.pcie_peaks.insert(w.gpu, peak);
            }
        }
        self.pcie_peaks.get(&w.gpu).copied()
    }

    /// Conditions beside the class: clock-event reasons, the power limit where it decides
    /// something, a P-state above P0 under load, a temperature near slowdown.
    fn throttle(&self, w: &WindowStats, s: &Signals) -> Vec<String> {
        let mut out: Vec<String> = w
            .clock_reasons
            .throttling(self.thresholds.clock_reason_share)
            .into_iter()
            .map(str::to_string)
            .collect();
        let facts = self.facts(w.gpu);
        let power_capped = out.iter().any(|reason| reason == "sw_power_cap");
        out.extend(power_limit_evidence(
            facts.power_limit_w,
            self.tdp_w(w),
            facts.power_limit_max_w,
            power_capped,
        ));
        if let Some(pstate) = w.max(Metric::Pstate) {
            if pstate > 0.0 && s.util_pct.unwrap_or(0.0) >= 50.0 {
                out.push(format!("pstate: P{pstate:.0} under load (P0 expected)"));
            }
        }
        let slowdown = facts.temp_slowdown_c;
        if let (Some(temp), Some(slowdown)) = (w.max(Metric::TempC), slowdown) {
            if temp >= slowdown - 5.0 {
                out.push(format!(
                    "temperature: {temp:.0} °C, slowdown at {slowdown:.0} °C"
                ));
            }
        }
        out
    }
}

/// Signals the diagnosis wanted but the source did not provide, and what it fell back on.
fn missing(s: &Signals, tdp_w: Option<f64>, power: PowerPlace) -> Vec<&'static str> {
    let mut out = Vec::new();
    if !s.has_gpm() {
        out.push("gpm: SM activity, pipes and DRAM; judged from GPU-Util, the memory controller and power against the GPU's baselines, which cannot tell tiny kernels from a kernel spinning on a few SMs, nor arithmetic from moderate bandwidth");
    }
    if s.pcie_mib_s.is_none() {
        out.push(
            "pcie: host↔device copies are told from tiny kernels by the memory controller alone",
        );
    }
    if s.nvlink_mib_s.is_none() {
        out.push("nvlink: collectives are judged from the GPUs' power and timing together");
    }
    if s.power_w.is_none() {
        out.push("power: neither the energy counter nor power readings");
    } else if power.load.is_none() {
        out.push("baselines: no profile or TDP to place power against");
    }
    if tdp_w.is_none() {
        out.push("tdp: pass --tdp-w to get the efficiency");
    }
    if s.nprocs.is_none() {
        out.push("nprocs: a held context is judged from power");
    }
    out
}

/// Memory in use swinging by a large share of the GPU per second: the job allocates and frees
/// every step (the article's 30%/s line).
fn churn_evidence(s: &Signals, facts: &DeviceFacts, th: &Thresholds) -> Option<Evidence> {
    let swing = s.mem_swing_bytes_per_s?;
    let total = s.mem_total_bytes.or(facts.mem_total_bytes)?;
    let share = swing / total;
    (total > 0.0 && share >= th.churn_share_per_s).then(|| {
        Evidence::new(
            "mem_swing_share_per_s",
            share,
            Some(th.churn_share_per_s),
            format!(
                "memory in use swings by {:.1} GiB/s, {} of the GPU's memory per second: the job allocates and frees device memory every step",
                swing / f64::from(1u32 << 30),
                pct(share * 100.0)
            ),
        )
    })
}

/// What the power limit says beside the class, in W: a limit set below the default, and how
/// far it may be raised; for a GPU held back by its power cap, whether a higher limit may be set
/// or the limit is already the most the GPU allows.
fn power_limit_evidence(
    limit_w: Option<f64>,
    tdp_w: Option<f64>,
    max_w: Option<f64>,
    power_capped: bool,
) -> Option<String> {
    let limit = limit_w?;
    let raise_to = max_w
        .filter(|max| *max > limit * 1.01)
        .map(|max| format!("; it can be raised to {max:.0} W"));
    match (tdp_w, max_w) {
        (Some(tdp), _) if limit < tdp * 0.99 => Some(format!(
            "power_limit_capped: {limit:.0} W of default {tdp:.0} W{}",
            raise_to.unwrap_or_default()
        )),
        (_, Some(_)) if power_capped => Some(match raise_to {
            Some(raise_to) => format!("power_limit_raisable: {limit:.0} W{raise_to}"),
            None => format!("power_limit_at_max: {limit:.0} W is the most this GPU allows"),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::power_limit_evidence;
    use super::{advice, Class, Confidence, Diagnoser, Thresholds};
    use crate::sample::{GpuProcess, Metric, Sample};
    use crate::window::GpuWindower;

    /// One 2 s window of the GEMM loop under Nsight Compute's application replay
    /// (h200-profiler-and-shared: GPU-Util a steady 38%, SM 35%, tensor 5.1%, DRAM 4.6%,
    /// 245 W), its process listed once a second with `profiler` as given, diagnosed.
    fn under_replay(profiler: Option<&str>) -> super::WindowReport {
        let process = std::sync::Arc::new(vec![GpuProcess {
            pid: 496,
            name: Some("python3".into()),
            profiler: profiler.map(String::from),
            ..GpuProcess::default()
        }]);
        let mut w = GpuWindower::new(0, 2.0);
        for i in 0..20 {
            let wobble = f64::from(i % 3) * 0.4;
            let mut s = Sample::new(f64::from(i) * 0.1, 0)
                .with(Metric::UtilGpu, 38.0)
                .with(Metric::PowerMw, 245_000.0 + 1000.0 * wobble)
                .with(Metric::GpmSm, 34.8 + wobble)
                .with(Metric::GpmTensor, 5.1 + wobble / 4.0)
                .with(Metric::GpmDram, 4.6 + wobble / 4.0);
            if i % 10 == 0 {
                s.processes = Some(process.clone());
            }
            w.push(&s).expect("in order");
        }
        let stats = w
            .push(&Sample::new(2.0, 0))
            .expect("in order")
            .expect("a window");
        let mut diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
        diagnoser.diagnose_frame(vec![stats]).remove(0)
    }

    #[test]
    fn a_process_with_a_profiler_makes_the_window_low_with_the_profilers_remedy() {
        // Without a profiler on the process: the steady partial pace, medium at best, and
        // advice that checks for a profiler before the loop.
        let plain = under_replay(None);
        assert_eq!(plain.class, Class::InputStarved);
        assert_eq!(plain.confidence(), Confidence::Medium);
        assert_eq!(plain.remedy(), advice::HOST_PACED);
        // With one: the same class, low, the reason naming the tool and the process, the
        // profiler's remedy, its line first among the evidence.
        let marked = under_replay(Some("Nsight Compute (ncu)"));
        assert_eq!(marked.class, Class::InputStarved);
        assert_eq!(marked.confidence(), Confidence::Low);
        assert!(
            marked.assessment.reason.starts_with(
                "Nsight Compute (ncu) injected into PID 496 (python3) holds the counters"
            ),
            "{}",
            marked.assessment.reason
        );
        assert_eq!(marked.remedy(), advice::PROFILER);
        assert_eq!(marked.evidence[0].signal, "profiler_process");
    }

    #[test]
    fn a_cap_says_how_far_it_can_be_raised_and_a_ceiling_says_it_cannot() {
        assert_eq!(
            power_limit_evidence(Some(500.0), Some(700.0), Some(700.0), true).as_deref(),
            Some("power_limit_capped: 500 W of default 700 W; it can be raised to 700 W")
        );
        assert_eq!(
            power_limit_evidence(Some(500.0), Some(700.0), None, false).as_deref(),
            Some("power_limit_capped: 500 W of default 700 W")
        );
        assert_eq!(
            power_limit_evidence(Some(700.0), Some(700.0), Some(700.0), true).as_deref(),
            Some("power_limit_at_max: 700 W is the most this GPU allows")
        );
        assert_eq!(
            power_limit_evidence(Some(700.0), Some(700.0), Some(1000.0), true).as_deref(),
            Some("power_limit_raisable: 700 W; it can be raised to 1000 W")
        );
        // Not held back by power: the limit decides nothing.
        assert_eq!(
            power_limit_evidence(Some(700.0), Some(700.0), Some(700.0), false),
            None
        );
    }
}
