//! CPU references for every workload, on the same pseudo-random inputs the GPU gets. A result
//! that does not match is a failed run, whatever its speed. Pure, so CI runs these checks too.

use half::bf16;

/// SplitMix64: a fast, well-mixed generator; the same seed gives the same inputs on the host
/// and, through `init_random` in kernels.cu, on the device.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A value in [0.5, 1.5) for element `i` of stream `seed`: never zero, so an unwritten output
/// cannot pass.
pub fn random_unit(seed: u64, i: u64) -> f64 {
    let bits = splitmix64(seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    0.5 + (bits >> 11) as f64 / (1u64 << 53) as f64
}

pub fn random_f32s(seed: u64, n: usize) -> Vec<f32> {
    (0..n as u64).map(|i| random_unit(seed, i) as f32).collect()
}

pub fn random_f64s(seed: u64, n: usize) -> Vec<f64> {
    (0..n as u64).map(|i| random_unit(seed, i)).collect()
}

/// A 16-bit float the tensor cores take: bf16 from Ampere (sm_80) on, fp16 before.
pub trait Half: Copy + Default + Send + Sync + cudarc::driver::DeviceRepr + 'static {
    const NAME: &'static str;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl Half for bf16 {
    const NAME: &'static str = "bf16";
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
}

impl Half for half::f16 {
    const NAME: &'static str = "fp16";
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
}

/// 16-bit inputs centred on zero, so a GEMM's sums do not grow with k.
pub fn random_halves<T: Half>(seed: u64, n: usize) -> Vec<T> {
    (0..n as u64)
        .map(|i| T::from_f64(random_unit(seed, i) - 1.0))
        .collect()
}

/// `steps` applications of x ← fma(x, a, b), exactly as `tiny_step` and `tiny_fused` do.
pub fn tiny_steps(x: f32, a: f32, b: f32, steps: u64) -> f32 {
    (0..steps).fold(x, |v, _| v.mul_add(a, b))
}

/// The value `fma_chain` writes for a thread whose seed is `seed`.
pub fn fma_chain(seed: f32, iters: u32, a: f32, b: f32) -> f32 {
    let mut v = [0f32; 8];
    for (j, x) in v.iter_mut().enumerate() {
        *x = seed + j as f32;
    }
    for _ in 0..iters {
        for x in v.iter_mut() {
            *x = x.mul_add(a, b);
        }
    }
    ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))
}

/// The BabelStream sequence copy, scale, add, triad applied `reps` times to one element.
pub fn stream_element(
    mut a: f64,
    mut b: f64,
    mut c: f64,
    scalar: f64,
    reps: u32,
) -> (f64, f64, f64) {
    for _ in 0..reps {
        c = a;
        b = scalar * c;
        c = a + b;
        a = b + scalar * c;
    }
    (a, b, c)
}

/// One element of C = A·B for row-major A (m×k) and B (k×n), summed in f64.
pub fn gemm_element<T: Half>(a: &[T], b: &[T], k: usize, n: usize, row: usize, col: usize) -> f64 {
    (0..k)
        .map(|p| a[row * k + p].to_f64() * b[p * n + col].to_f64())
        .sum()
}

/// The value `latency_init_table` writes at element `i` of the gather table: 24 random bits,
/// exact in an f32.
pub fn gather_value(seed: u64, i: u64) -> f32 {
    (splitmix64(seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93)) >> 40) as f32
}

/// The chase table's `next[i]` (`latency_init_chase`): one full cycle over `mask + 1` elements.
pub fn chase_next(i: u64, mask: u64) -> u32 {
    (i.wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407)
        & mask) as u32
}

/// Where a chain that starts at `start` is after `steps` dependent loads.
pub fn chase_end(start: u32, steps: u64, mask: u64) -> u32 {
    (0..steps).fold(start, |p, _| chase_next(u64::from(p), mask))
}

/// Bins of the scatter (`SCATTER_BINS` in kernels.cu): 32 KiB of u32, within the 48 KiB of
/// static shared memory every architecture gives a block.
pub const SCATTER_BINS: usize = 8192;

/// The scatter's item `i` (`latency_init_items`): its bin in the low 13 bits, its weight (0–15)
/// in the next 4.
pub fn scatter_item(seed: u64, i: u64) -> u32 {
    splitmix64(seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93)) as u32
}

