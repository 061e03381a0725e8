//! The series budget over a simulated day (issue #30): an 8-GPU node exporting every 10 s for
//! 24 h, a new owner (job) on every GPU every 5 minutes (288 owners a GPU in the day), 2 s
//! windows. At every export it counts the series the node exposes (OTLP points of one
//! collection, `/metrics` samples) and the bytes of each form, and prints the maximum and the
//! mean; it fails if the series ever pass the budget's bound (docs/EXPORT.md, "Series budget").
//! It also counts the distinct series the node exposed within each hour and over the day: what
//! churn costs a backend that bills or indexes every series it has seen (Datadog bills custom
//! metrics by the distinct tag sets an hour; a Prometheus head keeps a series about two hours
//! after its last sample). Gauges name no owner, so they add none with a new owner.
//! The windows are the two-GPU fixture's busiest, with each GPU's owner set as the agent would.
//!
//! It runs the metric set `GPUSLACK_BENCH_SET` names (lean, the default; full; dcgm; datadog)
//! for `GPUSLACK_BENCH_HOURS` hours (24 unless set), and reports the gzipped size of each OTLP
//! export too (what goes over the wire with the default compression).
//!
//! `cargo bench -p gpuslack-receiver --bench series_budget` (about a minute in release);
//! `GPUSLACK_BENCH_SET=full GPUSLACK_BENCH_HOURS=2 cargo bench --profile dev -p
//! gpuslack-receiver --bench series_budget` for one set, two hours, unoptimised.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

use gpuslack_receiver::attribution::GpuProcess;
use gpuslack_receiver::device::DeviceFacts;
use gpuslack_receiver::export::catalogue::Kind;
use gpuslack_receiver::export::config::{resolve, Layer};
use gpuslack_receiver::export::otlp::payload as split;
use gpuslack_receiver::export::otlp::SharedReader;
use gpuslack_receiver::export::selection::{MetricSet, Selection};
use gpuslack_receiver::export::state::DEFAULT_OWNER_SERIES;
use gpuslack_receiver::export::{otlp, prometheus, ExportState};
use gpuslack_receiver::source::replay::replay;
use gpuslack_receiver::trace::TraceReader;
use gpuslack_receiver::{Diagnoser, Pipeline, Thresholds, WindowReport};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prost::Message;

const SCENARIOS: &[u8] = include_bytes!("../../tests/fixtures/h200x2-scenarios/samples.csv");
const GPUS: u32 = 8;
/// The simulated time, 24 h unless `GPUSLACK_BENCH_HOURS` says otherwise.
fn day_s() -> u32 {
    std::env::var("GPUSLACK_BENCH_HOURS")
        .ok()
        .and_then(|h| h.parse::<u32>().ok())
        .unwrap_or(24)
        * 3600
}
const WINDOW_S: u32 = 2;
const EXPORT_S: u32 = 10;
const OWNER_S: u32 = 300;
/// docs/EXPORT.md's bound per GPU of each set ("What it costs"; the full set's: "Series
/// budget").
fn bound_per_gpu(set: MetricSet) -> usize {
    match set {
        MetricSet::Full => 369,
        MetricSet::Lean | MetricSet::Datadog => 45,
        // 38 dcgm-exporter fields, 4 gauges of gpuslack's, ≤ 3 owners' verdict times.
        MetricSet::Dcgm => 72,
    }
}

/// The fixture's windows of GPU 0 in its busiest stretch: the pattern each GPU repeats.
fn pattern() -> Vec<WindowReport> {
    let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
    let mut pipeline = Pipeline::new(f64::from(WINDOW_S), diagnoser);
    let mut reports = Vec::new();
    let reader = TraceReader::new("scenarios".into(), SCENARIOS).expect("trace");
    replay(reader, &mut pipeline, |r| {
        reports.push(r);
        Ok(())
    })
    .expect("replay");
    reports.retain(|r| r.stats.gpu == 0);
    reports
}

