//! Samples in batches, in the file's order, whichever format and however many threads parse
//! them: a format cuts its input into chunks of whole records on one thread ([`Chunker`]), any
//! thread parses a chunk into a [`Batch`], and [`Parallel`] gives the batches back in order
//! with a fixed number of chunks ever in flight, so memory does not grow with the trace.
//!
//! A batch holds its rows packed, each sample's values back to back rather than in a sample's
//! array of every metric (488 bytes, mostly empty), and the reader builds each sample on the
//! thread that takes it: once a batch is parsed on one core and read on another, the bytes
//! that cross between them cost more than the work (on four of the device host's cores, a
//! binary replay spent 150 ns a sample of CPU more than on one with whole samples crossing, 94
//! packed; a CSV replay ran 10% faster). Packing and building again cost about 300
//! instructions a sample, 6% of a replay on one core.
//!
//! A batch, once read, goes back to be filled again, with the chunk's bytes beside it: allocated
//! afresh each time (past glibc's `mmap` threshold) its pages were faulted in anew, 27,000 page
//! faults and a fifth of the time of a replay.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};

use super::error::TraceError;
use crate::attribution::{GpuProcess, PodContainer};
use crate::sample::{MetricBits, NvlinkLink, Sample};

/// Chunks parsed or being parsed ahead of the pipeline, whatever the number of threads: this
/// bounds the reader's memory (about 2 MiB of input, 6 MiB of parsed rows and the windows
/// built ahead). The chunks come back in the file's order, so one slow chunk holds up those
/// parsed after it: with 8, a day's replay on four cores took 1.30–1.60 s, with 16
/// 1.33–1.42 s, for 8 MiB more (docs/benchmarks.md, "Fifth pass").
const CHUNKS_IN_FLIGHT: usize = 16;

/// One sample of a batch, its values in the batch's `values` from `first` on, one per bit of
/// `present` ([`Sample::metric_bits`]).
#[derive(Debug)]
struct Row {
    t: f64,
    gpu: u32,
    present: MetricBits,
    first: u32,
    clk_reasons: Option<u64>,
    /// The lists, which few rows carry, apart: the row stays one cache line.
    lists: Option<Box<Lists>>,
}

#[derive(Debug)]
struct Lists {
    processes: Option<Arc<Vec<GpuProcess>>>,
    pods: Option<Arc<Vec<PodContainer>>>,
    nvlinks: Option<Arc<Vec<NvlinkLink>>>,
}

/// A chunk's rows (or the errors in their place), in order, parsed where the chunk is parsed:
/// on a parsing thread when there are several, so that the pipeline's thread, which limits an
/// offline run, only reads them.
#[derive(Debug, Default)]
pub(super) struct Batch {
    rows: Vec<Result<Row, Box<TraceError>>>,
    values: Vec<f64>,
    /// Where each row is (a CSV line, a binary row), or where its error is: what
    /// [`crate::trace::TraceReader::line`] says after it.
    lines: Vec<u64>,
    /// The input failed after these rows (a read error, a damaged block): nothing follows.
    pub(super) fatal: bool,
    /// The bytes of the chunk it was parsed from, kept for the next chunk to be read into.
    spare_bytes: Vec<u8>,
    /// What the reader's [`ChunkWork`] made of the rows, on the thread that parsed them.
    pub(super) ahead: Option<Box<dyn Any + Send>>,
}

/// Work on a chunk's rows done where they were parsed, on a parsing thread, its result handed
/// out with the batch ([`crate::trace::TraceReader::work_ahead`]).
pub type ChunkWork = Arc<dyn Fn(&BatchRows<'_>) -> Box<dyn Any + Send> + Send + Sync>;

/// A batch's rows, to read without taking them.
pub struct BatchRows<'a>(&'a Batch);

impl BatchRows<'_> {
    /// How many rows there are.
    pub fn len(&self) -> usize {
        self.0.rows.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.rows.is_empty()
    }

    /// Row `i` built into `sample` (its lists shared, not moved); false for a row that failed
    /// to parse, leaving `sample` as it was.
    pub fn peek(&self, i: usize, sample: &mut Sample) -> bool {
        match &self.0.rows[i] {
            Ok(row) => {
                build(row, &self.0.values, sample);
                if let Some(lists) = &row.lists {
                    sample.processes.clone_from(&lists.processes);
                    sample.pods.clone_from(&lists.pods);
                    sample.nvlinks.clone_from(&lists.nvlinks);
                } else {
                    (sample.processes, sample.pods, sample.nvlinks) = (None, None, None);
                }
                true
            }
            Err(_) => false,
        }
    }
}

impl Batch {
    /// Empties the batch, keeping its memory.
    fn clear(&mut self) {
        self.rows.clear();
        self.values.clear();
        self.lines.clear();
        self.fatal = false;
        self.ahead = None;
    }

