//! The values a trace may hold and the columns it may name, whichever its format: the same cell
//! is refused in a CSV trace and in a binary one, with the same words.

use super::error::quote;

/// Unix seconds past this (the year 2286) are not unix seconds: a corrupted cell, milliseconds,
/// or a value that would overflow every duration computed from it.
pub(super) const MAX_UNIX_S: f64 = 1e10;

/// A sample's time, or why it cannot be one.
pub(super) fn time(t: f64) -> Result<f64, &'static str> {
    if !t.is_finite() {
        Err("not a number")
    } else if t <= 0.0 {
        Err("must be positive unix seconds")
    } else if t > MAX_UNIX_S {
        Err("is past the year 2286: not unix seconds")
    } else {
        Ok(t)
    }
}

/// A metric's value, or why it cannot be one: infinities poison every mean, no reading is
/// negative, and a percentage past 100 (and a half, for rounding) is not one. A NaN is not
/// refused here: GPM returns it for a degenerate pair, and it reads as "not sampled".
pub(super) fn metric(v: f64, percent: bool) -> Result<f64, &'static str> {
    if v.is_infinite() {
        Err("not a number")
    } else if v < 0.0 {
        Err("must not be negative")
    } else if percent && v > 100.5 {
        Err("a percentage above 100")
    } else {
        Ok(v)
    }
}

/// Of a header's `names`, those no column of this build answers to, each quoted, after one
/// warning naming them all: a typo (`powr_mw`) or a newer recorder's column must not pass
/// silently for one that was never sampled.
pub(super) fn unknown_columns<'a>(path: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let unknown: Vec<String> = names
        .map(|name| format!("`{}`", quote(name.as_bytes())))
        .collect();
    if !unknown.is_empty() {
        // The first 20 named: a header of 60,000 unknown names is one warning, not megabytes.
        const SHOWN: usize = 20;
        let mut columns = unknown[..unknown.len().min(SHOWN)].join(", ");
        if unknown.len() > SHOWN {
            columns.push_str(&format!(" and {} more", unknown.len() - SHOWN));
        }
        tracing::warn!(
            trace = %path,
            %columns,
            "ignoring columns gpuslack does not know (a typo, or a newer recorder's?): docs/OUTPUT.md lists the columns it reads"
        );
    }
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_positive_unix_seconds_before_2286() {
        assert_eq!(time(1.0), Ok(1.0));
        assert_eq!(time(MAX_UNIX_S), Ok(MAX_UNIX_S));
        assert_eq!(time(0.0), Err("must be positive unix seconds"));
        assert_eq!(
            time(MAX_UNIX_S * 1.000_001),
            Err("is past the year 2286: not unix seconds")
        );
        assert_eq!(time(f64::NAN), Err("not a number"));
        assert_eq!(time(f64::INFINITY), Err("not a number"));
    }

    #[test]
    fn metrics_are_finite_non_negative_and_percentages_at_most_100_5() {
        assert_eq!(metric(0.0, false), Ok(0.0));
        assert_eq!(metric(-0.001, false), Err("must not be negative"));
        assert_eq!(metric(1e15, false), Ok(1e15));
        assert_eq!(metric(100.5, true), Ok(100.5));
        assert_eq!(metric(100.51, true), Err("a percentage above 100"));
        assert_eq!(metric(100.51, false), Ok(100.51));
        assert_eq!(metric(f64::INFINITY, false), Err("not a number"));
        assert!(metric(f64::NAN, true).is_ok_and(f64::is_nan));
    }
}
