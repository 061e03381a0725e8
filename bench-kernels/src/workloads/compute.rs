//! Compute-bound references: an FP32 FMA chain on the non-tensor pipes (peak on an H200: 132
//! SMs × 128 lanes × 2 flops × 1.98 GHz = 66.9 TFLOP/s) and an 8192³ GEMM on the tensor cores
//! through cuBLASLt, with the fastest of its candidate algorithms, in the 16-bit type the GPU's
//! tensor cores take: bf16 from Ampere (sm_80) on, fp16 on Volta and Turing (sm_70, sm_75).
//! FP8 (sm_89 on) is not used: bf16 already holds an H200 at its power cap (691 W of 700), the
//! state the calibration measures, and FP8 GEMMs need scaled layouts of their own.

use std::time::Duration;

use cudarc::driver::{CudaSlice, PushKernelArg};
use half::{bf16, f16};

use super::lt_gemm::LtGemm;
use super::{config, median};
use crate::accounting::{fma_chain_flops, gemm_flops};
use crate::reference::{
    fma_chain, gemm_element, random_f32s, random_halves, relative_error, splitmix64, Half,
};
use crate::{check_cublaslt, verify, BenchError, Gpu, Measurement, Options, Recorder};

const FMA_ITERS: i32 = 20_000;
const FMA_A: f32 = 0.999_9;
const FMA_B: f32 = 0.000_1;
const THREADS: u32 = 256;
const GEMM: usize = 8192;
const REPS: u64 = 20;
/// Candidate algorithms asked of cuBLASLt's heuristic, and GEMMs timed for each.
const GEMM_CANDIDATES: usize = 8;
const TUNE_REPS: u64 = 5;

pub fn run(gpu: &Gpu, options: &Options) -> Result<Vec<Measurement>, BenchError> {
    let gemm = if tensor_type(gpu.compute_capability) == "bf16" {
        gemm::<bf16>(gpu, options)?
    } else {
        gemm::<f16>(gpu, options)?
    };
    Ok(vec![fma(gpu, options)?, gemm])
}

/// The 16-bit type this GPU's tensor cores take: bf16 from Ampere (8.0) on, fp16 before.
pub fn tensor_type((major, _): (i32, i32)) -> &'static str {
    if major >= 8 {
        "bf16"
    } else {
        "fp16"
    }
}

fn fma(gpu: &Gpu, options: &Options) -> Result<Measurement, BenchError> {
    let f = gpu.function("fma_chain")?;
    // Four full waves of 2048 threads per SM.
    let blocks = gpu.sms * 8 * 4;
    let threads = (blocks * THREADS) as usize;
    let seeds = random_f32s(31, threads);
    let seed_dev = gpu.stream.clone_htod(&seeds)?;
    // SAFETY: fma_chain writes one float per thread.
    let mut out = unsafe { gpu.stream.alloc::<f32>(threads)? };
    let launch = |out: &mut CudaSlice<f32>| -> Result<(), BenchError> {
        let mut builder = gpu.stream.launch_builder(&f);
        builder
            .arg(&seed_dev)
            .arg(out)
            .arg(&FMA_ITERS)
            .arg(&FMA_A)
            .arg(&FMA_B);
        // SAFETY: fma_chain(const float*, float*, int, float, float) with one seed per thread.
        unsafe { builder.launch(config(blocks, THREADS)) }?;
        Ok(())
    };
    let warm = gpu.time_ms(|| launch(&mut out))?;
    let mut rec = Recorder::start("compute", gpu.ordinal);
    let reps = options.reps_for(REPS, Duration::from_secs_f64(warm / 1e3));
    let mut ms: Vec<f64> = (0..reps)
        .map(|_| gpu.time_queued_ms(|| launch(&mut out)))
        .collect::<Result<_, _>>()?;
    rec.stop();
    let got = gpu.stream.clone_dtoh(&out)?;
    let samples = 512;
    let worst = (0..samples)
        .map(|s| {
            let t = (splitmix64(s) % threads as u64) as usize;
            relative_error(
                f64::from(got[t]),
                f64::from(fma_chain(seeds[t], FMA_ITERS as u32, FMA_A, FMA_B)),
                1e-30,
            )
        })
        .fold(0.0, f64::max);
    let check = verify("compute", "fma chain outputs", worst, 0.0, samples as usize)?;
    let flops = fma_chain_flops(threads as u64, FMA_ITERS as u64) as f64;
    let best = ms.iter().copied().fold(f64::INFINITY, f64::min);
    let med = median(&mut ms);
    Ok(rec.measure(
        "fp32_fma",
        flops / (med / 1e3) / 1e12,
        "TFLOP/s",
        &[
            ("best_tflop_s", flops / (best / 1e3) / 1e12),
            ("flops_per_run", flops),
            ("runs", reps as f64),
        ],
        check,
    ))
}

