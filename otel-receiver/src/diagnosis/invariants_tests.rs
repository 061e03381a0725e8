//! The invariants at their edges, and as properties: over generated windows and generated
//! thresholds, the rules followed by the guard never leave a verdict that breaks one.

use std::borrow::Cow;

use proptest::prelude::*;

use super::super::rules::{classify, RuleInput};
use super::super::{Class, PowerPlace, Signals, Spin, Thresholds};
use super::*;
use crate::device::PowerBaselines;

fn reading(sm: Option<f64>, dram: f64, tensor: f64, duty: f64, power_w: f64) -> Reading {
    Reading {
        sm,
        dram: Some(dram),
        tensor: Some(tensor),
        duty: Some(duty),
        power_w: Some(power_w),
        tdp_w: Some(700.0),
    }
}

#[test]
fn each_invariant_at_its_edges() {
    // Tiny kernels: 55% of 700 W is 385 W; DRAM 40%; tensor 30%.
    let r = |power, dram, tensor| reading(Some(0.05), dram, tensor, 1.0, power);
    assert_eq!(violated(Class::LaunchBound, &r(384.9, 0.0, 0.0)), None);
    assert_eq!(
        violated(Class::LaunchBound, &r(385.0, 0.0, 0.0)),
        Some(Invariant::TinyButDrawing)
    );
    assert_eq!(violated(Class::LaunchBound, &r(121.0, 0.399, 0.299)), None);
    assert_eq!(
        violated(Class::LaunchBound, &r(121.0, 0.4, 0.0)),
        Some(Invariant::TinyButDrawing)
    );
    assert_eq!(
        violated(Class::LaunchBound, &r(121.0, 0.0, 0.3)),
        Some(Invariant::TinyButDrawing)
    );
    // Full SMs: 90% and a kernel in 98% of the samples.
    let full = |sm, duty| reading(Some(sm), 0.1, 0.1, duty, 300.0);
    for class in [Class::Idle, Class::IdleHeld, Class::InputStarved] {
        assert_eq!(
            violated(class, &full(0.9, 0.98)),
            Some(Invariant::FullButWaiting)
        );
        assert_eq!(violated(class, &full(0.899, 0.98)), None);
        assert_eq!(violated(class, &full(0.9, 0.979)), None);
    }
    // Empty SMs at low power: 20% and 30% of TDP (210 W).
    let empty = |sm, power| reading(Some(sm), 0.0, 0.0, 1.0, power);
    for class in [Class::ComputeBound, Class::MemoryBound, Class::LatencyBound] {
        assert_eq!(
            violated(class, &empty(0.199, 209.9)),
            Some(Invariant::EmptyButBound)
        );
        assert_eq!(violated(class, &empty(0.2, 150.0)), None);
        assert_eq!(violated(class, &empty(0.1, 210.0)), None);
    }
    // Without SM counters, only the first one can be judged; without TDP, not by power.
    let no_gpm = Reading {
        sm: None,
        dram: None,
        tensor: None,
        duty: Some(1.0),
        power_w: Some(500.0),
        tdp_w: Some(700.0),
    };
    assert_eq!(
        violated(Class::LaunchBound, &no_gpm),
        Some(Invariant::TinyButDrawing)
    );
    assert_eq!(violated(Class::InputStarved, &no_gpm), None);
    let no_tdp = Reading {
        tdp_w: None,
        ..no_gpm
    };
    assert_eq!(violated(Class::LaunchBound, &no_tdp), None);
}

