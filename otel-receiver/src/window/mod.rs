//! Fixed windows per GPU. A window summarises every metric (mean, min, max, spread), derives the
//! mean power from the energy counter, and measures how steady the activity was: the shape of
//! activity inside a window is what separates tiny kernels from starved input.
//!
//! Windows are aligned to multiples of the window length in unix time, so windows of different
//! GPUs and hosts line up and a fleet dashboard can compare them.

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

mod ahead;

pub use ahead::{AheadWindow, ChunkWindows, Step, WindowAhead};

use crate::sample::{Metric, Sample};
use crate::thinned::Thinned;

/// Running summary of one metric in one window (Welford's mean and variance).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    pub count: u32,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    m2: f64,
}

impl Summary {
    fn add(&mut self, v: f64) {
        if self.count == 0 {
            self.min = v;
            self.max = v;
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count += 1;
        let delta = v - self.mean;
        self.mean += delta / f64::from(self.count);
        self.m2 += delta * (v - self.mean);
    }

    /// Population standard deviation; zero for fewer than two values.
    pub fn std(&self) -> f64 {
        if self.count < 2 {
            0.0
        } else {
            (self.m2 / f64::from(self.count)).sqrt()
        }
    }
}

/// The metrics whose robust statistics (median, spread) the rules read: a steady level and
/// its flatness must not move because one sample in twenty is an outlier.
pub const ROBUST_METRICS: [Metric; 2] = [Metric::UtilGpu, Metric::GpmSm];

/// Most values kept per metric and window for the robust statistics. A longer window keeps an
/// evenly thinned subset, so memory is fixed whatever the window's length or sample rate.
const ROBUST_CAPACITY: usize = 64;

/// A level and its spread that a few outliers cannot move: the median, and the median absolute
/// deviation scaled by 1.4826 so that it equals the standard deviation of normal noise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Robust {
    pub median: f64,
    pub spread: f64,
}

/// The median of `values`, which it reorders: the middle value, or the mean of the two middle
/// ones, in `f64::total_cmp`'s order. Selecting them takes a pass or two where sorting took
/// n log n, and the values are the same as a sort's: the diagnosis asks for two a window.
fn median(values: &mut [f64]) -> f64 {
    let n = values.len();
    let (below, mid, _) = values.select_nth_unstable_by(n / 2, f64::total_cmp);
    let mid = *mid;
    if n % 2 == 1 {
        return mid;
    }
    // The other middle value is the largest of those below.
    let lower = below.iter().copied().max_by(f64::total_cmp).unwrap_or(mid);
    (lower + mid) / 2.0
}

impl Robust {
    pub fn of(values: &[f64]) -> Option<Robust> {
        if values.is_empty() {
            return None;
        }
        // At most `ROBUST_CAPACITY` values a window: on the stack.
        let mut buf = [0.0; ROBUST_CAPACITY];
        let mut heap = Vec::new();
        let scratch = match buf.get_mut(..values.len()) {
            Some(buf) => buf,
            None => {
                heap.resize(values.len(), 0.0);
                &mut heap[..]
            }
        };
        scratch.copy_from_slice(values);
        let mid = median(scratch);
        for v in scratch.iter_mut() {
            *v = (*v - mid).abs();
        }
        Some(Robust {
            median: mid,
            spread: 1.4826 * median(scratch),
        })
    }
}

/// Where a window's mean power came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerSource {
    /// Difference of the total-energy counter over the window: exact, whatever the sample rate.
    EnergyCounter,
    /// Mean of the power readings: NVML's power is a one-second average on Hopper and changes
    /// only every ~100 ms, so this lags by half a second but does not alias.
    PowerSamples,
}

/// NVML clock-event reasons, as in `nvmlClocksEventReasons`.
pub const CLOCK_REASON_BITS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// How often each clock-event reason was set over a run of samples: a window, a calibration
/// phase, a benchmark run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClockReasonCounts {
    counts: [u32; CLOCK_REASON_BITS.len()],
    samples: u32,
}

