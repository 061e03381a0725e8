//! OTLP export: metrics read from the export state at every collection (observable
//! instruments), each collection turned into batches in the bounded sending queue that the
//! sender thread delivers (`queue.rs`, `sender.rs`: retries, `Retry-After`, size limits), and
//! diagnosis changes as log records, built here as OTLP and put in a sending queue of their
//! own that a second sender delivers the same way: an outage delays both signals and loses
//! neither. gRPC goes through tonic and needs the tokio runtime the caller has entered;
//! HTTP/protobuf through a blocking reqwest client of our own ([`OtlpHttpClient`]), which
//! carries the custom CA and the headers. What is delivered and dropped is counted in
//! [`Delivery`].

use std::sync::{Arc, RwLock};
use std::time::Duration;

use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1 as proto;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use super::catalogue::{self, Kind, MetricDef};
use super::config::{ExportConfig, OtlpConfig, Protocol, Secret, SignalConfig, Temporality};
use super::delivery::{Delivery, RejectionLog, Signal};
use super::http_client::{no_redirects, OtlpHttpClient};
use super::points::{agent_points, event_attributes};
use super::queue::{Batch, Payload, SendQueue};
use super::sender::{
    Backoff, Control, GrpcExport, GrpcTransport, HttpTransport, Outcome, Sender, SizeLimit,
    Transport,
};
use super::split;
use super::state::{ClassChange, ExportState, GpuView};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;

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

/// The diagnosis-change records' side: their sending queue (its own, of the same bound as the
/// metrics'), its sender's control, and what every record's request carries around it.
struct LogsExport {
    queue: Arc<SendQueue<ExportLogsServiceRequest>>,
    sending: Arc<Control>,
    /// The metrics' resource, as OTLP.
    resource: opentelemetry_proto::tonic::resource::v1::Resource,
    resource_schema_url: String,
    max_request_bytes: usize,
    /// When a full queue was last reported.
    overflow_logged: std::sync::Mutex<Option<std::time::Instant>>,
}

/// The extra CA certificates of `path`, refused unless the file holds at least one that parses:
/// a wrong file must fail at start, not as a TLS error at every export.
fn load_ca(path: &std::path::Path) -> Result<Vec<u8>, OtlpError> {
    let shown = path.display().to_string();
    let pem = std::fs::read(path).map_err(|source| OtlpError::Certificate {
        path: shown.clone(),
        source,
    })?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        _ => Err(OtlpError::NotPem { path: shown }),
    }
}

/// The resource every point and record carries: host, service, the SDK's `telemetry.sdk.*`,
/// and what the user adds (`OTEL_RESOURCE_ATTRIBUTES`, the config file's `[resource]`), which
/// wins.
/// `k8s.node.name` comes from `K8S_NODE_NAME`, which the DaemonSet sets from the downward API:
/// inside a pod the host name is the pod's, and Datadog files the GPUs under the node only
/// when the node's name is on the resource (its hostname resolution checks Kubernetes
/// attributes before `host.name`).
pub fn resource(config: &ExportConfig) -> Resource {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let mut attrs = vec![
        KeyValue::new("host.name", host),
        KeyValue::new("host.arch", host_arch()),
        KeyValue::new("service.name", config.service_name.clone()),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    ];
    // The semantic conventions' host.id on Linux: the machine id, stable across reboots.
    let machine_id = std::fs::read_to_string("/etc/machine-id")
        .or_else(|_| std::fs::read_to_string("/var/lib/dbus/machine-id"));
    let machine_id = machine_id
        .map(|id| id.trim().to_string())
        .ok()
        .filter(|id| !id.is_empty());
    if let Some(id) = &machine_id {
        attrs.push(KeyValue::new("host.id", id.clone()));
    }
    attrs.push(KeyValue::new(
        "service.instance.id",
        service_instance_id(machine_id.as_deref(), &config.service_name),
    ));
    if let Ok(node) = std::env::var("K8S_NODE_NAME") {
        if !node.trim().is_empty() {
            attrs.push(KeyValue::new("k8s.node.name", node.trim().to_string()));
        }
    }
    // The user's win over ours, in one pass (a `retain` per attribute was quadratic: 3.4 s a
    // scrape with 40,000 attributes). The last of a key given twice wins.
    let theirs: std::collections::HashMap<&str, &str> = config
        .resource_attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    attrs.retain(|kv| !theirs.contains_key(kv.key.as_str()));
    let mut added = std::collections::HashSet::new();
    for (k, _) in &config.resource_attributes {
        if added.insert(k.as_str()) {
            if let Some(v) = theirs.get(k.as_str()) {
                attrs.push(KeyValue::new(
                    k.clone(),
                    crate::text::exported(v).into_owned(),
                ));
            }
        }
    }
    Resource::builder_empty()
        .with_detector(Box::new(
            opentelemetry_sdk::resource::TelemetryResourceDetector,
        ))
        .with_attributes(attrs)
        .build()
}

