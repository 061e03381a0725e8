//! How sure a verdict is: a confidence, the classes it could not rule out, and the sources it
//! would have wanted but the window lacked (issue #27).
//!
//! The rules always name one class; this layer says how much of that class was *measured*
//! rather than inferred. It runs after the rules across GPUs ([`super::peers`]), on the final
//! class and the rule that decided it, so a verdict the peers changed is judged as what it
//! became. The principle is "no claim without its evidence": a class whose defining
//! measurement was absent (PCIe traffic for `transfer_bound`, SM activity for `launch_bound`
//! against a spin) is `low`, and its alternatives name what the same readings would also fit.
//!
//! docs/DIAGNOSIS.md ("Which sources tell which classes apart") is the table this code follows;
//! the recorded numbers behind each case are there.

use std::fmt;

use serde::Serialize;

use super::roofline::top_unit;
use super::{Class, PowerPlace, Signals, Thresholds};

/// How far the measured evidence carries a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// The readings fit other classes as well (named in `alternatives`): treat the class as
    /// the likeliest of them, not as a finding.
    Low,
    /// The class's own measurement was taken, but a neighbouring class could not be ruled out,
    /// or power was placed against baselines nobody measured on this GPU.
    Medium,
    /// The measurement that defines the class was taken and decided.
    High,
}

impl Confidence {
    pub const ALL: [Confidence; 3] = [Confidence::High, Confidence::Medium, Confidence::Low];

    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
        }
    }

    pub fn from_name(name: &str) -> Option<Confidence> {
        Confidence::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl fmt::Display for Confidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A source a verdict may rest on, named as the JSON's `unmeasured` list names it.
pub mod source {
    /// GPM: SM activity, pipes, DRAM (Hopper and later data-centre parts).
    pub const GPM: &str = "gpm";
    /// PCIe throughput, from GPM or `nvmlDeviceGetPcieThroughput`.
    pub const PCIE: &str = "pcie";
    /// NVLink throughput, from GPM or NVML's NVLink counters.
    pub const NVLINK: &str = "nvlink";
    /// The list of processes holding a context.
    pub const PROCESSES: &str = "processes";
    /// Power baselines measured on this GPU (or its model) by `gpuslack calibrate`.
    pub const CALIBRATION: &str = "calibration";
}

/// The verdict's confidence, its alternatives and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    pub confidence: Confidence,
    /// Classes the measured evidence could not rule out, likeliest first; never the class
    /// itself.
    pub alternatives: Vec<Class>,
    /// The sources this verdict would have rested on that the window lacked.
    pub unmeasured: Vec<&'static str>,
    /// One sentence for people: what the confidence rests on, or what was missing.
    pub reason: String,
}

impl Default for Assessment {
    /// Before the verdict is judged: nothing vouches for it.
    fn default() -> Self {
        Assessment {
            confidence: Confidence::Low,
            alternatives: Vec::new(),
            unmeasured: Vec::new(),
            reason: String::new(),
        }
    }
}

/// How a power profile scaled from a SKU's published specification begins its `origin`
/// (`gpuslack_calibration::sku`): such baselines were never measured on the GPU.
pub const SPEC_ORIGIN_PREFIX: &str = "scaled from the published specification";

/// Whether a profile's baselines were measured (a calibration run, or a built-in profile
/// recorded on the model) rather than scaled from a specification.
pub fn is_measured(origin: &str) -> bool {
    !origin.starts_with(SPEC_ORIGIN_PREFIX)
}