    /// An error after which nothing follows, in place of the rows.
    fn fail(&mut self, e: TraceError) {
        self.clear();
        self.lines.push(e.line());
        self.rows.push(Err(Box::new(e)));
        self.fatal = true;
    }

    /// Parses `chunk` into this batch, emptied first; the chunk's bytes are kept.
    fn fill(&mut self, parse: &ParseChunk, chunk: Result<Chunk, TraceError>) {
        self.clear();
        match chunk {
            Ok(chunk) => {
                parse(&chunk, self);
                self.spare_bytes = chunk.bytes;
            }
            Err(e) => self.fail(e),
        }
    }

    /// Room for `rows` more rows of about `values` values each.
    pub(super) fn reserve(&mut self, rows: usize, values: usize) {
        self.rows.reserve(rows);
        self.lines.reserve(rows);
        self.values.reserve(rows * values);
    }

    /// Adds a row, `line` being where it is (or its error is).
    pub(super) fn push(&mut self, line: u64, row: Result<Sample, TraceError>) {
        match row {
            Ok(mut sample) => self.push_sample(line, &mut sample),
            Err(e) => self.push_error(line, e),
        }
    }

    /// Adds a row where parsing failed.
    pub(super) fn push_error(&mut self, line: u64, e: TraceError) {
        self.lines.push(line);
        self.rows.push(Err(Box::new(e)));
    }

    /// Adds `sample` as a row at `line`, its values packed; its lists move into the batch.
    pub(super) fn push_sample(&mut self, line: u64, sample: &mut Sample) {
        self.lines.push(line);
        let first = self.values.len() as u32;
        self.values.extend(sample.metrics().map(|(_, v)| v));
        let lists = (sample.processes.is_some()
            || sample.pods.is_some()
            || sample.nvlinks.is_some())
        .then(|| {
            Box::new(Lists {
                processes: sample.processes.take(),
                pods: sample.pods.take(),
                nvlinks: sample.nvlinks.take(),
            })
        });
        self.rows.push(Ok(Row {
            t: sample.t,
            gpu: sample.gpu,
            present: sample.metric_bits(),
            first,
            clk_reasons: sample.clk_reasons,
            lists,
        }));
    }

    /// How many rows it holds.
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Where row `i` is.
    pub(super) fn line(&self, i: usize) -> u64 {
        self.lines[i]
    }

    /// Row `i` built into `sample`, or its error. Each row is read once: its lists and its
    /// error move out.
    pub(super) fn take(&mut self, i: usize, sample: &mut Sample) -> Result<(), TraceError> {
        let row = match &mut self.rows[i] {
            Ok(row) => row,
            // A cheap stand-in stays where the error was.
            Err(e) => {
                return Err(*std::mem::replace(
                    e,
                    Box::new(TraceError::Empty {
                        path: String::new(),
                    }),
                ))
            }
        };
        build(row, &self.values, sample);
        let lists = row.lists.take();
        let (processes, pods, nvlinks) =
            lists.map_or((None, None, None), |l| (l.processes, l.pods, l.nvlinks));
        sample.processes = processes;
        sample.pods = pods;
        sample.nvlinks = nvlinks;
        Ok(())
    }
}

/// `row`'s time, GPU and metrics (from the batch's `values`) built into `sample`, its lists
/// left as they were.
#[inline(always)]
fn build(row: &Row, values: &[f64], sample: &mut Sample) {
    // Into the sample read last, in this core's cache: only the metrics either carries are
    // written.
    sample.t = row.t;
    sample.gpu = row.gpu;
    sample.clk_reasons = row.clk_reasons;
    let values = &values[row.first as usize..];
    sample.set_metrics(
        row.present,
        &values[..(row.present.count_ones() as usize).min(values.len())],
    );
}

/// A run of whole records (CSV lines, binary blocks), and where it starts: its first line or
/// row (1-based), and its first byte's offset in the file.
pub(super) struct Chunk {
    pub(super) bytes: Vec<u8>,
    pub(super) first: u64,
    pub(super) offset: u64,
}

/// A parser of one chunk into an empty batch, shared by the parsing threads.
pub(super) type ParseChunk = Arc<dyn Fn(&Chunk, &mut Batch) + Send + Sync>;

/// A trace format's input, cut into chunks of whole records in the file's order.
pub(super) trait Chunker {
    /// Threads worth parsing this format on, besides the one that cuts: a format that is
    /// cheap to decode gains nothing from more, and they would take cores from the pipeline.
    const MAX_PARSERS: usize;
    /// The fewest threads an offline run must have for parsing on threads of its own to pay:
    /// below, the caller's thread parses too, and what moves between cores is fewer samples.
    const MIN_THREADS: usize;
    /// The next chunk, read into `spare` (emptied, its memory reused); `Ok(None)` at the end
    /// of the input. After an error, `Ok(None)`.
    fn next_chunk(&mut self, spare: Vec<u8>) -> Result<Option<Chunk>, TraceError>;
    /// What parses a chunk.
    fn parser(&self) -> ParseChunk;

