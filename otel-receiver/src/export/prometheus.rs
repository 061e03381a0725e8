//! A Prometheus text endpoint (`/metrics`) over the same export state, with the usual
//! OpenTelemetry-to-Prometheus name translation: dots become underscores, the unit becomes a
//! suffix (`hw.power` in W → `hw_power_watts`), counters end in `_total`, and the resource is
//! `target_info`; and `/healthz` for liveness probes. The exposition is valid whatever the
//! attributes ([`super::prometheus_labels`]), as OpenMetrics 1.0 for a scraper that asks for it
//! and as the 0.0.4 text format otherwise.
//!
//! Served by hyper's HTTP/1 server within [`Limits`], so that neither a scraper, a port scanner,
//! a flood of idle connections nor a few hundred slow clients can spin a core, grow the agent or
//! keep a probe out (the kubelet restarts an agent whose `/healthz` does not answer):
//!
//! - **5 s to send a request head** (`read_timeout`, hyper's `header_read_timeout` on its
//!   timer). hyper starts that timer when it begins reading a head and does not restart it as
//!   bytes arrive, so a client dripping one byte a second is closed after 5 s all the same.
//! - **One request per connection** (no keep-alive). A connection is then either waiting for
//!   its head or answering it, never idle between requests, which is what makes eviction
//!   exact. The kubelet opens a new connection per probe anyway; Prometheus reconnects, one
//!   handshake per scrape interval.
//! - **At most 256 connections, 32 of them kept in reserve** (`max_connections`,
//!   `reserved_connections`, `super::connections`): `accept` never waits for a slot; from 224
//!   open on, each new connection evicts the oldest one still waiting for its head (a slow
//!   client: a real one's head arrives within a round trip), never one being answered; past
//!   256, all mid-response, a new connection is closed at once. 256 descriptors fit the usual
//!   `ulimit -n` of 1024 beside NVML's.
//! - **15 s for a whole connection** (`connection_timeout`), the response written included: a
//!   client that reads its answer slowly lets go of its place within that time.
//! - **A growing pause after a failed `accept`** (10 ms, doubling to 1 s): with no file
//!   descriptor left, `accept` fails at once, and retrying at once would spin a core.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::catalogue::{self, Kind, MetricDef};
use super::config::ExportConfig;
use super::connections::Connections;
use super::points::agent_points;
use super::prometheus_labels::label_set;
use super::state::ExportState;

/// Limits of the endpoint (the module's documentation says why each).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once, at most; a new one past it is closed as soon as accepted
    /// (only when every open one is mid-response, none left to evict).
    pub max_connections: usize,
    /// Places kept for new connections: from `max_connections - reserved_connections` open
    /// on, each new connection evicts the oldest one still waiting for its request head.
    pub reserved_connections: usize,
    /// Time to read a request's head, from the connection's start.
    pub read_timeout: Duration,
    /// Time for a whole connection, the response written included.
    pub connection_timeout: Duration,
    /// A healthy agent has produced a window within this long (`/healthz`).
    pub stale_after: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            reserved_connections: 32,
            read_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(15),
            stale_after: Duration::from_secs(60),
        }
    }
}

/// `hw.power` (W, gauge) → `hw_power_watts`; `hw.energy` (J, counter) → `hw_energy_joules_total`.
pub fn prometheus_name(def: &MetricDef) -> String {
    let mut name = def.name.replace('.', "_");
    let suffix = match (def.unit, def.kind) {
        ("W", _) => "_watts",
        ("J", _) => "_joules",
        ("By", _) => "_bytes",
        ("By/s", _) => "_bytes_per_second",
        ("Hz", _) => "_hertz",
        ("s", _) => "_seconds",
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

/// The two exposition formats: Prometheus' text format, and OpenMetrics 1.0 for a scraper whose
/// `Accept` asks for it (Prometheus does by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header prefers: OpenMetrics when it names it with a weight above
    /// the text format's, text otherwise (and when there is no header).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let weight = |wanted: &str| -> f64 {
            accept
                .split(',')
                .filter_map(|part| {
                    let mut fields = part.split(';').map(str::trim);
                    let media = fields.next()?;
                    if !media.eq_ignore_ascii_case(wanted) {
                        return None;
                    }
                    let q = fields
                        .find_map(|f| f.strip_prefix("q="))
                        .and_then(|q| q.parse::<f64>().ok())
                        .unwrap_or(1.0);
                    Some(q)
                })
                .fold(0.0, f64::max)
        };
        if weight("application/openmetrics-text") > weight("text/plain") {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A sample's value as both formats spell it (`+Inf`, not Rust's `inf`).
fn sample_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}

