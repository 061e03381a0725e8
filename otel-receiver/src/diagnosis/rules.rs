//! The per-window decision list. Rules run in order and the first that matches decides; each
//! returns the evidence that made it match, and advice where the class's own remedy would
//! mislead. Every rule has a GPM path and an NVML-only path (GPU-Util, the memory controller,
//! power placed against the GPU's baselines, NVML's link counters): most installed GPUs have
//! no GPM. docs/DIAGNOSIS.md walks through them with the recorded numbers behind each threshold.

use super::evidence::{pct, rate, Evidence};
use super::invariants::{TINY_DRAM_MAX, TINY_TENSOR_MAX};
use super::remedy::Advice;
use super::roofline::Resource;
use super::roofline::{top_unit, TopUnit};
use super::{Class, PowerPlace, Signals, Spin, Thresholds};
use crate::device::PowerBaselines;

/// Everything a rule may look at for one window of one GPU.
pub struct RuleInput<'a> {
    pub signals: &'a Signals,
    pub spin: Spin,
    pub power: PowerPlace,
    pub baselines: Option<PowerBaselines>,
    pub thresholds: &'a Thresholds,
}

impl RuleInput<'_> {
    /// [`Signals::busy_share`]: the share of the window the kernels ran.
    fn busy_share(&self) -> f64 {
        self.signals.busy_share(self.thresholds)
    }

    /// The evidence of where power sits, for the NVML-only paths.
    fn load_evidence(&self, load: f64, threshold: f64, what: &str) -> Evidence {
        let power = self.signals.power_w.unwrap_or(0.0);
        let origin = self
            .baselines
            .as_ref()
            .map_or(String::new(), |b| format!(" ({})", b.origin));
        Evidence::new(
            "power_load",
            load,
            Some(threshold),
            format!(
                "{power:.0} W is {} of the way from a held context to this GPU's peak{origin}: {what}",
                pct(load.max(0.0) * 100.0)
            ),
        )
    }
}

/// A class, the evidence for it, and advice where the evidence says more than the class.
pub struct Verdict {
    pub class: Class,
    pub evidence: Vec<Evidence>,
    pub advice: Option<Advice>,
}

fn verdict(class: Class, evidence: Vec<Evidence>) -> Option<Verdict> {
    Some(Verdict {
        class,
        evidence,
        advice: None,
    })
}

fn while_busy(busy: f64) -> String {
    if busy < 1.0 {
        format!(" (kernels resident {} of the window)", pct(busy * 100.0))
    } else {
        String::new()
    }
}

const NO_GPM: &str = "(no GPM)";

/// The rule that decided a verdict: the ten of the ordered list, and those of the stages after
/// it (the guard's re-decision, the rules across GPUs). An enum, so that whatever reads the
/// rule (the confidence, the cadence) is told by the compiler of a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    Spin,
    Transfer,
    Memory,
    Compute,
    Collective,
    Roofline,
    Quiet,
    TinyKernels,
    Bursts,
    Partial,
    /// The guard re-decided a verdict that broke an invariant.
    Invariant,
    /// Across GPUs: a collective inferred from power-cap bursts.
    CollectiveByPower,
    /// Across GPUs: the job's GPUs stopped together; this one spins, or waits.
    HungJob,
    StalledJob,
}

