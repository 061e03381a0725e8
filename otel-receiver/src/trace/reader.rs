use std::fs::File;
use std::io::{BufReader, Read};
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

/// Streams [`Sample`]s out of a trace, one row at a time: memory stays flat however long the
/// trace. Unknown columns are ignored (traces carry extras such as `call_us`).
pub struct TraceReader<R: Read> {
    path: String,
    csv: csv::Reader<R>,
    columns: Vec<Column>,
    record: csv::StringRecord,
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
            .from_reader(input);
        let headers = csv
            .headers()
            .map_err(|source| TraceError::Csv {
                path: path.clone(),
                line: 1,
                source,
            })?
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
        Ok(TraceReader {
            path,
            csv,
            columns,
            record: csv::StringRecord::new(),
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The line of the row read last (the header is line 1).
    pub fn line(&self) -> u64 {
        self.record.position().map_or(0, |p| p.line())
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
        match self.csv.read_record(&mut self.record) {
            Ok(false) => None,
            Ok(true) => Some(self.parse_row()),
            Err(source) => {
                let line = source.position().map_or(self.line() + 1, |p| p.line());
                Some(Err(TraceError::Csv {
                    path: self.path.clone(),
                    line,
                    source,
                }))
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
}