#[test]
fn the_guard_re_decides_decode_read_as_tiny_kernels() {
    // h200-middle-ground's decode as the old partial rule read it: launch_bound at 461 W with
    // DRAM 57%, tensor 8%, SM 69%.
    let s = Signals {
        util_pct: Some(100.0),
        sm_pct: Some(69.0),
        tensor_pct: Some(8.1),
        pipe_pct: Some(8.1),
        pipe_name: Some("tensor"),
        dram_pct: Some(57.2),
        power_w: Some(461.0),
        ..Signals::default()
    };
    let r = Reading::of(&s, Some(1.0), Some(700.0));
    let fixed = guard(Class::LaunchBound, &s, &r, &Thresholds::default()).expect("re-decided");
    // DRAM, the top unit, sits under the speed-of-light line: latency.
    assert_eq!(fixed.class, Class::LatencyBound);
    assert_eq!(fixed.broken, Invariant::TinyButDrawing);
    // The same with DRAM at the line: memory.
    let at_line = Signals {
        dram_pct: Some(Thresholds::default().bound_line_pct),
        ..s
    };
    let r_line = Reading::of(&at_line, Some(1.0), Some(700.0));
    let fixed_line = guard(
        Class::LaunchBound,
        &at_line,
        &r_line,
        &Thresholds::default(),
    )
    .expect("re-decided");
    assert_eq!(fixed_line.class, Class::MemoryBound);
    assert!(
        fixed.evidence.text.contains("461 W, 66% of TDP"),
        "{}",
        fixed.evidence.text
    );
    // A verdict that breaks nothing is left alone.
    assert_eq!(
        guard(Class::LatencyBound, &s, &r, &Thresholds::default()),
        None
    );
    // Without GPM, at 500 W with the memory controller at 13%: compute, by power.
    let nogpm = Signals {
        util_pct: Some(100.0),
        util_mem_pct: Some(13.0),
        power_w: Some(500.0),
        ..Signals::default()
    };
    let r = Reading::of(&nogpm, Some(1.0), Some(700.0));
    let fixed = guard(Class::LaunchBound, &nogpm, &r, &Thresholds::default()).expect("fixed");
    assert_eq!(fixed.class, Class::ComputeBound);
    // Empty SMs at low power said compute_bound: launch_bound if GPU-Util is steady, else
    // input_starved, and idle_held with nothing resident.
    let empty = Signals {
        util_pct: Some(100.0),
        util_duty: Some(1.0),
        sm_pct: Some(1.0),
        power_w: Some(121.0),
        ..Signals::default()
    };
    let r = Reading::of(&empty, Some(1.0), Some(700.0));
    let fixed = guard(Class::ComputeBound, &empty, &r, &Thresholds::default()).expect("fixed");
    assert_eq!(fixed.class, Class::LaunchBound);
    let fixed = guard(Class::LatencyBound, &empty, &r, &Thresholds::default()).expect("fixed");
    assert_eq!(fixed.class, Class::LaunchBound);
    assert_eq!(fixed.broken, Invariant::EmptyButBound);
    let bursts = Signals {
        util_duty: Some(0.3),
        ..empty
    };
    let fixed = guard(Class::MemoryBound, &bursts, &r, &Thresholds::default()).expect("fixed");
    assert_eq!(fixed.class, Class::InputStarved);
    // Empty and moving data (generated, not physical): launch_bound is forbidden too, so the
    // guard falls back to input_starved.
    let odd = Signals {
        dram_pct: Some(50.0),
        ..empty
    };
    let r = Reading::of(&odd, Some(1.0), Some(700.0));
    let fixed = guard(Class::ComputeBound, &odd, &r, &Thresholds::default()).expect("fixed");
    assert_eq!(fixed.class, Class::InputStarved);
    assert_eq!(violated(fixed.class, &r), None);
}

fn opt(range: std::ops::Range<f64>) -> impl Strategy<Value = Option<f64>> {
    prop_oneof![Just(None), range.prop_map(Some)]
}

