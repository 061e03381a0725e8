//! The metrics side of the OTLP export: one observable instrument per catalogue entry, each
//! reading the export state at every collection, and the exporter that turns each collection
//! into batches in the sending queue (`QueuedMetrics`).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use opentelemetry::metrics::Meter;
use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;

use super::super::catalogue::{self, Kind, MetricDef};
use super::super::config::Temporality;
use super::super::delivery::{Delivery, Signal};
use super::super::points::agent_points;
use super::super::queue::{Batch, Payload, SendQueue};
use super::super::sender::to_fit;
use super::super::state::ExportState;
use super::payload;
use super::warn_overflow;

/// The SDK's temporality for ours.
pub(super) fn sdk_temporality(t: Temporality) -> opentelemetry_sdk::metrics::Temporality {
    match t {
        Temporality::Cumulative => opentelemetry_sdk::metrics::Temporality::Cumulative,
        Temporality::Delta => opentelemetry_sdk::metrics::Temporality::Delta,
        Temporality::LowMemory => opentelemetry_sdk::metrics::Temporality::LowMemory,
    }
}

/// The metrics exporter: each collection becomes batches of at most `max_request_bytes` in the
/// sending queue (joining the last one waiting, up to that size), which the sender thread
/// delivers; a full queue drops its oldest, counted.
pub(super) struct QueuedMetrics {
    pub(super) queue: Arc<SendQueue<ExportMetricsServiceRequest>>,
    pub(super) delivery: Arc<Delivery>,
    pub(super) max_request_bytes: usize,
    pub(super) temporality: opentelemetry_sdk::metrics::Temporality,
    /// When a full queue was last reported.
    pub(super) overflow_logged: std::sync::Mutex<Option<std::time::Instant>>,
    pub(super) cardinality_logged: std::sync::atomic::AtomicBool,
}

impl QueuedMetrics {
    /// The SDK folded points into an overflow series: logged once, with the count.
    fn cardinality_exceeded(&self, points: u64) {
        if !self
            .cardinality_logged
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            tracing::warn!(
                points,
                "an instrument passed the SDK's cardinality limit: points were folded into one otel.metric.overflow series (a bug: the series budget should prevent it)"
            );
        }
        self.delivery.cardinality_exceeded(points);
    }

    fn overflowed(&self, batches: usize) {
        warn_overflow(
            &self.overflow_logged,
            Signal::Metrics,
            batches,
            self.queue.len(),
        );
    }
}

impl PushMetricExporter for QueuedMetrics {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let request = ExportMetricsServiceRequest::from(metrics);
        let folded = payload::overflowed(&request);
        if folded > 0 {
            self.cardinality_exceeded(folded);
        }
        let parts = to_fit(request, self.max_request_bytes);
        let total: u64 = parts.iter().map(Payload::items).sum();
        // The windows since the last collection ride with its first part.
        let mut windows = self.delivery.queued(total);
        let mut evicted = 0;
        for part in parts {
            for old in self.queue.push_joined(
                Batch::new(part, std::mem::take(&mut windows)),
                self.max_request_bytes,
            ) {
                self.delivery
                    .batch_dropped(Signal::Metrics, old.items, old.windows);
                evicted += 1;
            }
        }
        if evicted > 0 {
            self.overflowed(evicted);
        }
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> opentelemetry_sdk::metrics::Temporality {
        self.temporality
    }
}

