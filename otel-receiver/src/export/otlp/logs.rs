//! The diagnosis-change records: a GPU's new verdict as an OTLP log record, in the agent's
//! resource and scope, waiting in a sending queue of its own.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1 as proto;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_sdk::Resource;

use super::super::points::event_attributes;
use super::super::queue::SendQueue;
use super::super::sender::Control;
use super::super::state::{ClassChange, GpuView};
use super::metrics::key_values;
use super::resource::scope;

/// The diagnosis-change records' side: their sending queue (its own, of the same bound as the
/// metrics'), its sender's control, and what every record's request carries around it.
pub(super) struct LogsExport {
    pub(super) queue: Arc<SendQueue<ExportLogsServiceRequest>>,
    pub(super) sending: Arc<Control>,
    /// The metrics' resource, as OTLP.
    pub(super) resource: opentelemetry_proto::tonic::resource::v1::Resource,
    pub(super) resource_schema_url: String,
    pub(super) max_request_bytes: usize,
    /// When a full queue was last reported.
    pub(super) overflow_logged: std::sync::Mutex<Option<std::time::Instant>>,
}

/// An OTLP string value.
fn text(s: impl Into<String>) -> Option<proto::AnyValue> {
    Some(proto::AnyValue {
        value: Some(proto::any_value::Value::StringValue(s.into())),
    })
}

fn attribute(key: impl Into<String>, value: Option<proto::AnyValue>) -> proto::KeyValue {
    proto::KeyValue {
        key: key.into(),
        value,
        key_strindex: 0,
    }
}

/// Nanoseconds since the Unix epoch, now.
pub(super) fn now_unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The record announcing a GPU's new verdict, with its evidence and remedy. A change of
/// verdict is information, not a fault: alerts come from the series. Its time is when it was
/// observed (the record may wait in the queue before it is sent); the GPU's identity is typed
/// as on the metrics ([`key_values`]), the rest are strings.
pub(super) fn change_record(
    change: &ClassChange,
    view: &GpuView,
    observed_unix_nanos: u64,
) -> LogRecord {
    let r = &view.report;
    let evidence: Vec<&str> = r.evidence.iter().map(|e| e.text.as_str()).collect();
    let mut attributes: Vec<proto::KeyValue> = key_values(&event_attributes(view))
        .into_iter()
        .map(|kv| {
            let value = match kv.value {
                opentelemetry::Value::I64(n) => Some(proto::AnyValue {
                    value: Some(proto::any_value::Value::IntValue(n)),
                }),
                other => text(other.to_string()),
            };
            attribute(kv.key.as_str(), value)
        })
        .collect();
    attributes.push(attribute(
        "gpuslack.diagnosis.class",
        text(change.to.as_str()),
    ));
    if let Some(from) = change.from {
        attributes.push(attribute(
            "gpuslack.diagnosis.previous_class",
            text(from.as_str()),
        ));
    }
    let alternatives: Vec<&str> = r.alternatives().iter().map(|c| c.as_str()).collect();
    attributes.extend([
        attribute("gpuslack.diagnosis.rule", text(r.rule.as_str())),
        // Evidence may quote a process's name: escaped as every exported text is.
        attribute(
            "gpuslack.diagnosis.evidence",
            text(crate::text::exported(&evidence.join("; "))),
        ),
        attribute("gpuslack.diagnosis.remedy", text(r.remedy())),
        attribute(
            "gpuslack.diagnosis.confidence",
            text(r.confidence().as_str()),
        ),
        attribute(
            "gpuslack.diagnosis.alternatives",
            text(alternatives.join(",")),
        ),
    ]);
    LogRecord {
        observed_time_unix_nano: observed_unix_nanos,
        severity_number: SeverityNumber::Info as i32,
        severity_text: "INFO".into(),
        event_name: "gpuslack.diagnosis.change".into(),
        body: text(crate::text::exported(&format!(
            "GPU {} became {}: {}",
            change.gpu,
            change.to,
            evidence.first().copied().unwrap_or("")
        ))),
        attributes,
        ..LogRecord::default()
    }
}

impl LogsExport {
    /// A request of one record, in the agent's resource and scope.
    pub(super) fn request(&self, record: LogRecord) -> ExportLogsServiceRequest {
        let scope = scope();
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(self.resource.clone()),
                schema_url: self.resource_schema_url.clone(),
                scope_logs: vec![ScopeLogs {
                    scope: Some(proto::InstrumentationScope {
                        name: scope.name().to_string(),
                        version: scope.version().unwrap_or_default().to_string(),
                        ..proto::InstrumentationScope::default()
                    }),
                    schema_url: scope.schema_url().unwrap_or_default().to_string(),
                    log_records: vec![record],
                }],
            }],
        }
    }
}

/// The SDK's resource as OTLP, as the metrics carry it.
pub(super) fn otlp_resource(
    resource: &Resource,
) -> opentelemetry_proto::tonic::resource::v1::Resource {
    opentelemetry_proto::tonic::resource::v1::Resource {
        attributes: resource
            .iter()
            .map(|(k, v)| attribute(k.as_str(), Some(v.clone().into())))
            .collect(),
        dropped_attributes_count: 0,
        entity_refs: vec![],
    }
}
