use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use crate::sample::{Metric, Sample};

/// Why a trace could not be read. Every variant names the file; those about a row name its line
/// (1-based, counting the header as line 1) and the column, so a user can open the file there.
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
    #[error("{path}:{line}: {source}")]
    Csv {
        path: String,
        line: u64,
        source: csv::Error,
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
}

#[derive(Debug, Clone, Copy)]
enum Column {
    Time,
    Gpu,
    ClkReasons,
    Processes,
    Pods,
    Metric(Metric),
    Ignored,
}

/// The longest line a trace may have. A row of every column `record` writes is under 2 KiB; a
/// `processes` cell of a few hundred processes some 100 KiB. Past this the input is not a
/// trace, and buffering it whole (csv would, looking for the line's end) takes all memory.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Columns that earlier recorders wrote and that are ignored without a warning: `call_us`, the
/// time one sampling call took, in the bundled H200 recording.
const KNOWN_EXTRAS: [&str; 1] = ["call_us"];

/// Streams [`Sample`]s out of a trace, one row at a time: memory stays flat however long the
/// trace, and however long a line (at most `MAX_LINE_BYTES`). Unknown columns are ignored, as
/// the format says, with one warning naming them: a typo (`powr_mw`) must not pass for a
/// column that was never sampled.
pub struct TraceReader<R: Read> {
    path: String,
    csv: csv::Reader<Lines<R>>,
    /// The header's names, to say which column an over-long line was in.
    names: Vec<String>,
    columns: Vec<Column>,
    ignored: Vec<String>,
    record: csv::StringRecord,
    /// The parser's line once the last row was read: the line after the row's last.
    end_line: u64,
}

impl TraceReader<BufReader<File>> {
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|source| TraceError::Open {
            path: path.display().to_string(),
            source,
        })?;
        TraceReader::new(
            path.display().to_string(),
            BufReader::with_capacity(64 * 1024, file),
        )
    }
}

