//! A client of the Prometheus HTTP query API (`/api/v1/query`, `/api/v1/query_range`), the one
//! that Prometheus, Thanos Query, Mimir, Cortex and VictoriaMetrics all answer: the fleet report
//! reads what the engines already aggregate and runs no server of its own. Blocking reqwest, as
//! the OTLP/HTTP exporter uses, with a timeout: a report is one person waiting at a terminal.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::time::Duration;

use percent_encoding::percent_decode_str;
use serde::Deserialize;

use super::FleetError;
use crate::text;

/// One series of an instant vector: its labels and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series' labels (`__name__` dropped by most functions).
    pub labels: BTreeMap<String, String>,
    /// The value at the query's time.
    pub value: f64,
}

impl Sample {
    /// A label's value, "" where the series has none (PromQL's own convention).
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map(String::as_str).unwrap_or("")
    }
}

/// One series of a range query: its labels and its points (Unix seconds, value).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The series' labels.
    pub labels: BTreeMap<String, String>,
    /// The points in time order.
    pub points: Vec<(f64, f64)>,
}

/// A Prometheus-compatible query API at one base URL.
///
/// Credentials written into the URL (`http://user:password@prometheus:9090`) are taken out of it
/// and sent as a `Basic` header; the URL kept, shown in reports and errors, has none, and
/// `Debug` shows none either. The URL's query (`?orgId=7`, a tenant, a token) goes with every
/// request, before the API's own parameters; where it is shown, secret-looking values are
/// redacted (`text::redact_url`).
#[derive(Clone)]
pub struct Prometheus {
    base: reqwest::Url,
    /// The query of the URL given, in its order: sent with every request. Joining the API's
    /// path onto the base dropped it, so a tenant or org id silently read the default tenant.
    base_query: Vec<(String, String)>,
    /// The user and password of the URL, percent-decoded, if it had any.
    basic_auth: Option<(String, String)>,
    /// `base` as shown: no credentials.
    shown: String,
    http: reqwest::blocking::Client,
    max_answer_bytes: u64,
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus")
            .field("url", &self.shown)
            .field(
                "basic_auth",
                &self.basic_auth.as_ref().map(|_| "<redacted>"),
            )
            .field("max_answer_bytes", &self.max_answer_bytes)
            .finish()
    }
}

/// Prometheus' JSON envelope (`{"status": "success", "data": …}` or an error).
#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(rename = "errorType", default)]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// The answer's data, parsed straight into its series (no `serde_json::Value` in between: a
/// big answer is held once, not twice).
#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum Data {
    Vector(Vec<RawVector>),
    Matrix(Vec<RawMatrix>),
    Scalar(serde::de::IgnoredAny),
    String(serde::de::IgnoredAny),
}

impl Data {
    fn kind(&self) -> &'static str {
        match self {
            Data::Vector(_) => "vector",
            Data::Matrix(_) => "matrix",
            Data::Scalar(_) => "scalar",
            Data::String(_) => "string",
        }
    }
}

#[derive(Deserialize)]
struct RawVector {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

#[derive(Deserialize)]
struct RawMatrix {
    metric: BTreeMap<String, String>,
    values: Vec<(f64, String)>,
}

/// How long one query may take: a 7-day fleet query on a large Prometheus takes seconds, and a
/// stalled one should say so rather than hang the terminal.
const QUERY_TIMEOUT: Duration = Duration::from_secs(120);

/// The largest answer read by default, 64 MiB: about 400,000 series of the fleet report's
/// main query (~170 bytes each), that is 60,000 jobs in the range at six verdicts each. The
/// synthetic fleet of 100 nodes over a day answers under 1 MB (docs/benchmarks.md); a larger
/// fleet raises it (`gpuslack fleet --max-answer-mib`). Parsed, an answer takes about 4–5× its
/// size in memory while it is folded: three answers at the cap (388,549 jobs) peaked at
/// 0.83 GB for the whole fleet report (debug build, 2-core dev VM, 2026-12-05).
pub const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// Label values as they may be shown: every value escaped and capped by `text::name` as it
/// enters the report's model, so no later format site needs to care.
fn shown_labels(mut labels: BTreeMap<String, String>) -> BTreeMap<String, String> {
    for value in labels.values_mut() {
        text::clean_name(value);
    }
    labels
}

impl Prometheus {
    /// The API at `url` (`http://prometheus:9090`, or a Thanos/Mimir prefix such as
    /// `http://mimir/prometheus`). Checks the URL only; the first query finds out whether
    /// anything answers.
    pub fn new(url: &str) -> Result<Self, FleetError> {
        let bad = |reason: &str| FleetError::BadUrl {
            url: text::name(&text::redact_url(url)).into_owned(),
            reason: text::message(&text::redact_url(reason)).into_owned(),
        };
        let mut base = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(bad("the scheme must be http or https"));
        }
        if base.host_str().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let basic_auth = if base.username().is_empty() && base.password().is_none() {
            None
        } else {
            let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
            Some((
                decode(base.username()),
                base.password().map(decode).unwrap_or_default(),
            ))
        };
        // Both only fail on URLs that cannot have credentials, which http(s) ones can.
        let _ = base.set_username("");
        let _ = base.set_password(None);
        base.set_fragment(None);
        let base_query: Vec<(String, String)> = base
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        // Shown with its query, secrets redacted; joined onto without it (the join drops it).
        let shown = text::name(&text::redact_url(base.as_str())).into_owned();
        base.set_query(None);
        // https needs rustls' provider; the OTLP exporter installs the same one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::blocking::Client::builder()
            .timeout(QUERY_TIMEOUT)
            // Not followed: a redirect would take the query's token and tenant wherever the
            // `Location` says. A 3xx is an error that names where it pointed, redacted.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| bad(&e.to_string()))?;
        Ok(Prometheus {
            shown,
            base,
            base_query,
            basic_auth,
            http,
            max_answer_bytes: MAX_ANSWER_BYTES,
        })
    }

