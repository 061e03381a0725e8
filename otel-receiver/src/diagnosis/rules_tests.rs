//! Every rule on its own (issue #29, part 3): for each class, the inputs at both sides of each
//! threshold, the evidence the verdict carries, its remedy, and how sure it is (issue #27) when
//! a source is absent. The thresholds are read from [`Thresholds::default`], and
//! `docs_table_quotes_the_thresholds` checks that docs/DIAGNOSIS.md's rule table quotes the
//! same numbers, so that neither can move without the other. The property tests at the end
//! check that a verdict never flips when an input moves in a direction its rule ignores.

use std::borrow::Cow;

use proptest::prelude::*;

use super::super::confidence::{self, Assessment, Confidence};
use super::super::{advice, Class, PowerPlace, Signals, Spin, Thresholds};
use super::{classify, Rule, RuleInput, Verdict};
use crate::device::PowerBaselines;

const DOC: &str = include_str!("../../../docs/DIAGNOSIS.md");

/// The H200's measured baselines (h200-reference: 78 W bare idle, ~120 W held, 690 W peak).
fn h200() -> PowerBaselines {
    PowerBaselines {
        idle_w: 78.0,
        held_idle_w: 120.0,
        peak_w: 690.0,
        origin: Cow::Borrowed("test H200 profile"),
    }
}

/// Power (W) at a given load on [`h200`].
fn watts(load: f64) -> f64 {
    let b = h200();
    b.held_idle_w + load * (b.peak_w - b.held_idle_w)
}

/// A GPU with GPM and every link counter, a process holding it, a kernel resident in every
/// sample at `util`% and SM activity `sm`% (flat), nothing else busy, power at a held context.
fn gpm(util: f64, sm: f64) -> Signals {
    Signals {
        util_pct: Some(util),
        util_median_pct: Some(util),
        util_duty: Some(if util > 0.0 { 1.0 } else { 0.0 }),
        util_mem_pct: Some(0.0),
        sm_pct: Some(sm),
        sm_median_pct: Some(sm),
        sm_spread_pct: Some(0.0),
        sm_max_pct: Some(sm),
        occupancy_pct: Some(sm * 0.01),
        pipe_pct: Some(0.0),
        pipe_name: Some("tensor"),
        tensor_pct: Some(0.0),
        fp32_pct: Some(0.0),
        fp16_pct: Some(0.0),
        fp64_pct: Some(0.0),
        // As the fixtures recorded before `gpm_int` and the tensor split: not read.
        integer_pct: None,
        hmma_pct: None,
        imma_pct: None,
        dfma_pct: None,
        dram_pct: Some(0.0),
        pcie_mib_s: Some(0.0),
        pcie_rx_mib_s: Some(0.0),
        pcie_tx_mib_s: Some(0.0),
        pcie_source: Some("GPM"),
        nvlink_mib_s: Some(0.0),
        nvlink_rx_mib_s: Some(0.0),
        nvlink_tx_mib_s: Some(0.0),
        nvlink_source: Some("GPM"),
        power_w: Some(watts(0.0)),
        power_capped_share: Some(0.0),
        nprocs: Some(1.0),
        mem_used_bytes: Some(1e9),
        mem_total_bytes: Some(150e9),
        mem_swing_bytes_per_s: Some(0.0),
    }
}

/// The same GPU as NVML alone sees it: no GPM, NVML's link counters, power at `load`.
fn nvml(util: f64, load: f64) -> Signals {
    Signals {
        sm_pct: None,
        sm_median_pct: None,
        sm_spread_pct: None,
        sm_max_pct: None,
        occupancy_pct: None,
        pipe_pct: None,
        pipe_name: None,
        tensor_pct: None,
        fp32_pct: None,
        fp16_pct: None,
        fp64_pct: None,
        dram_pct: None,
        pcie_source: Some("NVML"),
        nvlink_source: Some("NVML"),
        power_w: Some(watts(load)),
        ..gpm(util, 0.0)
    }
}

/// Without any PCIe counter (a trace without NVML's link columns).
fn no_pcie(s: Signals) -> Signals {
    Signals {
        pcie_mib_s: None,
        pcie_rx_mib_s: None,
        pcie_tx_mib_s: None,
        pcie_source: None,
        ..s
    }
}

fn no_nvlink(s: Signals) -> Signals {
    Signals {
        nvlink_mib_s: None,
        nvlink_rx_mib_s: None,
        nvlink_tx_mib_s: None,
        nvlink_source: None,
        ..s
    }
}

fn pcie(s: Signals, rx: f64, tx: f64) -> Signals {
    Signals {
        pcie_mib_s: Some(rx + tx),
        pcie_rx_mib_s: Some(rx),
        pcie_tx_mib_s: Some(tx),
        ..s
    }
}

fn nvlink(s: Signals, mib_s: f64) -> Signals {
    Signals {
        nvlink_mib_s: Some(mib_s),
        nvlink_rx_mib_s: Some(mib_s / 2.0),
        nvlink_tx_mib_s: Some(mib_s / 2.0),
        ..s
    }
}

/// What one window decides: the verdict, its rule and its assessment.
struct Decided {
    verdict: Verdict,
    rule: Rule,
    assessment: Assessment,
}

impl Decided {
    fn signals(&self) -> Vec<&'static str> {
        self.verdict.evidence.iter().map(|e| e.signal).collect()
    }
    fn remedy(&self) -> &'static str {
        self.verdict
            .advice
            .map_or(self.verdict.class.remedy(), |a| a.text(self.verdict.class))
    }
}

fn decide_with(s: &Signals, spin: Spin, calibrated: bool) -> Decided {
    let th = Thresholds::default();
    let base = h200();
    let power = PowerPlace::of(s, Some(&base));
    let (verdict, rule) = classify(&RuleInput {
        signals: s,
        spin,
        power,
        baselines: Some(base),
        thresholds: &th,
    });
    let evidence: Vec<&'static str> = verdict.evidence.iter().map(|e| e.signal).collect();
    let assessment = confidence::assess(&confidence::Inputs {
        class: verdict.class,
        rule,
        signals: s,
        power,
        calibrated,
        evidence: &evidence,
        samples: 40,
        profiler_process: None,
        thresholds: &th,
    });
    Decided {
        verdict,
        rule,
        assessment,
    }
}

fn decide(s: &Signals) -> Decided {
    decide_with(s, Spin::None, true)
}

/// One case of a table: a name, the window, and the class and rule it must get.
struct Case {
    name: &'static str,
    signals: Signals,
    spin: Spin,
    class: Class,
    rule: &'static str,
    /// A signal the evidence must carry.
    evidence: &'static str,
}