impl ClockReasonCounts {
    pub fn add(&mut self, mask: u64) {
        self.samples += 1;
        for (count, (bit, _)) in self.counts.iter_mut().zip(CLOCK_REASON_BITS) {
            if mask & bit != 0 {
                *count += 1;
            }
        }
    }

    /// Samples that carried a mask.
    pub fn samples(&self) -> u32 {
        self.samples
    }

    /// Each reason of [`CLOCK_REASON_BITS`] with the share of samples (0–1) it was set in.
    pub fn shares(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        let samples = f64::from(self.samples.max(1));
        CLOCK_REASON_BITS
            .iter()
            .zip(self.counts)
            .map(move |((_, name), count)| (*name, f64::from(count) / samples))
    }

    /// The share of samples (0–1) with any of the reasons in `mask`, taken as the most frequent
    /// of them (reasons that are read together rarely overlap: a GPU at its power cap is not
    /// also braking).
    pub fn share_of(&self, mask: u64) -> f64 {
        self.shares()
            .zip(CLOCK_REASON_BITS)
            .filter(|(_, (bit, _))| mask & bit != 0)
            .map(|((_, share), _)| share)
            .fold(0.0, f64::max)
    }

    /// Reasons set in at least `min_share` of the samples.
    pub fn active(&self, min_share: f64) -> Vec<&'static str> {
        self.shares()
            .filter(|(_, share)| *share >= min_share && *share > 0.0)
            .map(|(name, _)| name)
            .collect()
    }

    /// Like [`ClockReasonCounts::active`], without `gpu_idle`: the reasons that throttle work.
    pub fn throttling(&self, min_share: f64) -> Vec<&'static str> {
        let mut active = self.active(min_share);
        active.retain(|r| *r != "gpu_idle");
        active
    }
}

/// Everything the diagnosis and the exporters need about one GPU over one window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowStats {
    pub gpu: u32,
    /// Window bounds, unix seconds.
    pub start: f64,
    pub end: f64,
    /// First and last sample times inside the window.
    pub first_t: f64,
    pub last_t: f64,
    pub samples: u32,
    /// Boxed: a window is moved from the windower to its frame and across to the diagnosis's
    /// thread, and 2.4 KB of summaries, most of them of metrics the trace lacks, moved with it.
    metrics: Box<[Summary; Metric::COUNT]>,
    /// Mean power over the window (W), from the energy counter where it was sampled.
    pub power_w: Option<f64>,
    pub power_source: Option<PowerSource>,
    /// Energy used in the window (J), when the energy counter was sampled.
    pub energy_j: Option<f64>,
    /// Latest energy counter reading (mJ) at or before the end of this window.
    pub energy_total_mj: Option<f64>,
    /// The window's first energy counter reading (mJ), if it read the counter.
    pub energy_first_mj: Option<f64>,
    /// Share of samples with GPU-Util above zero (0–1).
    pub util_duty: Option<f64>,
    /// Largest rate of change of memory used between consecutive samples (bytes/s).
    pub mem_swing_bytes_per_s: Option<f64>,
    /// How often each clock-event reason was set.
    pub clock_reasons: ClockReasonCounts,
    /// The values each of [`ROBUST_METRICS`] took (an evenly thinned subset past
    /// `ROBUST_CAPACITY`), whose median and spread [`WindowStats::robust`] computes when asked:
    /// on the diagnosis's thread, not on the one that windows every sample offline.
    robust_values: [Vec<f64>; ROBUST_METRICS.len()],
    /// Samples whose GPM values were dropped as an unrefreshed pair ([`Sample::has_stale_gpm`]).
    pub stale_gpm: u32,
    /// The processes holding the GPU, as last listed in the window.
    pub processes: Option<std::sync::Arc<Vec<crate::attribution::GpuProcess>>>,
    /// The Kubernetes containers the GPU is assigned to, as last listed in the window.
    pub pods: Option<std::sync::Arc<Vec<crate::attribution::PodContainer>>>,
    /// The GPU's NVLinks, as last read in the window.
    pub nvlinks: Option<std::sync::Arc<Vec<crate::sample::NvlinkLink>>>,
}

