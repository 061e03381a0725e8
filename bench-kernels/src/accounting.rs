//! Work and bytes per workload: the numerators of every rate we report. Pure, so CI checks them
//! without a GPU.

/// Bytes moved by one BabelStream kernel over arrays of `n` f64: each array read or written once.
pub fn stream_bytes(kernel: StreamKernel, n: usize) -> u64 {
    let arrays = match kernel {
        StreamKernel::Copy | StreamKernel::Scale | StreamKernel::Dot => 2,
        StreamKernel::Add | StreamKernel::Triad => 3,
    };
    arrays * 8 * n as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKernel {
    Copy,
    Scale,
    Add,
    Triad,
    Dot,
}

impl StreamKernel {
    pub const ALL: [StreamKernel; 5] = [
        StreamKernel::Copy,
        StreamKernel::Scale,
        StreamKernel::Add,
        StreamKernel::Triad,
        StreamKernel::Dot,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StreamKernel::Copy => "copy",
            StreamKernel::Scale => "scale",
            StreamKernel::Add => "add",
            StreamKernel::Triad => "triad",
            StreamKernel::Dot => "dot",
        }
    }
}

/// Flops of a GEMM: one multiply and one add per inner-product term.
pub fn gemm_flops(m: u64, n: u64, k: u64) -> u64 {
    2 * m * n * k
}

/// Independent FMA chains each thread of `fma_chain` runs.
pub const FMA_CHAINS: u64 = 8;

/// Flops of `fma_chain`: 8 chains of `iters` FMAs (2 flops each) per thread.
pub fn fma_chain_flops(threads: u64, iters: u64) -> u64 {
    threads * iters * FMA_CHAINS * 2
}

/// Peak FP32 rate (flop/s) of a GPU: every FP32 lane retiring one FMA per clock.
pub fn fp32_peak_flops(sms: u64, fp32_lanes_per_sm: u64, clock_mhz: f64) -> f64 {
    sms as f64 * fp32_lanes_per_sm as f64 * 2.0 * clock_mhz * 1e6
}

/// `work` per second, in units of `scale` (1e12 for tera).
pub fn rate(work: f64, seconds: f64, scale: f64) -> f64 {
    if seconds > 0.0 {
        work / seconds / scale
    } else {
        0.0
    }
}

/// What DRAM moves for a load that misses L2: the L2 fetches two 32-byte sectors (64 bytes)
/// at a time. Measured, not assumed: on an H100 (2026-12-05) Nsight Compute counted 4.82 GB of
/// DRAM traffic per launch of 67M random 4-byte gathers, which is 64 bytes a gather plus the
/// streamed indices and output (0.54 GB); 32-byte sectors would make 2.68 GB, and the pointer
/// chase likewise measured 2.21 GB against 1.11 GB. The shares of the DRAM peak therefore
/// count 64 bytes a scattered access, which makes them agree with ncu's and GPM's DRAM figure.
pub const DRAM_FETCH_BYTES: u64 = 64;

/// Bytes a latency workload moved, counted twice: those the program wanted (`useful`) and those
/// DRAM had to move for them (`dram`, whole 64-byte fetches). A random 4-byte gather's DRAM
/// bytes are 16× its useful ones for the gathered values; shares of the DRAM peak use `dram` (what the
/// memory really did, comparable to GPM's DRAM activity and Nsight Compute's DRAM throughput).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    pub useful_bytes: u64,
    pub dram_bytes: u64,
}

/// One gather of `n` 4-byte values: the index read (4 B) and output write (4 B) stream, whole
/// fetches used; each gathered value costs a fetch it does not share (`fetches: None`, random
/// indices over a table far larger than L2), or the table's `fetches` distinct 64-byte blocks
/// are each fetched once (sorted indices: neighbours in a warp share them).
pub fn gather_traffic(n: u64, fetches: Option<u64>) -> Traffic {
    let streamed = 8 * n;
    Traffic {
        useful_bytes: streamed + 4 * n,
        dram_bytes: streamed + DRAM_FETCH_BYTES * fetches.unwrap_or(n),
    }
}

/// Distinct 64-byte DRAM fetches that sorted 4-byte indices touch.
pub fn distinct_fetches(sorted: &[u32]) -> u64 {
    let per_sector = (DRAM_FETCH_BYTES / 4) as u32;
    let mut count = 0;
    let mut last = None;
    for &i in sorted {
        let sector = i / per_sector;
        if last != Some(sector) {
            count += 1;
            last = Some(sector);
        }
    }
    count
}