/// The bins after one scatter of `n` items: what both scatter kernels must add up to.
pub fn scatter_histogram(seed: u64, n: u64) -> Vec<u32> {
    let mut bins = vec![0u32; SCATTER_BINS];
    for i in 0..n {
        let v = scatter_item(seed, i);
        let bin = &mut bins[v as usize & (SCATTER_BINS - 1)];
        *bin = bin.wrapping_add((v >> 13) & 15);
    }
    bins
}

/// |got − want| / max(|want|, floor): relative error that stays meaningful near zero.
pub fn relative_error(got: f64, want: f64, floor: f64) -> f64 {
    (got - want).abs() / want.abs().max(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_inputs_are_never_zero_and_repeat_per_seed() {
        let a = random_f64s(7, 1000);
        assert!(a.iter().all(|v| (0.5..1.5).contains(v)));
        assert_eq!(a, random_f64s(7, 1000));
        assert_ne!(a, random_f64s(8, 1000));
        let mean = a.iter().sum::<f64>() / a.len() as f64;
        assert!((mean - 1.0).abs() < 0.05, "{mean}");
    }

    #[test]
    fn tiny_and_fma_references_match_hand_computation() {
        assert_eq!(tiny_steps(2.0, 0.5, 1.0, 1), 2.0);
        assert_eq!(tiny_steps(2.0, 0.5, 1.0, 2), 2.0);
        assert_eq!(tiny_steps(4.0, 0.5, 0.0, 2), 1.0);
        // One iteration: chains seed+j → (seed+j)·a + b; sum over j = 8·(seed·a + b) + 28·a.
        let got = fma_chain(1.0, 1, 0.5, 0.25);
        assert_eq!(got, 8.0 * (0.5 + 0.25) + 28.0 * 0.5);
    }

    #[test]
    fn stream_sequence_matches_babelstream_gold_values() {
        // BabelStream's own check: start from 0.1, 0.2, 0.0 with scalar 0.4.
        let (a, b, c) = stream_element(0.1, 0.2, 0.0, 0.4, 1);
        assert!((c - 0.14).abs() < 1e-12 && (b - 0.04).abs() < 1e-12);
        assert!((a - (0.04 + 0.4 * 0.14)).abs() < 1e-12);
    }

    #[test]
    fn the_chase_is_one_cycle_over_the_whole_table() {
        // Hull–Dobell: every element is visited once before the chain returns to its start.
        let mask = (1u64 << 12) - 1;
        let mut seen = vec![false; 1 << 12];
        let mut p = 0u32;
        for _ in 0..(1 << 12) {
            assert!(!seen[p as usize], "element {p} visited twice");
            seen[p as usize] = true;
            p = chase_next(u64::from(p), mask);
        }
        assert_eq!(p, 0);
        assert_eq!(chase_end(0, 1 << 12, mask), 0);
        assert_eq!(
            chase_end(5, 2, mask),
            chase_next(u64::from(chase_next(5, mask)), mask)
        );
    }

    #[test]
    fn gather_values_are_exact_integers_and_the_histogram_adds_every_weight() {
        let v = gather_value(3, 12345);
        assert_eq!(v, v.trunc());
        assert!((0.0..16_777_216.0).contains(&v));
        let n = 100_000;
        let bins = scatter_histogram(9, n);
        let total: u64 = bins.iter().map(|&b| u64::from(b)).sum();
        let want: u64 = (0..n)
            .map(|i| u64::from((scatter_item(9, i) >> 13) & 15))
            .sum();
        assert_eq!(total, want);
        // Random weights 0–15 average 7.5: the check would notice a dropped item.
        assert!((total as f64 / n as f64 - 7.5).abs() < 0.1);
    }

    #[test]
    fn gemm_element_sums_the_row_times_the_column() {
        let a: Vec<bf16> = [1.0, 2.0, 3.0, 4.0].map(bf16::from_f32).to_vec(); // 2×2
        let b: Vec<bf16> = [5.0, 6.0, 7.0, 8.0].map(bf16::from_f32).to_vec(); // 2×2
        assert_eq!(gemm_element(&a, &b, 2, 2, 0, 0), 19.0);
        assert_eq!(gemm_element(&a, &b, 2, 2, 1, 1), 50.0);
        assert!(relative_error(1.01, 1.0, 1e-6) > 0.0099);
    }
}
