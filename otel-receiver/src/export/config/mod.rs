//! Export settings from three layers — a TOML file, the standard `OTEL_*` environment variables
//! and command-line flags — each overriding the one before, plus presets for Datadog and
//! Honeycomb that fill in what a user would otherwise look up. Header values are secrets: they
//! never appear in `Debug` output, logs or errors.
//!
//! Split by where settings come from: [`layer`] (one layer and the merge), [`env`](mod@env)
//! (the environment), [`file`](mod@file) (the TOML file), [`preset`] (the presets), [`parse`]
//! (values and the phrases their errors use); here, the resolved types, the defaults and
//! [`resolve`].

pub mod env;
pub mod file;
pub mod layer;
pub mod parse;
pub mod preset;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use super::endpoint::Endpoint;
pub use super::secret::Secret;
use super::selection::{MetricSet, Selection};
pub use env::*;
pub use file::*;
pub use layer::*;
pub use parse::*;
use preset::{log_headers, preset_layer};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`, with the specification's meaning per
/// instrument kind. All of gpuslack's instruments are asynchronous, so `delta` makes the counters
/// delta and keeps the up-down counters cumulative, and `lowmemory` keeps everything cumulative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Temporality {
    Cumulative,
    Delta,
    LowMemory,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Datadog's agentless OTLP intake: HTTP/protobuf, `dd-api-key`, delta.
    Datadog,
    /// A local Datadog Agent's OTLP receiver on 4317, delta.
    DatadogAgent,
    /// Honeycomb over gRPC with `x-honeycomb-team` and `x-honeycomb-dataset`.
    Honeycomb,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unreadable, not a regular file, or past [`MAX_CONFIG_BYTES`] (the error names both).
    #[error(transparent)]
    Read(#[from] crate::files::ReadError),
    #[error("{path}: {message}")]
    Toml { path: String, message: String },
    #[error("{origin}: `{field}`: {problem}")]
    Invalid {
        origin: &'static str,
        field: &'static str,
        problem: String,
    },
}

/// Everything the exporters need, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportConfig {
    pub otlp: Option<OtlpConfig>,
    /// `OTEL_SDK_DISABLED=true` turned OTLP off.
    pub otlp_disabled: bool,
    pub prometheus: Option<SocketAddr>,
    pub service_name: String,
    pub resource_attributes: Vec<(String, String)>,
    /// The metrics exported, on OTLP and Prometheus alike, and their shape (the lean set unless
    /// a layer or the preset names another).
    pub metrics: Selection,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    pub metrics: SignalConfig,
    /// Diagnosis changes as OTLP log records, unless they are turned off.
    pub logs: Option<SignalConfig>,
    pub interval: Duration,
    pub temporality: Temporality,
    /// The largest request sent, as protobuf before compression: a collection larger than this
    /// goes out in parts, and waiting log records join up to it ([`DEFAULT_MAX_REQUEST_BYTES`];
    /// the Datadog preset's is under its metrics intake's 512 KiB, and so under its logs
    /// intake's 5.1 MiB too).
    pub max_request_bytes: usize,
    /// What each signal's sending queue holds at most while the collector does not take it
    /// (the metrics' and the logs' each, so twice this in all).
    pub queue_bytes: usize,
}

/// Under the 4 MiB a gRPC server (the OpenTelemetry Collector's OTLP receiver, the Datadog
/// Agent's) takes by default, compressed or not; the Collector's HTTP receiver takes 20 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4_000_000;

/// Datadog's OTLP metrics intake refuses a request over 512 KiB compressed (HTTP 413); the limit
/// is kept on the uncompressed size, which compression only shrinks.
pub const DATADOG_MAX_REQUEST_BYTES: usize = 500_000;

/// 64 MiB: about 200 exports of an 8-GPU node with 4 owners a GPU (331 KB each), over half an
/// hour at the default 10 s; 20 minutes of a 64-GPU node.
pub const DEFAULT_QUEUE_BYTES: usize = 64 << 20;

/// Where and how one signal is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalConfig {
    /// gRPC: the collector's address; HTTP: the base URL, the signal's path added, unless
    /// `exact`. Without credentials: those written into the URL travel as an `authorization`
    /// header.
    pub endpoint: Endpoint,
    /// The endpoint came from the signal's own variable (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`),
    /// which the specification says is used as given, path included.
    pub exact: bool,
    pub protocol: Protocol,
    /// Headers of this signal's exports. The logs' lack those that only mean something to a
    /// backend's metrics intake (Datadog's `dd-otel-metric-config`, Honeycomb's metrics dataset).
    pub headers: Vec<(String, Secret)>,
    /// A PEM file of extra CA certificates, trusted beside the system roots.
    pub ca_file: Option<PathBuf>,
    pub gzip: bool,
    pub timeout: Duration,
}

