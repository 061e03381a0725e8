//! The CSV trace format, read: bytes to [`Sample`]s, as fast as the pipeline can take them.
//!
//! The file is cut into chunks of whole records by a scan that only looks for line ends,
//! quotes and comment marks (`memchr`, many bytes a step); each chunk is parsed straight from
//! its bytes, with no row copied, trimmed into a string or checked as UTF-8 first: only the
//! cells that must be text (JSON lists, an error's quote) are decoded. Chunks may be parsed on
//! several threads ([`super::batches`]).
//!
//! Lines may end in `\n`, `\r\n` or a lone `\r`; rows are named by the line they start on
//! whichever it is. Fields are trimmed of ASCII whitespace; a field that starts with `"` is
//! quoted (`""` inside is one quote) and may span lines; a line that starts with `#` is a
//! comment; blank lines are skipped. Unknown columns are ignored, as the format says, with one
//! warning naming them: a typo (`powr_mw`) must not pass for a column that was never sampled.

use std::io::{self, Read};
use std::sync::Arc;

use super::batches::{Batch, Chunk, Chunker, ParseChunk};
use super::check;
use super::error::{quote, TraceError};
use crate::sample::{Metric, Sample};

#[derive(Debug, Clone, Copy)]
enum Column {
    Time,
    Gpu,
    ClkReasons,
    Processes,
    Pods,
    Nvlinks,
    /// A metric, and whether it is a percentage (bounded): looked up once, not per cell.
    Metric(Metric, bool),
    Ignored,
}

/// The longest line a trace may have. A row of every column `record` writes is under 2 KiB; a
/// `processes` cell of a few hundred processes some 100 KiB. Past this the input is not a
/// trace, and buffering it whole looking for the line's end would take all memory.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The most columns a trace's header may name. `record` writes about 60; a trace a user
/// assembled from another tool's fields may hold a few hundred. Past this the header is not a
/// trace's, and is refused before its names are looked up, in time linear in its length.
pub const MAX_COLUMNS: usize = 1 << 16;

/// How many of a header's names an error or the unknown-columns warning lists before saying
/// how many more there are.
const NAMES_SHOWN: usize = 20;

/// Columns that earlier recorders wrote and that are ignored without a warning: `call_us`, the
/// time one sampling call took, in the bundled H200 recording.
const KNOWN_EXTRAS: [&str; 1] = ["call_us"];

/// Bytes of whole records per chunk: large enough that the per-chunk costs (a channel send, an
/// allocation) vanish per row, small enough that the chunks in flight stay a few MiB.
const CHUNK_BYTES: usize = 128 * 1024;

/// Bytes asked of the input per read.
const READ_BYTES: usize = 128 * 1024;

/// What every chunk's parser needs to know of the trace: where errors point, the columns.
#[derive(Debug)]
struct Layout {
    path: String,
    /// The header's names, to say which column an over-long line was in.
    names: Vec<String>,
    columns: Vec<Column>,
    /// How many of the columns are metrics: the values a row keeps.
    metrics: usize,
}

/// A CSV trace's rows, cut into chunks of whole records ([`Chunker`]).
pub(super) struct CsvChunks<R> {
    splitter: Splitter<R>,
    layout: Arc<Layout>,
}

/// A CSV trace whose header was read: its rows, the header's chunk's rows parsed already, and
/// the columns it ignores (each quoted, as the warning names them, leaving out the known extras
/// of earlier recorders).
pub(super) struct OpenedCsv<R> {
    pub(super) chunks: CsvChunks<R>,
    pub(super) first: Batch,
    pub(super) ignored: Vec<String>,
}

impl<R: Read> CsvChunks<R> {
    /// Reads the header (the first record, after any blank or comment lines). `prefix` is the
    /// input's first bytes, read already to tell the format; `path` names the trace in errors.
    pub(super) fn open(path: String, prefix: &[u8], input: R) -> Result<OpenedCsv<R>, TraceError> {
        let mut splitter = Splitter::new(input, prefix);
        let layout = Layout {
            path,
            names: Vec::new(),
            columns: Vec::new(),
            metrics: 0,
        };
        // The header: the first record, after any blank or comment lines.
        let (header, first) = loop {
            let Some(chunk) = splitter.next_chunk(&layout)? else {
                return Err(TraceError::Empty { path: layout.path });
            };
            if let Some((names, offset, line)) = read_header(&chunk) {
                break (names, (chunk, offset, line));
            }
        };
        if header.is_empty() || (header.len() == 1 && header[0].is_empty()) {
            return Err(TraceError::Empty { path: layout.path });
        }
        let path = layout.path;
        if header.len() > MAX_COLUMNS {
            return Err(TraceError::TooManyColumns {
                path,
                found: header.len(),
                limit: MAX_COLUMNS,
            });
        }
        let mut columns = Vec::with_capacity(header.len());
        // Each name looked up once: comparing each with every earlier one was quadratic
        // (100,000 columns took 9.8 s).
        let mut seen = std::collections::HashSet::with_capacity(header.len());
        for name in &header {
            if !name.is_empty() && !seen.insert(name.as_str()) {
                return Err(TraceError::DuplicateColumn {
                    column: quote(name.as_bytes()),
                    path,
                });
            }
            columns.push(match name.as_str() {
                "t" => Column::Time,
                "gpu" => Column::Gpu,
                "clk_reasons" => Column::ClkReasons,
                "processes" => Column::Processes,
                "pods" => Column::Pods,
                "nvlinks" => Column::Nvlinks,
                other => Metric::from_column(other)
                    .map_or(Column::Ignored, |m| Column::Metric(m, m.is_percent())),
            });
        }
        if !columns.iter().any(|c| matches!(c, Column::Time)) {
            return Err(TraceError::NoTimeColumn {
                path,
                found: names_shown(&header),
            });
        }
        let ignored = check::unknown_columns(
            &path,
            header
                .iter()
                .zip(&columns)
                .filter(|(name, column)| {
                    matches!(column, Column::Ignored) && !KNOWN_EXTRAS.contains(&name.as_str())
                })
                .map(|(name, _)| name.as_str()),
        );
        let metrics = columns
            .iter()
            .filter(|c| matches!(c, Column::Metric(..)))
            .count();
        let layout = Arc::new(Layout {
            path,
            names: header,
            columns,
            metrics,
        });
        // The rest of the header's chunk is rows.
        let (chunk, offset, line) = first;
        let mut batch = Batch::default();
        parse_chunk(&layout, &chunk.bytes[offset..], line, &mut batch);
        Ok(OpenedCsv {
            chunks: CsvChunks { splitter, layout },
            first: batch,
            ignored,
        })
    }
}

impl<R: Read> Chunker for CsvChunks<R> {
    /// Parsing is most of a CSV trace's cost: every core may take a share.
    const MAX_PARSERS: usize = usize::MAX;
    const MIN_THREADS: usize = 2;

