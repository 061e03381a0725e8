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
}