    /// The largest answer read (bytes); a larger one is refused, naming the cap.
    pub fn with_max_answer_bytes(mut self, bytes: u64) -> Self {
        self.max_answer_bytes = bytes;
        self
    }

    /// The base URL as shown: without credentials.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// An instant query at `at` (Unix seconds). Values are as Prometheus wrote them (NaN and
    /// ±Inf included, and NaN for one that does not parse): the reports decide what is
    /// believable.
    pub fn query(&self, promql: &str, at: f64) -> Result<Vec<Sample>, FleetError> {
        let data = self.get("api/v1/query", promql, &[("time", format!("{at:.3}"))])?;
        let Data::Vector(raw) = data else {
            return Err(self.not_prometheus(&format!(
                "an instant query answered a {}, not a vector",
                data.kind()
            )));
        };
        Ok(raw
            .into_iter()
            .map(|r| Sample {
                labels: shown_labels(r.metric),
                value: number(&r.value.1),
            })
            .collect())
    }

    /// A range query from `start` to `end` every `step_s` seconds.
    pub fn query_range(
        &self,
        promql: &str,
        start: f64,
        end: f64,
        step_s: f64,
    ) -> Result<Vec<Series>, FleetError> {
        let data = self.get(
            "api/v1/query_range",
            promql,
            &[
                ("start", format!("{start:.3}")),
                ("end", format!("{end:.3}")),
                ("step", format!("{step_s}")),
            ],
        )?;
        let Data::Matrix(raw) = data else {
            return Err(self.not_prometheus(&format!(
                "a range query answered a {}, not a matrix",
                data.kind()
            )));
        };
        Ok(raw
            .into_iter()
            .map(|r| Series {
                labels: shown_labels(r.metric),
                points: r.values.into_iter().map(|(t, v)| (t, number(&v))).collect(),
            })
            .collect())
    }

    fn not_prometheus(&self, reason: &str) -> FleetError {
        FleetError::NotPrometheus {
            url: self.url().to_string(),
            reason: text::message(reason).into_owned(),
        }
    }

    fn unreachable(&self, e: &dyn std::error::Error) -> FleetError {
        FleetError::Unreachable {
            url: self.url().to_string(),
            reason: text::message(&text::redact_url(&error_chain(e))).into_owned(),
        }
    }

    /// The answer's body, at most `max_answer_bytes` of it: a larger one is refused before
    /// it is held (by its `Content-Length`) or as soon as it passes the cap (without one).
    fn body(&self, response: reqwest::blocking::Response) -> Result<Vec<u8>, FleetError> {
        let cap = self.max_answer_bytes;
        let too_large = || FleetError::TooLarge {
            url: self.url().to_string(),
            cap_mib: cap as f64 / f64::from(1u32 << 20),
        };
        if response.content_length().is_some_and(|n| n > cap) {
            return Err(too_large());
        }
        // Room for the whole answer up front (pages are only resident once written): grown
        // by doubling, a 64 MiB answer took a 128 MiB buffer.
        let room = response.content_length().unwrap_or(cap).min(cap) + 1;
        let mut body = Vec::with_capacity(usize::try_from(room).unwrap_or(usize::MAX));
        response
            .take(cap.saturating_add(1))
            .read_to_end(&mut body)
            .map_err(|e| self.unreachable(&e))?;
        if body.len() as u64 > cap {
            return Err(too_large());
        }
        Ok(body)
    }