impl Rule {
    /// Its name in the JSON lines, `-v` and the OTLP log records.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Spin => "spin",
            Rule::Transfer => "transfer",
            Rule::Memory => "memory",
            Rule::Compute => "compute",
            Rule::Collective => "collective",
            Rule::Roofline => "roofline",
            Rule::Quiet => "quiet",
            Rule::TinyKernels => "tiny_kernels",
            Rule::Bursts => "bursts",
            Rule::Partial => "partial",
            Rule::Invariant => "invariant",
            Rule::CollectiveByPower => "collective_by_power",
            Rule::HungJob => "hung_job",
            Rule::StalledJob => "stalled_job",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tests and tools compare a rule with its name.
impl PartialEq<&str> for Rule {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

type RuleFn = fn(&RuleInput) -> Option<Verdict>;

/// In order: the first rule that matches decides.
const RULES: [(Rule, RuleFn); 10] = [
    (Rule::Spin, spin),
    (Rule::Transfer, transfer),
    (Rule::Memory, memory),
    (Rule::Compute, compute),
    (Rule::Collective, collective),
    (Rule::Roofline, roofline),
    (Rule::Quiet, quiet),
    (Rule::TinyKernels, tiny_kernels),
    (Rule::Bursts, bursts),
    (Rule::Partial, partial),
];

/// Classifies one window and names the rule that decided. Always returns a class: `partial`
/// matches anything left.
pub fn classify(input: &RuleInput) -> (Verdict, Rule) {
    for (name, rule) in RULES {
        if let Some(v) = rule(input) {
            return (v, name);
        }
    }
    // `partial` always matches; this only guards against a future edit of RULES.
    (
        Verdict {
            class: Class::LaunchBound,
            evidence: Vec::new(),
            advice: None,
        },
        Rule::Partial,
    )
}

fn spin(x: &RuleInput) -> Option<Verdict> {
    let Spin::Spinning {
        for_s,
        after_traffic,
        sm_level,
    } = x.spin
    else {
        return None;
    };
    let th = x.thresholds;
    let (class, threshold) = match (after_traffic, sm_level) {
        (true, _) if for_s >= th.hang_after_s => (Class::Hung, th.hang_after_s),
        (true, _) => (Class::SyncWait, th.hang_after_s),
        (false, Some(level)) if level >= th.spin_sm_min_pct && for_s >= th.long_spin_s => {
            (Class::Hung, th.long_spin_s)
        }
        (false, _) => return None,
    };
    let what = match sm_level {
        Some(level) => format!(
            "with SM activity flat at {} and no pipe, DRAM or link activity",
            pct(level)
        ),
        None => "with the memory controller idle and no power drawn beyond the context (no GPM: SM activity unseen)".into(),
    };
    let mut evidence = vec![Evidence::new(
        "spin_s",
        for_s,
        Some(threshold),
        format!("a kernel has been resident for {for_s:.0} s {what}"),
    )];
    if after_traffic {
        evidence.push(Evidence::new(
            "collective_traffic_stopped",
            1.0,
            None,
            "it began when this GPU's NVLink traffic stopped: a collective is waiting for a peer"
                .into(),
        ));
        return verdict(class, evidence);
    }
    evidence.push(Evidence::new(
        "collective_traffic_stopped",
        0.0,
        None,
        format!(
            "no collective traffic before it: real kernels draw on a pipe, DRAM or a link within {:.0} s; this one waits on a flag nobody writes",
            th.long_spin_s
        ),
    ));
    Some(Verdict {
        class,
        evidence,
        advice: Some(Advice::Spin),
    })
}

fn transfer(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let Some(pcie) = s.pcie_mib_s else {
        return transfer_unmeasured(x);
    };
    // Copies that dominate keep a copy engine busy, which GPU-Util counts (pinned: 100%;
    // pageable, staged by the driver: 14–17%); a loader's copy bursts caught by one 20 ms
    // NVML reading do not (the starved trainer: 4–6%).
    if pcie < th.transfer_pcie_mib_s || s.util_pct.unwrap_or(0.0) < th.transfer_util_pct {
        return None;
    }
    let source = s.pcie_source.unwrap_or("GPM");
    let link_ev = Evidence::new(
        "pcie_mib_s",
        pcie,
        Some(th.transfer_pcie_mib_s),
        format!(
            "PCIe moves {} (host→device {}, device→host {}; {source})",
            rate(pcie),
            rate(s.pcie_rx_mib_s.unwrap_or(0.0)),
            rate(s.pcie_tx_mib_s.unwrap_or(0.0))
        ),
    );
    let idle_ev = match (s.sm_pct, x.power.load) {
        (Some(sm), _) => {
            if sm >= th.transfer_sm_max_pct {
                return None;
            }
            Evidence::new(
                "sm_active",
                sm / 100.0,
                Some(th.transfer_sm_max_pct / 100.0),
                format!(
                    "while the SMs are {} active: copies, not kernels, keep the GPU busy",
                    pct(sm)
                ),
            )
        }
        (None, Some(load)) => {
            if load >= th.transfer_power_load_max {
                return None;
            }
            x.load_evidence(
                load,
                th.transfer_power_load_max,
                "the SMs draw nothing, copies keep the GPU busy",
            )
        }
        (None, None) => Evidence::new(
            "sm_active",
            0.0,
            None,
            "neither SM activity nor power was measured: copies may share the GPU with kernels"
                .into(),
        ),
    };
    let mut ev = vec![link_ev, idle_ev];
    if let Some(util) = s.util_pct.filter(|u| *u >= 50.0) {
        ev.push(Evidence::new(
            "util_gpu",
            util / 100.0,
            None,
            format!(
                "GPU-Util reads {} because a copy engine counts as busy",
                pct(util)
            ),
        ));
    }
    verdict(Class::TransferBound, ev)
}

/// Without GPM and without PCIe counters: a copy engine keeps GPU-Util at 100% while device
/// memory is written at the link's rate (pinned host→device copies: memory controller 2%) and
/// nothing is drawn beyond the context. Tiny kernels reach no memory at all (0%).
fn transfer_unmeasured(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    if s.has_gpm() {
        return None;
    }
    let util = s.util_median_pct.filter(|u| *u >= 90.0)?;
    let mem = s
        .util_mem_pct
        .filter(|m| *m >= th.util_mem_quiet_pct && *m < 10.0)?;
    let load = x.power.load.filter(|l| *l < th.idle_power_load)?;
    verdict(
        Class::TransferBound,
        vec![
            Evidence::new(
                "util_mem",
                mem / 100.0,
                Some(th.util_mem_quiet_pct / 100.0),
                format!(
                    "GPU-Util {} and the memory controller {} busy: device memory is written at a link's pace",
                    pct(util),
                    pct(mem)
                ),
            ),
            x.load_evidence(
                load,
                th.idle_power_load,
                "no kernel draws power, so a copy engine keeps GPU-Util up (PCIe throughput not sampled: tiny kernels that touch memory would look the same)",
            ),
        ],
    )
}

fn memory(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let busy = x.busy_share();
    if let Some(dram) = s.dram_pct {
        // DRAM binds only as the unit nearest its peak, at or above the line; a pipe nearer
        // its own is the compute rule's.
        let top = top_unit(s, th)?;
        if top.resource != Resource::Dram || !top.binds(th) {
            return None;
        }
        let mut ev = vec![Evidence::new(
            "dram",
            dram / 100.0,
            Some(th.bound_line_pct / 100.0 * busy),
            format!(
                "DRAM bandwidth at {} of peak{}",
                pct(dram),
                while_busy(busy)
            ),
        )];
        if let Some(sm) = s.sm_pct {
            ev.push(Evidence::new(
                "sm_active",
                sm / 100.0,
                None,
                format!(
                    "SMs {} active, pipes {}",
                    pct(sm),
                    pct(s.pipe_pct.unwrap_or(0.0))
                ),
            ));
        }
        return verdict(Class::MemoryBound, ev);
    }
    if s.has_gpm() || s.util_pct.unwrap_or(0.0) < 50.0 {
        return None;
    }
    let mem = s
        .util_mem_pct
        .filter(|m| m / busy >= th.util_mem_busy_pct)?;
    let mut ev = vec![Evidence::new(
        "util_mem",
        mem / 100.0,
        Some(th.util_mem_busy_pct / 100.0 * busy),
        format!(
            "the memory controller is busy {} of the time{}: bandwidth-bound work {NO_GPM}: DRAM bandwidth itself is not measured",
            pct(mem),
            while_busy(busy)
        ),
    )];
    if let Some(load) = x.power.load {
        ev.push(x.load_evidence(load, th.busy_power_load, "real work, not a stall"));
    }
    verdict(Class::MemoryBound, ev)
}

fn compute(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let busy = x.busy_share();
    let Some(sm) = s.sm_pct else {
        return compute_from_power(x);
    };
    if sm / busy < th.busy_sm_pct {
        return None;
    }
    let sm_ev = Evidence::new(
        "sm_active",
        sm / 100.0,
        Some(th.busy_sm_pct / 100.0 * busy),
        format!("SMs {} active{}", pct(sm), while_busy(busy)),
    );
    let Some(top) = top_unit(s, th) else {
        return latency(x, None, sm_ev);
    };
    if top.binds(th) {
        let name = s.pipe_name.unwrap_or("arithmetic");
        let pipe = s.pipe_pct.unwrap_or(0.0);
        let dram = s.dram_pct.unwrap_or(0.0);
        // The roofline: of the pipes and DRAM, the one nearer its peak binds.
        if top.resource == Resource::Dram {
            let dram_ev = Evidence::new(
                "dram",
                dram / 100.0,
                Some(th.bound_line_pct / 100.0 * busy),
                format!(
                    "DRAM bandwidth at {} of peak, nearer its limit than the {name} pipe ({}): bandwidth binds",
                    pct(dram),
                    pct(pipe)
                ),
            );
            return verdict(Class::MemoryBound, vec![dram_ev, sm_ev]);
        }
        let pipe_ev = Evidence::new(
            "pipe",
            pipe / 100.0,
            Some(th.bound_line_pct / 100.0 * busy),
            format!(
                "the {name} pipe is {} busy{}, at or above the {} line: real arithmetic binds",
                pct(pipe),
                while_busy(busy),
                pct(th.bound_line_pct)
            ),
        );
        return Some(Verdict {
            class: Class::ComputeBound,
            evidence: vec![pipe_ev, sm_ev],
            advice: compute_advice(s, busy, th),
        });
    }
    // Busy SMs with quiet pipes and NVLink traffic are communication kernels: leave them to
    // the collective rule.
    if s.nvlink_mib_s.unwrap_or(0.0) >= th.collective_nvlink_mib_s {
        return None;
    }
    latency(x, Some(top), sm_ev)
}

/// Kernels resident, no unit at the line: `latency_bound`, with the top unit's reading, what
/// else was measured, and what was not (the integer pipe, the load/store and special-function
/// units: Nsight Compute's compute figure counts them, GPM does not).
fn latency(x: &RuleInput, top: Option<TopUnit>, fill: Evidence) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let busy = x.busy_share();
    let dram = s.dram_pct.unwrap_or(0.0);
    let pipe = s.pipe_pct.unwrap_or(0.0);
    let top_ev = match top {
        Some(top) => Evidence::new(
            "top_unit",
            top.pct / 100.0,
            Some(th.bound_line_pct / 100.0 * busy),
            format!(
                "the unit nearest its peak, {}, runs at {} of it{}: under the {} line on every unit measured (DRAM {}, busiest pipe {}): busy, not fast",
                top.label(),
                pct(top.pct),
                while_busy(busy),
                pct(th.bound_line_pct),
                pct(dram),
                pct(pipe)
            ),
        ),
        None => Evidence::new(
            "top_unit",
            0.0,
            Some(th.bound_line_pct / 100.0),
            "neither DRAM nor any pipe was measured beside the SM activity: no unit is known to bind".into(),
        ),
    };
    let units = match s.integer_pct {
        None => Evidence::new(
            "integer_unmeasured",
            0.0,
            None,
            "the integer pipe was not measured (this source has no integer column), nor the load/store and special-function units: integer-heavy work (sort, top-k, hashing) would read the same".into(),
        ),
        Some(int) => Evidence::new(
            "integer",
            int / 100.0,
            Some(th.bound_line_pct / 100.0 * busy),
            format!(
                "the integer pipe, measured, at {}: not integer work at its peak either (the load/store and special-function units are not measured)",
                pct(int)
            ),
        ),
    };
    let scattered = dram / busy >= th.latency_dram_pct && pipe < th.latency_pipe_quiet_pct;
    Some(Verdict {
        class: Class::LatencyBound,
        evidence: vec![top_ev, fill, units],
        advice: scattered.then_some(Advice::LatencyScattered),
    })
}

/// Without GPM: a kernel resident nearly all the time and power well above a held context is
/// real work; below the memory rule's line on the memory controller, arithmetic and moderate
/// bandwidth cannot be told apart.
fn compute_from_power(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let util = s.util_pct.filter(|u| *u >= th.compute_power_util_pct)?;
    if s.nvlink_mib_s.unwrap_or(0.0) >= th.collective_nvlink_mib_s {
        return None;
    }
    let busy = x.busy_share();
    let load = x.power.load?;
    if load / busy < th.compute_power_load {
        return latency_from_power(x, load);
    }
    let mem = s
        .util_mem_pct
        .map(|m| format!(", memory controller {}", pct(m)))
        .unwrap_or_default();
    verdict(
        Class::ComputeBound,
        vec![
            x.load_evidence(load, th.compute_power_load * busy, "near what a unit at its peak draws"),
            Evidence::new(
                "util_gpu",
                util / 100.0,
                Some(0.8),
                format!(
                    "GPU-Util {}{mem} {NO_GPM}: arithmetic and moderate bandwidth cannot be told apart",
                    pct(util)
                ),
            ),
        ],
    )
}

/// Without GPM: kernels resident in every sample drawing clearly more than a held context
/// (tiny kernels and a spin draw under `idle_power_load`) but under what a unit at its peak
/// draws (`busy_power_load`): real kernels, none shown near a peak. h100-everyday's scatter
/// without GPM: GPU-Util 100%, load 0.39, the memory controller 39%.
fn latency_from_power(x: &RuleInput, load: f64) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    s.util_median_pct.filter(|u| *u >= th.spin_util_pct)?;
    if load < th.idle_power_load {
        return None;
    }
    verdict(
        Class::LatencyBound,
        vec![x.load_evidence(
            load,
            th.idle_power_load,
            &format!(
                "kernels resident in every sample draw more than tiny kernels or a spin, yet less than a unit at its peak ({}) {NO_GPM}: busy, not fast, by power alone",
                th.compute_power_load
            ),
        )],
    )
}