/// Attributes as OTLP key-values, typed as the semantic conventions type them: those of
/// [`catalogue::INT_ATTRIBUTES`] as integers (`process.pid`), the rest as strings.
pub(super) fn key_values(attributes: &[(&'static str, String)]) -> Vec<KeyValue> {
    attributes
        .iter()
        .map(|(k, v)| {
            match catalogue::INT_ATTRIBUTES
                .contains(k)
                .then(|| v.parse::<i64>().ok())
                .flatten()
            {
                Some(n) => KeyValue::new(*k, n),
                // Outside text (a pod, a process name) with its controls and bidi marks
                // escaped, as on `/metrics` (`text::exported`).
                None => KeyValue::new(*k, crate::text::exported(v).into_owned()),
            }
        })
        .collect()
}

/// Raises every instrument's cardinality limit (the SDK's default is 2,000 series) to what the
/// series budget can reach: 1,024 GPUs (the pipeline's bound) times the most series one GPU
/// gives one instrument (its owners' verdict times, its pod assignments, its NVLinks' errors). Past the SDK's limit
/// points would be folded silently into one overflow series; 64 GPUs with 16 owners each
/// reached it.
pub fn cardinality_view(
    owner_series: usize,
) -> impl Fn(&opentelemetry_sdk::metrics::Instrument) -> Option<opentelemetry_sdk::metrics::Stream>
       + Send
       + Sync
       + 'static {
    let per_gpu = ((owner_series + 2) * crate::diagnosis::Class::ALL.len())
        .max(catalogue::MAX_ASSIGNMENT_SERIES)
        .max(catalogue::MAX_NVLINK_LINK_SERIES);
    let limit = crate::pipeline::MAX_GPUS * per_gpu;
    move |_| {
        opentelemetry_sdk::metrics::Stream::builder()
            .with_cardinality_limit(limit)
            .build()
            .ok()
    }
}

/// A manual reader that its maker can collect from while a meter provider holds it too: the
/// benchmarks and tests read one collection at a time, as an export would.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct SharedReader(Arc<opentelemetry_sdk::metrics::ManualReader>);

impl Default for SharedReader {
    fn default() -> Self {
        SharedReader(Arc::new(
            opentelemetry_sdk::metrics::ManualReader::builder().build(),
        ))
    }
}

impl opentelemetry_sdk::metrics::reader::MetricReader for SharedReader {
    fn register_pipeline(&self, p: std::sync::Weak<opentelemetry_sdk::metrics::Pipeline>) {
        self.0.register_pipeline(p)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, t: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(t)
    }
    fn temporality(
        &self,
        kind: opentelemetry_sdk::metrics::InstrumentKind,
    ) -> opentelemetry_sdk::metrics::Temporality {
        self.0.temporality(kind)
    }
}

/// What `start` registers, for the export benchmark's own meter provider.
#[doc(hidden)]
pub fn register_for_bench(meter: &Meter, state: &Arc<RwLock<ExportState>>) {
    register(meter, state)
}

/// Registers one observable instrument per catalogue entry, each reading the export state:
/// the GPUs' metrics and the agent's own.
pub(super) fn register(meter: &Meter, state: &Arc<RwLock<ExportState>>) {
    let every = catalogue::ALL
        .into_iter()
        .chain(catalogue::DCGM_FIELDS)
        .chain(catalogue::AGENT);
    for def in every {
        let state = state.clone();
        let agent = catalogue::AGENT.contains(&def);
        let observe = move |def: MetricDef, record: &dyn Fn(f64, &[KeyValue])| {
            let Ok(state) = state.read() else { return };
            if agent {
                for p in agent_points(&state.delivery().counts()) {
                    if p.def == def {
                        record(p.value, &key_values(&p.attributes));
                    }
                }
                return;
            }
            for p in state.points().iter().filter(|p| p.def == def) {
                record(p.value, &key_values(&p.attributes));
            }
        };
        // Integers are rounded; a count never goes below zero (NaN also becomes 0).
        let whole = |v: f64| v.round().max(0.0) as u64;
        match (def.kind, def.int) {
            (Kind::Gauge, false) => {
                meter
                    .f64_observable_gauge(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe(def, &|v, a| o.observe(v, a)))
                    .build();
            }
            (Kind::Gauge, true) => {
                meter
                    .u64_observable_gauge(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe(def, &|v, a| o.observe(whole(v), a)))
                    .build();
            }
            (Kind::Counter, false) => {
                meter
                    .f64_observable_counter(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe(def, &|v, a| o.observe(v, a)))
                    .build();
            }
            (Kind::Counter, true) => {
                meter
                    .u64_observable_counter(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe(def, &|v, a| o.observe(whole(v), a)))
                    .build();
            }
            (Kind::UpDownCounter, false) => {
                meter
                    .f64_observable_up_down_counter(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe(def, &|v, a| o.observe(v, a)))
                    .build();
            }
            (Kind::UpDownCounter, true) => {
                meter
                    .i64_observable_up_down_counter(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| {
                        observe(def, &|v, a| {
                            o.observe(whole(v).min(i64::MAX as u64) as i64, a)
                        })
                    })
                    .build();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::scope;
    use super::*;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::SdkMeterProvider;

    #[test]
    fn outside_text_in_attributes_is_sent_escaped_and_pids_as_integers() {
        let kvs = key_values(&[
            ("process.pid", "4242".to_string()),
            (
                "k8s.pod.name",
                "p\u{1b}]52;c;eA==\u{7}\r\0\u{9b}\u{202e}x".to_string(),
            ),
            ("k8s.namespace.name", "ml/é".to_string()),
        ]);
        assert_eq!(kvs[0].value, opentelemetry::Value::I64(4242));
        assert_eq!(
            kvs[1].value.as_str(),
            "p\\x1b]52;c;eA==\\x07\\r\\x00\\u{9b}\\u{202e}x"
        );
        assert_eq!(kvs[2].value.as_str(), "ml/é");
    }

    #[test]
    fn sixty_four_gpus_of_sixteen_owners_each_lose_no_point_to_the_cardinality_limit() {
        use crate::attribution::GpuProcess;
        use crate::device::DeviceFacts;
        use crate::diagnosis::{Diagnoser, Thresholds};
        use crate::pipeline::Pipeline;
        use crate::sample::{Metric, Sample};
        // 64 GPUs, each held by 16 jobs in turn (2 s each), with the counters read.
        let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
        let mut pipeline = Pipeline::new(2.0, diagnoser);
        // The full set: every owner's every counter, the most series a GPU can have.
        let mut state = ExportState::default()
            .with_owner_series(16)
            .with_selection(crate::export::selection::Selection::full());
        let facts = DeviceFacts::default();
        let jobs: Vec<Arc<Vec<GpuProcess>>> = (0..16)
            .map(|k| {
                Arc::new(vec![GpuProcess {
                    pid: 7000 + k,
                    ..GpuProcess::default()
                }])
            })
            .collect();
        for tick in 0..16u32 * 20 {
            let t = 100.0 + f64::from(tick) / 10.0;
            for gpu in 0..64 {
                let mut s = Sample::new(t, gpu)
                    .with(Metric::PowerMw, 300_000.0)
                    .with(Metric::EnergyMj, 1e9 + t * 300_000.0)
                    .with(Metric::UtilGpu, 100.0)
                    .with(Metric::Nprocs, 1.0);
                s.processes = Some(jobs[(tick / 20) as usize].clone());
                for r in pipeline.push(&s).expect("in order") {
                    state.update(&r, &facts);
                }
            }
        }
        for r in pipeline.finish() {
            state.update(&r, &facts);
        }
        let state = Arc::new(RwLock::new(state));
        let reader = SharedReader::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader.clone())
            .with_view(cardinality_view(16))
            .build();
        register(&provider.meter_with_scope(scope()), &state);
        let mut rm = ResourceMetrics::default();
        use opentelemetry_sdk::metrics::reader::MetricReader as _;
        reader.collect(&mut rm).expect("collect");
        let request = ExportMetricsServiceRequest::from(&rm);
        let otlp_points = payload::points(&request);
        let text = crate::export::prometheus::render(
            &state.read().expect("state"),
            &crate::export::config::resolve(vec![], &|_| None).expect("config"),
            crate::export::prometheus::Format::Text,
        );
        // Every sample but target_info is a point, and none is folded into an overflow series.
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("target_info"))
            .count() as u64;
        assert!(otlp_points > 20_000, "{otlp_points} points");
        assert_eq!(otlp_points, samples);
        assert_eq!(payload::overflowed(&request), 0);
        // Without the view the SDK's default of 2,000 folds the excess.
        let reader = SharedReader::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader.clone())
            .build();
        register(&provider.meter_with_scope(scope()), &state);
        let mut rm = ResourceMetrics::default();
        reader.collect(&mut rm).expect("collect");
        let folded = ExportMetricsServiceRequest::from(&rm);
        assert!(payload::points(&folded) < samples);
        assert!(payload::overflowed(&folded) > 0);
    }
}