/// What the assessment reads: the final class, the rule that decided it, the signals, where
/// power sat, and whether the baselines were measured.
pub struct Inputs<'a> {
    pub class: Class,
    pub rule: &'static str,
    pub signals: &'a Signals,
    pub power: PowerPlace,
    /// Baselines from a calibration run of this GPU or a built-in profile measured on its
    /// model; `false` for TDP fractions or a specification-scaled profile.
    pub calibrated: bool,
    /// Signals of the evidence the rule returned (`spin_s`, `occupancy_per_sm`, …).
    pub evidence: &'a [&'static str],
    /// Samples in the window: a 1 Hz agent's 2 s window holds 2.
    pub samples: u32,
    /// The sentence naming a profiler the host found among the GPU's processes
    /// (`profiler_process` evidence), which becomes the reason.
    pub profiler_process: Option<&'a str>,
    /// The line and band the speed-of-light verdicts are set against.
    pub thresholds: &'a Thresholds,
}

/// Memory-controller utilisation (%) at or above which compute judged from power may be
/// bandwidth-bound instead: the random gather's controller reads 76% with DRAM at 38–59%,
/// the bf16 GEMM's 25%, the FP32 GEMM's 7% (docs/DIAGNOSIS.md, "Signals").
pub const COMPUTE_MAY_BE_MEMORY_UTIL_MEM_PCT: f64 = 30.0;

/// Points (of peak) by which the roofline rule's binding resource must lead the other for a
/// `high` verdict: decode leads by 49 (DRAM 57%, tensor 8%), the shared GPU by 55 (tensor 70%,
/// DRAM 15%); a lead within a few points is inside a window's noise.
pub const ROOFLINE_MARGIN_PCT: f64 = 10.0;

/// GPU-Util (%) at or above which NVML's PCIe readings (one 20 ms sample a second) are taken
/// to show copies that dominate: pinned copies keep a copy engine resident (h200-verdicts
/// without GPM: 85–100%), while below it pageable copies (14–18%, 7–9 GiB/s) read the same as
/// one reading that caught the starved-bursts bench's 5.8 GiB/s device→host burst at 1 Hz
/// (GPU-Util 20%), which is `input_starved`.
pub const NVML_PCIE_HIGH_UTIL_PCT: f64 = 80.0;

/// GPU-Util (%) under which a window no rule matched is mostly a held context with a kernel
/// now and then (torch.save's 8 GiB checkpoint: 1–4%, its PCIe unmeasured without GPM at
/// 10 s NVML readings): `idle_held` is among what it could be.
pub const PARTIAL_MOSTLY_HELD_UTIL_PCT: f64 = 5.0;

/// Fewer samples than this in a window cannot show whether GPU-Util is steady or comes and
/// goes: at 1 Hz (2 readings a window) the starved-bursts bench (GPU-Util 20%, duty 0.2 at
/// 100 ms) read a duty of 1.0 and, with GPM's PCIe averaged over the second, `transfer_bound`;
/// the checkpoint of h200-nogpm-lookalikes read `launch_bound` (`high` both, wrong both). The
/// rules that read the duty (`tiny_kernels`, `bursts`, and `transfer` below 80% GPU-Util) are
/// `medium` at best on so few.
pub const FEW_SAMPLES: u32 = 5;

/// Whether the rule that decided reads GPU-Util's duty (how it comes and goes within the
/// window), which only many samples a window show: `tiny_kernels`, `bursts`, and `transfer`
/// below 80% GPU-Util (`NVML_PCIE_HIGH_UTIL_PCT`). The adaptive cadence keeps such verdicts at
/// its fast tick (`source::cadence`).
pub fn reads_duty(rule: &str, util_pct: Option<f64>) -> bool {
    match rule {
        "tiny_kernels" | "bursts" => true,
        "transfer" => util_pct.unwrap_or(0.0) < NVML_PCIE_HIGH_UTIL_PCT,
        _ => false,
    }
}

/// Whether the verdict is the `partial` rule's: no rule matched and the class was chosen by
/// elimination, from window means near their thresholds (a checkpoint's device→host bursts:
/// its mean PCIe rate over two samples a window fell from 557 to 201 MiB/s and the verdict
/// from `transfer_bound` to `launch_bound`, h200-nogpm-lookalikes). The adaptive cadence keeps
/// such verdicts at its fast tick.
pub fn by_elimination(rule: &str) -> bool {
    rule == "partial"
}

