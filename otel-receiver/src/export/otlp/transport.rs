//! How a signal's batches reach the collector, and what its answers mean: OTLP/HTTP through
//! our client ([`OtlpHttpClient`]: headers, no redirects, partial success, `Retry-After`) to
//! the signal's path, and OTLP/gRPC through tonic's `MetricsService` or `LogsService` client
//! ([`GrpcExport`]) with the same headers as metadata and the collector's partial success read
//! from the answer; each answer mapped to the [`Outcome`] the retry loop (`../sender.rs`) acts
//! on. Also the clients' construction from a signal's configuration: the custom CA, the
//! headers, TLS.
//!
//! The HTTP client of the OTLP/HTTP exporters, [`OtlpHttpClient`]: reqwest's blocking client
//! with gpuslack's own
//! headers set on each request (the SDK never sees them, so nothing re-reads the environment,
//! decodes a value twice or drops an invalid header quietly), the collector's `Retry-After`
//! honoured between exports, and every failure named (`connect`, `tls`, `timeout`, `auth`,
//! `throttled`, …) and logged once a minute per reason with its cause, where the SDK would only
//! say "network error".
//!
//! Two answers the SDK would take for delivery are not:
//! - a redirect (the reqwest client is built not to follow them): following one would send the
//!   API key headers to whatever host the `Location` names, and turn the POST into a body-less
//!   GET whose 200 would read as delivered. It fails the export, filed as `redirected`;
//! - a partial success: a 200 whose body names rejected points or records. Those are counted
//!   as dropped, and the collector's message is logged once per distinct message.

use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message as _;

use super::super::config::{Protocol, Secret, SignalConfig};
use super::super::delivery::{reason, reason_in_text, Delivery, Reason, RejectionLog, Signal};
use super::super::queue::Payload;
use super::super::sender::{Outcome, Transport};
use super::OtlpError;
use crate::causes::causes;
use crate::text::redact_url;

/// The extra CA certificates of `path`, refused unless the file holds at least one that parses:
/// a wrong file must fail at start, not as a TLS error at every export.
fn load_ca(path: &std::path::Path) -> Result<Vec<u8>, OtlpError> {
    let shown = path.display().to_string();
    let pem = std::fs::read(path).map_err(|source| OtlpError::Certificate {
        path: shown.clone(),
        source,
    })?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        _ => Err(OtlpError::NotPem { path: shown }),
    }
}

fn http_client(
    cfg: &SignalConfig,
    (signal, headers): (Signal, &[(String, Secret)]),
    delivery: &Arc<Delivery>,
    url: &str,
) -> Result<OtlpHttpClient, OtlpError> {
    // reqwest is built without a provider of its own (see Cargo.toml) and takes the process's.
    // An error only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = no_redirects(reqwest::blocking::Client::builder()).timeout(cfg.timeout);
    if let Some(path) = &cfg.ca_file {
        let pem = load_ca(path)?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| OtlpError::HttpClient(format!("{}: {e}", path.display())))?;
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    let client = builder
        .build()
        .map_err(|e| OtlpError::HttpClient(e.to_string()))?;
    let mut map = http::HeaderMap::new();
    for (k, v) in headers {
        // Checked when the configuration was resolved; the error names the header, not the value.
        let name = http::HeaderName::from_bytes(k.as_bytes()).map_err(|_| OtlpError::Build {
            signal: "metrics",
            message: format!("header name {k:?} is not valid"),
        })?;
        let mut value = http::HeaderValue::from_str(v.expose()).map_err(|_| OtlpError::Build {
            signal: "metrics",
            message: format!("the value of header {k:?} is not valid"),
        })?;
        value.set_sensitive(true);
        map.insert(name, value);
    }
    Ok(OtlpHttpClient::new(
        client,
        map,
        delivery.clone(),
        signal,
        url,
    ))
}

fn tonic_tls(cfg: &SignalConfig) -> Result<Option<tonic::transport::ClientTlsConfig>, OtlpError> {
    if !cfg.endpoint.is_https() {
        return Ok(None);
    }
    let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
    if let Some(path) = &cfg.ca_file {
        tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(load_ca(path)?));
    }
    Ok(Some(tls))
}