    fn next_chunk(&mut self, spare: Vec<u8>) -> Result<Option<Chunk>, TraceError> {
        if spare.capacity() > self.splitter.spare.capacity() {
            self.splitter.spare = spare;
        }
        self.splitter.next_chunk(&self.layout)
    }

    fn parser(&self) -> ParseChunk {
        let layout = Arc::clone(&self.layout);
        Arc::new(move |chunk: &Chunk, batch: &mut Batch| {
            parse_chunk(&layout, &chunk.bytes, chunk.first, batch)
        })
    }
}

/// Reads the input and cuts it into chunks of whole records, checking every line's length on
/// the way. Only line ends, quotes at the start of a field and `#` at the start of a record
/// are looked at.
struct Splitter<R> {
    input: R,
    buf: Vec<u8>,
    /// Bytes of `buf` already known to be whole records (or skipped lines).
    scanned: usize,
    /// Lines ended before `buf[0]`.
    lines_before: u64,
    /// Lines ended in `buf[..scanned]`.
    lines_scanned: u64,
    eof: bool,
    failed: bool,
    /// A failure found after whole records: given once those records are out.
    pending: Option<Failure>,
    cells: Cells,
    /// A chunk's bytes, read already, to cut the next chunk into.
    spare: Vec<u8>,
}

impl<R: Read> Splitter<R> {
    /// `prefix`: the input's first bytes, already read (to tell the format).
    fn new(input: R, prefix: &[u8]) -> Self {
        let mut buf = Vec::with_capacity(CHUNK_BYTES + READ_BYTES);
        buf.extend_from_slice(prefix);
        Splitter {
            input,
            buf,
            scanned: 0,
            lines_before: 0,
            lines_scanned: 0,
            eof: false,
            failed: false,
            pending: None,
            cells: Cells::default(),
            spare: Vec::new(),
        }
    }

