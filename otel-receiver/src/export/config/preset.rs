//! What a preset (Datadog, the Datadog Agent, Honeycomb) fills in under the layers, and the
//! logs' headers it trims of the metrics intakes' own.

use super::super::selection::MetricSet;
use super::layer::{Layer, Written};
use super::{ConfigError, Preset, Protocol, Secret, Temporality, DATADOG_MAX_REQUEST_BYTES};

const DD_METRIC_CONFIG: &str = "dd-otel-metric-config";
const HONEYCOMB_DATASET: &str = "x-honeycomb-dataset";

/// The log exports' headers. Honeycomb files metrics under `x-honeycomb-dataset` and logs under
/// the resource's `service.name` (in an environment), or `HONEYCOMB_LOGS_DATASET` where set (a
/// Classic team needs one for every signal): the metrics dataset must not catch the logs.
pub(super) fn log_headers(
    headers: &[(String, Secret)],
    preset: Option<Preset>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(String, Secret)> {
    let honeycomb = preset == Some(Preset::Honeycomb);
    let mut out: Vec<(String, Secret)> = headers
        .iter()
        .filter(|(k, _)| k.as_str() != DD_METRIC_CONFIG)
        .filter(|(k, _)| !(honeycomb && k.as_str() == HONEYCOMB_DATASET))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(dataset) = env("HONEYCOMB_LOGS_DATASET").filter(|d| honeycomb && !d.is_empty()) {
        out.push((HONEYCOMB_DATASET.into(), Secret(dataset)));
    }
    out
}

/// What a preset fills in, under whatever the layers say.
pub(super) fn preset_layer(
    preset: Preset,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Layer, ConfigError> {
    let mut layer = Layer {
        temporality: Some(Temporality::Delta),
        ..Layer::default()
    };
    let need = |name: &'static str| {
        env(name)
            .filter(|v| !v.is_empty())
            .ok_or(ConfigError::Invalid {
                origin: "preset",
                field: name,
                problem: "must be set in the environment for this preset".into(),
            })
    };
    match preset {
        Preset::Datadog | Preset::DatadogAgent => {
            // ≤ 25 custom metrics a GPU: what deploy/datadog's monitors and dashboard read;
            // the Agent's OTLP ingest bills them as custom metrics too.
            layer.metric_set = Some(Written {
                origin: "preset",
                field: "datadog",
                value: MetricSet::Datadog.name().into(),
            });
        }
        Preset::Honeycomb => {}
    }
    match preset {
        Preset::Datadog => {
            let site = env("DD_SITE").unwrap_or_else(|| "datadoghq.com".into());
            layer.endpoint = Some(format!("https://otlp.{site}"));
            layer.protocol = Some(Protocol::HttpProtobuf);
            layer.max_request_bytes = Some(DATADOG_MAX_REQUEST_BYTES);
            layer
                .headers
                .insert("dd-api-key".into(), Secret(need("DD_API_KEY")?));
            // Without it the intake drops the resource (host, cluster, service) from the tags.
            layer.headers.insert(
                DD_METRIC_CONFIG.into(),
                Secret(r#"{"resource_attributes_as_tags": true}"#.into()),
            );
        }
        Preset::DatadogAgent => {
            layer.endpoint = Some("http://localhost:4317".into());
            layer.protocol = Some(Protocol::Grpc);
        }
        Preset::Honeycomb => {
            let host = match env("HONEYCOMB_REGION").as_deref() {
                None | Some("") | Some("us") => "api.honeycomb.io",
                Some("eu") => "api.eu1.honeycomb.io",
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        origin: "preset",
                        field: "HONEYCOMB_REGION",
                        problem: format!("{other:?} must be us or eu"),
                    })
                }
            };
            layer.endpoint = Some(format!("https://{host}:443"));
            layer.protocol = Some(Protocol::Grpc);
            layer.temporality = Some(Temporality::Cumulative);
            layer.headers.insert(
                "x-honeycomb-team".into(),
                Secret(need("HONEYCOMB_API_KEY")?),
            );
            let dataset = env("HONEYCOMB_DATASET").unwrap_or_else(|| "gpuslack".into());
            layer
                .headers
                .insert("x-honeycomb-dataset".into(), Secret(dataset));
        }
    }
    Ok(layer)
}
