use serde::Serialize;

/// One number that decided a verdict: which signal, its value, the line it was compared with,
/// and the sentence a person reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    pub signal: &'static str,
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    pub text: String,
}

impl Evidence {
    pub fn new(signal: &'static str, value: f64, threshold: Option<f64>, text: String) -> Self {
        Evidence {
            signal,
            value: round3(value),
            threshold: threshold.map(round3),
            text,
        }
    }
}

/// Three significant decimals: enough for any reader, and stable output for tests and diffs.
pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// A percentage for people: one decimal under 10, none above.
pub fn pct(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.1}%")
    } else {
        format!("{v:.0}%")
    }
}

/// A rate in MiB/s for people, in GiB/s when large.
pub fn rate(mib_s: f64) -> String {
    if mib_s >= 1024.0 {
        format!("{:.1} GiB/s", mib_s / 1024.0)
    } else {
        format!("{mib_s:.0} MiB/s")
    }
}
