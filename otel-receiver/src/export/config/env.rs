//! The environment's layer: the standard `OTEL_*` variables (the general ones and each
//! signal's own) and gpuslack's `GPUSLACK_METRICS*`, and which SDK variables the run removes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::super::delivery::Signal;
use super::layer::{Layer, SignalLayer, Written};
use super::parse::{
    checked_millis, expected, invalid, parse_compression, parse_names, parse_pairs, parse_protocol,
    parse_temporality,
};
use super::{ConfigError, Endpoint, Secret};

/// The environment variable naming the metric set (`lean`, `full`, `dcgm`, `datadog`).
pub const METRICS_VARIABLE: &str = "GPUSLACK_METRICS";
/// The environment variable of metric names to add, comma-separated.
pub const METRICS_INCLUDE_VARIABLE: &str = "GPUSLACK_METRICS_INCLUDE";
/// The environment variable of metric names to leave out, comma-separated.
pub const METRICS_EXCLUDE_VARIABLE: &str = "GPUSLACK_METRICS_EXCLUDE";
/// The environment variable that puts the owner's pod on every per-GPU gauge (`true`, `false`).
pub const POD_LABELS_VARIABLE: &str = "GPUSLACK_POD_LABELS";

/// The SDK's own environment variables for the OTLP exporters: gpuslack reads the ones it
/// documents itself and the run removes them all before starting the exporters, so that the
/// SDK cannot apply them again with another precedence (flags over environment over file).
pub fn is_sdk_exporter_variable(name: &str) -> bool {
    name.starts_with("OTEL_EXPORTER_OTLP_")
}

/// The SDK variables gpuslack does not read (client certificates, `_INSECURE`, traces…):
/// named in a warning, since the run removes them.
pub fn is_unsupported_exporter_variable(name: &str) -> bool {
    const READ: [&str; 7] = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
    ];
    let per_signal = SIGNAL_VARIABLES.iter().flatten().any(|v| *v == name);
    is_sdk_exporter_variable(name) && !READ.contains(&name) && !per_signal
}

/// The standard environment variables. `get` reads one (injected so tests need no process env).
/// As the OpenTelemetry specification asks, values are case-insensitive and an invalid one is
/// not fatal: it is returned among the warnings, which name the variable, and the setting is
/// left to the layers below (or the default).
pub fn env_layer(get: impl Fn(&str) -> Option<String>) -> (Layer, Vec<ConfigError>) {
    const ORIGIN: &str = "environment";
    let mut layer = Layer::default();
    let mut warnings = Vec::new();
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    // A value `parse` refuses is a warning, and no setting.
    let mut read = |name: &'static str, expected: &str, parse: &dyn Fn(&str) -> Option<()>| {
        let value = get(name)?;
        match parse(&value) {
            Some(()) => Some(value),
            None => {
                warnings.push(invalid(ORIGIN, name, &value, expected));
                None
            }
        }
    };
    let ok = |b: bool| b.then_some(());
    let endpoint = |v: &str| ok(Endpoint::parse(v).is_ok());
    let protocol = |v: &str| ok(parse_protocol(v).is_some());
    let compression = |v: &str| ok(parse_compression(v).is_some());
    let millis_ok = |v: &str| {
        ok(v.trim()
            .parse::<u64>()
            .ok()
            .and_then(checked_millis)
            .is_some())
    };
    let pairs_ok = |v: &str| ok(parse_pairs(v).is_ok());
    let to_millis = |v: String| v.trim().parse::<u64>().ok().and_then(checked_millis);
    let to_headers = |v: String| -> Option<BTreeMap<String, Secret>> {
        parse_pairs(&v)
            .ok()
            .map(|pairs| pairs.into_iter().map(|(k, v)| (k, Secret(v))).collect())
    };
    const MS: &str = expected::MILLIS;
    const URL: &str = expected::URL;
    const PAIRS: &str = expected::PAIRS;

    layer.endpoint = read("OTEL_EXPORTER_OTLP_ENDPOINT", URL, &endpoint);
    layer.protocol = read("OTEL_EXPORTER_OTLP_PROTOCOL", expected::PROTOCOL, &protocol)
        .and_then(|v| parse_protocol(&v));
    layer.headers = read("OTEL_EXPORTER_OTLP_HEADERS", PAIRS, &pairs_ok)
        .and_then(to_headers)
        .unwrap_or_default();
    layer.ca_file = get("OTEL_EXPORTER_OTLP_CERTIFICATE").map(PathBuf::from);
    layer.gzip = read(
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        expected::COMPRESSION,
        &compression,
    )
    .and_then(|v| parse_compression(&v));
    layer.timeout = read("OTEL_EXPORTER_OTLP_TIMEOUT", MS, &millis_ok).and_then(to_millis);
    layer.interval = read("OTEL_METRIC_EXPORT_INTERVAL", MS, &millis_ok).and_then(to_millis);
    layer.temporality = read(
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
        expected::TEMPORALITY,
        &|v| ok(parse_temporality(v).is_some()),
    )
    .and_then(|v| parse_temporality(&v));
    for (signal, names) in [
        (Signal::Metrics, SIGNAL_VARIABLES[0]),
        (Signal::Logs, SIGNAL_VARIABLES[1]),
    ] {
        let [endpoint_var, protocol_var, headers_var, certificate_var, compression_var, timeout_var] =
            names;
        let own = SignalLayer {
            endpoint: read(endpoint_var, URL, &endpoint),
            protocol: read(protocol_var, expected::PROTOCOL, &protocol)
                .and_then(|v| parse_protocol(&v)),
            headers: read(headers_var, PAIRS, &pairs_ok).and_then(to_headers),
            ca_file: get(certificate_var).map(PathBuf::from),
            gzip: read(compression_var, expected::COMPRESSION, &compression)
                .and_then(|v| parse_compression(&v)),
            timeout: read(timeout_var, MS, &millis_ok).and_then(to_millis),
        };
        match signal {
            Signal::Metrics => layer.metrics = own,
            Signal::Logs => layer.log_signal = own,
        }
    }
    layer.sdk_disabled = read("OTEL_SDK_DISABLED", expected::SWITCH, &|v| {
        ok(matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "true" | "false"
        ))
    })
    .map(|v| v.trim().eq_ignore_ascii_case("true"));
    if let Some(v) = read("OTEL_RESOURCE_ATTRIBUTES", PAIRS, &pairs_ok) {
        layer.resource_attributes = parse_pairs(&v).unwrap_or_default().into_iter().collect();
    }
    layer.service_name = get("OTEL_SERVICE_NAME");
    // gpuslack's own: a bad value is an error when the layers resolve, naming the variable.
    layer.metric_set = get(METRICS_VARIABLE).map(|value| Written {
        origin: ORIGIN,
        field: METRICS_VARIABLE,
        value,
    });
    for (name, slot) in [
        (METRICS_INCLUDE_VARIABLE, &mut layer.metrics_include),
        (METRICS_EXCLUDE_VARIABLE, &mut layer.metrics_exclude),
    ] {
        *slot = get(name).map(|v| Written {
            origin: ORIGIN,
            field: name,
            value: parse_names(&v),
        });
    }
    layer.pod_labels = get(POD_LABELS_VARIABLE).map(|value| Written {
        origin: ORIGIN,
        field: POD_LABELS_VARIABLE,
        value,
    });
    (layer, warnings)
}

/// Each signal's own variables, in the order endpoint, protocol, headers, certificate,
/// compression, timeout.
const SIGNAL_VARIABLES: [[&str; 6]; 2] = [
    [
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    ],
    [
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
        "OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_LOGS_COMPRESSION",
        "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT",
    ],
];