/// The semantic conventions release the names follow (docs/EXPORT.md).
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.42.0";

/// The instrumentation scope of every metric and record: its name, gpuslack's version, and the
/// schema its names follow, so that a backend can tell releases apart.
fn scope() -> opentelemetry::InstrumentationScope {
    opentelemetry::InstrumentationScope::builder(catalogue::SCOPE_NAME)
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_schema_url(SCHEMA_URL)
        .build()
}

/// `service.instance.id`: one agent per host, so a UUID (version 8, RFC 9562) from a SHA-256
/// of the machine id and the service name — stable across restarts (a restart must not look
/// like a new instance to a backend), unique per host, and not the machine id itself, which
/// systemd asks applications not to expose. Without a machine id (some containers), a random
/// one from the kernel, for this run.
fn service_instance_id(machine_id: Option<&str>, service_name: &str) -> String {
    let Some(machine_id) = machine_id else {
        return std::fs::read_to_string("/proc/sys/kernel/random/uuid")
            .map(|u| u.trim().to_string())
            .unwrap_or_else(|_| format!("pid-{}", std::process::id()));
    };
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("gpuslack service.instance.id\0{machine_id}\0{service_name}").as_bytes(),
    );
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest.as_ref()[..16]);
    b[6] = (b[6] & 0x0f) | 0x80; // version 8
    b[8] = (b[8] & 0x3f) | 0x80; // the RFC 9562 variant
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// `host.arch` as the semantic conventions spell it.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "x86",
        "arm" => "arm32",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        other => other,
    }
}

fn http_client(
    cfg: &SignalConfig,
    (signal, headers): (Signal, &[(String, Secret)]),
    delivery: &Arc<Delivery>,
    url: &str,
) -> Result<OtlpHttpClient, OtlpError> {
    // reqwest is built without a provider of its own (see Cargo.toml) and takes the process's.
    // An error only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = no_redirects(reqwest::blocking::Client::builder()).timeout(cfg.timeout);
    if let Some(path) = &cfg.ca_file {
        let pem = load_ca(path)?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| OtlpError::HttpClient(format!("{}: {e}", path.display())))?;
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    let client = builder
        .build()
        .map_err(|e| OtlpError::HttpClient(e.to_string()))?;
    let mut map = http::HeaderMap::new();
    for (k, v) in headers {
        // Checked when the configuration was resolved; the error names the header, not the value.
        let name = http::HeaderName::from_bytes(k.as_bytes()).map_err(|_| OtlpError::Build {
            signal: "metrics",
            message: format!("header name {k:?} is not valid"),
        })?;
        let mut value = http::HeaderValue::from_str(v.expose()).map_err(|_| OtlpError::Build {
            signal: "metrics",
            message: format!("the value of header {k:?} is not valid"),
        })?;
        value.set_sensitive(true);
        map.insert(name, value);
    }
    Ok(OtlpHttpClient::new(
        client,
        map,
        delivery.clone(),
        signal,
        url,
    ))
}

fn tonic_tls(cfg: &SignalConfig) -> Result<Option<tonic::transport::ClientTlsConfig>, OtlpError> {
    if !cfg.endpoint.is_https() {
        return Ok(None);
    }
    let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
    if let Some(path) = &cfg.ca_file {
        tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(load_ca(path)?));
    }
    Ok(Some(tls))
}

fn metadata(headers: &[(String, Secret)]) -> Result<tonic::metadata::MetadataMap, OtlpError> {
    let mut map = tonic::metadata::MetadataMap::new();
    for (k, v) in headers {
        let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .map_err(|_| OtlpError::Build {
                signal: "metrics",
                message: format!("header name {k:?} is not valid"),
            })?;
        // The value is a secret: the error says which header, never what it held.
        let value = v.expose().parse().map_err(|_| OtlpError::Build {
            signal: "metrics",
            message: format!("the value of header {k:?} is not valid ASCII"),
        })?;
        map.insert(key, value);
    }
    Ok(map)
}

/// The SDK's temporality for ours.
fn sdk_temporality(t: Temporality) -> opentelemetry_sdk::metrics::Temporality {
    match t {
        Temporality::Cumulative => opentelemetry_sdk::metrics::Temporality::Cumulative,
        Temporality::Delta => opentelemetry_sdk::metrics::Temporality::Delta,
        Temporality::LowMemory => opentelemetry_sdk::metrics::Temporality::LowMemory,
    }
}

