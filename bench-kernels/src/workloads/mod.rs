//! One module per workload. Each returns its measurements or an error; none prints.

pub mod compute;
pub mod latency;
mod lt_gemm;
pub mod memory;
pub mod pcie;
pub mod seesaw;
pub mod starved;
pub mod tiny;

use cudarc::driver::LaunchConfig;

pub(crate) fn config(blocks: u32, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Median of a non-empty list (the upper median for an even count).
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}