fn case(
    name: &'static str,
    signals: Signals,
    class: Class,
    rule: &'static str,
    evidence: &'static str,
) -> Case {
    Case {
        name,
        signals,
        spin: Spin::None,
        class,
        rule,
        evidence,
    }
}

fn check(cases: &[Case]) {
    for c in cases {
        let d = decide_with(&c.signals, c.spin, true);
        assert_eq!(
            (d.verdict.class, d.rule.as_str()),
            (c.class, c.rule),
            "{}: got {} by {} ({:?})",
            c.name,
            d.verdict.class,
            d.rule,
            d.signals()
        );
        assert!(
            d.signals().contains(&c.evidence),
            "{}: evidence {:?} lacks {}",
            c.name,
            d.signals(),
            c.evidence
        );
        assert!(
            !d.assessment.alternatives.contains(&d.verdict.class),
            "{}: the class is among its own alternatives",
            c.name
        );
        for e in &d.verdict.evidence {
            assert!(
                !e.text.is_empty(),
                "{}: evidence {} has no text",
                c.name,
                e.signal
            );
        }
    }
}

/// A value just under a threshold: the other side of `>=`.
fn under(v: f64) -> f64 {
    v - 1e-6 * v.abs().max(1.0)
}

#[test]
fn docs_table_quotes_the_thresholds() {
    let th = Thresholds::default();
    let row = |rule: &str| -> &str {
        DOC.lines()
            .find(|l| l.starts_with("| ") && l.contains(&format!("| `{rule}` |")))
            .unwrap_or_else(|| panic!("docs/DIAGNOSIS.md has no table row for `{rule}`"))
    };
    let quotes: &[(&str, String)] = &[
        (
            "spin",
            format!("`sync_wait` for its first {} s", th.hang_after_s),
        ),
        ("spin", format!("≥ {}% of the SMs", th.spin_sm_min_pct)),
        ("spin", format!("`hung` after {} s", th.long_spin_s)),
        (
            "transfer",
            format!("PCIe ≥ {} GiB/s", th.transfer_pcie_mib_s / 1024.0),
        ),
        ("transfer", format!("GPU-Util ≥ {}%", th.transfer_util_pct)),
        ("transfer", format!("SM < {}%", th.transfer_sm_max_pct)),
        (
            "transfer",
            format!("power load < {}", th.transfer_power_load_max),
        ),
        ("transfer", format!("power load < {}", th.idle_power_load)),
        ("memory", format!("DRAM ≥ {}%", th.bound_line_pct)),
        (
            "memory",
            format!("memory controller ≥ {}%", th.util_mem_busy_pct),
        ),
        ("compute", format!("SM ≥ {}%", th.busy_sm_pct)),
        ("compute", format!("a unit ≥ {}%", th.bound_line_pct)),
        ("compute", format!("DRAM ≥ {}%", th.latency_dram_pct)),
        ("roofline", format!("a unit ≥ {}%", th.bound_line_pct)),
        ("compute", format!("power load ≥ {}", th.compute_power_load)),
        (
            "collective",
            format!("NVLink ≥ {} MiB/s", th.collective_nvlink_mib_s),
        ),
        ("quiet", format!("GPU-Util < {}%", th.active_util_pct)),
        ("quiet", format!("SM < {}%", th.active_sm_pct)),
        ("quiet", format!("power load < {}", th.quiet_power_load)),
        (
            "tiny_kernels",
            format!("GPU-Util ≥ {}%", th.launch_util_pct),
        ),
        (
            "tiny_kernels",
            format!("intensity < {}", th.launch_intensity_max),
        ),
        ("tiny_kernels", format!("SM < {}%", th.launch_sm_max_pct)),
        (
            "tiny_kernels",
            format!("occupancy ≥ {} × SM", th.fat_block_occupancy_ratio),
        ),
        (
            "tiny_kernels",
            format!("power intensity < {}", th.work_load_per_util),
        ),
        (
            "tiny_kernels",
            format!("power load ≥ {}", th.all_sm_power_load),
        ),
        ("bursts", format!("GPU-Util < {}%", th.starved_util_max_pct)),
        ("bursts", format!("intensity ≥ {}", th.launch_intensity_max)),
        ("bursts", format!("load ≥ {}", th.noise_power_load)),
        (
            "partial",
            format!("≥ {} MiB/s", th.transfer_pcie_mib_s / 4.0),
        ),
    ];
    for (rule, quote) in quotes {
        assert!(
            row(rule).contains(quote.as_str()),
            "docs/DIAGNOSIS.md's `{rule}` row does not say \"{quote}\": the table and \
             thresholds.rs disagree"
        );
    }
    // Every rule of the decision list has its row, in order.
    let rows: Vec<usize> = super::RULES
        .iter()
        .map(|(name, _)| {
            DOC.find(&format!("| `{name}` |"))
                .unwrap_or_else(|| panic!("no row for `{name}`"))
        })
        .collect();
    assert!(rows.windows(2).all(|w| w[0] < w[1]), "rows out of order");
}

#[test]
fn spin_after_traffic_waits_then_hangs() {
    let th = Thresholds::default();
    let spin = |for_s: f64, after_traffic: bool, level: f64| Spin::Spinning {
        for_s,
        after_traffic,
        sm_level: Some(level),
    };
    let flat = gpm(100.0, 18.2);
    check(&[
        Case {
            name: "after traffic, under hang_after_s",
            signals: flat,
            spin: spin(under(th.hang_after_s), true, 18.2),
            class: Class::SyncWait,
            rule: "spin",
            evidence: "collective_traffic_stopped",
        },
        Case {
            name: "after traffic, at hang_after_s",
            signals: flat,
            spin: spin(th.hang_after_s, true, 18.2),
            class: Class::Hung,
            rule: "spin",
            evidence: "spin_s",
        },
        Case {
            name: "no traffic, enough SMs, at long_spin_s",
            signals: flat,
            spin: spin(th.long_spin_s, false, th.spin_sm_min_pct),
            class: Class::Hung,
            rule: "spin",
            evidence: "spin_s",
        },
    ]);
    let d = decide_with(&flat, spin(th.long_spin_s, false, 18.2), true);
    assert_eq!(d.remedy(), advice::SPIN);
    assert_eq!(d.assessment.confidence, Confidence::High);
    // Not long enough, or too few SMs: a lone spin is left to the later rules.
    for (for_s, level) in [
        (under(th.long_spin_s), 18.2),
        (th.long_spin_s, under(th.spin_sm_min_pct)),
    ] {
        let d = decide_with(&gpm(100.0, level), spin(for_s, false, level), true);
        assert_ne!(d.rule, "spin", "{for_s} s at {level}%");
    }
}