/// Rules whose decision rests on power placed against the baselines without GPM; these are
/// capped at `medium` when the baselines were not measured on this GPU or its model.
fn rests_on_power(x: &Inputs) -> bool {
    let gpm = x.signals.has_gpm();
    match x.rule {
        "collective_by_power" => true,
        "hung_job" | "stalled_job" => !gpm && x.signals.nvlink_mib_s.is_none(),
        "quiet" => x.signals.nprocs.is_none() || !gpm,
        "memory" => false,
        _ => !gpm && x.power.load.is_some(),
    }
}

fn push(alts: &mut Vec<Class>, class: Class, own: Class) {
    if class != own && !alts.contains(&class) {
        alts.push(class);
    }
}

/// Judges one verdict.
pub fn assess(x: &Inputs) -> Assessment {
    let s = x.signals;
    let gpm = s.has_gpm();
    let pcie = s.pcie_mib_s.is_some();
    let nvlink = s.nvlink_mib_s.is_some();
    let own = x.class;
    let mut alts: Vec<Class> = Vec::new();
    let (mut confidence, mut reason): (Confidence, String) = match (x.rule, own) {
        (_, _) if x.evidence.contains(&"all_sm_power_load") => {
            push(&mut alts, Class::Hung, own);
            push(&mut alts, Class::ComputeBound, own);
            (
                Confidence::Low,
                "without SM counters a kernel busy on every SM and one spinning on every SM read the same: power a little above a held context, the memory idle".into(),
            )
        }
        ("spin", _) if gpm => (
            Confidence::High,
            "a flat spin read on the SM counters, with no pipe, DRAM or link activity".into(),
        ),
        ("spin", _) => {
            push(&mut alts, Class::LaunchBound, own);
            (
                Confidence::Medium,
                "without SM counters a loop of tiny kernels begun when the collective ended reads the same; the NVLink counters saw the traffic stop".into(),
            )
        }
        ("hung_job" | "stalled_job", _) if gpm || nvlink => (
            Confidence::High,
            "the job's GPUs stopped together and none has made progress since".into(),
        ),
        ("hung_job" | "stalled_job", _) => {
            push(&mut alts, Class::LaunchBound, own);
            push(&mut alts, Class::IdleHeld, own);
            (
                Confidence::Medium,
                "no GPM or NVLink counters: the job's stop was read from its GPUs' power falling together".into(),
            )
        }
        ("transfer", _) if !pcie => {
            push(&mut alts, Class::LaunchBound, own);
            (
                Confidence::Low,
                "PCIe traffic was not measured: a copy engine and one kernel streaming memory on a few SMs read the same (GPU-Util up, the memory controller a few %, no power drawn)".into(),
            )
        }
        ("transfer", _)
            if !gpm
                && s.pcie_source == Some("NVML")
                && s.util_pct.unwrap_or(0.0) < NVML_PCIE_HIGH_UTIL_PCT =>
        {
            push(&mut alts, Class::InputStarved, own);
            (
                Confidence::Medium,
                "PCIe traffic from NVML's 20 ms readings, one a second: with GPU-Util this low, a reading may have caught a data loader's copy burst rather than copies that dominate".into(),
            )
        }
        ("transfer", _) if gpm || x.power.load.is_some() => (
            Confidence::High,
            format!(
                "PCIe traffic measured ({}) while the SMs do nothing",
                s.pcie_source.unwrap_or("GPM")
            ),
        ),
        ("transfer", _) => {
            push(&mut alts, Class::LaunchBound, own);
            push(&mut alts, Class::InputStarved, own);
            (
                Confidence::Low,
                "PCIe traffic measured, but neither SM activity nor power: kernels may share the GPU with the copies".into(),
            )
        }
        ("memory", _) if gpm => (Confidence::High, "DRAM bandwidth measured (GPM)".into()),
        ("memory", _) => {
            push(&mut alts, Class::LatencyBound, own);
            (
                Confidence::Low,
                "the memory controller busy most of the time (NVML), a share of time, not of bandwidth: scattered loads keep it as busy as streaming ones, which DRAM bandwidth (GPM) would tell apart".into(),
            )
        }
        ("compute" | "roofline", Class::LatencyBound) => {
            let dram = s.dram_pct.unwrap_or(0.0) / s.busy_share();
            if dram < x.thresholds.latency_dram_pct {
                push(&mut alts, Class::ComputeBound, own);
            }
            let beyond_tiny = s.dram_pct.unwrap_or(0.0) >= super::invariants::TINY_DRAM_MAX * 100.0
                || s.tensor_pct.unwrap_or(0.0) >= super::invariants::TINY_TENSOR_MAX * 100.0;
            if x.rule == "roofline" && !beyond_tiny {
                push(&mut alts, Class::LaunchBound, own);
            }
            if alts.is_empty() {
                (
                    Confidence::High,
                    "kernels resident and every unit measured (GPM) under the speed-of-light line, DRAM busy enough to name the loads as what the warps wait on".into(),
                )
            } else {
                (
                    Confidence::Medium,
                    "kernels resident and every unit measured (GPM) under the speed-of-light line; the integer pipe was not measured, and small kernels or integer work could read the same".into(),
                )
            }
        }
        ("compute", _) if gpm => (
            Confidence::High,
            "SM activity and the pipes measured (GPM)".into(),
        ),
        ("compute", _) => {
            // Power says work, not whether a unit reaches its peak: latency-bound kernels on
            // every SM draw as much as a pipe at its line (the scatter: 0.49 of TDP).
            push(&mut alts, Class::LatencyBound, own);
            if s.util_mem_pct.unwrap_or(0.0) >= COMPUTE_MAY_BE_MEMORY_UTIL_MEM_PCT {
                push(&mut alts, Class::MemoryBound, own);
            }
            if !nvlink {
                push(&mut alts, Class::SyncWait, own);
            }
            (
                Confidence::Low,
                "without GPM, power says real work but not which kind: a pipe at its peak, kernels waiting on latency, moderate bandwidth, or compute alternating with collectives the NVLink counters would show, read the same".into(),
            )
        }
        ("roofline", _) => {
            // High where the binding resource is beyond anything tiny kernels reach and clearly
            // nearer its peak than the other (decode: DRAM 57% against the tensor pipe's 8%).
            let pipe = s.pipe_pct.unwrap_or(0.0);
            let dram = s.dram_pct.unwrap_or(0.0);
            let tensor = s.tensor_pct.unwrap_or(0.0);
            let beyond_tiny = dram >= super::invariants::TINY_DRAM_MAX * 100.0
                || tensor >= super::invariants::TINY_TENSOR_MAX * 100.0;
            let apart = (pipe - dram).abs() >= ROOFLINE_MARGIN_PCT;
            if !apart {
                let other = if own == Class::MemoryBound {
                    Class::ComputeBound
                } else {
                    Class::MemoryBound
                };
                push(&mut alts, other, own);
            }
            if !beyond_tiny {
                push(&mut alts, Class::LaunchBound, own);
            }
            if alts.is_empty() {
                (
                    Confidence::High,
                    "the binding resource measured (GPM) beyond anything tiny kernels reach, well ahead of the next".into(),
                )
            } else {
                (
                    Confidence::Medium,
                    "a partly filled GPU whose nearest resource to its peak is measured, but not far ahead of the next or of what small kernels reach".into(),
                )
            }
        }
        ("invariant", _) => {
            let other = match own {
                Class::MemoryBound => Some(Class::ComputeBound),
                Class::ComputeBound => Some(Class::MemoryBound),
                Class::LaunchBound => Some(Class::InputStarved),
                Class::InputStarved => Some(Class::LaunchBound),
                _ => None,
            };
            if let Some(other) = other {
                push(&mut alts, other, own);
            }
            (
                if gpm {
                    Confidence::Medium
                } else {
                    Confidence::Low
                },
                "the rules' verdict broke an invariant that holds whatever the thresholds, and was re-decided from the same readings".into(),
            )
        }
        ("collective", _) if gpm => (
            Confidence::High,
            "NVLink traffic measured while the SMs are partly idle".into(),
        ),
        ("collective", _) => {
            push(&mut alts, Class::ComputeBound, own);
            (
                Confidence::Medium,
                "NVLink traffic measured; without SM counters, power alone says how much of the time the GPU computes".into(),
            )
        }
        ("collective_by_power", _) => {
            push(&mut alts, Class::ComputeBound, own);
            (
                Confidence::Medium,
                "no link counters: a collective inferred from power-cap bursts across the job's GPUs".into(),
            )
        }
        ("quiet", _) if s.nprocs.is_some() => (
            Confidence::High,
            "nothing resident and the process list read".into(),
        ),
        ("quiet", Class::Idle | Class::IdleHeld) if x.power.held.is_some() => {
            let other = if own == Class::Idle {
                Class::IdleHeld
            } else {
                Class::Idle
            };
            push(&mut alts, other, own);
            (
                Confidence::Medium,
                "no process list: a held context was told from bare idle by power alone".into(),
            )
        }
        ("quiet", _) => {
            push(&mut alts, Class::IdleHeld, own);
            (
                Confidence::Low,
                "no process list and no power baselines: held and bare idle cannot be told apart"
                    .into(),
            )
        }
        ("tiny_kernels", _) if gpm && x.evidence.contains(&"spin_s") => {
            push(&mut alts, Class::Hung, own);
            (
                Confidence::Medium,
                "SM activity flat with nothing drawn: tiny kernels, or a kernel spinning that is not yet 30 s old".into(),
            )
        }
        ("tiny_kernels", _) if gpm => (
            Confidence::High,
            "SM activity measured far below GPU-Util (GPM)".into(),
        ),
        ("tiny_kernels", _) => {
            push(&mut alts, Class::Hung, own);
            if !pcie {
                push(&mut alts, Class::TransferBound, own);
            }
            (
                Confidence::Low,
                "without SM counters a kernel spinning on a few SMs looks the same (it draws a held context's power, as tiny kernels do); if this lasts and the job makes no progress, suspect a hang".into(),
            )
        }
        ("bursts", _) if gpm => (
            Confidence::High,
            "SM activity and the pipes measured: real work between waits".into(),
        ),
        ("bursts", _) if x.power.load.is_none() => {
            push(&mut alts, Class::LaunchBound, own);
            push(&mut alts, Class::IdleHeld, own);
            (
                Confidence::Low,
                "GPU-Util comes and goes, but without SM counters or power nothing says the bursts are work".into(),
            )
        }
        ("bursts", _) => {
            if !nvlink {
                push(&mut alts, Class::SyncWait, own);
            }
            if !pcie {
                push(&mut alts, Class::TransferBound, own);
            }
            if alts.is_empty() {
                (
                    Confidence::High,
                    "power drawn in proportion to GPU-Util's bursts, with the link counters quiet"
                        .into(),
                )
            } else {
                (
                    Confidence::Medium,
                    "power says the bursts are real work; what the GPU waits for between them (the host, a peer, copies) is not measured".into(),
                )
            }
        }
        ("partial", Class::TransferBound) => {
            push(&mut alts, Class::IdleHeld, own);
            (
                Confidence::Medium,
                "device→host traffic measured while the GPU idles: copies out, at a pace the host's write sets".into(),
            )
        }
        ("partial", Class::InputStarved) => {
            push(&mut alts, Class::LaunchBound, own);
            (
                if gpm {
                    Confidence::Medium
                } else {
                    Confidence::Low
                },
                "a partly filled GPU while the host streams data in: fed too slowly, or launching too small".into(),
            )
        }
        ("partial", _) => {
            push(&mut alts, Class::InputStarved, own);
            if !pcie {
                push(&mut alts, Class::TransferBound, own);
            }
            if s.util_pct.unwrap_or(0.0) < PARTIAL_MOSTLY_HELD_UTIL_PCT {
                push(&mut alts, Class::IdleHeld, own);
            }
            if !nvlink {
                push(&mut alts, Class::SyncWait, own);
            }
            (
                if gpm {
                    Confidence::Medium
                } else {
                    Confidence::Low
                },
                "no rule matched: a partly filled GPU, by elimination".into(),
            )
        }
        _ => (
            Confidence::Medium,
            "decided by a rule this assessment does not know".into(),
        ),
    };
    // The speed-of-light band: a top unit within a few points of the line may sit on either
    // side of it (GPM's pipes and ncu's compute figure differ by up to 10 points).
    if let Some(top) = top_unit(s).filter(|t| t.near_line(x.thresholds)) {
        if matches!(
            own,
            Class::ComputeBound | Class::MemoryBound | Class::LatencyBound
        ) && matches!(x.rule, "memory" | "compute" | "roofline")
        {
            push(&mut alts, top.other_side(x.thresholds), own);
            if confidence == Confidence::High {
                confidence = Confidence::Medium;
                reason.push_str(&format!(
                    "; medium: the nearest unit to its peak ({}, {:.0}% while busy) is within {:.0} points of the {:.0}% line",
                    top.label(),
                    top.busy_pct,
                    x.thresholds.bound_band_pct,
                    x.thresholds.bound_line_pct
                ));
            }
        }
    }
    // Both detectors lead to the same outcome; the host's naming of the tool is the reason
    // where it has one, since it says which profiler and where.
    if let Some(named) = x.profiler_process {
        confidence = Confidence::Low;
        reason = named.to_string();
    } else if x.evidence.contains(&"profiler") {
        confidence = Confidence::Low;
        reason = "a profiler held the performance counters in this window (they fell silent or froze while work ran): the verdict rests on what was left".into();
    }
    if x.evidence.contains(&"host_paced") && confidence == Confidence::High {
        confidence = Confidence::Medium;
        push(&mut alts, Class::LaunchBound, own);
        reason.push_str("; medium at best: kernels resident a steady share of every sample fit a host-paced loop, or a profiler serialising kernels, as well as a starved one");
    }
    if reads_duty(x.rule, s.util_pct) && x.samples < FEW_SAMPLES && confidence == Confidence::High {
        confidence = Confidence::Medium;
        let other = if own == Class::InputStarved {
            Class::LaunchBound
        } else {
            Class::InputStarved
        };
        push(&mut alts, other, own);
        reason.push_str(&format!(
            "; medium at best: {} samples in the window cannot show whether GPU-Util is steady or comes in bursts",
            x.samples
        ));
    }
    if rests_on_power(x) && !x.calibrated && confidence == Confidence::High {
        confidence = Confidence::Medium;
        reason.push_str(
            "; medium at best: the power baselines were not measured on this GPU (run gpuslack calibrate)",
        );
    }
    let mut unmeasured = Vec::new();
    if !gpm {
        unmeasured.push(source::GPM);
    }
    if !pcie {
        unmeasured.push(source::PCIE);
    }
    if !nvlink {
        unmeasured.push(source::NVLINK);
    }
    if s.nprocs.is_none() {
        unmeasured.push(source::PROCESSES);
    }
    if !x.calibrated {
        unmeasured.push(source::CALIBRATION);
    }
    Assessment {
        confidence,
        alternatives: alts,
        unmeasured,
        reason,
    }
}

impl Assessment {
    /// The short phrase for the human report: "low; could also be hung, transfer_bound".
    pub fn phrase(&self) -> String {
        if self.alternatives.is_empty() {
            format!("{} confidence", self.confidence)
        } else {
            let alts: Vec<&str> = self.alternatives.iter().map(|c| c.as_str()).collect();
            format!(
                "{} confidence; could also be {}",
                self.confidence,
                alts.join(", ")
            )
        }
    }
}