    /// Refills `batch` with the next chunk's rows, cut and parsed on the caller's thread;
    /// false at the end of the input.
    fn next_batch(&mut self, batch: &mut Batch) -> bool {
        let chunk = match self.next_chunk(std::mem::take(&mut batch.spare_bytes)) {
            Ok(None) => return false,
            Ok(Some(chunk)) => Ok(chunk),
            Err(e) => Err(e),
        };
        batch.fill(&self.parser(), chunk);
        true
    }
}

/// The parsing threads and the reorder buffer that gives their batches back in the file's
/// order. One thread reads and cuts; up to `threads - 1` parse (at least one). At most
/// [`CHUNKS_IN_FLIGHT`] chunks exist between the read and the caller: the cutting thread takes
/// a token for each and the caller gives it back when the batch is consumed.
pub(super) struct Parallel {
    results: Receiver<(u64, Batch)>,
    /// A token is a batch read and emptied, to be filled again.
    tokens: SyncSender<Batch>,
    waiting: BTreeMap<u64, Batch>,
    next_seq: u64,
    /// Every thread has ended: what is not in `waiting` will not come.
    done: bool,
}

impl Parallel {
    /// The threads that parse, of `threads` (one more cuts).
    pub(super) fn parsers<C: Chunker>(threads: usize) -> usize {
        threads.saturating_sub(1).clamp(1, C::MAX_PARSERS.max(1))
    }

    /// Starts the threads; a parsing thread runs `work`, once set, on each batch it parses.
    pub(super) fn start<C: Chunker + Send + 'static>(
        mut chunker: C,
        threads: usize,
        work: Arc<OnceLock<ChunkWork>>,
    ) -> Parallel {
        let workers = Self::parsers::<C>(threads);
        let (token_tx, token_rx) = mpsc::sync_channel::<Batch>(CHUNKS_IN_FLIGHT);
        for _ in 0..CHUNKS_IN_FLIGHT {
            // The channel has room for every token.
            let _ = token_tx.try_send(Batch::default());
        }
        type Job = (u64, Result<Chunk, TraceError>, Batch);
        let (job_tx, job_rx) = mpsc::sync_channel::<Job>(CHUNKS_IN_FLIGHT);
        let (result_tx, result_rx) = mpsc::sync_channel::<(u64, Batch)>(CHUNKS_IN_FLIGHT);
        let job_rx = Arc::new(Mutex::new(job_rx));
        let parse = chunker.parser();
        for _ in 0..workers {
            let jobs = Arc::clone(&job_rx);
            let results = result_tx.clone();
            let parse = Arc::clone(&parse);
            let work = Arc::clone(&work);
            std::thread::spawn(move || loop {
                let job = match jobs.lock() {
                    Ok(jobs) => jobs.recv(),
                    Err(_) => return,
                };
                let Ok((seq, chunk, mut batch)) = job else {
                    return;
                };
                batch.fill(&parse, chunk);
                if let Some(work) = work.get() {
                    batch.ahead = Some(work(&BatchRows(&batch)));
                }
                if results.send((seq, batch)).is_err() {
                    return;
                }
            });
        }
        drop(result_tx);
        std::thread::spawn(move || {
            let mut seq = 0;
            loop {
                // The caller gone (the reader dropped), or the end of the input: stop.
                let Ok(mut batch) = token_rx.recv() else {
                    return;
                };
                let chunk = match chunker.next_chunk(std::mem::take(&mut batch.spare_bytes)) {
                    Ok(Some(chunk)) => Ok(chunk),
                    Ok(None) => return,
                    Err(e) => Err(e),
                };
                let last = chunk.is_err();
                if job_tx.send((seq, chunk, batch)).is_err() || last {
                    return;
                }
                seq += 1;
            }
        });
        Parallel {
            results: result_rx,
            tokens: token_tx,
            waiting: BTreeMap::new(),
            next_seq: 0,
            done: false,
        }
    }

    /// The next batch in the file's order, `read` (the one before) going back to be filled
    /// again; `None` once every one was given.
    pub(super) fn next(&mut self, read: Batch) -> Option<Batch> {
        let mut read = Some(read);
        loop {
            if let Some(batch) = self.waiting.remove(&self.next_seq) {
                self.next_seq += 1;
                // The token of the batch consumed before this one: its memory is free again.
                if let Some(read) = read.take() {
                    let _ = self.tokens.try_send(read);
                }
                return Some(batch);
            }
            if self.done {
                return None;
            }
            match self.results.recv() {
                Ok((seq, batch)) => {
                    self.waiting.insert(seq, batch);
                }
                // Every thread has ended: the input is read and every batch is here.
                Err(_) => self.done = true,
            }
        }
    }
}
