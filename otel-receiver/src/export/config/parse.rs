//! The values a setting takes, read the same way wherever it was written (a flag, a variable,
//! the config file), and what each error says a value must be: one table of phrases
//! ([`expected`]).

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use super::{ConfigError, Preset, Protocol, Temporality};

/// What a setting's value must be, as its error says: one table, so that a variable and the
/// config file word the same setting the same way.
pub mod expected {
    pub const PROTOCOL: &str = "grpc or http/protobuf";
    pub const COMPRESSION: &str = "gzip or none";
    pub const TEMPORALITY: &str = "cumulative, delta or lowmemory";
    pub const MILLIS: &str = "a number of milliseconds from 1 to 600000";
    pub const URL: &str = "an http:// or https:// URL with a host and a port from 1 to 65535";
    pub const PAIRS: &str = "a list of key=value pairs separated by commas";
    pub const SWITCH: &str = "true or false";
    pub const REQUEST_BYTES: &str = "a size from 1024 to 67108864 bytes";
    pub const QUEUE_MIB: &str = "a size from 1 to 4096 MiB";
    pub const PRESET: &str = "datadog, datadog-agent or honeycomb";
    pub const LISTEN: &str = "an address such as 127.0.0.1:9464";
}

/// `a,b, c` as names; empty pieces are dropped.
pub fn parse_names(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// `true`/`false` (also `1`/`0`, `yes`/`no`, any case), or `None`.
pub(super) fn parse_switch(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

pub fn parse_protocol(s: &str) -> Option<Protocol> {
    match s.trim().to_ascii_lowercase().as_str() {
        "grpc" => Some(Protocol::Grpc),
        "http/protobuf" | "http" => Some(Protocol::HttpProtobuf),
        _ => None,
    }
}

pub fn parse_temporality(s: &str) -> Option<Temporality> {
    match s.trim().to_ascii_lowercase().as_str() {
        "cumulative" => Some(Temporality::Cumulative),
        "delta" => Some(Temporality::Delta),
        "lowmemory" => Some(Temporality::LowMemory),
        _ => None,
    }
}

pub fn parse_preset(s: &str) -> Option<Preset> {
    match s.trim().to_ascii_lowercase().as_str() {
        "datadog" => Some(Preset::Datadog),
        "datadog-agent" => Some(Preset::DatadogAgent),
        "honeycomb" => Some(Preset::Honeycomb),
        _ => None,
    }
}

/// `127.0.0.1:9464`, `[::1]:9464`, `0.0.0.0:9464`, or a bare port, which means loopback: the
/// endpoint is only exposed beyond the host when the address says so.
pub fn parse_listen(s: &str) -> Option<SocketAddr> {
    match s.parse::<u16>() {
        Ok(port) => Some(SocketAddr::from(([127, 0, 0, 1], port))),
        Err(_) => s.parse().ok(),
    }
}

pub fn parse_compression(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "gzip" => Some(true),
        "none" | "" => Some(false),
        _ => None,
    }
}

/// Why a `key=value,…` list could not be read. A value may be a secret: the reason names the
/// pair by its key and position, never shows the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairsError {
    /// Pair `index` (1-based) has no `=` or an empty key.
    Malformed { index: usize },
    /// The value of `key` is not UTF-8 once percent-decoded.
    NotUtf8 { key: String },
}

impl fmt::Display for PairsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PairsError::Malformed { index } => {
                write!(
                    f,
                    "pair {index} is not key=value (pairs are separated by commas)"
                )
            }
            PairsError::NotUtf8 { key } => {
                write!(f, "the value of {key:?} is not UTF-8 once percent-decoded")
            }
        }
    }
}

/// `key=value,key2=value2` (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES), values
/// percent-decoded once, as the OpenTelemetry specification says (W3C Baggage's encoding).
pub fn parse_pairs(s: &str) -> Result<Vec<(String, String)>, PairsError> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .enumerate()
        .map(|(i, pair)| {
            let malformed = PairsError::Malformed { index: i + 1 };
            let (k, v) = pair.split_once('=').ok_or(malformed.clone())?;
            let k = k.trim();
            if k.is_empty() {
                return Err(malformed);
            }
            let value = percent_encoding::percent_decode_str(v.trim())
                .decode_utf8()
                .map_err(|_| PairsError::NotUtf8 { key: k.to_string() })?;
            Ok((k.to_string(), value.into_owned()))
        })
        .collect()
}

/// Whether `name: value` can be sent as an HTTP header or gRPC metadata entry; the error says
/// which header and why, never the value.
pub fn check_header(origin: &'static str, name: &str, value: &str) -> Result<(), ConfigError> {
    let problem = if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        format!("header name {name:?} is not a valid HTTP header name")
    } else if http::HeaderValue::from_str(value).is_err() {
        format!(
            "the value of header {name:?} holds a character HTTP does not allow (a control character or non-ASCII)"
        )
    } else {
        return Ok(());
    };
    Err(ConfigError::Invalid {
        origin,
        field: "headers",
        problem,
    })
}

pub(super) fn invalid(
    origin: &'static str,
    field: &'static str,
    value: &str,
    expected: &str,
) -> ConfigError {
    // An endpoint's value may carry credentials; any value, anyone's text.
    let shown = crate::text::message(&crate::text::redact_url(value)).into_owned();
    ConfigError::Invalid {
        origin,
        field,
        problem: format!("{shown:?} is not {expected}"),
    }
}

/// The range of every export duration (timeout, interval), whatever sets it: a flag, the
/// environment or the config file. An hour-long timeout would let a hung collector silence the
/// agent with no warning, and a zero one would fail every export.
pub const MILLIS_RANGE: std::ops::RangeInclusive<u64> = 1..=600_000;

/// A request limit from 1 KiB to 64 MiB.
pub fn checked_request_bytes(bytes: usize) -> Option<usize> {
    (1024..=64 << 20).contains(&bytes).then_some(bytes)
}

/// A queue of 1 MiB to 4 GiB, in bytes.
pub fn checked_queue_mib(mib: usize) -> Option<usize> {
    (1..=4096).contains(&mib).then_some(mib << 20)
}

/// `ms` as a duration, if it lies in [`MILLIS_RANGE`].
pub fn checked_millis(ms: u64) -> Option<Duration> {
    MILLIS_RANGE
        .contains(&ms)
        .then(|| Duration::from_millis(ms))
}

pub(super) fn millis(
    origin: &'static str,
    field: &'static str,
    value: &str,
) -> Result<Duration, ConfigError> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(checked_millis)
        .ok_or_else(|| invalid(origin, field, value, expected::MILLIS))
}
