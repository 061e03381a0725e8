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
    fn gemm_element_sums_the_row_times_the_column() {
        let a: Vec<bf16> = [1.0, 2.0, 3.0, 4.0].map(bf16::from_f32).to_vec(); // 2×2
        let b: Vec<bf16> = [5.0, 6.0, 7.0, 8.0].map(bf16::from_f32).to_vec(); // 2×2
        assert_eq!(gemm_element(&a, &b, 2, 2, 0, 0), 19.0);
        assert_eq!(gemm_element(&a, &b, 2, 2, 1, 1), 50.0);
        assert!(relative_error(1.01, 1.0, 1e-6) > 0.0099);
    }
}
