//! The per-window decision list. Rules run in order and the first that matches decides; each
//! returns the evidence that made it match. docs/DIAGNOSIS.md walks through them with the
//! recorded numbers behind each threshold.

use super::evidence::{pct, rate, Evidence};
use super::{Class, Signals, Spin, Thresholds};
use crate::device::PowerBaselines;

/// Everything a rule may look at for one window of one GPU.
pub struct RuleInput<'a> {
    pub signals: &'a Signals,
    pub spin: Spin,
    pub tdp_w: Option<f64>,
    pub baselines: Option<PowerBaselines>,
    pub thresholds: &'a Thresholds,
}

impl RuleInput<'_> {
    fn power_frac(&self) -> Option<f64> {
        Some(self.signals.power_w? / self.tdp_w?)
    }

    /// Share of the window a kernel was resident, when that is most of it (GPU-Util ≥ 50%).
    /// Activity divided by it is the activity *while working*: a window where a GEMM ran for
    /// 86% of the time is a compute-bound window with a pause, not a half-filled GPU. Below
    /// half, pauses are the story and the burst rules judge the window.
    fn busy_share(&self) -> f64 {
        match self.signals.util_pct {
            Some(util) if util >= 50.0 => (util / 100.0).min(1.0),
            _ => 1.0,
        }
    }
}

type Verdict = (Class, Vec<Evidence>);

fn while_busy(busy: f64) -> String {
    if busy < 1.0 {
        format!(" (kernels resident {} of the window)", pct(busy * 100.0))
    } else {
        String::new()
    }
}
type Rule = fn(&RuleInput) -> Option<Verdict>;

/// In order: the first rule that matches decides.
const RULES: [(&str, Rule); 9] = [
    ("spin", spin),
    ("transfer", transfer),
    ("memory", memory),
    ("compute", compute),
    ("collective", collective),
    ("quiet", quiet),
    ("tiny_kernels", tiny_kernels),
    ("bursts", bursts),
    ("partial", partial),
];

/// Classifies one window and names the rule that decided. Always returns a class: `partial`
/// matches anything left.
pub fn classify(input: &RuleInput) -> (Class, Vec<Evidence>, &'static str) {
    for (name, rule) in RULES {
        if let Some((class, evidence)) = rule(input) {
            return (class, evidence, name);
        }
    }
    // `partial` always matches; this only guards against a future edit of RULES.
    (Class::LaunchBound, Vec::new(), "partial")
}

fn spin(x: &RuleInput) -> Option<Verdict> {
    let Spin::Spinning {
        for_s,
        after_traffic,
    } = x.spin
    else {
        return None;
    };
    let th = x.thresholds;
    let sm = x.signals.sm_pct.unwrap_or(0.0);
    let spinning = Evidence::new(
        "spin_s",
        for_s,
        Some(if after_traffic {
            th.hang_after_s
        } else {
            th.long_spin_s
        }),
        format!(
            "a kernel has been resident for {for_s:.0} s with SM activity flat at {} and no pipe, DRAM or NVLink activity",
            pct(sm)
        ),
    );
    let after = Evidence::new(
        "collective_traffic_stopped",
        1.0,
        None,
        "it began when this GPU's NVLink traffic stopped: a collective is waiting for a peer"
            .into(),
    );
    match (
        after_traffic,
        for_s >= th.hang_after_s,
        for_s >= th.long_spin_s,
    ) {
        (true, true, _) => Some((Class::Hung, vec![spinning, after])),
        (true, false, _) => Some((Class::SyncWait, vec![spinning, after])),
        (false, _, true) => Some((Class::Hung, vec![spinning])),
        (false, _, false) => None,
    }
}

fn transfer(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let pcie = s.pcie_mib_s.filter(|v| *v >= th.transfer_pcie_mib_s)?;
    let sm = s.sm_pct.filter(|v| *v < th.transfer_sm_max_pct)?;
    let mut ev = vec![
        Evidence::new(
            "pcie_mib_s",
            pcie,
            Some(th.transfer_pcie_mib_s),
            format!(
                "PCIe moves {} (host→device {}, device→host {})",
                rate(pcie),
                rate(s.pcie_rx_mib_s.unwrap_or(0.0)),
                rate(s.pcie_tx_mib_s.unwrap_or(0.0))
            ),
        ),
        Evidence::new(
            "sm_active",
            sm / 100.0,
            Some(th.transfer_sm_max_pct / 100.0),
            format!(
                "while the SMs are {} active: copies, not kernels, keep the GPU busy",
                pct(sm)
            ),
        ),
    ];
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
    Some((Class::TransferBound, ev))
}