fn main() {
    let set =
        MetricSet::parse(&std::env::var("GPUSLACK_BENCH_SET").unwrap_or_else(|_| "lean".into()))
            .expect("GPUSLACK_BENCH_SET");
    let day = day_s();
    let pattern = pattern();
    let config = resolve(vec![Layer::default()], &|_| None).expect("config");
    let state = Arc::new(RwLock::new(
        ExportState::default()
            .with_owner_series(DEFAULT_OWNER_SERIES)
            .with_selection(Selection::new(set, &[], &[]).expect("the set")),
    ));
    let reader = SharedReader::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(reader.clone())
        .with_view(otlp::cardinality_view(DEFAULT_OWNER_SERIES))
        .build();
    otlp::register_for_bench(
        &opentelemetry::metrics::MeterProvider::meter(&provider, "gpuslack"),
        &state,
    );
    let facts: Vec<DeviceFacts> = (0..GPUS)
        .map(|g| DeviceFacts {
            name: Some("NVIDIA H200".into()),
            driver: Some("580.159.04".into()),
            uuid: Some(format!("GPU-{g:08x}-budget")),
            ..DeviceFacts::default()
        })
        .collect();
    let t0 = 1_796_025_900.0;
    let (mut max_series, mut sum_series, mut exports) = (0usize, 0usize, 0usize);
    let (mut max_otlp, mut sum_otlp, mut max_text, mut sum_text) = (0usize, 0usize, 0usize, 0usize);
    let mut sum_gzip = 0usize;
    let mut owners = std::collections::BTreeSet::new();
    // Distinct series (metric and attribute set, hashed) within the current hour and the day.
    let (mut hour_seen, mut day_seen) = (HashSet::new(), HashSet::new());
    let (mut max_hour, mut max_hour_gauges, mut gauges_seen) = (0usize, 0usize, HashSet::new());
    let mut hour_gauges = HashSet::new();
    let exports_an_hour = (3600 / EXPORT_S) as usize;
    let started = std::time::Instant::now();
    for w in 0..day / WINDOW_S {
        let start = t0 + f64::from(w * WINDOW_S);
        let mut state_w = state.write().expect("state");
        for gpu in 0..GPUS {
            let mut r = pattern[(w as usize + gpu as usize * 7) % pattern.len()].clone();
            r.stats.gpu = gpu;
            r.stats.start = start;
            r.stats.end = start + f64::from(WINDOW_S);
            // A new job every 5 minutes, staggered across the GPUs.
            let owner = (w * WINDOW_S + gpu * 37) / OWNER_S * 100 + gpu;
            owners.insert(owner);
            r.stats.processes = Some(Arc::new(vec![GpuProcess {
                pid: owner,
                name: Some("train".into()),
                pgid: Some(owner),
                ..GpuProcess::default()
            }]));
            r.job = Some(format!("pgid:{owner}"));
            state_w.update(&r, &facts[gpu as usize]);
        }
        drop(state_w);
        if (w * WINDOW_S) % EXPORT_S == EXPORT_S - WINDOW_S {
            let mut rm = ResourceMetrics::default();
            reader.collect(&mut rm).expect("collect");
            let request = ExportMetricsServiceRequest::from(&rm);
            let points = split::points(&request) as usize;
            assert_eq!(split::overflowed(&request), 0, "no point folded");
            let encoded = request.encode_to_vec();
            let otlp_bytes = encoded.len();
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            std::io::Write::write_all(&mut gz, &encoded).expect("gzip");
            sum_gzip += gz.finish().expect("gzip").len();
            let text = prometheus::render(
                &state.read().expect("state"),
                &config,
                prometheus::Format::Text,
            );
            for p in state.read().expect("state").points().iter() {
                let mut h = DefaultHasher::new();
                (p.def.name, &p.attributes).hash(&mut h);
                let key = h.finish();
                hour_seen.insert(key);
                day_seen.insert(key);
                if !matches!(p.def.kind, Kind::Counter) {
                    hour_gauges.insert(key);
                    gauges_seen.insert(key);
                }
            }
            if (exports + 1) % exports_an_hour == 0 {
                max_hour = max_hour.max(hour_seen.len());
                max_hour_gauges = max_hour_gauges.max(hour_gauges.len());
                hour_seen.clear();
                hour_gauges.clear();
            }
            max_series = max_series.max(points);
            sum_series += points;
            max_otlp = max_otlp.max(otlp_bytes);
            sum_otlp += otlp_bytes;
            max_text = max_text.max(text.len());
            sum_text += text.len();
            exports += 1;
        }
    }
    let agent_series = 20; // gpuslack.agent.* and the like, per node
    let bound = bound_per_gpu(set);
    assert!(
        max_series <= GPUS as usize * bound + agent_series,
        "{max_series} series at most, bound {}",
        GPUS as usize * bound
    );
    println!(
        "metric set {}: {GPUS} GPUs, {} h, export every {EXPORT_S} s, a new owner every {OWNER_S} s on each GPU ({} owners in all), --owner-series {DEFAULT_OWNER_SERIES}",
        set.name(),
        day / 3600,
        owners.len()
    );
    println!(
        "series per export: max {max_series}, mean {} ({} per GPU at most; bound {bound})",
        sum_series / exports.max(1),
        max_series / GPUS as usize
    );
    println!(
        "OTLP protobuf per export: max {max_otlp} B, mean {} B, gzipped mean {} B; /metrics text: max {max_text} B, mean {} B",
        sum_otlp / exports.max(1),
        sum_gzip / exports.max(1),
        sum_text / exports.max(1)
    );
    println!(
        "distinct series: max {max_hour} within an hour ({} per GPU; {max_hour_gauges} of them not counters), {} over the run ({} not counters)",
        max_hour / GPUS as usize,
        day_seen.len(),
        gauges_seen.len()
    );
    println!(
        "{exports} exports simulated in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
