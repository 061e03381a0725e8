//! Export flags of `gpuslack run`. They form the top layer over the environment and the config
//! file (docs/EXPORT.md).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Result};
use gpuslack_receiver::export::config::{
    checked_millis, checked_queue_mib, checked_request_bytes, env_layer, file_layer,
    is_sdk_exporter_variable, is_unsupported_exporter_variable, parse_compression, parse_listen,
    parse_names, parse_preset, parse_protocol, parse_temporality, resolve, ExportConfig, Layer,
    Secret, Written,
};

#[derive(clap::Args, Debug, Clone)]
pub struct ExportArgs {
    /// TOML config file (the environment and flags override it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// OTLP endpoint, e.g. http://localhost:4317 (gRPC) or http://localhost:4318 (HTTP).
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// grpc or http/protobuf.
    #[arg(long, value_name = "PROTOCOL")]
    pub otlp_protocol: Option<String>,
    /// A header to send, KEY=VALUE; repeat for more. Values are never logged.
    #[arg(long = "otlp-header", value_name = "KEY=VALUE")]
    pub otlp_headers: Vec<String>,
    /// PEM file with CA certificates to trust beside the system roots.
    #[arg(long, value_name = "FILE")]
    pub otlp_ca: Option<PathBuf>,
    /// gzip or none.
    #[arg(long, value_name = "C")]
    pub otlp_compression: Option<String>,
    /// How long one export may take before it counts as failed.
    #[arg(long, value_name = "MS")]
    pub otlp_timeout_ms: Option<u64>,
    /// How often metrics are exported.
    #[arg(long, value_name = "MS")]
    pub export_interval_ms: Option<u64>,
    /// The largest request, in bytes before compression (larger collections go in parts, and
    /// waiting log records join up to it; default 4000000, the Datadog preset's 500000).
    #[arg(long, value_name = "BYTES")]
    pub otlp_max_request_bytes: Option<usize>,
    /// What each signal's sending queue (metrics, logs) keeps while the collector is away,
    /// in MiB (default 64).
    #[arg(long, value_name = "MIB")]
    pub otlp_queue_mib: Option<usize>,
    /// cumulative, delta (Datadog wants delta) or lowmemory.
    #[arg(long)]
    pub temporality: Option<String>,
    /// datadog, datadog-agent or honeycomb.
    #[arg(long)]
    pub preset: Option<String>,
    /// Do not send diagnosis changes as OTLP log records.
    #[arg(long)]
    pub no_otlp_logs: bool,
    /// Serve Prometheus text at ADDR/metrics (e.g. 127.0.0.1:9464; a bare port means loopback).
    #[arg(long, value_name = "ADDR")]
    pub prometheus: Option<String>,
    /// The `service.name` resource attribute on everything exported [default: gpuslack].
    #[arg(long)]
    pub service_name: Option<String>,
    /// Per-process series kept per GPU: its N processes with the largest SM share (0 for none).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub process_series: usize,
    /// Owners (processes, containers, pods, jobs) with counters of their own per GPU, by GPU
    /// time; former ones fold into one `other` owner (docs/EXPORT.md, "Series budget").
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub owner_series: u16,
    /// The metrics exported: lean, full, dcgm or datadog (docs/EXPORT.md, "Metric sets";
    /// GPUSLACK_METRICS, the config file's `metrics.set`).
    #[arg(long = "metrics", value_name = "SET")]
    pub metric_set: Option<String>,
    /// Metric names to add to the set, comma-separated or repeated (GPUSLACK_METRICS_INCLUDE).
    #[arg(long, value_name = "NAMES")]
    pub metrics_include: Vec<String>,
    /// Metric names to leave out of the set, comma-separated or repeated; they win over
    /// includes (GPUSLACK_METRICS_EXCLUDE).
    #[arg(long, value_name = "NAMES")]
    pub metrics_exclude: Vec<String>,
    /// Put the GPU owner's pod, namespace and container on every per-GPU gauge: on by default
    /// in the dcgm set, as dcgm-exporter has them (`--pod-labels=false` takes them off), off in
    /// the others (docs/EXPORT.md, "Pods on GPU series"; GPUSLACK_POD_LABELS,
    /// `metrics.pod_labels`).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub pod_labels: Option<String>,
}

/// `GPUSLACK_PRESET`, where `--preset` is not given: the way a DaemonSet or a systemd
/// environment file picks a backend, whose keys (`DD_API_KEY`, `HONEYCOMB_API_KEY`) they
/// already carry, without editing the command line (docs/DEPLOY.md). Empty means unset. A bad
/// value is an error naming the variable: a preset silently ignored would export nowhere.
pub const PRESET_VARIABLE: &str = "GPUSLACK_PRESET";

fn preset_from_env(
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<gpuslack_receiver::export::config::Preset>> {
    match env(PRESET_VARIABLE).map(|v| v.trim().to_string()) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => parse_preset(&v.to_ascii_lowercase())
            .map(Some)
            .ok_or_else(|| {
                anyhow!("{PRESET_VARIABLE}={v:?} is not datadog, datadog-agent or honeycomb")
            }),
    }
}

fn bad(flag: &str, value: &str, expected: &str) -> anyhow::Error {
    anyhow!("--{flag}: {value:?} is not {expected}")
}

