//! A recorded trace replayed as a live agent at another cadence would have read it: the same
//! [`CadencePolicy`] the agent runs, applied causally to a trace recorded at 10 Hz or faster.
//! A row is kept when the policy's tick in force says a tick was due (each window's verdict fed
//! back to the policy as it closes, as the agent does); the rows skipped in between are what the
//! agent would not have read. A kept row carries what a read then would have returned: NVML's
//! fields as last read (the latest value since the previous kept row), and GPM's rates averaged
//! over the rows since then, as a GPM sample pair spanning that interval measures them (a single
//! row is kept as the trace has it, stale pairs included, for the pipeline to discard).
//! `gpuslack score --cadence` scores a trace this way.

use std::collections::BTreeMap;
use std::io::Read;

use crate::pipeline::{PipelineCounts, ReplayError};
use crate::sample::{Metric, Sample};
use crate::source::cadence::CadencePolicy;
use crate::trace::TraceReader;
use crate::{Pipeline, WindowReport};

/// A row within this share of the fastest tick of being due counts as due: recorders' rows
/// jitter by a millisecond or two around their grid, and a tick missed by 1 ms must not wait a
/// whole tick.
const DUE_TOLERANCE: f64 = 0.1;

/// What one GPU's skipped rows hold until the next kept one.
struct Pending {
    /// Rows since the last kept one (this one included).
    rows: u32,
    latest: Option<Sample>,
    gpm_sum: [f64; Metric::COUNT],
    gpm_n: [u32; Metric::COUNT],
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            rows: 0,
            latest: None,
            gpm_sum: [0.0; Metric::COUNT],
            gpm_n: [0; Metric::COUNT],
        }
    }
}

impl Pending {
    fn add(&mut self, s: &Sample) {
        self.rows += 1;
        let stale = s.has_stale_gpm();
        let latest = self.latest.get_or_insert_with(|| Sample::new(s.t, s.gpu));
        latest.t = s.t;
        for (m, v) in s.metrics() {
            if m.is_gpm() {
                if !stale {
                    self.gpm_sum[m as usize] += v;
                    self.gpm_n[m as usize] += 1;
                }
            } else {
                latest.set(m, v);
            }
        }
        if s.clk_reasons.is_some() {
            latest.clk_reasons = s.clk_reasons;
        }
        if s.processes.is_some() {
            latest.processes.clone_from(&s.processes);
        }
        if s.pods.is_some() {
            latest.pods.clone_from(&s.pods);
        }
        if s.nvlinks.is_some() {
            latest.nvlinks.clone_from(&s.nvlinks);
        }
    }

    /// The sample a read at `row` would have returned, and a fresh start.
    fn take(&mut self, row: &Sample) -> Sample {
        let pending = std::mem::take(self);
        if pending.rows <= 1 {
            return row.clone();
        }
        let mut out = pending.latest.unwrap_or_else(|| row.clone());
        out.clear_gpm();
        let mut any = false;
        for m in Metric::ALL.into_iter().filter(|m| m.is_gpm()) {
            let n = pending.gpm_n[m as usize];
            if n > 0 {
                out.set(m, pending.gpm_sum[m as usize] / f64::from(n));
                any = true;
            }
        }
        if !any {
            // Every pair in the interval was stale: keep the row's own, as the trace has it.
            for (m, v) in row.metrics().filter(|(m, _)| m.is_gpm()) {
                out.set(m, v);
            }
        }
        out
    }
}

/// Rows read and kept by [`replay_at`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Thinned {
    /// Rows of the trace.
    pub rows: u64,
    /// Rows kept (what the agent would have read).
    pub kept: u64,
}