fn metadata(headers: &[(String, Secret)]) -> Result<tonic::metadata::MetadataMap, OtlpError> {
    let mut map = tonic::metadata::MetadataMap::new();
    for (k, v) in headers {
        let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .map_err(|_| OtlpError::Build {
                signal: "metrics",
                message: format!("header name {k:?} is not valid"),
            })?;
        // The value is a secret: the error says which header, never what it held.
        let value = v.expose().parse().map_err(|_| OtlpError::Build {
            signal: "metrics",
            message: format!("the value of header {k:?} is not valid ASCII"),
        })?;
        map.insert(key, value);
    }
    Ok(map)
}

/// How a signal's sender reaches the collector: our HTTP client to the signal's path, or tonic's
/// gRPC client of the signal's service over a channel that connects when first used. Call
/// within the tokio runtime (the channel's task).
pub(super) fn transport<R: GrpcExport>(
    cfg: &SignalConfig,
    delivery: &Arc<Delivery>,
    runtime: &tokio::runtime::Handle,
) -> Result<Box<dyn Transport<R>>, OtlpError> {
    let build = |message: String| OtlpError::Build {
        signal: R::SIGNAL.as_str(),
        message,
    };
    match cfg.protocol {
        Protocol::HttpProtobuf => {
            let url = cfg.http_url(R::HTTP_PATH);
            let client = http_client(cfg, (R::SIGNAL, &cfg.headers), delivery, &url)?;
            Ok(Box::new(HttpTransport {
                client,
                url,
                gzip: cfg.gzip,
            }))
        }
        Protocol::Grpc => {
            let mut endpoint =
                tonic::transport::Endpoint::from_shared(cfg.endpoint.as_str().to_string())
                    .map_err(|e| build(format!("the endpoint {}: {e}", cfg.endpoint)))?
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout);
            if let Some(tls) = tonic_tls(cfg)? {
                endpoint = endpoint
                    .tls_config(tls)
                    .map_err(|e| build(format!("TLS: {e}")))?;
            }
            Ok(Box::new(GrpcTransport {
                channel: endpoint.connect_lazy(),
                gzip: cfg.gzip,
                metadata: metadata(&cfg.headers)?,
                timeout: cfg.timeout,
                delivery: delivery.clone(),
                rejections: RejectionLog::default(),
                shown: cfg.endpoint.to_string(),
                runtime: runtime.clone(),
            }))
        }
    }
}

/// OTLP/HTTP: the protobuf, gzipped unless turned off, POSTed through our client to the
/// signal's URL.
pub struct HttpTransport {
    pub client: OtlpHttpClient,
    pub url: String,
    pub gzip: bool,
}

/// Runs a future that does its work when polled (our HTTP client's: reqwest's blocking client
/// behind an async signature) outside any tokio runtime: the blocking client must not be used
/// or dropped inside one, where it panics.
fn poll_to_end<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut context) {
            return out;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub(crate) fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::default(),
    );
    encoder.write_all(bytes)?;
    encoder.finish()
}

/// The outcome an HTTP status stands for.
pub fn http_outcome(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        413 => Outcome::TooLarge,
        300..=399 => Outcome::Refused(reason::REDIRECTED),
        401 | 403 => Outcome::Refused(reason::AUTH),
        408 => Outcome::Retry(reason::TIMEOUT),
        429 => Outcome::Retry(reason::THROTTLED),
        502..=504 => Outcome::Retry(reason::UNAVAILABLE),
        400..=499 => Outcome::Refused(reason::REJECTED),
        _ => Outcome::Retry(reason::OTHER),
    }
}

impl<R: Payload> Transport<R> for HttpTransport {
    fn send(&mut self, encoded: &[u8]) -> Outcome {
        let (body, encoding) = if self.gzip {
            match gzip(encoded) {
                Ok(zipped) => (zipped, Some("gzip")),
                Err(_) => (encoded.to_vec(), None),
            }
        } else {
            (encoded.to_vec(), None)
        };
        let mut builder = http::Request::builder()
            .method(http::Method::POST)
            .uri(&self.url)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf");
        if let Some(encoding) = encoding {
            builder = builder.header(http::header::CONTENT_ENCODING, encoding);
        }
        let Ok(http_request) = builder.body(Bytes::from(body)) else {
            return Outcome::Refused(reason::OTHER);
        };
        // The client notes the failure's reason, the Retry-After and the partial success.
        match poll_to_end(self.client.send_bytes(http_request)) {
            Ok(response) => http_outcome(response.status().as_u16()),
            Err(_) => Outcome::Retry(reason::NETWORK),
        }
    }
}