fn collective(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let nvlink = s
        .nvlink_mib_s
        .filter(|v| *v >= th.collective_nvlink_mib_s)?;
    let source = s.nvlink_source.unwrap_or("GPM");
    let busy_ev = match (s.sm_pct, x.power.load) {
        (Some(sm), _) => Evidence::new(
            "sm_active",
            sm / 100.0,
            Some(th.busy_sm_pct / 100.0),
            format!(
                "yet its SMs are only {} active (pipes {}): the rest of the time it waits for its peers",
                pct(sm),
                pct(s.pipe_pct.unwrap_or(0.0))
            ),
        ),
        (None, Some(load)) => x.load_evidence(
            load,
            th.capped_bursts_load_max,
            "below a GPU computing flat out: the rest of the time it waits for its peers",
        ),
        (None, None) => Evidence::new(
            "sm_active",
            0.0,
            None,
            "neither SM activity nor power was measured".into(),
        ),
    };
    verdict(
        Class::SyncWait,
        vec![
            Evidence::new(
                "nvlink_mib_s",
                nvlink,
                Some(th.collective_nvlink_mib_s),
                format!(
                    "NVLink carries {} ({source}): this GPU takes part in collectives",
                    rate(nvlink)
                ),
            ),
            busy_ev,
        ],
    )
}

