//! A client of the Prometheus HTTP query API (`/api/v1/query`, `/api/v1/query_range`), the one
//! that Prometheus, Thanos Query, Mimir, Cortex and VictoriaMetrics all answer: the fleet report
//! reads what the engines already aggregate and runs no server of its own. Blocking reqwest, as
//! the OTLP/HTTP exporter uses, with a timeout: a report is one person waiting at a terminal.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::FleetError;

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
#[derive(Debug, Clone)]
pub struct Prometheus {
    base: reqwest::Url,
    http: reqwest::blocking::Client,
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

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
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

impl Prometheus {
    /// The API at `url` (`http://prometheus:9090`, or a Thanos/Mimir prefix such as
    /// `http://mimir/prometheus`). Checks the URL only; the first query finds out whether
    /// anything answers.
    pub fn new(url: &str) -> Result<Self, FleetError> {
        let bad = |reason: &str| FleetError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
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
        // https needs rustls' provider; the OTLP exporter installs the same one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::blocking::Client::builder()
            .timeout(QUERY_TIMEOUT)
            .build()
            .map_err(|e| bad(&e.to_string()))?;
        Ok(Prometheus { base, http })
    }

    /// The base URL as given, for messages.
    pub fn url(&self) -> &str {
        self.base.as_str()
    }

    /// An instant query at `at` (Unix seconds).
    pub fn query(&self, promql: &str, at: f64) -> Result<Vec<Sample>, FleetError> {
        let data = self.get("api/v1/query", promql, &[("time", format!("{at:.3}"))])?;
        if data.result_type != "vector" {
            return Err(self.not_prometheus(&format!(
                "an instant query answered a {}, not a vector",
                data.result_type
            )));
        }
        let raw: Vec<RawVector> = serde_json::from_value(data.result)
            .map_err(|e| self.not_prometheus(&format!("a vector that does not parse: {e}")))?;
        Ok(raw
            .into_iter()
            .map(|r| Sample {
                labels: r.metric,
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
        if data.result_type != "matrix" {
            return Err(self.not_prometheus(&format!(
                "a range query answered a {}, not a matrix",
                data.result_type
            )));
        }
        let raw: Vec<RawMatrix> = serde_json::from_value(data.result)
            .map_err(|e| self.not_prometheus(&format!("a matrix that does not parse: {e}")))?;
        Ok(raw
            .into_iter()
            .map(|r| Series {
                labels: r.metric,
                points: r.values.into_iter().map(|(t, v)| (t, number(&v))).collect(),
            })
            .collect())
    }

    fn not_prometheus(&self, reason: &str) -> FleetError {
        FleetError::NotPrometheus {
            url: self.url().to_string(),
            reason: reason.to_string(),
        }
    }

    fn get(&self, path: &str, promql: &str, extra: &[(&str, String)]) -> Result<Data, FleetError> {
        let mut url = self.base.join(path).map_err(|e| FleetError::BadUrl {
            url: self.url().to_string(),
            reason: e.to_string(),
        })?;
        {
            let mut pairs = url.query_pairs_mut();
            pairs.append_pair("query", promql);
            for (k, v) in extra {
                pairs.append_pair(k, v);
            }
        }
        let response = self
            .http
            .get(url)
            .send()
            .map_err(|e| FleetError::Unreachable {
                url: self.url().to_string(),
                // The URL carries the whole query: the base alone says where.
                reason: error_chain(&e.without_url()),
            })?;
        let status = response.status();
        let body = response.text().map_err(|e| FleetError::Unreachable {
            url: self.url().to_string(),
            reason: error_chain(&e),
        })?;
        // Prometheus answers a bad query 400 and a timeout 503, with its JSON envelope; a
        // server that is not Prometheus answers 404 or HTML.
        let envelope: Envelope = serde_json::from_str(&body).map_err(|_| {
            self.not_prometheus(&format!(
                "HTTP {status} and not the query API's JSON (starts {:?})",
                body.chars().take(60).collect::<String>()
            ))
        })?;
        if envelope.status != "success" {
            return Err(FleetError::Query {
                query: promql.to_string(),
                kind: envelope.error_type.unwrap_or_default(),
                message: envelope.error.unwrap_or_else(|| format!("HTTP {status}")),
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