/// How a signal's request goes over gRPC: its service's generated client, and where the
/// answer's partial success says how many items the collector rejected.
pub trait GrpcExport: Payload {
    /// Sends `request` over `channel` (gzipped if `gzip`); the partial success's rejected
    /// items and message.
    fn export(
        channel: tonic::transport::Channel,
        gzip: bool,
        request: tonic::Request<Self>,
    ) -> impl std::future::Future<Output = Result<(i64, String), tonic::Status>>;
}

impl GrpcExport for ExportMetricsServiceRequest {
    async fn export(
        channel: tonic::transport::Channel,
        gzip: bool,
        request: tonic::Request<Self>,
    ) -> Result<(i64, String), tonic::Status> {
        let mut client = MetricsServiceClient::new(channel);
        if gzip {
            client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        let answer = client.export(request).await?.into_inner();
        Ok(answer
            .partial_success
            .map(|p| (p.rejected_data_points, p.error_message))
            .unwrap_or_default())
    }
}

impl GrpcExport for ExportLogsServiceRequest {
    async fn export(
        channel: tonic::transport::Channel,
        gzip: bool,
        request: tonic::Request<Self>,
    ) -> Result<(i64, String), tonic::Status> {
        let mut client = LogsServiceClient::new(channel);
        if gzip {
            client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        let answer = client.export(request).await?.into_inner();
        Ok(answer
            .partial_success
            .map(|p| (p.rejected_log_records, p.error_message))
            .unwrap_or_default())
    }
}

/// OTLP/gRPC through tonic's generated clients, over a channel that connects when first used.
pub struct GrpcTransport {
    pub channel: tonic::transport::Channel,
    pub gzip: bool,
    pub metadata: tonic::metadata::MetadataMap,
    pub timeout: Duration,
    pub delivery: Arc<Delivery>,
    pub rejections: RejectionLog,
    pub shown: String,
    pub runtime: tokio::runtime::Handle,
}

/// `google.rpc.Status`, as a gRPC server puts it in `grpc-status-details-bin` (tonic hands it
/// over as [`tonic::Status::details`]): only the details are read.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(message, repeated, tag = "3")]
    details: Vec<RpcAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<RpcDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The delay a gRPC status's `RetryInfo` asks for, if it carries one: the gRPC twin of HTTP's
/// `Retry-After`, which the OTLP specification tells a client to honour on `UNAVAILABLE` and
/// `RESOURCE_EXHAUSTED`. Without it a collector asking for 5 s was retried every 1.5 s. The
/// four messages are declared here with prost's derive (as the kubelet's are) rather than
/// through tonic-types, which would bring prost-types for these few fields.
pub fn retry_delay(status: &tonic::Status) -> Option<Duration> {
    use prost::Message as _;
    let details = RpcStatus::decode(status.details()).ok()?;
    details
        .details
        .iter()
        .filter(|any| any.type_url.ends_with("/google.rpc.RetryInfo"))
        .filter_map(|any| RetryInfo::decode(&any.value[..]).ok()?.retry_delay)
        .find_map(|d| {
            let seconds = u64::try_from(d.seconds).ok()?;
            let nanos = u32::try_from(d.nanos).ok()?;
            Some(Duration::from_secs(seconds) + Duration::from_nanos(u64::from(nanos)))
        })
        .filter(|d| !d.is_zero())
}

/// The outcome a gRPC status stands for, with the reason it is filed under.
pub fn grpc_outcome(status: &tonic::Status) -> Outcome {
    use tonic::Code;
    let text = format!("{}: {}", status.message(), crate::causes::causes(status));
    let lower = text.to_ascii_lowercase();
    if status.code() == Code::ResourceExhausted
        && (lower.contains("larger than max") || lower.contains("message length too large"))
    {
        return Outcome::TooLarge;
    }
    if let Some(why) = reason_in_text(&text) {
        return Outcome::Retry(why);
    }
    match status.code() {
        Code::Ok => Outcome::Delivered,
        Code::DeadlineExceeded => Outcome::Retry(reason::TIMEOUT),
        Code::ResourceExhausted => Outcome::Retry(reason::THROTTLED),
        Code::Unavailable if lower.contains("refused") || lower.contains("dns") => {
            Outcome::Retry(reason::CONNECT)
        }
        Code::Unavailable => Outcome::Retry(reason::UNAVAILABLE),
        Code::Unauthenticated | Code::PermissionDenied => Outcome::Refused(reason::AUTH),
        Code::InvalidArgument
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::NotFound
        | Code::AlreadyExists => Outcome::Refused(reason::REJECTED),
        Code::Cancelled | Code::Aborted | Code::Unknown | Code::Internal | Code::DataLoss => {
            Outcome::Retry(reason::NETWORK)
        }
    }
}

impl<R: GrpcExport> Transport<R> for GrpcTransport {
    fn send(&mut self, encoded: &[u8]) -> Outcome {
        // tonic's generated client takes the message: decoded for the call, one batch at a time.
        let Ok(request) = R::decode(encoded) else {
            return Outcome::Refused(reason::OTHER);
        };
        let mut call = tonic::Request::new(request);
        *call.metadata_mut() = self.metadata.clone();
        call.set_timeout(self.timeout);
        let channel = self.channel.clone();
        let gzip = self.gzip;
        let limit = self.timeout + Duration::from_millis(500);
        let answer = self.runtime.block_on(async move {
            tokio::time::timeout(limit, R::export(channel, gzip, call)).await
        });
        match answer {
            Err(_elapsed) => Outcome::Retry(reason::TIMEOUT),
            Ok(Ok((rejected, message))) => {
                let rejected = u64::try_from(rejected).unwrap_or(0);
                if rejected > 0 {
                    self.delivery.note_rejected(R::SIGNAL, rejected);
                }
                if rejected > 0 || !message.is_empty() {
                    self.rejections
                        .log(&self.shown, R::SIGNAL, rejected, &message);
                }
                Outcome::Delivered
            }
            Ok(Err(status)) => {
                let outcome = grpc_outcome(&status);
                // The collector said when to come back: both senders wait until then, as for
                // an HTTP Retry-After (the hold is capped at 10 minutes).
                if let (Outcome::Retry(_), Some(delay)) = (outcome, retry_delay(&status)) {
                    self.delivery.hold_for(delay);
                }
                if let Outcome::Retry(why) | Outcome::Refused(why) = outcome {
                    self.rejections.log_failure(
                        &self.shown,
                        why,
                        &format!("{:?}: {}", status.code(), status.message()),
                    );
                }
                outcome
            }
        }
    }
}

#[derive(Debug)]
pub struct OtlpHttpClient {
    inner: reqwest::blocking::Client,
    headers: HeaderMap,
    delivery: Arc<Delivery>,
    signal: Signal,
    /// The signal's URL as logs may show it (no user information).
    shown: String,
    log: RejectionLog,
}

/// A client that follows no redirect, as the OTLP/HTTP client must be built.
pub fn no_redirects(builder: reqwest::blocking::ClientBuilder) -> reqwest::blocking::ClientBuilder {
    builder.redirect(reqwest::redirect::Policy::none())
}

impl OtlpHttpClient {
    /// `inner` must have been built through [`no_redirects`].
    pub fn new(
        inner: reqwest::blocking::Client,
        headers: HeaderMap,
        delivery: Arc<Delivery>,
        signal: Signal,
        url: &str,
    ) -> Self {
        OtlpHttpClient {
            inner,
            headers,
            delivery,
            signal,
            shown: redact_url(url),
            log: RejectionLog::default(),
        }
    }

