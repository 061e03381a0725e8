//! What the node reaches: the kubelet's PodResources socket (pods named per GPU), the OTLP
//! collector (one empty export: reachable, TLS as configured, the credentials taken) and the
//! Prometheus port (free to bind).

use std::net::SocketAddr;
use std::path::Path;

use super::{shown, Area, Finding, Status};
use crate::attribution::kubelet;
use crate::export::config::ExportConfig;
use crate::export::delivery::reason;
use crate::export::otlp::probe_metrics;
use crate::export::sender::Outcome;

/// The kubelet's socket: asked once. `explicit` when the configuration named the socket (a
/// flag): then its absence fails; the default path absent only means "not a Kubernetes node".
pub fn kubelet(socket: &Path, explicit: bool) -> Finding {
    let shown_path = shown(&socket.display().to_string());
    if !socket.exists() {
        let finding = Finding::new(
            Area::Kubelet,
            if explicit { Status::Failed } else { Status::Skipped },
            format!("no socket at {shown_path}: pods are not named (not a Kubernetes node, or the socket not mounted)"),
        );
        return if explicit {
            finding.fix("mount the host's /var/lib/kubelet/pod-resources into the pod (deploy/kubernetes does)")
        } else {
            finding
        };
    }
    let answer = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(kubelet::KubeletError::Runtime)
        .and_then(|rt| rt.block_on(kubelet::list(socket)));
    match answer {
        Ok(list) => {
            let with_gpus = list
                .pod_resources
                .iter()
                .filter(|p| {
                    p.containers
                        .iter()
                        .any(|c| c.devices.iter().any(|d| d.resource_name.starts_with("nvidia.com/")))
                })
                .count();
            Finding::new(
                Area::Kubelet,
                Status::Ok,
                format!(
                    "the kubelet at {shown_path} answers: {} pods, {with_gpus} holding NVIDIA devices",
                    list.pod_resources.len()
                ),
            )
        }
        Err(e) => Finding::new(Area::Kubelet, Status::Failed, shown(&e.to_string()))
            .fix(if super::host::is_root() {
                "check the socket's path (--kubelet-socket; the DaemonSet mounts /var/lib/kubelet/pod-resources) and that the kubelet serves PodResources (on by default since Kubernetes 1.15)"
            } else {
                "the socket is root's: run the agent as root, and check that the kubelet serves PodResources (on by default since Kubernetes 1.15)"
            }),
    }
}

