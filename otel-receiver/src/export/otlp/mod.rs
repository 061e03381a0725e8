//! OTLP export: metrics read from the export state at every collection (observable
//! instruments), each collection turned into batches in the bounded sending queue that the
//! sender thread delivers (`../queue.rs`, `../sender.rs`: retries, `Retry-After`, size
//! limits), and diagnosis changes as log records, built as OTLP and put in a sending queue of
//! their own that a second sender delivers the same way: an outage delays both signals and
//! loses neither. gRPC goes through tonic and needs the tokio runtime the caller has entered;
//! HTTP/protobuf through a blocking reqwest client of our own
//! ([`OtlpHttpClient`](transport::OtlpHttpClient)), which carries the custom CA and the
//! headers. What is delivered and dropped is counted in [`Delivery`].
//!
//! One module per part, as Rotel's exporters have it: [`resource`](mod@resource) (what every
//! point and record carries), [`metrics`] (the instruments and the exporter that queues each
//! collection), [`logs`] (the diagnosis-change records), [`transport`] (the HTTP and gRPC
//! clients and what their answers mean), [`payload`] (each signal's request as the queue's
//! `Payload`, and its halving); the retry loop is `../sender.rs`, the bounded queue
//! `../queue.rs`.

pub mod logs;
pub mod metrics;
pub mod payload;
pub mod resource;
pub mod transport;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use opentelemetry::metrics::MeterProvider;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

use super::config::{ExportConfig, OtlpConfig, SignalConfig};
use super::delivery::{Delivery, Signal};
use super::queue::{Batch, Payload, SendQueue};
use super::sender::{Backoff, Control, Outcome, Sender, SizeLimit, Transport};
use super::state::{ClassChange, ExportState, GpuView};
use logs::{change_record, now_unix_nanos, otlp_resource, LogsExport};
use metrics::{register, sdk_temporality, QueuedMetrics};
use transport::transport;

pub use metrics::{cardinality_view, register_for_bench, SharedReader};
use resource::scope;
pub use resource::{resource, SCHEMA_URL};

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("reading the CA certificate {path}: {source}")]
    Certificate {
        path: String,
        source: std::io::Error,
    },
    #[error("the CA certificate {path} holds no PEM certificate (expected -----BEGIN CERTIFICATE----- blocks)")]
    NotPem { path: String },
    #[error("building the HTTP client: {0}")]
    HttpClient(String),
    #[error("building the OTLP {signal} exporter: {message}")]
    Build {
        signal: &'static str,
        message: String,
    },
}

pub struct OtlpExport {
    meters: SdkMeterProvider,
    logs: Option<LogsExport>,
    delivery: Arc<Delivery>,
    queue: Arc<SendQueue<ExportMetricsServiceRequest>>,
    sending: Arc<Control>,
}

/// One empty metrics export to `cfg`'s collector, as `gpuslack doctor` sends it: whether the
/// collector is reachable, speaks TLS as configured and takes the credentials. The request
/// holds no resource and no point, so nothing lands in the backend; the answer maps to an
/// [`Outcome`] the way every export's does, with what broke HTTP where the answer did (a
/// malformed answer, a header block too large, a body over 4 MiB: filed `protocol`).
pub fn probe_metrics(cfg: &SignalConfig) -> Result<(Outcome, Option<&'static str>), OtlpError> {
    // gRPC's channel is driven by the runtime's worker while the caller's thread blocks on the
    // answer; HTTP goes through the blocking client, outside the runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| OtlpError::Build {
            signal: "metrics",
            message: format!("cannot start the probe's runtime: {e}"),
        })?;
    let delivery = Arc::new(Delivery::default());
    let mut transport = {
        let _entered = runtime.enter();
        transport::<ExportMetricsServiceRequest>(cfg, &delivery, runtime.handle())?
    };
    // An empty request encodes to no bytes at all.
    let outcome = transport.send(&[]);
    // The transport notes the cause it saw (TLS, a timeout) where its outcome is generic; the
    // attempt is filed under it, as the sender files every failed attempt.
    let outcome = match outcome {
        Outcome::Retry(fallback) | Outcome::Refused(fallback) => {
            delivery.attempt_failed(Signal::Metrics, fallback);
            let why = delivery.metrics_failing().1.unwrap_or(fallback);
            match outcome {
                Outcome::Refused(_) => Outcome::Refused(why),
                _ => Outcome::Retry(why),
            }
        }
        delivered_or_too_large => delivered_or_too_large,
    };
    Ok((outcome, delivery.last_protocol_fault()))
}

