//! OTLP export: metrics read from the export state at every collection (observable
//! instruments, so a slow or failing collector never queues data), and diagnosis changes as
//! log records. gRPC goes through tonic and needs the tokio runtime the caller has entered;
//! HTTP/protobuf through a blocking reqwest client of our own, which carries the custom CA.

use std::sync::{Arc, RwLock};

use opentelemetry::logs::{AnyValue, LogRecord, Logger, LoggerProvider, Severity};
use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{
    LogExporter, MetricExporter, WithExportConfig, WithHttpConfig, WithTonicConfig,
};
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use super::catalogue::{self, gpu_attributes, Kind, MetricDef};
use super::config::{ExportConfig, OtlpConfig, Protocol, Temporality};
use super::state::{ClassChange, ExportState, GpuView};

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("reading the CA certificate {path}: {source}")]
    Certificate {
        path: String,
        source: std::io::Error,
    },
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
}

/// The resource every point and record carries: host, service and what the user adds.
pub fn resource(config: &ExportConfig) -> Resource {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let mut attrs = vec![
        KeyValue::new("host.name", host),
        KeyValue::new("service.name", config.service_name.clone()),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    ];
    for (k, v) in &config.resource_attributes {
        attrs.retain(|kv| kv.key.as_str() != k);
        attrs.push(KeyValue::new(k.clone(), v.clone()));
    }
    Resource::builder_empty().with_attributes(attrs).build()
}

fn signal_url(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path)
}

fn http_client(cfg: &OtlpConfig) -> Result<reqwest::blocking::Client, OtlpError> {
    // reqwest is built without a provider of its own (see Cargo.toml) and takes the process's.
    // An error only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::blocking::Client::builder().timeout(cfg.timeout);
    if let Some(path) = &cfg.ca_file {
        let pem = std::fs::read(path).map_err(|source| OtlpError::Certificate {
            path: path.display().to_string(),
            source,
        })?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| OtlpError::HttpClient(format!("{}: {e}", path.display())))?;
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| OtlpError::HttpClient(e.to_string()))
}

fn tonic_tls(cfg: &OtlpConfig) -> Result<Option<tonic::transport::ClientTlsConfig>, OtlpError> {
    if !cfg.endpoint.starts_with("https://") {
        return Ok(None);
    }
    let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
    if let Some(path) = &cfg.ca_file {
        let pem = std::fs::read(path).map_err(|source| OtlpError::Certificate {
            path: path.display().to_string(),
            source,
        })?;
        tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
    }
    Ok(Some(tls))
}

fn metadata(cfg: &OtlpConfig) -> Result<tonic::metadata::MetadataMap, OtlpError> {
    let mut map = tonic::metadata::MetadataMap::new();
    for (k, v) in &cfg.headers {
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

/// The gRPC settings every signal's exporter shares.
fn with_tonic_settings<B: WithExportConfig + WithTonicConfig>(
    b: B,
    cfg: &OtlpConfig,
) -> Result<B, OtlpError> {
    let mut b = b
        .with_endpoint(cfg.endpoint.clone())
        .with_timeout(cfg.timeout)
        .with_metadata(metadata(cfg)?);
    if let Some(tls) = tonic_tls(cfg)? {
        b = b.with_tls_config(tls);
    }
    if cfg.gzip {
        b = b.with_compression(opentelemetry_otlp::Compression::Gzip);
    }
    Ok(b)
}

/// The HTTP/protobuf settings every signal's exporter shares; `path` is the signal's URL path.
fn with_http_settings<B: WithExportConfig + WithHttpConfig>(
    b: B,
    cfg: &OtlpConfig,
    path: &str,
) -> Result<B, OtlpError> {
    let mut b = b
        .with_http_client(http_client(cfg)?)
        .with_endpoint(signal_url(&cfg.endpoint, path))
        .with_timeout(cfg.timeout)
        .with_headers(
            cfg.headers
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_string()))
                .collect(),
        )
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    if cfg.gzip {
        b = b.with_compression(opentelemetry_otlp::Compression::Gzip);
    }
    Ok(b)
}

fn metric_exporter(cfg: &OtlpConfig) -> Result<MetricExporter, OtlpError> {
    let temporality = match cfg.temporality {
        Temporality::Cumulative => opentelemetry_sdk::metrics::Temporality::Cumulative,
        Temporality::Delta => opentelemetry_sdk::metrics::Temporality::Delta,
    };
    let builder = MetricExporter::builder().with_temporality(temporality);
    match cfg.protocol {
        Protocol::Grpc => with_tonic_settings(builder.with_tonic(), cfg)?.build(),
        Protocol::HttpProtobuf => {
            with_http_settings(builder.with_http(), cfg, "v1/metrics")?.build()
        }
    }
    .map_err(build_error("metrics"))
}