impl<R: Read> TraceReader<R> {
    /// `path` is only used to name the source in errors (it can be `<stdin>` or `<bundled …>`).
    pub fn new(path: String, input: R) -> Result<Self, TraceError> {
        let mut csv = csv::ReaderBuilder::new()
            .has_headers(true)
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .from_reader(Lines::new(input, MAX_LINE_BYTES));
        let headers = csv
            .headers()
            .map_err(|source| csv_error(&path, &[], 1, source))?
            .clone();
        if headers.is_empty() || (headers.len() == 1 && headers[0].is_empty()) {
            return Err(TraceError::Empty { path });
        }
        let mut columns = Vec::with_capacity(headers.len());
        for (i, name) in headers.iter().enumerate() {
            if !name.is_empty() && headers.iter().take(i).any(|earlier| earlier == name) {
                return Err(TraceError::DuplicateColumn {
                    path,
                    column: name.to_string(),
                });
            }
            columns.push(match name {
                "t" => Column::Time,
                "gpu" => Column::Gpu,
                "clk_reasons" => Column::ClkReasons,
                "processes" => Column::Processes,
                "pods" => Column::Pods,
                other => Metric::from_column(other).map_or(Column::Ignored, Column::Metric),
            });
        }
        if !columns.iter().any(|c| matches!(c, Column::Time)) {
            return Err(TraceError::NoTimeColumn {
                path,
                found: headers.iter().collect::<Vec<_>>().join(","),
            });
        }
        let ignored: Vec<String> = headers
            .iter()
            .zip(&columns)
            .filter(|(name, column)| {
                matches!(column, Column::Ignored) && !KNOWN_EXTRAS.contains(name)
            })
            .map(|(name, _)| format!("`{}`", quote(name)))
            .collect();
        if !ignored.is_empty() {
            tracing::warn!(
                trace = %path,
                columns = %ignored.join(", "),
                "ignoring columns gpuslack does not know (a typo, or a newer recorder's?): docs/OUTPUT.md lists the columns it reads"
            );
        }
        Ok(TraceReader {
            path,
            csv,
            names: headers.iter().map(str::to_string).collect(),
            columns,
            ignored,
            record: csv::StringRecord::new(),
            end_line: 0,
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The header's columns that are read as nothing (each quoted, as the warning names them),
    /// leaving out the known extras of earlier recorders.
    pub fn ignored_columns(&self) -> &[String] {
        &self.ignored
    }

    /// The line of the row read last (the header is line 1); 0 before the first.
    ///
    /// Counted back from where the row ended, not taken from where the parser started looking
    /// for it: that start is before any comment or blank line above the row.
    pub fn line(&self) -> u64 {
        // Every row ends in a `\n` (see `Lines`), counted by then; a quoted cell may hold more.
        let inside: usize = self
            .record
            .iter()
            .map(|cell| cell.bytes().filter(|&b| b == b'\n').count())
            .sum();
        self.end_line.saturating_sub(1 + inside as u64)
    }

    fn bad(&self, column: &str, value: &str, problem: &'static str) -> TraceError {
        TraceError::BadValue {
            path: self.path.clone(),
            line: self.line(),
            column: column.to_string(),
            value: quote(value),
            problem,
        }
    }

    fn parse_row(&self) -> Result<Sample, TraceError> {
        let mut t = None;
        let mut gpu = 0;
        let mut sample = Sample::new(0.0, 0);
        for (column, cell) in self.columns.iter().zip(self.record.iter()) {
            // GPM divides by the sample interval and can return NaN for a degenerate pair;
            // recorders write that as `nan`. It means "no defined value", like an empty cell.
            if cell.is_empty() || cell.eq_ignore_ascii_case("nan") {
                continue;
            }
            match *column {
                Column::Ignored => {}
                Column::Time => {
                    let v =
                        parse_number(cell).ok_or_else(|| self.bad("t", cell, "not a number"))?;
                    if v <= 0.0 {
                        return Err(self.bad("t", cell, "must be positive unix seconds"));
                    }
                    if v > MAX_UNIX_S {
                        return Err(self.bad("t", cell, "is past the year 2286: not unix seconds"));
                    }
                    t = Some(v);
                }
                Column::Gpu => {
                    gpu = cell
                        .parse::<u32>()
                        .map_err(|_| self.bad("gpu", cell, "not a GPU index (0, 1, …)"))?;
                }
                Column::ClkReasons => {
                    let digits = cell
                        .strip_prefix("0x")
                        .or_else(|| cell.strip_prefix("0X"))
                        .unwrap_or(cell);
                    let mask = u64::from_str_radix(digits, 16)
                        .map_err(|_| self.bad("clk_reasons", cell, "not a hex bitmask"))?;
                    sample.clk_reasons = Some(mask);
                }
                Column::Processes => {
                    let list = serde_json::from_str(cell)
                        .map_err(|_| self.bad("processes", cell, "not a JSON list of processes"))?;
                    sample.processes = Some(std::sync::Arc::new(list));
                }
                Column::Pods => {
                    let list = serde_json::from_str(cell)
                        .map_err(|_| self.bad("pods", cell, "not a JSON list of pod containers"))?;
                    sample.pods = Some(std::sync::Arc::new(list));
                }
                Column::Metric(metric) => {
                    let v = parse_number(cell)
                        .ok_or_else(|| self.bad(metric.column(), cell, "not a number"))?;
                    if v < 0.0 {
                        return Err(self.bad(metric.column(), cell, "must not be negative"));
                    }
                    if metric.is_percent() && v > 100.5 {
                        return Err(self.bad(metric.column(), cell, "a percentage above 100"));
                    }
                    sample.set(metric, v);
                }
            }
        }
        sample.t = t.ok_or_else(|| self.bad("t", "", "missing: every row needs a time"))?;
        sample.gpu = gpu;
        Ok(sample)
    }
}

/// Unix seconds past this (the year 2286) are not unix seconds: a corrupted cell, milliseconds,
/// or a value that would overflow every duration computed from it.
const MAX_UNIX_S: f64 = 1e10;

/// At most a few dozen characters of a bad cell: a 50 MB line must not become the error message.
fn quote(value: &str) -> String {
    const MAX_CHARS: usize = 40;
    if value.chars().count() <= MAX_CHARS {
        return value.to_string();
    }
    let head: String = value.chars().take(MAX_CHARS).collect();
    format!("{head}… ({} bytes)", value.len())
}

/// A finite decimal number; infinities are refused because they poison every mean.
fn parse_number(cell: &str) -> Option<f64> {
    cell.parse::<f64>().ok().filter(|v| v.is_finite())
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Sample, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let read = self.csv.read_record(&mut self.record);
        self.end_line = self.csv.position().line();
        match read {
            Ok(false) => None,
            Ok(true) => Some(self.parse_row()),
            Err(source) => {
                // A read that failed stopped anywhere; a row that was refused was read whole.
                let line = match source.kind() {
                    csv::ErrorKind::Io(_) => self.line() + 1,
                    _ => self.end_line.saturating_sub(1),
                };
                Some(Err(csv_error(&self.path, &self.names, line, source)))
            }
        }
    }
}

/// A CSV error as a [`TraceError`]: an over-long line (see [`Lines`]) by its own variant.
fn csv_error(path: &str, names: &[String], line: u64, source: csv::Error) -> TraceError {
    let too_long = match source.kind() {
        csv::ErrorKind::Io(e) => e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<LineTooLong>())
            .copied(),
        _ => None,
    };
    match too_long {
        Some(LineTooLong {
            line,
            column,
            limit_bytes,
        }) => TraceError::LineTooLong {
            path: path.to_string(),
            line,
            // Line 1 is the header: no name to give yet.
            column: if line > 1 {
                names.get(column).map(|name| quote(name))
            } else {
                None
            },
            limit_bytes,
        },
        None => TraceError::Csv {
            path: path.to_string(),
            line,
            source,
        },
    }
}

/// What [`Lines`] says when a line passes its limit: where (1-based line, 0-based column).
#[derive(Debug, Clone, Copy)]
struct LineTooLong {
    line: u64,
    column: usize,
    limit_bytes: usize,
}

impl std::fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {} is longer than {} bytes",
            self.line, self.limit_bytes
        )
    }
}