    fn next_chunk(&mut self, layout: &Layout) -> Result<Option<Chunk>, TraceError> {
        if let Some(failure) = self.pending.take() {
            return Err(failure.error(layout));
        }
        if self.failed {
            return Ok(None);
        }
        loop {
            // Records, as far as the bytes read go.
            loop {
                match scan(&self.buf, self.scanned, self.eof, &mut self.cells, false) {
                    Scan::End => break,
                    Scan::Incomplete { line_start, lines } => {
                        if self.buf.len() - line_start > MAX_LINE_BYTES {
                            let line =
                                self.lines_before + self.lines_scanned + u64::from(lines) + 1;
                            let failure = self.too_long(line, line_start);
                            return self.fail_after_records(failure, layout);
                        }
                        break;
                    }
                    Scan::Line {
                        next,
                        lines,
                        longest,
                        ..
                    } => {
                        if longest.len > MAX_LINE_BYTES {
                            let line = self.lines_before
                                + self.lines_scanned
                                + u64::from(longest.line)
                                + 1;
                            let failure = self.too_long(line, longest.start);
                            return self.fail_after_records(failure, layout);
                        }
                        self.scanned = next;
                        self.lines_scanned += u64::from(lines);
                    }
                }
            }
            if self.scanned > 0 && (self.scanned >= CHUNK_BYTES || self.eof) {
                return Ok(Some(self.take_chunk()));
            }
            if self.eof {
                return Ok(None);
            }
            let len = self.buf.len();
            self.buf.resize(len + READ_BYTES, 0);
            let read = loop {
                match self.input.read(&mut self.buf[len..]) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
            match read {
                Ok(n) => {
                    self.buf.truncate(len + n);
                    self.eof = n == 0;
                }
                Err(source) => {
                    self.buf.truncate(len);
                    self.failed = true;
                    let failure = Failure::Read {
                        line: self.lines_before + self.lines_scanned + 1,
                        source,
                    };
                    return self.fail_after_records(failure, layout);
                }
            }
        }
    }

    /// The records scanned so far, out of the buffer.
    fn take_chunk(&mut self) -> Chunk {
        let mut rest = std::mem::take(&mut self.spare);
        rest.clear();
        rest.reserve(CHUNK_BYTES + READ_BYTES);
        rest.extend_from_slice(&self.buf[self.scanned..]);
        self.buf.truncate(self.scanned);
        let bytes = std::mem::replace(&mut self.buf, rest);
        let first = self.lines_before + 1;
        self.lines_before += self.lines_scanned;
        self.lines_scanned = 0;
        self.scanned = 0;
        Chunk {
            bytes,
            first,
            offset: 0,
        }
    }

    /// The whole records before a failure first, then the failure.
    fn fail_after_records(
        &mut self,
        failure: Failure,
        layout: &Layout,
    ) -> Result<Option<Chunk>, TraceError> {
        if self.scanned == 0 {
            return Err(failure.error(layout));
        }
        self.pending = Some(failure);
        Ok(Some(self.take_chunk()))
    }

    /// A line past the limit, with the column the limit was passed in (commas outside quotes
    /// before it, counted from the line's start).
    fn too_long(&mut self, line: u64, start: usize) -> Failure {
        self.failed = true;
        let end = (start + MAX_LINE_BYTES).min(self.buf.len());
        let mut quoted = false;
        let mut column = 0;
        let text = &self.buf[start..end];
        if text.first() != Some(&b'#') {
            for &b in text {
                match b {
                    b'"' => quoted = !quoted,
                    b',' if !quoted => column += 1,
                    _ => {}
                }
            }
        }
        Failure::TooLong { line, column }
    }
}

/// Why the input stopped, before the header's names are known to name the column.
enum Failure {
    TooLong { line: u64, column: usize },
    Read { line: u64, source: io::Error },
}

impl Failure {
    fn error(self, layout: &Layout) -> TraceError {
        match self {
            Failure::TooLong { line, column } => TraceError::LineTooLong {
                path: layout.path.clone(),
                line,
                // The header's own line: no names to give yet.
                column: layout.names.get(column).map(|name| quote(name.as_bytes())),
                limit_bytes: MAX_LINE_BYTES,
            },
            Failure::Read { line, source } => TraceError::Read {
                path: layout.path.clone(),
                line,
                source,
            },
        }
    }
}

/// A physical line of a record, by where it starts (in the buffer) and which it is (0-based).
#[derive(Debug, Clone, Copy, Default)]
struct LineSpan {
    start: usize,
    line: u32,
    len: usize,
}

enum Scan {
    /// No byte left.
    End,
    /// The record at the position does not end before the bytes do: more must be read.
    Incomplete { line_start: usize, lines: u32 },
    /// A record, a blank line or a comment, up to `next` (its line end included), spanning
    /// `lines` line ends; `longest` is its longest physical line. A record without a quote is
    /// one line, whose text ends at `end`; one with (`quoted`) left its cells in [`Cells`].
    Line {
        next: usize,
        lines: u32,
        longest: LineSpan,
        end: usize,
        quoted: bool,
    },
}

/// The cells of a record that holds a quote, unescaped; ranges into `text`.
#[derive(Debug, Default)]
struct Cells {
    text: Vec<u8>,
    ranges: Vec<(u32, u32)>,
}

/// Where the line end at `at` (`\n`, `\r\n` or `\r`) ends; `None` when a `\r` is the last byte
/// read and the input may go on (a `\n` after it would belong to the same line end).
fn line_end(b: &[u8], at: usize, eof: bool) -> Option<usize> {
    if b[at] == b'\r' {
        match b.get(at + 1) {
            Some(b'\n') => Some(at + 2),
            Some(_) => Some(at + 1),
            None if eof => Some(at + 1),
            None => None,
        }
    } else {
        Some(at + 1)
    }
}

/// Finds the end of the record (or skipped line) at `pos`. With `collect`, a record holding a
/// quote leaves its cells in `cells` (records without are split by the caller, faster).
fn scan(b: &[u8], pos: usize, eof: bool, cells: &mut Cells, collect: bool) -> Scan {
    let Some(&first) = b.get(pos) else {
        return Scan::End;
    };
    let incomplete = Scan::Incomplete {
        line_start: pos,
        lines: 0,
    };
    let rest = &b[pos..];
    let eol = memchr::memchr2(b'\n', b'\r', rest).map(|i| pos + i);
    let simple = first == b'#' || memchr::memchr(b'"', &b[pos..eol.unwrap_or(b.len())]).is_none();
    if simple {
        // A comment, a blank line or a record without quotes: one physical line.
        let (next, end) = match eol {
            Some(at) => match line_end(b, at, eof) {
                Some(next) => (next, at),
                None => return incomplete,
            },
            None if eof => (b.len(), b.len()),
            None => return incomplete,
        };
        return Scan::Line {
            next,
            lines: u32::from(eol.is_some()),
            longest: LineSpan {
                start: pos,
                line: 0,
                len: end - pos,
            },
            end,
            quoted: false,
        };
    }
    scan_quoted(b, pos, eof, cells, collect)
}

/// A record with a quote somewhere: field by field, as the CSV format has it. A field that
/// starts with `"` runs to the next lone `"` (`""` is a quote in it), across line ends; what
/// follows up to the comma is part of it. A `"` elsewhere is an ordinary byte.
fn scan_quoted(b: &[u8], pos: usize, eof: bool, cells: &mut Cells, collect: bool) -> Scan {
    if collect {
        cells.text.clear();
        cells.ranges.clear();
    }
    let mut p = pos;
    let mut lines = 0u32;
    let mut line_start = pos;
    let mut longest = LineSpan::default();
    let note = |start: usize, end: usize, line: u32, longest: &mut LineSpan| {
        if end - start > longest.len {
            *longest = LineSpan {
                start,
                line,
                len: end - start,
            };
        }
    };
    loop {
        let cell_start = cells.text.len();
        if b.get(p) == Some(&b'"') {
            p += 1;
            loop {
                let Some(i) = memchr::memchr3(b'"', b'\n', b'\r', &b[p..]) else {
                    if !eof {
                        return Scan::Incomplete { line_start, lines };
                    }
                    // An unclosed quote runs to the end of the input.
                    if collect {
                        cells.text.extend_from_slice(&b[p..]);
                    }
                    p = b.len();
                    break;
                };
                let q = p + i;
                if collect {
                    cells.text.extend_from_slice(&b[p..q]);
                }
                match b[q] {
                    b'"' => match b.get(q + 1) {
                        Some(b'"') => {
                            if collect {
                                cells.text.push(b'"');
                            }
                            p = q + 2;
                        }
                        None if !eof => return Scan::Incomplete { line_start, lines },
                        _ => {
                            p = q + 1;
                            break;
                        }
                    },
                    _ => {
                        let Some(next) = line_end(b, q, eof) else {
                            return Scan::Incomplete { line_start, lines };
                        };
                        if collect {
                            cells.text.push(b'\n');
                        }
                        note(line_start, q, lines, &mut longest);
                        lines += 1;
                        line_start = next;
                        p = next;
                    }
                }
            }
        }
        // The unquoted part of the field, up to a comma or the line's end.
        let found = memchr::memchr3(b',', b'\n', b'\r', &b[p.min(b.len())..]).map(|i| p + i);
        let end = match found {
            Some(at) => at,
            None if eof => b.len(),
            None => return Scan::Incomplete { line_start, lines },
        };
        if collect {
            cells.text.extend_from_slice(&b[p.min(end)..end]);
            cells
                .ranges
                .push((cell_start as u32, cells.text.len() as u32));
        }
        match found {
            Some(at) if b[at] == b',' => p = at + 1,
            Some(at) => {
                let Some(next) = line_end(b, at, eof) else {
                    return Scan::Incomplete { line_start, lines };
                };
                note(line_start, at, lines, &mut longest);
                return Scan::Line {
                    next,
                    lines: lines + 1,
                    longest,
                    end: at,
                    quoted: true,
                };
            }
            None => {
                note(line_start, b.len(), lines, &mut longest);
                return Scan::Line {
                    next: b.len(),
                    lines,
                    longest,
                    end: b.len(),
                    quoted: true,
                };
            }
        }
    }
}

/// A header's first names, each quoted short, and how many more there are: an error about a
/// header of 100,000 names stays one short line.
fn names_shown(names: &[String]) -> String {
    let mut shown: Vec<String> = names
        .iter()
        .take(NAMES_SHOWN)
        .map(|n| quote(n.as_bytes()))
        .collect();
    if names.len() > NAMES_SHOWN {
        shown.push(format!("… ({} columns)", names.len()));
    }
    shown.join(",")
}

/// Trims ASCII whitespace, as every cell and header name is.
fn trim(cell: &[u8]) -> &[u8] {
    cell.trim_ascii()
}

/// The header in a chunk: its names, where the rows start, and the line they start on; `None`
/// when the chunk holds only blank lines and comments.
fn read_header(chunk: &Chunk) -> Option<(Vec<String>, usize, u64)> {
    let b = &chunk.bytes;
    let mut pos = 0;
    let mut line = chunk.first;
    let mut cells = Cells::default();
    loop {
        let Scan::Line {
            next,
            lines,
            end,
            quoted,
            ..
        } = scan(b, pos, true, &mut cells, true)
        else {
            return None;
        };
        let record = &b[pos..next];
        let skipped = matches!(record.first(), Some(b'#' | b'\n' | b'\r'));
        if !skipped {
            let names = if !quoted {
                b[pos..end]
                    .split(|&c| c == b',')
                    .map(|name| String::from_utf8_lossy(trim(name)).into_owned())
                    .collect()
            } else {
                cells
                    .ranges
                    .iter()
                    .map(|&(a, z)| {
                        String::from_utf8_lossy(trim(&cells.text[a as usize..z as usize]))
                            .into_owned()
                    })
                    .collect()
            };
            return Some((names, next, line + u64::from(lines)));
        }
        pos = next;
        line += u64::from(lines);
    }
}

/// Parses a chunk of whole records whose first byte is on `first_line`.
fn parse_chunk(layout: &Layout, b: &[u8], first_line: u64, batch: &mut Batch) {
    // Room for the rows the bytes can hold (each has a comma per column) of the values a row
    // keeps (its metric columns): rows × declared columns asked 3.3 GB of a 4 MB file of
    // 200,000 columns.
    let rows = b.len() / layout.columns.len().max(96);
    batch.reserve(rows, layout.metrics);
    let mut cells = Cells::default();
    let mut commas: Vec<(u32, u32)> = Vec::with_capacity(layout.columns.len() + 1);
    let mut pos = 0;
    let mut line = first_line;
    while let Scan::Line {
        next,
        lines,
        end,
        quoted,
        ..
    } = scan(b, pos, true, &mut cells, true)
    {
        let start = pos;
        let row_line = line;
        line += u64::from(lines);
        pos = next;
        match b.get(start) {
            Some(b'#' | b'\n' | b'\r') | None => continue,
            _ => {}
        }
        if !quoted {
            if let Some(mut sample) = plain_row(layout, &b[start..end]) {
                batch.push_sample(row_line, &mut sample);
                continue;
            }
        }
        let (text, ranges): (&[u8], &[(u32, u32)]) = if quoted {
            (&cells.text, &cells.ranges)
        } else {
            split_commas(&b[start..end], &mut commas);
            (&b[start..end], &commas)
        };
        if ranges.len() != layout.columns.len() {
            // Named by the row's last line, as a ragged row always was.
            let last = line - u64::from(lines > 0);
            let ragged = TraceError::Ragged {
                path: layout.path.clone(),
                line: last,
                found: ranges.len(),
                expected: layout.columns.len(),
            };
            batch.push(last, Err(ragged));
            continue;
        }
        batch.push(row_line, parse_row(layout, text, ranges, row_line));
    }
}

/// A row without quotes, read in one pass over its bytes: a plain number (what `record`
/// writes) is parsed as its cell is found, with no split, trim or second look; any other cell
/// (spaces, `nan`, an exponent, 17 significant digits the exact check does not settle) is cut
/// at its comma and read as [`parse_row`] reads it. `None` for a row with an error (ragged, a
/// bad or out-of-range value) or a JSON list: [`parse_row`] reads those, and says what is
/// wrong exactly as it always did.
fn plain_row(layout: &Layout, line: &[u8]) -> Option<Sample> {
    let mut sample = Sample::new(0.0, 0);
    let mut t = None;
    let mut p = 0;
    let last = layout.columns.len().checked_sub(1)?;
    for (i, column) in layout.columns.iter().enumerate() {
        let end = match *column {
            Column::Metric(metric, percent) => {
                let (v, end) = number_cell(line, p)?;
                if let Some(v) = v {
                    sample.set(metric, check::metric(v, percent).ok()?);
                }
                end
            }
            Column::Time => {
                let (v, end) = number_cell(line, p)?;
                if let Some(v) = v {
                    t = Some(check::time(v).ok()?);
                }
                end
            }
            Column::Gpu => {
                let (cell, end) = general_cell(line, p);
                if let Some(cell) = cell {
                    sample.gpu = parse_u32(cell)?;
                }
                end
            }
            Column::ClkReasons => match plain_hex(line, p) {
                Some((mask, end)) => {
                    if mask.is_some() {
                        sample.clk_reasons = mask;
                    }
                    end
                }
                None => {
                    let (cell, end) = general_cell(line, p);
                    if let Some(cell) = cell {
                        sample.clk_reasons = Some(parse_hex(cell)?);
                    }
                    end
                }
            },
            Column::Ignored => cell_end(line, p),
            // An empty list cell is the common case (most rows carry none); a JSON list has
            // commas and quotes of its own: the general path reads it.
            Column::Processes | Column::Pods | Column::Nvlinks => {
                if cell_end(line, p) != p {
                    return None;
                }
                p
            }
        };
        // Exactly one comma between cells, none after the last.
        match line.get(end) {
            Some(b',') if i < last => p = end + 1,
            None if i == last => {}
            _ => return None,
        }
    }
    sample.t = t?;
    Some(sample)
}

/// The number in the cell at `p` (`None` for an empty or `nan` cell) and where it ends: a
/// plain decimal in one pass, anything else cut at its comma and parsed; `None` altogether for
/// a cell that is not a number. Inlined: called out of line it cost 160 instructions a sample
/// (callgrind, 1× trace).
#[inline(always)]
fn number_cell(line: &[u8], p: usize) -> Option<(Option<f64>, usize)> {
    if let Some(found) = plain_decimal(line, p) {
        return Some(found);
    }
    match general_cell(line, p) {
        (Some(cell), end) => Some((Some(parse_number(cell)?), end)),
        (None, end) => Some((None, end)),
    }
}

/// Where the cell at `p` ends: the next comma, or the line's end.
fn cell_end(line: &[u8], p: usize) -> usize {
    memchr::memchr(b',', &line[p..]).map_or(line.len(), |n| p + n)
}

/// The cell at `p` trimmed, `None` when it is empty or `nan` (not sampled), and where it ends.
fn general_cell(line: &[u8], p: usize) -> (Option<&[u8]>, usize) {
    let end = cell_end(line, p);
    let cell = trim(&line[p..end]);
    let sampled = !(cell.is_empty() || cell.eq_ignore_ascii_case(b"nan"));
    (sampled.then_some(cell), end)
}

/// A clock-event mask: hex digits, `0x` before them or not.
fn parse_hex(cell: &[u8]) -> Option<u64> {
    let digits = cell
        .strip_prefix(b"0x")
        .or_else(|| cell.strip_prefix(b"0X"))
        .unwrap_or(cell);
    std::str::from_utf8(digits)
        .ok()
        .and_then(|d| u64::from_str_radix(d, 16).ok())
}

/// The cell at `start` (to the next comma or the line's end) as a plain decimal, and where it
/// ends: `None` as the value for an empty cell; `None` altogether for a cell that is not one
/// (a sign, an exponent, a space, 20 characters or more, a mantissa past 2^53 that the exact
/// check does not settle). What it returns is what [`parse_number`] returns for the cell.
fn plain_decimal(line: &[u8], start: usize) -> Option<(Option<f64>, usize)> {
    let rest = &line[start..];
    let mut mantissa: u64 = 0;
    let mut point = usize::MAX;
    let mut len = rest.len();
    for (i, &c) in rest.iter().enumerate() {
        let digit = c.wrapping_sub(b'0');
        if digit < 10 {
            // At most 19 characters are kept below: no overflow that matters.
            mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(digit));
        } else if c == b',' {
            len = i;
            break;
        } else if c == b'.' && point == usize::MAX {
            point = i;
        } else {
            return None;
        }
    }
    if len == 0 {
        return Some((None, start));
    }
    if len > 19 {
        return None;
    }
    let (digits, frac) = if point == usize::MAX {
        (len, 0)
    } else {
        (len - 1, len - point - 1)
    };
    if digits == 0 || frac >= POW10.len() {
        return None;
    }
    let v = if mantissa > (1u64 << 53) {
        checked_quotient(mantissa, frac)?
    } else {
        mantissa as f64 / POW10[frac]
    };
    Some((Some(v), start + len))
}

