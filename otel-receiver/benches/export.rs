//! One collection-and-export cycle for 8 GPUs: the SDK collecting every observable instrument
//! from the export state, and the OTLP protobuf encoding of the result (bytes printed once);
//! and the Prometheus text rendering of the same state.

use std::sync::{Arc, RwLock};

use criterion::{criterion_group, criterion_main, Criterion};
use gpuslack_receiver::device::DeviceFacts;
use gpuslack_receiver::export::config::{resolve, Layer};
use gpuslack_receiver::export::otlp::SharedReader;
use gpuslack_receiver::export::{prometheus, ExportState};
use gpuslack_receiver::pipeline::replay;
use gpuslack_receiver::trace::TraceReader;
use gpuslack_receiver::{Diagnoser, Pipeline, Thresholds, WindowReport};
use opentelemetry::metrics::MeterProvider;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prost::Message;

const SCENARIOS: &[u8] = include_bytes!("../../tests/fixtures/h200x2-scenarios/samples.csv");

/// Eight GPUs' worth of real windows: the two-GPU fixture's busiest windows, four times over;
/// and one of them with its facts, to feed again as the next window.
fn eight_gpu_state() -> (ExportState, WindowReport, DeviceFacts) {
    let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
    let mut pipeline = Pipeline::new(2.0, diagnoser);
    let mut reports: Vec<WindowReport> = Vec::new();
    let reader = TraceReader::new("scenarios".into(), SCENARIOS).expect("trace");
    replay(reader, &mut pipeline, |r| {
        reports.push(r);
        Ok(())
    })
    .expect("replay");
    // The full metric set, as docs/benchmarks.md's numbers were measured (every metric of the
    // table; the default, lean set is a seventh of it: "Series per metric set").
    let mut state = ExportState::default()
        .with_selection(gpuslack_receiver::export::selection::Selection::full());
    let facts = DeviceFacts {
        name: Some("NVIDIA H200".into()),
        driver: Some("580.159.04".into()),
        ..DeviceFacts::default()
    };
    let mut next = None;
    for copy in 0..4u32 {
        for r in reports
            .iter()
            .filter(|r| r.stats.start >= 1796025944.0 && r.stats.start < 1796025946.0)
        {
            let mut r = r.clone();
            r.stats.gpu += 2 * copy;
            let mut f = facts.clone();
            f.uuid = Some(format!("GPU-{:08x}-bench", r.stats.gpu));
            state.update(&r, &f);
            next = Some((r, f));
        }
    }
    assert_eq!(state.gpus().count(), 8);
    let (report, facts) = next.expect("a window");
    (state, report, facts)
}

fn bench(c: &mut Criterion) {
    let (state, next, facts) = eight_gpu_state();
    let state = Arc::new(RwLock::new(state));
    let config = resolve(vec![Layer::default()], &|_| None).expect("config");
    let reader = SharedReader::default();
    let provider = SdkMeterProvider::builder()
        .with_resource(gpuslack_receiver::export::otlp::resource(&config))
        .with_reader(reader.clone())
        .build();
    gpuslack_receiver::export::otlp::register_for_bench(&provider.meter("gpuslack"), &state);

    let mut rm = ResourceMetrics::default();
    reader.collect(&mut rm).expect("collect");
    let bytes = ExportMetricsServiceRequest::from(&rm).encode_to_vec().len();
    let points: usize = rm
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .map(|m| match m.data() {
            opentelemetry_sdk::metrics::data::AggregatedMetrics::F64(d) => match d {
                opentelemetry_sdk::metrics::data::MetricData::Gauge(g) => g.data_points().count(),
                opentelemetry_sdk::metrics::data::MetricData::Sum(s) => s.data_points().count(),
                _ => 0,
            },
            _ => 0,
        })
        .sum();
    let text = prometheus::render(
        &state.read().expect("state"),
        &config,
        prometheus::Format::Text,
    );
    println!("8 GPUs: {points} OTLP data points, {bytes} bytes of protobuf per export; Prometheus text {} bytes", text.len());

    c.bench_function("otlp_collect_and_encode_8_gpus", |b| {
        b.iter(|| {
            let mut rm = ResourceMetrics::default();
            reader.collect(&mut rm).expect("collect");
            ExportMetricsServiceRequest::from(&rm).encode_to_vec().len()
        })
    });
    // What a collection costs in the agent, where a window has always arrived since the last
    // one (windows every 2 s, exports every 10 s): the points are made afresh first.
    c.bench_function("otlp_collect_and_encode_8_gpus_after_a_window", |b| {
        b.iter(|| {
            state.write().expect("state").update(&next, &facts);
            let mut rm = ResourceMetrics::default();
            reader.collect(&mut rm).expect("collect");
            ExportMetricsServiceRequest::from(&rm).encode_to_vec().len()
        })
    });
    c.bench_function("prometheus_render_8_gpus", |b| {
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

criterion_group!(benches, bench);
criterion_main!(benches);
