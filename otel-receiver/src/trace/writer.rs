//! Samples written as a CSV trace.

use std::io::Write;

use super::SampleWriter;
use crate::sample::{Metric, Sample};

/// Writes samples in the trace format with every column, so any reader version can pick what it
/// knows. Numbers are written in their shortest exact form; a missing metric is an empty cell.
pub struct TraceWriter<W: Write> {
    out: W,
    line: String,
}

impl<W: Write> TraceWriter<W> {
    pub fn new(mut out: W) -> std::io::Result<Self> {
        let mut header = String::from("t,gpu,clk_reasons");
        for metric in Metric::ALL {
            header.push(',');
            header.push_str(metric.column());
        }
        header.push_str(",processes,pods,nvlinks");
        header.push('\n');
        out.write_all(header.as_bytes())?;
        Ok(TraceWriter {
            out,
            line: String::with_capacity(256),
        })
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> SampleWriter for TraceWriter<W> {
    fn write(&mut self, sample: &Sample) -> std::io::Result<()> {
        use std::fmt::Write as _;
        self.line.clear();
        // Writing into a String cannot fail.
        let _ = write!(self.line, "{:.4},{},", sample.t, sample.gpu);
        if let Some(mask) = sample.clk_reasons {
            let _ = write!(self.line, "{mask:#x}");
        }
        for metric in Metric::ALL {
            self.line.push(',');
            if let Some(v) = sample.get(metric) {
                let _ = write!(self.line, "{v}");
            }
        }
        self.line.push(',');
        if let Some(list) = &sample.processes {
            push_json(&mut self.line, list.as_slice());
        }
        self.line.push(',');
        if let Some(list) = &sample.pods {
            push_json(&mut self.line, list.as_slice());
        }
        self.line.push(',');
        if let Some(list) = &sample.nvlinks {
            push_json(&mut self.line, list.as_slice());
        }
        self.line.push('\n');
        self.out.write_all(self.line.as_bytes())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// A list as JSON in one CSV cell: quoted, its quotes doubled.
fn push_json<T: serde::Serialize>(line: &mut String, list: &[T]) {
    let json = serde_json::to_string(list).unwrap_or_else(|_| "[]".into());
    line.push('"');
    line.push_str(&json.replace('"', "\"\""));
    line.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceReader;

    #[test]
    fn what_the_writer_writes_the_reader_reads_back() {
        let a = Sample::new(1796024900.9556, 1)
            .with(Metric::PowerMw, 80813.0)
            .with(Metric::GpmSm, 12.25)
            .with(Metric::EnergyMj, 2765367.0);
        let mut b = Sample::new(1796024901.0, 0).with(Metric::UtilGpu, 100.0);
        b.clk_reasons = Some(0x4);
        b.processes = Some(std::sync::Arc::new(vec![crate::attribution::GpuProcess {
            pid: 4242,
            name: Some("python, \"train\"".into()),
            gpu_mem_bytes: Some(2.5e9),
            sm_pct: Some(87.0),
            ..Default::default()
        }]));
        b.pods = Some(std::sync::Arc::new(vec![
            crate::attribution::PodContainer {
                pod: "trainer-0".into(),
                namespace: "ml".into(),
                container: "trainer".into(),
            },
        ]));
        let mut writer = TraceWriter::new(Vec::new()).expect("header");
        writer.write(&a).expect("row");
        writer.write(&b).expect("row");
        let bytes = writer.into_inner();
        let back: Vec<Sample> = TraceReader::new("mem".into(), bytes.as_slice())
            .expect("header")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(back, vec![a, b]);
    }

    #[test]
    fn every_metric_round_trips_the_new_link_and_board_columns_included() {
        let mut s = Sample::new(1796024900.5, 2);
        for (i, m) in Metric::ALL.into_iter().enumerate() {
            s.set(
                m,
                if m.is_percent() {
                    1.5
                } else {
                    1000.0 + i as f64
                },
            );
        }
        s.nvlinks = Some(std::sync::Arc::new(vec![
            crate::sample::NvlinkLink {
                link: 0,
                up: true,
                crc: Some(0),
                replay: Some(3),
                recovery: Some(0),
            },
            crate::sample::NvlinkLink {
                link: 17,
                up: false,
                crc: None,
                replay: None,
                recovery: None,
            },
        ]));
        let mut writer = TraceWriter::new(Vec::new()).expect("header");
        writer.write(&s).expect("row");
        let bytes = writer.into_inner();
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        for column in [
            "bar1_used",
            "pcie_link_gen_max",
            "fan_pct",
            "nvlink_links_down",
        ] {
            assert!(
                text.lines().next().is_some_and(|h| h.contains(column)),
                "{column}"
            );
        }
        let back: Vec<Sample> = TraceReader::new("mem".into(), bytes.as_slice())
            .expect("header")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(back, vec![s]);
        assert_eq!(back[0].get(Metric::PcieLinkWidthMax), Some(1061.0));
    }
}