    /// Counts what a 2xx answer's body says was rejected, and logs its message the first time
    /// it is seen.
    fn partial_success(&self, body: &[u8]) {
        let Some((rejected, message)) = rejected_by(self.signal, body) else {
            return;
        };
        if rejected > 0 {
            self.delivery.note_rejected(self.signal, rejected);
        }
        self.log.log(&self.shown, self.signal, rejected, &message);
    }

    /// Logs a failure with its cause, once a minute per reason.
    fn log_failure(&self, reason: Reason, detail: &str) {
        self.log.log_failure(&self.shown, reason, detail);
    }
}

/// What a successful answer's body says the collector rejected: the count and its message,
/// or `None` when it rejected nothing and said nothing (or the body is not a response).
fn rejected_by(signal: Signal, body: &[u8]) -> Option<(u64, String)> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
    let (rejected, message) = match signal {
        Signal::Metrics => {
            let p = ExportMetricsServiceResponse::decode(body)
                .ok()?
                .partial_success?;
            (p.rejected_data_points, p.error_message)
        }
        Signal::Logs => {
            let p = ExportLogsServiceResponse::decode(body)
                .ok()?
                .partial_success?;
            (p.rejected_log_records, p.error_message)
        }
    };
    let rejected = u64::try_from(rejected).unwrap_or(0);
    (rejected > 0 || !message.is_empty()).then_some((rejected, message))
}

/// Where a redirect pointed, without credentials, for the log line.
fn location(headers: &HeaderMap) -> String {
    headers
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(redact_url)
        .unwrap_or_else(|| "nowhere".into())
}

fn classify(e: &HttpError) -> Reason {
    if crate::causes::protocol_fault(e.as_ref()).is_some() {
        return reason::PROTOCOL;
    }
    let text = causes(e.as_ref()).to_ascii_lowercase();
    if let Some(why) = reason_in_text(&text) {
        return why;
    }
    match e.downcast_ref::<reqwest::Error>() {
        Some(r) if r.is_timeout() => reason::TIMEOUT,
        Some(r) if r.is_connect() => reason::CONNECT,
        _ if text.contains("refused") || text.contains("dns") => reason::CONNECT,
        _ => reason::NETWORK,
    }
}

/// `Retry-After`: seconds, or an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    when.duration_since(SystemTime::now()).ok()
}

