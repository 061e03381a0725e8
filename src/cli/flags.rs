//! Checks for numeric flags. Every floating-point flag is parsed by [`finite`]: NaN and the
//! infinities are usage errors naming the flag (clap's, exit 2), whatever the flag, since a NaN
//! compares false with every threshold and passes each check written as `value < limit`
//! (`score --min-overall=nan` failed every score without a word). The ranges are then checked
//! where the values are used, by [`seconds`] and [`factor`]: a value that would overflow a
//! `Duration` (1e300, a negative) is a clear error naming the flag (exit 1), never a panic.

use std::time::Duration;

use anyhow::{bail, Result};

/// clap's parser for a floating-point flag: a decimal number, refused unless finite.
pub fn finite(value: &str) -> std::result::Result<f64, String> {
    let v: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a number"))?;
    if !v.is_finite() {
        return Err(format!("{value:?} is not a finite number"));
    }
    Ok(v)
}

/// clap's parser for a share: `0.95`, `95` or `95%` are all 95%. A bare number above 1 is a
/// percent, since a share above 1 means nothing; `1` is 100%. What the README and `--help`
/// quote ("default 95%") is what the flag takes.
pub fn share(value: &str) -> std::result::Result<f64, String> {
    let text = value.trim();
    let (number, percent) = match text.strip_suffix('%') {
        Some(n) => (n, true),
        None => (text, false),
    };
    let v = finite(number)?;
    let share = if percent || v > 1.0 { v / 100.0 } else { v };
    if !(0.0..=1.0).contains(&share) {
        return Err(format!(
            "{value:?} is not a share from 0 to 1 or a percent from 0 to 100"
        ));
    }
    Ok(share)
}

/// `value` seconds as a duration, refused unless finite and within `min..=max`.
pub fn seconds(flag: &str, value: f64, min: f64, max: f64) -> Result<Duration> {
    if !(value.is_finite() && value >= min && value <= max) {
        bail!("{flag} must be a number of seconds from {min} to {max}, got {value}");
    }
    Duration::try_from_secs_f64(value)
        .map_err(|e| anyhow::anyhow!("{flag}: {value} s is not a duration: {e}"))
}

/// A factor refused unless finite and within `min..=max`, or exactly 0 where `zero` says what
/// 0 means.
pub fn factor(flag: &str, value: f64, min: f64, max: f64, zero: Option<&str>) -> Result<f64> {
    let ok =
        value.is_finite() && ((value >= min && value <= max) || (value == 0.0 && zero.is_some()));
    if !ok {
        match zero {
            Some(meaning) => {
                bail!("{flag} must be 0 ({meaning}) or a factor from {min} to {max}, got {value}")
            }
            None => bail!("{flag} must be a factor from {min} to {max}, got {value}"),
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_that_would_overflow_are_refused_by_name() {
        for bad in [f64::INFINITY, f64::NAN, 1e300, -1.0] {
            let e = seconds("--seconds", bad, 0.0, 1e9).expect_err("refused");
            assert!(e.to_string().starts_with("--seconds must be"), "{e}");
        }
        assert_eq!(
            seconds("--seconds", 2.5, 0.0, 1e9).expect("fine"),
            Duration::from_millis(2500)
        );
        assert!(factor("--speed", 0.0, 1e-3, 1e6, Some("as fast as possible")).is_ok());
        let e = factor("--speed", 1e-300, 1e-3, 1e6, Some("as fast as possible"))
            .expect_err("too slow");
        assert!(
            e.to_string()
                .contains("--speed must be 0 (as fast as possible)"),
            "{e}"
        );
        assert!(factor("--duty", 0.0, 0.01, 1.0, None).is_err());
    }

    #[test]
    fn only_finite_numbers_parse() {
        for bad in ["nan", "NaN", "inf", "-inf", "infinity", "1e999", "x", ""] {
            assert!(finite(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(finite("0.95"), Ok(0.95));
        assert_eq!(finite("-1"), Ok(-1.0));
    }

    #[test]
    fn a_share_is_taken_as_written_or_as_a_percent() {
        for (text, want) in [
            ("0.95", 0.95),
            ("95", 0.95),
            ("95%", 0.95),
            ("1", 1.0),
            ("100", 1.0),
            ("0", 0.0),
            ("0.5%", 0.005),
        ] {
            let got = share(text).expect(text);
            assert!((got - want).abs() < 1e-12, "{text}: {got}");
        }
        for bad in ["101", "-1", "nan", "95%%", "x", "150%"] {
            assert!(share(bad).is_err(), "{bad:?} accepted");
        }
    }
}
