//! Offline throughput (issue #28, part 3): a generated 8-GPU trace (ten minutes at 10 Hz,
//! 48,000 samples, `support/trace_gen.rs`) read alone, and read through the whole pipeline
//! (parse → window → diagnose) as `gpuslack replay` runs it. Throughput is in samples.
//!
//! `serial` parses on the bench's thread; `parallel` goes through a file, as `replay` opens it,
//! on every core this process may use (`GPUSLACK_TRACE_THREADS` sets the number). `jsonl`
//! also writes every window as `replay --format jsonl` does (into memory). `binary` reads the
//! same samples from the binary trace format (`.gstrace`); `staged` windows on the bench's
//! thread and diagnoses and writes on another, as `replay` does with more than one core.

#[path = "support/trace_gen.rs"]
mod trace_gen;

use std::io::Write;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpuslack_receiver::pipeline::replay_staged;
use gpuslack_receiver::report::WindowRecord;
use gpuslack_receiver::source::replay::replay;
use gpuslack_receiver::trace::{BinaryTraceWriter, SampleWriter, TraceReader};
use gpuslack_receiver::{Diagnoser, Pipeline, Thresholds};

fn pipeline() -> Pipeline {
    let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
    Pipeline::new(2.0, diagnoser)
}

fn replay_reader<R: std::io::Read>(reader: TraceReader<R>) -> usize {
    let mut pipeline = pipeline();
    let mut windows = 0;
    replay(reader, &mut pipeline, |_| {
        windows += 1;
        Ok(())
    })
    .expect("replay");
    windows
}

/// The whole of `replay --format jsonl` but the terminal: the lines gathered in a buffer,
/// cleared as `replay` writes it out; `staged`, with the diagnosis and the lines on a thread of
/// their own, as `replay` runs with more than one core. Returns the bytes written.
fn replay_jsonl<R: std::io::Read>(reader: TraceReader<R>, staged: bool) -> usize {
    let mut pipeline = pipeline();
    let mut lines = Vec::with_capacity(1 << 16);
    let mut bytes = 0;
    let sink = |r: gpuslack_receiver::WindowReport| {
        WindowRecord::of(&r).write_line(&mut lines);
        if lines.len() >= 1 << 16 {
            bytes += lines.len();
            lines.clear();
        }
        Ok(())
    };
    let replayed = if staged {
        replay_staged(reader, &mut pipeline, sink)
    } else {
        replay(reader, &mut pipeline, sink)
    };
    replayed.expect("replay");
    bytes + lines.len()
}

/// The CSV trace's samples in the binary format.
fn binary_of(csv: &[u8]) -> Vec<u8> {
    let mut writer = BinaryTraceWriter::new(Vec::new()).expect("header");
    for sample in TraceReader::new("gen".into(), csv).expect("header") {
        writer.write(&sample.expect("row")).expect("write");
    }
    writer.finish().expect("finish")
}

fn bench(c: &mut Criterion) {
    let (bytes, samples) = trace_gen::trace_bytes(trace_gen::UNIT_GPUS, trace_gen::UNIT_SECONDS);
    let path = std::env::temp_dir().join(format!("gpuslack-offline-{}.csv", std::process::id()));
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(&bytes))
        .expect("write the trace");
    let binary = binary_of(&bytes);
    let binary_path = path.with_extension("gstrace");
    std::fs::write(&binary_path, &binary).expect("write the binary trace");

    let mut group = c.benchmark_group("offline_8gpu_10min");
    group.throughput(Throughput::Elements(samples));
    group.sample_size(20);
    group.bench_function("read_serial", |b| {
        b.iter(|| {
            TraceReader::new("gen".into(), bytes.as_slice())
                .expect("header")
                .filter(Result::is_ok)
                .count()
        })
    });
    group.bench_function("replay_serial", |b| {
        b.iter(|| replay_reader(TraceReader::new("gen".into(), bytes.as_slice()).expect("header")))
    });
    group.bench_function("replay_jsonl_serial", |b| {
        b.iter(|| {
            replay_jsonl(
                TraceReader::new("gen".into(), bytes.as_slice()).expect("header"),
                false,
            )
        })
    });
    group.bench_function("read_parallel", |b| {
        b.iter(|| {
            TraceReader::open(&path)
                .expect("open")
                .filter(Result::is_ok)
                .count()
        })
    });
    group.bench_function("replay_parallel", |b| {
        b.iter(|| replay_reader(TraceReader::open(&path).expect("open")))
    });
    group.bench_function("read_binary_serial", |b| {
        b.iter(|| {
            TraceReader::new("gen".into(), binary.as_slice())
                .expect("header")
                .filter(Result::is_ok)
                .count()
        })
    });
    group.bench_function("replay_jsonl_binary_serial", |b| {
        b.iter(|| {
            replay_jsonl(
                TraceReader::new("gen".into(), binary.as_slice()).expect("header"),
                false,
            )
        })
    });
    group.bench_function("replay_jsonl_binary_staged", |b| {
        b.iter(|| replay_jsonl(TraceReader::open(&binary_path).expect("open"), true))
    });
    group.finish();
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&binary_path);
}

criterion_group!(benches, bench);
criterion_main!(benches);