fn gemm<T: Half>(gpu: &Gpu, options: &Options) -> Result<Measurement, BenchError> {
    check_cublaslt()?;
    let (m, n, k) = (GEMM, GEMM, GEMM);
    let a: Vec<T> = random_halves(41, m * k);
    let b: Vec<T> = random_halves(42, k * n);
    let a_dev = gpu.stream.clone_htod(&a)?;
    let b_dev = gpu.stream.clone_htod(&b)?;
    // SAFETY: every element of C is written by the GEMM (beta = 0).
    let mut c_dev = unsafe { gpu.stream.alloc::<T>(m * n)? };
    // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: pass B first, with the dimensions swapped.
    let gemm = LtGemm::<T>::new(
        gpu.stream.clone(),
        (n as u64, m as u64, k as u64),
        GEMM_CANDIDATES,
    )?;
    let flops_per_gemm = gemm_flops(m as u64, n as u64, k as u64) as f64;
    let tflop_s = |gemms: u64, ms: f64| flops_per_gemm * gemms as f64 / (ms / 1e3) / 1e12;

    // Time each candidate briefly and keep the fastest.
    let mut tuned = Vec::new();
    for algo in 0..gemm.candidates() {
        for _ in 0..2 {
            gemm.run(algo, &b_dev, &a_dev, &mut c_dev)?;
        }
        let ms = gpu.time_ms(|| {
            (0..TUNE_REPS).try_for_each(|_| gemm.run(algo, &b_dev, &a_dev, &mut c_dev))
        })?;
        tuned.push(tflop_s(TUNE_REPS, ms));
    }
    let (best_algo, _) = tuned
        .iter()
        .enumerate()
        .max_by(|x, y| x.1.total_cmp(y.1))
        .unwrap_or((0, &0.0));
    let launch = |c: &mut CudaSlice<T>| gemm.run(best_algo, &b_dev, &a_dev, c);

    let warm = gpu.time_ms(|| launch(&mut c_dev))?;
    let mut rec = Recorder::start("compute", gpu.ordinal);
    let reps = options.reps_for(REPS, Duration::from_secs_f64(warm / 1e3));
    let total_ms = gpu.time_ms(|| (0..reps).try_for_each(|_| launch(&mut c_dev)))?;
    rec.stop();
    let c = gpu.stream.clone_dtoh(&c_dev)?;
    let samples = 64;
    let worst = (0..samples)
        .map(|s| {
            let idx = (splitmix64(1000 + s) % (m * n) as u64) as usize;
            let (row, col) = (idx / n, idx % n);
            relative_error(c[idx].to_f64(), gemm_element(&a, &b, k, n, row, col), 1.0)
        })
        .fold(0.0, f64::max);
    // bf16 output: 8 bits of mantissa, so ~0.4% per element (fp16: 11 bits).
    let check = verify(
        "compute",
        &format!("{} GEMM elements", T::NAME),
        worst,
        1e-2,
        samples as usize,
    )?;
    Ok(rec.measure(
        format!("{}_gemm_8192", T::NAME),
        tflop_s(reps, total_ms),
        "TFLOP/s",
        &[
            ("ms_per_gemm", total_ms / reps as f64),
            ("runs", reps as f64),
            ("algorithm", best_algo as f64),
            ("candidates", tuned.len() as f64),
            (
                "first_candidate_tflop_s",
                tuned.first().copied().unwrap_or(f64::NAN),
            ),
        ],
        check,
    ))
}