#[test]
fn spin_without_gpm_names_tiny_kernels_as_its_alternative() {
    let s = nvml(100.0, 0.01);
    let d = decide_with(
        &s,
        Spin::Spinning {
            for_s: 12.0,
            after_traffic: true,
            sm_level: None,
        },
        true,
    );
    assert_eq!((d.verdict.class, d.rule.as_str()), (Class::Hung, "spin"));
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert_eq!(d.assessment.alternatives, vec![Class::LaunchBound]);
    assert!(d.assessment.unmeasured.contains(&"gpm"));
}

#[test]
fn transfer_needs_pcie_busy_gpu_util_and_idle_sms() {
    let th = Thresholds::default();
    let p = th.transfer_pcie_mib_s;
    let copy = |util: f64, sm: f64, mib_s: f64| pcie(gpm(util, sm), mib_s, 0.0);
    check(&[
        case(
            "pinned copies (GPM)",
            copy(100.0, 0.0, 56.0 * 1024.0),
            Class::TransferBound,
            "transfer",
            "pcie_mib_s",
        ),
        case(
            "at every threshold",
            copy(th.transfer_util_pct, under(th.transfer_sm_max_pct), p),
            Class::TransferBound,
            "transfer",
            "sm_active",
        ),
        case(
            "NVML PCIe, power under the line",
            pcie(nvml(100.0, under(th.transfer_power_load_max)), p, 0.0),
            Class::TransferBound,
            "transfer",
            "power_load",
        ),
    ]);
    for (name, s) in [
        ("PCIe under the line", copy(100.0, 0.0, under(p))),
        (
            "GPU-Util under the line",
            copy(under(th.transfer_util_pct), 0.0, p),
        ),
        ("SMs at the line", copy(100.0, th.transfer_sm_max_pct, p)),
        (
            "power at the line (NVML)",
            pcie(nvml(100.0, th.transfer_power_load_max), p, 0.0),
        ),
    ] {
        let d = decide(&s);
        assert_ne!(d.verdict.class, Class::TransferBound, "{name}");
    }
    let d = decide(&copy(100.0, 0.0, 56.0 * 1024.0));
    assert_eq!(d.remedy(), Class::TransferBound.remedy());
    assert_eq!(d.assessment.confidence, Confidence::High);
}

#[test]
fn transfer_without_any_pcie_counter_is_low_and_names_launch_bound() {
    // Pinned copies as a GPU without GPM or PCIe columns sees them: GPU-Util 100%, the memory
    // controller 2%, nothing drawn beyond the context (h200-reference without GPM).
    let s = no_pcie(Signals {
        util_mem_pct: Some(2.0),
        ..nvml(100.0, 0.004)
    });
    let d = decide(&s);
    assert_eq!(
        (d.verdict.class, d.rule.as_str()),
        (Class::TransferBound, "transfer")
    );
    assert_eq!(d.assessment.confidence, Confidence::Low);
    assert_eq!(d.assessment.alternatives, vec![Class::LaunchBound]);
    assert!(d.assessment.unmeasured.contains(&"pcie"));
    assert!(d
        .assessment
        .reason
        .contains("PCIe traffic was not measured"));
    // The memory controller at either edge of its 1–10% band.
    let th = Thresholds::default();
    for mem in [under(th.util_mem_quiet_pct), 10.0] {
        let s = no_pcie(Signals {
            util_mem_pct: Some(mem),
            ..nvml(100.0, 0.004)
        });
        assert_ne!(decide(&s).verdict.class, Class::TransferBound, "{mem}%");
    }
}

#[test]
fn transfer_from_nvml_readings_at_low_gpu_util_is_medium() {
    // A 20 ms NVML reading that caught a loader's burst reads like pageable copies.
    let s = pcie(nvml(20.0, 0.038), 1.0, 5952.0);
    let d = decide(&s);
    assert_eq!(d.verdict.class, Class::TransferBound);
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert_eq!(d.assessment.alternatives, vec![Class::InputStarved]);
    let s = pcie(
        nvml(confidence::NVML_PCIE_HIGH_UTIL_PCT, 0.02),
        57_000.0,
        0.0,
    );
    assert_eq!(decide(&s).assessment.confidence, Confidence::High);
}

#[test]
fn memory_needs_dram_or_the_controller_at_sixty_percent() {
    let th = Thresholds::default();
    let dram = |d: f64| Signals {
        dram_pct: Some(d),
        ..gpm(100.0, 99.7)
    };
    let controller = |m: f64| Signals {
        util_mem_pct: Some(m),
        ..nvml(100.0, 0.8)
    };
    check(&[
        case(
            "DRAM at the line",
            dram(th.bound_line_pct),
            Class::MemoryBound,
            "memory",
            "dram",
        ),
        case(
            "controller at the line (no GPM)",
            controller(th.util_mem_busy_pct),
            Class::MemoryBound,
            "memory",
            "util_mem",
        ),
    ]);
    assert_ne!(decide(&dram(under(th.bound_line_pct))).rule, "memory");
    // Just under the line on a full GPU: latency, in the band (medium, naming memory).
    let d = decide(&dram(under(th.bound_line_pct)));
    assert_eq!(d.verdict.class, Class::LatencyBound);
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert_eq!(d.assessment.alternatives, vec![Class::MemoryBound]);
    // At the line and within the band: memory, medium, naming latency; past the band: high.
    let d = decide(&dram(th.bound_line_pct));
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert_eq!(d.assessment.alternatives, vec![Class::LatencyBound]);
    let d = decide(&dram(th.bound_line_pct + th.bound_band_pct));
    assert_eq!(d.assessment.confidence, Confidence::High);
    assert!(d.assessment.alternatives.is_empty());
    // A pipe nearer its peak than DRAM is the compute rule's (an FP8 GEMM: DRAM 31%).
    let nearer = Signals {
        pipe_pct: Some(90.0),
        tensor_pct: Some(90.0),
        ..dram(70.0)
    };
    assert_eq!(decide(&nearer).verdict.class, Class::ComputeBound);
    assert_ne!(
        decide(&controller(under(th.util_mem_busy_pct))).rule,
        "memory"
    );
    // Without GPM the controller counts only with a kernel resident half the time.
    let half = Signals {
        util_mem_pct: Some(100.0),
        ..nvml(under(50.0), 0.8)
    };
    assert_ne!(decide(&half).rule, "memory");
    // Without GPM the controller's busy share is time, not bandwidth: scattered loads keep it
    // as busy, so latency is named.
    let d = decide(&controller(100.0));
    assert_eq!(d.remedy(), Class::MemoryBound.remedy());
    assert_eq!(d.assessment.confidence, Confidence::Low);
    assert_eq!(d.assessment.alternatives, vec![Class::LatencyBound]);
}

