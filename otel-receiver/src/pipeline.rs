//! source → window → diagnosis, streaming. Samples go in one at a time (from any source, any
//! number of GPUs interleaved); reports come out one time slot at a time, once every GPU has
//! moved past it, so the cross-GPU rules see all GPUs of a slot together. Memory is bounded by
//! the number of GPUs, not the length of the run.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::mpsc;

use crate::diagnosis::{Diagnoser, WindowReport};
use crate::sample::Sample;
use crate::trace::{TraceError, TraceReader};
use crate::window::{GpuWindower, WindowStats};

/// A frame is released once the newest GPU is this many windows past it, even if another GPU
/// has gone silent (fell off the bus, or its process stopped): one lost GPU never stalls the rest.
const MAX_LAG_WINDOWS: i64 = 2;

/// A sample older than its GPU's window in progress.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("GPU {gpu}: sample at t={t:.4} is older than the window in progress (from t={window_start:.4}); samples must be in time order per GPU")]
pub struct OutOfOrder {
    /// The GPU.
    pub gpu: u32,
    /// The refused sample's time (unix s).
    pub t: f64,
    /// Where its window in progress began (unix s).
    pub window_start: f64,
}

/// Counts of what the pipeline saw, for the end-of-run summary.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PipelineCounts {
    /// Samples pushed.
    pub samples: u64,
    /// Rows repeating the previous row's time for the same GPU; the first one is kept.
    pub duplicates: u64,
    /// Rows with a time but no metric at all.
    pub empty: u64,
    /// Windows closed and diagnosed.
    pub windows: u64,
    /// Times the clock stepped back (live sources only): windowing restarted from the new time.
    pub clock_steps_back: u64,
}

/// Most distinct GPU indices one pipeline follows. Per-GPU state is a few KiB, and frames are
/// assembled across all GPUs, so a trace naming 100,000 indices must be an error, not an hour
/// of work and gigabytes; no machine has more than 1,024 GPUs and MIG instances.
pub const MAX_GPUS: usize = 1024;

/// A GPU index beyond the most one pipeline follows.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("GPU {gpu}: more than {MAX_GPUS} distinct GPU indices; gpuslack follows at most {MAX_GPUS} GPUs and MIG instances")]
pub struct TooManyGpus {
    /// The index one too many.
    pub gpu: u32,
}

