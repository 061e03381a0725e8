//! A Prometheus text endpoint (`/metrics`) over the same export state, with the usual
//! OpenTelemetry-to-Prometheus name translation: dots become underscores, the unit becomes a
//! suffix (`hw.power` in W → `hw_power_watts`), counters end in `_total`, and the resource is
//! `target_info`. A few lines of HTTP/1.1 on tokio: Prometheus needs nothing more.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::catalogue::{self, Kind, MetricDef};
use super::config::ExportConfig;
use super::state::ExportState;

/// `hw.power` (W, gauge) → `hw_power_watts`; `hw.energy` (J, counter) → `hw_energy_joules_total`.
pub fn prometheus_name(def: &MetricDef) -> String {
    let mut name = def.name.replace('.', "_");
    let suffix = match (def.unit, def.kind) {
        ("W", _) => "_watts",
        ("J", _) => "_joules",
        ("By", _) => "_bytes",
        ("MHz", _) => "_megahertz",
        ("Cel", _) => "_celsius",
        ("1", Kind::Gauge) => "_ratio",
        _ => "",
    };
    name.push_str(suffix);
    if def.kind == Kind::Counter {
        name.push_str("_total");
    }
    name
}

fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(pairs: &[(String, String)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}=\"{}\"", k.replace(['.', '-'], "_"), label_value(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// The exposition text for the current state.
pub fn render(state: &ExportState, config: &ExportConfig) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let mut resource: Vec<(String, String)> =
        vec![("service_name".into(), config.service_name.clone())];
    resource.extend(config.resource_attributes.iter().cloned());
    let _ = writeln!(
        out,
        "# HELP target_info Target metadata\n# TYPE target_info gauge"
    );
    let _ = writeln!(out, "target_info{} 1", labels(&resource));
    for def in catalogue::ALL {
        let name = prometheus_name(&def);
        let mut header = false;
        for view in state.gpus() {
            let base: Vec<(String, String)> = catalogue::gpu_attributes(view)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            for p in catalogue::points(view).into_iter().filter(|p| p.def == def) {
                if !header {
                    let kind = if def.kind == Kind::Counter {
                        "counter"
                    } else {
                        "gauge"
                    };
                    let _ = writeln!(
                        out,
                        "# HELP {name} {}\n# TYPE {name} {kind}",
                        def.description
                    );
                    header = true;
                }
                let mut all = base.clone();
                all.extend(p.attributes.iter().map(|(k, v)| (k.to_string(), v.clone())));
                let _ = writeln!(out, "{name}{} {}", labels(&all), p.value);
            }
        }
    }
    out
}

/// Binds the endpoint now, so a busy or forbidden address is an error at start-up, not a log
/// line later.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves `/metrics` until the runtime stops; a failed connection only ends that connection.
/// Call within a tokio runtime.
pub async fn serve(
    listener: std::net::TcpListener,
    state: Arc<RwLock<ExportState>>,
    config: ExportConfig,
) -> std::io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    tracing::info!(addr = ?listener.local_addr().ok(), "serving Prometheus metrics at /metrics");
    loop {
        let (mut socket, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                continue;
            }
        };
        let state = state.clone();
        let config = config.clone();
        tokio::spawn(async move {
            let mut request = Vec::with_capacity(1024);
            let mut buf = [0u8; 1024];
            // Read the request head (bounded: 8 KiB), the body is never needed.
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&request);
            let path = line.split_whitespace().nth(1).unwrap_or("");
            let (status, body, kind) = if line.starts_with("GET ")
                && (path == "/metrics" || path.starts_with("/metrics?"))
            {
                let body = match state.read() {
                    Ok(s) => render(&s, &config),
                    Err(_) => String::new(),
                };
                ("200 OK", body, "text/plain; version=0.0.4; charset=utf-8")
            } else {
                (
                    "404 Not Found",
                    "try /metrics\n".to_string(),
                    "text/plain; charset=utf-8",
                )
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::catalogue::{GPU_CLOCK_SM, GPU_DIAGNOSIS, HW_ENERGY, HW_GPU_IO, HW_POWER};

    #[test]
    fn names_follow_the_otel_to_prometheus_translation() {
        assert_eq!(prometheus_name(&HW_POWER), "hw_power_watts");
        assert_eq!(prometheus_name(&HW_ENERGY), "hw_energy_joules_total");
        assert_eq!(prometheus_name(&HW_GPU_IO), "hw_gpu_io_bytes_total");
        assert_eq!(prometheus_name(&GPU_DIAGNOSIS), "gpu_diagnosis_ratio");
        assert_eq!(prometheus_name(&GPU_CLOCK_SM), "gpu_clock_sm_megahertz");
    }

    #[test]
    fn label_values_are_escaped() {
        let l = labels(&[("hw.name".into(), "a \"b\"\\c".into())]);
        assert_eq!(l, "{hw_name=\"a \\\"b\\\"\\\\c\"}");
    }
}