fn log_exporter(cfg: &OtlpConfig) -> Result<LogExporter, OtlpError> {
    match cfg.protocol {
        Protocol::Grpc => with_tonic_settings(LogExporter::builder().with_tonic(), cfg)?.build(),
        Protocol::HttpProtobuf => {
            with_http_settings(LogExporter::builder().with_http(), cfg, "v1/logs")?.build()
        }
    }
    .map_err(build_error("logs"))
}

fn key_values(view: &GpuView, extra: &[(&'static str, String)]) -> Vec<KeyValue> {
    gpu_attributes(view)
        .into_iter()
        .chain(extra.iter().cloned())
        .map(|(k, v)| KeyValue::new(k, v))
        .collect()
}

/// What `start` registers, for the export benchmark's own meter provider.
#[doc(hidden)]
pub fn register_for_bench(meter: &Meter, state: &Arc<RwLock<ExportState>>) {
    register(meter, state)
}

/// Registers one observable instrument per catalogue entry, each reading the export state.
fn register(meter: &Meter, state: &Arc<RwLock<ExportState>>) {
    for def in catalogue::ALL {
        let state = state.clone();
        let observe = move |def: MetricDef, record: &dyn Fn(f64, &[KeyValue])| {
            let Ok(state) = state.read() else { return };
            for view in state.gpus() {
                for p in catalogue::points(view).into_iter().filter(|p| p.def == def) {
                    record(p.value, &key_values(view, &p.attributes));
                }
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
        }
    }
}

impl OtlpExport {
    /// Starts exporting. For gRPC, call from within a tokio runtime context.
    pub fn start(
        config: &ExportConfig,
        cfg: &OtlpConfig,
        state: Arc<RwLock<ExportState>>,
    ) -> Result<OtlpExport, OtlpError> {
        let resource = resource(config);
        let reader = PeriodicReader::builder(metric_exporter(cfg)?)
            .with_interval(cfg.interval)
            .build();
        let meters = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_reader(reader)
            .build();
        register(&meters.meter("gpuslack"), &state);
        let logs = if cfg.logs {
            let provider = SdkLoggerProvider::builder()
                .with_resource(resource)
                .with_batch_exporter(log_exporter(cfg)?)
                .build();
            let logger = provider.logger("gpuslack");
            Some((provider, logger))
        } else {
            None
        };
        Ok(OtlpExport { meters, logs })
    }

    /// A log record announcing a GPU's new verdict, with its evidence and remedy.
    pub fn log_change(&self, change: &ClassChange, view: &GpuView) {
        let Some((_, logger)) = &self.logs else {
            return;
        };
        let r = &view.report;
        let evidence: Vec<&str> = r.evidence.iter().map(|e| e.text.as_str()).collect();
        let mut record = logger.create_log_record();
        let (severity, text) = if change.to.is_healthy() {
            (Severity::Info, "INFO")
        } else {
            (Severity::Warn, "WARN")
        };
        record.set_severity_number(severity);
        record.set_severity_text(text);
        record.set_event_name("gpu.diagnosis.change");
        record.set_body(AnyValue::from(format!(
            "GPU {} became {}: {}",
            change.gpu,
            change.to,
            evidence.first().copied().unwrap_or("")
        )));
        for kv in key_values(view, &[]) {
            record.add_attribute(kv.key, AnyValue::from(kv.value.to_string()));
        }
        record.add_attribute("gpu.diagnosis.class", change.to.as_str());
        if let Some(from) = change.from {
            record.add_attribute("gpu.diagnosis.previous_class", from.as_str());
        }
        record.add_attribute("gpu.diagnosis.rule", r.rule);
        record.add_attribute("gpu.diagnosis.evidence", evidence.join("; "));
        record.add_attribute("gpu.diagnosis.remedy", r.remedy());
        logger.emit(record);
    }

    /// Exports what is pending and stops. Errors are logged, not returned: the agent is ending.
    pub fn shutdown(self) {
        if let Err(e) = self.meters.force_flush() {
            tracing::warn!(error = %e, "final metrics export failed");
        }
        if let Err(e) = self.meters.shutdown() {
            tracing::debug!(error = %e, "metrics shutdown");
        }
        if let Some((provider, _)) = self.logs {
            if let Err(e) = provider.force_flush() {
                tracing::warn!(error = %e, "final log export failed");
            }
            let _ = provider.shutdown();
        }
    }
}
