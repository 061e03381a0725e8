//! source → window → diagnosis, streaming. Samples go in one at a time (from any source, any
//! number of GPUs interleaved); reports come out one time slot at a time, once every GPU has
//! moved past it, so the cross-GPU rules see all GPUs of a slot together. Memory is bounded by
//! the number of GPUs, not the length of the run.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{mpsc, Arc};

use crate::diagnosis::{Diagnoser, WindowReport};
use crate::sample::Sample;
use crate::trace::{BatchRows, TraceError, TraceReader};
use crate::window::{AheadWindow, ChunkWindows, GpuWindower, Step, WindowAhead, WindowStats};

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
        Ok(self.moved(was, now, closed))
    }

    /// Starts a window accumulated ahead, on the thread that parsed its chunk, where its first
    /// row is ([`crate::window::WindowAhead`]); returns every time slot it completed, as pushing
    /// its samples would have.
    fn install(&mut self, ahead: AheadWindow) -> Result<Vec<Frame>, PushError> {
        let gpu = ahead.gpu;
        let last_t = ahead.last_t;
        if !self.windowers.contains_key(&gpu) && self.windowers.len() >= MAX_GPUS {
            return Err(TooManyGpus { gpu }.into());
        }
        let window_s = self.window_s;
        let state = self.windowers.entry(gpu).or_insert_with(|| GpuState {
            windower: GpuWindower::new(gpu, window_s),
            last_t: None,
        });
        let was = state.windower.current_index();
        let closed = state.windower.install(ahead).map_err(|late| OutOfOrder {
            gpu,
            t: late.t,
            window_start: late.window_start,
        })?;
        state.last_t = Some(last_t);
        let now = state.windower.current_index();
        Ok(self.moved(was, now, closed))
    }

    /// Counts what a chunk windowed ahead took into its windows.
    fn count_ahead(&mut self, chunk: &ChunkWindows) {
        self.counts.samples += chunk.samples;
        self.counts.duplicates += chunk.duplicates;
        self.counts.empty += chunk.empty;
    }

    /// A GPU's window in progress went from `was` to `now`, closing `closed`: the time slots
    /// that completes.
    fn moved(
        &mut self,
        was: Option<i64>,
        now: Option<i64>,
        closed: Option<WindowStats>,
    ) -> Vec<Frame> {
        if let Some(stats) = closed {
            let index = ((stats.start + self.window_s / 2.0) / self.window_s).floor() as i64;
            self.pending.entry(index).or_default().push(stats);
        }
        if was == now {
            // Neither a window closed nor the oldest or newest open window moved: nothing
            // can be released that could not be before.
            return Vec::new();
        }
        if let Some(was) = was {
            self.forget_open(was);
        }
        if let Some(now) = now {
            *self.open.entry(now).or_default() += 1;
        }
        self.release(false)
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

    /// A trace of some twenty CSV chunks from three GPUs, with what a chunk cannot see of the
    /// one before: repeated rows, rows without a metric, memory read on some rows only, a GPU
    /// silent for ten seconds, GPM pairs read before a refresh; `tail` ends it.
    fn tricky_trace(tail: &str) -> String {
        let mut text = String::from("t,gpu,util_gpu,power_mw,energy_mj,mem_used,gpm_sm,gpm_dram\n");
        let mut x: u64 = 12_345;
        let mut energy_mj = [0.0f64; 3];
        for tick in 0..12_000u32 {
            let t0 = 1_796_025_900.0 + f64::from(tick) * 0.1;
            for gpu in 0..3u32 {
                if gpu == 2 && (3_000..3_100).contains(&tick) {
                    continue;
                }
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let r = (x >> 33) as u32;
                let t = t0 + f64::from(gpu) * 0.001;
                energy_mj[gpu as usize] += 30_000.0 + f64::from(r % 1000);
                let mem = if gpu == 2 || (gpu == 1 && tick % 37 != 0) {
                    String::new()
                } else {
                    (1_000_000 + u64::from(r % 5000) * 4096).to_string()
                };
                let (sm, dram) = if r % 17 == 2 {
                    ("0".to_string(), String::new())
                } else {
                    (
                        (f64::from(r % 1000) / 10.0).to_string(),
                        (f64::from(r % 777) / 10.0).to_string(),
                    )
                };
                let line = format!(
                    "{t:.4},{gpu},{},{},{},{mem},{sm},{dram}\n",
                    r % 101,
                    100_000 + r % 500_000,
                    energy_mj[gpu as usize]
                );
                text.push_str(&line);
                match r % 11 {
                    0 => text.push_str(&line),
                    1 => text.push_str(&format!("{:.4},{gpu},,,,,,\n", t + 0.0005)),
                    _ => {}
                }
            }
        }
        text.push_str(tail);
        text
    }

    fn reports_of(
        reader: TraceReader<impl Read>,
        window_s: f64,
        staged: bool,
    ) -> (Vec<String>, Result<PipelineCounts, String>) {
        let mut pipeline = Pipeline::new(window_s, Diagnoser::default());
        let mut reports = Vec::new();
        let sink = |r: WindowReport| {
            reports.push(format!("{r:?}"));
            Ok(())
        };
        let counts = if staged {
            replay_staged(reader, &mut pipeline, sink)
        } else {
            replay(reader, &mut pipeline, sink)
        };
        (reports, counts.map_err(|e| e.to_string()))
    }

    #[test]
    fn windowing_ahead_on_the_parsing_threads_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("gpuslack-ahead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let tails = [
            "",
            // Older than GPU 0's window in progress: refused, with its line.
            "1796026000.0,0,50,100000,1,,,\n",
            "1796027100.0,1,50,x,1,,,\n",
        ];
        for (n, tail) in tails.into_iter().enumerate() {
            let text = tricky_trace(tail);
            let path = dir.join(format!("tricky-{n}.csv"));
            std::fs::write(&path, &text).expect("write");
            for window_s in [1.0, 5.0] {
                let one = reports_of(
                    TraceReader::new("t.csv".into(), text.as_bytes()).expect("header"),
                    window_s,
                    false,
                );
                assert!(
                    one.0.len() > 3 * 1000 / window_s as usize,
                    "{} reports",
                    one.0.len()
                );
                let open = |threads| {
                    let file = std::fs::File::open(&path).expect("open");
                    TraceReader::new("t.csv".into(), std::io::BufReader::new(file))
                        .expect("header")
                        .parallel(threads)
                };
                // Two threads: one cuts, one parses, and that one is the busiest already.
                assert!(!window_ahead(&mut open(2), &Windowing::new(window_s)));
                for threads in [3, 4] {
                    assert!(
                        window_ahead(&mut open(threads), &Windowing::new(window_s)),
                        "the chunks are windowed ahead"
                    );
                    let ahead = reports_of(open(threads), window_s, true);
                    assert!(
                        ahead == one,
                        "tail {n}, {window_s} s windows, {threads} threads"
                    );
                }
                match n {
                    0 => {
                        let counts = one.1.expect("read whole");
                        assert!(
                            counts.duplicates > 1000 && counts.empty > 1000,
                            "{counts:?}"
                        );
                    }
                    1 => assert!(one
                        .1
                        .expect_err("refused")
                        .contains("older than the window")),
                    _ => assert!(one.1.expect_err("refused").contains("not a number")),
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_sink_that_fails_stops_the_staged_replay_with_its_error() {
        let text = tricky_trace("");
        let path = std::env::temp_dir().join(format!("gpuslack-sink-{}.csv", std::process::id()));
        std::fs::write(&path, &text).expect("write");
        // The sink fails on its 1,000th report: every thread stops, the reports before it
        // were given in order, and the error named is the sink's.
        let replayed = |staged: bool| {
            let file = std::fs::File::open(&path).expect("open");
            let reader = TraceReader::new("t.csv".into(), std::io::BufReader::new(file))
                .expect("header")
                .parallel(4);
            let mut pipeline = Pipeline::new(1.0, Diagnoser::default());
            let mut given = Vec::new();
            let sink = |r: WindowReport| {
                if given.len() == 999 {
                    return Err(std::io::Error::other("disk full"));
                }
                given.push((r.stats.gpu, r.stats.start));
                Ok(())
            };
            let result = if staged {
                replay_staged(reader, &mut pipeline, sink)
            } else {
                replay(reader, &mut pipeline, sink)
            };
            (given, result.map(|_| ()).map_err(|e| format!("{e:?}")))
        };
        let (one, one_result) = replayed(false);
        let (staged, staged_result) = replayed(true);
        let _ = std::fs::remove_file(&path);
        assert_eq!(one.len(), 999);
        assert_eq!(staged, one);
        assert_eq!(one_result, staged_result);
        assert!(staged_result.expect_err("failed").contains("disk full"));
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

/// [`replay`] on three threads: the samples windowed on the caller's thread, the frames
/// diagnosed on a second, and the reports handed to `sink` on a third, in the same order, so
/// that `sink` gets what it would from [`replay`], the reports before an error included.
///
/// An offline replay is limited by its slowest thread. Where two or more threads parse the
/// trace, they also add each sample to its window ([`WindowAhead`]), and the caller's thread
/// takes a tenth of the instructions a sample it would. What is left is the diagnosis (some
/// 480 instructions a sample) and what `sink` does with each report (`replay --format jsonl`
/// formats a line: some 540): on one thread together they were the busiest of all, so each
/// has its own.
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
        // A frame's reports stay in the vector they were made in: gathering a batch's into
        // one vector copied every report, some twice, as it grew.
        let (reports_tx, reports_rx) = mpsc::sync_channel::<Vec<Vec<WindowReport>>>(4);
        // Ends when the windowing does, or when the sink stopped (its error is the one to name).
        let diagnosis = scope.spawn(move || {
            for frames in frames_rx {
                let reports = frames
                    .into_iter()
                    .map(|frame| diagnoser.diagnose_frame(frame))
                    .collect();
                if reports_tx.send(reports).is_err() {
                    return;
                }
            }
        });
        let sinking = scope.spawn(move || -> std::io::Result<()> {
            for report in reports_rx.into_iter().flatten().flatten() {
                sink(report)?;
            }
            Ok(())
        });
        let mut batch = Vec::with_capacity(FRAMES_PER_BATCH);
        // Hands `frames` on; false once the diagnosis stopped.
        let mut hand_on = |frames: Vec<Frame>| {
            batch.extend(frames);
            if batch.len() < FRAMES_PER_BATCH {
                return true;
            }
            let full = std::mem::replace(&mut batch, Vec::with_capacity(FRAMES_PER_BATCH));
            frames_tx.send(full).is_ok()
        };
        window_ahead(&mut reader, windowing);
        let windowed = window_chunks(&mut reader, windowing, &mut hand_on).map(|()| {
            hand_on(windowing.finish());
        });
        // The frames released before an error are diagnosed, as on one thread.
        let _ = frames_tx.send(batch);
        drop(frames_tx);
        let stopped = || {
            ReplayError::Output(std::io::Error::other(
                "a thread of the replay stopped unexpectedly",
            ))
        };
        diagnosis.join().map_err(|_| stopped())?;
        sinking
            .join()
            .map_err(|_| stopped())?
            .map_err(ReplayError::Output)?;
        windowed?;
        Ok(windowing.counts)
    })
}

/// Has the reader's parsing threads window each chunk ahead ([`WindowAhead`]) for
/// `windowing`, where there are two or more; whether they will. With one, that thread is
/// already the busiest (a CSV row takes it 4,700 instructions to parse, the windowing 1,500):
/// the work would only move to it.
fn window_ahead<R: Read>(reader: &mut TraceReader<R>, windowing: &Windowing) -> bool {
    // A live clock's steps restart the windows: only one sample at a time can tell.
    if windowing.clock_steps || reader.parsing_threads() < 2 {
        return false;
    }
    let window_s = windowing.window_s;
    reader.work_ahead(Arc::new(move |rows: &BatchRows<'_>| {
        let mut ahead = WindowAhead::new(window_s);
        let mut sample = Sample::new(0.0, 0);
        for i in 0..rows.len() {
            let parsed = rows.peek(i, &mut sample);
            ahead.row(i as u32, parsed.then_some(&sample));
        }
        Box::new(ahead.finish())
    }))
}

/// Windows every sample of `reader` a batch at a time, handing the frames to `hand_on` until it
/// returns false: where the parsing threads windowed a batch ahead, its plan taken in order
/// (its windows installed and the rows left pushed), else every row pushed.
fn window_chunks<R: Read>(
    reader: &mut TraceReader<R>,
    windowing: &mut Windowing,
    hand_on: &mut impl FnMut(Vec<Frame>) -> bool,
) -> Result<(), ReplayError> {
    while let Some(ahead) = reader.next_batch() {
        let (steps, mut windows) = match ahead.map(|a| a.downcast::<ChunkWindows>()) {
            Some(Ok(chunk)) => {
                windowing.count_ahead(&chunk);
                (chunk.steps, chunk.windows)
            }
            // Not windowed ahead: every row pushed.
            _ => (
                (0..reader.batch_len() as u32).map(Step::Row).collect(),
                Vec::new(),
            ),
        };
        for step in steps {
            let frames = match step {
                Step::Row(i) => {
                    let sample = reader.row(i as usize)?;
                    windowing
                        .push(sample)
                        .map_err(|source| ReplayError::Refused {
                            place: reader.place(),
                            source,
                        })?
                }
                Step::Window(w) => match windows.get_mut(w as usize).and_then(Option::take) {
                    Some(window) => {
                        let row = window.row as usize;
                        windowing
                            .install(window)
                            .map_err(|source| ReplayError::Refused {
                                place: reader.place_of(row),
                                source,
                            })?
                    }
                    None => Vec::new(),
                },
            };
            if !hand_on(frames) {
                return Ok(());
            }
        }
    }
    Ok(())
}
