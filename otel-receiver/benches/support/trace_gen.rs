//! A generated multi-GPU trace for the offline benchmarks: 8 GPUs (or any number) sampled at
//! 10 Hz with the 23 columns a GPM-capable recorder writes (the two-GPU fixture's header),
//! cycling each GPU through idle, compute, memory, tiny-kernel and starved phases so that every
//! rule of the diagnosis runs. Deterministic (a fixed xorshift seed): the same size gives the
//! same bytes, so figures taken on different days compare.
//!
//! Shared by `benches/offline.rs` and `examples/gen_trace.rs` (which writes files for the
//! peak-RSS measurements of `gpuslack replay`).

use std::io::{self, Write};

/// The columns written, in the order the two-GPU H200 fixture has them.
pub const HEADER: &str = "t,gpu,util_gpu,util_mem,power_mw,energy_mj,sm_mhz,temp_c,pstate,clk_reasons,mem_used,nprocs,gpm_gr,gpm_sm,gpm_occ,gpm_tensor,gpm_dram,gpm_fp32,gpm_fp16,gpm_pcie_tx,gpm_pcie_rx,gpm_nvlink_tx,gpm_nvlink_rx";

/// Ten minutes of an 8-GPU node at 10 Hz: the unit of trace size in docs/benchmarks.md.
pub const UNIT_SECONDS: u32 = 600;
pub const UNIT_GPUS: u32 = 8;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Writes `seconds` of `gpus` GPUs at 10 Hz; returns the number of samples (rows).
pub fn write_trace(out: &mut impl Write, gpus: u32, seconds: u32) -> io::Result<u64> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    writeln!(out, "{HEADER}")?;
    let mut energy: Vec<f64> = (0..gpus).map(|g| 1.0e8 + f64::from(g) * 1.0e6).collect();
    let start = 1_796_025_905.075_9_f64;
    let mut rows = 0;
    let mut line = String::with_capacity(256);
    for tick in 0..seconds * 10 {
        for gpu in 0..gpus {
            use std::fmt::Write as _;
            let t = start + f64::from(tick) * 0.1 + f64::from(gpu) * 0.0012;
            // Phases of 40 s, offset per GPU; phase 4 is input-starved bursts.
            let phase = (tick / 400 + gpu) % 5;
            let noise = rng.next();
            let busy = match phase {
                4 => u32::from(tick % 10 < 2),
                0 => 0,
                _ => 1,
            };
            let (util, power_w, sm, dram, tensor, pcie): (f64, f64, f64, f64, f64, f64) =
                match phase {
                    0 => (0.0, 78.0, 0.0, 0.0, 0.0, 0.5),
                    1 => (100.0, 690.0, 96.6, 18.0, 94.0, 1.0),
                    2 => (100.0, 583.0, 99.7, 89.0, 0.0, 1.0),
                    3 => (100.0, 121.0, 1.1, 0.1, 0.0, 0.2),
                    _ if busy == 1 => (100.0, 300.0, 60.0, 20.0, 40.0, 900.0),
                    _ => (0.0, 125.0, 0.0, 0.0, 0.0, 3.0),
                };
            let power = power_w * (1.0 + 0.02 * (noise - 0.5));
            energy[gpu as usize] += power * 100.0;
            line.clear();
            let _ = write!(
                line,
                "{t:.4},{gpu},{util},{},{},{},{},{},0,{},{},{}",
                (util * 0.3).round(),
                (power * 1000.0).round(),
                energy[gpu as usize].round(),
                if util > 0.0 { 1980 } else { 345 },
                38 + phase,
                if phase == 1 { "0x4" } else { "0x1" },
                644_939_776 + u64::from(phase) * 1_000_000_000,
                u32::from(phase != 0),
            );
            // GPM at 10 Hz, every other row here: a column at its own cadence.
            if tick % 2 == 0 {
                let mut j = |v: f64| (v * (1.0 + 0.01 * (rng.next() - 0.5))).min(100.0);
                let _ = write!(
                    line,
                    ",{},{},{},{},{},{},{},{},{},{},{}",
                    j(sm),
                    j(sm),
                    j(sm * 0.4),
                    j(tensor),
                    j(dram),
                    j(sm * 0.1),
                    0,
                    j(pcie),
                    j(pcie * 2.5),
                    0,
                    0
                );
            } else {
                line.push_str(",,,,,,,,,,,");
            }
            line.push('\n');
            out.write_all(line.as_bytes())?;
            rows += 1;
        }
    }
    Ok(rows)
}

/// The trace in memory (the example writes to a file instead).
#[allow(dead_code)]
pub fn trace_bytes(gpus: u32, seconds: u32) -> (Vec<u8>, u64) {
    let mut bytes = Vec::new();
    // Writing to a Vec cannot fail.
    let rows = write_trace(&mut bytes, gpus, seconds).unwrap_or(0);
    (bytes, rows)
}
