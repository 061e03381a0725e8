//! Units and layout for people, shared by the report's parts: a duration as people write it,
//! energy, GPU-hours, percentages and rates with "n/a" for what was not sampled, and text
//! wrapped at a terminal's width. Below both the full report and its first screen, so that
//! neither imports from the other.

use crate::diagnosis;

/// "45 s", "3 min 20 s", "2 h 05 min".
pub fn duration(seconds: f64) -> String {
    let s = seconds.round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

/// Wraps `text` at `width` columns, indenting continuation lines by `indent` spaces.
pub fn wrap(text: &str, width: usize, indent: usize) -> String {
    let mut out = String::new();
    let mut col = indent;
    for word in text.split_whitespace() {
        if col > indent && col + 1 + word.chars().count() > width {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            col = indent;
        } else if col > indent {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += word.chars().count();
    }
    out
}

/// Energy for people, in kWh (what calibration, Grafana and a power bill use); in J only for
/// what a short window uses (under 0.0001 kWh).
pub fn energy(joules: f64) -> String {
    let kwh = joules / 3.6e6;
    if joules < 360.0 {
        format!("{joules:.0} J")
    } else if kwh >= 10.0 {
        format!("{kwh:.1} kWh")
    } else if kwh >= 1.0 {
        format!("{kwh:.2} kWh")
    } else if kwh >= 0.01 {
        format!("{kwh:.3} kWh")
    } else {
        format!("{kwh:.4} kWh")
    }
}

/// GPU-hours with the digits that matter.
pub fn gpu_hours(hours: f64) -> String {
    if hours >= 10.0 {
        format!("{hours:.1}")
    } else if hours >= 0.1 {
        format!("{hours:.2}")
    } else {
        format!("{hours:.3}")
    }
}

/// A figure with its unit, or "n/a" where it was not sampled.
pub(super) fn fmt_opt(v: Option<f64>, unit: &str, decimals: usize) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.decimals$}{unit}"))
}

/// The evidence's own formats, with "n/a" for what was not sampled.
pub(super) fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| diagnosis::pct(v).to_string())
}

/// A transfer rate in the evidence's format, or "n/a".
pub(super) fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), diagnosis::rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_width_with_indent() {
        assert_eq!(wrap("aaa bbb ccc", 9, 2), "aaa bbb\n  ccc");
    }

    #[test]
    fn time_and_energy_read_like_people_write_them() {
        assert_eq!(duration(45.0), "45 s");
        assert_eq!(duration(200.0), "3 min 20 s");
        assert_eq!(duration(7500.0), "2 h 05 min");
        assert_eq!(energy(300.0), "300 J");
        assert_eq!(energy(50_000.0), "0.014 kWh");
        assert_eq!(energy(5_000.0), "0.0014 kWh");
        assert_eq!(energy(8.28e6), "2.30 kWh");
        assert_eq!(energy(3.6e7), "10.0 kWh");
        assert_eq!(gpu_hours(0.0123), "0.012");
    }
}