impl WindowStats {
    /// Median and spread of a metric of [`ROBUST_METRICS`]; `None` for others or unsampled.
    pub fn robust(&self, metric: Metric) -> Option<Robust> {
        let i = ROBUST_METRICS.iter().position(|m| *m == metric)?;
        Robust::of(&self.robust_values[i])
    }

    pub fn summary(&self, metric: Metric) -> Option<&Summary> {
        let s = &self.metrics[metric as usize];
        (s.count > 0).then_some(s)
    }

    pub fn mean(&self, metric: Metric) -> Option<f64> {
        self.summary(metric).map(|s| s.mean)
    }

    pub fn max(&self, metric: Metric) -> Option<f64> {
        self.summary(metric).map(|s| s.max)
    }

    pub fn midpoint(&self) -> f64 {
        (self.start + self.end) / 2.0
    }

    pub fn duration_s(&self) -> f64 {
        self.end - self.start
    }
}

/// The energy reading a window's power is measured from.
#[derive(Debug, Clone, Copy)]
struct EnergyReading {
    t: f64,
    mj: f64,
}

/// Accumulates the samples of the window in progress.
#[derive(Debug, Clone)]
struct Accumulator {
    index: i64,
    first_t: f64,
    last_t: f64,
    samples: u32,
    metrics: Box<[Summary; Metric::COUNT]>,
    energy_first: Option<EnergyReading>,
    energy_last: Option<EnergyReading>,
    util_busy: u32,
    util_count: u32,
    last_mem: Option<(f64, f64)>,
    mem_swing: Option<f64>,
    clock_reasons: ClockReasonCounts,
    thinned: [Thinned<f64>; ROBUST_METRICS.len()],
    stale_gpm: u32,
    processes: Option<std::sync::Arc<Vec<crate::attribution::GpuProcess>>>,
    pods: Option<std::sync::Arc<Vec<crate::attribution::PodContainer>>>,
    nvlinks: Option<std::sync::Arc<Vec<crate::sample::NvlinkLink>>>,
}

impl Accumulator {
    fn new(index: i64, t: f64, last_mem: Option<(f64, f64)>) -> Self {
        Accumulator {
            index,
            first_t: t,
            last_t: t,
            samples: 0,
            metrics: Box::new([Summary::default(); Metric::COUNT]),
            energy_first: None,
            energy_last: None,
            util_busy: 0,
            util_count: 0,
            last_mem,
            mem_swing: None,
            clock_reasons: ClockReasonCounts::default(),
            thinned: std::array::from_fn(|_| Thinned::preallocated(ROBUST_CAPACITY)),
            stale_gpm: 0,
            processes: None,
            pods: None,
            nvlinks: None,
        }
    }

    fn add(&mut self, s: &Sample) {
        let cleaned;
        // A stale pair reads SM activity 0 without DRAM: most samples are told apart by that
        // before the whole GPM set is looked at.
        let maybe_stale = s.get(Metric::GpmSm) == Some(0.0) && s.get(Metric::GpmDram).is_none();
        let s = if maybe_stale && s.has_stale_gpm() {
            self.stale_gpm += 1;
            let mut copy = s.clone();
            copy.clear_gpm();
            cleaned = copy;
            &cleaned
        } else {
            s
        };
        self.samples += 1;
        self.first_t = self.first_t.min(s.t);
        self.last_t = self.last_t.max(s.t);
        // Only the metrics the sample has: a trace's 20 columns, not all 52.
        for (metric, v) in s.metrics() {
            self.metrics[metric as usize].add(v);
        }
        for (thinned, metric) in self.thinned.iter_mut().zip(ROBUST_METRICS) {
            if let Some(v) = s.get(metric) {
                thinned.push(v);
            }
        }
        if let Some(mj) = s.get(Metric::EnergyMj) {
            let reading = EnergyReading { t: s.t, mj };
            if self.energy_first.is_none_or(|r| s.t < r.t) {
                self.energy_first = Some(reading);
            }
            if self.energy_last.is_none_or(|r| s.t >= r.t) {
                self.energy_last = Some(reading);
            }
        }
        if let Some(util) = s.get(Metric::UtilGpu) {
            self.util_count += 1;
            if util > 0.0 {
                self.util_busy += 1;
            }
        }
        if let Some(used) = s.get(Metric::MemUsedBytes) {
            self.swing_from(self.last_mem, (s.t, used));
            self.last_mem = Some((s.t, used));
        }
        if let Some(mask) = s.clk_reasons {
            self.clock_reasons.add(mask);
        }
        if s.processes.is_some() {
            self.processes.clone_from(&s.processes);
        }
        if s.pods.is_some() {
            self.pods.clone_from(&s.pods);
        }
        if s.nvlinks.is_some() {
            self.nvlinks.clone_from(&s.nvlinks);
        }
    }

