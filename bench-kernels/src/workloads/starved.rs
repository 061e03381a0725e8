//! Input starvation on purpose: bursts of real work (an FMA chain sized to ~20 ms) separated by
//! host waits, the way a GPU waits for a slow DataLoader. `--duty` sets the share of time the
//! GPU gets work.

use std::time::{Duration, Instant};

use cudarc::driver::PushKernelArg;

use super::config;
use crate::reference::{fma_chain, random_f32s, relative_error};
use crate::{verify, BenchError, Gpu, Measurement, Options, Recorder};

const BURST_MS: f64 = 20.0;
const DEFAULT_SECONDS: f64 = 10.0;

pub fn run(gpu: &Gpu, options: &Options) -> Result<Vec<Measurement>, BenchError> {
    let duty = options.duty.clamp(0.01, 1.0);
    let f = gpu.function("fma_chain")?;
    let blocks = gpu.sms * 8;
    let threads = (blocks * 256) as usize;
    let seeds = random_f32s(51, threads);
    let seed_dev = gpu.stream.clone_htod(&seeds)?;
    // SAFETY: fma_chain writes one float per thread.
    let mut out = unsafe { gpu.stream.alloc::<f32>(threads)? };
    let (a, b) = (0.999_9f32, 0.000_1f32);
    let launch = |iters: i32, out: &mut cudarc::driver::CudaSlice<f32>| -> Result<(), BenchError> {
        let mut builder = gpu.stream.launch_builder(&f);
        builder.arg(&seed_dev).arg(out).arg(&iters).arg(&a).arg(&b);
        // SAFETY: as in compute::fma.
        unsafe { builder.launch(config(blocks, 256)) }?;
        Ok(())
    };
    // Size one burst to BURST_MS.
    let probe_iters = 2_000;
    let probe_ms = gpu.time_ms(|| launch(probe_iters, &mut out))?;
    let iters = ((f64::from(probe_iters) * BURST_MS / probe_ms.max(1e-3)) as i32).max(1);
    let idle = Duration::from_secs_f64(BURST_MS / 1e3 * (1.0 - duty) / duty);

    let seconds = options.seconds.unwrap_or(DEFAULT_SECONDS);
    let mut rec = Recorder::start("starved", gpu.ordinal);
    let started = Instant::now();
    let (mut busy_ms, mut bursts) = (0.0, 0u64);
    while started.elapsed().as_secs_f64() < seconds {
        busy_ms += gpu.time_ms(|| launch(iters, &mut out))?;
        bursts += 1;
        std::thread::sleep(idle);
    }
    let wall = started.elapsed().as_secs_f64();
    rec.stop();
    let got = gpu.stream.clone_dtoh(&out)?;
    let worst = (0..threads)
        .step_by(4999)
        .map(|t| {
            relative_error(
                f64::from(got[t]),
                f64::from(fma_chain(seeds[t], iters as u32, a, b)),
                1e-30,
            )
        })
        .fold(0.0, f64::max);
    let check = verify(
        "starved",
        "last burst's outputs",
        worst,
        0.0,
        threads.div_ceil(4999),
    )?;
    Ok(vec![rec.measure(
        format!("bursts_duty_{duty:.2}"),
        busy_ms / 1e3 / wall,
        "busy share",
        &[
            ("bursts", bursts as f64),
            ("burst_ms", busy_ms / bursts.max(1) as f64),
            ("wait_ms", idle.as_secs_f64() * 1e3),
        ],
        check,
    )])
}
