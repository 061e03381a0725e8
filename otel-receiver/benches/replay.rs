//! Replay throughput: both recorded H200 fixtures (about 11,800 samples) through the whole
//! pipeline (parse → window → diagnose), as `gpuslack replay` runs it. Goal: well under a second.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpuslack_receiver::pipeline::replay;
use gpuslack_receiver::trace::TraceReader;
use gpuslack_receiver::{Diagnoser, Pipeline, Thresholds};

const REFERENCE: &[u8] = include_bytes!("../../tests/fixtures/h200-reference/samples.csv");
const SCENARIOS: &[u8] = include_bytes!("../../tests/fixtures/h200x2-scenarios/samples.csv");

fn replay_bytes(name: &str, bytes: &[u8]) -> usize {
    let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
    let mut pipeline = Pipeline::new(2.0, diagnoser);
    let reader = TraceReader::new(name.into(), bytes).expect("header");
    let mut windows = 0;
    replay(reader, &mut pipeline, |_| {
        windows += 1;
        Ok(())
    })
    .expect("replay");
    windows
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Bytes(
        (REFERENCE.len() + SCENARIOS.len()) as u64,
    ));
    group.bench_function("both_h200_fixtures", |b| {
        b.iter(|| replay_bytes("reference", REFERENCE) + replay_bytes("scenarios", SCENARIOS))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