/// What to change in a compute-bound window, where the pipes say more than "busy": FP32 work
/// with the tensor pipe idle (the FP32 GEMM: fp32 76%, tensor 0%) is the TF32/bf16 case; a
/// tensor pipe busy well under its peak with the SMs held (a convnet: tensor 45%, SM 94%;
/// GEMMs of 2048: 64%) spends the rest on layouts, small tiles and the ops between.
fn compute_advice(s: &Signals, busy: f64, th: &Thresholds) -> Option<Advice> {
    let tensor = s.tensor_pct.unwrap_or(0.0);
    match s.pipe_name {
        Some("fp32") if tensor < th.tensor_idle_pct => Some(Advice::Fp32NoTensor),
        Some("tensor") if tensor / busy < th.tensor_partly_pct => Some(Advice::TensorPartly),
        _ => None,
    }
}

/// The roofline for a partly filled GPU: kernels resident most of the time (GPU-Util ≥ 50%)
/// whose SMs hold warps at least `roofline_sm_pct` of that time, or that drive DRAM or the
/// tensor pipe beyond anything tiny kernels reach, run real kernels; whichever of the pipes and
/// DRAM runs nearest its peak binds the window. LLM decode in CUDA graphs (SM 69%, DRAM 57%,
/// tensor 8%, 460 W) is memory-bound, not tiny kernels; a GEMM sharing the GPU with a loop of
/// tiny kernels (SM 76%, tensor 70%, 690 W) is compute-bound.
fn roofline(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let sm = s.sm_pct?;
    let util = s.util_pct.filter(|u| *u >= th.starved_util_max_pct)?;
    // Kernels absent a tenth of the time or more while the host streams data in or out: the
    // waits are the host's (a fed loader, an offloaded optimizer), which the partial rule names.
    if util < th.host_waits_util_pct && s.pcie_mib_s.unwrap_or(0.0) >= th.transfer_pcie_mib_s / 4.0
    {
        return None;
    }
    let busy = x.busy_share();
    let pipe = s.pipe_pct.unwrap_or(0.0);
    let dram = s.dram_pct.unwrap_or(0.0);
    if pipe.max(dram) / busy < th.roofline_floor_pct {
        return None;
    }
    let beyond_tiny =
        dram / 100.0 >= TINY_DRAM_MAX || s.tensor_pct.unwrap_or(0.0) / 100.0 >= TINY_TENSOR_MAX;
    if sm / busy < th.roofline_sm_pct && !beyond_tiny {
        return None;
    }
    let sm_ev = Evidence::new(
        "sm_active",
        sm / 100.0,
        Some(th.roofline_sm_pct / 100.0 * busy),
        format!(
            "kernels resident {} of the time fill {} of the SMs: real kernels, not tiny ones",
            pct(util),
            pct(sm)
        ),
    );
    let top = top_unit(s, th)?;
    if !top.binds(th) {
        return latency(x, Some(top), sm_ev);
    }
    let class = top.bound_class();
    let name = s.pipe_name.unwrap_or("arithmetic");
    let (bound_ev, advice) = if class == Class::MemoryBound {
        (
            Evidence::new(
                "dram",
                dram / 100.0,
                Some(th.bound_line_pct / 100.0 * busy),
                format!(
                    "DRAM bandwidth at {} of peak{}, the nearest resource to its limit (the {name} pipe {}): bandwidth binds; each byte fetched feeds little arithmetic",
                    pct(dram),
                    while_busy(busy),
                    pct(pipe)
                ),
            ),
            Some(Advice::LowIntensityMemory),
        )
    } else {
        (
            Evidence::new(
                "pipe",
                pipe / 100.0,
                Some(th.bound_line_pct / 100.0 * busy),
                format!(
                    "the {name} pipe at {} of peak{}, the nearest resource to its limit (DRAM {}): arithmetic binds, on a GPU the kernels only partly fill",
                    pct(pipe),
                    while_busy(busy),
                    pct(dram)
                ),
            ),
            // FP32 work with the tensor cores idle is the TF32/bf16 case however full the SMs.
            Some(match compute_advice(s, busy, th) {
                Some(Advice::Fp32NoTensor) => Advice::Fp32NoTensor,
                _ => Advice::PartlyFilledCompute,
            }),
        )
    };
    Some(Verdict {
        class,
        evidence: vec![bound_ev, sm_ev],
        advice,
    })
}

