use std::io::{self, Write};

use crate::diagnosis::{Confidence, WindowReport};

/// A compact table, one row per GPU and window, for a terminal or a pager. Times are seconds
/// from the first window, so phases of a recording are easy to find. Each verdict shows its
/// confidence (`high`, `med`, `low`): a verdict from one GPU-Util cell must not look as sure as
/// one GPM measured.
pub struct TableWriter<W: Write> {
    out: W,
    origin: Option<f64>,
}

fn opt(v: Option<f64>, scale: f64, decimals: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.*}", decimals, v * scale))
}

/// A confidence in four letters, so the column stays narrow.
fn sure(c: Confidence) -> &'static str {
    match c {
        Confidence::High => "high",
        Confidence::Medium => "med",
        Confidence::Low => "low",
    }
}

impl<W: Write> TableWriter<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        writeln!(
            out,
            "{:>3} {:>8} {:<14} {:<4} {:>6} {:>5} {:>5} {:>5} {:>6} {:>5} {:>5}  evidence",
            "gpu", "t+s", "class", "sure", "power", "P/TDP", "util", "sm", "tensor", "dram", "eff"
        )?;
        Ok(TableWriter { out, origin: None })
    }

    pub fn write(&mut self, r: &WindowReport) -> io::Result<()> {
        let origin = *self.origin.get_or_insert(r.stats.start);
        let s = &r.signals;
        let headline = r.evidence.first().map_or("", |e| e.text.as_str());
        writeln!(
            self.out,
            "{:>3} {:>8.1} {:<14} {:<4} {:>6} {:>5} {:>5} {:>5} {:>6} {:>5} {:>5}  {}",
            r.stats.gpu,
            r.stats.start - origin,
            r.class.as_str(),
            sure(r.confidence()),
            opt(s.power_w, 1.0, 0),
            opt(s.power_w.zip(r.tdp_w).map(|(p, t)| p / t), 1.0, 2),
            opt(s.util_pct, 1.0, 0),
            opt(s.sm_pct, 1.0, 1),
            opt(s.tensor_pct, 1.0, 1),
            opt(s.dram_pct, 1.0, 1),
            opt(r.efficiency, 1.0, 2),
            headline
        )
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
