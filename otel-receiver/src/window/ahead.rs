//! Windowing ahead, on the threads that parse a trace's chunks. Offline, one thread takes every
//! sample in the file's order to window it, and adding a sample to its window is most of that
//! thread's work: on four cores it limited a replay while the parsing threads had time to spare.
//! [`WindowAhead`] adds a chunk's samples to their windows on the thread that parsed the chunk,
//! and leaves the windowing thread a short plan ([`ChunkWindows`]): the rows it must still take
//! one by one, and the windows that start in the chunk, already accumulated, to install where
//! their first row is. Frames, their order and every value are as if each sample had been
//! pushed in turn: a window's samples are added in the same order, on one thread.
//!
//! What a chunk cannot know is left to the windowing thread, which knows it:
//! - a GPU's rows until its first window boundary in the chunk: they belong to the window in
//!   progress from the chunk before, and the first may repeat that chunk's last time;
//! - the memory reading before a window's first one, when no row of the chunk had one: the
//!   swing from it is added when the window is installed ([`GpuWindower::install`]);
//! - everything of a GPU after a sample older than its window in progress, which the
//!   windowing thread refuses with its place.
//!
//! [`GpuWindower::install`]: super::GpuWindower::install

use std::collections::BTreeMap;

use super::Accumulator;
use crate::sample::{Metric, Sample};

/// What the windowing thread does for one row of a chunk, in the chunk's order. A row that is
/// in neither is in a window already accumulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Push row `i` as a sample, as without windowing ahead.
    Row(u32),
    /// Install window `w` of [`ChunkWindows::windows`] at its first row.
    Window(u32),
}

/// One GPU's window begun in a chunk, its samples in the chunk added.
#[derive(Debug)]
pub struct AheadWindow {
    /// The row that began it (0-based in the chunk).
    pub row: u32,
    pub gpu: u32,
    /// The time of the last sample added: the GPU's last time, for the next row's repeat test.
    pub last_t: f64,
    pub(super) acc: Box<Accumulator>,
    /// Its first memory reading, when no row of the chunk before it had one.
    pub(super) first_mem: Option<(f64, f64)>,
}

/// A chunk windowed ahead: the steps left to the windowing thread, the windows begun, and
/// what the rows taken into them count for.
#[derive(Debug, Default)]
pub struct ChunkWindows {
    pub steps: Vec<Step>,
    pub windows: Vec<Option<AheadWindow>>,
    /// Rows added to a window here.
    pub samples: u64,
    /// Rows repeating their GPU's time here (the first one kept).
    pub duplicates: u64,
    /// Rows without a metric here.
    pub empty: u64,
}

/// What one GPU's rows of the chunk have shown so far.
#[derive(Debug, Default)]
struct GpuAhead {
    /// A sample with a metric was seen: `last_t` and `index` are the GPU's after it.
    seen: bool,
    last_t: f64,
    index: i64,
    /// The last memory reading of a row the windowing thread adds; `None` while unknown here.
    last_mem: Option<(f64, f64)>,
    /// The window being accumulated here ([`ChunkWindows::windows`]).
    open: Option<usize>,
    /// A sample older than its window: the rest of the GPU's rows go to the windowing thread,
    /// which refuses it.
    refused: bool,
}

/// Windows one chunk's rows ahead ([`ChunkWindows`]); feed it every row in order.
#[derive(Debug)]
pub struct WindowAhead {
    window_s: f64,
    gpus: BTreeMap<u32, GpuAhead>,
    out: ChunkWindows,
}

impl WindowAhead {
    /// Windows of `window_s` seconds, as the pipeline's.
    pub fn new(window_s: f64) -> Self {
        WindowAhead {
            window_s,
            gpus: BTreeMap::new(),
            out: ChunkWindows::default(),
        }
    }

