//! Host↔device copies over PCIe: pinned and pageable host memory, both directions, 512 MiB a
//! copy. Pinned copies run asynchronously and are timed with events; pageable ones stage
//! through the driver and are timed on the host.

use std::time::Duration;

use cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED;

use crate::reference::{random_unit, relative_error, splitmix64};
use crate::{verify, BenchError, Gpu, Measurement, Options, Recorder};

const N: usize = 128 << 20; // f32: 512 MiB
const REPS: u64 = 10;

fn host_data() -> Vec<f32> {
    // Cheap but not constant: one random value per 4 KiB page, varied within it.
    (0..N)
        .map(|i| (random_unit(7, (i >> 10) as u64) + (i & 1023) as f64 * 1e-4) as f32)
        .collect()
}

fn sampled_check(got: &[f32], want: &[f32], what: &str) -> Result<String, BenchError> {
    let samples = 4096u64;
    let worst = (0..samples)
        .map(|s| {
            let i = (splitmix64(s) % N as u64) as usize;
            relative_error(f64::from(got[i]), f64::from(want[i]), 1e-30)
        })
        .fold(0.0, f64::max);
    verify("pcie", what, worst, 0.0, samples as usize)
}

pub fn run(gpu: &Gpu, options: &Options) -> Result<Vec<Measurement>, BenchError> {
    let data = host_data();
    let bytes = (N * 4) as f64;
    let mut out = Vec::new();
    let mut push = |variant: &str, (rec, gb_s): (Recorder, f64), check: String| {
        out.push(rec.measure(variant, gb_s, "GB/s", &[("bytes", bytes)], check));
    };
    // SAFETY: fully written by the copy below before any read.
    let mut dev = unsafe { gpu.stream.alloc::<f32>(N)? };

    // Pinned (write-combined for host→device, like a DataLoader's pinned buffers).
    // SAFETY: filled from `data` before use.
    let mut pinned = unsafe {
        gpu.ctx
            .alloc_pinned_with_flags::<f32>(N, CU_MEMHOSTALLOC_WRITECOMBINED)?
    };
    pinned.as_mut_slice()?.copy_from_slice(&data);
    let rate = timed_rate(gpu, options, Clock::Events, bytes, || {
        Ok(gpu.stream.memcpy_htod(&pinned, &mut dev)?)
    })?;
    let back = gpu.stream.clone_dtoh(&dev)?;
    push(
        "h2d_pinned",
        rate,
        sampled_check(&back, &data, "device copy of the pinned buffer")?,
    );

    // SAFETY: fully written by the copies below before any read.
    let mut pinned_back = unsafe { gpu.ctx.alloc_pinned_with_flags::<f32>(N, 0)? };
    let rate = timed_rate(gpu, options, Clock::Events, bytes, || {
        Ok(gpu.stream.memcpy_dtoh(&dev, &mut pinned_back)?)
    })?;
    push(
        "d2h_pinned",
        rate,
        sampled_check(pinned_back.as_slice()?, &data, "pinned host copy")?,
    );

    // Pageable: plain Vec memory, staged by the driver.
    let rate = timed_rate(gpu, options, Clock::Host, bytes, || {
        Ok(gpu.stream.memcpy_htod(&data, &mut dev)?)
    })?;
    let back = gpu.stream.clone_dtoh(&dev)?;
    push(
        "h2d_pageable",
        rate,
        sampled_check(&back, &data, "device copy of the pageable buffer")?,
    );

    let mut host_back = vec![0f32; N];
    let rate = timed_rate(gpu, options, Clock::Host, bytes, || {
        Ok(gpu.stream.memcpy_dtoh(&dev, &mut host_back)?)
    })?;
    push(
        "d2h_pageable",
        rate,
        sampled_check(&host_back, &data, "pageable host copy")?,
    );
    Ok(out)
}

/// How a copy is timed: pinned copies run asynchronously and are timed with events; pageable
/// ones are staged through the driver by the host and timed on its clock.
#[derive(Clone, Copy)]
enum Clock {
    Events,
    Host,
}

fn seconds(
    gpu: &Gpu,
    clock: Clock,
    work: impl FnOnce() -> Result<(), BenchError>,
) -> Result<f64, BenchError> {
    match clock {
        Clock::Events => Ok(gpu.time_ms(work)? / 1e3),
        Clock::Host => gpu.wall_s(work),
    }
}

/// Times `copy` once to size the run, then the run; the recorder (live readings) spans both.
/// Returns it with the run's rate in GB/s.
fn timed_rate(
    gpu: &Gpu,
    options: &Options,
    clock: Clock,
    bytes: f64,
    mut copy: impl FnMut() -> Result<(), BenchError>,
) -> Result<(Recorder, f64), BenchError> {
    let mut rec = Recorder::start("pcie", gpu.ordinal);
    let one = seconds(gpu, clock, &mut copy)?;
    let reps = options.reps_for(REPS, Duration::from_secs_f64(one));
    let run = seconds(gpu, clock, || (0..reps).try_for_each(|_| copy()))?;
    rec.stop();
    Ok((rec, bytes * reps as f64 / run / 1e9))
}