/// Why a sample was refused.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum PushError {
    /// Older than its GPU's window in progress.
    #[error(transparent)]
    OutOfOrder(#[from] OutOfOrder),
    /// A GPU index beyond [`MAX_GPUS`] distinct ones.
    #[error(transparent)]
    TooManyGpus(#[from] TooManyGpus),
}

/// One time slot's closed windows, every GPU's that had one, in GPU order: what the diagnosis
/// takes at once, so that the rules across GPUs see all of them together.
pub type Frame = Vec<WindowStats>;

/// Samples in, frames of closed windows out: the windowing half of a [`Pipeline`], apart so that
/// an offline replay can run it and the diagnosis on two threads ([`replay_staged`]).
pub struct Windowing {
    window_s: f64,
    /// A live clock may step back (NTP): restart the windows instead of refusing samples.
    clock_steps: bool,
    windowers: BTreeMap<u32, GpuState>,
    /// How many GPUs have each window index in progress: the oldest and the newest open window
    /// are its ends, kept as windows open and close instead of gathered from every GPU on
    /// every sample.
    open: BTreeMap<i64, u32>,
    pending: BTreeMap<i64, Frame>,
    counts: PipelineCounts,
}

/// Samples in, diagnosed windows out, one time slot (all GPUs) at a time.
pub struct Pipeline {
    windowing: Windowing,
    diagnoser: Diagnoser,
}

/// One GPU's windower and the time of its last sample (to drop repeated rows).
struct GpuState {
    windower: GpuWindower,
    last_t: Option<f64>,
}

impl Pipeline {
    /// Windows of `window_s` seconds, aligned to multiples of it in unix time, diagnosed by
    /// `diagnoser`.
    pub fn new(window_s: f64, diagnoser: Diagnoser) -> Self {
        Pipeline {
            windowing: Windowing::new(window_s),
            diagnoser,
        }
    }

    /// For live sources: a sample older than its GPU's window in progress means the system
    /// clock stepped back; every window in progress is closed and windowing restarts from the
    /// new time, so that an hour's step does not refuse an hour of samples.
    pub fn tolerating_clock_steps(mut self) -> Self {
        self.windowing.clock_steps = true;
        self
    }

    /// The window length, in seconds.
    pub fn window_s(&self) -> f64 {
        self.windowing.window_s
    }

    /// Windows closed but not yet diagnosed (waiting for the other GPUs of their time slot).
    /// Bounded by the number of GPUs times the lag tolerance, however long the run.
    pub fn pending_windows(&self) -> usize {
        self.windowing.pending.values().map(Vec::len).sum()
    }

    /// What it has seen so far.
    pub fn counts(&self) -> PipelineCounts {
        self.windowing.counts
    }

    /// The diagnosis, with each GPU's facts and profile.
    pub fn diagnoser(&self) -> &Diagnoser {
        &self.diagnoser
    }

    /// The diagnosis, to set a GPU's facts or profile.
    pub fn diagnoser_mut(&mut self) -> &mut Diagnoser {
        &mut self.diagnoser
    }

    /// Adds one sample; returns the reports of every time slot it completed.
    pub fn push(&mut self, sample: &Sample) -> Result<Vec<WindowReport>, PushError> {
        let frames = self.windowing.push(sample)?;
        Ok(self.diagnose(frames))
    }

    /// Closes every window in progress and returns the remaining reports.
    pub fn finish(&mut self) -> Vec<WindowReport> {
        let frames = self.windowing.finish();
        self.diagnose(frames)
    }

    fn diagnose(&mut self, frames: Vec<Frame>) -> Vec<WindowReport> {
        let mut reports = Vec::new();
        for frame in frames {
            reports.extend(self.diagnoser.diagnose_frame(frame));
        }
        reports
    }
}

impl Windowing {
    fn new(window_s: f64) -> Self {
        Windowing {
            window_s,
            clock_steps: false,
            windowers: BTreeMap::new(),
            open: BTreeMap::new(),
            pending: BTreeMap::new(),
            counts: PipelineCounts::default(),
        }
    }

    /// Adds one sample; returns every time slot it completed.
    fn push(&mut self, sample: &Sample) -> Result<Vec<Frame>, PushError> {
        // Most samples: a GPU already seen, the window in progress. One lookup, no move.
        let known = self.windowers.get_mut(&sample.gpu);
        if let Some(state) = &known {
            if state.last_t == Some(sample.t) {
                self.counts.duplicates += 1;
                return Ok(Vec::new());
            }
        }
        if sample.is_empty() {
            self.counts.empty += 1;
            return Ok(Vec::new());
        }
        if let Some(state) = known {
            if state.windower.add_to_current(sample) {
                self.counts.samples += 1;
                state.last_t = Some(sample.t);
                return Ok(Vec::new());
            }
        } else if self.windowers.len() >= MAX_GPUS {
            return Err(TooManyGpus { gpu: sample.gpu }.into());
        }
        let window_s = self.window_s;
        let state = self
            .windowers
            .entry(sample.gpu)
            .or_insert_with(|| GpuState {
                windower: GpuWindower::new(sample.gpu, window_s),
                last_t: None,
            });
        let was = state.windower.current_index();
        let closed = match state.windower.push(sample) {
            Ok(closed) => closed,
            Err(late) if self.clock_steps => {
                tracing::warn!(
                    gpu = sample.gpu,
                    step_s = late.t - late.window_start,
                    "the clock stepped back; windows restart from the new time"
                );
                self.counts.clock_steps_back += 1;
                let mut frames = self.finish();
                self.windowers.clear();
                self.open.clear();
                frames.extend(self.push(sample)?);
                return Ok(frames);
            }
            Err(late) => {
                return Err(OutOfOrder {
                    gpu: sample.gpu,
                    t: late.t,
                    window_start: late.window_start,
                }
                .into())
            }
        };
        self.counts.samples += 1;
        state.last_t = Some(sample.t);
        let now = state.windower.current_index();
        if let Some(stats) = closed {
            self.pending
                .entry(state.windower.window_index(stats.start + window_s / 2.0))
                .or_default()
                .push(stats);
        }
        if was == now {
            // Neither a window closed nor the oldest or newest open window moved: nothing
            // can be released that could not be before.
            return Ok(Vec::new());
        }
        if let Some(was) = was {
            self.forget_open(was);
        }
        if let Some(now) = now {
            *self.open.entry(now).or_default() += 1;
        }
        Ok(self.release(false))
    }

    fn forget_open(&mut self, index: i64) {
        if let Some(count) = self.open.get_mut(&index) {
            *count -= 1;
            if *count == 0 {
                self.open.remove(&index);
            }
        }
    }

    /// Closes every window in progress and returns the remaining time slots.
    fn finish(&mut self) -> Vec<Frame> {
        for state in self.windowers.values_mut() {
            if let Some(stats) = state.windower.finish() {
                let index = state
                    .windower
                    .window_index(stats.start + self.window_s / 2.0);
                self.pending.entry(index).or_default().push(stats);
            }
        }
        self.open.clear();
        self.release(true)
    }

    fn release(&mut self, all: bool) -> Vec<Frame> {
        let newest = self.open.last_key_value().map(|(&index, _)| index);
        let oldest = self.open.first_key_value().map(|(&index, _)| index);
        let mut out = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            let index = *entry.key();
            let complete = oldest.is_none_or(|o| o > index);
            let stale = newest.is_some_and(|n| n - index >= MAX_LAG_WINDOWS);
            if !(all || complete || stale) {
                break;
            }
            let mut frame = entry.remove();
            frame.sort_by_key(|w| w.gpu);
            self.counts.windows += frame.len() as u64;
            out.push(frame);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Metric;

    #[test]
    fn memory_stays_bounded_however_long_the_run() {
        let mut pipeline = Pipeline::new(1.0, Diagnoser::default());
        let mut reports = 0;
        let mut most_pending = 0;
        // Eight GPUs at 2.5 Hz for six simulated hours; GPU 7 falls off the bus after an hour.
        for tick in 0..(21_600 * 5 / 2) {
            let t = 1.0e9 + f64::from(tick) * 0.4;
            for gpu in 0..8 {
                if gpu == 7 && t > 1.0e9 + 3600.0 {
                    continue;
                }
                let s = Sample::new(t, gpu).with(Metric::PowerMw, 100_000.0);
                reports += pipeline.push(&s).expect("in order").len();
                most_pending = most_pending.max(pipeline.pending_windows());
            }
        }
        reports += pipeline.finish().len();
        assert!(most_pending <= 8 * 3, "pending grew to {most_pending}");
        assert_eq!(pipeline.pending_windows(), 0);
        assert_eq!(reports as u64, pipeline.counts().windows);
        assert!(reports > 7 * 21_000, "{reports} windows");
    }

    #[test]
    fn duplicates_and_empty_rows_are_counted_and_skipped() {
        let mut pipeline = Pipeline::new(2.0, Diagnoser::default());
        let a = Sample::new(10.0, 0).with(Metric::PowerMw, 1.0);
        pipeline.push(&a).expect("first");
        pipeline.push(&a).expect("duplicate");
        pipeline.push(&Sample::new(10.5, 0)).expect("empty");
        let counts = pipeline.counts();
        assert_eq!((counts.samples, counts.duplicates, counts.empty), (1, 1, 1));
    }

    #[test]
    fn an_old_sample_is_refused_with_its_gpu_and_time() {
        let mut pipeline = Pipeline::new(2.0, Diagnoser::default());
        pipeline
            .push(&Sample::new(20.0, 3).with(Metric::PowerMw, 1.0))
            .expect("first");
        let err = pipeline
            .push(&Sample::new(12.0, 3).with(Metric::PowerMw, 1.0))
            .expect_err("older than the open window");
        let PushError::OutOfOrder(err) = err else {
            panic!("{err}")
        };
        assert_eq!((err.gpu, err.t, err.window_start), (3, 12.0, 20.0));
    }

    #[test]
    fn a_live_clock_that_steps_back_restarts_the_windows() {
        let mut pipeline = Pipeline::new(1.0, Diagnoser::default()).tolerating_clock_steps();
        let mut reports = 0;
        for i in 0..30 {
            let s = Sample::new(1000.0 + f64::from(i) * 0.1, 0).with(Metric::PowerMw, 1.0);
            reports += pipeline.push(&s).expect("in order").len();
        }
        // An hour back: the window in progress is closed, windowing restarts.
        let back = Sample::new(1000.0 - 3600.0, 0).with(Metric::PowerMw, 1.0);
        reports += pipeline.push(&back).expect("tolerated").len();
        for i in 1..25 {
            let s = Sample::new(1000.0 - 3600.0 + f64::from(i) * 0.1, 0).with(Metric::PowerMw, 1.0);
            reports += pipeline.push(&s).expect("in order after the step").len();
        }
        reports += pipeline.finish().len();
        assert_eq!(pipeline.counts().clock_steps_back, 1);
        // [1000,1001), [1001,1002), [1002,1003) before; [−2600, −2598) and the one in progress after.
        assert_eq!(reports, 6);
    }

    #[test]
    fn more_gpu_indices_than_the_cap_are_refused_by_name() {
        let mut pipeline = Pipeline::new(1.0, Diagnoser::default());
        for gpu in 0..MAX_GPUS as u32 {
            pipeline
                .push(&Sample::new(10.0, gpu).with(Metric::PowerMw, 1.0))
                .expect("within the cap");
        }
        let err = pipeline
            .push(&Sample::new(10.0, 99_999).with(Metric::PowerMw, 1.0))
            .expect_err("past the cap");
        assert!(
            err.to_string().starts_with("GPU 99999: more than 1024"),
            "{err}"
        );
    }
}

/// Why a whole-trace replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A row of the trace cannot be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The pipeline refused a row (out of time order).
    #[error("{place}: {source}")]
    Refused {
        /// The refused row: `trace.csv:12`, `trace.gstrace: row 12`.
        place: String,
        /// Why it was refused.
        source: PushError,
    },
    /// The sink could not write a report.
    #[error("writing the output")]
    Output(#[source] std::io::Error),
}

/// Feeds every sample of `reader` through `pipeline` and hands each report to `sink` as soon
/// as its time slot is complete. Memory stays flat whatever the trace's length. The pipeline
/// drives here, not the source: a trace reader only reads.
pub fn replay<R: Read>(
    mut reader: TraceReader<R>,
    pipeline: &mut Pipeline,
    mut sink: impl FnMut(WindowReport) -> std::io::Result<()>,
) -> Result<PipelineCounts, ReplayError> {
    while let Some(sample) = reader.next_sample() {
        let reports = match pipeline.push(sample?) {
            Ok(reports) => reports,
            Err(source) => {
                return Err(ReplayError::Refused {
                    place: reader.place(),
                    source,
                })
            }
        };
        for report in reports {
            sink(report).map_err(ReplayError::Output)?;
        }
    }
    for report in pipeline.finish() {
        sink(report).map_err(ReplayError::Output)?;
    }
    Ok(pipeline.counts())
}

/// Frames handed to the diagnosis thread at a time: enough that the hand-over costs nothing a
/// window, few enough that the frames in flight stay under a MiB (a window is some 2.5 KB).
const FRAMES_PER_BATCH: usize = 8;

/// [`replay`] on two threads: the samples windowed on the caller's thread, the frames diagnosed
/// and handed to `sink` on a thread of its own, in the same order, so that `sink` gets what it
/// would from [`replay`], the reports before an error included. An offline replay is limited by
/// the one thread that takes every sample; this takes the diagnosis, a third of its work, and
/// whatever `sink` does off it.
pub fn replay_staged<R: Read>(
    mut reader: TraceReader<R>,
    pipeline: &mut Pipeline,
    mut sink: impl FnMut(WindowReport) -> std::io::Result<()> + Send,
) -> Result<PipelineCounts, ReplayError> {
    let Pipeline {
        windowing,
        diagnoser,
    } = pipeline;
    std::thread::scope(|scope| {
        let (frames_tx, frames_rx) = mpsc::sync_channel::<Vec<Frame>>(4);
        let diagnosis = scope.spawn(move || -> std::io::Result<()> {
            for frames in frames_rx {
                for frame in frames {
                    for report in diagnoser.diagnose_frame(frame) {
                        sink(report)?;
                    }
                }
            }
            Ok(())
        });
        let mut batch = Vec::with_capacity(FRAMES_PER_BATCH);
        let windowed = (|| -> Result<(), ReplayError> {
            while let Some(sample) = reader.next_sample() {
                let frames = windowing
                    .push(sample?)
                    .map_err(|source| ReplayError::Refused {
                        place: reader.place(),
                        source,
                    })?;
                batch.extend(frames);
                if batch.len() >= FRAMES_PER_BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(FRAMES_PER_BATCH));
                    if frames_tx.send(full).is_err() {
                        // The diagnosis stopped (its sink failed): its error is the one to name.
                        return Ok(());
                    }
                }
            }
            batch.extend(windowing.finish());
            Ok(())
        })();
        // The frames released before an error are diagnosed, as on one thread.
        let _ = frames_tx.send(batch);
        drop(frames_tx);
        match diagnosis.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(ReplayError::Output(e)),
            Err(_) => {
                return Err(ReplayError::Output(std::io::Error::other(
                    "the diagnosis thread stopped",
                )))
            }
        }
        windowed?;
        Ok(windowing.counts)
    })
}