prop_compose! {
    /// Any window a GPU could report, and many it could not: every signal independent.
    fn signals()(
        util in opt(0.0..100.0),
        duty in opt(0.0..1.0),
        util_mem in opt(0.0..100.0),
        gpm in any::<bool>(),
        sm in 0.0..100.0f64,
        occ in 0.0..100.0f64,
        tensor in 0.0..100.0f64,
        fp32 in 0.0..100.0f64,
        dram in 0.0..100.0f64,
        pcie in opt(0.0..60_000.0),
        nvlink in opt(0.0..5_000.0),
        power in opt(60.0..720.0),
        nprocs in opt(0.0..3.0),
    ) -> Signals {
        let (pipe, name) = if tensor >= fp32 { (tensor, "tensor") } else { (fp32, "fp32") };
        Signals {
            util_pct: util,
            util_median_pct: util,
            util_duty: duty,
            util_mem_pct: util_mem,
            sm_pct: gpm.then_some(sm),
            sm_median_pct: gpm.then_some(sm),
            sm_spread_pct: gpm.then_some(0.5),
            sm_max_pct: gpm.then_some(sm),
            occupancy_pct: gpm.then_some(occ),
            pipe_pct: gpm.then_some(pipe),
            pipe_name: gpm.then_some(name),
            tensor_pct: gpm.then_some(tensor),
            fp32_pct: gpm.then_some(fp32),
            dram_pct: gpm.then_some(dram),
            pcie_mib_s: pcie,
            pcie_rx_mib_s: pcie,
            pcie_tx_mib_s: pcie.map(|_| 0.0),
            pcie_source: pcie.map(|_| "GPM"),
            nvlink_mib_s: nvlink,
            nvlink_rx_mib_s: nvlink,
            power_w: power,
            nprocs: nprocs.map(f64::floor),
            ..Signals::default()
        }
    }
}

prop_compose! {
    /// Thresholds anywhere from a quarter to four times their defaults.
    fn thresholds()(scale in proptest::collection::vec(0.25..4.0f64, 12)) -> Thresholds {
        let d = Thresholds::default();
        Thresholds {
            launch_intensity_max: d.launch_intensity_max * scale[0],
            launch_sm_max_pct: d.launch_sm_max_pct * scale[1],
            starved_util_max_pct: (d.starved_util_max_pct * scale[2]).min(100.0),
            busy_sm_pct: (d.busy_sm_pct * scale[3]).min(100.0),
            bound_line_pct: d.bound_line_pct * scale[4],
            bound_band_pct: d.bound_band_pct * scale[5],
            latency_dram_pct: d.latency_dram_pct * scale[6],
            roofline_sm_pct: d.roofline_sm_pct * scale[7],
            roofline_floor_pct: d.roofline_floor_pct * scale[8],
            util_mem_busy_pct: d.util_mem_busy_pct * scale[9],
            busy_power_load: d.busy_power_load * scale[10],
            work_load_per_util: d.work_load_per_util * scale[11],
            ..d
        }
    }
}

fn baselines() -> PowerBaselines {
    PowerBaselines {
        idle_w: 78.0,
        held_idle_w: 122.5,
        peak_w: 690.0,
        origin: Cow::Borrowed("test H200 profile"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn no_verdict_breaks_an_invariant_whatever_the_thresholds(
        s in signals(),
        th in thresholds(),
        tdp in prop_oneof![Just(None), Just(Some(700.0))],
    ) {
        let base = baselines();
        let power = PowerPlace {
            load: s.power_w.and_then(|p| base.load(p)),
            intensity: None,
            held: s.power_w.map(|p| p >= base.held_threshold_w()),
        };
        let (verdict, _) = classify(&RuleInput {
            signals: &s,
            spin: Spin::None,
            power,
            baselines: Some(base),
            thresholds: &th,
        });
        let r = Reading::of(&s, s.util_duty, tdp);
        let class = guard(verdict.class, &s, &r, &th).map_or(verdict.class, |f| f.class);
        prop_assert_eq!(violated(class, &r), None, "{:?} from {:?}", class, verdict.class);
        // Any class a rule across GPUs could set is caught as well.
        for before in Class::ALL {
            let after = guard(before, &s, &r, &th).map_or(before, |f| f.class);
            prop_assert_eq!(violated(after, &r), None, "{:?} from {:?}", after, before);
        }
    }
}
