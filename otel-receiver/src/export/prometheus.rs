//! A Prometheus text endpoint (`/metrics`) over the same export state, with the usual
//! OpenTelemetry-to-Prometheus name translation: dots become underscores, the unit becomes a
//! suffix (`hw.power` in W → `hw_power_watts`), counters end in `_total`, and the resource is
//! `target_info`; `/healthz` for liveness probes and `/readyz` for readiness ([`health`],
//! [`readiness`]). The exposition is valid whatever the
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
    /// `/healthz` turns unhealthy once this many metrics exports in a row have failed (one
    /// per export interval); 0 never does, the default
    /// ([`DEFAULT_UNHEALTHY_AFTER_FAILED_EXPORTS`]).
    pub unhealthy_after_failed_exports: u32,
}

/// Off: failed exports do not make the agent unhealthy. An agent whose collector is away is
/// not stuck, it is queueing (the sending queue holds what the collector has not taken), and
/// a liveness restart would throw that queue away, losing exactly what the queue is there to
/// keep: with 6 (the old default) the kubelet restarted the agent 2.5 minutes into an outage.
/// Failing exports are a metric (`gpuslack_agent_exports_total{outcome="failed"}`) and an
/// alert (docs/DEPLOY.md, "Health"); `/healthz` still reports them in its body.
pub const DEFAULT_UNHEALTHY_AFTER_FAILED_EXPORTS: u32 = 0;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            reserved_connections: 32,
            read_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(15),
            stale_after: Duration::from_secs(60),
            unhealthy_after_failed_exports: DEFAULT_UNHEALTHY_AFTER_FAILED_EXPORTS,
        }
    }
}

/// `hw.power` (W, gauge) → `hw_power_watts`; `hw.energy` (J, counter) → `hw_energy_joules_total`.
/// An info gauge (`gpuslack.job.info`) keeps its `_info` name, as Prometheus' own info metrics
/// (`target_info`, `kube_pod_info`) do: it is joined on, not read as a ratio.
/// dcgm-exporter's fields ([`catalogue::DCGM_FIELDS`]) keep their names as they are
/// (`DCGM_FI_DEV_POWER_USAGE`): their readers know them so.
pub fn prometheus_name(def: &MetricDef) -> String {
    if is_dcgm(def) {
        return def.name.to_string();
    }
    let mut name = def.name.replace('.', "_");
    let suffix = match (def.unit, def.kind) {
        _ if def.name.ends_with(".info") => "",
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

/// Whether `def` is one of dcgm-exporter's fields, rendered as dcgm-exporter renders it.
fn is_dcgm(def: &MetricDef) -> bool {
    def.name.starts_with("DCGM_")
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
    render_parts(
        &state.points(),
        &state.delivery().counts(),
        &target_labels(config),
        format,
    )
}

/// The label set of the `target_info` sample: the resource, rendered once per run (the
/// endpoint keeps it): with 40,000 attributes it is most of a scrape's work.
pub fn target_labels(config: &ExportConfig) -> String {
    let resource: Vec<(String, String)> = super::otlp::resource(config)
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_string()))
        .collect();
    label_set(resource.iter().map(|(k, v)| (k.as_str(), v.as_str())), &[])
}

