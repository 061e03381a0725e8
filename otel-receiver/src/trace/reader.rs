//! A trace read in either format, told apart by its first bytes: [`TraceReader`] hands out its
//! samples in the file's order, parsed on the caller's thread or, for a regular file, on
//! threads of their own while the caller's runs the pipeline.

use std::any::Any;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use super::batches::{Batch, ChunkWork, Chunker, Parallel};
use super::binary::{self, BinaryChunks};
use super::csv::CsvChunks;
use super::error::TraceError;
use super::TraceFormat;
use crate::sample::Sample;

/// A regular file smaller than this is parsed on the caller's thread: the threads would cost
/// more to start than they save.
const PARALLEL_MIN_BYTES: u64 = 1 << 20;

/// Streams [`Sample`]s out of a trace, CSV or binary, in the file's order: memory stays flat
/// however long the trace, and however long a line (at most `MAX_LINE_BYTES`).
pub struct TraceReader<R: Read> {
    path: String,
    format: TraceFormat,
    ignored: Vec<String>,
    source: Source<R>,
    /// The batch being handed out, and the next of its rows.
    batch: Batch,
    next_row: usize,
    /// Nothing follows the batch being handed out (the input failed).
    fatal: bool,
    /// The line (CSV) or row (binary) of the sample read last (0 before the first).
    line: u64,
    /// The sample read last, built from its batch's packed row.
    sample: Sample,
    /// What the parsing threads do with each batch besides parsing it, once set.
    work: Arc<OnceLock<ChunkWork>>,
    /// How many threads parse, 0 where the caller's thread does.
    parsers: usize,
}

enum Source<R> {
    Csv(CsvChunks<R>),
    Binary(BinaryChunks<R>),
    Parallel(Parallel),
    /// Parallel, its threads not started yet.
    Deferred(Box<dyn FnOnce() -> Parallel + Send>),
    Done,
}

impl TraceReader<BufReader<File>> {
    /// Opens a trace file. A regular file of more than a MiB is parsed on
    /// `std::thread::available_parallelism()` threads (at most 8; `GPUSLACK_TRACE_THREADS=N`
    /// sets the number, 1 for none) while the caller's thread runs the pipeline.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|source| TraceError::Open {
            path: path.display().to_string(),
            source,
        })?;
        let size = file
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .map_or(0, |m| m.len());
        let reader = TraceReader::new(
            path.display().to_string(),
            BufReader::with_capacity(64 * 1024, file),
        )?;
        let threads = parse_threads();
        if size >= PARALLEL_MIN_BYTES {
            Ok(reader.parallel(threads))
        } else {
            Ok(reader)
        }
    }
}

/// Threads an offline run may use: the machine's cores (as this process may use them, at most
/// 8), or `GPUSLACK_TRACE_THREADS`. The reader parses on them; `replay` also diagnoses and
/// formats its output on threads of their own when there is more than one.
pub fn parse_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    std::env::var("GPUSLACK_TRACE_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(cores)
        .clamp(1, 8)
}