fn quiet(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let util = s.util_pct.unwrap_or(0.0);
    if util >= th.active_util_pct || s.sm_pct.unwrap_or(0.0) >= th.active_sm_pct {
        return None;
    }
    // Without GPM, power is the only witness of work GPU-Util's samples missed.
    if !s.has_gpm() && x.power.load.is_some_and(|l| l >= th.quiet_power_load) {
        return None;
    }
    let sm = s
        .sm_pct
        .map_or_else(|| "unmeasured (no GPM)".into(), |v| pct(v).to_string());
    let quiet = Evidence::new(
        "util_gpu",
        util / 100.0,
        Some(th.active_util_pct / 100.0),
        format!("GPU-Util {} and SM activity {sm}: nothing runs", pct(util)),
    );
    if let Some(nprocs) = s.nprocs {
        let held = nprocs >= 1.0;
        let mem = s
            .mem_used_bytes
            .map(|b| format!(", {:.1} GiB in use", b / f64::from(1u32 << 30)))
            .unwrap_or_default();
        let text = if held {
            format!("{nprocs:.0} process(es) hold a context{mem}")
        } else {
            format!("no process holds a context{mem}")
        };
        let class = if held { Class::IdleHeld } else { Class::Idle };
        return verdict(
            class,
            vec![quiet, Evidence::new("nprocs", nprocs, None, text)],
        );
    }
    // No process list: tell a held context by the power it costs.
    match (s.power_w, x.baselines.as_ref(), x.power.held) {
        (Some(power), Some(base), Some(held)) => {
            let threshold = base.held_threshold_w();
            let text = if held {
                format!(
                    "{power:.0} W: a held context's level ({:.0} W), above bare idle ({:.0} W; {})",
                    base.held_idle_w, base.idle_w, base.origin
                )
            } else {
                format!(
                    "{power:.0} W: bare idle's level ({:.0} W), below a held context ({:.0} W; {})",
                    base.idle_w, base.held_idle_w, base.origin
                )
            };
            let class = if held { Class::IdleHeld } else { Class::Idle };
            verdict(
                class,
                vec![
                    quiet,
                    Evidence::new("power_w", power, Some(threshold), text),
                ],
            )
        }
        _ => verdict(Class::Idle, vec![quiet]),
    }
}

