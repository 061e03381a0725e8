//! Cutting an OTLP request in two, for an intake that refuses it as too large (HTTP 413, gRPC
//! `ResourceExhausted` on the message size) or before sending one past the configured limit:
//! each half keeps the resource, the scope and (metrics) the metric's name, unit and kind of the
//! items it carries, so that the two requests together say exactly what the one did. Here too,
//! each signal's request type as the sending queue's [`Payload`], and the joining of log
//! records that wait.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::logs::v1::ResourceLogs;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use prost::Message as _;

use super::super::delivery::Signal;
use super::super::queue::Payload;

impl Payload for ExportMetricsServiceRequest {
    const SIGNAL: Signal = Signal::Metrics;
    const HTTP_PATH: &'static str = "v1/metrics";

    fn items(&self) -> u64 {
        points(self)
    }

    fn halve(&self) -> Option<(Self, Self)> {
        halve(self)
    }

    /// Always joins: the other collection's resources follow this one's, each with its own
    /// points and times (consecutive collections of the same series, in order).
    fn absorb(&mut self, other: Self) -> Result<(), Self> {
        self.resource_metrics.extend(other.resource_metrics);
        Ok(())
    }

    /// The request's one field is the repeated `resource_metrics`: two encodings concatenated
    /// decode as one request with both's resources in order, which is what
    /// [`absorb`](Payload::absorb) does, without decoding either.
    fn join_encoded(into: &mut Vec<u8>, other: &[u8]) -> bool {
        into.reserve_exact(other.len());
        into.extend_from_slice(other);
        true
    }
}

impl Payload for ExportLogsServiceRequest {
    const SIGNAL: Signal = Signal::Logs;
    const HTTP_PATH: &'static str = "v1/logs";

    fn items(&self) -> u64 {
        records(self)
    }

    fn halve(&self) -> Option<(Self, Self)> {
        halve_logs(self)
    }

    /// Always joins: records of the same resource and scope as the last ones go into their
    /// scope, any others into a resource or scope of their own, in order.
    fn absorb(&mut self, other: Self) -> Result<(), Self> {
        for resource in other.resource_logs {
            join_resource(&mut self.resource_logs, resource);
        }
        Ok(())
    }
}

fn join_resource(into: &mut Vec<ResourceLogs>, resource: ResourceLogs) {
    let same = |last: &ResourceLogs| {
        last.resource == resource.resource && last.schema_url == resource.schema_url
    };
    match into.last_mut().filter(|last| same(last)) {
        Some(last) => {
            for scope in resource.scope_logs {
                match last
                    .scope_logs
                    .last_mut()
                    .filter(|l| l.scope == scope.scope && l.schema_url == scope.schema_url)
                {
                    Some(l) => l.log_records.extend(scope.log_records),
                    None => last.scope_logs.push(scope),
                }
            }
        }
        None => into.push(resource),
    }
}

/// Log records in a request.
pub fn records(request: &ExportLogsServiceRequest) -> u64 {
    request
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len())
        .sum::<usize>() as u64
}

/// The logs request cut into two with about half the records each, in order; `None` for a
/// single record.
fn halve_logs(
    request: &ExportLogsServiceRequest,
) -> Option<(ExportLogsServiceRequest, ExportLogsServiceRequest)> {
    let total = records(request) as usize;
    if total < 2 {
        return None;
    }
    let half = total / 2;
    let mut left = request.clone();
    let mut right = request.clone();
    let mut seen = 0usize;
    for (r, resource) in request.resource_logs.iter().enumerate() {
        for (s, scope) in resource.scope_logs.iter().enumerate() {
            let n = scope.log_records.len();
            let take = half.saturating_sub(seen).min(n);
            left.resource_logs[r].scope_logs[s].log_records = scope.log_records[..take].to_vec();
            right.resource_logs[r].scope_logs[s].log_records = scope.log_records[take..].to_vec();
            seen += n;
        }
    }
    for side in [&mut left, &mut right] {
        for resource in &mut side.resource_logs {
            resource.scope_logs.retain(|s| !s.log_records.is_empty());
        }
        side.resource_logs.retain(|r| !r.scope_logs.is_empty());
    }
    Some((left, right))
}

