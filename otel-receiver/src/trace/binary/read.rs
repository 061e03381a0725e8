//! A binary trace, read: blocks cut from the input on one thread, checked against their
//! checksum and decoded on others ([`super::super::batches`]). Decoding a row takes about 1,500
//! instructions, a third of what parsing a CSV row does: what lets a day of an 8-GPU node be
//! replayed in about three seconds on one core.

use std::io::{self, Read};
use std::sync::Arc;

use super::format::{
    get_mask, get_varint, unzigzag, BLOCK_HEADER_BYTES, CLK_REASONS, EXTRAS, MAX_BLOCK_BYTES,
    MAX_BLOCK_ROWS, MAX_COLUMNS, MAX_HEADER_BYTES, MIN_ROW_BYTES, NVLINKS, OLDEST_VERSION, PODS,
    PREAMBLE_BYTES, PROCESSES, VERSION,
};
use crate::sample::{Metric, Sample};
use crate::trace::batches::{Batch, Chunk, Chunker, ParseChunk};
use crate::trace::check;
use crate::trace::error::{quote, TraceError};

/// Whole blocks are gathered into runs of at least this many bytes, so that a recording's
/// small blocks (one a tick) cost one hand-over between threads per run, not one each.
const RUN_BYTES: usize = 128 * 1024;

/// What decoding a row needs to know of the trace.
#[derive(Debug)]
struct Layout {
    path: String,
    /// Bit `i` of a row's presence: the metric of the header's `i`-th name and whether it is a
    /// percentage, or `None` for a name this build does not know (read and left out) and past
    /// the header's names.
    columns: [Option<(Metric, bool)>; MAX_COLUMNS],
    /// Bits of a row's presence that the header names.
    named: u128,
    /// The header's names, to name a column in an error.
    names: Vec<String>,
}

/// A binary trace's blocks, cut into runs of whole blocks ([`Chunker`]): each run's first row
/// (1-based) and the byte its first block starts at.
pub(in crate::trace) struct BinaryChunks<R> {
    input: R,
    layout: Arc<Layout>,
    /// Where the next block starts in the file.
    offset: u64,
    /// The row number of the next block's first row.
    next_row: u64,
    failed: bool,
    /// A failure found after whole blocks: given once those are out.
    pending: Option<TraceError>,
}

/// A binary trace whose header was read, and the header's names it ignores (quoted).
pub(in crate::trace) struct OpenedBinary<R> {
    pub(in crate::trace) chunks: BinaryChunks<R>,
    pub(in crate::trace) ignored: Vec<String>,
}

/// Fills `buf` from `input`; the bytes read, fewer only at the end of the input.
fn fill(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(word)
}