fn tiny_kernels(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let util = s.util_pct.filter(|u| *u >= th.launch_util_pct)?;
    // Tiny kernels keep a kernel resident in nearly every sample; GPU-Util that comes and goes
    // is bursts of work, judged by the burst rule.
    if !s.util_steady() {
        return None;
    }
    // Tiny kernels send nothing to the host: data leaving the GPU while GPU-Util reads a few %
    // is a copy engine draining it (h200-middle-ground's pageable device→host copies: 1.2 GiB/s
    // out at GPU-Util 4–5%, SM 0%), which the partial rule names.
    let tx = s.pcie_tx_mib_s.unwrap_or(0.0);
    if tx >= th.transfer_pcie_mib_s / 4.0 && tx > s.pcie_rx_mib_s.unwrap_or(0.0) {
        return None;
    }
    let util_ev = Evidence::new(
        "util_gpu",
        util / 100.0,
        Some(th.launch_util_pct / 100.0),
        format!(
            "GPU-Util {} and steady: the kernels come evenly, not in bursts",
            pct(util)
        ),
    );
    let (Some(sm), Some(intensity)) = (s.sm_pct, s.intensity()) else {
        let intensity = x.power.intensity.filter(|i| *i < th.work_load_per_util)?;
        if let Some(v) = all_sm_without_gpm(x) {
            return Some(v);
        }
        return verdict(
            Class::LaunchBound,
            vec![
                util_ev,
                Evidence::new(
                    "power_per_util",
                    intensity,
                    Some(th.work_load_per_util),
                    format!(
                        "yet power stays at a held context's level ({:.0} W) {NO_GPM}: the resident kernels do almost nothing — tiny kernels, or one spinning on a few SMs",
                        s.power_w.unwrap_or(0.0)
                    ),
                ),
            ],
        );
    };
    if intensity >= th.launch_intensity_max || sm >= th.launch_sm_max_pct {
        return None;
    }
    let mut evidence = vec![
        Evidence::new(
            "sm_per_util",
            intensity,
            Some(th.launch_intensity_max),
            format!(
                "SM activity {}: the resident kernels fill 1/{:.0} of what GPU-Util suggests, so they are tiny",
                pct(sm),
                1.0 / intensity.max(1e-3)
            ),
        ),
        util_ev,
    ];
    // A few fat blocks look like tiny kernels by SM activity alone; occupancy tells them
    // apart: the SMs that are active hold many warps.
    let occupancy_ratio = s
        .occupancy_pct
        .filter(|_| sm >= 0.1)
        .map(|occ| occ / sm)
        .filter(|r| *r >= th.fat_block_occupancy_ratio);
    if let Some(ratio) = occupancy_ratio {
        evidence[0] = Evidence::new(
            "occupancy_per_sm",
            ratio,
            Some(th.fat_block_occupancy_ratio),
            format!(
                "GPU-Util {} but only {} of the SMs are active, each holding {} of its warps: one long kernel on a few fat blocks, not tiny kernels",
                pct(util),
                pct(sm),
                pct(ratio * 100.0)
            ),
        );
        return Some(Verdict {
            class: Class::LaunchBound,
            evidence,
            advice: Some(Advice::FewBlocks),
        });
    }
    if let Spin::Spinning {
        for_s,
        sm_level: Some(level),
        ..
    } = x.spin
    {
        if level >= th.spin_sm_min_pct {
            evidence.push(Evidence::new(
                "spin_s",
                for_s,
                Some(th.long_spin_s),
                format!(
                    "flat at {} of the SMs for {for_s:.0} s with nothing drawn: if it stays so past {:.0} s it is a kernel spinning, not tiny kernels",
                    pct(level),
                    th.long_spin_s
                ),
            ));
        }
    }
    verdict(Class::LaunchBound, evidence)
}

