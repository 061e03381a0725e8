use std::io::{self, Write};

use crate::diagnosis::WindowReport;

/// A compact table, one row per GPU and window, for a terminal or a pager. Times are seconds
/// from the first window, so phases of a recording are easy to find.
pub struct TableWriter<W: Write> {
    out: W,
    origin: Option<f64>,
}

fn opt(v: Option<f64>, scale: f64, decimals: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.*}", decimals, v * scale))
}

impl<W: Write> TableWriter<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        writeln!(
            out,
            "{:>3} {:>8} {:<14} {:>6} {:>5} {:>5} {:>5} {:>6} {:>5} {:>5}  evidence",
            "gpu", "t+s", "class", "power", "P/TDP", "util", "sm", "tensor", "dram", "eff"
        )?;
        Ok(TableWriter { out, origin: None })
    }

    pub fn write(&mut self, r: &WindowReport) -> io::Result<()> {
        let origin = *self.origin.get_or_insert(r.stats.start);
        let s = &r.signals;
        let headline = r.evidence.first().map_or("", |e| e.text.as_str());
        writeln!(
            self.out,
            "{:>3} {:>8.1} {:<14} {:>6} {:>5} {:>5} {:>5} {:>6} {:>5} {:>5}  {}",
            r.stats.gpu,
            r.stats.start - origin,
            r.class.as_str(),
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
