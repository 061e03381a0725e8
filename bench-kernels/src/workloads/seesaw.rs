//! The multi-GPU seesaw: two GPUs as pipeline stages. GPU 0 works, hands its buffer to GPU 1
//! over a peer copy, then idles while GPU 1 works and hands it back; a host wait (`--bubble-ms`)
//! between hand-offs widens the bubbles. Each GPU's power alternates with the other's.

use std::time::Instant;

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::config;
use crate::reference::{random_f32s, relative_error, splitmix64};
use crate::{verify, BenchError, Gpu, Measurement, Options, Recorder};

const STAGE_MS: f64 = 30.0;
const DEFAULT_SECONDS: f64 = 10.0;
const BUFFER: usize = 64 << 20; // f32: 256 MiB handed over each time

pub fn run(first: &Gpu, second: &Gpu, options: &Options) -> Result<Vec<Measurement>, BenchError> {
    let gpus = [first, second];
    let funcs = [first.function("fma_chain")?, second.function("fma_chain")?];
    let blocks = first.sms * 8;
    let threads = (blocks * 256) as usize;
    let seeds = random_f32s(61, threads);
    let (a, b) = (0.999_9f32, 0.000_1f32);
    let mut seed_bufs = Vec::new();
    let mut outs = Vec::new();
    for g in gpus {
        seed_bufs.push(g.stream.clone_htod(&seeds)?);
        // SAFETY: written by fma_chain before it is read.
        outs.push(unsafe { g.stream.alloc::<f32>(threads)? });
    }
    let peer_access = first.enable_peer_access(second)? && second.enable_peer_access(first)?;
    let payload = random_f32s(62, BUFFER);
    let mut buffers: Vec<CudaSlice<f32>> = vec![first.stream.clone_htod(&payload)?];
    // SAFETY: written by the first hand-off before it is read.
    buffers.push(unsafe { second.stream.alloc::<f32>(BUFFER)? });

    let work = |i: usize, iters: i32, outs: &mut [CudaSlice<f32>]| -> Result<f64, BenchError> {
        gpus[i].time_ms(|| {
            let mut builder = gpus[i].stream.launch_builder(&funcs[i]);
            builder
                .arg(&seed_bufs[i])
                .arg(&mut outs[i])
                .arg(&iters)
                .arg(&a)
                .arg(&b);
            // SAFETY: as in compute::fma.
            unsafe { builder.launch(config(blocks, 256)) }?;
            Ok(())
        })
    };
    let probe = work(0, 2_000, &mut outs)?;
    let iters = ((2_000.0 * STAGE_MS / probe.max(1e-3)) as i32).max(1);
    let bubble = std::time::Duration::from_secs_f64(options.bubble_ms.max(0.0) / 1e3);

    let seconds = options.seconds.unwrap_or(DEFAULT_SECONDS);
    let mut rec = [
        Recorder::start("seesaw", first.ordinal),
        Recorder::start("seesaw", second.ordinal),
    ];
    let started = Instant::now();
    let mut busy = [0.0f64; 2];
    let (mut handoffs, mut copy_s) = (0u64, 0.0f64);
    while started.elapsed().as_secs_f64() < seconds {
        for (stage, busy_ms) in busy.iter_mut().enumerate() {
            *busy_ms += work(stage, iters, &mut outs)?;
            let next = 1 - stage;
            let copy_started = Instant::now();
            let (src, dst) = if stage == 0 {
                let (l, r) = buffers.split_at_mut(1);
                (&l[0], &mut r[0])
            } else {
                let (l, r) = buffers.split_at_mut(1);
                (&r[0], &mut l[0])
            };
            gpus[next].stream.memcpy_dtod(src, dst)?;
            gpus[next].stream.synchronize()?;
            copy_s += copy_started.elapsed().as_secs_f64();
            handoffs += 1;
            std::thread::sleep(bubble);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    rec.iter_mut().for_each(Recorder::stop);
    // The payload went back and forth unchanged: both copies must still equal it.
    let mut worst: f64 = 0.0;
    for (g, buf) in gpus.iter().zip(&buffers) {
        let got = g.stream.clone_dtoh(buf)?;
        for s in 0..1024u64 {
            let i = (splitmix64(s) % BUFFER as u64) as usize;
            worst = worst.max(relative_error(
                f64::from(got[i]),
                f64::from(payload[i]),
                1e-30,
            ));
        }
    }
    let check = verify(
        "seesaw",
        "payload after every peer hand-off",
        worst,
        0.0,
        2048,
    )?;
    let gb_s = (BUFFER * 4) as f64 * handoffs as f64 / copy_s / 1e9;
    Ok((0..2)
        .map(|i| {
            rec[i].measure(
                format!("stage_{i}_bubble_{:.0}ms", options.bubble_ms),
                busy[i] / 1e3 / wall,
                "busy share",
                &[
                    ("handoffs", handoffs as f64),
                    ("peer_copy_gb_s", gb_s),
                    ("peer_access", f64::from(u8::from(peer_access))),
                    ("stage_ms", busy[i] / (handoffs as f64 / 2.0).max(1.0)),
                ],
                check.clone(),
            )
        })
        .collect())
}
