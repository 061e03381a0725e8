//! What surrounds a verdict without changing its class: a profiler holding the counters, several
//! processes sharing the GPU, a steady host-set pace, copies both ways. Each adds evidence and,
//! where the class's own remedy would send the user the wrong way, advice of its own.
//! docs/DIAGNOSIS.md ("A profiler on the GPU", "A shared GPU") has the recorded numbers.

use super::class::advice;
use super::evidence::{pct, rate, Evidence};
use super::rules::Rule;
use super::{Class, Signals};
use crate::attribution::procfs;
use crate::sample::{GpuProcess, Metric};
use crate::window::WindowStats;

/// GPU-Util (%) from which a window counts as busy for the profiler checks: kernels resident
/// most of the time, so counters that fall silent or freeze are not an idle GPU's.
pub const PROFILER_BUSY_UTIL_PCT: f64 = 50.0;

/// GPM samples a window needs before identical readings count as frozen: a live GPU's
/// throughput counters differ in their last digits from one 100 ms sample to the next (the bf16
/// GEMM's tensor pipe: 91.8–92.9% over a second).
pub const FROZEN_MIN_SAMPLES: u32 = 10;

/// SM activity and the busiest pipe or DRAM (%) from which readings that never change are
/// frozen rather than a flat idle or a spin.
pub const FROZEN_MIN_PCT: f64 = 5.0;

/// GPU-Util (%) from which a steady, partial residency is not a loader's starvation: a loop
/// starved by its loader leaves kernels resident a few % of the time (starved trainers 4–5%,
/// the 80 ms-wait bench 4.5%), while Nsight Compute's application replay of a GEMM loop kept
/// them resident 38–45% of every sample (h200-profiler-and-shared) and an eager batch-1 MLP,
/// paced by Python's launches, 16–22% (h200-middle-ground).
pub const HOST_PACED_UTIL_PCT: f64 = 10.0;

/// Link rate (MiB/s) each way from which copies go both ways at once (an optimizer or
/// activations offloaded to the host); the partial rule's host-traffic line.
pub const BOTH_WAYS_MIB_S: f64 = 256.0;

/// Windows in a row without GPM, on a GPU where it was read, before the silence counts: one
/// window can lose its few GPM samples to the stale-pair cleaning (`Sample::has_stale_gpm`) at
/// 1 Hz; a profiler holds the counters for its whole session.
pub const SILENT_MIN_WINDOWS: u32 = 2;

/// Why the counters may be a profiler's, if they look so. `gpm_silent`: on a GPU whose GPM was
/// read before, how many windows in a row (this one included) have lacked it; `None` where GPM
/// was read in this window or never on this GPU.
pub fn profiler_evidence(
    s: &Signals,
    w: &WindowStats,
    gpm_silent: Option<u32>,
) -> Option<Evidence> {
    let util = s.util_pct.filter(|u| *u >= PROFILER_BUSY_UTIL_PCT)?;
    if !s.has_gpm() && gpm_silent.is_some_and(|n| n >= SILENT_MIN_WINDOWS) {
        return Some(Evidence::new(
            "profiler",
            1.0,
            None,
            format!(
                "GPM (SM activity, pipes, DRAM) was read on this GPU before but not in this window, while GPU-Util reads {}: a profiler (Nsight Compute, Nsight Systems, DCGM profiling) holds the performance counters",
                pct(util)
            ),
        ));
    }
    let frozen = |m: Metric| {
        w.summary(m)
            .is_some_and(|x| x.count >= FROZEN_MIN_SAMPLES && x.min == x.max)
    };
    // Frozen only means something where work shows: SMs and a pipe or DRAM at a few % (a trace
    // rounded to two decimals repeats 0% and a flat 1.2% of DRAM during pinned copies, and a
    // spin's flat 18.18%, with no pipe or DRAM).
    let moving = s.sm_pct.unwrap_or(0.0) >= FROZEN_MIN_PCT
        && s.pipe_pct.unwrap_or(0.0).max(s.dram_pct.unwrap_or(0.0)) >= FROZEN_MIN_PCT;
    let all_frozen = [Metric::GpmSm, Metric::GpmDram, Metric::GpmTensor]
        .into_iter()
        .all(frozen);
    (moving && all_frozen).then(|| {
        Evidence::new(
            "profiler",
            1.0,
            None,
            format!(
                "GPM read the same values in every one of its {} samples (SM activity {}, DRAM {}) while work ran: the counters stopped refreshing, as when a profiler holds them",
                w.summary(Metric::GpmSm).map_or(0, |x| x.count),
                pct(s.sm_pct.unwrap_or(0.0)),
                pct(s.dram_pct.unwrap_or(0.0))
            ),
        )
    })
}