/// The cell at `p` as `0x` and 1 to 16 hex digits (as `record` writes a clock-event mask), and
/// where it ends; `None` as the value for an empty cell, `None` altogether for any other form.
fn plain_hex(line: &[u8], start: usize) -> Option<(Option<u64>, usize)> {
    if matches!(line.get(start), Some(b',') | None) {
        return Some((None, start));
    }
    if line.get(start) != Some(&b'0') || !matches!(line.get(start + 1), Some(b'x' | b'X')) {
        return None;
    }
    let mut mask: u64 = 0;
    let mut p = start + 2;
    while let Some(&c) = line.get(p) {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            b',' => break,
            _ => return None,
        };
        mask = (mask << 4) | u64::from(digit);
        p += 1;
    }
    let digits = p - start - 2;
    (1..=16).contains(&digits).then_some((Some(mask), p))
}

/// The cells of a line without quotes, as ranges.
fn split_commas(line: &[u8], ranges: &mut Vec<(u32, u32)>) {
    ranges.clear();
    let mut from = 0u32;
    for (at, &c) in line.iter().enumerate() {
        if c == b',' {
            ranges.push((from, at as u32));
            from = at as u32 + 1;
        }
    }
    ranges.push((from, line.len() as u32));
}

/// A cell holding a JSON list (processes, pods, NVLinks), or `bad()`'s error.
fn json_list<T: serde::de::DeserializeOwned>(
    cell: &[u8],
    bad: impl FnOnce() -> TraceError,
) -> Result<Arc<Vec<T>>, TraceError> {
    serde_json::from_slice(cell)
        .map(Arc::new)
        .map_err(|_| bad())
}

