//! The article's anti-pattern beside its fixes, all doing the same useful work (x ← x·a + b on
//! a 10×10 tensor): (a) eager, one tiny kernel per launch; (b) the article's form, buffers
//! allocated and filled from the host every iteration; (c) the same launches captured once in
//! a CUDA graph and replayed; (d) one fused kernel doing all the steps.

use cudarc::driver::{CudaFunction, CudaSlice, PushKernelArg};

use super::config;
use crate::reference::{random_f32s, relative_error, tiny_steps};
use crate::{verify, BenchError, Gpu, Measurement, Options, Recorder};

/// Elements per tiny op: the article's 10×10 tensors.
const N: usize = 100;
/// a close to 1 so that the values keep their information over a million steps.
const A: f32 = 0.999_999_9;
const B: f32 = 1.0 - A;
const GRAPH_KERNELS: u64 = 1_000;
const FUSED_STEPS: u64 = 100_000;

/// Each part runs at least this long, with or without `--seconds`: the live readings beside
/// the rates (GPU-Util 100% at 0.3% SM activity) are this workload's point, and need a second
/// of samples. So there are no fixed counts here.
const MIN_SECONDS: f64 = 1.5;

/// Elements checked after long runs: each is an independent chain of `steps` FMAs, so a few
/// of them replay on the CPU in about a second however long the run was.
const CHECKED: usize = 16;

fn check(
    gpu: &Gpu,
    x: &CudaSlice<f32>,
    start: &[f32],
    steps: u64,
    what: &str,
) -> Result<String, BenchError> {
    let got = gpu.stream.clone_dtoh(x)?;
    let got = &got[..CHECKED];
    let worst = got
        .iter()
        .zip(start)
        .map(|(g, s)| relative_error(f64::from(*g), f64::from(tiny_steps(*s, A, B, steps)), 1e-30))
        .fold(0.0, f64::max);
    // fmaf on the GPU and mul_add on the CPU are the same IEEE operation: results are exact.
    verify("tiny", what, worst, 0.0, got.len())
}

/// One eager tiny op: a `tiny_step` launch over a buffer of `N` floats. Public so that the
/// host-cost benches (`benches/host_costs.rs`) time exactly what the eager form runs.
pub struct TinyStep<'g> {
    gpu: &'g Gpu,
    function: CudaFunction,
}

