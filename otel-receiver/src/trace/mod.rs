//! The CSV trace format (docs/OUTPUT.md): a header row naming any subset of columns in any order,
//! one sample a row, empty cells for "not sampled at this tick". `record` writes it, `replay`
//! reads it, so a trace taken on a GPU box can be diagnosed anywhere.

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

mod facts;
mod reader;
mod writer;

pub use facts::{FactsError, TraceFacts};
pub use reader::{parse_threads, TraceError, TraceReader};
pub use writer::TraceWriter;
