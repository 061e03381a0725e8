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

/// Two profiles' baselines compared, ready to print or to put in the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub title: String,
    /// What the two columns are ("GPU 0", "GPU 1"; "earlier", "now").
    pub labels: (String, String),
    pub differences: Vec<Difference>,
    /// For two calibrations of one GPU: how far a baseline may move and still repeat.
    pub tolerance_pct: Option<f64>,
}

impl Comparison {
    pub fn new(
        title: String,
        labels: (&str, &str),
        (first, second): (&GpuProfile, &GpuProfile),
        tolerance_pct: Option<f64>,
    ) -> Comparison {
        Comparison {
            title,
            labels: (labels.0.to_string(), labels.1.to_string()),
            differences: compare(first, second),
            tolerance_pct,
        }
    }

    /// The last line: the largest change and, with a tolerance, whether every baseline is
    /// within it.
    pub fn verdict(&self) -> Option<String> {
        match (self.tolerance_pct, largest_change_pct(&self.differences)) {
            (Some(tolerance), Some(largest)) => {
                let within = if largest <= tolerance {
                    "every baseline within"
                } else {
                    "NOT every baseline within"
                };
                Some(format!(
                    "largest change {largest:.1}%: {within} {tolerance:.0}%"
                ))
            }
            (_, None) => Some("no baseline measured in both".into()),
            (None, Some(_)) => None,
        }
    }

    /// The comparison as a terminal table.
    pub fn terminal(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.title);
        let _ = writeln!(
            out,
            "  {:<18} {:>12} {:>12} {:>9}",
            "baseline", self.labels.0, self.labels.1, "change"
        );
        for d in &self.differences {
            let _ = writeln!(
                out,
                "  {:<18} {:>10.1} W {:>10.1} W {:>+8.1}%",
                d.baseline,
                d.first_w,
                d.second_w,
                d.change_pct()
            );
        }
        if let Some(verdict) = self.verdict() {
            let _ = writeln!(out, "  {verdict}");
        }
        out
    }
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
        let c = Comparison::new(
            "GPU 0 → GPU 1".into(),
            ("GPU 0", "GPU 1"),
            (&first, &second),
            Some(3.0),
        );
        let diffs = &c.differences;
        assert_eq!(diffs.len(), 6, "tiny measured only in the first");
        let memory = diffs
            .iter()
            .find(|d| d.baseline == "memory-bound")
            .expect("memory");
        assert!((memory.change_pct() - 13.2).abs() < 1e-9);
        assert!((largest_change_pct(diffs).unwrap_or(0.0) - 13.2).abs() < 1e-9);
        let table = c.terminal();
        assert!(table.contains("+13.2%"), "{table}");
        assert!(table.contains("NOT every baseline within 3%"), "{table}");
    }

    #[test]
    fn a_repeat_within_tolerance_says_so() {
        let first = h200();
        let mut second = first.clone();
        second.idle_w = first.idle_w * 0.98;
        let table = Comparison::new(
            "repeat".into(),
            ("run 1", "run 2"),
            (&first, &second),
            Some(REPEAT_TOLERANCE_PCT),
        )
        .terminal();
        assert!(
            table.contains("largest change 2.0%: every baseline within 3%"),
            "{table}"
        );
    }
}