/// A profiler the host names among the GPU's processes (`GpuProcess::profiler`: its
/// environment or its executable, `attribution::procfs`): the counters of this window are the
/// profiler's whatever they read, busy GPU or not. The sentence is also the confidence's reason.
pub fn profiler_process_evidence(processes: &[GpuProcess]) -> Option<Evidence> {
    let named: Vec<(&GpuProcess, &str)> = processes
        .iter()
        .filter_map(|p| p.profiler.as_deref().map(|tool| (p, tool)))
        .collect();
    let (first, tool) = *named.first()?;
    let tool = printable(tool);
    let name = first.name.as_deref().map(printable);
    // A profiler's own executable holds the context; otherwise it was put in the job's process.
    let own = name.as_deref().and_then(procfs::profiler_by_name).is_some();
    let mut text = if own {
        format!(
            "{tool} runs on this GPU as PID {} and holds the counters",
            first.pid
        )
    } else {
        let name = name.map(|n| format!(" ({n})")).unwrap_or_default();
        format!(
            "{tool} injected into PID {}{name} holds the counters",
            first.pid
        )
    };
    if named.len() > 1 {
        let more = named.len() - 1;
        let plural = if more == 1 { "" } else { "es" };
        text.push_str(&format!(" (and {more} more profiled process{plural})"));
    }
    text.push_str(
        ": what the GPU's counters read in this window is the profiler's pace, not the job's",
    );
    Some(Evidence::new(
        "profiler_process",
        named.len() as f64,
        None,
        text,
    ))
}

/// Several processes on one GPU: each one's share as NVML reports it, and what that share can
/// and cannot tell.
pub fn shared_evidence(processes: &[GpuProcess]) -> Option<Evidence> {
    if processes.len() < 2 {
        return None;
    }
    let shares: Vec<String> = processes
        .iter()
        .map(|p| {
            let name = p.name.as_deref().unwrap_or("?");
            let time = p.sm_pct.map_or_else(
                || "no sample".to_string(),
                |v| format!("{} of the time", pct(v)),
            );
            let mem = p
                .gpu_mem_bytes
                .map(|b| format!(", {:.1} GiB", b / f64::from(1u32 << 30)))
                .unwrap_or_default();
            format!("pid {} {} ({time}{mem})", p.pid, printable(name))
        })
        .collect();
    Some(Evidence::new(
        "processes_sharing",
        processes.len() as f64,
        None,
        format!(
            "{} processes share this GPU: {}; NVML's per-process figure is the share of time a kernel of that process was resident, not of the SMs or of the work (a loop of tiny kernels beside a GEMM read 89%), so the verdict follows what the GPU as a whole does, and which process slacks cannot be told from these shares",
            processes.len(),
            shares.join("; ")
        ),
    ))
}

/// Kernels resident a steady, partial share of every sample while the bursts rule named the
/// loader: the host (or a profiler replaying kernels) sets the pace.
pub fn host_paced_evidence(
    s: &Signals,
    samples: u32,
    class: Class,
    rule: Rule,
) -> Option<Evidence> {
    if class != Class::InputStarved || rule != Rule::Bursts || samples < super::FEW_SAMPLES {
        return None;
    }
    let util = s.util_median_pct.filter(|u| *u >= HOST_PACED_UTIL_PCT)?;
    s.util_duty.filter(|d| *d >= 0.95)?;
    Some(Evidence::new(
        "host_paced",
        util / 100.0,
        Some(HOST_PACED_UTIL_PCT / 100.0),
        format!(
            "kernels resident a steady {} of every sample, not in bursts between long waits: the host sets the pace (synchronising every step, or a profiler such as Nsight Compute serialising the kernels)",
            pct(util)
        ),
    ))
}