/// Without GPM: a kernel resident in every sample, nothing reaching device memory, and power
/// a little but clearly above a held context. Tiny kernels and a spin on a few blocks draw a
/// held context's power; a kernel busy on every SM draws more (h200-nogpm-lookalikes: 136.5 W
/// against 117 W held). Which of on-chip work or a spin it is, the SM counters would say; the
/// verdict is `latency_bound` (no unit known near its peak), with `hung` named as what it
/// becomes if it stays flat and `compute_bound` as what on-chip arithmetic at its peak reads as.
fn all_sm_without_gpm(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    s.util_median_pct.filter(|u| *u >= th.spin_util_pct)?;
    s.util_mem_pct.filter(|m| *m < th.util_mem_quiet_pct)?;
    let load = x
        .power
        .load
        .filter(|l| *l >= th.all_sm_power_load && *l < th.idle_power_load)?;
    // On-chip work or a spin: no unit the counters could name is known to run near its peak,
    // so the likelier side of the speed-of-light line is latency; a pipe at its peak (integer
    // or on-chip arithmetic) is named as the alternative.
    Some(Verdict {
        class: Class::LatencyBound,
        evidence: vec![Evidence::new(
            "all_sm_power_load",
            load,
            Some(th.all_sm_power_load),
            format!(
                "GPU-Util {}, the memory controller idle, and {:.0} W: above a held context, which tiny kernels or a kernel on a few blocks would not be {NO_GPM}: a kernel occupies every SM with on-chip work, or spins; if it stays flat for {:.0} s and the job makes no progress, suspect a hang",
                pct(s.util_median_pct.unwrap_or(0.0)),
                s.power_w.unwrap_or(0.0),
                th.long_spin_s
            ),
        )],
        advice: Some(Advice::OnChipOrSpin),
    })
}

