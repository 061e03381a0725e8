//! BabelStream on the device: copy, scale, add, triad and dot over three arrays of 2^27 f64
//! (1 GiB each, far beyond the 60 MB L2), 16-byte accesses with streaming loads and stores.
//! Bandwidth counts bytes read plus written; like BabelStream the figure is the best run's, the
//! median is reported beside it.

use std::time::Duration;

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::{config, median};
use crate::accounting::{stream_bytes, StreamKernel};
use crate::reference::{random_unit, relative_error, splitmix64, stream_element};
use crate::{verify, BenchError, Gpu, Measurement, Options, Recorder};

const N: usize = 1 << 27;
const REPS: u64 = 20;
const SCALAR: f64 = 0.4;
const THREADS: u32 = 256;
const SEEDS: [u64; 3] = [101, 202, 303];

struct Arrays {
    a: CudaSlice<f64>,
    b: CudaSlice<f64>,
    c: CudaSlice<f64>,
    partial: CudaSlice<f64>,
}

pub fn run(gpu: &Gpu, options: &Options) -> Result<Vec<Measurement>, BenchError> {
    let init = gpu.function("init_random")?;
    let n = N as i64;
    let n2 = n / 2;
    let max_blocks = gpu.sms * 64;
    // SAFETY: every element is written by init_random before it is read.
    let mut arrays = unsafe {
        Arrays {
            a: gpu.stream.alloc::<f64>(N)?,
            b: gpu.stream.alloc::<f64>(N)?,
            c: gpu.stream.alloc::<f64>(N)?,
            partial: gpu.stream.alloc::<f64>(max_blocks as usize)?,
        }
    };
    for (buf, seed) in [&mut arrays.a, &mut arrays.b, &mut arrays.c]
        .into_iter()
        .zip(SEEDS)
    {
        let mut builder = gpu.stream.launch_builder(&init);
        builder.arg(buf).arg(&n).arg(&seed);
        // SAFETY: init_random(double*, long, unsigned long long) over N doubles.
        unsafe { builder.launch(config(gpu.sms * 16, THREADS)) }?;
    }
    gpu.stream.synchronize()?;

    // Two styles of the same kernels: one 16-byte streaming access per thread per iteration,
    // and four independent ones (`_u4`). The faster style on this GPU is used for all of them.
    let styles = ["", "_u4"];
    let mut funcs = Vec::new();
    for style in styles {
        let mut set = Vec::new();
        for kernel in StreamKernel::ALL {
            let suffix = if kernel == StreamKernel::Dot {
                ""
            } else {
                style
            };
            set.push(gpu.function(&format!("stream_{}{suffix}", kernel.name()))?);
        }
        funcs.push(set);
    }
    let launch = |kernel: StreamKernel,
                  style: usize,
                  blocks: u32,
                  arrays: &mut Arrays|
     -> Result<(), BenchError> {
        let cfg = config(blocks, THREADS);
        let Arrays { a, b, c, partial } = arrays;
        let f = &funcs[style][kernel as usize];
        let mut builder = gpu.stream.launch_builder(f);
        match kernel {
            StreamKernel::Copy => builder.arg(&*a).arg(c).arg(&n2),
            StreamKernel::Scale => builder.arg(b).arg(&*c).arg(&SCALAR).arg(&n2),
            StreamKernel::Add => builder.arg(&*a).arg(&*b).arg(c).arg(&n2),
            StreamKernel::Triad => builder.arg(a).arg(&*b).arg(&*c).arg(&SCALAR).arg(&n2),
            StreamKernel::Dot => builder.arg(&*a).arg(&*b).arg(partial).arg(&n2),
        };
        // SAFETY: the argument lists match kernels.cu; every array holds N doubles (n2 double2).
        unsafe { builder.launch(cfg) }?;
        Ok(())
    };

    // Pick the style and the grid by timing copy and triad; the arrays are re-initialised
    // afterwards, so the check below is unaffected.
    let mut best = (f64::INFINITY, 0, gpu.sms * 8);
    for style in 0..styles.len() {
        for blocks in [
            gpu.sms * 4,
            gpu.sms * 8,
            gpu.sms * 16,
            gpu.sms * 32,
            gpu.sms * 64,
        ] {
            let mut ms = [StreamKernel::Copy, StreamKernel::Triad, StreamKernel::Copy]
                .into_iter()
                .map(|k| gpu.time_ms(|| launch(k, style, blocks, &mut arrays)))
                .collect::<Result<Vec<f64>, _>>()?;
            let m = median(&mut ms);
            if m < best.0 {
                best = (m, style, blocks);
            }
        }
    }
    let (style, blocks) = (best.1, best.2);
    // The sweep changed a and c: restart the sequence from the initial values.
    for (buf, seed) in [&mut arrays.a, &mut arrays.b, &mut arrays.c]
        .into_iter()
        .zip(SEEDS)
    {
        let mut builder = gpu.stream.launch_builder(&init);
        builder.arg(buf).arg(&n).arg(&seed);
        // SAFETY: as above.
        unsafe { builder.launch(config(gpu.sms * 16, THREADS)) }?;
    }

    let mut rec = Recorder::start("memory", gpu.ordinal);
    let one_rep = Duration::from_secs_f64(best.0 * 5.0 / 1e3 * 1.5);
    let reps = options.reps_for(REPS, one_rep);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); 5];
    for _ in 0..reps {
        for kernel in StreamKernel::ALL {
            times[kernel as usize]
                .push(gpu.time_ms(|| launch(kernel, style, blocks, &mut arrays))?);
        }
    }
    rec.stop();
    let check = check_results(gpu, &arrays, reps as u32, blocks)?;
    let mut out = Vec::new();
    for kernel in StreamKernel::ALL {
        let ms = &mut times[kernel as usize];
        let bytes = stream_bytes(kernel, N) as f64;
        let min = ms.iter().copied().fold(f64::INFINITY, f64::min);
        let med = median(ms);
        let measured = rec.measure(
            kernel.name(),
            bytes / (min / 1e3) / 1e12,
            "TB/s",
            &[
                ("median_tb_s", bytes / (med / 1e3) / 1e12),
                ("bytes_per_run", bytes),
                ("blocks", f64::from(blocks)),
                (
                    "accesses_per_thread_iteration",
                    if style == 1 { 4.0 } else { 1.0 },
                ),
                ("runs", reps as f64),
            ],
            check.clone(),
        );
        out.push(measured);
    }
    Ok(out)
}