impl<R: Read> BinaryChunks<R> {
    /// Reads the preamble after its magic (which the caller read to tell the format) and the
    /// header. `path` names the trace in errors.
    pub(in crate::trace) fn open(
        path: String,
        mut input: R,
    ) -> Result<OpenedBinary<R>, TraceError> {
        let header_error = |path: &str, problem: String| TraceError::BinaryHeader {
            path: path.to_string(),
            problem,
        };
        let read_error = |path: &str, source| TraceError::Read {
            path: path.to_string(),
            line: 0,
            source,
        };
        let magic = PREAMBLE_BYTES - 12;
        let mut fixed = [0u8; 12];
        let n = fill(&mut input, &mut fixed).map_err(|e| read_error(&path, e))?;
        if n < fixed.len() {
            return Err(header_error(
                &path,
                format!(
                    "a binary trace cut short in its preamble ({} of {PREAMBLE_BYTES} bytes)",
                    magic + n
                ),
            ));
        }
        let version = u16::from_le_bytes([fixed[0], fixed[1]]);
        let reserved = u16::from_le_bytes([fixed[2], fixed[3]]);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(header_error(
                &path,
                format!("a binary trace of layout version {version}; this gpuslack reads versions {OLDEST_VERSION} to {VERSION} (a newer gpuslack wrote it: convert it to CSV there)"),
            ));
        }
        if reserved != 0 {
            return Err(header_error(
                &path,
                format!("a binary trace with flags {reserved:#x} this gpuslack does not know"),
            ));
        }
        let len = u32_at(&fixed, 4) as usize;
        if len > MAX_HEADER_BYTES {
            return Err(header_error(
                &path,
                format!("a header of {len} bytes: damaged (at most {MAX_HEADER_BYTES})"),
            ));
        }
        let mut text = vec![0; len];
        let n = fill(&mut input, &mut text).map_err(|e| read_error(&path, e))?;
        if n < len || crc32fast::hash(&text) != u32_at(&fixed, 8) {
            return Err(header_error(
                &path,
                "the header is damaged (cut short, or its checksum does not match)".into(),
            ));
        }
        let names: Vec<String> = match std::str::from_utf8(&text) {
            Ok("") => Vec::new(),
            Ok(text) => text.split(',').map(str::to_string).collect(),
            Err(_) => return Err(header_error(&path, "the header is not text".into())),
        };
        // Version 1 rows had room for 64; a longer header there is damage.
        let room = if version == 1 { 64 } else { MAX_COLUMNS };
        if names.len() > room {
            return Err(header_error(
                &path,
                format!(
                    "the header names {} columns; a row has room for {room}",
                    names.len()
                ),
            ));
        }
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(TraceError::DuplicateColumn {
                    path,
                    column: quote(name.as_bytes()),
                });
            }
        }
        let mut columns = [None; MAX_COLUMNS];
        for (column, name) in columns.iter_mut().zip(&names) {
            *column = Metric::from_column(name).map(|m| (m, m.is_percent()));
        }
        let named = u128::MAX
            .checked_shr(MAX_COLUMNS as u32 - names.len() as u32)
            .unwrap_or(0);
        let ignored = check::unknown_columns(
            &path,
            names
                .iter()
                .zip(&columns)
                .filter(|(_, column)| column.is_none())
                .map(|(name, _)| name.as_str()),
        );
        Ok(OpenedBinary {
            chunks: BinaryChunks {
                input,
                layout: Arc::new(Layout {
                    path,
                    columns,
                    named,
                    names,
                }),
                offset: (PREAMBLE_BYTES + len) as u64,
                next_row: 1,
                failed: false,
                pending: None,
            },
            ignored,
        })
    }

    fn corrupt(&self, problem: String) -> TraceError {
        TraceError::Corrupt {
            path: self.layout.path.clone(),
            offset: self.offset,
            row: self.next_row,
            problem,
        }
    }

    /// Appends the next block to `run`; `Ok(false)` at the end of the input.
    fn read_block(&mut self, run: &mut Vec<u8>) -> Result<bool, TraceError> {
        let start = run.len();
        run.resize(start + BLOCK_HEADER_BYTES, 0);
        let read_error = |this: &Self, source| TraceError::Read {
            path: this.layout.path.clone(),
            line: this.next_row,
            source,
        };
        let n = fill(&mut self.input, &mut run[start..]).map_err(|e| read_error(self, e))?;
        if n == 0 {
            run.truncate(start);
            return Ok(false);
        }
        if n < BLOCK_HEADER_BYTES {
            return Err(self.corrupt(format!("the file ends {n} bytes into the block's {BLOCK_HEADER_BYTES}-byte header: cut short (a recording stopped mid-write, a partial copy)")));
        }
        let len = u32_at(run, start) as usize;
        let rows = u32_at(run, start + 4) as usize;
        if len > MAX_BLOCK_BYTES || rows == 0 || rows > MAX_BLOCK_ROWS || rows * MIN_ROW_BYTES > len
        {
            return Err(self.corrupt(format!(
                "a block of {rows} rows in {len} bytes: damaged (not written by gpuslack, or not from here on)"
            )));
        }
        let body = start + BLOCK_HEADER_BYTES;
        run.resize(body + len, 0);
        let n = fill(&mut self.input, &mut run[body..]).map_err(|e| read_error(self, e))?;
        if n < len {
            return Err(self.corrupt(format!("the file ends {n} bytes into the block's {len}: cut short (a recording stopped mid-write, a partial copy)")));
        }
        self.offset += (BLOCK_HEADER_BYTES + len) as u64;
        self.next_row += rows as u64;
        Ok(true)
    }
}