fn bursts(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let util = s.util_pct.unwrap_or(0.0);
    if util >= th.starved_util_max_pct {
        return None;
    }
    let intermittent = !s.util_steady();
    let resident = Evidence::new(
        "util_gpu",
        util / 100.0,
        Some(th.starved_util_max_pct / 100.0),
        format!(
            "work is resident only {} of the time{}",
            pct(util),
            s.util_duty
                .filter(|d| *d < 0.75)
                .map(|d| format!(", in {} of the samples", pct(d * 100.0)))
                .unwrap_or_default()
        ),
    );
    let work = if s.has_gpm() {
        let sm = s.sm_pct.unwrap_or(0.0);
        let drawn = s.pipe_pct.unwrap_or(0.0).max(s.dram_pct.unwrap_or(0.0));
        let real = match s.intensity() {
            Some(i) => i >= th.launch_intensity_max || (intermittent && drawn >= 0.3),
            None => true,
        };
        if !real {
            return None;
        }
        Evidence::new(
            "sm_per_util",
            s.intensity().unwrap_or(1.0),
            Some(th.launch_intensity_max),
            format!(
                "while resident the kernels fill {} of the SMs (SM activity {}): real work, arriving in bursts",
                pct(100.0 * s.intensity().unwrap_or(1.0).min(1.0)),
                pct(sm)
            ),
        )
    } else {
        match (x.power.load, x.power.intensity) {
            (Some(load), _) if util < th.active_util_pct => {
                if load < th.quiet_power_load {
                    return None;
                }
                x.load_evidence(
                    load,
                    th.quiet_power_load,
                    "power above a held context that GPU-Util's readings mostly miss: short bursts of real work between waits",
                )
            }
            (Some(load), Some(intensity)) => {
                // Tiny kernels draw nothing while resident; real work draws in proportion to
                // its residency. A floor on the load keeps a baseline a few watts off from
                // deciding.
                if intensity < th.work_load_per_util || load < th.noise_power_load {
                    return None;
                }
                Evidence::new(
                    "power_per_util",
                    intensity,
                    Some(th.work_load_per_util),
                    format!(
                        "and the kernels draw {} W above a held context for GPU-Util {} {NO_GPM}: real work, arriving in bursts",
                        (s.power_w.unwrap_or(0.0) - x.baselines.as_ref().map_or(0.0, |b| b.held_idle_w)).max(0.0).round(),
                        pct(util)
                    ),
                )
            }
            _ => {
                return verdict(Class::InputStarved, vec![resident]);
            }
        }
    };
    verdict(Class::InputStarved, vec![resident, work])
}

fn partial(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let util = s.util_pct.unwrap_or(0.0);
    let pcie = s.pcie_mib_s.unwrap_or(0.0);
    let filled = match (s.sm_pct, x.power.load) {
        (Some(sm), _) => format!("fill only {} of the SMs", pct(sm)),
        (None, Some(load)) => format!(
            "draw only {} of the way from a held context to full power {NO_GPM}",
            pct(load.max(0.0) * 100.0)
        ),
        (None, None) => "do little, by what was measured".into(),
    };
    // Data leaving the GPU while nothing runs is the host draining it (a checkpoint, results
    // written out), not a loader feeding it: h200-nogpm-lookalikes' torch.save of 8 GiB sends
    // 0.5–1.6 GiB/s device→host with GPU-Util 1–4% and nothing coming in.
    let tx = s.pcie_tx_mib_s.unwrap_or(0.0);
    if tx >= th.transfer_pcie_mib_s / 4.0
        && tx > s.pcie_rx_mib_s.unwrap_or(0.0)
        && util < th.transfer_util_pct
    {
        return verdict(
            Class::TransferBound,
            vec![Evidence::new(
                "pcie_tx_mib_s",
                tx,
                Some(th.transfer_pcie_mib_s / 4.0),
                format!(
                    "GPU-Util {} and the kernels {filled} while {} leave the GPU for the host: the GPU waits on device→host copies (a checkpoint, results written out)",
                    pct(util),
                    rate(tx)
                ),
            )],
        );
    }
    if pcie >= th.transfer_pcie_mib_s / 4.0 && util < th.host_waits_util_pct {
        return verdict(
            Class::InputStarved,
            vec![Evidence::new(
                "pcie_mib_s",
                pcie,
                Some(th.transfer_pcie_mib_s / 4.0),
                format!(
                    "GPU-Util {} and the kernels {filled} while the host streams {} in: the GPU is partly fed",
                    pct(util),
                    rate(pcie)
                ),
            )],
        );
    }
    verdict(
        Class::LaunchBound,
        vec![Evidence::new(
            "sm_active",
            s.sm_pct.unwrap_or(0.0) / 100.0,
            Some(th.busy_sm_pct / 100.0),
            format!(
                "kernels keep GPU-Util at {} but {filled}: grids too small or gaps between launches",
                pct(util)
            ),
        )],
    )
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