#[test]
fn compute_binds_at_the_line_and_below_it_every_unit_is_latency() {
    let th = Thresholds::default();
    let busy = |sm: f64, pipe: f64, dram: f64| Signals {
        pipe_pct: Some(pipe),
        tensor_pct: Some(pipe),
        dram_pct: Some(dram),
        power_w: Some(watts(0.98)),
        ..gpm(100.0, sm)
    };
    check(&[
        case(
            "bf16 GEMM",
            busy(96.6, 94.0, 18.0),
            Class::ComputeBound,
            "compute",
            "pipe",
        ),
        case(
            "at both lines",
            busy(th.busy_sm_pct, th.bound_line_pct, 0.0),
            Class::ComputeBound,
            "compute",
            "sm_active",
        ),
        case(
            "a pipe just under the line",
            busy(99.0, under(th.bound_line_pct), 10.0),
            Class::LatencyBound,
            "compute",
            "top_unit",
        ),
        // h100-everyday's random scatter (index_add_): SM 100%, tensor 1.4%, DRAM 29%; ncu
        // compute 33%, DRAM 29%, "latency issues".
        case(
            "the random scatter",
            busy(99.7, 1.4, 29.0),
            Class::LatencyBound,
            "compute",
            "integer_unmeasured",
        ),
        case(
            "no pipe, little DRAM",
            busy(99.6, 0.4, under(th.latency_dram_pct)),
            Class::LatencyBound,
            "compute",
            "top_unit",
        ),
    ]);
    // The scatter's words name the loads; BERT-like work (pipes at 30%, DRAM 41%) is not told
    // to sort its indices.
    let scatter = decide(&busy(99.7, 1.4, 29.0));
    assert_eq!(scatter.remedy(), advice::LATENCY_SCATTERED);
    assert_eq!(scatter.assessment.confidence, Confidence::High);
    assert_eq!(
        decide(&busy(
            99.0,
            under(th.latency_pipe_quiet_pct),
            th.latency_dram_pct
        ))
        .remedy(),
        advice::LATENCY_SCATTERED
    );
    assert_eq!(
        decide(&busy(99.0, th.latency_pipe_quiet_pct, th.latency_dram_pct)).remedy(),
        Class::LatencyBound.remedy()
    );
    assert_eq!(
        decide(&busy(99.0, 30.0, 41.0)).remedy(),
        Class::LatencyBound.remedy()
    );
    // DRAM quiet and the integer pipe unmeasured: integer work could bind; medium.
    let d = decide(&busy(99.6, 0.4, under(th.latency_dram_pct)));
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert_eq!(d.assessment.alternatives, vec![Class::ComputeBound]);
    // The band: just under the line is latency naming compute, at it compute naming latency,
    // past it compute alone.
    let d = decide(&busy(99.0, th.bound_line_pct - th.bound_band_pct, 40.0));
    assert_eq!(d.verdict.class, Class::LatencyBound);
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert!(d.assessment.alternatives.contains(&Class::ComputeBound));
    let d = decide(&busy(
        99.0,
        under(th.bound_line_pct - th.bound_band_pct),
        40.0,
    ));
    assert_eq!(d.assessment.confidence, Confidence::High);
    let d = decide(&busy(
        99.0,
        under(th.bound_line_pct + th.bound_band_pct),
        10.0,
    ));
    assert_eq!(d.verdict.class, Class::ComputeBound);
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert_eq!(d.assessment.alternatives, vec![Class::LatencyBound]);
    let d = decide(&busy(99.0, th.bound_line_pct + th.bound_band_pct, 10.0));
    assert_eq!(d.assessment.confidence, Confidence::High);
    // A window partly paused: the line is set against the share the kernels ran (a pipe at
    // 50% of the window, kernels resident 80% of it: 62.5% while running)…
    let paused = |util: f64, pipe: f64| Signals {
        util_pct: Some(util),
        util_median_pct: Some(util),
        ..busy(util * 0.9, pipe, 5.0)
    };
    assert_eq!(
        decide(&paused(80.0, 50.0)).verdict.class,
        Class::ComputeBound
    );
    // …but a pause forgives at most a quarter of it: resident 60%, a pipe at 40% (67% while
    // running, 53% of three quarters) is not shown to bind; low, naming compute.
    let d = decide(&paused(60.0, 40.0));
    assert_eq!(d.verdict.class, Class::LatencyBound);
    assert_eq!(d.assessment.confidence, Confidence::Low);
    assert_eq!(d.assessment.alternatives, vec![Class::ComputeBound]);
    assert_ne!(
        decide(&busy(under(th.busy_sm_pct), 94.0, 0.0)).rule,
        "compute"
    );
    // Busy SMs, no pipe, NVLink traffic: communication kernels, for the collective rule.
    let comm = nvlink(busy(99.0, 0.0, 0.0), th.collective_nvlink_mib_s);
    assert_eq!(decide(&comm).rule, "collective");
}