impl SignalConfig {
    /// The URL an OTLP/HTTP export of this signal goes to: `path` (`v1/metrics`) appended to the
    /// endpoint, or the endpoint itself when it came from the signal's own variable.
    pub fn http_url(&self, path: &str) -> String {
        if self.exact {
            self.endpoint.as_str().to_string()
        } else {
            self.endpoint.signal_url(path)
        }
    }
}

/// The selection the merged layers name; an unknown set or metric, or nothing selected, is an
/// error naming where it was written.
fn selection(merged: &Layer) -> Result<Selection, ConfigError> {
    let set = match &merged.metric_set {
        Some(w) => MetricSet::parse(&w.value).map_err(|e| ConfigError::Invalid {
            origin: w.origin,
            field: w.field,
            problem: e.to_string(),
        })?,
        None => super::selection::DEFAULT_SET,
    };
    let list =
        |w: &Option<Written<Vec<String>>>| w.as_ref().map(|w| w.value.clone()).unwrap_or_default();
    let pod_labels = match &merged.pod_labels {
        Some(w) => Some(parse_switch(&w.value).ok_or_else(|| ConfigError::Invalid {
            origin: w.origin,
            field: w.field,
            problem: format!("expected {}, not {:?}", expected::SWITCH, w.value),
        })?),
        None => None,
    };
    let selection = Selection::new(
        set,
        &list(&merged.metrics_include),
        &list(&merged.metrics_exclude),
    )
    .map_err(|e| {
        // The place of the list that names the unknown metric; else the set's.
        let unknown = match &e {
            super::selection::SelectionError::UnknownMetric { name, .. } => Some(name),
            _ => None,
        };
        let place = [&merged.metrics_include, &merged.metrics_exclude]
            .into_iter()
            .flatten()
            .find(|w| unknown.is_some_and(|u| w.value.iter().any(|n| n.trim() == u)))
            .map(|w| (w.origin, w.field))
            .or(merged.metric_set.as_ref().map(|w| (w.origin, w.field)))
            .unwrap_or(("metrics", "set"));
        ConfigError::Invalid {
            origin: place.0,
            field: place.1,
            problem: e.to_string(),
        }
    })?;
    // The set's default (on in dcgm, off elsewhere) unless a layer says otherwise.
    Ok(match pod_labels {
        Some(on) => selection.with_pod_labels(on),
        None => selection,
    })
}

