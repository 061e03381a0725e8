//! OTLP export: metrics read from the export state at every collection (observable
//! instruments, so a slow or failing collector never queues data), and diagnosis changes as
//! log records. gRPC goes through tonic and needs the tokio runtime the caller has entered;
//! HTTP/protobuf through a blocking reqwest client of our own ([`OtlpHttpClient`]), which
//! carries the custom CA and the headers. Both exporters are wrapped to count what they
//! deliver and drop ([`Delivery`]).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use opentelemetry::logs::{AnyValue, LogRecord, Logger, LoggerProvider, Severity};
use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{
    LogExporter, MetricExporter, WithExportConfig, WithHttpConfig, WithTonicConfig,
};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use super::catalogue::{self, Kind, MetricDef};
use super::config::{ExportConfig, OtlpConfig, Protocol, Secret, SignalConfig, Temporality};
use super::delivery::{reason, reason_in_text, Delivery, Signal};
use super::http_client::{no_redirects, OtlpHttpClient};
use super::points::{agent_points, gpu_attributes};
use super::state::{ClassChange, ExportState, GpuView};

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
    logs: Option<(SdkLoggerProvider, SdkLogger)>,
    delivery: Arc<Delivery>,
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
    if let Ok(id) = machine_id.map(|id| id.trim().to_string()) {
        if !id.is_empty() {
            attrs.push(KeyValue::new("host.id", id));
        }
    }
    if let Ok(node) = std::env::var("K8S_NODE_NAME") {
        if !node.trim().is_empty() {
            attrs.push(KeyValue::new("k8s.node.name", node.trim().to_string()));
        }
    }
    for (k, v) in &config.resource_attributes {
        attrs.retain(|kv| kv.key.as_str() != k);
        attrs.push(KeyValue::new(k.clone(), v.clone()));
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

fn build_error(
    signal: &'static str,
) -> impl Fn(opentelemetry_otlp::ExporterBuildError) -> OtlpError {
    move |e| OtlpError::Build {
        signal,
        message: e.to_string(),
    }
}

/// A signal's gRPC settings.
fn with_tonic_settings<B: WithExportConfig + WithTonicConfig>(
    b: B,
    cfg: &SignalConfig,
) -> Result<B, OtlpError> {
    let mut b = b
        .with_endpoint(cfg.endpoint.as_str())
        .with_timeout(cfg.timeout)
        .with_metadata(metadata(&cfg.headers)?);
    if let Some(tls) = tonic_tls(cfg)? {
        b = b.with_tls_config(tls);
    }
    if cfg.gzip {
        b = b.with_compression(opentelemetry_otlp::Compression::Gzip);
    }
    Ok(b)
}

/// A signal's HTTP/protobuf settings; `path` is the signal's URL path. Headers travel in our own
/// client, never through the SDK's header settings.
fn with_http_settings<B: WithExportConfig + WithHttpConfig>(
    b: B,
    cfg: &SignalConfig,
    (signal, path): (Signal, &str),
    delivery: &Arc<Delivery>,
) -> Result<B, OtlpError> {
    let url = cfg.http_url(path);
    let mut b = b
        .with_http_client(http_client(cfg, (signal, &cfg.headers), delivery, &url)?)
        .with_endpoint(url)
        .with_timeout(cfg.timeout)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    if cfg.gzip {
        b = b.with_compression(opentelemetry_otlp::Compression::Gzip);
    }
    Ok(b)
}

fn metric_exporter(
    cfg: &OtlpConfig,
    delivery: &Arc<Delivery>,
) -> Result<MetricExporter, OtlpError> {
    let temporality = match cfg.temporality {
        Temporality::Cumulative => opentelemetry_sdk::metrics::Temporality::Cumulative,
        Temporality::Delta => opentelemetry_sdk::metrics::Temporality::Delta,
        Temporality::LowMemory => opentelemetry_sdk::metrics::Temporality::LowMemory,
    };
    let builder = MetricExporter::builder().with_temporality(temporality);
    let signal = &cfg.metrics;
    match signal.protocol {
        Protocol::Grpc => with_tonic_settings(builder.with_tonic(), signal)?.build(),
        Protocol::HttpProtobuf => with_http_settings(
            builder.with_http(),
            signal,
            (Signal::Metrics, "v1/metrics"),
            delivery,
        )?
        .build(),
    }
    .map_err(build_error("metrics"))
}

fn log_exporter(cfg: &SignalConfig, delivery: &Arc<Delivery>) -> Result<LogExporter, OtlpError> {
    match cfg.protocol {
        Protocol::Grpc => with_tonic_settings(LogExporter::builder().with_tonic(), cfg)?.build(),
        Protocol::HttpProtobuf => with_http_settings(
            LogExporter::builder().with_http(),
            cfg,
            (Signal::Logs, "v1/logs"),
            delivery,
        )?
        .build(),
    }
    .map_err(build_error("logs"))
}

/// A failed export's reason, from the SDK's message where the transport noted none: the gRPC
/// exporter names the status code ("… failed with gRPC code: Unavailable: …").
fn reason_of(e: &OTelSdkError) -> &'static str {
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    if let Some(why) = reason_in_text(&text) {
        return why;
    }
    let code = text
        .split("gRPC code: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_alphanumeric()).next())
        .unwrap_or("");
    match code {
        "DeadlineExceeded" => reason::TIMEOUT,
        "Unauthenticated" | "PermissionDenied" => reason::AUTH,
        "ResourceExhausted" => reason::THROTTLED,
        "InvalidArgument" | "FailedPrecondition" | "OutOfRange" | "Unimplemented" => {
            reason::REJECTED
        }
        "Unavailable" if lower.contains("refused") || lower.contains("dns") => reason::CONNECT,
        "Unavailable" => reason::UNAVAILABLE,
        "Cancelled" | "Aborted" | "Unknown" | "Internal" => reason::NETWORK,
        _ => reason::OTHER,
    }
}

/// Data points in one collection, whatever their kind.
fn points(metrics: &ResourceMetrics) -> u64 {
    fn count<T>(data: &MetricData<T>) -> usize {
        match data {
            MetricData::Gauge(g) => g.data_points().count(),
            MetricData::Sum(s) => s.data_points().count(),
            MetricData::Histogram(h) => h.data_points().count(),
            MetricData::ExponentialHistogram(h) => h.data_points().count(),
        }
    }
    metrics
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .map(|m| match m.data() {
            AggregatedMetrics::F64(d) => count(d),
            AggregatedMetrics::U64(d) => count(d),
            AggregatedMetrics::I64(d) => count(d),
        } as u64)
        .sum()
}

/// The metrics exporter, counting what each export delivered or dropped.
struct CountingMetrics {
    inner: MetricExporter,
    delivery: Arc<Delivery>,
}

impl PushMetricExporter for CountingMetrics {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let n = points(metrics);
        let result = self.inner.export(metrics).await;
        let outcome = result.as_ref().map(|_| ()).map_err(reason_of);
        self.delivery.exported(Signal::Metrics, n, outcome);
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> opentelemetry_sdk::metrics::Temporality {
        self.inner.temporality()
    }
}

/// The log exporter, counting the records each batch delivered or dropped.
#[derive(Debug)]
struct CountingLogs {
    inner: LogExporter,
    delivery: Arc<Delivery>,
}

impl opentelemetry_sdk::logs::LogExporter for CountingLogs {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let n = batch.iter().count() as u64;
        let result = self.inner.export(batch).await;
        let outcome = result.as_ref().map(|_| ()).map_err(reason_of);
        self.delivery.exported(Signal::Logs, n, outcome);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

fn key_values(attributes: &[(&'static str, String)]) -> Vec<KeyValue> {
    attributes
        .iter()
        .map(|(k, v)| KeyValue::new(*k, v.clone()))
        .collect()
}

/// What `start` registers, for the export benchmark's own meter provider.
#[doc(hidden)]
pub fn register_for_bench(meter: &Meter, state: &Arc<RwLock<ExportState>>) {
    register(meter, state)
}

/// Registers one observable instrument per catalogue entry, each reading the export state:
/// the GPUs' metrics and the agent's own.
fn register(meter: &Meter, state: &Arc<RwLock<ExportState>>) {
    for def in catalogue::ALL.into_iter().chain(catalogue::AGENT) {
        let state = state.clone();
        let agent = catalogue::AGENT.contains(&def);
        let observe = move |def: MetricDef, record: &dyn Fn(f64, &[KeyValue])| {
            let Ok(state) = state.read() else { return };
            if agent {
                for p in agent_points(&state.delivery().counts()) {
                    if p.def == def {
                        let attrs: Vec<KeyValue> = p
                            .attributes
                            .iter()
                            .map(|(k, v)| KeyValue::new(*k, v.clone()))
                            .collect();
                        record(p.value, &attrs);
                    }
                }
                return;
            }
            for p in state.points().iter().filter(|p| p.def == def) {
                record(p.value, &key_values(&p.attributes));
            }
        };
        match def.kind {
            Kind::Gauge => {
                meter
                    .f64_observable_gauge(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe(def, &|v, a| o.observe(v, a)))
                    .build();
            }
            Kind::Counter => {
                meter
                    .f64_observable_counter(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe(def, &|v, a| o.observe(v, a)))
                    .build();
            }
            Kind::UpDownCounter => {
                meter
                    .f64_observable_up_down_counter(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe(def, &|v, a| o.observe(v, a)))
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
        let metrics = CountingMetrics {
            inner: metric_exporter(cfg, &delivery)?,
            delivery: delivery.clone(),
        };
        let reader = PeriodicReader::builder(metrics)
            .with_interval(cfg.interval)
            .build();
        let meters = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_reader(reader)
            .build();
        register(&meters.meter_with_scope(scope()), &state);
        let logs = if let Some(logs_cfg) = &cfg.logs {
            let logs = CountingLogs {
                inner: log_exporter(logs_cfg, &delivery)?,
                delivery: delivery.clone(),
            };
            let provider = SdkLoggerProvider::builder()
                .with_resource(resource)
                .with_batch_exporter(logs)
                .build();
            let logger = provider.logger_with_scope(scope());
            Some((provider, logger))
        } else {
            None
        };
        Ok(OtlpExport {
            meters,
            logs,
            delivery,
        })
    }

    /// A log record announcing a GPU's new verdict, with its evidence and remedy.
    pub fn log_change(&self, change: &ClassChange, view: &GpuView) {
        let Some((_, logger)) = &self.logs else {
            return;
        };
        let r = &view.report;
        let evidence: Vec<&str> = r.evidence.iter().map(|e| e.text.as_str()).collect();
        let mut record = logger.create_log_record();
        // A change of verdict is information, not a fault: alerts come from the series.
        record.set_severity_number(Severity::Info);
        record.set_severity_text("INFO");
        record.set_event_name("gpuslack.diagnosis.change");
        record.set_body(AnyValue::from(format!(
            "GPU {} became {}: {}",
            change.gpu,
            change.to,
            evidence.first().copied().unwrap_or("")
        )));
        for kv in key_values(&gpu_attributes(view)) {
            record.add_attribute(kv.key, AnyValue::from(kv.value.to_string()));
        }
        record.add_attribute("gpuslack.diagnosis.class", change.to.as_str());
        if let Some(from) = change.from {
            record.add_attribute("gpuslack.diagnosis.previous_class", from.as_str());
        }
        record.add_attribute("gpuslack.diagnosis.rule", r.rule);
        record.add_attribute("gpuslack.diagnosis.evidence", evidence.join("; "));
        record.add_attribute("gpuslack.diagnosis.remedy", r.remedy());
        self.delivery.log_emitted();
        logger.emit(record);
    }

    /// Exports what is pending and stops, within `timeout`: a collector that hangs must not
    /// hold a restart hostage. Errors are logged, not returned: the agent is ending. Returns
    /// whether the flush finished in time; what it did not deliver is counted as dropped.
    /// The flushing thread enters `runtime` first (gRPC needs the tokio runtime entered).
    pub fn shutdown(self, timeout: Duration, runtime: tokio::runtime::Handle) -> bool {
        let delivery = self.delivery.clone();
        let (done, finished) = std::sync::mpsc::channel();
        let flush = move || {
            let _inside = runtime.enter();
            if let Err(e) = self.meters.force_flush() {
                tracing::warn!(error = %e, "final metrics export failed");
            }
            if let Err(e) = self.meters.shutdown_with_timeout(timeout) {
                tracing::debug!(error = %e, "metrics shutdown");
            }
            if let Some((provider, _)) = self.logs {
                if let Err(e) = provider.force_flush() {
                    tracing::warn!(error = %e, "final log export failed");
                }
                let _ = provider.shutdown_with_timeout(timeout);
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
    fn grpc_failures_are_filed_by_what_their_text_says() {
        for (text, want) in [
            (
                "TonicMetricsClient export failed with gRPC code: Cancelled: transport error: Timeout expired",
                reason::TIMEOUT,
            ),
            (
                "TonicMetricsClient export failed with gRPC code: Unavailable: transport error: received corrupt message of type InvalidContentType",
                reason::TLS,
            ),
            (
                "TonicMetricsClient export failed with gRPC code: Unavailable: tcp connect error: Connection refused (os error 111)",
                reason::CONNECT,
            ),
            ("TonicMetricsClient export failed with gRPC code: Unavailable", reason::UNAVAILABLE),
            ("TonicMetricsClient export failed with gRPC code: Unauthenticated", reason::AUTH),
            ("TonicMetricsClient export failed with gRPC code: Cancelled", reason::NETWORK),
        ] {
            let e = OTelSdkError::InternalFailure(text.into());
            assert_eq!(reason_of(&e), want, "{text}");
        }
    }
}