/// [`crate::pipeline::replay`] at `policy`'s cadence: every row of `reader` offered to the
/// policy, the kept ones through `pipeline`, each report to the policy and then to `sink`.
pub fn replay_at<R: Read>(
    mut reader: TraceReader<R>,
    pipeline: &mut Pipeline,
    policy: &mut CadencePolicy,
    mut sink: impl FnMut(WindowReport) -> std::io::Result<()>,
) -> Result<(PipelineCounts, Thinned), ReplayError> {
    let mut last_kept: BTreeMap<u32, f64> = BTreeMap::new();
    let mut pending: BTreeMap<u32, Pending> = BTreeMap::new();
    let mut thinned = Thinned::default();
    let tolerance_s = DUE_TOLERANCE * policy.mode().fastest().as_secs_f64();
    while let Some(row) = reader.next() {
        let row = row?;
        thinned.rows += 1;
        let gpu = pending.entry(row.gpu).or_default();
        gpu.add(&row);
        // The tick waited since this GPU's last kept row (the start's for its first).
        let waited = policy.tick_at(
            last_kept
                .get(&row.gpu)
                .copied()
                .unwrap_or(f64::NEG_INFINITY),
        );
        let due = last_kept.get(&row.gpu).is_none_or(|&last| {
            // A step back of the clock makes the row due, as it does live.
            row.t < last || row.t - last + tolerance_s >= waited.as_secs_f64()
        });
        if !due {
            continue;
        }
        let sample = gpu.take(&row);
        last_kept.insert(row.gpu, row.t);
        thinned.kept += 1;
        policy.count_tick(waited);
        policy.observe_sample(&sample);
        let reports = pipeline
            .push(&sample)
            .map_err(|source| ReplayError::Refused {
                place: reader.place(),
                source,
            })?;
        for report in reports {
            policy.observe_window(&report);
            sink(report).map_err(ReplayError::Output)?;
        }
    }
    for report in pipeline.finish() {
        policy.observe_window(&report);
        sink(report).map_err(ReplayError::Output)?;
    }
    Ok((pipeline.counts(), thinned))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::diagnosis::Confidence;
    use crate::source::cadence::{Adaptive, CadenceMode};
    use crate::{Class, Diagnoser};

    fn trace(rows: &[(f64, f64, f64)]) -> TraceReader<std::io::Cursor<Vec<u8>>> {
        let mut text = String::from("t,gpu,util_gpu,gpm_sm,gpm_dram,power_mw,nprocs\n");
        for (t, util, sm) in rows {
            let power_mw = 78_000.0 + 6_000.0 * sm;
            let nprocs = u8::from(*sm > 0.0);
            text.push_str(&format!("{t:.3},0,{util},{sm},1,{power_mw},{nprocs}\n"));
        }
        TraceReader::new("test.csv".into(), std::io::Cursor::new(text.into_bytes()))
            .expect("a header")
    }

    fn diagnoser() -> Diagnoser {
        Diagnoser::default().with_tdp_override(Some(700.0))
    }

    fn kept(mode: CadenceMode, rows: &[(f64, f64, f64)]) -> (Vec<WindowReport>, Thinned) {
        let mut pipeline = Pipeline::new(2.0, diagnoser());
        let mut policy = CadencePolicy::new(mode);
        let mut reports = Vec::new();
        let (_, thinned) = replay_at(trace(rows), &mut pipeline, &mut policy, |r| {
            reports.push(r);
            Ok(())
        })
        .expect("replays");
        (reports, thinned)
    }

    #[test]
    fn a_kept_row_carries_the_lists_as_last_read_nvlinks_included() {
        let link = crate::sample::NvlinkLink {
            link: 3,
            up: false,
            crc: Some(7),
            replay: None,
            recovery: None,
        };
        let mut read = Sample::new(1.0, 0).with(Metric::PowerMw, 1.0);
        read.nvlinks = Some(std::sync::Arc::new(vec![link]));
        let later = Sample::new(1.1, 0).with(Metric::PowerMw, 2.0);
        let mut pending = Pending::default();
        pending.add(&read);
        pending.add(&later);
        let kept = pending.take(&later);
        assert_eq!(kept.nvlinks.as_deref(), Some(&vec![link]));
        assert_eq!(kept.get(Metric::PowerMw), Some(2.0));
    }

    #[test]
    fn a_constant_100_ms_cadence_keeps_every_other_row_of_a_20_hz_trace() {
        let rows: Vec<(f64, f64, f64)> = (0..200)
            .map(|i| (1000.0 + f64::from(i) * 0.05, 50.0, f64::from(i % 2) * 10.0))
            .collect();
        let (reports, thinned) = kept(CadenceMode::Constant(Duration::from_millis(100)), &rows);
        assert_eq!((thinned.rows, thinned.kept), (200, 100));
        // GPM averaged over the two rows each kept row stands for: (0 + 10) / 2.
        let sm = reports[1].stats.mean(Metric::GpmSm).expect("sm");
        assert!((sm - 5.0).abs() < 1e-9, "{sm}");
    }

    #[test]
    fn a_steady_trace_is_read_at_10_hz_for_the_hold_then_at_1_hz() {
        // 30 s at 10 Hz of one steady state: 6 s fast (60 rows), then one row a second.
        let rows: Vec<(f64, f64, f64)> = (0..300)
            .map(|i| (1000.0 + f64::from(i) * 0.1, 0.0, 0.0))
            .collect();
        let mode = CadenceMode::Adaptive(Adaptive::default());
        let mut pipeline = Pipeline::new(2.0, diagnoser());
        let mut policy = CadencePolicy::new(mode);
        let (_, thinned) = replay_at(trace(&rows), &mut pipeline, &mut policy, |r| {
            assert_eq!((r.class, r.confidence()), (Class::Idle, Confidence::High));
            Ok(())
        })
        .expect("replays");
        // Each kept row books the interval it waited: the first the start's 100 ms, then 60
        // more up to 1006.0, then 23 of 1 s up to 1029.0.
        let split = policy.split();
        assert_eq!(split.fast_ticks, 61, "{split:?}");
        assert_eq!(split.relaxed_ticks, 23, "{split:?}");
        assert_eq!(thinned.kept, 84);
    }

    #[test]
    fn a_step_between_relaxed_rows_reads_the_next_rows_at_10_hz() {
        // Idle for 20 s, then busy: the first relaxed row that sees the step escalates.
        let rows: Vec<(f64, f64, f64)> = (0..300)
            .map(|i| {
                let busy = i >= 200;
                let v = if busy { 100.0 } else { 0.0 };
                (1000.0 + f64::from(i) * 0.1, v, v)
            })
            .collect();
        let mut pipeline = Pipeline::new(2.0, diagnoser());
        let mut policy = CadencePolicy::new(CadenceMode::Adaptive(Adaptive::default()));
        replay_at(trace(&rows), &mut pipeline, &mut policy, |_| Ok(())).expect("replays");
        let split = policy.split();
        assert_eq!(
            split.triggers_line(),
            "start=1 transition=1 low_confidence=0 suspected_hang=0 duty=0 elimination=0 step=1"
        );
        // The relaxed row at 1020.0 sees the step (fast to 1026); the window [1020, 1022)
        // closes at 1022.0 with a new class (fast to 1028). Booked by the interval each row
        // waited: the first row and 60 to 1006.0 at 100 ms, 14 of 1 s to 1020.0, 80 of 100 ms
        // to 1028.0, one of 1 s to 1029.0: 14.1 s fast (the first row's 0.1 s included), 15 s
        // relaxed, as the trace's own clock has it.
        assert_eq!(
            (split.fast_ticks, split.relaxed_ticks),
            (141, 15),
            "{split:?}"
        );
        assert!((split.fast_s - 14.1).abs() < 1e-6, "{split:?}");
        assert!((split.relaxed_s - 15.0).abs() < 1e-9, "{split:?}");
    }
}