impl<'g> TinyStep<'g> {
    pub fn new(gpu: &'g Gpu) -> Result<TinyStep<'g>, BenchError> {
        Ok(TinyStep {
            gpu,
            function: gpu.function("tiny_step")?,
        })
    }

    /// A buffer of `N` random floats on the GPU for the op to work on.
    pub fn buffer(&self) -> Result<CudaSlice<f32>, BenchError> {
        Ok(self.gpu.stream.clone_htod(&random_f32s(11, N))?)
    }

    /// Queues one launch on the GPU's stream.
    pub fn launch(&self, x: &mut CudaSlice<f32>) -> Result<(), BenchError> {
        let n = N as i32;
        let mut builder = self.gpu.stream.launch_builder(&self.function);
        builder.arg(x).arg(&A).arg(&B).arg(&n);
        // SAFETY: tiny_step(float*, float, float, int) with a buffer of N floats.
        unsafe { builder.launch(config(1, 128)) }?;
        Ok(())
    }
}

pub fn run(gpu: &Gpu, options: &Options) -> Result<Vec<Measurement>, BenchError> {
    let seconds = options.seconds.unwrap_or(MIN_SECONDS).max(MIN_SECONDS);
    // Repetitions that fill `seconds`, from the measured cost of one.
    let reps = |one_s: f64| (seconds / one_s.max(1e-9)).ceil().max(1.0) as u64;
    let step = TinyStep::new(gpu)?;
    let fused = gpu.function("tiny_fused")?;
    let cfg = config(1, 128);
    let n = N as i32;
    let start = random_f32s(11, N);
    let mut out = Vec::new();
    let launch = |x: &mut CudaSlice<f32>| step.launch(x);

    // (a) eager: one launch per op, from one host thread.
    let mut x = gpu.stream.clone_htod(&start)?;
    launch(&mut x)?;
    gpu.stream.synchronize()?;
    let mut x = gpu.stream.clone_htod(&start)?;
    let mut rec = Recorder::start("tiny", gpu.ordinal);
    let probe = gpu.wall_s(|| (0..1000).try_for_each(|_| launch(&mut x)))?;
    let launches = reps(probe / 1000.0);
    let t = gpu.wall_s(|| (0..launches).try_for_each(|_| launch(&mut x)))?;
    rec.stop();
    let checked = check(gpu, &x, &start, 1000 + launches, "x after every launch")?;
    let eager_work = N as f64 * launches as f64 / t;
    out.push(rec.measure(
        "eager",
        launches as f64 / t,
        "kernels/s",
        &[
            ("us_per_kernel", t * 1e6 / launches as f64),
            ("useful_updates_per_s", eager_work),
        ],
        checked,
    ));

    // (b) the article's form: tensors made on the host and copied over every iteration.
    let mut rec = Recorder::start("tiny", gpu.ordinal);
    let mut host = start.clone();
    let mut last = Vec::new();
    let mut article_form = |iters: u64| {
        gpu.wall_s(|| {
            for i in 0..iters {
                host[0] = i as f32 * 1e-3;
                let mut buf = gpu.stream.clone_htod(&host)?;
                launch(&mut buf)?;
                if i + 1 == iters {
                    last = gpu.stream.clone_dtoh(&buf)?;
                }
            }
            Ok(())
        })
    };
    let probe = article_form(1000)?;
    let iters = reps(probe / 1000.0);
    let t = article_form(iters)?;
    rec.stop();
    let worst = last
        .iter()
        .zip(&host)
        .map(|(g, h)| relative_error(f64::from(*g), f64::from(h.mul_add(A, B)), 1e-30))
        .fold(0.0, f64::max);
    let checked = verify("tiny", "last iteration's tensor", worst, 0.0, last.len())?;
    out.push(rec.measure(
        "alloc_copy_per_step",
        iters as f64 / t,
        "kernels/s",
        &[
            ("us_per_iteration", t * 1e6 / iters as f64),
            ("useful_updates_per_s", N as f64 * iters as f64 / t),
        ],
        checked,
    ));

    // (c) a CUDA graph of GRAPH_KERNELS launches, captured once and replayed.
    let mut x = gpu.stream.clone_htod(&start)?;
    let graph = gpu.capture(|| (0..GRAPH_KERNELS).try_for_each(|_| launch(&mut x)))?;
    graph.launch()?;
    gpu.stream.synchronize()?;
    let mut rec = Recorder::start("tiny", gpu.ordinal);
    let probe = gpu.wall_s(|| (0..10).try_for_each(|_| Ok(graph.launch()?)))?;
    let replays = reps(probe / 10.0);
    let t = gpu.wall_s(|| (0..replays).try_for_each(|_| Ok(graph.launch()?)))?;
    rec.stop();
    let kernels = GRAPH_KERNELS * replays;
    let checked = check(
        gpu,
        &x,
        &start,
        GRAPH_KERNELS * (replays + 11),
        "x after every replay",
    )?;
    out.push(rec.measure(
        "graph",
        kernels as f64 / t,
        "kernels/s",
        &[
            ("us_per_kernel", t * 1e6 / kernels as f64),
            ("useful_updates_per_s", N as f64 * kernels as f64 / t),
        ],
        checked,
    ));

    // (d) one fused kernel doing FUSED_STEPS steps per element.
    let mut x = gpu.stream.clone_htod(&start)?;
    let steps = FUSED_STEPS as i32;
    let fused_launch = |x: &mut CudaSlice<f32>| -> Result<(), BenchError> {
        let mut builder = gpu.stream.launch_builder(&fused);
        builder.arg(x).arg(&A).arg(&B).arg(&n).arg(&steps);
        // SAFETY: tiny_fused(float*, float, float, int, int) with a buffer of N floats.
        unsafe { builder.launch(cfg) }?;
        Ok(())
    };
    let mut rec = Recorder::start("tiny", gpu.ordinal);
    let probe_ms = gpu.time_ms(|| fused_launch(&mut x))?;
    // Checked after one launch: replaying every timed step on the CPU would take longer than
    // the benchmark (a second of launches is ~10^9 steps).
    let checked = check(gpu, &x, &start, FUSED_STEPS, "x after one fused launch")?;
    let launches = reps(probe_ms / 1e3);
    let ms = gpu.time_ms(|| (0..launches).try_for_each(|_| fused_launch(&mut x)))?;
    rec.stop();
    let fused_work = N as f64 * (FUSED_STEPS * launches) as f64 / (ms / 1e3);
    out.push(rec.measure(
        "fused",
        fused_work,
        "updates/s",
        &[
            ("us_per_launch", ms * 1e3 / launches as f64),
            ("useful_updates_per_s", fused_work),
            ("useful_work_vs_eager", fused_work / eager_work),
        ],
        checked,
    ));
    Ok(out)
}