/// The exposition of `points` and the agent's `counts`, with `target_labels` on `target_info`.
/// Linear in the points and the attributes: each point is visited once, grouped by metric.
/// The `target_info` family is named as each format wants it, its `HELP` and `TYPE` alike:
/// `target_info` (a gauge) in the text format, `target` (an info family, whose sample is
/// `target_info`) in OpenMetrics; a `HELP target_info` before a `TYPE target info` made
/// Python's OpenMetrics parser stop at "Clashing name".
pub fn render_parts(
    points: &[super::point::Point],
    counts: &super::delivery::Counts,
    target_labels: &str,
    format: Format,
) -> String {
    let mut out = String::with_capacity(16 * 1024 + target_labels.len());
    let (info_family, info_type) = match format {
        Format::Text => ("target_info", "gauge"),
        Format::OpenMetrics => ("target", "info"),
    };
    let _ = writeln!(
        out,
        "# HELP {info_family} Target metadata\n# TYPE {info_family} {info_type}"
    );
    let _ = writeln!(out, "target_info{target_labels} 1");
    let agent = agent_points(counts);
    // Each metric's points, in the catalogue's order, the agent's first: one pass over them.
    let defs: Vec<MetricDef> = catalogue::ALL
        .into_iter()
        .chain(catalogue::DCGM_FIELDS)
        .chain(catalogue::AGENT)
        .collect();
    let mut by_def: Vec<Vec<&super::point::Point>> = vec![Vec::new(); defs.len()];
    let index: std::collections::HashMap<&str, usize> =
        defs.iter().enumerate().map(|(i, d)| (d.name, i)).collect();
    for p in agent.iter().chain(points.iter()) {
        if let Some(&i) = index.get(p.def.name) {
            if defs[i] == p.def {
                by_def[i].push(p);
            }
        }
    }
    for (def, samples) in defs.iter().zip(&by_def) {
        if samples.is_empty() {
            continue;
        }
        let name = prometheus_name(def);
        let dcgm = is_dcgm(def);
        // An UpDownCounter has no Prometheus type of its own: a gauge. An OpenMetrics
        // counter's family is named without its samples' `_total`. dcgm-exporter's counters
        // have no `_total`, which OpenMetrics requires of a counter's samples: there they are
        // of unknown type, under their own name (dcgm-exporter serves the text format only).
        let (family, kind) = match (def.kind, format) {
            (Kind::Counter, Format::OpenMetrics) if dcgm => (name.as_str(), "unknown"),
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
        // dcgm-exporter's labels alone on its fields, as its readers expect them.
        let scope: &[(&str, &str)] = if dcgm { &[] } else { &SCOPE_LABELS };
        for p in samples {
            let labels = label_set(p.attributes.iter().map(|(k, v)| (*k, v.as_str())), scope);
            let _ = writeln!(out, "{name}{labels} {}", sample_value(p.value));
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// What `/healthz` and `/readyz` look at: the age of the last window and the export record.
/// Taken out of the state so that the rules are tested without a clock or a collector.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthInput {
    /// How long ago the last window arrived; `None` before the first.
    pub last_window_age: Option<Duration>,
    /// How long the endpoint has been up.
    pub uptime: Duration,
    /// Metrics exports failed in a row, and the latest one's reason.
    pub exports_failed_in_a_row: u64,
    pub last_failure: Option<super::delivery::Reason>,
    pub counts: super::delivery::Counts,
    /// Why the source is not open yet, while the agent waits for it (no NVML yet).
    pub waiting_for_source: Option<String>,
}

impl HealthInput {
    pub fn of(state: &ExportState, uptime: Duration) -> HealthInput {
        let (exports_failed_in_a_row, last_failure) = state.delivery().metrics_failing();
        HealthInput {
            last_window_age: state.last_window_age(),
            uptime,
            exports_failed_in_a_row,
            last_failure,
            counts: state.delivery().counts(),
            waiting_for_source: state.waiting_for_source().map(str::to_string),
        }
    }
}

fn rounded_s(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

/// `/healthz`, the liveness probe: 503 when the agent has stopped working, with a JSON body
/// whose `status` says which way and `reason` in words:
///
/// - `stalled`: no window for `stale_after` (none at all once up that long): the sampling loop
///   is stuck (a hung NVML call, a dead thread), which a restart cures;
/// - `exports_failing`: only when asked (`unhealthy_after_failed_exports` above 0, off by
///   default: [`DEFAULT_UNHEALTHY_AFTER_FAILED_EXPORTS`] says why), the last that many metrics
///   exports all failed (exports the collector throttled with 429 or Retry-After do not count,
///   since a restart would only ignore its request).
///
/// 200 with `status: ok` otherwise. A stall is reported before failing exports, since a stalled
/// agent has nothing to export. An agent that waits for its driver (`run --wait-for-driver`,
/// no NVML yet) is alive and says so, 200 with `status: waiting_for_driver` and why: a liveness
/// restart would only start the wait again.
pub fn health(input: &HealthInput, limits: &Limits) -> (StatusCode, String) {
    let c = &input.counts;
    if let Some(reason) = &input.waiting_for_source {
        let body = serde_json::json!({
            "status": "waiting_for_driver",
            "reason": reason,
            "uptime_s": rounded_s(input.uptime),
            "windows_produced": c.windows_produced,
        });
        return (StatusCode::OK, format!("{body}\n"));
    }
    let stale = match input.last_window_age {
        Some(age) => age > limits.stale_after,
        None => input.uptime > limits.stale_after,
    };
    let threshold = u64::from(limits.unhealthy_after_failed_exports);
    let failing = threshold > 0 && input.exports_failed_in_a_row >= threshold;
    let (status, reason) = if stale {
        let reason = match input.last_window_age {
            Some(age) => format!(
                "no window for {:.0} s (limit {} s)",
                age.as_secs_f64(),
                limits.stale_after.as_secs()
            ),
            None => format!(
                "no window since the start {:.0} s ago (limit {} s)",
                input.uptime.as_secs_f64(),
                limits.stale_after.as_secs()
            ),
        };
        ("stalled", Some(reason))
    } else if failing {
        let reason = format!(
            "the last {} OTLP metrics exports failed ({}; limit {})",
            input.exports_failed_in_a_row,
            input.last_failure.unwrap_or(super::delivery::reason::OTHER),
            threshold
        );
        ("exports_failing", Some(reason))
    } else {
        ("ok", None)
    };
    let body = serde_json::json!({
        "status": status,
        "reason": reason,
        "last_window_age_s": input.last_window_age.map(rounded_s),
        "exports_failed_in_a_row": input.exports_failed_in_a_row,
        "unhealthy_after_failed_exports": limits.unhealthy_after_failed_exports,
        "last_export_failure": input.last_failure.map(super::delivery::Reason::as_str),
        "windows_produced": c.windows_produced,
        "windows_delivered": c.windows_delivered,
        "windows_dropped": c.windows_dropped,
        "exports_failed": c.failed(),
    });
    let code = if status == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, format!("{body}\n"))
}

/// `/readyz`, the readiness probe: 200 once the first window is out (the agent has sampled and
/// `/metrics` carries GPU series), 503 before. It does not turn back: a stall is liveness'
/// business, and a DaemonSet pod that flips unready only confuses a rollout.
pub fn readiness(input: &HealthInput) -> (StatusCode, String) {
    let ready = input.last_window_age.is_some();
    let (status, reason) = match (&input.waiting_for_source, ready) {
        (_, true) => ("ready", None),
        (Some(why), false) => ("waiting_for_driver", Some(why.clone())),
        (None, false) => (
            "starting",
            Some(
                "no window yet: the first sample is not taken or its window has not closed"
                    .to_string(),
            ),
        ),
    };
    let body = serde_json::json!({
        "status": status,
        "reason": reason,
        "uptime_s": rounded_s(input.uptime),
        "windows_produced": input.counts.windows_produced,
    });
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
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
    limits: Limits,
    started: std::time::Instant,
    /// `target_info`'s labels, rendered once ([`target_labels`]).
    target_labels: String,
}

/// What a request asks for, taken from its head.
enum Asked {
    Metrics(Format),
    Health { readyz: bool },
    NotFound,
    NotAllowed,
}

fn asked(req: &Request<Incoming>) -> Asked {
    match (req.method(), req.uri().path()) {
        (&hyper::Method::GET, "/metrics") => {
            let accept = req
                .headers()
                .get(hyper::header::ACCEPT)
                .and_then(|v| v.to_str().ok());
            Asked::Metrics(Format::negotiate(accept))
        }
        (&hyper::Method::GET, "/healthz") => Asked::Health { readyz: false },
        (&hyper::Method::GET, "/readyz") => Asked::Health { readyz: true },
        (&hyper::Method::GET, _) => Asked::NotFound,
        _ => Asked::NotAllowed,
    }
}

/// The exposition, rendered outside the state's lock: the lock is held only to take the
/// points (an `Arc`) and the counts, so that neither the pipeline's next window nor a probe
/// waits on a render (3.4 s with 40,000 resource attributes, when the render held the lock).
fn metrics(shared: &Shared, format: Format) -> (StatusCode, String, &'static str) {
    let taken = shared.state.read().map(|state| {
        state.delivery().scrape_served();
        (state.points(), state.delivery().counts())
    });
    match taken {
        Ok((points, counts)) => (
            StatusCode::OK,
            render_parts(&points, &counts, &shared.target_labels, format),
            format.content_type(),
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the export state is unavailable\n".into(),
            "text/plain; charset=utf-8",
        ),
    }
}

fn respond(shared: &Shared, asked: Asked) -> Response<Full<Bytes>> {
    let (status, body, kind) = match asked {
        Asked::Metrics(format) => metrics(shared, format),
        Asked::Health { readyz } => match shared.state.read() {
            Ok(state) => {
                let input = HealthInput::of(&state, shared.started.elapsed());
                drop(state);
                let (code, body) = if readyz {
                    readiness(&input)
                } else {
                    health(&input, &shared.limits)
                };
                (code, body, "application/json")
            }
            Err(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "{\"status\":\"broken\",\"reason\":\"the export state is unavailable\"}\n".into(),
                "application/json",
            ),
        },
        Asked::NotFound => (
            StatusCode::NOT_FOUND,
            "try /metrics, /healthz or /readyz\n".into(),
            "text/plain; charset=utf-8",
        ),
        Asked::NotAllowed => (
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

/// Answers a request: a render on tokio's blocking pool, since the endpoint's runtime has one
/// worker (which also drives the gRPC exports), and a render there held every probe and
/// export behind it; a probe at once.
async fn answer(shared: Arc<Shared>, asked: Asked) -> Response<Full<Bytes>> {
    match asked {
        Asked::Metrics(_) => {
            let on_pool = shared.clone();
            match tokio::task::spawn_blocking(move || respond(&on_pool, asked)).await {
                Ok(response) => response,
                Err(_) => {
                    let mut response = Response::new(Full::new(Bytes::from("the render failed\n")));
                    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                    response
                }
            }
        }
        other => respond(&shared, other),
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` until the runtime stops; a failed connection only ends
/// that connection. Call within a tokio runtime with a timer.
pub async fn serve(
    listener: std::net::TcpListener,
    state: Arc<RwLock<ExportState>>,
    config: ExportConfig,
    limits: Limits,
) -> std::io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    match listener.local_addr() {
        Ok(addr) => {
            tracing::info!(%addr, "serving Prometheus metrics at /metrics, health at /healthz and /readyz")
        }
        Err(_) => {
            tracing::info!("serving Prometheus metrics at /metrics, health at /healthz and /readyz")
        }
    }
    let shared = Arc::new(Shared {
        state,
        limits,
        started: std::time::Instant::now(),
        target_labels: target_labels(&config),
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
                let shared = shared.clone();
                let asked = asked(&req);
                async move { Ok::<_, Infallible>(answer(shared, asked).await) }
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
        assert_eq!(
            prometheus_name(&crate::export::catalogue::JOB_INFO),
            "gpuslack_job_info"
        );
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
    fn target_info_is_one_family_named_as_each_format_wants() {
        let counts = crate::export::delivery::Counts::default();
        let open = render_parts(&[], &counts, "{a=\"b\"}", Format::OpenMetrics);
        // OpenMetrics: the info family `target`, its one sample `target_info`.
        assert!(
            open.starts_with(
                "# HELP target Target metadata\n# TYPE target info\ntarget_info{a=\"b\"} 1\n"
            ),
            "{open}"
        );
        assert!(!open.contains("# HELP target_info"), "{open}");
        let text = render_parts(&[], &counts, "{a=\"b\"}", Format::Text);
        assert!(
            text.starts_with(
                "# HELP target_info Target metadata\n# TYPE target_info gauge\ntarget_info{a=\"b\"} 1\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn each_family_is_written_once_with_all_its_samples() {
        use crate::export::point::Point;
        let point = |def, gpu: &str, value| Point {
            def,
            value,
            attributes: vec![("hw.id", gpu.to_string())],
        };
        // Interleaved as the state may hold them: grouped in the exposition, in order.
        let points = [
            point(HW_POWER, "0", 1.0),
            point(HW_ENERGY, "0", 2.0),
            point(HW_POWER, "1", 3.0),
        ];
        let counts = crate::export::delivery::Counts::default();
        let text = render_parts(&points, &counts, "{}", Format::Text);
        let power: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("hw_power_watts"))
            .collect();
        assert_eq!(power.len(), 4, "{text}");
        assert!(power[0].starts_with("# HELP hw_power_watts "), "{text}");
        assert!(power[2].contains("hw_id=\"0\"") && power[2].ends_with(" 1"));
        assert!(power[3].contains("hw_id=\"1\"") && power[3].ends_with(" 3"));
        assert_eq!(
            text.matches("# TYPE hw_energy_joules_total counter")
                .count(),
            1
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

    fn input(age_s: Option<u64>, uptime_s: u64, failed: u64) -> HealthInput {
        HealthInput {
            last_window_age: age_s.map(Duration::from_secs),
            uptime: Duration::from_secs(uptime_s),
            exports_failed_in_a_row: failed,
            last_failure: (failed > 0).then_some(crate::export::delivery::reason::UNAVAILABLE),
            counts: Default::default(),
            waiting_for_source: None,
        }
    }

    fn status_of(body: &str) -> String {
        let v: serde_json::Value = serde_json::from_str(body).expect("JSON");
        v["status"].as_str().expect("status").to_string()
    }

    #[test]
    fn failed_exports_alone_never_make_the_agent_unhealthy_by_default() {
        // A collector down for an hour: the agent queues, and liveness must not restart it
        // (that would throw the queue away).
        let limits = Limits::default();
        assert_eq!(limits.unhealthy_after_failed_exports, 0);
        let (code, body) = health(&input(Some(1), 3600, 360), &limits);
        assert_eq!((code, status_of(&body)), (StatusCode::OK, "ok".into()));
        // The body still says how many failed, for an SRE reading it.
        assert!(body.contains("\"exports_failed_in_a_row\":360"), "{body}");
    }

    #[test]
    fn healthz_turns_503_at_the_failed_export_threshold_and_back_on_success() {
        let limits = Limits {
            unhealthy_after_failed_exports: 6,
            ..Limits::default()
        };
        // Five failed intervals in a row: still healthy; the sixth: unhealthy, saying why.
        let (code, body) = health(&input(Some(1), 100, 5), &limits);
        assert_eq!(
            (code, status_of(&body)),
            (StatusCode::OK, "ok".into()),
            "{body}"
        );
        let (code, body) = health(&input(Some(1), 100, 6), &limits);
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(status_of(&body), "exports_failing");
        assert!(
            body.contains("the last 6 OTLP metrics exports failed (unavailable; limit 6)"),
            "{body}"
        );
        assert!(body.contains("\"exports_failed_in_a_row\":6"), "{body}");
        // One success resets the count (Delivery's test): healthy again.
        let (code, _) = health(&input(Some(1), 100, 0), &limits);
        assert_eq!(code, StatusCode::OK);
        // The threshold is the operator's; 0 turns the rule off.
        let one = Limits {
            unhealthy_after_failed_exports: 1,
            ..limits
        };
        assert_eq!(
            health(&input(Some(1), 100, 1), &one).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        let off = Limits {
            unhealthy_after_failed_exports: 0,
            ..limits
        };
        assert_eq!(health(&input(Some(1), 100, 10_000), &off).0, StatusCode::OK);
    }

    #[test]
    fn healthz_turns_503_when_no_window_comes_for_a_minute() {
        let limits = Limits::default();
        // The first minute is grace for the first window; past it, none is a stall.
        assert_eq!(health(&input(None, 59, 0), &limits).0, StatusCode::OK);
        let (code, body) = health(&input(None, 61, 0), &limits);
        assert_eq!(
            (code, status_of(&body)),
            (StatusCode::SERVICE_UNAVAILABLE, "stalled".into())
        );
        assert!(body.contains("no window since the start"), "{body}");
        assert_eq!(health(&input(Some(60), 600, 0), &limits).0, StatusCode::OK);
        let (code, body) = health(&input(Some(61), 600, 0), &limits);
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("no window for 61 s (limit 60 s)"), "{body}");
        // A stalled agent that also fails to export is reported as stalled: the cause.
        assert_eq!(
            status_of(&health(&input(Some(61), 600, 9), &limits).1),
            "stalled"
        );
    }

    #[test]
    fn an_agent_waiting_for_its_driver_is_alive_and_not_ready_and_says_why() {
        let limits = Limits::default();
        // Ten minutes without a window: stalled, were it not waiting for NVML.
        let mut waiting = input(None, 600, 0);
        waiting.waiting_for_source = Some("the NVIDIA driver is not loaded".into());
        let (code, body) = health(&waiting, &limits);
        assert_eq!(
            (code, status_of(&body)),
            (StatusCode::OK, "waiting_for_driver".into())
        );
        assert!(body.contains("the NVIDIA driver is not loaded"), "{body}");
        let (code, body) = readiness(&waiting);
        assert_eq!(
            (code, status_of(&body)),
            (StatusCode::SERVICE_UNAVAILABLE, "waiting_for_driver".into())
        );
        // Once the source opened: the usual rules.
        assert_eq!(
            status_of(&health(&input(None, 600, 0), &limits).1),
            "stalled"
        );
    }

    #[test]
    fn readyz_is_503_before_the_first_window_and_200_after() {
        let (code, body) = readiness(&input(None, 0, 0));
        assert_eq!(
            (code, status_of(&body)),
            (StatusCode::SERVICE_UNAVAILABLE, "starting".into())
        );
        assert!(body.contains("no window yet"), "{body}");
        // Ready from the first window on, however stale or failing: that is liveness'.
        for (age, failed) in [(0, 0), (3600, 100)] {
            let (code, body) = readiness(&input(Some(age), 4000, failed));
            assert_eq!((code, status_of(&body)), (StatusCode::OK, "ready".into()));
        }
    }
}
