//! Two sets of baselines side by side: two GPUs of one machine (one SKU, different silicon: the
//! H200s we measured drew 583 W and 660 W on the same copy), or two calibrations of one GPU
//! (is the measurement repeatable enough to judge a GPU against?).

use std::fmt::Write as _;

use crate::profile::GpuProfile;

/// How far two calibrations of one GPU may differ on any baseline and still count as the same
/// measurement.
pub const REPEAT_TOLERANCE_PCT: f64 = 3.0;

/// One baseline in both profiles.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    pub baseline: &'static str,
    pub first_w: f64,
    pub second_w: f64,
}

impl Difference {
    /// The second's change from the first, in percent of the first.
    pub fn change_pct(&self) -> f64 {
        100.0 * (self.second_w - self.first_w) / self.first_w
    }
}

/// Every baseline that both profiles measured, in the profile's order.
pub fn compare(first: &GpuProfile, second: &GpuProfile) -> Vec<Difference> {
    first
        .baselines()
        .into_iter()
        .zip(second.baselines())
        .filter_map(|((baseline, a), (_, b))| {
            Some(Difference {
                baseline,
                first_w: a?,
                second_w: b?,
            })
        })
        .collect()
}

/// The largest change in either direction, in percent; `None` when nothing was comparable.
pub fn largest_change_pct(differences: &[Difference]) -> Option<f64> {
    differences
        .iter()
        .map(|d| d.change_pct().abs())
        .reduce(f64::max)
}

/// A table of the differences; with a `tolerance_pct`, a last line says whether every baseline
/// is within it.
pub fn terminal(
    title: &str,
    labels: (&str, &str),
    differences: &[Difference],
    tolerance_pct: Option<f64>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = writeln!(
        out,
        "  {:<18} {:>12} {:>12} {:>9}",
        "baseline", labels.0, labels.1, "change"
    );
    for d in differences {
        let _ = writeln!(
            out,
            "  {:<18} {:>10.1} W {:>10.1} W {:>+8.1}%",
            d.baseline,
            d.first_w,
            d.second_w,
            d.change_pct()
        );
    }
    match (tolerance_pct, largest_change_pct(differences)) {
        (Some(tolerance), Some(largest)) => {
            let verdict = if largest <= tolerance {
                "every baseline within"
            } else {
                "NOT every baseline within"
            };
            let _ = writeln!(
                out,
                "  largest change {largest:.1}%: {verdict} {tolerance:.0}%"
            );
        }
        (_, None) => {
            let _ = writeln!(out, "  no baseline measured in both");
        }
        (None, Some(_)) => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProfileFile;

    fn h200() -> GpuProfile {
        ProfileFile::built_in().gpu[0].clone()
    }

    #[test]
    fn differences_are_relative_to_the_first_and_skip_unmeasured_baselines() {
        let first = h200();
        let mut second = first.clone();
        second.memory_w = first.memory_w.map(|w| w * 1.132);
        second.tiny_w = None;
        let diffs = compare(&first, &second);
        assert_eq!(diffs.len(), 6, "tiny measured only in the first");
        let memory = diffs
            .iter()
            .find(|d| d.baseline == "memory-bound")
            .expect("memory");
        assert!((memory.change_pct() - 13.2).abs() < 1e-9);
        assert!((largest_change_pct(&diffs).unwrap_or(0.0) - 13.2).abs() < 1e-9);
        let table = terminal("GPU 0 → GPU 1", ("GPU 0", "GPU 1"), &diffs, Some(3.0));
        assert!(table.contains("+13.2%"), "{table}");
        assert!(table.contains("NOT every baseline within 3%"), "{table}");
    }

    #[test]
    fn a_repeat_within_tolerance_says_so() {
        let first = h200();
        let mut second = first.clone();
        second.idle_w = first.idle_w * 0.98;
        let diffs = compare(&first, &second);
        let table = terminal(
            "repeat",
            ("run 1", "run 2"),
            &diffs,
            Some(REPEAT_TOLERANCE_PCT),
        );
        assert!(
            table.contains("largest change 2.0%: every baseline within 3%"),
            "{table}"
        );
    }
}