/// Data points in a request, whatever their kind.
pub fn points(request: &ExportMetricsServiceRequest) -> u64 {
    request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(metric_points)
        .sum::<usize>() as u64
}

/// Points the SDK folded into its overflow series (`otel.metric.overflow = true`) because an
/// instrument passed its cardinality limit: should never happen within the series budget.
pub fn overflowed(request: &ExportMetricsServiceRequest) -> u64 {
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, KeyValue};
    let is_overflow = |attrs: &[KeyValue]| {
        attrs.iter().any(|kv| {
            kv.key == "otel.metric.overflow"
                && matches!(
                    kv.value.as_ref().and_then(|v| v.value.as_ref()),
                    Some(Value::BoolValue(true))
                )
        })
    };
    request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g
                .data_points
                .iter()
                .filter(|p| is_overflow(&p.attributes))
                .count(),
            Some(Data::Sum(s)) => s
                .data_points
                .iter()
                .filter(|p| is_overflow(&p.attributes))
                .count(),
            _ => 0,
        })
        .sum::<usize>() as u64
}

/// The request's size as protobuf, before compression.
pub fn encoded_len(request: &ExportMetricsServiceRequest) -> usize {
    request.encoded_len()
}

fn metric_points(metric: &Metric) -> usize {
    match &metric.data {
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        Some(Data::Histogram(h)) => h.data_points.len(),
        Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
        Some(Data::Summary(s)) => s.data_points.len(),
        None => 0,
    }
}

/// The metric with only the points in `range` (of its own, in order).
fn metric_part(metric: &Metric, range: std::ops::Range<usize>) -> Metric {
    let mut part = metric.clone();
    match &mut part.data {
        Some(Data::Gauge(g)) => g.data_points = g.data_points[range].to_vec(),
        Some(Data::Sum(s)) => s.data_points = s.data_points[range].to_vec(),
        Some(Data::Histogram(h)) => h.data_points = h.data_points[range].to_vec(),
        Some(Data::ExponentialHistogram(h)) => h.data_points = h.data_points[range].to_vec(),
        Some(Data::Summary(s)) => s.data_points = s.data_points[range].to_vec(),
        None => {}
    }
    part
}