/// Milliseconds from 1 to 10 minutes, the range the environment and the config file share.
fn millis(flag: &str, ms: u64) -> Result<Duration> {
    checked_millis(ms)
        .ok_or_else(|| anyhow!("--{flag} must be from 1 to 600000 milliseconds, got {ms}"))
}

/// Removes the SDK's OTLP exporter variables from this process once gpuslack has read its own,
/// so that the exporters cannot apply them again over the flags (flags over environment over
/// file). Those gpuslack does not read, such as per-signal endpoints, are named in a warning.
pub fn strip_sdk_environment() {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| is_sdk_exporter_variable(k))
        .collect();
    for name in names {
        if is_unsupported_exporter_variable(&name) {
            tracing::warn!(variable = %name, "not supported and ignored: gpuslack reads the general and the per-signal (METRICS, LOGS) ENDPOINT, PROTOCOL, HEADERS, CERTIFICATE, COMPRESSION and TIMEOUT, and METRICS_TEMPORALITY_PREFERENCE (docs/EXPORT.md)");
        }
        // SAFETY (edition 2021: a safe call): the run resolves its configuration before it
        // starts any thread that could read the environment.
        std::env::remove_var(&name);
    }
}

impl ExportArgs {
    fn layer(&self) -> Result<Layer> {
        let mut layer = Layer {
            endpoint: self.otlp_endpoint.clone(),
            ca_file: self.otlp_ca.clone(),
            service_name: self.service_name.clone(),
            ..Layer::default()
        };
        if let Some(p) = &self.otlp_protocol {
            layer.protocol = Some(
                parse_protocol(p)
                    .ok_or_else(|| bad("otlp-protocol", p, "grpc or http/protobuf"))?,
            );
        }
        // A flag's value is taken as written: only the environment's is percent-encoded.
        for (i, h) in self.otlp_headers.iter().enumerate() {
            let (k, v) = h
                .split_once('=')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| anyhow!("--otlp-header (the {}. one): expected KEY=VALUE", i + 1))?;
            layer.headers.insert(k.trim().to_string(), Secret::new(v));
        }
        if let Some(c) = &self.otlp_compression {
            layer.gzip = Some(
                parse_compression(c).ok_or_else(|| bad("otlp-compression", c, "gzip or none"))?,
            );
        }
        if let Some(ms) = self.otlp_timeout_ms {
            layer.timeout = Some(millis("otlp-timeout-ms", ms)?);
        }
        if let Some(ms) = self.export_interval_ms {
            layer.interval = Some(millis("export-interval-ms", ms)?);
        }
        if let Some(bytes) = self.otlp_max_request_bytes {
            layer.max_request_bytes = Some(checked_request_bytes(bytes).ok_or_else(|| {
                anyhow!("--otlp-max-request-bytes must be from 1024 to 67108864, got {bytes}")
            })?);
        }
        if let Some(mib) = self.otlp_queue_mib {
            layer.queue_bytes =
                Some(checked_queue_mib(mib).ok_or_else(|| {
                    anyhow!("--otlp-queue-mib must be from 1 to 4096, got {mib}")
                })?);
        }
        if let Some(t) = &self.temporality {
            layer.temporality = Some(
                parse_temporality(t)
                    .ok_or_else(|| bad("temporality", t, "cumulative, delta or lowmemory"))?,
            );
        }
        if let Some(p) = &self.preset {
            layer.preset = Some(
                parse_preset(p)
                    .ok_or_else(|| bad("preset", p, "datadog, datadog-agent or honeycomb"))?,
            );
        } else if let Some(p) = preset_from_env(|k| std::env::var(k).ok())? {
            layer.preset = Some(p);
        }
        if self.no_otlp_logs {
            layer.logs = Some(false);
        }
        layer.metric_set = self.metric_set.clone().map(|value| Written {
            origin: "flag",
            field: "--metrics",
            value,
        });
        let names = |given: &[String], field: &'static str| {
            (!given.is_empty()).then(|| Written {
                origin: "flag",
                field,
                value: given.iter().flat_map(|g| parse_names(g)).collect(),
            })
        };
        layer.metrics_include = names(&self.metrics_include, "--metrics-include");
        layer.metrics_exclude = names(&self.metrics_exclude, "--metrics-exclude");
        layer.pod_labels = self.pod_labels.clone().map(|value| Written {
            origin: "flag",
            field: "--pod-labels",
            value,
        });
        if let Some(a) = &self.prometheus {
            layer.prometheus = Some(parse_listen(a).ok_or_else(|| {
                bad(
                    "prometheus",
                    a,
                    "an address such as 127.0.0.1:9464, or a port (loopback)",
                )
            })?);
        }
        Ok(layer)
    }

    /// File, then environment, then flags.
    pub fn resolve(&self) -> Result<ExportConfig> {
        let env = |k: &str| std::env::var(k).ok();
        let mut layers = Vec::new();
        if let Some(path) = &self.config {
            layers.push(file_layer(path)?);
        }
        let (from_env, warnings) = env_layer(env);
        for w in warnings {
            tracing::warn!(problem = %w, "an OTEL_* variable is not valid and is ignored; the setting falls back to the file's or the default");
        }
        layers.push(from_env);
        layers.push(self.layer()?);
        Ok(resolve(layers, &env)?)
    }
}