fn bad(
    layout: &Layout,
    line: u64,
    column: &str,
    value: &[u8],
    problem: &'static str,
) -> TraceError {
    TraceError::BadValue {
        path: layout.path.clone(),
        line,
        column: column.to_string(),
        value: quote(value),
        problem,
    }
}

fn parse_row(
    layout: &Layout,
    text: &[u8],
    ranges: &[(u32, u32)],
    line: u64,
) -> Result<Sample, TraceError> {
    let mut row = Sample::new(0.0, 0);
    let mut t = None;
    for (column, &(a, z)) in layout.columns.iter().zip(ranges) {
        let cell = trim(&text[a as usize..z as usize]);
        // GPM divides by the sample interval and can return NaN for a degenerate pair;
        // recorders write that as `nan`. It means "no defined value", like an empty cell.
        if cell.is_empty() || cell.eq_ignore_ascii_case(b"nan") {
            continue;
        }
        match *column {
            Column::Ignored => {}
            Column::Time => {
                let v = parse_number(cell)
                    .ok_or_else(|| bad(layout, line, "t", cell, "not a number"))?;
                t = Some(check::time(v).map_err(|problem| bad(layout, line, "t", cell, problem))?);
            }
            Column::Gpu => {
                row.gpu = parse_u32(cell)
                    .ok_or_else(|| bad(layout, line, "gpu", cell, "not a GPU index (0, 1, …)"))?;
            }
            Column::ClkReasons => {
                let mask = parse_hex(cell)
                    .ok_or_else(|| bad(layout, line, "clk_reasons", cell, "not a hex bitmask"))?;
                row.clk_reasons = Some(mask);
            }
            Column::Processes => {
                row.processes = Some(json_list(cell, || {
                    bad(
                        layout,
                        line,
                        "processes",
                        cell,
                        "not a JSON list of processes",
                    )
                })?);
            }
            Column::Pods => {
                row.pods = Some(json_list(cell, || {
                    bad(
                        layout,
                        line,
                        "pods",
                        cell,
                        "not a JSON list of pod containers",
                    )
                })?);
            }
            Column::Nvlinks => {
                row.nvlinks = Some(json_list(cell, || {
                    bad(layout, line, "nvlinks", cell, "not a JSON list of NVLinks")
                })?);
            }
            Column::Metric(metric, percent) => {
                let v = parse_number(cell)
                    .ok_or_else(|| bad(layout, line, metric.column(), cell, "not a number"))?;
                let v = check::metric(v, percent)
                    .map_err(|problem| bad(layout, line, metric.column(), cell, problem))?;
                row.set(metric, v);
            }
        }
    }
    row.t = t.ok_or_else(|| bad(layout, line, "t", b"", "missing: every row needs a time"))?;
    Ok(row)
}

/// Powers of ten that an `f64` holds exactly.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The same powers of ten as integers, for the exact check of [`checked_quotient`].
const POW10_U128: [u128; 23] = {
    let mut table = [1u128; 23];
    let mut i = 1;
    while i < table.len() {
        table[i] = table[i - 1] * 10;
        i += 1;
    }
    table
};

/// A finite decimal number; infinities are refused because they poison every mean.
///
/// Plain decimals (`123`, `4.0332937554`) with at most 2^53 as their digits and at most 22
/// after the point are one integer conversion and one division: both operands are exact, so
/// the quotient is the correctly rounded value, bit for bit what `str::parse` gives (Clinger's
/// fast path). Anything else (exponents, signs, 17 digits) goes to `str::parse`.
fn parse_number(cell: &[u8]) -> Option<f64> {
    // At most 19 digits after the leading zeros (`0.000…`): the mantissa cannot overflow.
    let leading = cell.iter().take_while(|&&c| c == b'0' || c == b'.').count();
    if cell.len() - leading > 19 {
        return parse_number_slow(cell);
    }
    let mut mantissa: u64 = 0;
    let mut point = usize::MAX;
    for (i, &c) in cell.iter().enumerate() {
        let digit = c.wrapping_sub(b'0');
        if digit < 10 {
            mantissa = mantissa * 10 + u64::from(digit);
        } else if c == b'.' && point == usize::MAX {
            point = i;
        } else {
            return parse_number_slow(cell);
        }
    }
    let (digits, frac) = if point == usize::MAX {
        (cell.len(), 0)
    } else {
        (cell.len() - 1, cell.len() - point - 1)
    };
    if digits == 0 || frac >= POW10.len() {
        return parse_number_slow(cell);
    }
    if mantissa > (1u64 << 53) {
        return checked_quotient(mantissa, frac).or_else(|| parse_number_slow(cell));
    }
    Some(mantissa as f64 / POW10[frac])
}