/// How a signal's sender reaches the collector: our HTTP client to the signal's path, or tonic's
/// gRPC client of the signal's service over a channel that connects when first used. Call
/// within the tokio runtime (the channel's task).
fn transport<R: GrpcExport>(
    cfg: &SignalConfig,
    delivery: &Arc<Delivery>,
    runtime: &tokio::runtime::Handle,
) -> Result<Box<dyn Transport<R>>, OtlpError> {
    let build = |message: String| OtlpError::Build {
        signal: R::SIGNAL.as_str(),
        message,
    };
    match cfg.protocol {
        Protocol::HttpProtobuf => {
            let url = cfg.http_url(R::HTTP_PATH);
            let client = http_client(cfg, (R::SIGNAL, &cfg.headers), delivery, &url)?;
            Ok(Box::new(HttpTransport {
                client,
                url,
                gzip: cfg.gzip,
            }))
        }
        Protocol::Grpc => {
            let mut endpoint =
                tonic::transport::Endpoint::from_shared(cfg.endpoint.as_str().to_string())
                    .map_err(|e| build(format!("the endpoint {}: {e}", cfg.endpoint)))?
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout);
            if let Some(tls) = tonic_tls(cfg)? {
                endpoint = endpoint
                    .tls_config(tls)
                    .map_err(|e| build(format!("TLS: {e}")))?;
            }
            Ok(Box::new(GrpcTransport {
                channel: endpoint.connect_lazy(),
                gzip: cfg.gzip,
                metadata: metadata(&cfg.headers)?,
                timeout: cfg.timeout,
                delivery: delivery.clone(),
                rejections: RejectionLog::default(),
                shown: cfg.endpoint.to_string(),
                runtime: runtime.clone(),
            }))
        }
    }
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

/// The metrics exporter: each collection becomes batches of at most `max_request_bytes` in the
/// sending queue (joining the last one waiting, up to that size), which the sender thread
/// delivers; a full queue drops its oldest, counted.
struct QueuedMetrics {
    queue: Arc<SendQueue<ExportMetricsServiceRequest>>,
    delivery: Arc<Delivery>,
    max_request_bytes: usize,
    temporality: opentelemetry_sdk::metrics::Temporality,
    /// When a full queue was last reported.
    overflow_logged: std::sync::Mutex<Option<std::time::Instant>>,
    cardinality_logged: std::sync::atomic::AtomicBool,
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

/// An OTLP string value.
fn text(s: impl Into<String>) -> Option<proto::AnyValue> {
    Some(proto::AnyValue {
        value: Some(proto::any_value::Value::StringValue(s.into())),
    })
}

fn attribute(key: impl Into<String>, value: Option<proto::AnyValue>) -> proto::KeyValue {
    proto::KeyValue {
        key: key.into(),
        value,
        key_strindex: 0,
    }
}

/// Nanoseconds since the Unix epoch, now.
fn now_unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The record announcing a GPU's new verdict, with its evidence and remedy. A change of
/// verdict is information, not a fault: alerts come from the series. Its time is when it was
/// observed (the record may wait in the queue before it is sent); the GPU's identity is typed
/// as on the metrics ([`key_values`]), the rest are strings.
fn change_record(change: &ClassChange, view: &GpuView, observed_unix_nanos: u64) -> LogRecord {
    let r = &view.report;
    let evidence: Vec<&str> = r.evidence.iter().map(|e| e.text.as_str()).collect();
    let mut attributes: Vec<proto::KeyValue> = key_values(&event_attributes(view))
        .into_iter()
        .map(|kv| {
            let value = match kv.value {
                opentelemetry::Value::I64(n) => Some(proto::AnyValue {
                    value: Some(proto::any_value::Value::IntValue(n)),
                }),
                other => text(other.to_string()),
            };
            attribute(kv.key.as_str(), value)
        })
        .collect();
    attributes.push(attribute(
        "gpuslack.diagnosis.class",
        text(change.to.as_str()),
    ));
    if let Some(from) = change.from {
        attributes.push(attribute(
            "gpuslack.diagnosis.previous_class",
            text(from.as_str()),
        ));
    }
    let alternatives: Vec<&str> = r.alternatives().iter().map(|c| c.as_str()).collect();
    attributes.extend([
        attribute("gpuslack.diagnosis.rule", text(r.rule.as_str())),
        // Evidence may quote a process's name: escaped as every exported text is.
        attribute(
            "gpuslack.diagnosis.evidence",
            text(crate::text::exported(&evidence.join("; "))),
        ),
        attribute("gpuslack.diagnosis.remedy", text(r.remedy())),
        attribute(
            "gpuslack.diagnosis.confidence",
            text(r.confidence().as_str()),
        ),
        attribute(
            "gpuslack.diagnosis.alternatives",
            text(alternatives.join(",")),
        ),
    ]);
    LogRecord {
        observed_time_unix_nano: observed_unix_nanos,
        severity_number: SeverityNumber::Info as i32,
        severity_text: "INFO".into(),
        event_name: "gpuslack.diagnosis.change".into(),
        body: text(crate::text::exported(&format!(
            "GPU {} became {}: {}",
            change.gpu,
            change.to,
            evidence.first().copied().unwrap_or("")
        ))),
        attributes,
        ..LogRecord::default()
    }
}

impl LogsExport {
    /// A request of one record, in the agent's resource and scope.
    fn request(&self, record: LogRecord) -> ExportLogsServiceRequest {
        let scope = scope();
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(self.resource.clone()),
                schema_url: self.resource_schema_url.clone(),
                scope_logs: vec![ScopeLogs {
                    scope: Some(proto::InstrumentationScope {
                        name: scope.name().to_string(),
                        version: scope.version().unwrap_or_default().to_string(),
                        ..proto::InstrumentationScope::default()
                    }),
                    schema_url: scope.schema_url().unwrap_or_default().to_string(),
                    log_records: vec![record],
                }],
            }],
        }
    }
}