    fn get(&self, path: &str, promql: &str, extra: &[(&str, String)]) -> Result<Data, FleetError> {
        let mut url = self.base.join(path).map_err(|e| FleetError::BadUrl {
            url: self.url().to_string(),
            reason: e.to_string(),
        })?;
        {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in &self.base_query {
                pairs.append_pair(k, v);
            }
            pairs.append_pair("query", promql);
            for (k, v) in extra {
                pairs.append_pair(k, v);
            }
        }
        let mut request = self.http.get(url);
        if let Some((user, password)) = &self.basic_auth {
            request = request.basic_auth(user, Some(password));
        }
        // The URL carries the whole query: the base alone says where.
        let response = request
            .send()
            .map_err(|e| self.unreachable(&e.without_url()))?;
        let status = response.status();
        if status.is_redirection() {
            let to = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .unwrap_or("nowhere");
            return Err(self.not_prometheus(&format!(
                "HTTP {status}, redirected to {} (not followed: give that URL)",
                text::name(&text::redact_url(to))
            )));
        }
        let body = self.body(response)?;
        // Prometheus answers a bad query 400 and a timeout 503, with its JSON envelope; a
        // server that is not Prometheus answers 404 or HTML.
        let envelope: Envelope = serde_json::from_slice(&body).map_err(|_| {
            let start = String::from_utf8_lossy(&body[..body.len().min(240)]).into_owned();
            self.not_prometheus(&format!(
                "HTTP {status} and not the query API's JSON (starts \"{}\")",
                text::one_line(&start, 60)
            ))
        })?;
        drop(body);
        if envelope.status != "success" {
            return Err(FleetError::Query {
                query: text::message(promql).into_owned(),
                kind: text::name(&envelope.error_type.unwrap_or_default()).into_owned(),
                message: text::message(&envelope.error.unwrap_or_else(|| format!("HTTP {status}")))
                    .into_owned(),
            });
        }
        envelope
            .data
            .ok_or_else(|| self.not_prometheus("a success without data"))
    }
}

/// Prometheus writes values as strings ("NaN", "+Inf" included).
fn number(text: &str) -> f64 {
    text.parse().unwrap_or(f64::NAN)
}

/// reqwest's error with its causes: "error sending request" alone does not say "connection
/// refused".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_before_any_request() {
        assert!(matches!(
            Prometheus::new("not a url"),
            Err(FleetError::BadUrl { .. })
        ));
        assert!(matches!(
            Prometheus::new("ftp://h/"),
            Err(FleetError::BadUrl { .. })
        ));
        let p = Prometheus::new("http://mimir:8080/prometheus").expect("valid");
        assert_eq!(p.url(), "http://mimir:8080/prometheus/");
        assert!(p.basic_auth.is_none());
    }

    #[test]
    fn credentials_leave_the_url_for_a_header_and_no_message_shows_them() {
        let p = Prometheus::new("http://us%40r:pa%3Ass@prom:9090").expect("valid");
        assert_eq!(p.url(), "http://prom:9090/");
        assert_eq!(
            p.basic_auth,
            Some(("us@r".to_string(), "pa:ss".to_string()))
        );
        assert!(!format!("{p:?}").contains("pa"), "{p:?}");
        for bad in [
            "http://u:pa55@prom:99999",
            "ftp://u:pa55@prom",
            "http://u:pa55@",
        ] {
            let e = Prometheus::new(bad).expect_err(bad).to_string();
            assert!(!e.contains("pa55") && !e.contains("u:"), "{e}");
        }
    }

    #[test]
    fn the_urls_query_is_kept_for_requests_and_shown_without_its_secrets() {
        let p = Prometheus::new("http://u:pw@grafana:3000/api/prom?orgId=7&token=T0KEN#x")
            .expect("valid");
        assert_eq!(
            p.url(),
            "http://grafana:3000/api/prom/?orgId=7&token=<redacted>"
        );
        assert_eq!(
            p.base_query,
            [
                ("orgId".to_string(), "7".to_string()),
                ("token".to_string(), "T0KEN".to_string())
            ]
        );
        assert_eq!(p.base.as_str(), "http://grafana:3000/api/prom/");
        assert!(!format!("{p:?}").contains("T0KEN"), "{p:?}");
    }

    #[test]
    fn answers_parse_with_extra_fields_and_in_any_order() {
        for body in [
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[1.5,"NaN"]}],"stats":{"timings":{}}}}"#,
            r#"{"status":"success","data":{"result":[{"metric":{"a":"b"},"value":[1.5,"NaN"]}],"resultType":"vector"},"warnings":["w"]}"#,
        ] {
            let e: Envelope = serde_json::from_str(body).expect(body);
            match e.data {
                Some(Data::Vector(v)) => {
                    assert_eq!(v.len(), 1);
                    assert!(number(&v[0].value.1).is_nan());
                }
                _ => panic!("{body}"),
            }
        }
        let e: Envelope = serde_json::from_str(
            r#"{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}"#,
        )
        .expect("scalar");
        assert_eq!(e.data.map(|d| d.kind()), Some("scalar"));
    }

    #[test]
    fn nothing_listening_is_unreachable_not_a_panic() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        let p = Prometheus::new(&format!("http://127.0.0.1:{port}")).expect("valid");
        assert!(matches!(
            p.query("up", 0.0),
            Err(FleetError::Unreachable { .. })
        ));
    }
}