/// `mantissa / 10^frac` for a mantissa past 2^53 (the 17 digits of a shortest `f64` form):
/// the quotient of the two nearest doubles, kept only when exact integer arithmetic shows it is
/// the correctly rounded value (within half a unit in the last place, or on a tie with an even
/// last digit), which it is for all but about one number in a thousand. `None`: not shown, or
/// out of the range where the check fits in 128 bits (below 2^-11, above 2^53, a power of two).
fn checked_quotient(mantissa: u64, frac: usize) -> Option<f64> {
    let x = mantissa as f64 / POW10[frac];
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let m = (bits & ((1u64 << 52) - 1)) | (1u64 << 52);
    // x = m × 2^-shift exactly.
    let shift = 1075 - biased;
    if biased == 0 || m == 1u64 << 52 || !(1..=63).contains(&shift) {
        return None;
    }
    let scaled = u128::from(mantissa) << shift;
    let pow = POW10_U128[frac];
    let nearest = u128::from(m) * pow;
    let twice_error = 2 * scaled.abs_diff(nearest);
    (twice_error < pow || (twice_error == pow && m.is_multiple_of(2))).then_some(x)
}

fn parse_number_slow(cell: &[u8]) -> Option<f64> {
    std::str::from_utf8(cell)
        .ok()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
}