/// Reads what it can of the first `N` bytes: fewer only where the input is shorter.
fn read_prefix<const N: usize>(input: &mut impl Read) -> std::io::Result<([u8; N], usize)> {
    let mut buf = [0; N];
    let mut n = 0;
    while n < N {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((buf, n))
}

impl<R: Read> TraceReader<R> {
    /// Reads a trace's header from `input`, in either format. `path` is only used to name the
    /// source in errors (it can be `<stdin>` or `<bundled …>`).
    pub fn new(path: String, mut input: R) -> Result<Self, TraceError> {
        let (prefix, n) = read_prefix::<{ binary::MAGIC.len() }>(&mut input).map_err(|source| {
            TraceError::Read {
                path: path.clone(),
                line: 1,
                source,
            }
        })?;
        let (format, source, ignored, batch) = if prefix[..n] == binary::MAGIC {
            let opened = BinaryChunks::open(path.clone(), input)?;
            let chunks = opened.chunks;
            (
                TraceFormat::Binary,
                Source::Binary(chunks),
                opened.ignored,
                Batch::default(),
            )
        } else {
            let opened = CsvChunks::open(path.clone(), &prefix[..n], input)?;
            (
                TraceFormat::Csv,
                Source::Csv(opened.chunks),
                opened.ignored,
                opened.first,
            )
        };
        Ok(TraceReader {
            path,
            format,
            ignored,
            source,
            fatal: batch.fatal,
            batch,
            next_row: 0,
            line: 0,
            sample: Sample::new(0.0, 0),
            work: Arc::default(),
            parsers: 0,
        })
    }

    /// The trace's name in errors.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The trace's format.
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// The header's columns that are read as nothing (each quoted, as the warning names them),
    /// leaving out the known extras of earlier recorders.
    pub fn ignored_columns(&self) -> &[String] {
        &self.ignored
    }

    /// Where the sample read last is: the line it starts on in a CSV trace (the header is line
    /// 1), its row in a binary one (the first is row 1); 0 before the first.
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The sample read last, as a person finds it: `trace.csv:12` or `trace.gstrace: row 12`.
    pub fn place(&self) -> String {
        match self.format {
            TraceFormat::Csv => format!("{}:{}", self.path, self.line),
            TraceFormat::Binary => format!("{}: row {}", self.path, self.line),
        }
    }

    /// The next batch of rows in place of the one read, from the caller's thread or the
    /// parsing threads; false at the end of the input.
    fn refill(&mut self) -> bool {
        if matches!(self.source, Source::Deferred(_)) {
            if let Source::Deferred(start) = std::mem::replace(&mut self.source, Source::Done) {
                self.source = Source::Parallel(start());
            }
        }
        match &mut self.source {
            Source::Csv(chunks) => chunks.next_batch(&mut self.batch),
            Source::Binary(chunks) => chunks.next_batch(&mut self.batch),
            Source::Parallel(parallel) => {
                let read = std::mem::take(&mut self.batch);
                parallel.next(read).map(|next| self.batch = next).is_some()
            }
            Source::Deferred(_) | Source::Done => false,
        }
    }

    /// How many threads of their own parse the rows; 0 where the caller's thread does.
    pub fn parsing_threads(&self) -> usize {
        self.parsers
    }

    /// Has the parsing threads run `work` on each batch they parse from now on, its result
    /// handed out with the batch by [`TraceReader::next_batch`]. False, and `work` never runs,
    /// where the trace is not parsed on threads of its own, or work was set before.
    pub fn work_ahead(&mut self, work: ChunkWork) -> bool {
        self.parsers > 0 && self.work.set(work).is_ok()
    }

    /// Moves to the next batch of rows, to be read with [`TraceReader::row`]: `Some` with what
    /// [`TraceReader::work_ahead`]'s work made of it, where it ran; `None` at the end of the
    /// trace. The rest of the batch before is passed over.
    pub fn next_batch(&mut self) -> Option<Option<Box<dyn Any + Send>>> {
        // A batch none of whose rows was read yet (a CSV's first, parsed with its header) is
        // the next one.
        let unread = self.next_row == 0 && self.batch.len() > 0;
        if !unread {
            if self.fatal {
                self.source = Source::Done;
            }
            if !self.refill() {
                self.next_row = self.batch.len();
                return None;
            }
            self.fatal = self.batch.fatal;
        }
        // Marked read: the next call moves on.
        self.next_row = self.batch.len().max(1);
        Some(self.batch.ahead.take())
    }

    /// The rows of the batch [`TraceReader::next_batch`] moved to.
    pub fn batch_len(&self) -> usize {
        self.batch.len()
    }

    /// Row `i` of the batch [`TraceReader::next_batch`] moved to, as [`TraceReader::next_sample`]
    /// gives it; [`TraceReader::line`] and [`TraceReader::place`] then name it. Each row is read
    /// once.
    pub fn row(&mut self, i: usize) -> Result<&Sample, TraceError> {
        self.line = self.batch.line(i);
        self.batch.take(i, &mut self.sample)?;
        Ok(&self.sample)
    }

    /// Names row `i` of the batch [`TraceReader::next_batch`] moved to as
    /// [`TraceReader::place`] does, without reading it.
    pub fn place_of(&mut self, i: usize) -> String {
        self.line = self.batch.line(i);
        self.place()
    }

    /// The next sample, lent rather than moved (a sample is some 500 bytes): what
    /// [`crate::pipeline::replay`] reads, the pipeline taking samples by reference. `None` at
    /// the end of the trace; after an error that ends the input, `None` next.
    pub fn next_sample(&mut self) -> Option<Result<&Sample, TraceError>> {
        while self.next_row >= self.batch.len() {
            if self.fatal {
                self.source = Source::Done;
            }
            if !self.refill() {
                return None;
            }
            self.fatal = self.batch.fatal;
            self.next_row = 0;
        }
        let i = self.next_row;
        self.next_row += 1;
        self.line = self.batch.line(i);
        match self.batch.take(i, &mut self.sample) {
            Ok(()) => Some(Ok(&self.sample)),
            Err(e) => Some(Err(e)),
        }
    }
}

impl<R: Read + Send + 'static> TraceReader<R> {
    /// Moves the reading and parsing onto threads (one reads and cuts the input into chunks,
    /// the others parse them) where `threads` are enough for the format to gain from it;
    /// batches come back in order through [`Parallel`].
    /// The threads start at the first read, so that work set before it
    /// ([`TraceReader::work_ahead`]) runs on every batch.
    pub(crate) fn parallel(mut self, threads: usize) -> Self {
        let work = Arc::clone(&self.work);
        self.source = match std::mem::replace(&mut self.source, Source::Done) {
            Source::Csv(chunks) if threads >= CsvChunks::<R>::MIN_THREADS => {
                self.parsers = Parallel::parsers::<CsvChunks<R>>(threads);
                Source::Deferred(Box::new(move || Parallel::start(chunks, threads, work)))
            }
            Source::Binary(chunks) if threads >= BinaryChunks::<R>::MIN_THREADS => {
                self.parsers = Parallel::parsers::<BinaryChunks<R>>(threads);
                Source::Deferred(Box::new(move || Parallel::start(chunks, threads, work)))
            }
            other => other,
        };
        self
    }

    /// Whether the rows are parsed on threads of their own.
    #[cfg(test)]
    pub(super) fn is_parallel(&self) -> bool {
        self.parsers > 0
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Sample, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_sample().map(|row| row.cloned())
    }
}