/// Copies both ways at once while the GPU waits.
pub fn both_ways_advice(s: &Signals, class: Class) -> Option<&'static str> {
    // One way's protocol traffic rides the other (pinned host→device copies at 55 GiB/s send
    // hundreds of MiB/s back): both ways means the smaller at least a quarter of the larger.
    let (rx, tx) = (
        s.pcie_rx_mib_s.unwrap_or(0.0),
        s.pcie_tx_mib_s.unwrap_or(0.0),
    );
    let both = rx.min(tx) >= BOTH_WAYS_MIB_S && rx.min(tx) >= rx.max(tx) / 4.0;
    (both && matches!(class, Class::InputStarved | Class::TransferBound))
        .then_some(advice::OFFLOAD_BOTH_WAYS)
}

/// The link rates of copies both ways, for the evidence.
pub fn both_ways_evidence(s: &Signals) -> Evidence {
    Evidence::new(
        "pcie_both_ways",
        s.pcie_rx_mib_s.unwrap_or(0.0).min(s.pcie_tx_mib_s.unwrap_or(0.0)),
        Some(BOTH_WAYS_MIB_S),
        format!(
            "copies go both ways at once ({} in, {} out): state offloaded to the host comes and goes every step",
            rate(s.pcie_rx_mib_s.unwrap_or(0.0)),
            rate(s.pcie_tx_mib_s.unwrap_or(0.0))
        ),
    )
}

