//! The config file's layer: a TOML file (format in docs/EXPORT.md) read into a [`Layer`],
//! every error naming the file and the field or line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::layer::{Layer, Written};
use super::parse::{
    checked_queue_mib, checked_request_bytes, expected, invalid, millis, parse_compression,
    parse_preset, parse_protocol, parse_temporality,
};
use super::{ConfigError, Secret};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    otlp: Option<FileOtlp>,
    prometheus: Option<FilePrometheus>,
    resource: Option<FileResource>,
    metrics: Option<FileMetrics>,
}

/// `[metrics]`: the set and the names added to it or taken from it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMetrics {
    set: Option<String>,
    include: Option<Vec<String>>,
    exclude: Option<Vec<String>>,
    pod_labels: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOtlp {
    endpoint: Option<String>,
    protocol: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    ca_file: Option<PathBuf>,
    compression: Option<String>,
    timeout_ms: Option<u64>,
    interval_ms: Option<u64>,
    temporality: Option<String>,
    logs: Option<bool>,
    preset: Option<String>,
    max_request_bytes: Option<usize>,
    queue_mib: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePrometheus {
    listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileResource {
    service_name: Option<String>,
    attributes: Option<BTreeMap<String, String>>,
}

/// The largest config file read, 1 MiB: docs/EXPORT.md's fullest example is about 2 KB, and a
/// file with a thousand resource attributes some 50 KB. Read without a bound, `--config
/// /dev/zero` took 4.2 GB in 5 s, and a 44 MB file of 3 million attributes 1.47 GB.
pub const MAX_CONFIG_BYTES: u64 = crate::files::Input::Config.cap_bytes();

/// A TOML config file (format in docs/EXPORT.md). Errors name the file and the field or line;
/// a file past [`MAX_CONFIG_BYTES`] (or a device that never ends) is refused unread.
pub fn file_layer(path: &Path) -> Result<Layer, ConfigError> {
    let shown = path.display().to_string();
    let text = crate::files::read_text(path, crate::files::Input::Config)?;
    file_layer_from_str(&text, &shown)
}

/// A config file's text; `shown` names it in every error, a bad value's too.
pub fn file_layer_from_str(text: &str, shown: &str) -> Result<Layer, ConfigError> {
    let file: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Toml {
        path: shown.to_string(),
        message: e.to_string().trim().replace('\n', " "),
    })?;
    file_values(file).map_err(|e| match e {
        ConfigError::Invalid { field, problem, .. } => ConfigError::Toml {
            path: shown.to_string(),
            message: format!("`{field}`: {problem}"),
        },
        other => other,
    })
}

fn file_values(file: FileConfig) -> Result<Layer, ConfigError> {
    const ORIGIN: &str = "config file";
    let mut layer = Layer::default();
    if let Some(o) = file.otlp {
        layer.endpoint = o.endpoint;
        if let Some(p) = o.protocol {
            layer.protocol = Some(
                parse_protocol(&p)
                    .ok_or_else(|| invalid(ORIGIN, "otlp.protocol", &p, expected::PROTOCOL))?,
            );
        }
        layer.headers = o
            .headers
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, Secret(v)))
            .collect();
        layer.ca_file = o.ca_file;
        if let Some(c) = o.compression {
            layer.gzip =
                Some(parse_compression(&c).ok_or_else(|| {
                    invalid(ORIGIN, "otlp.compression", &c, expected::COMPRESSION)
                })?);
        }
        if let Some(ms) = o.timeout_ms {
            layer.timeout = Some(millis(ORIGIN, "otlp.timeout_ms", &ms.to_string())?);
        }
        if let Some(ms) = o.interval_ms {
            layer.interval = Some(millis(ORIGIN, "otlp.interval_ms", &ms.to_string())?);
        }
        if let Some(t) = o.temporality {
            layer.temporality =
                Some(parse_temporality(&t).ok_or_else(|| {
                    invalid(ORIGIN, "otlp.temporality", &t, expected::TEMPORALITY)
                })?);
        }
        layer.logs = o.logs;
        if let Some(bytes) = o.max_request_bytes {
            layer.max_request_bytes = Some(checked_request_bytes(bytes).ok_or_else(|| {
                invalid(
                    ORIGIN,
                    "otlp.max_request_bytes",
                    &bytes.to_string(),
                    expected::REQUEST_BYTES,
                )
            })?);
        }
        if let Some(mib) = o.queue_mib {
            layer.queue_bytes = Some(checked_queue_mib(mib).ok_or_else(|| {
                invalid(
                    ORIGIN,
                    "otlp.queue_mib",
                    &mib.to_string(),
                    expected::QUEUE_MIB,
                )
            })?);
        }
        if let Some(p) = o.preset {
            layer.preset = Some(
                parse_preset(&p)
                    .ok_or_else(|| invalid(ORIGIN, "otlp.preset", &p, expected::PRESET))?,
            );
        }
    }
    if let Some(p) = file.prometheus.and_then(|p| p.listen) {
        layer.prometheus = Some(
            p.parse()
                .map_err(|_| invalid(ORIGIN, "prometheus.listen", &p, expected::LISTEN))?,
        );
    }
    if let Some(r) = file.resource {
        layer.service_name = r.service_name;
        layer.resource_attributes = r.attributes.unwrap_or_default();
    }
    if let Some(m) = file.metrics {
        layer.metric_set = m.set.map(|value| Written {
            origin: ORIGIN,
            field: "metrics.set",
            value,
        });
        layer.metrics_include = m.include.map(|value| Written {
            origin: ORIGIN,
            field: "metrics.include",
            value,
        });
        layer.metrics_exclude = m.exclude.map(|value| Written {
            origin: ORIGIN,
            field: "metrics.exclude",
            value,
        });
        layer.pod_labels = m.pod_labels.map(|on| Written {
            origin: ORIGIN,
            field: "metrics.pod_labels",
            value: on.to_string(),
        });
    }
    Ok(layer)
}
