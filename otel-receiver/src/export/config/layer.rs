//! One layer of export settings (a file, the environment, the flags, a preset), and how a
//! layer above overrides the one below.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{Preset, Protocol, Secret, Temporality};

/// What a signal's own environment variables set (`OTEL_EXPORTER_OTLP_METRICS_*`,
/// `OTEL_EXPORTER_OTLP_LOGS_*`): each wins over the general one of its layer and of the layers
/// below, and gives way to a general value set by a layer above (a flag over the environment).
#[derive(Clone, Default, PartialEq)]
pub struct SignalLayer {
    pub endpoint: Option<String>,
    pub protocol: Option<Protocol>,
    pub headers: Option<BTreeMap<String, Secret>>,
    pub ca_file: Option<PathBuf>,
    pub gzip: Option<bool>,
    pub timeout: Option<Duration>,
}

impl SignalLayer {
    /// `over`'s signal values win; a general value `over_general` sets clears this layer's.
    /// Both sides are destructured without `..`: a new field does not compile until it is
    /// merged here.
    fn merge(self, over: SignalLayer, over_general: &Layer) -> SignalLayer {
        fn pick<T>(over: Option<T>, general_set: bool, below: Option<T>) -> Option<T> {
            over.or(if general_set { None } else { below })
        }
        let SignalLayer {
            endpoint,
            protocol,
            headers,
            ca_file,
            gzip,
            timeout,
        } = self;
        let SignalLayer {
            endpoint: over_endpoint,
            protocol: over_protocol,
            headers: over_headers,
            ca_file: over_ca_file,
            gzip: over_gzip,
            timeout: over_timeout,
        } = over;
        SignalLayer {
            endpoint: pick(over_endpoint, over_general.endpoint.is_some(), endpoint),
            protocol: pick(over_protocol, over_general.protocol.is_some(), protocol),
            headers: pick(over_headers, !over_general.headers.is_empty(), headers),
            ca_file: pick(over_ca_file, over_general.ca_file.is_some(), ca_file),
            gzip: pick(over_gzip, over_general.gzip.is_some(), gzip),
            timeout: pick(over_timeout, over_general.timeout.is_some(), timeout),
        }
    }
}

/// One layer of settings; `None` leaves the value to the layer below.
#[derive(Clone, Default, PartialEq)]
pub struct Layer {
    pub endpoint: Option<String>,
    pub protocol: Option<Protocol>,
    pub headers: BTreeMap<String, Secret>,
    pub ca_file: Option<PathBuf>,
    pub gzip: Option<bool>,
    pub timeout: Option<Duration>,
    pub interval: Option<Duration>,
    pub temporality: Option<Temporality>,
    pub logs: Option<bool>,
    pub preset: Option<Preset>,
    pub prometheus: Option<SocketAddr>,
    pub service_name: Option<String>,
    pub resource_attributes: BTreeMap<String, String>,
    /// The metrics' and the logs' own settings.
    pub metrics: SignalLayer,
    pub log_signal: SignalLayer,
    /// `OTEL_SDK_DISABLED=true`: no OTLP export, whatever else says so.
    pub sdk_disabled: Option<bool>,
    pub max_request_bytes: Option<usize>,
    pub queue_bytes: Option<usize>,
    /// The metric set's name, with where it was written (for the error a typo gives).
    pub metric_set: Option<Written>,
    /// Metric names added to the set; a layer's list replaces the one below.
    pub metrics_include: Option<Written<Vec<String>>>,
    /// Metric names taken from the set (an exclude wins over an include).
    pub metrics_exclude: Option<Written<Vec<String>>>,
    /// The owner's pod on every per-GPU gauge (`--pod-labels`, `GPUSLACK_POD_LABELS`,
    /// `metrics.pod_labels`): `true` or `false` as written, checked when the layers resolve.
    pub pod_labels: Option<Written>,
}

/// A value with the place it was written: `--metrics`, `GPUSLACK_METRICS`, the config file's
/// `metrics.set`. An error in it names the place.
#[derive(Debug, Clone, PartialEq)]
pub struct Written<T = String> {
    pub origin: &'static str,
    pub field: &'static str,
    pub value: T,
}

impl fmt::Debug for Layer {
    // Derived Debug would be fine (Secret redacts) — kept explicit so a new field cannot leak.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Layer")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("preset", &self.preset)
            .finish_non_exhaustive()
    }
}

impl Layer {
    /// `over` wins wherever it says something. Both layers are destructured without `..`: a
    /// new field does not compile until it is merged here.
    pub fn merge(self, over: Layer) -> Layer {
        let Layer {
            endpoint,
            protocol,
            mut headers,
            ca_file,
            gzip,
            timeout,
            interval,
            temporality,
            logs,
            preset,
            prometheus,
            service_name,
            mut resource_attributes,
            metrics,
            log_signal,
            sdk_disabled,
            max_request_bytes,
            queue_bytes,
            metric_set,
            metrics_include,
            metrics_exclude,
            pod_labels,
        } = self;
        let metrics = metrics.merge(over.metrics.clone(), &over);
        let log_signal = log_signal.merge(over.log_signal.clone(), &over);
        let Layer {
            endpoint: over_endpoint,
            protocol: over_protocol,
            headers: over_headers,
            ca_file: over_ca_file,
            gzip: over_gzip,
            timeout: over_timeout,
            interval: over_interval,
            temporality: over_temporality,
            logs: over_logs,
            preset: over_preset,
            prometheus: over_prometheus,
            service_name: over_service_name,
            resource_attributes: over_resource_attributes,
            metrics: _,
            log_signal: _,
            sdk_disabled: over_sdk_disabled,
            max_request_bytes: over_max_request_bytes,
            queue_bytes: over_queue_bytes,
            metric_set: over_metric_set,
            metrics_include: over_metrics_include,
            metrics_exclude: over_metrics_exclude,
            pod_labels: over_pod_labels,
        } = over;
        headers.extend(over_headers);
        resource_attributes.extend(over_resource_attributes);
        Layer {
            endpoint: over_endpoint.or(endpoint),
            protocol: over_protocol.or(protocol),
            headers,
            ca_file: over_ca_file.or(ca_file),
            gzip: over_gzip.or(gzip),
            timeout: over_timeout.or(timeout),
            interval: over_interval.or(interval),
            temporality: over_temporality.or(temporality),
            logs: over_logs.or(logs),
            preset: over_preset.or(preset),
            prometheus: over_prometheus.or(prometheus),
            service_name: over_service_name.or(service_name),
            resource_attributes,
            metrics,
            log_signal,
            sdk_disabled: over_sdk_disabled.or(sdk_disabled),
            max_request_bytes: over_max_request_bytes.or(max_request_bytes),
            queue_bytes: over_queue_bytes.or(queue_bytes),
            metric_set: over_metric_set.or(metric_set),
            metrics_include: over_metrics_include.or(metrics_include),
            metrics_exclude: over_metrics_exclude.or(metrics_exclude),
            pod_labels: over_pod_labels.or(pod_labels),
        }
    }
}
