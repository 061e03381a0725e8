//! The HTTP client of the OTLP/HTTP exporters: reqwest's blocking client with gpuslack's own
//! headers set on each request (the SDK never sees them, so nothing re-reads the environment,
//! decodes a value twice or drops an invalid header quietly), the collector's `Retry-After`
//! honoured between exports, and every failure named (`connect`, `tls`, `timeout`, `auth`,
//! `throttled`, …) and logged once a minute per reason with its cause, where the SDK would only
//! say "network error".

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use opentelemetry_http::{HttpClient, HttpError};

use super::delivery::{reason, Delivery};
use crate::causes::causes;

#[derive(Debug)]
pub struct OtlpHttpClient {
    inner: reqwest::blocking::Client,
    headers: HeaderMap,
    delivery: Arc<Delivery>,
    /// The endpoint as logs may show it (no user information).
    shown: String,
    logged: Mutex<HashMap<&'static str, Instant>>,
}

impl OtlpHttpClient {
    pub fn new(
        inner: reqwest::blocking::Client,
        headers: HeaderMap,
        delivery: Arc<Delivery>,
        endpoint: &str,
    ) -> Self {
        OtlpHttpClient {
            inner,
            headers,
            delivery,
            shown: without_userinfo(endpoint),
            logged: Mutex::new(HashMap::new()),
        }
    }

    /// Logs a failure with its cause, once a minute per reason.
    fn log_failure(&self, reason: &'static str, detail: &str) {
        let due = match self.logged.lock() {
            Ok(mut logged) => {
                let now = Instant::now();
                let due = logged
                    .get(reason)
                    .is_none_or(|t| now.duration_since(*t) >= Duration::from_secs(60));
                if due {
                    logged.insert(reason, now);
                }
                due
            }
            Err(_) => true,
        };
        if due {
            tracing::warn!(endpoint = %self.shown, reason, cause = detail, "OTLP/HTTP export failed");
        }
    }
}

/// `https://user:secret@host/` → `https://host/`.
fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

fn classify(e: &HttpError) -> &'static str {
    let text = causes(e.as_ref()).to_ascii_lowercase();
    let tls = ["certificate", "tls", "handshake", "x509", "unknownissuer"];
    if tls.iter().any(|w| text.contains(w)) {
        return reason::TLS;
    }
    match e.downcast_ref::<reqwest::Error>() {
        Some(r) if r.is_timeout() => reason::TIMEOUT,
        Some(r) if r.is_connect() => reason::CONNECT,
        _ if text.contains("timed out") => reason::TIMEOUT,
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

fn status_reason(status: u16) -> &'static str {
    match status {
        401 | 403 => reason::AUTH,
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
            // Answer as the collector did, so that the exporter backs off rather than retry.
            self.delivery.note_failure(reason::THROTTLED);
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
                if !response.status().is_success() {
                    let mut why = status_reason(status);
                    if matches!(status, 429 | 503) {
                        if let Some(wait) = retry_after(response.headers()) {
                            self.delivery.hold_for(wait);
                            why = reason::THROTTLED;
                        }
                    }
                    self.delivery.note_failure(why);
                    self.log_failure(why, &format!("HTTP {status}"));
                }
                Ok(response)
            }
            Err(e) => {
                let why = classify(&e);
                self.delivery.note_failure(why);
                self.log_failure(why, &causes(e.as_ref()));
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
        assert_eq!(
            without_userinfo("https://u:secret@otlp.example:4318/v1"),
            "https://otlp.example:4318/v1"
        );
        assert_eq!(without_userinfo("http://host:4318"), "http://host:4318");
    }
}