    /// Takes the rate at which memory used changed from the reading `before` to `now` (each
    /// a time and bytes) into the window's largest swing.
    fn swing_from(&mut self, before: Option<(f64, f64)>, now: (f64, f64)) {
        let Some((t0, used0)) = before else { return };
        let dt = now.0 - t0;
        if dt > 0.0 {
            let rate = (now.1 - used0).abs() / dt;
            self.mem_swing = Some(self.mem_swing.map_or(rate, |m: f64| m.max(rate)));
        }
    }
}

/// Turns one GPU's samples into windows. Samples may arrive slightly out of order inside the
/// window in progress; a sample older than that window is refused ([`LateSample`]).
#[derive(Debug, Clone)]
pub struct GpuWindower {
    gpu: u32,
    window_s: f64,
    current: Option<Accumulator>,
    /// Last energy reading of the previous window: the start of this window's energy interval,
    /// so consecutive windows' intervals tile time with no gap.
    energy_anchor: Option<EnergyReading>,
}

/// A sample that belongs to a window already closed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LateSample {
    pub t: f64,
    pub window_start: f64,
}

impl GpuWindower {
    pub fn new(gpu: u32, window_s: f64) -> Self {
        GpuWindower {
            gpu,
            window_s,
            current: None,
            energy_anchor: None,
        }
    }

    pub fn window_index(&self, t: f64) -> i64 {
        (t / self.window_s).floor() as i64
    }

    /// Index of the window in progress, if any.
    pub fn current_index(&self) -> Option<i64> {
        self.current.as_ref().map(|a| a.index)
    }

    /// Adds a sample that belongs to the window in progress and returns true; returns false,
    /// changing nothing, for any other ([`GpuWindower::push`] takes those). Most samples are of
    /// the window in progress, and this path moves no [`WindowStats`] (2.5 KB) through a
    /// return value.
    pub fn add_to_current(&mut self, sample: &Sample) -> bool {
        let index = self.window_index(sample.t);
        match self.current.as_mut() {
            Some(acc) if acc.index == index => {
                acc.add(sample);
                true
            }
            _ => false,
        }
    }

    /// Adds a sample; returns the window it closed, if it started a new one.
    pub fn push(&mut self, sample: &Sample) -> Result<Option<WindowStats>, LateSample> {
        let index = self.window_index(sample.t);
        let mut closed = None;
        match &self.current {
            Some(acc) if index < acc.index => {
                return Err(LateSample {
                    t: sample.t,
                    window_start: acc.index as f64 * self.window_s,
                })
            }
            Some(acc) if index > acc.index => {
                let last_mem = acc.last_mem;
                closed = self.close();
                self.current = Some(Accumulator::new(index, sample.t, last_mem));
            }
            Some(_) => {}
            None => self.current = Some(Accumulator::new(index, sample.t, None)),
        }
        if let Some(acc) = self.current.as_mut() {
            acc.add(sample);
        }
        Ok(closed)
    }

    /// Starts `ahead`'s window, accumulated on another thread ([`WindowAhead`]), as
    /// [`GpuWindower::push`] would have started it with its first sample and added the rest;
    /// returns the window it closed. Refused (changing nothing) unless it is newer than the
    /// window in progress, which [`WindowAhead`] sees to.
    pub fn install(&mut self, ahead: AheadWindow) -> Result<Option<WindowStats>, LateSample> {
        let AheadWindow {
            mut acc, first_mem, ..
        } = ahead;
        let inherited = match &self.current {
            Some(current) if acc.index <= current.index => {
                return Err(LateSample {
                    t: acc.first_t,
                    window_start: current.index as f64 * self.window_s,
                })
            }
            Some(current) => current.last_mem,
            None => None,
        };
        if let Some(first) = first_mem {
            // Its first memory reading, whose swing from the reading before it the other
            // thread could not see; the maximum is the same whichever rate comes first.
            acc.swing_from(inherited, first);
        }
        if acc.last_mem.is_none() {
            acc.last_mem = inherited;
        }
        let closed = self.close();
        self.current = Some(*acc);
        Ok(closed)
    }

