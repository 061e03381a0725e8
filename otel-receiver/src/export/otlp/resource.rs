//! The resource every point and record carries (host, service, the SDK's `telemetry.sdk.*`,
//! what the user adds) and the instrumentation scope of the agent's meter and records.

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;

use crate::export::catalogue;
use crate::export::config::ExportConfig;

/// The resource every point and record carries: host, service, the SDK's `telemetry.sdk.*`,
/// and what the user adds (`OTEL_RESOURCE_ATTRIBUTES`, the config file's `[resource]`), which
/// wins.
/// `k8s.node.name` comes from `K8S_NODE_NAME`, which the DaemonSet sets from the downward API:
/// inside a pod the host name is the pod's, and Datadog files the GPUs under the node only
/// when the node's name is on the resource (its hostname resolution checks Kubernetes
/// attributes before `host.name`).
pub fn resource(config: &ExportConfig) -> Resource {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let mut attrs = vec![
        KeyValue::new("host.name", host),
        KeyValue::new("host.arch", host_arch()),
        KeyValue::new("service.name", config.service_name.clone()),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    ];
    // The semantic conventions' host.id on Linux: the machine id, stable across reboots.
    let machine_id = std::fs::read_to_string("/etc/machine-id")
        .or_else(|_| std::fs::read_to_string("/var/lib/dbus/machine-id"));
    let machine_id = machine_id
        .map(|id| id.trim().to_string())
        .ok()
        .filter(|id| !id.is_empty());
    if let Some(id) = &machine_id {
        attrs.push(KeyValue::new("host.id", id.clone()));
    }
    attrs.push(KeyValue::new(
        "service.instance.id",
        service_instance_id(machine_id.as_deref(), &config.service_name),
    ));
    if let Ok(node) = std::env::var("K8S_NODE_NAME") {
        if !node.trim().is_empty() {
            attrs.push(KeyValue::new("k8s.node.name", node.trim().to_string()));
        }
    }
    // The user's win over ours, in one pass (a `retain` per attribute was quadratic: 3.4 s a
    // scrape with 40,000 attributes). The last of a key given twice wins.
    let theirs: std::collections::HashMap<&str, &str> = config
        .resource_attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    attrs.retain(|kv| !theirs.contains_key(kv.key.as_str()));
    let mut added = std::collections::HashSet::new();
    for (k, _) in &config.resource_attributes {
        if added.insert(k.as_str()) {
            if let Some(v) = theirs.get(k.as_str()) {
                attrs.push(KeyValue::new(
                    k.clone(),
                    crate::text::exported(v).into_owned(),
                ));
            }
        }
    }
    Resource::builder_empty()
        .with_detector(Box::new(
            opentelemetry_sdk::resource::TelemetryResourceDetector,
        ))
        .with_attributes(attrs)
        .build()
}

/// The semantic conventions release the names follow (docs/EXPORT.md).
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.42.0";

/// The instrumentation scope of every metric and record: its name, gpuslack's version, and the
/// schema its names follow, so that a backend can tell releases apart.
pub(super) fn scope() -> opentelemetry::InstrumentationScope {
    opentelemetry::InstrumentationScope::builder(catalogue::SCOPE_NAME)
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_schema_url(SCHEMA_URL)
        .build()
}

/// `service.instance.id`: one agent per host, so a UUID (version 8, RFC 9562) from a SHA-256
/// of the machine id and the service name — stable across restarts (a restart must not look
/// like a new instance to a backend), unique per host, and not the machine id itself, which
/// systemd asks applications not to expose. Without a machine id (some containers), a random
/// one from the kernel, for this run.
fn service_instance_id(machine_id: Option<&str>, service_name: &str) -> String {
    let Some(machine_id) = machine_id else {
        return std::fs::read_to_string("/proc/sys/kernel/random/uuid")
            .map(|u| u.trim().to_string())
            .unwrap_or_else(|_| format!("pid-{}", std::process::id()));
    };
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("gpuslack service.instance.id\0{machine_id}\0{service_name}").as_bytes(),
    );
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest.as_ref()[..16]);
    b[6] = (b[6] & 0x0f) | 0x80; // version 8
    b[8] = (b[8] & 0x3f) | 0x80; // the RFC 9562 variant
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// `host.arch` as the semantic conventions spell it.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "x86",
        "arm" => "arm32",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instance_id_is_a_stable_uuid_that_hides_the_machine_id() {
        let id = service_instance_id(Some("3d1219c7c4c5404aaa1f6d2a48adfda4"), "gpuslack");
        assert_eq!(
            id,
            service_instance_id(Some("3d1219c7c4c5404aaa1f6d2a48adfda4"), "gpuslack")
        );
        assert_ne!(
            id,
            service_instance_id(Some("3d1219c7c4c5404aaa1f6d2a48adfda4"), "other")
        );
        assert_ne!(
            id,
            service_instance_id(Some("0d1219c7c4c5404aaa1f6d2a48adfda4"), "gpuslack")
        );
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12],
            "{id}"
        );
        assert!(parts[2].starts_with('8'), "version 8: {id}");
        assert!(
            matches!(&parts[3][..1], "8" | "9" | "a" | "b"),
            "variant: {id}"
        );
        assert!(!id.replace('-', "").contains("3d1219c7"));
        let random = service_instance_id(None, "gpuslack");
        assert_eq!(random.len(), 36, "{random}");
    }
}