/// A full sending queue dropped its oldest `batches`: said once a minute per signal, with what
/// still waits (batches, bytes).
fn warn_overflow(
    logged: &std::sync::Mutex<Option<std::time::Instant>>,
    signal: Signal,
    batches: usize,
    (waiting, bytes): (usize, usize),
) {
    let now = std::time::Instant::now();
    let due = match logged.lock() {
        Ok(mut last) => {
            let due = last.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60));
            if due {
                *last = Some(now);
            }
            due
        }
        Err(_) => true,
    };
    if due {
        tracing::warn!(
            signal = signal.as_str(),
            dropped_batches = batches,
            waiting,
            queued_bytes = bytes,
            "the OTLP sending queue is full: its oldest batches are dropped, counted (raise --otlp-queue-mib to keep more)"
        );
    }
}

/// Starts the thread that sends what `queue` holds through `transport`.
fn spawn_sender<R: Payload>(
    queue: &Arc<SendQueue<R>>,
    delivery: &Arc<Delivery>,
    control: &Arc<Control>,
    transport: Box<dyn Transport<R>>,
    (interval, max_request_bytes): (Duration, usize),
) -> Result<(), OtlpError> {
    let sender = Sender {
        queue: queue.clone(),
        delivery: delivery.clone(),
        control: control.clone(),
        transport,
        backoff: Backoff::for_interval(interval),
        sizes: SizeLimit::new(max_request_bytes, interval),
    };
    std::thread::Builder::new()
        .name(format!("gpuslack-otlp-{}", R::SIGNAL.as_str()))
        .spawn(move || sender.run())
        .map(|_| ())
        .map_err(|e| OtlpError::Build {
            signal: R::SIGNAL.as_str(),
            message: format!("starting the sender thread: {e}"),
        })
}