impl<R: Read> Chunker for BinaryChunks<R> {
    /// Every core may take a share: an offline replay windows each chunk where it decoded it
    /// (`pipeline::replay_staged`), and a reader that only decodes leaves the threads it has no
    /// use for waiting for chunks, which takes no core.
    const MAX_PARSERS: usize = usize::MAX;
    /// On two cores the pipeline's two threads (windows, and diagnosis) have them both: a
    /// decoding thread beside them made a replay slower than on one core (1.85 M samples/s
    /// against 2.40, dev VM).
    const MIN_THREADS: usize = 3;

    fn next_chunk(&mut self, spare: Vec<u8>) -> Result<Option<Chunk>, TraceError> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        if self.failed {
            return Ok(None);
        }
        let (offset, first) = (self.offset, self.next_row);
        let mut bytes = spare;
        bytes.clear();
        while bytes.len() < RUN_BYTES {
            match self.read_block(&mut bytes) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    self.failed = true;
                    // The whole blocks before the failure first, then the failure.
                    let whole = (self.offset - offset) as usize;
                    if whole == 0 {
                        return Err(e);
                    }
                    bytes.truncate(whole);
                    self.pending = Some(e);
                    break;
                }
            }
        }
        Ok((!bytes.is_empty()).then_some(Chunk {
            bytes,
            first,
            offset,
        }))
    }

    fn parser(&self) -> ParseChunk {
        let layout = Arc::clone(&self.layout);
        Arc::new(move |run: &Chunk, batch: &mut Batch| decode_run(&layout, run, batch))
    }
}

/// Why a row could not be decoded.
enum RowError {
    /// A value the rules refuse: the row is read past, the next rows follow.
    Value {
        column: String,
        value: String,
        problem: &'static str,
    },
    /// The bytes are not rows as the writer writes them: nothing after can be trusted.
    Corrupt(String),
}

/// Decodes every block of a run into `batch`; a damaged block ends it.
fn decode_run(layout: &Layout, run: &Chunk, batch: &mut Batch) {
    let b = &run.bytes;
    let (mut p, mut row) = (0, run.first);
    while p + BLOCK_HEADER_BYTES <= b.len() {
        let offset = run.offset + p as u64;
        let corrupt = |row, problem| TraceError::Corrupt {
            path: layout.path.clone(),
            offset,
            row,
            problem,
        };
        let len = u32_at(b, p) as usize;
        let rows = u64::from(u32_at(b, p + 4));
        let Some(payload) = b.get(p + BLOCK_HEADER_BYTES..p + BLOCK_HEADER_BYTES + len) else {
            batch.push(row, Err(corrupt(row, "cut short".into())));
            batch.fatal = true;
            return;
        };
        if crc32fast::hash(payload) != u32_at(b, p + 8) {
            let problem = "its checksum does not match: damaged on disk or in a copy".into();
            batch.push(row, Err(corrupt(row, problem)));
            batch.fatal = true;
            return;
        }
        // Each row decoded into a sample that stays in this core's cache, then packed.
        let mut q = 0;
        for this_row in row..row + rows {
            let mut sample = Sample::new(0.0, 0);
            match decode_row(layout, payload, &mut q, &mut sample) {
                Ok(()) => batch.push_sample(this_row, &mut sample),
                Err(RowError::Value {
                    column,
                    value,
                    problem,
                }) => batch.push_error(
                    this_row,
                    TraceError::BadRow {
                        path: layout.path.clone(),
                        row: this_row,
                        offset,
                        column,
                        value,
                        problem,
                    },
                ),
                Err(RowError::Corrupt(problem)) => {
                    batch.push_error(this_row, corrupt(this_row, problem));
                    batch.fatal = true;
                    return;
                }
            }
        }
        if q != payload.len() {
            let problem = format!("{} bytes after its last row", payload.len() - q);
            batch.push(row + rows, Err(corrupt(row, problem)));
            batch.fatal = true;
            return;
        }
        row += rows;
        p += BLOCK_HEADER_BYTES + len;
    }
}