/// Every element's final value follows from its random start; check a spread of them, and the
/// last dot product against the host's over every element.
fn check_results(gpu: &Gpu, arrays: &Arrays, reps: u32, blocks: u32) -> Result<String, BenchError> {
    let a = gpu.stream.clone_dtoh(&arrays.a)?;
    let b = gpu.stream.clone_dtoh(&arrays.b)?;
    let c = gpu.stream.clone_dtoh(&arrays.c)?;
    let mut worst: f64 = 0.0;
    let samples = 4096;
    for s in 0..samples {
        let i = (splitmix64(s) % N as u64) as usize;
        let start = SEEDS.map(|seed| random_unit(seed, i as u64));
        let (wa, wb, wc) = stream_element(start[0], start[1], start[2], SCALAR, reps);
        for (got, want) in [(a[i], wa), (b[i], wb), (c[i], wc)] {
            worst = worst.max(relative_error(got, want, 1e-300));
        }
    }
    let arrays_check = verify(
        "memory",
        "a, b, c after every kernel",
        worst,
        1e-12,
        samples as usize * 3,
    )?;
    let partial = gpu.stream.clone_dtoh(&arrays.partial)?;
    let got: f64 = partial[..blocks as usize].iter().sum();
    let want: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    let dot_check = verify("memory", "dot", relative_error(got, want, 1e-300), 1e-9, N)?;
    Ok(format!("{arrays_check}; {dot_check}"))
}