/// The request cut into two with about half the points each, or `None` when it holds a single
/// point (which no split makes smaller).
pub fn halve(
    request: &ExportMetricsServiceRequest,
) -> Option<(ExportMetricsServiceRequest, ExportMetricsServiceRequest)> {
    let total = points(request) as usize;
    if total < 2 {
        return None;
    }
    let half = total / 2;
    // Walk the points in order; the first `half` go left, the rest right.
    let mut left = request.clone();
    let mut right = request.clone();
    let mut seen = 0usize;
    for (r, resource) in request.resource_metrics.iter().enumerate() {
        for (s, scope) in resource.scope_metrics.iter().enumerate() {
            let mut left_metrics = Vec::new();
            let mut right_metrics = Vec::new();
            for metric in &scope.metrics {
                let n = metric_points(metric);
                let take = half.saturating_sub(seen).min(n);
                if take > 0 {
                    left_metrics.push(metric_part(metric, 0..take));
                }
                if take < n {
                    right_metrics.push(metric_part(metric, take..n));
                }
                seen += n;
            }
            left.resource_metrics[r].scope_metrics[s].metrics = left_metrics;
            right.resource_metrics[r].scope_metrics[s].metrics = right_metrics;
        }
    }
    // Scopes and resources left without metrics carry nothing: leave them out.
    for side in [&mut left, &mut right] {
        for resource in &mut side.resource_metrics {
            resource.scope_metrics.retain(|s| !s.metrics.is_empty());
        }
        side.resource_metrics
            .retain(|r| !r.scope_metrics.is_empty());
    }
    Some((left, right))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::sender::to_fit;
    use opentelemetry_proto::tonic::common::v1::{
        any_value, AnyValue, InstrumentationScope, KeyValue,
    };
    use opentelemetry_proto::tonic::metrics::v1::{
        number_data_point, Gauge, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn point(i: usize) -> NumberDataPoint {
        NumberDataPoint {
            attributes: vec![KeyValue {
                key: "hw.id".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(format!("gpu-{i}"))),
                }),
                ..KeyValue::default()
            }],
            value: Some(number_data_point::Value::AsDouble(i as f64)),
            ..NumberDataPoint::default()
        }
    }

    /// One resource, one scope, a gauge of `gauge` points and a sum of `sum` points.
    fn request(gauge: usize, sum: usize) -> ExportMetricsServiceRequest {
        let metrics = vec![
            Metric {
                name: "hw.power".into(),
                unit: "W".into(),
                data: Some(Data::Gauge(Gauge {
                    data_points: (0..gauge).map(point).collect(),
                })),
                ..Metric::default()
            },
            Metric {
                name: "hw.energy".into(),
                unit: "J".into(),
                data: Some(Data::Sum(Sum {
                    data_points: (0..sum).map(point).collect(),
                    aggregation_temporality: 2,
                    is_monotonic: true,
                })),
                ..Metric::default()
            },
        ];
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource::default()),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: "gpuslack".into(),
                        ..InstrumentationScope::default()
                    }),
                    metrics,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
    }

    fn names(r: &ExportMetricsServiceRequest) -> Vec<(String, usize)> {
        r.resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(|m| (m.name.clone(), metric_points(m)))
            .collect()
    }

    #[test]
    fn halves_keep_every_point_once_in_order_with_its_metric() {
        let r = request(5, 4);
        assert_eq!(points(&r), 9);
        let (left, right) = halve(&r).expect("splits");
        assert_eq!(names(&left), [("hw.power".to_string(), 4)]);
        assert_eq!(
            names(&right),
            [("hw.power".to_string(), 1), ("hw.energy".to_string(), 4)]
        );
        // The sum keeps its temporality and monotonicity on the side it lands.
        let sum = &right.resource_metrics[0].scope_metrics[0].metrics[1];
        match &sum.data {
            Some(Data::Sum(s)) => assert!(s.is_monotonic && s.aggregation_temporality == 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            right.resource_metrics[0].scope_metrics[0].scope,
            r.resource_metrics[0].scope_metrics[0].scope
        );
        assert!(halve(&request(1, 0)).is_none(), "one point cannot be split");
        assert!(halve(&request(0, 0)).is_none());
    }

    #[test]
    fn parts_fit_the_limit_and_add_up_to_the_whole() {
        let r = request(300, 200);
        let whole = encoded_len(&r);
        let parts = to_fit(r.clone(), whole / 5);
        assert!(parts.len() >= 5, "{} parts", parts.len());
        assert!(parts.iter().all(|p| encoded_len(p) <= whole / 5));
        assert_eq!(parts.iter().map(points).sum::<u64>(), 500);
        // In order: the gauge's points first, value by value.
        let values: Vec<f64> = parts
            .iter()
            .flat_map(|p| p.resource_metrics[0].scope_metrics[0].metrics.clone())
            .filter(|m| m.name == "hw.power")
            .flat_map(|m| match m.data {
                Some(Data::Gauge(g)) => g.data_points,
                _ => vec![],
            })
            .filter_map(|p| match p.value {
                Some(number_data_point::Value::AsDouble(v)) => Some(v),
                _ => None,
            })
            .collect();
        assert_eq!(values, (0..300).map(|i| i as f64).collect::<Vec<_>>());
        // Under the limit already: one part, the request itself.
        assert_eq!(to_fit(r.clone(), whole), vec![r.clone()]);
        // A limit below one point's size: every point on its own, nothing lost.
        assert_eq!(to_fit(request(3, 0), 1).len(), 3);
    }

    /// A logs request of one resource and `scopes` scopes, each of `per_scope` records whose
    /// bodies number them in order.
    fn logs(scopes: &[&str], per_scope: usize) -> ExportLogsServiceRequest {
        use opentelemetry_proto::tonic::logs::v1::{LogRecord, ScopeLogs};
        let mut n = 0;
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(Resource::default()),
                scope_logs: scopes
                    .iter()
                    .map(|name| ScopeLogs {
                        scope: Some(InstrumentationScope {
                            name: (*name).into(),
                            ..InstrumentationScope::default()
                        }),
                        log_records: (0..per_scope)
                            .map(|_| {
                                n += 1;
                                LogRecord {
                                    body: Some(AnyValue {
                                        value: Some(any_value::Value::IntValue(n)),
                                    }),
                                    ..LogRecord::default()
                                }
                            })
                            .collect(),
                        schema_url: String::new(),
                    })
                    .collect(),
                schema_url: String::new(),
            }],
        }
    }

    fn bodies(r: &ExportLogsServiceRequest) -> Vec<(String, i64)> {
        r.resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .flat_map(|s| {
                let name = s.scope.as_ref().map(|s| s.name.clone()).unwrap_or_default();
                s.log_records.iter().map(move |l| {
                    let n = match l.body.as_ref().and_then(|b| b.value.as_ref()) {
                        Some(any_value::Value::IntValue(n)) => *n,
                        _ => -1,
                    };
                    (name.clone(), n)
                })
            })
            .collect()
    }

    #[test]
    fn log_halves_keep_every_record_once_in_order_in_its_scope() {
        let r = logs(&["a", "b"], 3);
        assert_eq!(records(&r), 6);
        let (left, right) = Payload::halve(&r).expect("splits");
        let s = |v: &[(&str, i64)]| -> Vec<(String, i64)> {
            v.iter().map(|(a, n)| (a.to_string(), *n)).collect()
        };
        assert_eq!(bodies(&left), s(&[("a", 1), ("a", 2), ("a", 3)]));
        assert_eq!(bodies(&right), s(&[("b", 4), ("b", 5), ("b", 6)]));
        // Five records: two left, three right; an emptied scope is left out.
        let (left, right) = Payload::halve(&logs(&["a"], 5)).expect("splits");
        assert_eq!((records(&left), records(&right)), (2, 3));
        assert!(Payload::halve(&logs(&["a"], 1)).is_none());
        let parts = to_fit(logs(&["a", "b"], 50), 200);
        assert!(parts.len() > 1 && parts.iter().all(|p| p.encoded_len() <= 200));
        assert_eq!(
            parts
                .iter()
                .flat_map(bodies)
                .map(|b| b.1)
                .collect::<Vec<_>>(),
            (1..=100).collect::<Vec<_>>()
        );
    }

    #[test]
    fn joined_records_share_their_scope_and_others_keep_their_own() {
        let mut r = logs(&["a"], 1);
        r.absorb(logs(&["a"], 2)).expect("logs always join");
        assert_eq!(r.resource_logs.len(), 1);
        assert_eq!(r.resource_logs[0].scope_logs.len(), 1);
        assert_eq!(records(&r), 3);
        // Another scope: a scope of its own, after.
        r.absorb(logs(&["b"], 1)).expect("logs always join");
        assert_eq!(r.resource_logs[0].scope_logs.len(), 2);
        // Another resource: a resource of its own.
        let mut other = logs(&["a"], 1);
        other.resource_logs[0].schema_url = "https://example.com/s".into();
        r.absorb(other).expect("logs always join");
        assert_eq!((r.resource_logs.len(), records(&r)), (2, 5));
        // Metrics: the other collection's resources after this one's.
        let mut m = request(1, 0);
        m.absorb(request(2, 3)).expect("metrics always join");
        assert_eq!((m.resource_metrics.len(), points(&m)), (2, 6));
        assert_eq!(names(&m)[0], ("hw.power".to_string(), 1));
    }
}
