//! The HTTP client of the OTLP/HTTP exporters: reqwest's blocking client with gpuslack's own
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

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use opentelemetry_http::{HttpClient, HttpError};

use prost::Message as _;

use super::super::delivery::{reason, reason_in_text, Delivery, Reason, RejectionLog, Signal};
use crate::causes::causes;
use crate::text::redact_url;

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
