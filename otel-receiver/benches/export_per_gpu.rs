//! Export cost per GPU (issue #28, part 4): one OTLP collection and protobuf encoding, and one
//! Prometheus text rendering, for 1, 8 and 64 simulated GPUs, so that a node's exporter can be
//! sized on paper. The GPUs are real windows (the two-GPU fixture's, copied with new indices and
//! UUIDs). Each collection follows a window update, as in the agent (windows every 2 s, exports
//! every 10 s). The bytes of each export are printed once per size.

use std::sync::{Arc, RwLock};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gpuslack_receiver::device::DeviceFacts;
use gpuslack_receiver::export::config::{resolve, Layer};
use gpuslack_receiver::export::otlp::SharedReader;
use gpuslack_receiver::export::{prometheus, ExportState};
use gpuslack_receiver::source::replay::replay;
use gpuslack_receiver::trace::TraceReader;
use gpuslack_receiver::{Diagnoser, Pipeline, Thresholds, WindowReport};
use opentelemetry::metrics::MeterProvider;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prost::Message;

const SCENARIOS: &[u8] = include_bytes!("../../tests/fixtures/h200x2-scenarios/samples.csv");

/// The fixture's two GPUs in one busy time slot.
fn fixture_windows() -> Vec<WindowReport> {
    let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
    let mut pipeline = Pipeline::new(2.0, diagnoser);
    let mut reports: Vec<WindowReport> = Vec::new();
    let reader = TraceReader::new("scenarios".into(), SCENARIOS).expect("trace");
    replay(reader, &mut pipeline, |r| {
        reports.push(r);
        Ok(())
    })
    .expect("replay");
    reports.retain(|r| r.stats.start >= 1796025944.0 && r.stats.start < 1796025946.0);
    reports
}

/// `gpus` GPUs' windows, each with its facts.
fn windows_for(gpus: u32, fixture: &[WindowReport]) -> Vec<(WindowReport, DeviceFacts)> {
    (0..gpus)
        .map(|gpu| {
            let mut r = fixture[gpu as usize % fixture.len()].clone();
            r.stats.gpu = gpu;
            let facts = DeviceFacts {
                name: Some("NVIDIA H200".into()),
                driver: Some("580.159.04".into()),
                uuid: Some(format!("GPU-{gpu:08x}-bench")),
                ..DeviceFacts::default()
            };
            (r, facts)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let fixture = fixture_windows();
    assert!(!fixture.is_empty(), "the fixture has windows in the slot");
    let config = resolve(vec![Layer::default()], &|_| None).expect("config");
    let mut group = c.benchmark_group("export_per_gpu");
    for gpus in [1u32, 8, 64] {
        let windows = windows_for(gpus, &fixture);
        // The full metric set, as docs/benchmarks.md's numbers were measured (every metric of the
        // table; the default, lean set is a seventh of it: "Series per metric set").
        let mut state = ExportState::default()
            .with_selection(gpuslack_receiver::export::selection::Selection::full());
        for (r, f) in &windows {
            state.update(r, f);
        }
        let state = Arc::new(RwLock::new(state));
        let reader = SharedReader::default();
        let provider = SdkMeterProvider::builder()
            .with_resource(gpuslack_receiver::export::otlp::resource(&config))
            .with_reader(reader.clone())
            .build();
        gpuslack_receiver::export::otlp::register_for_bench(&provider.meter("gpuslack"), &state);
        let mut rm = ResourceMetrics::default();
        reader.collect(&mut rm).expect("collect");
        let otlp = ExportMetricsServiceRequest::from(&rm).encode_to_vec().len();
        let text = prometheus::render(
            &state.read().expect("state"),
            &config,
            prometheus::Format::Text,
        )
        .len();
        println!(
            "{gpus} GPUs: {otlp} bytes of OTLP protobuf per export ({} per GPU); Prometheus text {text} bytes ({} per GPU)",
            otlp / gpus as usize,
            text / gpus as usize
        );
        let (next, facts) = windows[windows.len() - 1].clone();
        group.bench_with_input(
            BenchmarkId::new("otlp_after_a_window", gpus),
            &gpus,
            |b, _| {
                b.iter(|| {
                    state.write().expect("state").update(&next, &facts);
                    let mut rm = ResourceMetrics::default();
                    reader.collect(&mut rm).expect("collect");
                    ExportMetricsServiceRequest::from(&rm).encode_to_vec().len()
                })
            },
        );
        group.bench_with_input(BenchmarkId::new("prometheus_text", gpus), &gpus, |b, _| {
            b.iter(|| {
                prometheus::render(
                    &state.read().expect("state"),
                    &config,
                    prometheus::Format::Text,
                )
                .len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