/// The SDK's resource as OTLP, as the metrics carry it.
fn otlp_resource(resource: &Resource) -> opentelemetry_proto::tonic::resource::v1::Resource {
    opentelemetry_proto::tonic::resource::v1::Resource {
        attributes: resource
            .iter()
            .map(|(k, v)| attribute(k.as_str(), Some(v.clone().into())))
            .collect(),
        dropped_attributes_count: 0,
        entity_refs: vec![],
    }
}

impl PushMetricExporter for QueuedMetrics {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let request = ExportMetricsServiceRequest::from(metrics);
        let folded = split::overflowed(&request);
        if folded > 0 {
            self.cardinality_exceeded(folded);
        }
        let parts = split::to_fit(request, self.max_request_bytes);
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
fn key_values(attributes: &[(&'static str, String)]) -> Vec<KeyValue> {
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
fn register(meter: &Meter, state: &Arc<RwLock<ExportState>>) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let otlp_points = split::points(&request);
        let text = super::super::prometheus::render(
            &state.read().expect("state"),
            &super::super::config::resolve(vec![], &|_| None).expect("config"),
            super::super::prometheus::Format::Text,
        );
        // Every sample but target_info is a point, and none is folded into an overflow series.
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("target_info"))
            .count() as u64;
        assert!(otlp_points > 20_000, "{otlp_points} points");
        assert_eq!(otlp_points, samples);
        assert_eq!(split::overflowed(&request), 0);
        // Without the view the SDK's default of 2,000 folds the excess.
        let reader = SharedReader::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader.clone())
            .build();
        register(&provider.meter_with_scope(scope()), &state);
        let mut rm = ResourceMetrics::default();
        reader.collect(&mut rm).expect("collect");
        let folded = ExportMetricsServiceRequest::from(&rm);
        assert!(split::points(&folded) < samples);
        assert!(split::overflowed(&folded) > 0);
    }

    #[test]
    fn the_instance_id_is_a_stable_uuid_that_hides_the_machine_id() {
        let id = service_instance_id(Some("3d1219c7c4c5404aaa1f6d2a48adfda4"), "gpuslack");
        assert_eq!(
            id,
            service_instance_id(Some("3d1219c7c4c5404aaa1f6d2a48adfda4"), "gpuslack")
        );
        assert_ne!(
            id,
            service_instance_id(Some("3d1219c7c4c5404aaa1f6d2a48adfda4"), "other")
        );
        assert_ne!(
            id,
            service_instance_id(Some("0d1219c7c4c5404aaa1f6d2a48adfda4"), "gpuslack")
        );
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12],
            "{id}"
        );
        assert!(parts[2].starts_with('8'), "version 8: {id}");
        assert!(
            matches!(&parts[3][..1], "8" | "9" | "a" | "b"),
            "variant: {id}"
        );
        assert!(!id.replace('-', "").contains("3d1219c7"));
        let random = service_instance_id(None, "gpuslack");
        assert_eq!(random.len(), 36, "{random}");
    }
}
