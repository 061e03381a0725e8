//! What the host pays per GPU operation: one eager kernel launch, one CUDA graph launch (of 1
//! and of 100 kernels), and one event-timed interval as `Gpu::time_ms` takes it. These are the
//! costs behind the tiny-kernel pattern: a launch costs microseconds of host time whatever the
//! kernel does. Needs a GPU; without one it says so and measures nothing.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use gpuslack_bench_kernels::{BenchError, Gpu, TinyStep};

/// Kernels per graph in the larger graph: the `tiny` workload captures 1000; 100 keeps one
/// replay short enough for criterion's sampling.
const GRAPH_KERNELS: u64 = 100;

fn main() -> ExitCode {
    let gpu = match Gpu::open(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            eprintln!("host_costs: skipped, no GPU to measure: {}", chain(&e));
            return ExitCode::SUCCESS;
        }
    };
    let mut criterion = Criterion::default().configure_from_args();
    match measure(&mut criterion, &gpu) {
        Ok(()) => {
            criterion.final_summary();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("host_costs: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, as `anyhow`'s `{:#}` prints them.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

fn measure(c: &mut Criterion, gpu: &Gpu) -> Result<(), BenchError> {
    let step = TinyStep::new(gpu)?;
    let mut x = step.buffer()?;
    // Criterion's timing closures cannot return errors: the first one is kept and reported.
    let mut failure: Option<BenchError> = None;
    let mut timed = |work: &mut dyn FnMut() -> Result<(), BenchError>| -> Duration {
        let started = Instant::now();
        if let Err(e) = work().and_then(|()| Ok(gpu.stream.synchronize()?)) {
            failure.get_or_insert(e);
        }
        started.elapsed()
    };

    let mut group = c.benchmark_group("launch");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tiny_step_eager", |b| {
        b.iter_custom(|iters| timed(&mut || (0..iters).try_for_each(|_| step.launch(&mut x))))
    });
    group.finish();

    let one = gpu.capture(|| step.launch(&mut x))?;
    let many = gpu.capture(|| (0..GRAPH_KERNELS).try_for_each(|_| step.launch(&mut x)))?;
    let mut group = c.benchmark_group("graph_launch");
    for (name, graph, kernels) in [("1_kernel", &one, 1), ("100_kernels", &many, GRAPH_KERNELS)] {
        group.throughput(Throughput::Elements(kernels));
        group.bench_function(name, |b| {
            b.iter_custom(|iters| timed(&mut || (0..iters).try_for_each(|_| Ok(graph.launch()?))))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("event_timing");
    group.bench_function("time_ms_empty", |b| {
        b.iter_custom(|iters| {
            timed(&mut || (0..iters).try_for_each(|_| gpu.time_ms(|| Ok(())).map(drop)))
        })
    });
    group.bench_function("time_ms_one_launch", |b| {
        b.iter_custom(|iters| {
            timed(&mut || {
                (0..iters).try_for_each(|_| gpu.time_ms(|| step.launch(&mut x)).map(drop))
            })
        })
    });
    group.finish();
    failure.map_or(Ok(()), Err)
}