#[test]
fn the_roofline_names_the_resource_nearest_its_peak() {
    let th = Thresholds::default();
    let partly = |sm: f64, tensor: f64, dram: f64, load: f64| Signals {
        pipe_pct: Some(tensor),
        tensor_pct: Some(tensor),
        dram_pct: Some(dram),
        power_w: Some(watts(load)),
        ..gpm(100.0, sm)
    };
    // h200-middle-ground's decode in CUDA graphs (SM 69%, DRAM 57.2%, tensor 8.1%, 461 W) and
    // h200-profiler-and-shared's GEMM beside a tiny-kernel loop (SM 75.6%, tensor 69.6%, DRAM
    // 15.5%): both were launch_bound by elimination before. Decode sits in the band under the
    // speed-of-light line: latency, naming memory.
    let decode = partly(69.0, 8.1, 57.2, 0.59);
    let shared = partly(75.6, 69.6, 15.5, 0.93);
    let copy_partly = partly(69.0, 8.1, 72.0, 0.59);
    check(&[
        case(
            "decode",
            decode,
            Class::LatencyBound,
            "roofline",
            "top_unit",
        ),
        case(
            "DRAM past the line",
            copy_partly,
            Class::MemoryBound,
            "memory",
            "dram",
        ),
        case(
            "shared GPU",
            shared,
            Class::ComputeBound,
            "roofline",
            "pipe",
        ),
        case(
            "at the SM line, a pipe at the floor",
            partly(th.roofline_sm_pct, th.roofline_floor_pct, 0.0, 0.2),
            Class::LatencyBound,
            "roofline",
            "sm_active",
        ),
        case(
            "at the SM line, a pipe at the speed-of-light line",
            partly(th.roofline_sm_pct, th.bound_line_pct, 0.0, 0.2),
            Class::ComputeBound,
            "roofline",
            "pipe",
        ),
        case(
            "empty SMs but DRAM beyond tiny kernels",
            partly(10.0, 0.0, 45.0, 0.3),
            Class::LatencyBound,
            "roofline",
            "top_unit",
        ),
        case(
            "under the SM line, nothing beyond tiny kernels",
            partly(under(th.roofline_sm_pct), 20.0, 20.0, 0.2),
            Class::LaunchBound,
            "partial",
            "sm_active",
        ),
        case(
            "under the floor: a spin-like fill",
            partly(50.0, under(th.roofline_floor_pct), 0.0, 0.05),
            Class::LaunchBound,
            "partial",
            "sm_active",
        ),
    ]);
    let d = decide(&decode);
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert_eq!(d.assessment.alternatives, vec![Class::MemoryBound]);
    let d = decide(&copy_partly);
    assert_eq!(d.assessment.confidence, Confidence::High);
    let d = decide(&shared);
    assert_eq!(d.assessment.confidence, Confidence::High);
    assert_eq!(d.remedy(), advice::PARTLY_FILLED_COMPUTE);
    // Near the floor, nothing beyond tiny kernels, DRAM quiet: medium, naming small kernels
    // and the integer pipe nobody measured.
    let d = decide(&partly(40.0, 12.0, 8.0, 0.2));
    assert_eq!(d.verdict.class, Class::LatencyBound);
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert!(d.assessment.alternatives.contains(&Class::LaunchBound));
    assert!(d.assessment.alternatives.contains(&Class::ComputeBound));
    // Kernels absent a tenth of the time while the host streams 256 MiB/s: the partial rule's.
    let fed = pcie(
        Signals {
            util_pct: Some(under(90.0)),
            dram_pct: Some(45.0),
            ..decode
        },
        th.transfer_pcie_mib_s / 4.0,
        0.0,
    );
    assert_eq!(decide(&fed).verdict.class, Class::InputStarved);
    // Kernels resident under half the time are the burst rules' to judge.
    let bursty = Signals {
        util_pct: Some(under(th.starved_util_max_pct)),
        ..decode
    };
    assert_ne!(decide(&bursty).rule, "roofline");
    // Busy SMs: the compute rule sets the pipe against DRAM the same way (softmax-like rows:
    // DRAM 70% against an FP32 pipe at 45%); under the line on both, latency (DRAM 50%).
    let rows = |dram: f64| Signals {
        pipe_pct: Some(45.0),
        pipe_name: Some("fp32"),
        fp32_pct: Some(45.0),
        dram_pct: Some(dram),
        ..gpm(100.0, 99.0)
    };
    assert_eq!(
        (
            decide(&rows(50.0)).verdict.class,
            decide(&rows(50.0)).rule.as_str()
        ),
        (Class::LatencyBound, "compute")
    );
    assert_eq!(
        (
            decide(&rows(70.0)).verdict.class,
            decide(&rows(70.0)).rule.as_str()
        ),
        (Class::MemoryBound, "memory")
    );
    // On a partly filled GPU too (an FP32 conv3d-like step: SM 60%, FP32 62%, tensor 0%).
    let d = decide(&Signals {
        pipe_pct: Some(62.0),
        pipe_name: Some("fp32"),
        fp32_pct: Some(62.0),
        dram_pct: Some(20.0),
        ..gpm(100.0, 60.0)
    });
    assert_eq!(
        (d.verdict.class, d.rule.as_str()),
        (Class::ComputeBound, "roofline")
    );
    assert_eq!(d.remedy(), advice::FP32_NO_TENSOR);
    // FP32 arithmetic with the tensor pipe idle: the TF32/bf16 advice.
    let d = decide(&Signals {
        pipe_pct: Some(76.0),
        pipe_name: Some("fp32"),
        fp32_pct: Some(76.0),
        dram_pct: Some(5.0),
        ..gpm(100.0, 97.0)
    });
    assert_eq!(d.remedy(), advice::FP32_NO_TENSOR);
}

#[test]
fn compute_without_gpm_needs_power_load_and_says_what_it_cannot_tell() {
    let th = Thresholds::default();
    let s = |load: f64, util_mem: f64| Signals {
        util_mem_pct: Some(util_mem),
        ..nvml(100.0, load)
    };
    check(&[case(
        "at the line",
        s(th.compute_power_load, 5.0),
        Class::ComputeBound,
        "compute",
        "power_load",
    )]);
    // Under the line with a kernel in every sample and clearly more than a held context
    // drawn: latency by power (h100-everyday's scatter without GPM: load 0.39; h100-busy's
    // embedding bags 0.71), low, naming compute, memory (the controller at 39%) and small
    // kernels.
    let d = decide(&s(under(th.compute_power_load), 39.0));
    assert_eq!(
        (d.verdict.class, d.rule.as_str()),
        (Class::LatencyBound, "compute")
    );
    assert_eq!(d.assessment.confidence, Confidence::Low);
    assert_eq!(
        d.assessment.alternatives,
        vec![Class::ComputeBound, Class::MemoryBound, Class::LaunchBound]
    );
    assert_eq!(
        decide(&s(th.idle_power_load, 5.0)).verdict.class,
        Class::LatencyBound
    );
    assert_ne!(decide(&s(under(th.idle_power_load), 5.0)).rule, "compute");
    let unsteady = Signals {
        util_median_pct: Some(under(th.spin_util_pct)),
        ..s(0.3, 5.0)
    };
    assert_ne!(decide(&unsteady).rule, "compute");
    // Util under 80%: not judged compute from power.
    assert_ne!(decide(&nvml(under(80.0), 0.9)).rule, "compute");
    // NVLink measured quiet and the controller quiet: power says work, not whether a pipe
    // reaches its peak or the kernels wait on latency (the scatter drew 0.49 of TDP): low,
    // naming latency.
    let d = decide(&s(0.98, 5.0));
    assert_eq!(d.assessment.confidence, Confidence::Low);
    assert_eq!(d.assessment.alternatives, vec![Class::LatencyBound]);
    // The controller at 30%: moderate bandwidth cannot be ruled out either.
    let d = decide(&s(0.9, confidence::COMPUTE_MAY_BE_MEMORY_UTIL_MEM_PCT));
    assert_eq!(d.assessment.confidence, Confidence::Low);
    assert_eq!(
        d.assessment.alternatives,
        vec![Class::LatencyBound, Class::MemoryBound]
    );
    // No NVLink counter: a collective seesaw cannot be ruled out.
    let d = decide(&no_nvlink(s(0.9, 5.0)));
    assert_eq!(
        d.assessment.alternatives,
        vec![Class::LatencyBound, Class::SyncWait]
    );
    assert!(d.assessment.unmeasured.contains(&"nvlink"));
    let d = decide_with(&s(0.98, 5.0), Spin::None, false);
    assert!(d.assessment.unmeasured.contains(&"calibration"));
}