/// One empty OTLP metrics export to the configured collector.
pub fn otlp(config: &ExportConfig) -> Finding {
    let Some(otlp) = &config.otlp else {
        let why = if config.otlp_disabled {
            "OTLP turned off (OTEL_SDK_DISABLED=true)"
        } else {
            "no OTLP endpoint configured (--otlp-endpoint, OTEL_EXPORTER_OTLP_ENDPOINT or the config file)"
        };
        return Finding::new(Area::Otlp, Status::Skipped, why);
    };
    let cfg = &otlp.metrics;
    // The endpoint as the logs show it: never its user information.
    let at = shown(&crate::text::redact_url(cfg.endpoint.as_str()));
    let protocol = match cfg.protocol {
        crate::export::config::Protocol::Grpc => "gRPC",
        crate::export::config::Protocol::HttpProtobuf => "HTTP/protobuf",
    };
    let (outcome, fault) = match probe_metrics(cfg) {
        Ok(probed) => probed,
        Err(e) => {
            return Finding::new(
                Area::Otlp,
                Status::Failed,
                format!("{at}: {}", shown(&e.to_string())),
            )
            .fix("correct the exporter's configuration (docs/EXPORT.md)")
        }
    };
    let failed = |what: &str, fix: &str| {
        Finding::new(
            Area::Otlp,
            Status::Failed,
            format!("{at} ({protocol}): {what}"),
        )
        .fix(fix)
    };
    match outcome {
        Outcome::Delivered => Finding::new(
            Area::Otlp,
            Status::Ok,
            format!("{at} ({protocol}) accepted an empty export"),
        ),
        Outcome::Refused(reason::AUTH) => failed(
            "the collector refused the credentials (401/403, or gRPC Unauthenticated)",
            "check the API key header (--otlp-header, DD_API_KEY or HONEYCOMB_API_KEY with --preset)",
        ),
        Outcome::Refused(reason::REDIRECTED) => failed(
            "the collector answered with a redirect, which OTLP does not follow",
            "use the URL the redirect points to",
        ),
        Outcome::Retry(reason::CONNECT) | Outcome::Retry(reason::NETWORK) => failed(
            "cannot connect (refused, no route, or the name does not resolve)",
            "check that the collector listens there and that the node can reach it (firewall, NetworkPolicy)",
        ),
        Outcome::Retry(reason::PROTOCOL) | Outcome::Refused(reason::PROTOCOL) => failed(
            // Joined, not formatted: tests/structure.rs reads braces after a `use ` in a
            // string (the fixes below) as a use tree.
            &[
                "the collector answered, but not in HTTP the exporter can read: ",
                fault.unwrap_or("a malformed status line or header, a header block too large (over 100 headers), or a body over 4 MiB"),
            ]
            .concat(),
            "check that the endpoint is an OTLP collector and not another server, and that no proxy between rewrites its answers",
        ),
        Outcome::Retry(reason::TLS) => failed(
            "the TLS handshake failed (unknown issuer, wrong name, expired certificate, or not a TLS server)",
            "trust the collector's CA with --otlp-ca, or use http:// if it does not speak TLS",
        ),
        Outcome::Retry(reason::TIMEOUT) => failed(
            "no answer within the export timeout",
            "check the collector's load, or raise --otlp-timeout-ms",
        ),
        Outcome::Refused(why) | Outcome::Retry(why) => failed(
            &format!("the export failed ({why})"),
            "see the collector's logs; -v shows the agent's",
        ),
        Outcome::TooLarge => failed(
            "an empty request was refused as too large",
            "see the collector's logs",
        ),
    }
}

/// The Prometheus address: free to bind now (the agent binds it when it starts).
pub fn prometheus(addr: Option<SocketAddr>) -> Finding {
    let Some(addr) = addr else {
        return Finding::new(
            Area::Prometheus,
            Status::Skipped,
            "no Prometheus endpoint configured (--prometheus)",
        );
    };
    match std::net::TcpListener::bind(addr) {
        Ok(_) => Finding::new(
            Area::Prometheus,
            Status::Ok,
            format!("{addr} is free: /metrics will be served there"),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Finding::new(
            Area::Prometheus,
            Status::Failed,
            format!("{addr} is in use: another agent, or another exporter, listens there"),
        )
        .fix("stop the other listener, or pick another port with --prometheus"),
        Err(e) => Finding::new(
            Area::Prometheus,
            Status::Failed,
            format!("{addr} cannot be bound: {e}"),
        )
        .fix(
            "use an address of this host (127.0.0.1 for a local scraper; the pod IP in Kubernetes)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_in_use_fails_and_a_free_one_is_ok() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").ok();
        let Some(addr) = taken.as_ref().and_then(|l| l.local_addr().ok()) else {
            return;
        };
        let f = prometheus(Some(addr));
        assert_eq!(f.status, Status::Failed, "{}", f.detail);
        assert!(f
            .detail
            .ends_with("is in use: another agent, or another exporter, listens there"));
        drop(taken);
        assert_eq!(prometheus(Some(addr)).status, Status::Ok);
        assert_eq!(prometheus(None).status, Status::Skipped);
    }

    #[test]
    fn the_default_kubelet_socket_absent_is_skipped_a_named_one_fails() {
        let path = Path::new("/nonexistent/kubelet.sock");
        assert_eq!(kubelet(path, false).status, Status::Skipped);
        let f = kubelet(path, true);
        assert_eq!(f.status, Status::Failed);
        assert!(f.fix.is_some());
    }
}