impl OtlpExport {
    /// Starts exporting. For gRPC, call from within a tokio runtime context.
    pub fn start(
        config: &ExportConfig,
        cfg: &OtlpConfig,
        state: Arc<RwLock<ExportState>>,
        delivery: Arc<Delivery>,
    ) -> Result<OtlpExport, OtlpError> {
        let resource = resource(config);
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| OtlpError::Build {
            signal: "metrics",
            message: format!("no tokio runtime to send from: {e}"),
        })?;
        let queue = Arc::new(SendQueue::new(cfg.queue_bytes));
        delivery.watch_queue(Signal::Metrics, queue.level());
        let sending = Arc::new(Control::default());
        spawn_sender(
            &queue,
            &delivery,
            &sending,
            transport(&cfg.metrics, &delivery, &runtime)?,
            (cfg.interval, cfg.max_request_bytes),
        )?;
        let metrics = QueuedMetrics {
            queue: queue.clone(),
            delivery: delivery.clone(),
            max_request_bytes: cfg.max_request_bytes,
            temporality: sdk_temporality(cfg.temporality),
            overflow_logged: std::sync::Mutex::new(None),
            cardinality_logged: std::sync::atomic::AtomicBool::new(false),
        };
        let reader = PeriodicReader::builder(metrics)
            .with_interval(cfg.interval)
            .build();
        let owner_series = state.read().map(|s| s.owner_series()).unwrap_or(1);
        let meters = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_reader(reader)
            .with_view(cardinality_view(owner_series))
            .build();
        register(&meters.meter_with_scope(scope()), &state);
        let logs = match &cfg.logs {
            Some(logs_cfg) => {
                let logs = LogsExport {
                    queue: Arc::new(SendQueue::new(cfg.queue_bytes)),
                    sending: Arc::new(Control::default()),
                    resource: otlp_resource(&resource),
                    resource_schema_url: resource.schema_url().unwrap_or_default().to_string(),
                    max_request_bytes: cfg.max_request_bytes,
                    overflow_logged: std::sync::Mutex::new(None),
                };
                delivery.watch_queue(Signal::Logs, logs.queue.level());
                spawn_sender(
                    &logs.queue,
                    &delivery,
                    &logs.sending,
                    transport(logs_cfg, &delivery, &runtime)?,
                    (cfg.interval, cfg.max_request_bytes),
                )?;
                Some(logs)
            }
            None => None,
        };
        Ok(OtlpExport {
            meters,
            logs,
            delivery,
            queue,
            sending,
        })
    }

    /// A log record announcing a GPU's new verdict, with its evidence and remedy: queued for
    /// the logs' sender, joining the records that wait (up to the request size limit). A full
    /// queue drops its oldest, counted.
    pub fn log_change(&self, change: &ClassChange, view: &GpuView) {
        let Some(logs) = &self.logs else {
            return;
        };
        let record = change_record(change, view, now_unix_nanos());
        self.delivery.log_queued();
        let batch = Batch::new(logs.request(record), 0);
        // A record larger than a request may be was sent all the same, for the intake to
        // refuse; it is dropped here, counted under too_large.
        if batch.encoded.len() > logs.max_request_bytes {
            tracing::warn!(
                bytes = batch.encoded.len(),
                max_request_bytes = logs.max_request_bytes,
                gpu = change.gpu,
                "a diagnosis-change record is larger than --otlp-max-request-bytes: dropped, counted under too_large"
            );
            self.delivery
                .dropped_for(Signal::Logs, 1, 0, super::delivery::reason::TOO_LARGE);
            return;
        }
        let evicted = logs.queue.push_joined(batch, logs.max_request_bytes);
        if !evicted.is_empty() {
            for old in &evicted {
                self.delivery.batch_dropped(Signal::Logs, old.items, 0);
            }
            warn_overflow(
                &logs.overflow_logged,
                Signal::Logs,
                evicted.len(),
                logs.queue.len(),
            );
        }
    }

    /// Exports what is pending and stops, within `timeout`: a collector that hangs must not
    /// hold a restart hostage. Errors are logged, not returned: the agent is ending. Returns
    /// whether the flush finished in time; what it did not deliver is counted as dropped.
    /// The flushing thread enters `runtime` first (gRPC needs the tokio runtime entered).
    pub fn shutdown(self, timeout: Duration, runtime: tokio::runtime::Handle) -> bool {
        let delivery = self.delivery.clone();
        let sending = self.sending.clone();
        let logs_sending = self.logs.as_ref().map(|l| l.sending.clone());
        let (done, finished) = std::sync::mpsc::channel();
        // What the queue could not send by then is counted dropped (Delivery::close).
        let deadline = std::time::Instant::now() + timeout;
        let flush = move || {
            let _inside = runtime.enter();
            // The reader's shutdown collects once more: the last window goes into the queue.
            if let Err(e) = self.meters.shutdown_with_timeout(timeout) {
                tracing::warn!(error = %e, "final metrics collection failed");
            }
            self.sending.finish_by(deadline);
            if let Some(logs) = &self.logs {
                logs.sending.finish_by(deadline);
            }
            // Both senders deliver what their queue holds, side by side, until the deadline.
            let idle = || {
                self.sending.idle(&self.queue)
                    && self.logs.as_ref().is_none_or(|l| l.sending.idle(&l.queue))
            };
            while !idle() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            self.sending.stop();
            if let Some(logs) = &self.logs {
                logs.sending.stop();
            }
            let _ = done.send(());
        };
        let in_time = match std::thread::Builder::new()
            .name("gpuslack-flush".into())
            .spawn(flush)
        {
            Ok(_) => finished.recv_timeout(timeout).is_ok(),
            Err(e) => {
                tracing::warn!(error = %e, "could not start the final export");
                false
            }
        };
        // The senders stop whether or not the flush finished (a second signal cuts it short).
        sending.stop();
        if let Some(logs) = logs_sending {
            logs.stop();
        }
        if !in_time {
            tracing::warn!(
                timeout_s = timeout.as_secs_f64(),
                "the final export did not finish in time; what it carried is counted as dropped"
            );
        }
        delivery.close();
        in_time
    }
}