    /// Row `i` of the chunk: its sample, or `None` for a row that failed to parse.
    pub fn row(&mut self, i: u32, sample: Option<&Sample>) {
        let Some(s) = sample else {
            self.out.steps.push(Step::Row(i));
            return;
        };
        let g = self.gpus.entry(s.gpu).or_default();
        if g.refused {
            self.out.steps.push(Step::Row(i));
            return;
        }
        if !g.seen {
            // The GPU's first row here: it may repeat the last time of the chunk before, and
            // whether its memory reading counts is not known here.
            self.out.steps.push(Step::Row(i));
            if !s.is_empty() {
                g.seen = true;
                g.last_t = s.t;
                g.index = window_index(s.t, self.window_s);
            }
            return;
        }
        // The tests of `Windowing::push`, in its order.
        if s.t == g.last_t || s.is_empty() {
            match g.open {
                Some(_) if s.t == g.last_t => self.out.duplicates += 1,
                Some(_) => self.out.empty += 1,
                None => self.out.steps.push(Step::Row(i)),
            }
            return;
        }
        let index = window_index(s.t, self.window_s);
        if index < g.index {
            g.refused = true;
            self.out.steps.push(Step::Row(i));
            return;
        }
        let mem = s.get(Metric::MemUsedBytes).map(|used| (s.t, used));
        if index > g.index {
            // A window begins: accumulated here from its first sample on.
            let first_mem = if g.last_mem.is_none() { mem } else { None };
            let window = AheadWindow {
                row: i,
                gpu: s.gpu,
                last_t: s.t,
                acc: Box::new(Accumulator::new(index, s.t, g.last_mem)),
                first_mem,
            };
            g.open = Some(self.out.windows.len());
            g.index = index;
            self.out
                .steps
                .push(Step::Window(self.out.windows.len() as u32));
            self.out.windows.push(Some(window));
        }
        match g.open.and_then(|w| self.out.windows[w].as_mut()) {
            Some(window) => {
                window.acc.add(s);
                window.last_t = s.t;
                self.out.samples += 1;
                // A first reading in a window that inherits the one before is noted apart.
                if window.first_mem.is_none() && g.last_mem.is_none() {
                    window.first_mem = mem;
                }
            }
            None => self.out.steps.push(Step::Row(i)),
        }
        g.last_t = s.t;
        if mem.is_some() {
            g.last_mem = mem;
        }
    }

    /// The chunk's plan.
    pub fn finish(self) -> ChunkWindows {
        self.out
    }
}

fn window_index(t: f64, window_s: f64) -> i64 {
    (t / window_s).floor() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, gpu: u32, mem: Option<f64>) -> Sample {
        let mut s = Sample::new(t, gpu).with(Metric::PowerMw, 100_000.0);
        if let Some(used) = mem {
            s.set(Metric::MemUsedBytes, used);
        }
        s
    }

    #[test]
    fn a_gpus_rows_until_its_first_boundary_are_left_to_the_windowing_thread() {
        let mut ahead = WindowAhead::new(1.0);
        // GPU 0: two rows of the window in progress, then a window of three rows, one of them
        // repeated and one without a metric; GPU 1: one row only.
        let rows = [
            Some(sample(10.5, 0, None)),
            Some(sample(10.5, 1, None)),
            Some(sample(10.9, 0, None)),
            Some(sample(11.0, 0, Some(5.0))),
            Some(sample(11.0, 0, None)),
            Some(Sample::new(11.05, 0)),
            Some(sample(11.1, 0, Some(7.0))),
            None,
        ];
        for (i, row) in rows.iter().enumerate() {
            ahead.row(i as u32, row.as_ref());
        }
        let chunk = ahead.finish();
        assert_eq!(
            chunk.steps,
            [
                Step::Row(0),
                Step::Row(1),
                Step::Row(2),
                Step::Window(0),
                Step::Row(7)
            ]
        );
        assert_eq!((chunk.samples, chunk.duplicates, chunk.empty), (2, 1, 1));
        let window = chunk.windows[0].as_ref().expect("a window");
        assert_eq!((window.row, window.gpu, window.last_t), (3, 0, 11.1));
        assert_eq!(window.acc.index, 11);
        // No memory reading before it in the chunk: its first is kept for the swing from the
        // one before, which only the windowing thread knows.
        assert_eq!(window.first_mem, Some((11.0, 5.0)));
        assert_eq!(window.acc.mem_swing, Some(2.0 / (11.1 - 11.0)));
    }

    #[test]
    fn a_window_after_a_memory_reading_in_the_chunk_needs_nothing_more() {
        let mut ahead = WindowAhead::new(1.0);
        ahead.row(0, Some(&sample(10.5, 0, Some(1.0))));
        ahead.row(1, Some(&sample(10.6, 0, Some(2.0))));
        ahead.row(2, Some(&sample(11.1, 0, Some(4.0))));
        let chunk = ahead.finish();
        let window = chunk.windows[0].as_ref().expect("a window");
        assert_eq!(window.first_mem, None);
        // From 10.6's reading: 2 bytes in 0.5 s.
        assert_eq!(window.acc.mem_swing, Some(2.0 / (11.1 - 10.6)));
    }

    #[test]
    fn after_a_sample_older_than_its_window_a_gpus_rows_are_left_to_the_windowing_thread() {
        let mut ahead = WindowAhead::new(1.0);
        ahead.row(0, Some(&sample(10.5, 0, None)));
        ahead.row(1, Some(&sample(11.5, 0, None)));
        ahead.row(2, Some(&sample(10.2, 0, None)));
        ahead.row(3, Some(&sample(12.5, 0, None)));
        let chunk = ahead.finish();
        assert_eq!(
            chunk.steps,
            [Step::Row(0), Step::Window(0), Step::Row(2), Step::Row(3)]
        );
        assert_eq!(chunk.samples, 1);
    }
}
