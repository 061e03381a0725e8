//! Cutting an OTLP metrics request in two, for an intake that refuses it as too large (HTTP
//! 413, gRPC `ResourceExhausted` on the message size) or before sending one past the configured
//! limit: each half keeps the resource, the scope and the metric's name, unit and kind of the
//! points it carries, so that the two requests together say exactly what the one did.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use prost::Message as _;

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

/// The request cut into parts of at most `max_bytes` each (protobuf, before compression), as
/// few as halving gives; a single point larger than that is a part of its own.
pub fn to_fit(
    request: ExportMetricsServiceRequest,
    max_bytes: usize,
) -> Vec<ExportMetricsServiceRequest> {
    let mut out = Vec::new();
    let mut todo = vec![request];
    while let Some(r) = todo.pop() {
        if encoded_len(&r) <= max_bytes {
            out.push(r);
            continue;
        }
        match halve(&r) {
            // Right first on the stack, so that parts come out in order.
            Some((left, right)) => {
                todo.push(right);
                todo.push(left);
            }
            None => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
