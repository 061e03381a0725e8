//! Writes the benchmarks' generated trace to stdout: `cargo run --release -p gpuslack-receiver
//! --example gen_trace -- [UNITS] [GPUS] > trace.csv`, where a unit is ten minutes at 10 Hz of
//! 8 GPUs (48,000 samples). Used for the peak-RSS figures in docs/benchmarks.md.

#[path = "../benches/support/trace_gen.rs"]
mod trace_gen;

use std::io::{BufWriter, Write};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let units: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let gpus: u32 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(trace_gen::UNIT_GPUS);
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let rows = trace_gen::write_trace(&mut out, gpus, units * trace_gen::UNIT_SECONDS)?;
    out.flush()?;
    eprintln!("{rows} samples");
    Ok(())
}