/// `chains` dependent chains of `steps` 4-byte loads each: every load a fetch of its own,
/// plus each chain's position read and written once.
pub fn chase_traffic(chains: u64, steps: u64) -> Traffic {
    Traffic {
        useful_bytes: 4 * chains * steps + 8 * chains,
        dram_bytes: DRAM_FETCH_BYTES * chains * steps + 8 * chains,
    }
}

/// A scatter of `n` 4-byte items into `bins` 4-byte counters: the items stream from DRAM once;
/// the counters live in L2 (32 KiB) and go to DRAM once at most.
pub fn scatter_traffic(n: u64, bins: u64) -> Traffic {
    let bytes = 4 * n + 4 * bins;
    Traffic {
        useful_bytes: bytes,
        dram_bytes: bytes,
    }
}

/// A copy of `n2` 16-byte elements: each read once and written once.
pub fn copy_traffic(n2: u64) -> Traffic {
    let bytes = 2 * 16 * n2;
    Traffic {
        useful_bytes: bytes,
        dram_bytes: bytes,
    }
}

/// `bytes` per `seconds` as a share (%) of a DRAM peak in GB/s.
pub fn share_of_peak_pct(bytes: f64, seconds: f64, peak_gb_s: f64) -> f64 {
    if peak_gb_s > 0.0 {
        100.0 * rate(bytes, seconds, 1e9) / peak_gb_s
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_bytes_count_each_array_once() {
        let n = 1 << 27;
        assert_eq!(stream_bytes(StreamKernel::Copy, n), 2 * 8 * (1 << 27));
        assert_eq!(stream_bytes(StreamKernel::Triad, n), 3 * (1u64 << 30));
        assert_eq!(stream_bytes(StreamKernel::Dot, n), 2 * (1u64 << 30));
    }

    #[test]
    fn gemm_and_fma_flops() {
        assert_eq!(gemm_flops(8192, 8192, 8192), 1_099_511_627_776);
        assert_eq!(fma_chain_flops(1024, 1000), 1024 * 1000 * 16);
        // H200: 132 SMs × 128 FP32 lanes × 2 × 1.98 GHz = 66.9 TFLOP/s.
        let peak = fp32_peak_flops(132, 128, 1980.0) / 1e12;
        assert!((peak - 66.9).abs() < 0.05, "{peak}");
        assert_eq!(rate(4.2e12, 1.0, 1e12), 4.2);
        assert_eq!(rate(1.0, 0.0, 1.0), 0.0);
    }

    #[test]
    fn a_random_gather_moves_a_fetch_per_value_and_sorted_ones_share_them() {
        let random = gather_traffic(1 << 20, None);
        assert_eq!(random.useful_bytes, 12 << 20);
        assert_eq!(random.dram_bytes, (8 + 64) << 20);
        // As ncu measured on the H100: 2^26 random gathers move 4.83 GB, not the 2.68 GB
        // that 32-byte sectors would.
        assert_eq!(gather_traffic(1 << 26, None).dram_bytes, 4_831_838_208);
        // Sorted indices 0..16 share one fetch, 16 and 31 the next, 64 a third.
        let sorted = [0, 1, 2, 15, 16, 31, 64];
        assert_eq!(distinct_fetches(&sorted), 3);
        assert_eq!(distinct_fetches(&[]), 0);
        let fixed = gather_traffic(7, Some(3));
        assert_eq!(fixed.useful_bytes, 84);
        assert_eq!(fixed.dram_bytes, 56 + 192);
    }

    #[test]
    fn chase_scatter_and_copy_count_their_bytes() {
        let chase = chase_traffic(1000, 100);
        assert_eq!(chase.useful_bytes, 400_000 + 8_000);
        assert_eq!(chase.dram_bytes, 6_400_000 + 8_000);
        assert_eq!(
            scatter_traffic(1 << 26, 8192).dram_bytes,
            (1 << 28) + 32_768
        );
        assert_eq!(copy_traffic(1 << 26).useful_bytes, 2 << 30);
        // 3.35 TB/s on an H100 SXM: 1.675 TB in half a second is half the peak.
        assert_eq!(share_of_peak_pct(1.675e12, 1.0, 3350.0), 50.0);
        assert_eq!(share_of_peak_pct(1.0, 1.0, 0.0), 0.0);
    }
}