#[test]
fn collective_needs_nvlink_traffic() {
    let th = Thresholds::default();
    let pipeline = |mib_s: f64| Signals {
        power_w: Some(watts(0.69)),
        ..nvlink(gpm(100.0, 52.0), mib_s)
    };
    check(&[case(
        "at the line",
        pipeline(th.collective_nvlink_mib_s),
        Class::SyncWait,
        "collective",
        "nvlink_mib_s",
    )]);
    assert_ne!(
        decide(&pipeline(under(th.collective_nvlink_mib_s))).rule,
        "collective"
    );
    let d = decide(&pipeline(2200.0));
    assert_eq!(d.remedy(), Class::SyncWait.remedy());
    assert_eq!(d.assessment.confidence, Confidence::High);
    // NVML's counters without GPM: the traffic is measured, how much it computes is not.
    let d = decide(&nvlink(nvml(100.0, 0.69), 2200.0));
    assert_eq!(
        (d.verdict.class, d.rule.as_str()),
        (Class::SyncWait, "collective")
    );
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert_eq!(d.assessment.alternatives, vec![Class::ComputeBound]);
}

#[test]
fn quiet_reads_the_process_list_else_power() {
    let th = Thresholds::default();
    let quiet = |util: f64, sm: f64, nprocs: Option<f64>, load: f64| Signals {
        nprocs,
        power_w: Some(watts(load)),
        ..gpm(util, sm)
    };
    check(&[
        case(
            "no process",
            quiet(
                under(th.active_util_pct),
                under(th.active_sm_pct),
                Some(0.0),
                0.0,
            ),
            Class::Idle,
            "quiet",
            "nprocs",
        ),
        case(
            "a process holds it",
            quiet(0.0, 0.0, Some(1.0), 0.0),
            Class::IdleHeld,
            "quiet",
            "nprocs",
        ),
        case(
            "no process list, held power",
            quiet(0.0, 0.0, None, 0.0),
            Class::IdleHeld,
            "quiet",
            "power_w",
        ),
        case(
            "no GPM, power under the line",
            nvml(0.0, under(th.quiet_power_load)),
            Class::IdleHeld,
            "quiet",
            "nprocs",
        ),
    ]);
    assert_ne!(
        decide(&quiet(th.active_util_pct, 0.0, Some(1.0), 0.0)).rule,
        "quiet"
    );
    assert_ne!(
        decide(&quiet(0.0, th.active_sm_pct, Some(1.0), 0.0)).rule,
        "quiet"
    );
    // Without GPM, power at the line is work between GPU-Util's readings.
    assert_eq!(decide(&nvml(0.0, th.quiet_power_load)).rule, "bursts");
    let held = decide(&quiet(0.0, 0.0, Some(1.0), 0.0));
    assert_eq!(held.remedy(), Class::IdleHeld.remedy());
    assert_eq!(held.assessment.confidence, Confidence::High);
    // Processes absent: held and bare idle told apart by power alone.
    let d = decide(&quiet(0.0, 0.0, None, 0.0));
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert_eq!(d.assessment.alternatives, vec![Class::Idle]);
    assert!(d.assessment.unmeasured.contains(&"processes"));
    let bare = Signals {
        power_w: Some(78.0),
        ..quiet(0.0, 0.0, None, 0.0)
    };
    let d = decide(&bare);
    assert_eq!(d.verdict.class, Class::Idle);
    assert_eq!(d.assessment.alternatives, vec![Class::IdleHeld]);
}

#[test]
fn tiny_kernels_need_steady_util_and_empty_sms() {
    let th = Thresholds::default();
    let tiny = |util: f64, sm: f64| gpm(util, sm);
    check(&[
        case(
            "CUDA graph",
            tiny(100.0, 1.1),
            Class::LaunchBound,
            "tiny_kernels",
            "sm_per_util",
        ),
        case(
            "util at the line, intensity under it",
            tiny(
                th.launch_util_pct,
                th.launch_util_pct * under(th.launch_intensity_max),
            ),
            Class::LaunchBound,
            "tiny_kernels",
            "sm_per_util",
        ),
    ]);
    // Util under 5%: quiet-ish windows are judged by later rules.
    assert_ne!(
        decide(&tiny(under(th.launch_util_pct), 0.0)).rule,
        "tiny_kernels"
    );
    // Intensity at the line, or SM at its cap: not tiny.
    assert_ne!(
        decide(&tiny(40.0, 40.0 * th.launch_intensity_max)).rule,
        "tiny_kernels"
    );
    assert_ne!(
        decide(&tiny(100.0, th.launch_sm_max_pct)).rule,
        "tiny_kernels"
    );
    // Intermittent GPU-Util is bursts, not tiny kernels.
    let intermittent = Signals {
        util_duty: Some(under(0.75)),
        ..tiny(30.0, 0.2)
    };
    assert_ne!(decide(&intermittent).rule, "tiny_kernels");
    let d = decide(&tiny(100.0, 1.1));
    assert_eq!(d.remedy(), Class::LaunchBound.remedy());
    assert_eq!(d.assessment.confidence, Confidence::High);
}

#[test]
fn one_fat_block_is_told_from_tiny_kernels_by_occupancy() {
    let th = Thresholds::default();
    let block = |ratio: f64| Signals {
        occupancy_pct: Some(0.8 * ratio),
        ..gpm(100.0, 0.8)
    };
    let d = decide(&block(th.fat_block_occupancy_ratio));
    assert_eq!(d.verdict.class, Class::LaunchBound);
    assert!(d.signals().contains(&"occupancy_per_sm"));
    assert_eq!(d.remedy(), advice::FEW_BLOCKS);
    let d = decide(&block(under(th.fat_block_occupancy_ratio)));
    assert!(!d.signals().contains(&"occupancy_per_sm"));
    assert_eq!(d.remedy(), Class::LaunchBound.remedy());
}

#[test]
fn a_young_spin_on_many_sms_is_launch_bound_with_hung_as_alternative() {
    let th = Thresholds::default();
    let d = decide_with(
        &gpm(100.0, 18.2),
        Spin::Spinning {
            for_s: 12.0,
            after_traffic: false,
            sm_level: Some(18.2),
        },
        true,
    );
    assert_eq!(
        (d.verdict.class, d.rule.as_str()),
        (Class::LaunchBound, "tiny_kernels")
    );
    assert!(d.signals().contains(&"spin_s"));
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert_eq!(d.assessment.alternatives, vec![Class::Hung]);
    // Under 5% of the SMs it is not called a spin at all.
    let low = under(th.spin_sm_min_pct);
    let d = decide_with(
        &gpm(100.0, low),
        Spin::Spinning {
            for_s: 12.0,
            after_traffic: false,
            sm_level: Some(low),
        },
        true,
    );
    assert!(!d.signals().contains(&"spin_s"));
}