/// Decodes the row at `*p` into `sample` (a new one), moving past it, also when one of its
/// values is refused.
fn decode_row(
    layout: &Layout,
    b: &[u8],
    p: &mut usize,
    sample: &mut Sample,
) -> Result<(), RowError> {
    let cut = || RowError::Corrupt("a row cut short".into());
    let gpu = get_varint(b, p).ok_or_else(cut)?;
    let t = f64::from_le_bytes(
        b.get(*p..*p + 8)
            .and_then(|t| t.try_into().ok())
            .ok_or_else(cut)?,
    );
    *p += 8;
    let extras = *b.get(*p).ok_or_else(cut)?;
    *p += 1;
    if extras & !EXTRAS != 0 {
        return Err(RowError::Corrupt(format!(
            "a row with flags {extras:#x} this gpuslack does not know"
        )));
    }
    // The first refused value names the row's error; the rest of the row is still read.
    let mut refused = None;
    let mut refuse = |column: &str, value: String, problem| {
        refused.get_or_insert(RowError::Value {
            column: column.to_string(),
            value,
            problem,
        });
    };
    sample.t = t;
    match u32::try_from(gpu) {
        Ok(gpu) => sample.gpu = gpu,
        Err(_) => refuse("gpu", gpu.to_string(), "not a GPU index (0, 1, …)"),
    }
    if let Err(problem) = check::time(t) {
        refuse("t", t.to_string(), problem);
    }
    if extras & CLK_REASONS != 0 {
        sample.clk_reasons = Some(get_varint(b, p).ok_or_else(cut)?);
    }
    for (bit, column) in [
        (PROCESSES, "processes"),
        (PODS, "pods"),
        (NVLINKS, "nvlinks"),
    ] {
        if extras & bit == 0 {
            continue;
        }
        let len = get_varint(b, p).ok_or_else(cut)?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| p.checked_add(len))
            .filter(|&end| end <= b.len())
            .ok_or_else(cut)?;
        let json = &b[*p..end];
        *p = end;
        let parsed = match bit {
            PROCESSES => serde_json::from_slice(json).map(|l| sample.processes = Some(Arc::new(l))),
            PODS => serde_json::from_slice(json).map(|l| sample.pods = Some(Arc::new(l))),
            _ => serde_json::from_slice(json).map(|l| sample.nvlinks = Some(Arc::new(l))),
        };
        if parsed.is_err() {
            refuse(
                column,
                format!("{:?}", quote(json)),
                "not a JSON list of its kind",
            );
        }
    }
    let present = get_mask(b, p).ok_or_else(cut)?;
    let integers = get_mask(b, p).ok_or_else(cut)?;
    if integers & !present != 0 {
        return Err(RowError::Corrupt(
            "integer bits for values the row lacks".into(),
        ));
    }
    if present & !layout.named != 0 {
        return Err(RowError::Corrupt(format!(
            "a value past the header's {} columns",
            layout.names.len()
        )));
    }
    let mut left = present;
    while left != 0 {
        let i = left.trailing_zeros() as usize;
        left &= left - 1;
        let v = if integers & (1 << i) != 0 {
            unzigzag(get_varint(b, p).ok_or_else(cut)?) as f64
        } else {
            let bytes = b.get(*p..*p + 8).ok_or_else(cut)?;
            *p += 8;
            f64::from_le_bytes(bytes.try_into().map_err(|_| cut())?)
        };
        let Some((metric, percent)) = layout.columns[i] else {
            continue;
        };
        // NaN: GPM's degenerate pair, "not sampled", as in a CSV cell.
        if v.is_nan() {
            continue;
        }
        match check::metric(v, percent) {
            Ok(v) => sample.set(metric, v),
            Err(problem) => refuse(&layout.names[i], v.to_string(), problem),
        }
    }
    match refused {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::format::MAGIC;
    use super::*;
    use crate::attribution::{GpuProcess, PodContainer};
    use crate::sample::NvlinkLink;
    use crate::trace::{BinaryTraceWriter, SampleWriter, TraceReader};

    fn written(samples: &[Sample], flush_every: usize) -> Vec<u8> {
        let mut writer = BinaryTraceWriter::new(Vec::new()).expect("header");
        for (i, s) in samples.iter().enumerate() {
            writer.write(s).expect("row");
            if (i + 1) % flush_every == 0 {
                writer.flush().expect("flush");
            }
        }
        writer.finish().expect("finish")
    }

    fn read(bytes: &[u8]) -> Vec<(u64, Result<Sample, String>)> {
        let mut reader = match TraceReader::new("t.gstrace".into(), bytes) {
            Ok(reader) => reader,
            Err(e) => return vec![(0, Err(e.to_string()))],
        };
        let mut out = Vec::new();
        while let Some(row) = reader.next() {
            out.push((reader.line(), row.map_err(|e| e.to_string())));
        }
        out
    }

    fn every_kind_of_sample() -> Vec<Sample> {
        let mut full = Sample::new(1_796_025_905.075_912_3, 7);
        for (i, m) in Metric::ALL.into_iter().enumerate() {
            // Integers, fractions, zero, 2^53 and past it, as they come.
            let v = match i % 5 {
                0 => i as f64,
                1 => 0.1 + i as f64 / 7.0,
                2 => 0.0,
                3 => 9_007_199_254_740_992.0,
                _ => 1.5e19,
            };
            full.set(m, if m.is_percent() { (v % 100.0).abs() } else { v });
        }
        full.clk_reasons = Some(u64::MAX);
        full.processes = Some(Arc::new(vec![GpuProcess {
            pid: 4242,
            name: Some("python, \"train\"\n".into()),
            sm_pct: Some(87.5),
            ..Default::default()
        }]));
        full.pods = Some(Arc::new(vec![PodContainer {
            pod: "trainer-0".into(),
            namespace: "ml".into(),
            container: "trainer".into(),
        }]));
        full.nvlinks = Some(Arc::new(vec![NvlinkLink {
            link: 17,
            up: false,
            crc: Some(3),
            replay: None,
            recovery: None,
        }]));
        let bare = Sample::new(1.0, 0);
        let gpm = Sample::new(1_796_025_905.1, u32::MAX)
            .with(Metric::GpmSm, 96.293_135_817_241_3)
            .with(Metric::PowerMw, 690_839.0);
        vec![full, bare, gpm]
    }

    #[test]
    fn every_value_comes_back_bit_for_bit() {
        let samples = every_kind_of_sample();
        for flush_every in [1, 2, 100] {
            let back: Vec<Sample> = read(&written(&samples, flush_every))
                .into_iter()
                .map(|(_, row)| row.expect("a good row"))
                .collect();
            assert_eq!(back, samples, "flushed every {flush_every}");
            assert_eq!(back[0].t.to_bits(), samples[0].t.to_bits());
        }
    }

    #[test]
    fn nan_is_not_sampled_and_negative_zero_keeps_its_sign() {
        let s = Sample::new(5.0, 0)
            .with(Metric::GpmDram, f64::NAN)
            .with(Metric::PowerMw, -0.0);
        let back = read(&written(&[s], 1)).remove(0).1.expect("row");
        assert_eq!(back.get(Metric::GpmDram), None);
        assert!(back
            .get(Metric::PowerMw)
            .is_some_and(|v| v == 0.0 && v.is_sign_negative()));
    }

    #[test]
    fn rows_are_numbered_across_blocks_and_a_refused_value_names_its_row() {
        let mut samples: Vec<Sample> = (0..10)
            .map(|i| Sample::new(10.0 + f64::from(i), 0).with(Metric::PowerMw, 1.0))
            .collect();
        samples[6] = samples[6].clone().with(Metric::GpmSm, 250.0);
        samples[8] = samples[8].clone().with(Metric::PowerMw, -5.0);
        samples[9].t = 1e11;
        let rows = read(&written(&samples, 4));
        let lines: Vec<u64> = rows.iter().map(|(line, _)| *line).collect();
        assert_eq!(lines, (1..=10).collect::<Vec<_>>());
        // Blocks of 4 rows: the preamble, then a block of 4 rows, then the one holding row 7.
        let second = rows[4..].iter().find_map(|(_, r)| r.as_ref().err());
        assert!(
            second.is_some_and(|e| e.starts_with("t.gstrace: row 7 (block at byte ")
                && e.ends_with("column `gpm_sm`: a percentage above 100: 250")),
            "{second:?}"
        );
        assert!(rows[8]
            .1
            .as_ref()
            .is_err_and(|e| e.contains("row 9 ")
                && e.ends_with("column `power_mw`: must not be negative: -5")));
        assert!(rows[9].1.as_ref().is_err_and(|e| e.contains("row 10 ")
            && e.ends_with("column `t`: is past the year 2286: not unix seconds: 100000000000")));
        assert!(rows[7].1.is_ok(), "the rows between still come");
    }

    fn trace_of(rows: usize, flush_every: usize) -> Vec<u8> {
        let samples: Vec<Sample> = (0..rows)
            .map(|i| Sample::new(100.0 + i as f64 * 0.1, (i % 8) as u32).with(Metric::GpmSm, 50.5))
            .collect();
        written(&samples, flush_every)
    }

    #[test]
    fn a_file_cut_short_gives_its_whole_blocks_then_says_where_it_ends() {
        // Three blocks of four rows, of the same size; cut inside the third's rows.
        let bytes = trace_of(12, 4);
        for cut in [bytes.len() - 1, bytes.len() - 40] {
            let rows = read(&bytes[..cut]);
            let good = rows.iter().take_while(|(_, r)| r.is_ok()).count();
            assert_eq!(good, 8, "two whole blocks before the cut at {cut}");
            let last = rows
                .last()
                .and_then(|(_, r)| r.as_ref().err())
                .expect("an error");
            assert!(last.contains("(from row 9): the file ends "), "{last}");
            assert_eq!(rows.len(), 9, "nothing after the error");
        }
        // Cut inside a block's own header.
        let payload = (bytes.len() - first_block(&bytes)) / 3 - BLOCK_HEADER_BYTES;
        let cut = bytes.len() - payload - 5;
        let rows = read(&bytes[..cut]);
        assert!(rows[8]
            .1
            .as_ref()
            .is_err_and(|e| e.contains("7 bytes into the block's 12-byte header")));
    }

    /// Where the first block starts: after the preamble and the header's text.
    fn first_block(bytes: &[u8]) -> usize {
        PREAMBLE_BYTES + u32_at(bytes, 12) as usize
    }

    #[test]
    fn a_damaged_block_is_named_by_its_byte_and_first_row() {
        let mut bytes = trace_of(12, 4);
        let block = (bytes.len() - first_block(&bytes)) / 3;
        let second = first_block(&bytes) + block;
        bytes[second + BLOCK_HEADER_BYTES + 3] ^= 0x40;
        let rows = read(&bytes);
        assert_eq!(rows.len(), 5, "the first block's rows, then the error");
        let e = rows[4].1.as_ref().expect_err("damaged");
        assert_eq!(
            e,
            &format!("t.gstrace: block at byte {second} (from row 5): its checksum does not match: damaged on disk or in a copy")
        );
        // A length no writer writes is refused before anything is allocated for it.
        let mut huge = trace_of(4, 4);
        let at = first_block(&huge);
        huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let rows = read(&huge);
        assert!(rows[0]
            .1
            .as_ref()
            .is_err_and(|e| e.contains("rows in 4294967295 bytes: damaged")));
    }

    #[test]
    fn a_header_of_another_version_or_damaged_is_refused_by_name() {
        let good = trace_of(1, 1);
        let mut newer = good.clone();
        newer[8] = 3;
        assert_eq!(
            read(&newer)[0].1.as_ref().expect_err("version 3"),
            "t.gstrace: a binary trace of layout version 3; this gpuslack reads versions 1 to 2 (a newer gpuslack wrote it: convert it to CSV there)"
        );
        let mut damaged = good.clone();
        damaged[PREAMBLE_BYTES] ^= 1;
        assert!(read(&damaged)[0]
            .1
            .as_ref()
            .is_err_and(|e| e.contains("the header is damaged")));
        assert!(read(&MAGIC)[0]
            .1
            .as_ref()
            .is_err_and(|e| e.contains("cut short in its preamble (8 of 20 bytes)")));
        assert!(read(&good[..PREAMBLE_BYTES + 3])[0]
            .1
            .as_ref()
            .is_err_and(|e| e.contains("the header is damaged")));
        // The header alone: a trace with no rows.
        assert!(read(&good[..first_block(&good)]).is_empty());
    }

    #[test]
    fn a_column_a_newer_writer_added_is_read_past() {
        for version in [OLDEST_VERSION, VERSION] {
            a_column_a_newer_writer_added_is_read_past_in(version);
        }
    }

    /// The same row in a version 1 file (before the masks grew to 128 bits) and a version 2
    /// file: a mask under 2^64 is the same bytes in both.
    fn a_column_a_newer_writer_added_is_read_past_in(version: u16) {
        // A header naming a column this build does not know, before one it does.
        let text = b"fan_rpm,power_mw";
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.extend_from_slice(&0u16.to_le_bytes());
        bytes.extend_from_slice(&(text.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(text).to_le_bytes());
        bytes.extend_from_slice(text);
        let mut row = vec![3];
        row.extend_from_slice(&10.5f64.to_le_bytes());
        row.extend_from_slice(&[0, 0b11, 0b11]);
        row.extend_from_slice(&[0xd0, 0x0f, 0x80, 0x71]);
        let mut block = (row.len() as u32).to_le_bytes().to_vec();
        block.extend_from_slice(&1u32.to_le_bytes());
        block.extend_from_slice(&crc32fast::hash(&row).to_le_bytes());
        block.extend_from_slice(&row);
        bytes.extend_from_slice(&block);
        let reader = TraceReader::new("t.gstrace".into(), bytes.as_slice()).expect("header");
        assert_eq!(reader.ignored_columns(), ["`fan_rpm`"]);
        let rows: Vec<Sample> = reader.map(|r| r.expect("row")).collect();
        assert_eq!(
            rows,
            vec![Sample::new(10.5, 3).with(Metric::PowerMw, 7232.0)]
        );
    }

    #[test]
    fn a_trace_decoded_on_threads_reads_as_on_one() {
        let bytes = trace_of(40_000, 8);
        assert!(bytes.len() > 4 * RUN_BYTES, "several runs");
        let one = read(&bytes);
        let dir = std::env::temp_dir().join(format!("gpuslack-binary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("long.gstrace");
        std::fs::write(&path, &bytes).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let mut reader = TraceReader::new("t.gstrace".into(), std::io::BufReader::new(file))
            .expect("header")
            .parallel(3);
        assert!(reader.is_parallel());
        let mut threaded = Vec::new();
        while let Some(row) = reader.next() {
            threaded.push((reader.line(), row.map_err(|e| e.to_string())));
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(threaded, one);
        assert_eq!(one.len(), 40_000);
        assert_eq!(one[39_999].0, 40_000);
    }
}