    /// Closes the window in progress (at the end of a trace or of a live run).
    pub fn finish(&mut self) -> Option<WindowStats> {
        self.close()
    }

    fn close(&mut self) -> Option<WindowStats> {
        let acc = self.current.take()?;
        let start = acc.index as f64 * self.window_s;
        let end = start + self.window_s;

        let from_energy = self.energy_power(&acc, start);
        if let Some(last) = acc.energy_last {
            self.energy_anchor = Some(last);
        }
        let (power_w, power_source, energy_j) = match from_energy {
            Some((w, j)) => (Some(w), Some(PowerSource::EnergyCounter), Some(j)),
            None => {
                // Prefer the power reading NVML averages in hardware (a trailing 1 s mean on
                // Hopper) over instantaneous values: instants taken at 10 Hz alias with
                // periodic work (bursts every 80 ms read 3% low on an H200), averages do not.
                let mean = [Metric::PowerMw, Metric::PowerAvgMw, Metric::PowerInstMw]
                    .into_iter()
                    .find_map(|m| {
                        let s = &acc.metrics[m as usize];
                        (s.count > 0).then_some(s.mean)
                    });
                (
                    mean.map(|mw| mw / 1000.0),
                    mean.map(|_| PowerSource::PowerSamples),
                    None,
                )
            }
        };

        Some(WindowStats {
            gpu: self.gpu,
            start,
            end,
            first_t: acc.first_t,
            last_t: acc.last_t,
            samples: acc.samples,
            metrics: acc.metrics,
            power_w,
            power_source,
            energy_j,
            energy_total_mj: self.energy_anchor.map(|r| r.mj),
            energy_first_mj: acc.energy_first.map(|r| r.mj),
            util_duty: (acc.util_count > 0)
                .then(|| f64::from(acc.util_busy) / f64::from(acc.util_count)),
            mem_swing_bytes_per_s: acc.mem_swing,
            clock_reasons: acc.clock_reasons,
            robust_values: acc.thinned.map(Thinned::into_values),
            stale_gpm: acc.stale_gpm,
            processes: acc.processes,
            pods: acc.pods,
            nvlinks: acc.nvlinks,
        })
    }