fn memory(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let busy = x.busy_share();
    let dram = s.dram_pct.filter(|v| v / busy >= th.dram_busy_pct)?;
    let mut ev = vec![Evidence::new(
        "dram",
        dram / 100.0,
        Some(th.dram_busy_pct / 100.0 * busy),
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
    Some((Class::MemoryBound, ev))
}

fn compute(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let busy = x.busy_share();
    match s.sm_pct {
        Some(sm) if sm / busy >= th.busy_sm_pct => {
            let sm_ev = Evidence::new(
                "sm_active",
                sm / 100.0,
                Some(th.busy_sm_pct / 100.0 * busy),
                format!("SMs {} active{}", pct(sm), while_busy(busy)),
            );
            if let Some(pipe) = s.pipe_pct.filter(|p| p / busy >= th.pipe_busy_pct) {
                let name = s.pipe_name.unwrap_or("arithmetic");
                let pipe_ev = Evidence::new(
                    "pipe",
                    pipe / 100.0,
                    Some(th.pipe_busy_pct / 100.0 * busy),
                    format!("the {name} pipe is {} busy: real arithmetic", pct(pipe)),
                );
                return Some((Class::ComputeBound, vec![pipe_ev, sm_ev]));
            }
            // Busy SMs with quiet pipes and NVLink traffic are communication kernels: leave
            // them to the collective rule.
            if s.nvlink_mib_s.unwrap_or(0.0) >= th.collective_nvlink_mib_s {
                return None;
            }
            let pipe_ev = Evidence::new(
                "pipe",
                s.pipe_pct.unwrap_or(0.0) / 100.0,
                Some(th.pipe_busy_pct / 100.0),
                format!(
                    "no pipe above {}: latency- or integer-bound kernels keep the SMs busy",
                    pct(th.pipe_busy_pct)
                ),
            );
            Some((Class::ComputeBound, vec![sm_ev, pipe_ev]))
        }
        Some(_) => None,
        None => {
            let util = s.util_pct.filter(|u| *u >= th.spin_util_pct)?;
            let frac = x.power_frac().filter(|f| *f >= th.busy_power_frac)?;
            Some((
                Class::ComputeBound,
                vec![
                    Evidence::new(
                        "power_frac",
                        frac,
                        Some(th.busy_power_frac),
                        format!("power at {} of TDP", pct(frac * 100.0)),
                    ),
                    Evidence::new(
                        "util_gpu",
                        util / 100.0,
                        Some(th.spin_util_pct / 100.0),
                        format!(
                            "GPU-Util {} (no GPM: compute and memory cannot be told apart)",
                            pct(util)
                        ),
                    ),
                ],
            ))
        }
    }
}

fn collective(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let nvlink = s
        .nvlink_mib_s
        .filter(|v| *v >= th.collective_nvlink_mib_s)?;
    let sm = s.sm_pct.unwrap_or(0.0);
    Some((
        Class::SyncWait,
        vec![
            Evidence::new(
                "nvlink_mib_s",
                nvlink,
                Some(th.collective_nvlink_mib_s),
                format!("NVLink carries {}: this GPU takes part in collectives", rate(nvlink)),
            ),
            Evidence::new(
                "sm_active",
                sm / 100.0,
                Some(th.busy_sm_pct / 100.0),
                format!(
                    "yet its SMs are only {} active (pipes {}): the rest of the time it waits for its peers",
                    pct(sm),
                    pct(s.pipe_pct.unwrap_or(0.0))
                ),
            ),
        ],
    ))
}

fn quiet(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let util = s.util_pct.unwrap_or(0.0);
    if util >= th.active_util_pct || s.sm_pct.unwrap_or(0.0) >= th.active_sm_pct {
        return None;
    }
    let quiet = Evidence::new(
        "util_gpu",
        util / 100.0,
        Some(th.active_util_pct / 100.0),
        format!(
            "GPU-Util {} and SM activity {}: nothing runs",
            pct(util),
            pct(s.sm_pct.unwrap_or(0.0))
        ),
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
        return Some((
            class,
            vec![quiet, Evidence::new("nprocs", nprocs, None, text)],
        ));
    }
    // No process list: tell a held context by the power it costs.
    match (s.power_w, x.baselines.as_ref()) {
        (Some(power), Some(base)) => {
            let threshold = base.held_threshold_w();
            let held = power >= threshold;
            let text = format!(
                "{power:.0} W is {} bare idle ({:.0} W) than a held context ({:.0} W; {})",
                if held { "further from" } else { "closer to" },
                base.idle_w,
                base.held_idle_w,
                base.origin
            );
            let class = if held { Class::IdleHeld } else { Class::Idle };
            Some((
                class,
                vec![
                    quiet,
                    Evidence::new("power_w", power, Some(threshold), text),
                ],
            ))
        }
        _ => Some((Class::Idle, vec![quiet])),
    }
}

fn tiny_kernels(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let util = s.util_pct.filter(|u| *u >= th.launch_util_pct)?;
    let util_ev = Evidence::new(
        "util_gpu",
        util / 100.0,
        Some(th.launch_util_pct / 100.0),
        format!("GPU-Util {}: kernels are resident", pct(util)),
    );
    match (s.sm_pct, s.intensity()) {
        (Some(sm), Some(intensity)) => {
            if intensity >= th.launch_intensity_max || sm >= th.launch_sm_max_pct {
                return None;
            }
            Some((
                Class::LaunchBound,
                vec![
                    Evidence::new(
                        "sm_per_util",
                        intensity,
                        Some(th.launch_intensity_max),
                        format!(
                            "GPU-Util {} but SM activity {}: the SMs are {:.0}× emptier than GPU-Util claims, the kernels are tiny",
                            pct(util),
                            pct(sm),
                            1.0 / intensity.max(1e-3)
                        ),
                    ),
                    util_ev,
                ],
            ))
        }
        _ => {
            let frac = x.power_frac().filter(|f| *f < th.tiny_power_frac)?;
            Some((
                Class::LaunchBound,
                vec![
                    util_ev,
                    Evidence::new(
                        "power_frac",
                        frac,
                        Some(th.tiny_power_frac),
                        format!(
                            "at {} of TDP, near idle power (no GPM: judged from power)",
                            pct(frac * 100.0)
                        ),
                    ),
                ],
            ))
        }
    }
}

fn bursts(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let util = s.util_pct.unwrap_or(0.0);
    if util >= th.starved_util_max_pct {
        return None;
    }
    let intensity = s.intensity();
    if intensity.is_some_and(|i| i < th.launch_intensity_max) {
        return None;
    }
    let mut ev = vec![Evidence::new(
        "util_gpu",
        util / 100.0,
        Some(th.starved_util_max_pct / 100.0),
        format!(
            "work is resident only {} of the time{}",
            pct(util),
            s.util_duty
                .filter(|d| *d < 0.5)
                .map(|d| format!(", in {} of the samples", pct(d * 100.0)))
                .unwrap_or_default()
        ),
    )];
    if let (Some(sm), Some(i)) = (s.sm_pct, intensity) {
        ev.push(Evidence::new(
            "sm_per_util",
            i,
            Some(th.launch_intensity_max),
            format!(
                "and when it runs the SMs are busy (SM {} for GPU-Util {}, peaks of {}): real work, arriving in bursts",
                pct(sm),
                pct(util),
                pct(s.sm_max_pct.unwrap_or(sm))
            ),
        ));
    }
    Some((Class::InputStarved, ev))
}

fn partial(x: &RuleInput) -> Option<Verdict> {
    let s = x.signals;
    let th = x.thresholds;
    let util = s.util_pct.unwrap_or(0.0);
    let sm = s.sm_pct.unwrap_or(0.0);
    let pcie = s.pcie_mib_s.unwrap_or(0.0);
    if pcie >= th.transfer_pcie_mib_s / 4.0 && util < 90.0 {
        return Some((
            Class::InputStarved,
            vec![Evidence::new(
                "pcie_mib_s",
                pcie,
                Some(th.transfer_pcie_mib_s / 4.0),
                format!(
                    "GPU-Util {} and SMs {} active while the host streams {} in: the GPU is partly fed",
                    pct(util),
                    pct(sm),
                    rate(pcie)
                ),
            )],
        ));
    }
    Some((
        Class::LaunchBound,
        vec![Evidence::new(
            "sm_active",
            sm / 100.0,
            Some(th.busy_sm_pct / 100.0),
            format!(
                "kernels keep GPU-Util at {} but fill only {} of the SMs: grids too small or gaps between launches",
                pct(util),
                pct(sm)
            ),
        )],
    ))
}
