//! Samples written as a binary trace: every value exactly as it was read (the CSV writer keeps
//! the time to 0.1 ms), in blocks that each carry their own checksum, ended at every flush so
//! that a recording stopped at any moment keeps every tick it flushed.

use std::io::{self, Write};

use super::format::{
    exact_integer, put_mask, put_varint, zigzag, BLOCK_HEADER_BYTES, CLK_REASONS, MAGIC,
    MAX_LIST_BYTES, NVLINKS, PODS, PROCESSES, TARGET_BLOCK_BYTES, VERSION,
};
use crate::sample::{Metric, Sample};
use crate::trace::SampleWriter;

/// Writes samples in the binary trace format (docs/OUTPUT.md), every metric this build knows
/// named in the header. A block ends when it reaches 64 KiB and at every [`flush`]: call it (or
/// [`BinaryTraceWriter::finish`]) before the writer goes, or the last block is not written.
///
/// [`flush`]: SampleWriter::flush
pub struct BinaryTraceWriter<W: Write> {
    out: W,
    /// The block being filled: its header's room, then its rows.
    block: Vec<u8>,
    rows: u32,
}

impl<W: Write> BinaryTraceWriter<W> {
    /// Writes the preamble and the header: the metric columns, in the order of the rows' bits.
    pub fn new(mut out: W) -> io::Result<Self> {
        let names: Vec<&str> = Metric::ALL.iter().map(|m| m.column()).collect();
        let header = names.join(",");
        let mut preamble = Vec::with_capacity(20 + header.len());
        preamble.extend_from_slice(&MAGIC);
        preamble.extend_from_slice(&VERSION.to_le_bytes());
        preamble.extend_from_slice(&0u16.to_le_bytes());
        preamble.extend_from_slice(&(header.len() as u32).to_le_bytes());
        preamble.extend_from_slice(&crc32fast::hash(header.as_bytes()).to_le_bytes());
        preamble.extend_from_slice(header.as_bytes());
        out.write_all(&preamble)?;
        Ok(BinaryTraceWriter {
            out,
            block: vec![0; BLOCK_HEADER_BYTES],
            rows: 0,
        })
    }

    /// Writes the block in progress and gives the output back.
    pub fn finish(mut self) -> io::Result<W> {
        self.end_block()?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// Writes the block in progress, if it has a row.
    fn end_block(&mut self) -> io::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let payload = &self.block[BLOCK_HEADER_BYTES..];
        let (len, crc) = (payload.len() as u32, crc32fast::hash(payload));
        self.block[0..4].copy_from_slice(&len.to_le_bytes());
        self.block[4..8].copy_from_slice(&self.rows.to_le_bytes());
        self.block[8..12].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&self.block)?;
        self.block.truncate(BLOCK_HEADER_BYTES);
        self.rows = 0;
        Ok(())
    }
}

/// A list as its JSON, refused when it is longer than a reader takes.
fn list_json<T: serde::Serialize>(column: &str, list: &[T]) -> io::Result<Vec<u8>> {
    let json = serde_json::to_vec(list).map_err(io::Error::other)?;
    if json.len() > MAX_LIST_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a `{column}` list of {} bytes: a trace holds at most {} MiB a cell",
                json.len(),
                MAX_LIST_BYTES >> 20
            ),
        ));
    }
    Ok(json)
}