/// Resolves the layers (later ones win) into a configuration.
pub fn resolve(
    layers: Vec<Layer>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ExportConfig, ConfigError> {
    let merged = layers.into_iter().fold(Layer::default(), Layer::merge);
    let merged = match merged.preset {
        Some(preset) => preset_layer(preset, env)?.merge(merged),
        None => merged,
    };
    let sdk_disabled = merged.sdk_disabled == Some(true);
    let metrics = signal_config(&merged, &merged.metrics, "metrics")?;
    let otlp = match metrics {
        Some(metrics) if !sdk_disabled => {
            let logs = if merged.logs.unwrap_or(true) {
                signal_config(&merged, &merged.log_signal, "logs")?.map(|mut logs| {
                    // Only the general headers are trimmed of the metrics intakes' own.
                    if merged.log_signal.headers.is_none() {
                        logs.headers = log_headers(&logs.headers, merged.preset, env);
                    }
                    logs
                })
            } else {
                None
            };
            Some(OtlpConfig {
                metrics,
                logs,
                interval: merged.interval.unwrap_or(Duration::from_secs(10)),
                temporality: merged.temporality.unwrap_or(Temporality::Cumulative),
                max_request_bytes: merged
                    .max_request_bytes
                    .unwrap_or(DEFAULT_MAX_REQUEST_BYTES),
                queue_bytes: merged.queue_bytes.unwrap_or(DEFAULT_QUEUE_BYTES),
            })
        }
        _ => None,
    };
    Ok(ExportConfig {
        metrics: selection(&merged)?,
        otlp,
        otlp_disabled: sdk_disabled,
        prometheus: merged.prometheus,
        service_name: merged.service_name.unwrap_or_else(|| "gpuslack".into()),
        resource_attributes: merged.resource_attributes.into_iter().collect(),
    })
}

/// One signal's settings: its own where it has them, the general ones otherwise; `None` when
/// no endpoint is set for it.
fn signal_config(
    merged: &Layer,
    own: &SignalLayer,
    signal: &'static str,
) -> Result<Option<SignalConfig>, ConfigError> {
    let (text, exact) = match (&own.endpoint, &merged.endpoint) {
        (Some(own), _) => (own, true),
        (None, Some(general)) => (general, false),
        (None, None) => return Ok(None),
    };
    let endpoint = Endpoint::parse(text).map_err(|e| ConfigError::Invalid {
        origin: "otlp",
        field: if exact { signal } else { "endpoint" },
        problem: e.to_string(),
    })?;
    let mut headers = own
        .headers
        .clone()
        .unwrap_or_else(|| merged.headers.clone());
    for (k, v) in &headers {
        check_header("otlp", k, v.expose())?;
    }
    // Credentials from the URL, unless a header already says who the agent is.
    if let Some(auth) = endpoint.basic_auth() {
        if !headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"))
        {
            headers.insert("authorization".into(), auth.clone());
        }
    }
    Ok(Some(SignalConfig {
        endpoint,
        exact,
        protocol: own.protocol.or(merged.protocol).unwrap_or(Protocol::Grpc),
        headers: headers.into_iter().collect(),
        ca_file: own.ca_file.clone().or_else(|| merged.ca_file.clone()),
        // Every intake gpuslack knows takes gzip (docs/EXPORT.md): on unless turned off.
        gzip: own.gzip.or(merged.gzip).unwrap_or(true),
        timeout: own
            .timeout
            .or(merged.timeout)
            .unwrap_or(Duration::from_secs(10)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| vars.get(k).cloned()
    }

    #[test]
    fn pod_labels_are_the_dcgm_sets_by_default_and_a_switch_in_every_layer() {
        use crate::export::selection::MetricSet;
        let none = |_: &str| None;
        let file = |text: &str| file_layer_from_str(text, "gpuslack.toml").expect("file");
        // The set's default: on in dcgm, off elsewhere.
        let dcgm = resolve(vec![file("[metrics]\nset = \"dcgm\"\n")], &none).expect("dcgm");
        assert_eq!(dcgm.metrics.set(), MetricSet::Dcgm);
        assert!(dcgm.metrics.pod_labels());
        let lean = resolve(vec![file("[metrics]\nset = \"lean\"\n")], &none).expect("lean");
        assert!(!lean.metrics.pod_labels());
        // The file turns them on for lean; the environment off again; a flag on.
        let on = file("[metrics]\nset = \"lean\"\npod_labels = true\n");
        assert!(resolve(vec![on.clone()], &none)
            .expect("on")
            .metrics
            .pod_labels());
        let (off, warnings) = env_layer(env(&[("GPUSLACK_POD_LABELS", "false")]));
        assert!(warnings.is_empty());
        let c = resolve(vec![on.clone(), off.clone()], &none).expect("env");
        assert!(!c.metrics.pod_labels());
        let flag = Layer {
            pod_labels: Some(Written {
                origin: "flag",
                field: "--pod-labels",
                value: "true".into(),
            }),
            ..Layer::default()
        };
        let c = resolve(vec![on, off, flag], &none).expect("flag");
        assert!(c.metrics.pod_labels());
        // A value that is not a switch names where it was written.
        let (bad, _) = env_layer(env(&[("GPUSLACK_POD_LABELS", "sometimes")]));
        let e = resolve(vec![bad], &none).expect_err("not a switch");
        assert_eq!(
            e.to_string(),
            "environment: `GPUSLACK_POD_LABELS`: expected true or false, not \"sometimes\""
        );
    }

    #[test]
    fn the_metric_set_and_lists_layer_file_then_environment_then_flags() {
        use crate::export::selection::MetricSet;
        let file = file_layer_from_str(
            "[metrics]\nset = \"dcgm\"\ninclude = [\"gpuslack.fan.speed\"]\nexclude = [\"hw.power\"]\n",
            "gpuslack.toml",
        )
        .expect("file");
        let none = |_: &str| None;
        let c = resolve(vec![file.clone()], &none).expect("file alone");
        assert_eq!(c.metrics.set(), MetricSet::Dcgm);
        assert!(c.metrics.has("gpuslack.fan.speed"));
        assert!(!c.metrics.has("hw.power"));
        // The environment's set and include replace the file's; the file's exclude stays.
        let vars = env(&[
            ("GPUSLACK_METRICS", "Lean"),
            (
                "GPUSLACK_METRICS_INCLUDE",
                "gpuslack.clock.sm, gpuslack.clock.memory",
            ),
        ]);
        let (from_env, warnings) = env_layer(&vars);
        assert!(warnings.is_empty());
        let c = resolve(vec![file.clone(), from_env.clone()], &none).expect("env");
        assert_eq!(c.metrics.set(), MetricSet::Lean);
        assert!(c.metrics.has("gpuslack.clock.memory") && !c.metrics.has("gpuslack.fan.speed"));
        assert!(!c.metrics.has("hw.power"));
        // A flag's set wins over both.
        let flags = Layer {
            metric_set: Some(Written {
                origin: "flag",
                field: "--metrics",
                value: "full".into(),
            }),
            ..Layer::default()
        };
        let c = resolve(vec![file, from_env, flags], &none).expect("flags");
        assert_eq!(c.metrics.set(), MetricSet::Full);
        // No layer: the default set. The Datadog preset brings its own, under the layers.
        let c = resolve(vec![Layer::default()], &none).expect("default");
        assert_eq!(c.metrics.set(), crate::export::selection::DEFAULT_SET);
        let dd = env(&[("DD_API_KEY", "k")]);
        let preset = Layer {
            preset: Some(Preset::Datadog),
            ..Layer::default()
        };
        let c = resolve(vec![preset.clone()], &dd).expect("datadog");
        assert_eq!(c.metrics.set(), MetricSet::Datadog);
        let over = Layer {
            metric_set: Some(Written {
                origin: "flag",
                field: "--metrics",
                value: "lean".into(),
            }),
            ..Layer::default()
        };
        let c = resolve(vec![preset, over], &dd).expect("datadog, lean");
        assert_eq!(c.metrics.set(), MetricSet::Lean);
    }

    #[test]
    fn each_preset_brings_the_set_its_backend_bills_for() {
        use crate::export::selection::MetricSet;
        let e = env(&[("DD_API_KEY", "k"), ("HONEYCOMB_API_KEY", "h")]);
        let with = |preset| {
            resolve(
                vec![Layer {
                    preset: Some(preset),
                    ..Layer::default()
                }],
                &e,
            )
            .expect("preset")
        };
        let dd = with(Preset::Datadog);
        assert_eq!(dd.metrics.set(), MetricSet::Datadog);
        assert_eq!(
            dd.otlp.as_ref().map(|o| o.temporality),
            Some(Temporality::Delta)
        );
        let agent = with(Preset::DatadogAgent);
        assert_eq!(agent.metrics.set(), MetricSet::Datadog);
        assert_eq!(
            agent.otlp.as_ref().map(|o| o.temporality),
            Some(Temporality::Delta)
        );
        // Honeycomb: the lean set, and the verdicts as events (the log records) as before.
        let hc = with(Preset::Honeycomb);
        assert_eq!(hc.metrics.set(), MetricSet::Lean);
        assert!(hc.otlp.as_ref().is_some_and(|o| o.logs.is_some()));
    }

    #[test]
    fn a_bad_selection_names_where_it_was_written() {
        let none = |_: &str| None;
        let (typo, _) = env_layer(env(&[("GPUSLACK_METRICS", "laen")]));
        let e = resolve(vec![typo], &none).expect_err("a set typo");
        assert_eq!(
            e.to_string(),
            "environment: `GPUSLACK_METRICS`: unknown metric set \"laen\" (did you mean \"lean\"?): the sets are lean, full, dcgm and datadog"
        );
        let file = file_layer_from_str("[metrics]\ninclude = [\"hw.temprature\"]\n", "g.toml")
            .expect("read: names are checked at resolve");
        let e = resolve(vec![file], &none).expect_err("an unknown metric");
        assert!(
            e.to_string().starts_with("config file: `metrics.include`: unknown metric \"hw.temprature\" (did you mean \"hw.temperature\"?)"),
            "{e}"
        );
        let flags = Layer {
            metric_set: Some(Written {
                origin: "flag",
                field: "--metrics",
                value: "dcgm".into(),
            }),
            metrics_exclude: Some(Written {
                origin: "flag",
                field: "--metrics-exclude",
                value: crate::export::catalogue::ALL
                    .iter()
                    .chain(&crate::export::catalogue::DCGM_FIELDS)
                    .map(|d| d.name.to_string())
                    .collect(),
            }),
            ..Layer::default()
        };
        let e = resolve(vec![flags], &none).expect_err("nothing selected");
        assert_eq!(
            e.to_string(),
            "flag: `--metrics`: the metric set dcgm with these includes and excludes selects no metric: nothing would be exported"
        );
        let e = file_layer_from_str("[metrics]\nsett = \"lean\"\n", "g.toml").expect_err("key");
        assert!(e.to_string().contains("sett"), "{e}");
    }

    #[test]
    fn flags_override_environment_which_overrides_the_file() {
        let dir = std::env::temp_dir().join(format!("gpuslack-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("gpuslack.toml");
        std::fs::write(
            &path,
            "[otlp]\nendpoint = \"http://file:4317\"\ninterval_ms = 5000\ntemporality = \"delta\"\nheaders = { \"x-file\" = \"f\" }\n[prometheus]\nlisten = \"127.0.0.1:9464\"\n[resource]\nattributes = { \"deployment.environment\" = \"prod\" }\n",
        )
        .expect("write");
        let file = file_layer(&path).expect("file");
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-env=e%3D1,x-file=from-env"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "team=ml,deployment.environment=staging",
            ),
            ("OTEL_SERVICE_NAME", "gpu-agent"),
        ]);
        let (env_layer, warnings) = env_layer(&e);
        assert!(warnings.is_empty(), "{warnings:?}");
        let flags = Layer {
            interval: Some(Duration::from_millis(250)),
            ..Layer::default()
        };
        let c = resolve(vec![file, env_layer, flags], &e).expect("resolve");
        let o = c.otlp.expect("otlp on");
        assert_eq!(o.metrics.endpoint.to_string(), "http://env:4318");
        assert_eq!(o.metrics.protocol, Protocol::HttpProtobuf);
        assert_eq!(o.interval, Duration::from_millis(250));
        assert_eq!(o.temporality, Temporality::Delta);
        let headers: BTreeMap<&str, &str> = o
            .metrics
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(headers.get("x-env"), Some(&"e=1"));
        assert_eq!(headers.get("x-file"), Some(&"from-env"));
        assert_eq!(c.prometheus, Some("127.0.0.1:9464".parse().expect("addr")));
        assert_eq!(c.service_name, "gpu-agent");
        assert!(c
            .resource_attributes
            .contains(&("deployment.environment".into(), "staging".into())));
        assert!(c
            .resource_attributes
            .contains(&("team".into(), "ml".into())));
    }

    #[test]
    fn presets_fill_in_endpoint_headers_and_temporality() {
        let e = env(&[("DD_API_KEY", "sekrit"), ("DD_SITE", "datadoghq.eu")]);
        let c = resolve(
            vec![Layer {
                preset: Some(Preset::Datadog),
                ..Layer::default()
            }],
            &e,
        )
        .expect("resolve");
        let o = c.otlp.expect("otlp");
        assert_eq!(o.metrics.endpoint.to_string(), "https://otlp.datadoghq.eu");
        assert_eq!(
            (o.metrics.protocol, o.temporality),
            (Protocol::HttpProtobuf, Temporality::Delta)
        );
        assert_eq!(o.metrics.headers[0].0, "dd-api-key");
        assert_eq!(o.metrics.headers[0].1.expose(), "sekrit");
        // Resource attributes become tags: the intake's metric-translator header, metrics only.
        assert_eq!(o.metrics.headers[1].0, "dd-otel-metric-config");
        assert!(o.metrics.headers[1]
            .1
            .expose()
            .contains("\"resource_attributes_as_tags\": true"));
        assert_eq!(o.logs.as_ref().expect("logs").headers.len(), 1);
        // Honeycomb EU; metrics to their dataset, logs to service.name's or their own.
        let honeycomb = |vars: &[(&str, &str)]| {
            resolve(
                vec![Layer {
                    preset: Some(Preset::Honeycomb),
                    ..Layer::default()
                }],
                &env(vars),
            )
        };
        let eu = honeycomb(&[("HONEYCOMB_API_KEY", "k"), ("HONEYCOMB_REGION", "eu")])
            .expect("resolve")
            .otlp
            .expect("otlp");
        // 443 is https's own port: the URL drops it.
        assert_eq!(
            eu.metrics.endpoint.to_string(),
            "https://api.eu1.honeycomb.io"
        );
        let names = |h: &[(String, Secret)]| h.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&eu.metrics.headers),
            ["x-honeycomb-dataset", "x-honeycomb-team"]
        );
        assert_eq!(
            names(&eu.logs.as_ref().expect("logs").headers),
            ["x-honeycomb-team"]
        );
        let classic = honeycomb(&[
            ("HONEYCOMB_API_KEY", "k"),
            ("HONEYCOMB_LOGS_DATASET", "gpu-logs"),
        ])
        .expect("resolve")
        .otlp
        .expect("otlp");
        assert_eq!(
            classic.metrics.endpoint.to_string(),
            "https://api.honeycomb.io"
        );
        assert_eq!(
            classic.logs.as_ref().expect("logs").headers[1].1.expose(),
            "gpu-logs"
        );
        let bad = honeycomb(&[("HONEYCOMB_API_KEY", "k"), ("HONEYCOMB_REGION", "apac")]);
        assert!(bad
            .expect_err("region")
            .to_string()
            .contains("HONEYCOMB_REGION"));
        let missing = resolve(
            vec![Layer {
                preset: Some(Preset::Honeycomb),
                ..Layer::default()
            }],
            &env(&[]),
        );
        assert!(missing
            .expect_err("no key")
            .to_string()
            .contains("HONEYCOMB_API_KEY"));
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4317"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "dd-api-key=topsecret"),
        ]);
        let c = resolve(vec![env_layer(&e).0], &e).expect("resolve");
        let shown = format!("{c:?} {:?}", env_layer(&e).0);
        assert!(!shown.contains("topsecret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn bad_values_name_their_origin_and_field() {
        let e = env(&[("OTEL_METRIC_EXPORT_INTERVAL", "soon")]);
        let (layer, warnings) = env_layer(&e);
        assert_eq!(layer.interval, None, "an invalid value sets nothing");
        let err = warnings[0].to_string();
        assert_eq!(err, "environment: `OTEL_METRIC_EXPORT_INTERVAL`: \"soon\" is not a number of milliseconds from 1 to 600000");
        let dir = std::env::temp_dir().join(format!("gpuslack-config-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("bad.toml");
        std::fs::write(&path, "[otlp]\nendpont = \"http://x\"\n").expect("write");
        let err = file_layer(&path).expect_err("typo").to_string();
        assert!(err.contains("bad.toml") && err.contains("endpont"), "{err}");
        let err = resolve(
            vec![Layer {
                endpoint: Some("collector:4317".into()),
                ..Layer::default()
            }],
            &env(&[]),
        );
        assert!(err
            .expect_err("no scheme")
            .to_string()
            .contains("must start with http"));
    }

    #[test]
    fn durations_from_every_origin_share_the_flags_range() {
        for (ms, ok) in [
            ("0", false),
            ("1", true),
            ("600000", true),
            ("600001", false),
        ] {
            let (from_env, warnings) = env_layer(env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", ms)]));
            assert_eq!(from_env.timeout.is_some(), ok, "environment {ms}");
            assert_eq!(warnings.is_empty(), ok, "environment {ms}");
            let from_file = file_layer_from_str(&format!("[otlp]\ninterval_ms = {ms}\n"), "f.toml");
            assert_eq!(from_file.is_ok(), ok, "file {ms}");
            assert_eq!(checked_millis(ms.parse().expect("number")).is_some(), ok);
        }
        let (layer, warnings) = env_layer(env(&[(
            "OTEL_EXPORTER_OTLP_TIMEOUT",
            "18446744073709551615",
        )]));
        assert_eq!(layer.timeout, None);
        let err = warnings[0].to_string();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_TIMEOUT") && err.contains("1 to 600000"),
            "{err}"
        );
    }

    /// One row of docs/EXPORT.md's table of `OTEL_*` variables each.
    #[test]
    fn every_otel_variable_does_what_the_table_says() {
        let resolved = |vars: &[(&str, &str)]| {
            let e = env(vars);
            let (layer, warnings) = env_layer(&e);
            (resolve(vec![layer], &e).expect("resolve"), warnings)
        };
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/base");
        // OTEL_EXPORTER_OTLP_ENDPOINT: the signal's path appended.
        let (c, _) = resolved(&[base]);
        let o = c.otlp.expect("otlp");
        assert_eq!(
            o.metrics.http_url("v1/metrics"),
            "http://c:4318/base/v1/metrics"
        );
        // _METRICS_ENDPOINT and _LOGS_ENDPOINT: used as given.
        let (c, _) = resolved(&[
            base,
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://m:4318/custom/metrics",
            ),
            (
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
                "http://l:4318/custom/logs",
            ),
        ]);
        let o = c.otlp.expect("otlp");
        assert_eq!(
            o.metrics.http_url("v1/metrics"),
            "http://m:4318/custom/metrics"
        );
        let logs = o.logs.expect("logs");
        assert_eq!(logs.http_url("v1/logs"), "http://l:4318/custom/logs");
        // A signal's own endpoint alone turns OTLP on for it.
        let (c, _) = resolved(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:4317")]);
        let o = c.otlp.expect("metrics alone");
        assert!(o.logs.is_none(), "no endpoint for the logs");
        // Per-signal protocol, headers, compression, timeout and certificate win over the general.
        let (c, w) = resolved(&[
            base,
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "GRPC"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "HTTP/Protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "b=2"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "None"),
            ("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "GZIP"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
            ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "3000"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/general.pem"),
            ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "/metrics.pem"),
        ]);
        assert!(w.is_empty(), "values are case-insensitive: {w:?}");
        let o = c.otlp.expect("otlp");
        let logs = o.logs.clone().expect("logs");
        assert_eq!(
            (o.metrics.protocol, logs.protocol),
            (Protocol::HttpProtobuf, Protocol::Grpc)
        );
        let names = |h: &[(String, Secret)]| h.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        assert_eq!(
            (names(&o.metrics.headers), names(&logs.headers)),
            (vec!["b".to_string()], vec!["a".to_string()])
        );
        assert_eq!((o.metrics.gzip, logs.gzip), (false, true));
        assert_eq!(
            (o.metrics.timeout, logs.timeout),
            (Duration::from_secs(2), Duration::from_secs(3))
        );
        assert_eq!(
            (o.metrics.ca_file.clone(), logs.ca_file.clone()),
            (
                Some(PathBuf::from("/metrics.pem")),
                Some(PathBuf::from("/general.pem"))
            )
        );
        // gzip is on unless turned off.
        let (c, _) = resolved(&[base]);
        assert!(c.otlp.expect("otlp").metrics.gzip);
        // Temporality: the specification's three preferences, any case.
        for (v, t) in [
            ("Cumulative", Temporality::Cumulative),
            ("DELTA", Temporality::Delta),
            ("lowMemory", Temporality::LowMemory),
        ] {
            let (c, _) = resolved(&[
                base,
                ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", v),
            ]);
            assert_eq!(c.otlp.expect("otlp").temporality, t, "{v}");
        }
        // OTEL_SDK_DISABLED: no OTLP at all; anything but true/false is a warning.
        let (c, _) = resolved(&[base, ("OTEL_SDK_DISABLED", "TRUE")]);
        assert!(c.otlp.is_none() && c.otlp_disabled);
        let (c, w) = resolved(&[base, ("OTEL_SDK_DISABLED", "yes")]);
        assert!(c.otlp.is_some() && w[0].to_string().contains("OTEL_SDK_DISABLED"));
        // Invalid values: a warning naming the variable, and the default.
        for (name, value) in [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "-1"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "soon"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
                "sometimes",
            ),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "m:4317"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "novalue"),
        ] {
            let (c, w) = resolved(&[base, (name, value)]);
            assert_eq!(w.len(), 1, "{name}: {w:?}");
            assert!(w[0].to_string().contains(name), "{}", w[0]);
            let o = c.otlp.expect("the rest still resolves");
            assert_eq!(o.metrics.protocol, Protocol::Grpc, "{name}");
            assert!(o.metrics.gzip, "{name}");
            assert_eq!(o.metrics.timeout, Duration::from_secs(10), "{name}");
            assert_eq!(o.interval, Duration::from_secs(10), "{name}");
            assert_eq!(o.temporality, Temporality::Cumulative, "{name}");
            assert!(!o.metrics.exact, "{name}");
            assert!(o.metrics.headers.is_empty(), "{name}");
        }
        // An invalid general endpoint: a warning, and no OTLP (there is no default endpoint).
        let (c, w) = resolved(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]);
        assert!(c.otlp.is_none() && w[0].to_string().contains("OTEL_EXPORTER_OTLP_ENDPOINT"));
        // A flag's general endpoint wins over the environment's per-signal one.
        let e = env(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://env:4318/m")]);
        let flags = Layer {
            endpoint: Some("http://flag:4317".into()),
            ..Layer::default()
        };
        let c = resolve(vec![env_layer(&e).0, flags], &e).expect("resolve");
        assert_eq!(
            c.otlp.expect("otlp").metrics.endpoint.to_string(),
            "http://flag:4317"
        );
    }

    #[test]
    fn credentials_in_the_endpoint_become_an_authorization_header() {
        let layer = |endpoint: &str, headers: &[(&str, &str)]| Layer {
            endpoint: Some(endpoint.into()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), Secret::new(*v)))
                .collect(),
            ..Layer::default()
        };
        let c = resolve(vec![layer("http://user:pw@host:4318", &[])], &env(&[])).expect("resolve");
        let o = c.otlp.expect("otlp");
        assert_eq!(o.metrics.endpoint.to_string(), "http://host:4318");
        let auth: Vec<&str> = o
            .metrics
            .headers
            .iter()
            .chain(&o.logs.as_ref().expect("logs").headers)
            .filter(|(k, _)| k == "authorization")
            .map(|(_, v)| v.expose())
            .collect();
        assert_eq!(auth, ["Basic dXNlcjpwdw==", "Basic dXNlcjpwdw=="]);
        assert!(!format!("{o:?}").contains("pw"));
        // A header the user set wins over the URL's credentials.
        let c = resolve(
            vec![layer(
                "http://user:pw@host",
                &[("Authorization", "Bearer t")],
            )],
            &env(&[]),
        )
        .expect("resolve");
        let o = c.otlp.expect("otlp");
        assert_eq!(o.metrics.headers.len(), 1);
        assert_eq!(o.metrics.headers[0].1.expose(), "Bearer t");
        let err = resolve(vec![layer("http://user:pw@host:99999", &[])], &env(&[]))
            .expect_err("port")
            .to_string();
        assert!(err.contains("port") && !err.contains("pw"), "{err}");
    }

    #[test]
    fn pairs_decode_once_and_bad_ones_are_named_without_their_value() {
        assert_eq!(
            parse_pairs("a=x%3Dy, b = %25 ,c=").expect("pairs"),
            vec![
                ("a".into(), "x=y".into()),
                ("b".into(), "%".into()),
                ("c".into(), String::new())
            ]
        );
        // Once: %2541 is "%41", not "A".
        assert_eq!(parse_pairs("k=%2541").expect("pairs")[0].1, "%41");
        assert_eq!(
            parse_pairs("k=%aé"),
            Ok(vec![("k".into(), "%aé".into())]),
            "an incomplete escape is kept as it is, and never panics"
        );
        assert_eq!(
            parse_pairs("ok=1,=x"),
            Err(PairsError::Malformed { index: 2 })
        );
        assert_eq!(
            parse_pairs("k=%ff%fe"),
            Err(PairsError::NotUtf8 { key: "k".into() })
        );
        let e = check_header("flags", "x-key", "line\nbreak").expect_err("control character");
        assert!(e.to_string().contains("\"x-key\""), "{e}");
        assert!(
            !e.to_string().contains("line"),
            "the value is never shown: {e}"
        );
        assert!(check_header("flags", "bad header", "v").is_err());
        assert!(check_header("flags", "dd-api-key", "abc").is_ok());
    }

    #[test]
    fn only_the_variables_gpuslack_reads_are_called_supported() {
        assert!(is_sdk_exporter_variable("OTEL_EXPORTER_OTLP_HEADERS"));
        assert!(!is_unsupported_exporter_variable(
            "OTEL_EXPORTER_OTLP_HEADERS"
        ));
        assert!(!is_unsupported_exporter_variable(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
        ));
        assert!(is_unsupported_exporter_variable(
            "OTEL_EXPORTER_OTLP_CLIENT_KEY"
        ));
        assert!(is_unsupported_exporter_variable(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        ));
        assert!(!is_sdk_exporter_variable("OTEL_SERVICE_NAME"));
    }

    #[test]
    fn a_bare_prometheus_port_listens_on_loopback() {
        assert_eq!(
            parse_listen("9464"),
            Some("127.0.0.1:9464".parse().expect("addr"))
        );
        assert_eq!(
            parse_listen("0.0.0.0:9464"),
            Some("0.0.0.0:9464".parse().expect("addr"))
        );
        assert_eq!(parse_listen("everywhere"), None);
    }

    #[test]
    fn nothing_configured_means_no_otlp() {
        let c = resolve(vec![Layer::default()], &env(&[])).expect("resolve");
        assert!(c.otlp.is_none() && c.prometheus.is_none());
        assert_eq!(c.service_name, "gpuslack");
    }

    #[test]
    fn an_invalid_endpoint_in_the_environment_is_warned_about_without_its_password() {
        let (layer, warnings) = env_layer(env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://alice:s3cr3t@host:99999",
        )]));
        assert!(layer.endpoint.is_none());
        let w = warnings[0].to_string();
        assert!(w.contains("\"http://host:99999\" is not"), "{w}");
        assert!(!w.contains("s3cr3t") && !w.contains("alice"), "{w}");
    }

    #[test]
    fn a_config_file_is_read_up_to_its_cap_and_refused_past_it() {
        let dir = std::env::temp_dir().join(format!("gpuslack-config-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let at_cap = dir.join("at-cap.toml");
        let mut text = "[otlp]\nendpoint = \"http://x:4318\"\n".to_string();
        text.push_str(&"#".repeat(MAX_CONFIG_BYTES as usize - text.len() - 1));
        text.push('\n');
        assert_eq!(text.len() as u64, MAX_CONFIG_BYTES);
        std::fs::write(&at_cap, &text).expect("write");
        assert!(file_layer(&at_cap).expect("read").endpoint.is_some());
        let past = dir.join("past-cap.toml");
        text.push('\n');
        std::fs::write(&past, &text).expect("write");
        let e = file_layer(&past).expect_err("too large").to_string();
        assert_eq!(
            e,
            format!(
                "{}: larger than 1 MiB, the most a config file may be: refused before it is read whole",
                past.display()
            )
        );
        let e = file_layer(Path::new("/dev/zero"))
            .expect_err("endless")
            .to_string();
        assert_eq!(
            e,
            "/dev/zero: is a character device, not a regular file: a config file must be one"
        );
    }
}
