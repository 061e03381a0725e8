//! Why a trace could not be read, in either format: each error names the file and, for a row,
//! where it is (a CSV trace's line, a binary trace's row and block), so a user can go there.

/// Why a trace could not be read. Every variant names the file; those about a CSV row name its
/// line (1-based, counting the header as line 1) and the column, those about a binary trace's
/// row its row (1-based) and the byte its block starts at.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: cannot open: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: the file is empty: a trace needs a header row and at least one sample")]
    Empty { path: String },
    #[error("{path}: the header has no `t` column (unix seconds): found {found}")]
    NoTimeColumn { path: String, found: String },
    #[error("{path}: the header names column `{column}` twice")]
    DuplicateColumn { path: String, column: String },
    /// A header of more columns than any trace has (`csv::MAX_COLUMNS`).
    #[error("{path}: the header has {found} columns, more than the {limit} a trace may have: not a trace's header")]
    TooManyColumns {
        path: String,
        found: usize,
        limit: usize,
    },
    #[error("{path}:{line}: cannot read: {source}")]
    Read {
        path: String,
        line: u64,
        source: std::io::Error,
    },
    /// A row with more or fewer cells than the header has columns.
    #[error("{path}:{line}: the row has {found} cells but the header has {expected} columns")]
    Ragged {
        path: String,
        line: u64,
        found: usize,
        expected: usize,
    },
    /// A line longer than any trace writes: `/dev/zero`, a crash-truncated file full of NULs,
    /// a binary file. Refused before it is buffered whole, which would take all memory.
    #[error("{path}:{line}: {}the line is longer than {} MiB without a line break: not a trace (a binary file, or a crash-truncated one full of NULs?)", column.as_deref().map(|c| format!("column `{c}`: ")).unwrap_or_default(), limit_bytes >> 20)]
    LineTooLong {
        path: String,
        line: u64,
        /// The column the limit was passed in, when the header names it.
        column: Option<String>,
        limit_bytes: usize,
    },
    #[error("{path}:{line}: column `{column}`: {problem}: {value:?}")]
    BadValue {
        path: String,
        line: u64,
        column: String,
        value: String,
        problem: &'static str,
    },
    /// A binary trace's preamble: a version this build does not read, a damaged header.
    #[error("{path}: {problem}")]
    BinaryHeader { path: String, problem: String },
    /// A binary trace's block that cannot be read: cut short, damaged on disk or in transfer.
    /// `row` is the first row the block would have held: rows before it were read.
    #[error("{path}: block at byte {offset} (from row {row}): {problem}")]
    Corrupt {
        path: String,
        offset: u64,
        row: u64,
        problem: String,
    },
    /// A value in a binary trace that the same rules refuse in a CSV cell.
    #[error("{path}: row {row} (block at byte {offset}): column `{column}`: {problem}: {value}")]
    BadRow {
        path: String,
        row: u64,
        offset: u64,
        column: String,
        value: String,
        problem: &'static str,
    },
}

impl TraceError {
    /// Where the error is, as [`crate::trace::TraceReader::line`] says it: a CSV trace's line,
    /// a binary trace's row; 0 for an error about the whole file.
    pub fn line(&self) -> u64 {
        match self {
            TraceError::Read { line, .. }
            | TraceError::Ragged { line, .. }
            | TraceError::LineTooLong { line, .. }
            | TraceError::BadValue { line, .. } => *line,
            TraceError::Corrupt { row, .. } | TraceError::BadRow { row, .. } => *row,
            TraceError::Open { .. }
            | TraceError::Empty { .. }
            | TraceError::NoTimeColumn { .. }
            | TraceError::DuplicateColumn { .. }
            | TraceError::TooManyColumns { .. }
            | TraceError::BinaryHeader { .. } => 0,
        }
    }
}

/// At most a few dozen characters of a bad cell: a 50 MB line must not become the error message.
pub(super) fn quote(value: &[u8]) -> String {
    const MAX_CHARS: usize = 40;
    // A cell cut at 160 bytes still has its first 40 characters, and the cut costs nothing
    // however long the cell.
    let head = String::from_utf8_lossy(&value[..value.len().min(4 * MAX_CHARS)]);
    if value.len() <= 4 * MAX_CHARS && head.chars().count() <= MAX_CHARS {
        return head.into_owned();
    }
    let head: String = head.chars().take(MAX_CHARS).collect();
    format!("{head}… ({} bytes)", value.len())
}