/// A GPU index: decimal digits (a `+` allowed, as `str::parse` allows it).
fn parse_u32(cell: &[u8]) -> Option<u32> {
    let digits = cell.strip_prefix(b"+").unwrap_or(cell);
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits
        .iter()
        .fold(0u64, |v, &c| v * 10 + u64::from(c - b'0'));
    u32::try_from(v).ok()
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::BufReader;

    use super::*;
    use crate::trace::TraceReader;

    fn read(text: &str) -> Vec<Result<Sample, TraceError>> {
        match TraceReader::new("test.csv".into(), text.as_bytes()) {
            Ok(reader) => reader.collect(),
            Err(e) => vec![Err(e)],
        }
    }

    fn error(text: &str) -> String {
        read(text)
            .into_iter()
            .find_map(Result::err)
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn reads_any_subset_of_columns_in_any_order_with_empty_cells() {
        let rows = read("power_mw,gpu,t,gpm_sm,call_us\n80000,1,10.5,,3\n,0,10.6,12.5,\n");
        let a = rows[0].as_ref().expect("row 1");
        assert_eq!((a.t, a.gpu), (10.5, 1));
        assert_eq!(a.get(Metric::PowerMw), Some(80000.0));
        assert_eq!(a.get(Metric::GpmSm), None);
        let b = rows[1].as_ref().expect("row 2");
        assert_eq!(b.get(Metric::PowerMw), None);
        assert_eq!(b.get(Metric::GpmSm), Some(12.5));
    }

    #[test]
    fn gpu_defaults_to_zero_and_clock_reasons_are_hex() {
        let rows = read("t,clk_reasons\n1.0,0x4\n2.0,\n");
        let a = rows[0].as_ref().expect("row 1");
        assert_eq!((a.gpu, a.clk_reasons), (0, Some(4)));
        assert_eq!(rows[1].as_ref().expect("row 2").clk_reasons, None);
    }

    #[test]
    fn a_bad_number_names_line_and_column() {
        let e = error("t,power_mw\n1.0,80000\n2.0,80k\n");
        assert_eq!(e, "test.csv:3: column `power_mw`: not a number: \"80k\"");
    }

    #[test]
    fn nan_negative_and_impossible_percentages_are_refused() {
        assert!(error("t,power_mw\n1.0,inf\n").contains("not a number"));
        assert!(error("t,power_mw\n1.0,-5\n").contains("must not be negative"));
        assert!(error("t,gpm_sm\n1.0,250\n").contains("a percentage above 100"));
        assert!(error("t,gpu\n1.0,-1\n").contains("test.csv:2: column `gpu`"));
        assert!(error("t,clk_reasons\n1.0,0xZZ\n").contains("not a hex bitmask"));
    }

    #[test]
    fn a_row_without_time_or_a_ragged_row_is_an_error() {
        assert_eq!(
            error("t,power_mw\n,80000\n"),
            "test.csv:2: column `t`: missing: every row needs a time: \"\""
        );
        assert!(error("t,power_mw\n1.0,1,2\n").starts_with("test.csv:2: "));
    }

    #[test]
    fn missing_time_column_and_empty_file_are_errors() {
        assert_eq!(
            error("power_mw,gpu\n1,0\n"),
            "test.csv: the header has no `t` column (unix seconds): found power_mw,gpu"
        );
        assert!(error("").contains("the file is empty"));
        assert!(error("t,t\n1,1\n").contains("names column `t` twice"));
    }

    #[test]
    fn nan_from_gpm_reads_as_not_sampled() {
        let rows = read("t,gpm_dram,gpm_sm\n1.0,nan,5\n");
        let a = rows[0].as_ref().expect("row 1");
        assert_eq!(
            (a.get(Metric::GpmDram), a.get(Metric::GpmSm)),
            (None, Some(5.0))
        );
    }

    #[test]
    fn times_past_2286_are_refused_and_long_cells_are_quoted_short() {
        assert!(error("t,power_mw\n1e300,1\n").contains("past the year 2286"));
        let long = "x".repeat(100_000);
        let e = error(&format!("t,power_mw\n1.0,{long}\n"));
        assert!(e.len() < 200, "{} bytes of error", e.len());
        assert!(e.ends_with("… (100000 bytes)\""), "{e}");
    }

    #[test]
    fn a_header_alone_yields_no_samples() {
        assert!(read("t,power_mw\n").is_empty());
    }

    #[test]
    fn lf_crlf_and_cr_traces_name_the_same_line() {
        let lf = "t,power_mw\n1.0,1\n# a comment\n2.0,x\n";
        let expected = "test.csv:4: column `power_mw`: not a number: \"x\"";
        assert_eq!(error(lf), expected);
        assert_eq!(error(&lf.replace('\n', "\r\n")), expected);
        assert_eq!(error(&lf.replace('\n', "\r")), expected);
        // A ragged row: the parser's own error, on the same line either way.
        let ragged = "t,power_mw\n1.0,1\n2.0,1\n3.0,1,2\n";
        assert!(
            error(ragged).starts_with("test.csv:4: "),
            "{}",
            error(ragged)
        );
        let crlf = ragged.replace('\n', "\r\n");
        assert!(error(&crlf).starts_with("test.csv:4: "), "{}", error(&crlf));
        // The samples themselves are the same.
        let rows = |text: &str| -> Vec<(f64, Option<f64>)> {
            read(text)
                .into_iter()
                .map(|r| r.map(|s| (s.t, s.get(Metric::PowerMw))).expect("row"))
                .collect()
        };
        let good = "t,power_mw,processes\n1.0,1,\"[{\"\"pid\"\":\r\n7}]\"\n2.0,2,\n";
        assert_eq!(rows(good), vec![(1.0, Some(1.0)), (2.0, Some(2.0))]);
        assert_eq!(rows(&good.replace('\n', "\r\n")), rows(good));
        // After a row over two lines, and on a last line without its line end.
        let after = "t,power_mw,processes\n1.0,1,\"[{\"\"pid\"\":\n7}]\"\n2.0,x,";
        assert!(
            error(after).starts_with("test.csv:4: column `power_mw`"),
            "{}",
            error(after)
        );
        let split = "t,power_mw,processes\n1.0,x,\"[{\"\"pid\"\":\n7}]\"\n";
        assert!(
            error(split).starts_with("test.csv:2: column `power_mw`"),
            "{}",
            error(split)
        );
    }

    #[test]
    fn a_line_without_end_is_refused_at_the_limit_naming_line_and_column() {
        // `/dev/zero`: the header never ends.
        let zeros = io::repeat(0);
        let e = TraceReader::new("zero".into(), zeros)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("zero:1: the line is longer than 1 MiB without a line break"),
            "{e}"
        );
        // A crash-truncated trace: rows, then NULs where the rest was to be written.
        let rows = "t,power_mw\n1796025905,80000\n1796025906,".as_bytes();
        let input = rows.chain(io::repeat(0).take(3 * MAX_LINE_BYTES as u64));
        let reader = TraceReader::new("nul.csv".into(), input).expect("header");
        let results: Vec<_> = reader.collect();
        assert_eq!(results.len(), 2, "one row, then the error");
        assert!(results[0].is_ok());
        let e = results[1].as_ref().err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("nul.csv:3: column `power_mw`: the line is longer than 1 MiB without a line break: not a trace (a binary file, or a crash-truncated one full of NULs?)")
        );
        // Commas inside a quoted cell do not move the column.
        let quoted = format!("t,processes,power_mw\n1.0,\"{}", ",".repeat(MAX_LINE_BYTES));
        assert!(error(&quoted).starts_with("test.csv:2: column `processes`: the line is longer"));
        // Just under the limit is read (and refused for what it holds, not its length).
        let wide = format!("t,power_mw\n1.0,{}\n", "9".repeat(MAX_LINE_BYTES - 10));
        assert!(error(&wide).contains("not a number"), "{}", error(&wide));
    }

    #[test]
    fn unknown_columns_are_ignored_and_named_but_known_extras_are_not() {
        let reader = TraceReader::new(
            "t.csv".into(),
            "t,powr_mw,call_us,gpm_sm,x\n1.0,5,3,9,1\n".as_bytes(),
        )
        .expect("header");
        assert_eq!(reader.ignored_columns(), ["`powr_mw`", "`x`"]);
        let rows: Vec<_> = reader.collect();
        let a = rows[0].as_ref().expect("row");
        assert_eq!(
            (a.get(Metric::PowerMw), a.get(Metric::GpmSm)),
            (None, Some(9.0))
        );
        let known =
            TraceReader::new("t.csv".into(), "t,call_us\n1.0,3\n".as_bytes()).expect("header");
        assert!(known.ignored_columns().is_empty());
    }

    #[test]
    fn the_fast_number_path_is_bit_for_bit_str_parse() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..200_000 {
            let v = f64::from_bits(next() % 0x4340_0000_0000_0000);
            let text = match i % 4 {
                0 => format!("{v}"),
                1 => format!("{:.*}", (next() % 12) as usize, v.min(1e12)),
                2 => format!(
                    "0.{:0>width$}",
                    next() % 10_000_000_000_000_000,
                    width = (next() % 22) as usize
                ),
                _ => format!("{}", next() % (1 << 60)),
            };
            let want = text.parse::<f64>().ok().filter(|v| v.is_finite());
            let got = parse_number(text.as_bytes());
            assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "{text}");
        }
        // The shortest forms of doubles of every size a trace holds: 17 digits past 2^53.
        let (mut long, mut checked) = (0, 0);
        for _ in 0..200_000 {
            let v =
                (next() >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((next() % 14) as i32 - 3);
            let text = format!("{v}");
            let want = text.parse::<f64>().ok();
            assert_eq!(
                parse_number(text.as_bytes()).map(f64::to_bits),
                want.map(f64::to_bits),
                "{text}"
            );
            let digits: String = text.chars().filter(char::is_ascii_digit).collect();
            let frac = text.find('.').map_or(0, |p| text.len() - p - 1);
            if let Ok(m) = digits.parse::<u64>() {
                if m > 1 << 53 && frac < POW10.len() {
                    long += 1;
                    checked += usize::from(checked_quotient(m, frac).is_some());
                }
            }
        }
        // The rest are below 2^-11 (a fifth of these values) or lost a rounding: `str::parse`.
        assert!(
            long > 50_000 && checked * 100 > long * 60,
            "{checked} of {long} checked"
        );
        for odd in [
            "5.",
            ".5",
            ".",
            "",
            "+1",
            "-0",
            "1e5",
            "1.2.3",
            "00012.5000",
            "inf",
            "NaN",
        ] {
            let want = odd.parse::<f64>().ok().filter(|v| v.is_finite());
            assert_eq!(
                parse_number(odd.as_bytes()).map(f64::to_bits),
                want.map(f64::to_bits),
                "{odd}"
            );
        }
    }

    /// A trace of several chunks: quoted JSON cells across lines and chunk ends, CRLF and CR
    /// line ends, comments, a bad cell near the end.
    fn long_trace() -> String {
        let mut text = String::from("t,gpu,power_mw,processes,gpm_sm\r\n# recorded by a test\r\n");
        for i in 0..30_000u32 {
            let t = 1_796_025_905.0 + f64::from(i) * 0.1;
            let end = if i % 7 == 0 { "\r" } else { "\r\n" };
            if i % 50 == 0 {
                text.push_str(&format!(
                    "{t:.4},{},{},\"[{{\"\"pid\"\":\r\n{i}}}]\",{}.25{end}",
                    i % 8,
                    80_000 + i,
                    i % 100
                ));
            } else {
                text.push_str(&format!(
                    "{t:.4},{},{},,0.{:0>16}{end}",
                    i % 8,
                    80_000 + i,
                    i
                ));
            }
            if i % 1000 == 999 {
                text.push_str("# a comment line\n\n");
            }
        }
        text.push_str("1796030000.0,0,x,,\n1796030000.1,0,5,,\n");
        text
    }

    fn outcomes<R: Read>(reader: TraceReader<R>) -> Vec<(u64, Result<Sample, String>)> {
        let mut reader = reader;
        let mut out = Vec::new();
        while let Some(row) = reader.next() {
            out.push((reader.line(), row.map_err(|e| e.to_string())));
        }
        out
    }

    #[test]
    fn a_trace_parsed_on_threads_reads_as_on_one() {
        let text = long_trace();
        assert!(
            text.len() > 3 * CHUNK_BYTES,
            "{} bytes: several chunks",
            text.len()
        );
        let one = outcomes(TraceReader::new("t.csv".into(), text.as_bytes()).expect("header"));
        let dir = std::env::temp_dir().join(format!("gpuslack-reader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("long.csv");
        std::fs::write(&path, &text).expect("write");
        for threads in [2, 3, 5] {
            let file = File::open(&path).expect("open");
            let reader = TraceReader::new("t.csv".into(), BufReader::new(file))
                .expect("header")
                .parallel(threads);
            assert!(reader.is_parallel());
            assert_eq!(outcomes(reader), one, "{threads} threads");
        }
        let _ = std::fs::remove_dir_all(&dir);
        // What was read: every row, the quoted cells whole, the bad cell by its line.
        assert_eq!(one.len(), 30_002);
        let with_list = one[50].1.as_ref().expect("row 50");
        assert_eq!(with_list.processes.as_ref().map(|p| p[0].pid), Some(50));
        assert_eq!(with_list.get(Metric::GpmSm), Some(50.25));
        assert_eq!(
            one[1].1.as_ref().expect("row 1").get(Metric::GpmSm),
            Some(1e-16)
        );
        // Header, comment, 30,000 rows of which 600 span two lines, 30 comments and 30 blanks.
        let bad_line = 2 + 30_000 + 600 + 60 + 1;
        assert_eq!(one[30_000].0, bad_line as u64, "the line an error names");
        assert_eq!(
            one[30_000].1.as_ref().err().map(String::as_str),
            Some(format!("t.csv:{bad_line}: column `power_mw`: not a number: \"x\"").as_str())
        );
        assert_eq!(
            one[30_001].0,
            bad_line as u64 + 1,
            "rows after an error still come"
        );
    }

    #[test]
    fn a_plain_decimal_reads_as_parse_number_reads_it() {
        // What `record` writes, and the forms the one-pass read leaves to `parse_number`.
        let plain = [
            "0",
            "123",
            "4.0332937554",
            "0.5017512873351868",
            "1.2545734990553778",
            "96.1507907941909",
            "1796025905.0759",
            "0000000000000000001",
            "1.",
            ".5",
        ];
        for cell in plain {
            let (v, end) = plain_decimal(cell.as_bytes(), 0).expect(cell);
            let v = v.expect(cell);
            assert_eq!(end, cell.len(), "{cell}");
            assert_eq!(
                v.to_bits(),
                parse_number(cell.as_bytes()).expect(cell).to_bits(),
                "{cell}"
            );
        }
        for other in [
            "00000000000000000001",
            ".",
            "1e3",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1.2.3",
            "nan",
            "0x1",
        ] {
            assert_eq!(plain_decimal(other.as_bytes(), 0), None, "{other}");
        }
        // A cell ends at its comma; an empty one is no value.
        assert_eq!(plain_decimal(b"7,12.5", 2), Some((Some(12.5), 6)));
        assert_eq!(plain_decimal(b"7,,3", 2), Some((None, 2)));
    }

    #[test]
    fn shortest_doubles_read_in_one_pass_bit_for_bit() {
        // Every shortest form of a million doubles over the ranges traces hold: where the one
        // pass reads a cell it reads what `parse_number` reads, and it reads nine in ten.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut read = 0;
        let total = 1_000_000;
        for i in 0..total {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let unit = (x >> 11) as f64 / (1u64 << 53) as f64;
            let v = match i % 4 {
                0 => unit * 100.0,
                1 => unit * 1000.0,
                2 => 1.7e9 + unit * 1e8,
                _ => (unit * 1e6).round(),
            };
            let cell = v.to_string();
            if let Some((Some(fast), _)) = plain_decimal(cell.as_bytes(), 0) {
                read += 1;
                assert_eq!(fast.to_bits(), v.to_bits(), "{cell}");
            }
        }
        // The rest (a 17-digit form the exact check leaves open) go through `parse_number`.
        assert!(read > total * 9 / 10, "{read} of {total} read in one pass");
    }

    fn layout(text: &str) -> Arc<Layout> {
        let opened = CsvChunks::open("test.csv".into(), b"", text.as_bytes());
        opened.map(|o| o.chunks.layout).expect("header")
    }

    #[test]
    fn a_row_read_in_one_pass_is_the_row_parse_row_reads() {
        let header = "t,gpu,clk_reasons,util_gpu,power_mw,call_us,gpm_sm\n";
        let rows = [
            "1796025905.0759,3,0x1a,100,690839,12,96.29313581724130",
            "1796025905.0759, 3 ,4,nan,  690839 ,x,",
            "1796025905.0759,,0X1A,1e2,6.9e5,,NaN",
        ];
        for row in rows {
            let text = format!("{header}{row}\n");
            let one_pass = read(&text);
            let layout = layout(&text);
            let mut ranges = Vec::new();
            split_commas(row.as_bytes(), &mut ranges);
            let general = parse_row(&layout, row.as_bytes(), &ranges, 2).expect(row);
            assert_eq!(one_pass[0].as_ref().expect(row), &general, "{row}");
            assert_eq!(
                plain_row(&layout, row.as_bytes()).as_ref(),
                Some(&general),
                "{row}"
            );
        }
        let sample = read(&format!("{header}{}\n", rows[0]))
            .remove(0)
            .expect("row");
        assert_eq!((sample.gpu, sample.clk_reasons), (3, Some(0x1a)));
        assert_eq!(sample.get(Metric::GpmSm), Some(96.2931358172413));
        // Errors and lists are left to the general read, which names them.
        let layout = layout(header);
        for row in [
            "1.0,0,0x1,250,1,1,1",
            "1.0,0,0x1,1,1,1",
            "1.0,0,0x1,1,1,1,1,1",
            "0,0,,1,1,1,1",
        ] {
            assert!(plain_row(&layout, row.as_bytes()).is_none(), "{row}");
        }
    }
}