#[test]
fn tiny_kernels_without_gpm_are_low_and_name_a_spin() {
    let th = Thresholds::default();
    // A CUDA graph of tiny kernels without GPM: 121 W, under a held context.
    let d = decide(&nvml(100.0, -0.01));
    assert_eq!(
        (d.verdict.class, d.rule.as_str()),
        (Class::LaunchBound, "tiny_kernels")
    );
    assert!(d.signals().contains(&"power_per_util"));
    assert_eq!(d.assessment.confidence, Confidence::Low);
    assert!(d.assessment.alternatives.contains(&Class::Hung));
    assert!(!d.assessment.alternatives.contains(&Class::TransferBound));
    // Without PCIe either, copies that reach no memory are among the alternatives.
    let d = decide(&no_pcie(nvml(100.0, -0.01)));
    assert!(d.assessment.alternatives.contains(&Class::TransferBound));
    // Power intensity at the line: not tiny.
    assert_ne!(
        decide(&nvml(40.0, 0.4 * th.work_load_per_util)).rule,
        "tiny_kernels"
    );
}

#[test]
fn every_sm_busy_without_gpm_is_told_by_power_above_held() {
    let th = Thresholds::default();
    // The all-SM spin of h200-nogpm-lookalikes: load 0.029; a one-block spin: −0.005.
    let d = decide(&nvml(100.0, th.all_sm_power_load));
    assert_eq!(
        (d.verdict.class, d.rule.as_str()),
        (Class::LatencyBound, "tiny_kernels")
    );
    assert!(d.signals().contains(&"all_sm_power_load"));
    assert_eq!(d.remedy(), advice::ON_CHIP_OR_SPIN);
    assert_eq!(d.assessment.confidence, Confidence::Low);
    assert_eq!(
        d.assessment.alternatives,
        vec![Class::Hung, Class::ComputeBound]
    );
    let d = decide(&nvml(100.0, under(th.all_sm_power_load)));
    assert_eq!(d.verdict.class, Class::LaunchBound);
    // The memory controller busy: not a spin (allocation churn, copies).
    let touching = Signals {
        util_mem_pct: Some(th.util_mem_quiet_pct),
        ..nvml(100.0, 0.03)
    };
    assert_ne!(decide(&touching).verdict.class, Class::LatencyBound);
    // GPU-Util's median under the spin line: not every sample had the kernel.
    let unsteady = Signals {
        util_median_pct: Some(under(th.spin_util_pct)),
        ..nvml(100.0, 0.03)
    };
    assert_eq!(decide(&unsteady).verdict.class, Class::LaunchBound);
}

#[test]
fn bursts_need_low_util_and_real_work_while_resident() {
    let th = Thresholds::default();
    let bursts = |util: f64, sm: f64, duty: f64| Signals {
        util_duty: Some(duty),
        sm_max_pct: Some(90.0),
        tensor_pct: Some(sm),
        pipe_pct: Some(sm),
        ..gpm(util, sm)
    };
    check(&[
        case(
            "bursts with 80 ms waits",
            bursts(4.7, 3.9, 0.25),
            Class::InputStarved,
            "bursts",
            "sm_per_util",
        ),
        case(
            "intensity at the line",
            bursts(20.0, 20.0 * th.launch_intensity_max, 1.0),
            Class::InputStarved,
            "bursts",
            "sm_per_util",
        ),
        case(
            "no GPM, power intensity at the line",
            Signals {
                util_duty: Some(0.25),
                ..nvml(20.0, 0.2 * th.work_load_per_util)
            },
            Class::InputStarved,
            "bursts",
            "power_per_util",
        ),
    ]);
    assert_ne!(
        decide(&bursts(th.starved_util_max_pct, 40.0, 0.3)).rule,
        "bursts"
    );
    // No GPM: a load under the noise floor decides nothing.
    let faint = Signals {
        util_duty: Some(0.25),
        ..nvml(2.0, under(th.noise_power_load))
    };
    assert_ne!(decide(&faint).rule, "bursts");
    let d = decide(&bursts(4.7, 3.9, 0.25));
    assert_eq!(d.remedy(), Class::InputStarved.remedy());
    assert_eq!(d.assessment.confidence, Confidence::High);
    // Without GPM, what the GPU waits for between bursts is not measured when a link is not.
    let d = decide(&no_nvlink(Signals {
        util_duty: Some(0.25),
        ..nvml(4.0, 0.03)
    }));
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert!(d.assessment.alternatives.contains(&Class::SyncWait));
}

#[test]
fn partial_is_what_is_left_and_follows_the_host_link() {
    let th = Thresholds::default();
    let left = |util: f64, sm: f64, duty: f64| Signals {
        util_duty: Some(duty),
        ..gpm(util, sm)
    };
    check(&[
        case(
            "a partly filled GPU",
            left(60.0, 35.0, 1.0),
            Class::LaunchBound,
            "partial",
            "sm_active",
        ),
        case(
            "the host streams in",
            pcie(left(60.0, 35.0, 1.0), th.transfer_pcie_mib_s / 4.0, 0.0),
            Class::InputStarved,
            "partial",
            "pcie_mib_s",
        ),
        case(
            "a checkpoint drains the GPU",
            pcie(left(2.0, 0.0, 0.5), 0.2, th.transfer_pcie_mib_s / 4.0),
            Class::TransferBound,
            "partial",
            "pcie_tx_mib_s",
        ),
    ]);
    // Data out at GPU-Util 10%: the GPU is working, not waiting on the copy.
    let busy = pcie(left(th.transfer_util_pct, 0.0, 0.5), 0.2, 600.0);
    assert_ne!(decide(&busy).verdict.class, Class::TransferBound);
    let d = decide(&left(60.0, 35.0, 1.0));
    assert_eq!(d.assessment.confidence, Confidence::Medium);
    assert!(d.assessment.alternatives.contains(&Class::InputStarved));
    // Without GPM and PCIe: low, and copies and a held context are among what it could be.
    let d = decide(&no_pcie(Signals {
        util_duty: Some(0.5),
        ..nvml(2.0, -0.006)
    }));
    assert_eq!(
        (d.verdict.class, d.rule.as_str()),
        (Class::LaunchBound, "partial")
    );
    assert_eq!(d.assessment.confidence, Confidence::Low);
    assert!(d.assessment.alternatives.contains(&Class::TransferBound));
    assert!(d.assessment.alternatives.contains(&Class::IdleHeld));
}