/// `HELP` text: the text format escapes `\` and line feeds, OpenMetrics `"` too.
fn help_text(text: &str, format: Format) -> String {
    let escaped = text.replace('\\', "\\\\").replace('\n', "\\n");
    match format {
        Format::Text => escaped,
        Format::OpenMetrics => escaped.replace('"', "\\\""),
    }
}

/// The labels every sample carries beside its point's: the instrumentation scope, as the
/// OpenTelemetry → Prometheus rules add it.
const SCOPE_LABELS: [(&str, &str); 2] = [
    ("otel_scope_name", catalogue::SCOPE_NAME),
    ("otel_scope_version", env!("CARGO_PKG_VERSION")),
];

/// The exposition for the current state in `format`: the resource as `target_info`, every GPU's
/// metrics, and the agent's own. Valid whatever attributes a user sets: names are sanitised and
/// values escaped ([`prometheus_labels`](super::prometheus_labels)).
pub fn render(state: &ExportState, config: &ExportConfig, format: Format) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let resource: Vec<(String, String)> = super::otlp::resource(config)
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_string()))
        .collect();
    let info_type = match format {
        Format::Text => "target_info gauge",
        Format::OpenMetrics => "target info",
    };
    let _ = writeln!(
        out,
        "# HELP target_info Target metadata\n# TYPE {info_type}"
    );
    let _ = writeln!(
        out,
        "target_info{} 1",
        label_set(resource.iter().map(|(k, v)| (k.as_str(), v.as_str())), &[])
    );
    let agent = agent_points(&state.delivery().counts());
    let points = state.points();
    for def in catalogue::ALL.into_iter().chain(catalogue::AGENT) {
        let name = prometheus_name(&def);
        let mut header = false;
        let mut line = |out: &mut String, attributes: &[(&'static str, String)], value: f64| {
            if !header {
                // An UpDownCounter has no Prometheus type of its own: a gauge. An OpenMetrics
                // counter's family is named without its samples' `_total`.
                let (family, kind) = match (def.kind, format) {
                    (Kind::Counter, Format::Text) => (name.as_str(), "counter"),
                    (Kind::Counter, Format::OpenMetrics) => {
                        (name.strip_suffix("_total").unwrap_or(&name), "counter")
                    }
                    _ => (name.as_str(), "gauge"),
                };
                let _ = writeln!(
                    out,
                    "# HELP {family} {}\n# TYPE {family} {kind}",
                    help_text(def.description, format)
                );
                header = true;
            }
            let labels = label_set(
                attributes.iter().map(|(k, v)| (*k, v.as_str())),
                &SCOPE_LABELS,
            );
            let _ = writeln!(out, "{name}{labels} {}", sample_value(value));
        };
        for p in agent.iter().filter(|p| p.def == def) {
            line(&mut out, &p.attributes, p.value);
        }
        for p in points.iter().filter(|p| p.def == def) {
            line(&mut out, &p.attributes, p.value);
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// `/healthz`: 200 while windows keep arriving (or in the first minute), 503 once the agent
/// has produced none for `stale_after`; a JSON body says how long and what was delivered.
fn health(state: &ExportState, limits: &Limits, uptime: Duration) -> (StatusCode, String) {
    let counts = state.delivery().counts();
    let age = state.last_window_age();
    let stale = match age {
        Some(age) => age > limits.stale_after,
        None => uptime > limits.stale_after,
    };
    let status = if stale { "stalled" } else { "ok" };
    let body = serde_json::json!({
        "status": status,
        "last_window_age_s": age.map(|a| (a.as_secs_f64() * 10.0).round() / 10.0),
        "windows_produced": counts.windows_produced,
        "windows_delivered": counts.windows_delivered,
        "windows_dropped": counts.windows_dropped,
        "exports_failed": counts.failed(),
    });
    let code = if stale {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, format!("{body}\n"))
}

/// Binds the endpoint now, so a busy or forbidden address is an error at start-up, not a log
/// line later.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

struct Shared {
    state: Arc<RwLock<ExportState>>,
    config: ExportConfig,
    limits: Limits,
    started: std::time::Instant,
}

fn respond(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, body, kind) = match (req.method(), req.uri().path()) {
        (&hyper::Method::GET, "/metrics") => match shared.state.read() {
            Ok(state) => {
                state.delivery().scrape_served();
                let accept = req
                    .headers()
                    .get(hyper::header::ACCEPT)
                    .and_then(|v| v.to_str().ok());
                let format = Format::negotiate(accept);
                (
                    StatusCode::OK,
                    render(&state, &shared.config, format),
                    format.content_type(),
                )
            }
            Err(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the export state is unavailable\n".into(),
                "text/plain; charset=utf-8",
            ),
        },
        (&hyper::Method::GET, "/healthz") => match shared.state.read() {
            Ok(state) => {
                let (code, body) = health(&state, &shared.limits, shared.started.elapsed());
                (code, body, "application/json")
            }
            Err(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "{\"status\":\"broken\"}\n".into(),
                "application/json",
            ),
        },
        (&hyper::Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "try /metrics or /healthz\n".into(),
            "text/plain; charset=utf-8",
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "GET only\n".into(),
            "text/plain; charset=utf-8",
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(kind) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

/// Serves `/metrics` and `/healthz` until the runtime stops; a failed connection only ends
/// that connection. Call within a tokio runtime with a timer.
pub async fn serve(
    listener: std::net::TcpListener,
    state: Arc<RwLock<ExportState>>,
    config: ExportConfig,
    limits: Limits,
) -> std::io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    tracing::info!(addr = ?listener.local_addr().ok(), "serving Prometheus metrics at /metrics, health at /healthz");
    let shared = Arc::new(Shared {
        state,
        config,
        limits,
        started: std::time::Instant::now(),
    });
    let connections = Connections::new(limits.max_connections, limits.reserved_connections);
    let mut pause = Duration::from_millis(10);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                pause = Duration::from_millis(10);
                stream
            }
            Err(e) => {
                // Out of file descriptors, most often: wait for some to close, longer each time.
                tracing::warn!(error = %e, pause_ms = pause.as_millis() as u64, "accept failed on the Prometheus endpoint; pausing");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        // None: every place is taken by a connection mid-response; this one is closed.
        let Some((ticket, evicted)) = connections.admit() else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|req: Request<Incoming>| {
                // The head is in: from now on this connection is answered, never evicted.
                ticket.busy();
                let response = respond(&shared, &req);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(shared.limits.read_timeout)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                // A connection past its time is dropped.
                _ = tokio::time::timeout(shared.limits.connection_timeout, connection) => {}
                // Dropping it closes the socket: it had not sent a whole request head.
                () = evicted => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::catalogue::{
        CLOCK_SM, DIAGNOSIS, DIAGNOSIS_TIME, HW_ENERGY, HW_ERRORS, HW_GPU_IO, HW_GPU_MEMORY_USAGE,
        HW_POWER,
    };

    #[test]
    fn names_follow_the_otel_to_prometheus_translation() {
        assert_eq!(prometheus_name(&HW_POWER), "hw_power_watts");
        assert_eq!(prometheus_name(&HW_ENERGY), "hw_energy_joules_total");
        assert_eq!(prometheus_name(&HW_GPU_IO), "hw_gpu_io_bytes_total");
        assert_eq!(prometheus_name(&DIAGNOSIS), "gpuslack_diagnosis_ratio");
        assert_eq!(prometheus_name(&CLOCK_SM), "gpuslack_clock_sm_hertz");
        assert_eq!(
            prometheus_name(&DIAGNOSIS_TIME),
            "gpuslack_diagnosis_time_seconds_total"
        );
        assert_eq!(prometheus_name(&HW_ERRORS), "hw_errors_total");
        assert_eq!(
            prometheus_name(&HW_GPU_MEMORY_USAGE),
            "hw_gpu_memory_usage_bytes"
        );
    }

    #[test]
    fn openmetrics_only_for_a_scraper_that_prefers_it() {
        // Prometheus 2.x's own Accept header.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
        assert_eq!(
            Format::negotiate(Some("text/plain;q=0.9,application/openmetrics-text;q=0.5")),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some("Application/OpenMetrics-Text; version=1.0.0")),
            Format::OpenMetrics
        );
    }

    #[test]
    fn values_and_help_are_spelled_as_the_formats_want() {
        assert_eq!(sample_value(f64::INFINITY), "+Inf");
        assert_eq!(sample_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(sample_value(f64::NAN), "NaN");
        assert_eq!(sample_value(2.5), "2.5");
        assert_eq!(help_text("a \"b\"\nc\\", Format::Text), "a \"b\"\\nc\\\\");
        assert_eq!(help_text("a \"b\"", Format::OpenMetrics), "a \\\"b\\\"");
    }
}