impl<W: Write> SampleWriter for BinaryTraceWriter<W> {
    fn write(&mut self, sample: &Sample) -> io::Result<()> {
        // The lists first: one too long refuses the row before any of it is in the block.
        let lists = [
            (
                PROCESSES,
                sample
                    .processes
                    .as_deref()
                    .map(|l| list_json("processes", l)),
            ),
            (PODS, sample.pods.as_deref().map(|l| list_json("pods", l))),
            (
                NVLINKS,
                sample.nvlinks.as_deref().map(|l| list_json("nvlinks", l)),
            ),
        ]
        .map(|(bit, list)| list.transpose().map(|json| (bit, json)));
        let lists = {
            let [processes, pods, nvlinks] = lists;
            [processes?, pods?, nvlinks?]
        };
        let b = &mut self.block;
        put_varint(b, u64::from(sample.gpu));
        b.extend_from_slice(&sample.t.to_le_bytes());
        let mut extras = 0;
        if sample.clk_reasons.is_some() {
            extras |= CLK_REASONS;
        }
        for (bit, json) in &lists {
            if json.is_some() {
                extras |= bit;
            }
        }
        b.push(extras);
        if let Some(mask) = sample.clk_reasons {
            put_varint(b, mask);
        }
        for (_, json) in lists.iter() {
            if let Some(json) = json {
                put_varint(b, json.len() as u64);
                b.extend_from_slice(json);
            }
        }
        // A NaN is "not sampled" to every reader: it is left out, as the CSV reader reads it.
        let (mut present, mut integers) = (0u128, 0u128);
        for (metric, v) in sample.metrics().filter(|(_, v)| !v.is_nan()) {
            present |= 1 << metric as u32;
            if exact_integer(v).is_some() {
                integers |= 1 << metric as u32;
            }
        }
        put_mask(b, present);
        put_mask(b, integers);
        for (_, v) in sample.metrics().filter(|(_, v)| !v.is_nan()) {
            match exact_integer(v) {
                Some(i) => put_varint(b, zigzag(i)),
                None => b.extend_from_slice(&v.to_le_bytes()),
            }
        }
        self.rows += 1;
        // At least 12 bytes a row: a block ends before it holds MAX_BLOCK_ROWS.
        if self.block.len() - BLOCK_HEADER_BYTES >= TARGET_BLOCK_BYTES {
            self.end_block()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.end_block()?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::attribution::GpuProcess;
    use crate::trace::TraceReader;

    #[test]
    fn a_list_too_long_refuses_its_row_and_leaves_the_trace_whole() {
        let mut writer = BinaryTraceWriter::new(Vec::new()).expect("header");
        let before = Sample::new(10.0, 0).with(Metric::PowerMw, 1.0);
        writer.write(&before).expect("row");
        let mut huge = Sample::new(10.1, 0).with(Metric::PowerMw, 2.0);
        huge.processes = Some(Arc::new(vec![GpuProcess {
            pid: 1,
            name: Some("x".repeat(MAX_LIST_BYTES)),
            ..Default::default()
        }]));
        let e = writer.write(&huge).expect_err("over a MiB");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().starts_with("a `processes` list of "), "{e}");
        let after = Sample::new(10.2, 0).with(Metric::PowerMw, 3.0);
        writer.write(&after).expect("row");
        let bytes = writer.finish().expect("finish");
        let read: Vec<Sample> = TraceReader::new("t.gstrace".into(), bytes.as_slice())
            .expect("header")
            .map(|r| r.expect("a whole row"))
            .collect();
        assert_eq!(read, vec![before, after]);
    }

    #[test]
    fn a_block_ends_at_every_flush_and_once_it_holds_64_kib() {
        let blocks = |bytes: &[u8]| {
            let mut at = 20 + u32::from_le_bytes(bytes[12..16].try_into().expect("4")) as usize;
            let mut rows = Vec::new();
            while at < bytes.len() {
                let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4")) as usize;
                rows.push(u32::from_le_bytes(
                    bytes[at + 4..at + 8].try_into().expect("4"),
                ));
                at += BLOCK_HEADER_BYTES + len;
            }
            rows
        };
        let small = |i: u32| Sample::new(1.0 + f64::from(i), 0).with(Metric::UtilGpu, 1.0);
        let mut writer = BinaryTraceWriter::new(Vec::new()).expect("header");
        for i in 0..3 {
            writer.write(&small(i)).expect("row");
        }
        writer.flush().expect("flush");
        writer.flush().expect("an empty block is not written");
        for i in 3..8200 {
            writer.write(&small(i)).expect("row");
        }
        let bytes = writer.finish().expect("finish");
        // Rows of 13 bytes: the block that passes 65,536 bytes holds 5,042 of them.
        assert_eq!(blocks(&bytes), vec![3, 5042, 3155]);
        const { assert!(5042 < super::super::format::MAX_BLOCK_ROWS) };
        // Rows of 8 KiB: a block ends once it holds 64 KiB.
        let mut writer = BinaryTraceWriter::new(Vec::new()).expect("header");
        for i in 0..20 {
            let mut s = small(i);
            s.processes = Some(Arc::new(vec![GpuProcess {
                pid: i,
                name: Some("p".repeat(8 * 1024)),
                ..Default::default()
            }]));
            writer.write(&s).expect("row");
        }
        let bytes = writer.finish().expect("finish");
        assert_eq!(blocks(&bytes), vec![8, 8, 4]);
    }
}