#[test]
fn every_rule_has_a_case_here() {
    // The names the cases above decide by; a new rule must be added to them.
    let tested = [
        "spin",
        "transfer",
        "memory",
        "compute",
        "collective",
        "roofline",
        "quiet",
        "tiny_kernels",
        "bursts",
        "partial",
    ];
    for (name, _) in super::RULES {
        assert!(tested.contains(&name.as_str()), "rule `{name}` has no test");
    }
}

// A verdict never flips when an input moves in a direction its rule ignores.

/// Moves that no rule reads for the given windows: memory in use (below the churn line), power
/// with GPM on a GPU that is not quiet, the process count on a busy GPU.
fn irrelevant(s: &Signals, mem_gib: f64, power_w: f64, nprocs: f64) -> Signals {
    Signals {
        mem_used_bytes: Some(mem_gib * f64::from(1u32 << 30)),
        power_w: Some(power_w),
        nprocs: Some(nprocs),
        ..*s
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// With GPM, a busy window's class does not depend on power, memory in use or how many
    /// processes hold the GPU.
    #[test]
    fn gpm_verdicts_ignore_power_memory_and_processes(
        mem_gib in 0.0f64..140.0,
        power_w in 60.0f64..700.0,
        nprocs in 1.0f64..8.0,
    ) {
        let gemm = Signals { pipe_pct: Some(94.0), tensor_pct: Some(94.0), ..gpm(100.0, 96.6) };
        let copy = Signals { dram_pct: Some(89.0), ..gpm(100.0, 99.7) };
        let pinned = pcie(gpm(100.0, 0.0), 56.0 * 1024.0, 0.0);
        for s in [gemm, copy, pinned, gpm(100.0, 1.1)] {
            let before = decide(&s).verdict.class;
            let after = decide(&irrelevant(&s, mem_gib, power_w, nprocs)).verdict.class;
            prop_assert_eq!(before, after);
        }
    }

    /// More of what a rule asks for never takes its verdict away: a busier pipe for compute,
    /// more DRAM for memory, more PCIe for copies, more NVLink for a collective.
    #[test]
    fn more_of_the_defining_signal_keeps_the_verdict(extra in 0.0f64..1.0) {
        let gemm = |pipe: f64| Signals { pipe_pct: Some(pipe), tensor_pct: Some(pipe), ..gpm(100.0, 96.6) };
        prop_assert_eq!(decide(&gemm(60.0 + 40.0 * extra)).verdict.class, Class::ComputeBound);
        let copy = |dram: f64| Signals { dram_pct: Some(dram), ..gpm(100.0, 99.7) };
        prop_assert_eq!(decide(&copy(60.0 + 40.0 * extra)).verdict.class, Class::MemoryBound);
        let pinned = |mib_s: f64| pcie(gpm(100.0, 0.0), mib_s, 0.0);
        prop_assert_eq!(
            decide(&pinned(1024.0 + 60_000.0 * extra)).verdict.class,
            Class::TransferBound
        );
        let pipeline = |mib_s: f64| nvlink(gpm(100.0, 52.0), mib_s);
        prop_assert_eq!(
            decide(&pipeline(64.0 + 100_000.0 * extra)).verdict.class,
            Class::SyncWait
        );
    }

    /// Less of what a rule rules out never takes its verdict away: emptier SMs for tiny
    /// kernels, less power for a quiet GPU without GPM, less power for copies without GPM.
    #[test]
    fn less_of_what_a_rule_excludes_keeps_the_verdict(f in 0.0f64..1.0) {
        prop_assert_eq!(decide(&gpm(100.0, 1.1 * f)).verdict.class, Class::LaunchBound);
        prop_assert_eq!(
            decide(&nvml(0.0, -0.05 + 0.074 * f)).verdict.class,
            Class::IdleHeld
        );
        prop_assert_eq!(
            decide(&pcie(nvml(100.0, -0.05 + 0.19 * f), 56.0 * 1024.0, 0.0)).verdict.class,
            Class::TransferBound
        );
    }

    /// Confidence never rises when a source is taken away.
    #[test]
    fn losing_a_source_never_raises_confidence(
        util in 0.0f64..100.0,
        sm in 0.0f64..100.0,
        load in -0.05f64..1.0,
        which in 0usize..3,
    ) {
        let full = Signals { power_w: Some(watts(load)), ..gpm(util, sm.min(util)) };
        let before = decide(&full).assessment.confidence;
        let less = match which {
            0 => no_pcie(full),
            1 => no_nvlink(full),
            _ => Signals { nprocs: None, ..full },
        };
        let d = decide(&less);
        // Taking a source away may change the class (a rule that needed it no longer
        // matches); where the class and rule stay, confidence must not rise.
        if d.verdict.class == decide(&full).verdict.class && d.rule == decide(&full).rule {
            prop_assert!(d.assessment.confidence <= before, "{:?} -> {:?}", before, d.assessment.confidence);
        }
    }
}

#[test]
fn a_window_of_few_samples_cannot_show_a_steady_gpu_util() {
    // A 1 Hz agent's 2 s window: 2 readings. Tiny kernels by GPM stay the class, but medium,
    // with input_starved (bursts the 2 readings missed) as the alternative.
    let s = gpm(100.0, 1.1);
    let d = decide(&s);
    let judge = |samples: u32| {
        confidence::assess(&confidence::Inputs {
            class: d.verdict.class,
            rule: d.rule,
            signals: &s,
            power: PowerPlace::of(&s, Some(&h200())),
            calibrated: true,
            evidence: &d.signals(),
            samples,
            profiler_process: None,
            thresholds: &Thresholds::default(),
        })
    };
    let few = judge(confidence::FEW_SAMPLES - 1);
    assert_eq!(few.confidence, Confidence::Medium);
    assert_eq!(few.alternatives, vec![Class::InputStarved]);
    assert!(few.reason.contains("samples in the window"));
    assert_eq!(judge(confidence::FEW_SAMPLES).confidence, Confidence::High);
    // Rules that do not read the duty keep their confidence.
    let gemm = Signals {
        pipe_pct: Some(94.0),
        tensor_pct: Some(94.0),
        ..gpm(100.0, 96.6)
    };
    let g = decide(&gemm);
    let a = confidence::assess(&confidence::Inputs {
        class: g.verdict.class,
        rule: g.rule,
        signals: &gemm,
        power: PowerPlace::of(&gemm, Some(&h200())),
        calibrated: true,
        evidence: &g.signals(),
        samples: 2,
        profiler_process: None,
        thresholds: &Thresholds::default(),
    });
    assert_eq!(a.confidence, Confidence::High);
}