/// A process name as it may be printed: control characters (a terminal's escape sequences)
/// dropped, at most 32 characters. Names come from the host, not from us.
fn printable(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Sample;
    use crate::window::GpuWindower;

    /// One 2 s window of 20 samples at 100 ms, each from `sample(i)`.
    fn window(sample: impl Fn(u32) -> Sample) -> (WindowStats, Signals) {
        let mut w = GpuWindower::new(0, 2.0);
        for i in 0..20 {
            w.push(&sample(i)).expect("in order");
        }
        let stats = w
            .push(&Sample::new(2.0, 0))
            .expect("in order")
            .expect("a window");
        let signals = Signals::of(&stats);
        (stats, signals)
    }

    fn busy(i: u32, wobble: f64) -> Sample {
        Sample::new(f64::from(i) * 0.1, 0)
            .with(Metric::UtilGpu, 98.0)
            .with(Metric::GpmSm, 94.9 + wobble * f64::from(i % 3))
            .with(Metric::GpmTensor, 92.1 + wobble * f64::from(i % 2))
            .with(Metric::GpmDram, 17.4 + wobble * f64::from(i % 4))
    }

    #[test]
    fn a_profiler_shows_as_counters_that_fall_silent_or_freeze_while_work_runs() {
        // A GEMM whose GPM readings move in their last digits (h200-profiler-and-shared:
        // tensor 91.8–92.9%): no profiler.
        let (w, s) = window(|i| busy(i, 0.1));
        assert_eq!(profiler_evidence(&s, &w, None), None);
        // The same readings repeated exactly in every sample: frozen.
        let (w, s) = window(|i| busy(i, 0.0));
        let e = profiler_evidence(&s, &w, None).expect("frozen");
        assert!(
            e.text
                .contains("same values in every one of its 20 samples"),
            "{}",
            e.text
        );
        // GPM read before on this GPU, absent now while GPU-Util reads 98%: withheld.
        let (w, s) = window(|i| Sample::new(f64::from(i) * 0.1, 0).with(Metric::UtilGpu, 98.0));
        assert!(profiler_evidence(&s, &w, Some(SILENT_MIN_WINDOWS)).is_some());
        // One window alone may have lost its samples to the stale-pair cleaning.
        assert_eq!(
            profiler_evidence(&s, &w, Some(SILENT_MIN_WINDOWS - 1)),
            None
        );
        // A GPU without GPM at all (never seen) is not a profiler's…
        assert_eq!(profiler_evidence(&s, &w, None), None);
        // …nor an idle one, nor a flat spin or pinned copies with no pipe or DRAM moving.
        let (w, s) = window(|i| Sample::new(f64::from(i) * 0.1, 0).with(Metric::UtilGpu, 0.0));
        assert_eq!(profiler_evidence(&s, &w, Some(5)), None);
        let (w, s) = window(|i| {
            Sample::new(f64::from(i) * 0.1, 0)
                .with(Metric::UtilGpu, 100.0)
                .with(Metric::GpmSm, 18.18)
                .with(Metric::GpmTensor, 0.0)
                .with(Metric::GpmDram, 0.0)
        });
        assert_eq!(profiler_evidence(&s, &w, Some(5)), None);
    }

    #[test]
    fn a_profiler_on_a_process_is_named_with_its_pid() {
        let p = |pid, name: &str, profiler: Option<&str>| GpuProcess {
            pid,
            name: Some(name.into()),
            profiler: profiler.map(String::from),
            ..GpuProcess::default()
        };
        // Without one: nothing.
        assert_eq!(profiler_process_evidence(&[]), None);
        assert_eq!(
            profiler_process_evidence(&[p(1234, "python", None), p(1235, "python", None)]),
            None
        );
        // Injected into the job's process, beside one that is not profiled.
        let e = profiler_process_evidence(&[
            p(1200, "python", None),
            p(1234, "python", Some(procfs::NSIGHT_COMPUTE)),
        ])
        .expect("a profiler");
        assert_eq!(e.signal, "profiler_process");
        assert!(
            e.text.starts_with(
                "Nsight Compute (ncu) injected into PID 1234 (python) holds the counters: "
            ),
            "{}",
            e.text
        );
        // The profiler's own process, and several profiled ones counted.
        let e = profiler_process_evidence(&[
            p(1300, "nsys", Some(procfs::NSIGHT_SYSTEMS)),
            p(1301, "python", Some(procfs::NSIGHT_SYSTEMS)),
        ])
        .expect("a profiler");
        assert!(
            e.text.starts_with("Nsight Systems (nsys) runs on this GPU as PID 1300 and holds the counters (and 1 more profiled process)"),
            "{}",
            e.text
        );
        // A name from a trace is outside text: no terminal escapes reach the sentence.
        let e = profiler_process_evidence(&[p(7, "py\u{1b}[2J", Some("evil\u{1b}[31m"))])
            .expect("a profiler");
        assert!(!e.text.contains('\u{1b}'), "{}", e.text);
    }

    #[test]
    fn a_shared_gpu_names_each_share_and_what_it_cannot_tell() {
        let p = |pid, name: &str, sm: Option<f64>| GpuProcess {
            pid,
            name: Some(name.into()),
            gpu_mem_bytes: Some(1_073_741_824.0),
            sm_pct: sm,
            ..GpuProcess::default()
        };
        assert_eq!(shared_evidence(&[p(988, "python3", None)]), None);
        let e = shared_evidence(&[
            p(989, "tiny\u{1b}[31m", Some(89.0)),
            p(988, "python3", None),
        ])
        .expect("two processes");
        assert!(e.text.starts_with("2 processes share this GPU: pid 989 tiny[31m (89% of the time, 1.0 GiB); pid 988 python3 (no sample, 1.0 GiB)"), "{}", e.text);
        assert!(e.text.contains("not of the SMs"));
        assert!(!e.text.contains('\u{1b}'));
    }

    #[test]
    fn a_steady_partial_pace_and_copies_both_ways_get_their_own_advice() {
        let s = Signals {
            util_pct: Some(40.0),
            util_median_pct: Some(40.0),
            util_duty: Some(1.0),
            ..Signals::default()
        };
        assert!(host_paced_evidence(&s, 20, Class::InputStarved, Rule::Bursts).is_some());
        // Too few samples to tell steady from bursts, another rule, or a starved loop's few %.
        assert_eq!(
            host_paced_evidence(&s, 2, Class::InputStarved, Rule::Bursts),
            None
        );
        assert_eq!(
            host_paced_evidence(&s, 20, Class::InputStarved, Rule::Partial),
            None
        );
        let starved = Signals {
            util_median_pct: Some(4.5),
            ..s
        };
        assert_eq!(
            host_paced_evidence(&starved, 20, Class::InputStarved, Rule::Bursts),
            None
        );
        let both = Signals {
            pcie_rx_mib_s: Some(2048.0),
            pcie_tx_mib_s: Some(1024.0),
            ..s
        };
        assert_eq!(
            both_ways_advice(&both, Class::InputStarved),
            Some(advice::OFFLOAD_BOTH_WAYS)
        );
        assert_eq!(both_ways_advice(&both, Class::ComputeBound), None);
        // Pinned host→device copies: 55 GiB/s in, a few hundred MiB/s of protocol back.
        let one_way = Signals {
            pcie_rx_mib_s: Some(56_000.0),
            pcie_tx_mib_s: Some(900.0),
            ..s
        };
        assert_eq!(both_ways_advice(&one_way, Class::TransferBound), None);
    }
}