impl std::error::Error for LineTooLong {}

/// The input as the CSV parser should see it: every line ending (`\n`, `\r\n` or a lone `\r`)
/// made `\n`, a last line without one given one, and no line longer than `limit_bytes`.
///
/// The parser counts lines by their `\n` but ends a row at the `\r` of a `\r\n`, and a lone
/// `\r` is no line to it: rows are named by counting back from where they ended (see
/// [`TraceReader::line`]), which needs one kind of line end, after every row. A `\r` in a
/// quoted cell becomes `\n` too: the only quoted cells are JSON lists, to which both are
/// whitespace.
///
/// Without a bound the parser buffers a line until its end, so `/dev/zero` or a file of NULs
/// is read until memory runs out. Here such a line is an error naming its line and the column
/// it was in (commas outside quotes, counted on the way), before more than the limit is held.
struct Lines<R> {
    inner: R,
    limit_bytes: usize,
    /// Lines ended so far.
    lines: u64,
    /// Bytes of the current line so far.
    line_bytes: usize,
    /// Unquoted commas of the current line so far: the 0-based column.
    column: usize,
    quoted: bool,
    /// The current line started with `#`: a comment, whose quotes mean nothing.
    comment: bool,
    /// The last byte was a `\r`, already passed on as `\n`: a `\n` right after it is dropped.
    after_cr: bool,
    /// The last byte passed on was a `\n` (or none was): at the end, none is added.
    ended: bool,
    failed: Option<LineTooLong>,
}

impl<R: Read> Lines<R> {
    fn new(inner: R, limit_bytes: usize) -> Self {
        Lines {
            inner,
            limit_bytes,
            lines: 0,
            line_bytes: 0,
            column: 0,
            quoted: false,
            comment: false,
            after_cr: false,
            ended: true,
            failed: None,
        }
    }

    fn too_long(&self) -> io::Error {
        let at = self.failed.unwrap_or(LineTooLong {
            line: self.lines + 1,
            column: self.column,
            limit_bytes: self.limit_bytes,
        });
        io::Error::new(io::ErrorKind::InvalidData, at)
    }
}

impl<R: Read> Read for Lines<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.failed.is_some() {
            return Err(self.too_long());
        }
        loop {
            let n = self.inner.read(buf)?;
            if n == 0 {
                if self.ended || buf.is_empty() {
                    return Ok(0);
                }
                self.ended = true;
                buf[0] = b'\n';
                return Ok(1);
            }
            // Rewritten in place: what is kept never runs ahead of what is read.
            let mut kept = 0;
            for i in 0..n {
                let byte = buf[i];
                if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                    continue;
                }
                let byte = match byte {
                    b'\r' => {
                        self.after_cr = true;
                        b'\n'
                    }
                    other => other,
                };
                if byte == b'\n' {
                    self.lines += 1;
                    self.line_bytes = 0;
                    self.column = 0;
                    self.comment = false;
                } else {
                    if self.line_bytes == 0 && byte == b'#' && !self.quoted {
                        self.comment = true;
                    }
                    self.line_bytes += 1;
                    if !self.comment {
                        match byte {
                            b'"' => self.quoted = !self.quoted,
                            b',' if !self.quoted => self.column += 1,
                            _ => {}
                        }
                    }
                    if self.line_bytes > self.limit_bytes {
                        self.failed = Some(LineTooLong {
                            line: self.lines + 1,
                            column: self.column,
                            limit_bytes: self.limit_bytes,
                        });
                        // What came before the limit is passed on; the next read fails.
                        return if kept > 0 {
                            Ok(kept)
                        } else {
                            Err(self.too_long())
                        };
                    }
                }
                buf[kept] = byte;
                kept += 1;
                self.ended = byte == b'\n';
            }
            // A read of nothing but a dropped `\n` is not the end of the input.
            if kept > 0 {
                return Ok(kept);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