fn status_reason(status: u16) -> Reason {
    match status {
        300..=399 => reason::REDIRECTED,
        401 | 403 => reason::AUTH,
        413 => reason::TOO_LARGE,
        429 => reason::THROTTLED,
        502..=504 => reason::UNAVAILABLE,
        400..=499 => reason::REJECTED,
        _ => reason::OTHER,
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, mut request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        if let Some(wait) = self.delivery.held() {
            // Answer as the collector did, so that the exporter backs off rather than retry;
            // not an attempt, as nothing went out.
            self.delivery.note_failure(self.signal, reason::THROTTLED);
            self.delivery.note_not_sent(self.signal);
            let response = Response::builder()
                .status(429)
                .header(http::header::RETRY_AFTER, wait.as_secs().max(1).to_string())
                .body(Bytes::new())?;
            return Ok(response);
        }
        for (name, value) in &self.headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        match self.inner.send_bytes(request).await {
            Ok(response) => {
                let status = response.status().as_u16();
                if response.status().is_success() {
                    self.partial_success(response.body());
                } else {
                    let mut why = status_reason(status);
                    if matches!(status, 429 | 503) {
                        if let Some(wait) = retry_after(response.headers()) {
                            self.delivery.hold_for(wait);
                            why = reason::THROTTLED;
                        }
                    }
                    self.delivery.note_failure(self.signal, why);
                    let detail = if why == reason::REDIRECTED {
                        format!(
                            "HTTP {status} to {}: redirects are not followed (they would carry the headers to another host and drop the body); set the endpoint to the collector itself",
                            location(response.headers())
                        )
                    } else {
                        format!("HTTP {status}")
                    };
                    self.log_failure(why, &detail);
                }
                Ok(response)
            }
            Err(e) => {
                let why = classify(&e);
                self.delivery.note_failure(self.signal, why);
                // reqwest's message names the URL; what goes on (to the SDK's logs) must not.
                let e: HttpError = match e.downcast::<reqwest::Error>() {
                    Ok(r) => Box::new((*r).without_url()),
                    Err(other) => other,
                };
                let detail = match crate::causes::protocol_fault(e.as_ref()) {
                    Some(fault) => {
                        self.delivery.note_protocol_fault(fault);
                        format!("the collector answered {fault}: {}", causes(e.as_ref()))
                    }
                    None => causes(e.as_ref()),
                };
                self.log_failure(why, &detail);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_info_in_a_status_s_details_is_the_delay_to_wait() {
        let retry = |seconds: i64, nanos: i32| RpcStatus {
            details: vec![
                RpcAny {
                    type_url: "type.googleapis.com/google.rpc.ErrorInfo".into(),
                    value: vec![1, 2, 3],
                },
                RpcAny {
                    type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                    value: RetryInfo {
                        retry_delay: Some(RpcDuration { seconds, nanos }),
                    }
                    .encode_to_vec(),
                },
            ],
        };
        let status = |details: RpcStatus| {
            tonic::Status::with_details(
                tonic::Code::ResourceExhausted,
                "slow down",
                details.encode_to_vec().into(),
            )
        };
        assert_eq!(
            retry_delay(&status(retry(5, 0))),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            retry_delay(&status(retry(0, 250_000_000))),
            Some(Duration::from_millis(250))
        );
        // None, zero, negative or garbage: no delay of the collector's.
        assert_eq!(
            retry_delay(&tonic::Status::resource_exhausted("slow down")),
            None
        );
        assert_eq!(retry_delay(&status(retry(0, 0))), None);
        assert_eq!(retry_delay(&status(retry(-1, 0))), None);
        let garbage = tonic::Status::with_details(
            tonic::Code::ResourceExhausted,
            "x",
            vec![0xff, 0xff, 0xff].into(),
        );
        assert_eq!(retry_delay(&garbage), None);
    }

    #[test]
    fn statuses_map_to_outcomes() {
        assert_eq!(http_outcome(200), Outcome::Delivered);
        assert_eq!(http_outcome(413), Outcome::TooLarge);
        assert_eq!(http_outcome(429), Outcome::Retry(reason::THROTTLED));
        assert_eq!(http_outcome(503), Outcome::Retry(reason::UNAVAILABLE));
        assert_eq!(http_outcome(307), Outcome::Refused(reason::REDIRECTED));
        assert_eq!(http_outcome(401), Outcome::Refused(reason::AUTH));
        assert_eq!(http_outcome(400), Outcome::Refused(reason::REJECTED));
        assert_eq!(http_outcome(500), Outcome::Retry(reason::OTHER));
        let big = tonic::Status::resource_exhausted(
            "grpc: received message after decompression larger than max (4194305 vs. 4194304)",
        );
        assert_eq!(grpc_outcome(&big), Outcome::TooLarge);
        assert_eq!(
            grpc_outcome(&tonic::Status::resource_exhausted("slow down")),
            Outcome::Retry(reason::THROTTLED)
        );
        assert_eq!(
            grpc_outcome(&tonic::Status::unauthenticated("no key")),
            Outcome::Refused(reason::AUTH)
        );
        assert_eq!(
            grpc_outcome(&tonic::Status::cancelled("Timeout expired")),
            Outcome::Retry(reason::TIMEOUT)
        );
        assert_eq!(
            grpc_outcome(&tonic::Status::unavailable(
                "tcp connect error: Connection refused"
            )),
            Outcome::Retry(reason::CONNECT)
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "7".parse().expect("value"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let later = SystemTime::now() + Duration::from_secs(120);
        h.insert(
            http::header::RETRY_AFTER,
            httpdate::fmt_http_date(later).parse().expect("value"),
        );
        let d = retry_after(&h).expect("a date");
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        h.insert(http::header::RETRY_AFTER, "soon".parse().expect("value"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn statuses_and_userinfo() {
        assert_eq!(status_reason(401), reason::AUTH);
        assert_eq!(status_reason(429), reason::THROTTLED);
        assert_eq!(status_reason(503), reason::UNAVAILABLE);
        assert_eq!(status_reason(400), reason::REJECTED);
        assert_eq!(status_reason(302), reason::REDIRECTED);
        assert_eq!(status_reason(307), reason::REDIRECTED);
        let mut h = HeaderMap::new();
        assert_eq!(location(&h), "nowhere");
        h.insert(
            http::header::LOCATION,
            "http://u:pw@elsewhere:81/x".parse().expect("value"),
        );
        assert_eq!(location(&h), "http://elsewhere:81/x");
    }

    #[test]
    fn partial_success_bodies_are_read_per_signal() {
        use opentelemetry_proto::tonic::collector::logs::v1::{
            ExportLogsPartialSuccess, ExportLogsServiceResponse,
        };
        use opentelemetry_proto::tonic::collector::metrics::v1::{
            ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
        };
        let metrics = ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess {
                rejected_data_points: 7,
                error_message: "too many labels".into(),
            }),
        }
        .encode_to_vec();
        assert_eq!(
            rejected_by(Signal::Metrics, &metrics),
            Some((7, "too many labels".into()))
        );
        let logs = ExportLogsServiceResponse {
            partial_success: Some(ExportLogsPartialSuccess {
                rejected_log_records: 2,
                error_message: String::new(),
            }),
        }
        .encode_to_vec();
        assert_eq!(rejected_by(Signal::Logs, &logs), Some((2, String::new())));
        // A full success: an empty body, or a partial_success that rejects nothing.
        assert_eq!(rejected_by(Signal::Metrics, &[]), None);
        let nothing = ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess::default()),
        }
        .encode_to_vec();
        assert_eq!(rejected_by(Signal::Metrics, &nothing), None);
        // Not a response at all (an HTML page from a proxy): nothing to count.
        assert_eq!(rejected_by(Signal::Metrics, b"<html>ok</html>"), None);
        // A negative count from a confused collector counts nothing but keeps its message.
        let negative = ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess {
                rejected_data_points: -1,
                error_message: "odd".into(),
            }),
        }
        .encode_to_vec();
        assert_eq!(
            rejected_by(Signal::Metrics, &negative),
            Some((0, "odd".into()))
        );
    }
}