    /// Mean power (W) and energy (J) from the energy counter, measured from the previous
    /// window's last reading when it is recent, else from this window's first. `None` when the
    /// interval is too short to trust or the counter went backwards (driver reload).
    fn energy_power(&self, acc: &Accumulator, start: f64) -> Option<(f64, f64)> {
        let last = acc.energy_last?;
        let first = match self.energy_anchor {
            Some(anchor) if anchor.t < last.t && start - anchor.t <= self.window_s => anchor,
            _ => acc.energy_first?,
        };
        let dt = last.t - first.t;
        let de_mj = last.mj - first.mj;
        if dt < (self.window_s * 0.25).min(0.5) || de_mj < 0.0 {
            return None;
        }
        Some((de_mj / dt / 1000.0, de_mj / dt * self.window_s / 1000.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Robust::of` as it was written first: two sorts.
    fn robust_by_sorting(values: &[f64]) -> Option<Robust> {
        let middle = |sorted: &[f64]| {
            let n = sorted.len();
            if n % 2 == 1 {
                sorted[n / 2]
            } else {
                (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
            }
        };
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mid = middle(&sorted);
        let mut deviations: Vec<f64> = sorted.iter().map(|v| (v - mid).abs()).collect();
        deviations.sort_by(f64::total_cmp);
        Some(Robust {
            median: mid,
            spread: 1.4826 * middle(&deviations),
        })
    }

    #[test]
    fn robust_by_selection_is_robust_by_sorting_bit_for_bit() {
        let mut x = 7_u64;
        let mut next = || {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x >> 33
        };
        let same = |a: Option<Robust>, b: Option<Robust>| match (a, b) {
            (Some(a), Some(b)) => {
                a.median.to_bits() == b.median.to_bits() && a.spread.to_bits() == b.spread.to_bits()
            }
            (a, b) => a.is_none() && b.is_none(),
        };
        assert!(Robust::of(&[]).is_none());
        // Every length up to past the stack buffer, values with repeats, both zeros and NaN.
        for len in 0..=ROBUST_CAPACITY + 3 {
            for round in 0..40 {
                let values: Vec<f64> = (0..len)
                    .map(|_| match next() % 23 {
                        0 if round % 5 == 0 => f64::NAN,
                        1 => -0.0,
                        2 => 0.0,
                        r => (r % 7) as f64 * 12.5 + (next() % 1000) as f64 / 1000.0,
                    })
                    .collect();
                assert!(
                    same(Robust::of(&values), robust_by_sorting(&values)),
                    "{values:?}"
                );
            }
        }
        let r = Robust::of(&[1.0, 2.0, 3.0, 100.0]).expect("values");
        assert_eq!((r.median, r.spread), (2.5, 1.4826));
    }

    fn sample(t: f64) -> Sample {
        Sample::new(t, 0)
    }

    #[test]
    fn windows_align_to_unix_time_and_close_when_a_later_sample_arrives() {
        let mut w = GpuWindower::new(0, 2.0);
        assert_eq!(w.push(&sample(101.0).with(Metric::GpmSm, 10.0)), Ok(None));
        assert_eq!(w.push(&sample(101.5).with(Metric::GpmSm, 30.0)), Ok(None));
        let closed = w
            .push(&sample(102.2).with(Metric::GpmSm, 50.0))
            .expect("in order")
            .expect("closes [100, 102)");
        assert_eq!(
            (closed.start, closed.end, closed.samples),
            (100.0, 102.0, 2)
        );
        let sm = closed.summary(Metric::GpmSm).expect("sm");
        assert_eq!(
            (sm.mean, sm.min, sm.max, sm.std()),
            (20.0, 10.0, 30.0, 10.0)
        );
        let last = w.finish().expect("last window");
        assert_eq!((last.start, last.mean(Metric::GpmSm)), (102.0, Some(50.0)));
        assert_eq!(w.finish(), None);
    }

    #[test]
    fn a_sample_older_than_the_open_window_is_late() {
        let mut w = GpuWindower::new(0, 2.0);
        w.push(&sample(104.5)).expect("first");
        assert_eq!(
            w.push(&sample(104.1)),
            Ok(None),
            "reordering inside a window is fine"
        );
        assert_eq!(
            w.push(&sample(101.0)),
            Err(LateSample {
                t: 101.0,
                window_start: 104.0
            })
        );
    }

    #[test]
    fn power_comes_from_the_energy_counter_across_window_boundaries() {
        let mut w = GpuWindower::new(0, 2.0);
        // 500 W for 1 s steps, but the power readings claim 100 W: energy must win.
        let mut energy = 1_000_000.0;
        let mut windows = Vec::new();
        for step in 0..6 {
            let t = 100.0 + f64::from(step);
            let s = sample(t)
                .with(Metric::EnergyMj, energy)
                .with(Metric::PowerMw, 100_000.0);
            energy += 500_000.0;
            windows.extend(w.push(&s).expect("in order"));
        }
        windows.extend(w.finish());
        assert_eq!(windows.len(), 3);
        // The first window only has its own two readings, 1 s apart.
        assert_eq!(windows[0].power_w, Some(500.0));
        assert_eq!(windows[0].power_source, Some(PowerSource::EnergyCounter));
        // Later windows measure from the previous window's last reading: 2 s, 2000 J... per 2 s.
        assert_eq!(windows[1].power_w, Some(500.0));
        assert_eq!(windows[1].energy_j, Some(1000.0));
        assert_eq!(windows[2].energy_total_mj, Some(3_500_000.0));
    }

    #[test]
    fn without_energy_power_is_the_mean_of_the_averaged_readings() {
        let mut w = GpuWindower::new(0, 2.0);
        w.push(
            &sample(100.0)
                .with(Metric::PowerMw, 100_000.0)
                .with(Metric::PowerInstMw, 150_000.0),
        )
        .expect("first");
        w.push(
            &sample(100.5)
                .with(Metric::PowerMw, 200_000.0)
                .with(Metric::PowerInstMw, 250_000.0),
        )
        .expect("second");
        let win = w.finish().expect("window");
        assert_eq!(win.power_w, Some(150.0));
        assert_eq!(win.power_source, Some(PowerSource::PowerSamples));
        assert_eq!(win.energy_j, None);
    }

    #[test]
    fn an_energy_counter_that_goes_backwards_is_not_trusted() {
        let mut w = GpuWindower::new(0, 2.0);
        w.push(
            &sample(100.0)
                .with(Metric::EnergyMj, 9e6)
                .with(Metric::PowerMw, 90_000.0),
        )
        .expect("first");
        w.push(
            &sample(101.0)
                .with(Metric::EnergyMj, 1e3)
                .with(Metric::PowerMw, 90_000.0),
        )
        .expect("second");
        assert_eq!(w.finish().expect("window").power_w, Some(90.0));
    }

    #[test]
    fn one_outlier_moves_neither_the_median_nor_the_spread() {
        let mut w = GpuWindower::new(0, 2.0);
        for i in 0..20 {
            let sm = if i == 7 { 0.0 } else { 18.2 };
            let s = sample(100.0 + 0.1 * f64::from(i))
                .with(Metric::GpmSm, sm)
                .with(Metric::GpmDram, 0.0);
            w.push(&s).expect("in order");
        }
        let win = w.finish().expect("window");
        let robust = win.robust(Metric::GpmSm).expect("sampled");
        assert_eq!((robust.median, robust.spread), (18.2, 0.0));
        let plain = win.summary(Metric::GpmSm).expect("sampled");
        assert!(
            plain.std() > 3.0,
            "a standard deviation is moved: {}",
            plain.std()
        );
    }

    #[test]
    fn an_unrefreshed_gpm_pair_is_left_out_of_the_window() {
        let mut w = GpuWindower::new(0, 2.0);
        let real = |t| {
            sample(t)
                .with(Metric::UtilGpu, 100.0)
                .with(Metric::GpmSm, 18.0)
                .with(Metric::GpmDram, 0.0)
        };
        w.push(&real(100.0)).expect("first");
        let stale = sample(100.1)
            .with(Metric::UtilGpu, 100.0)
            .with(Metric::GpmSm, 0.0)
            .with(Metric::GpmPcieRx, 0.0);
        w.push(&stale).expect("second");
        w.push(&real(100.2)).expect("third");
        let win = w.finish().expect("window");
        assert_eq!(win.stale_gpm, 1);
        assert_eq!(win.mean(Metric::GpmSm), Some(18.0));
        assert_eq!(win.summary(Metric::UtilGpu).map(|s| s.count), Some(3));
    }

    #[test]
    fn duty_memory_swing_and_clock_reasons_are_measured() {
        let mut w = GpuWindower::new(0, 2.0);
        for (i, util) in [0.0, 30.0, 0.0, 0.0].into_iter().enumerate() {
            let t = 100.0 + 0.5 * i as f64;
            let mut s = sample(t)
                .with(Metric::UtilGpu, util)
                .with(Metric::MemUsedBytes, 1e9 * i as f64);
            s.clk_reasons = Some(if i < 2 { 0x4 } else { 0x1 });
            w.push(&s).expect("in order");
        }
        let win = w.finish().expect("window");
        assert_eq!(win.util_duty, Some(0.25));
        assert_eq!(win.mem_swing_bytes_per_s, Some(2e9));
        assert_eq!(
            win.clock_reasons.active(0.5),
            vec!["gpu_idle", "sw_power_cap"]
        );
        assert_eq!(win.clock_reasons.throttling(0.5), vec!["sw_power_cap"]);
    }
}
