//! Traces: the raw samples of a recording, in two formats that hold the same thing. The CSV
//! format (docs/OUTPUT.md) is a header row naming any subset of columns in any order, one sample
//! a row, empty cells for "not sampled at this tick": what people read, edit and generate. The
//! binary format (`.gstrace`) holds every value exactly, in half the bytes, in checksummed
//! blocks decoded in a third of the instructions: for recordings replayed often or long.
//! `record` writes either; every reader (`replay`, `score`, `diagnose --trace`, `run --replay`,
//! `calibrate --from-recording`) takes either; `convert` turns one into the other. A trace
//! taken on a GPU box can be diagnosed anywhere.

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

mod batches;
mod binary;
mod check;
mod csv;
mod error;
mod facts;
mod reader;
mod writer;

pub use batches::{BatchRows, ChunkWork};
pub use binary::BinaryTraceWriter;
pub use error::TraceError;
pub use facts::{FactsError, TraceFacts};
pub use reader::{parse_threads, TraceReader};
pub use writer::TraceWriter;

use std::io::{self, Write};
use std::path::Path;

/// Which of the two formats a trace is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// The readable one (docs/OUTPUT.md): a header row, a sample a row.
    Csv,
    /// `.gstrace`: the same samples, exact, in checksummed blocks decoded in a third of the
    /// instructions a CSV row takes to parse.
    Binary,
}

impl TraceFormat {
    /// The format a file of this name is written in: binary for `.gstrace`, else CSV.
    pub fn for_path(path: &Path) -> TraceFormat {
        if path.extension().is_some_and(|e| e == "gstrace") {
            TraceFormat::Binary
        } else {
            TraceFormat::Csv
        }
    }

    /// A writer of this format over `out`, its header written.
    pub fn writer<'a, W: Write + 'a>(self, out: W) -> io::Result<Box<dyn SampleWriter + 'a>> {
        Ok(match self {
            TraceFormat::Csv => Box::new(TraceWriter::new(out)?),
            TraceFormat::Binary => Box::new(BinaryTraceWriter::new(out)?),
        })
    }
}

/// Where samples are written as a trace, in either format: `record` and `convert` write through
/// it without caring which.
pub trait SampleWriter {
    /// Writes one sample.
    fn write(&mut self, sample: &crate::sample::Sample) -> io::Result<()>;
    /// Makes every sample written so far durable in the output: a recording flushes every
    /// tick, so that one stopped at any moment keeps every tick it flushed.
    fn flush(&mut self) -> io::Result<()>;
}
