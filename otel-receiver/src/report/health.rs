//! A GPU's health over a run, from the counters `record` and the live source sample every 10 s
//! (Xid events, ECC, remapped rows, PCIe replays, NVLink errors) and the throttling each window
//! reported: what rose, by how much, and when it first did, so that a report shows it where it
//! occurred rather than a verdict that hides a failing card.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::diagnosis::{Class, WindowReport};
use crate::hw_health::{LinkReading, LinkShortfall};
use crate::sample::Metric;

/// One counter's course over the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CounterCourse {
    /// The first value read, and the highest.
    pub first: f64,
    pub last: f64,
    /// When it first rose above `first` (unix s), and the verdict of that window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_rise_t: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_rise_class: Option<Class>,
}

/// The counters a report shows, with the words it uses for each.
pub const HEALTH_COUNTERS: [(Metric, &str); 13] = [
    (Metric::XidEvents, "Xid events"),
    (Metric::EccVolatileUncorrected, "uncorrected ECC errors"),
    (Metric::EccVolatileCorrected, "corrected ECC errors"),
    (
        Metric::EccAggregateUncorrected,
        "uncorrected ECC errors (board lifetime)",
    ),
    (Metric::RemapUncorrected, "rows remapped (uncorrected)"),
    (Metric::RemapCorrected, "rows remapped (corrected)"),
    (Metric::RemapPending, "a row remap waiting for a reset"),
    (Metric::RemapFailed, "a failed row remap"),
    (
        Metric::RetiredPending,
        "a page retirement waiting for a reset",
    ),
    (Metric::PcieReplays, "PCIe replays"),
    (Metric::NvlinkCrcErrors, "NVLink CRC errors"),
    (Metric::NvlinkReplayErrors, "NVLink replays"),
    (
        Metric::NvlinkRecoveryErrors,
        "NVLink recoveries (link retrained)",
    ),
];

/// Counters whose value, not only a rise, is a finding: a pending or failed remap, or errors
/// the board has carried for its lifetime.
fn level_matters(metric: Metric) -> bool {
    matches!(
        metric,
        Metric::RemapPending
            | Metric::RemapFailed
            | Metric::RetiredPending
            | Metric::EccAggregateUncorrected
            | Metric::RemapUncorrected
    )
}

/// What the summary says when the source carried none of the counters.
const NOT_RECORDED: &str = "Xid, ECC, remap and PCIe replay counters not recorded";

/// One GPU's health, accumulated window by window.
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// Each counter sampled, by its trace column.
    pub counters: BTreeMap<&'static str, CounterCourse>,
    /// The last Xid code read that was not 0.
    pub xid_last: Option<f64>,
    /// Seconds with each throttle reason (the part before `:`), and the first time seen.
    pub throttle_s: BTreeMap<String, f64>,
    /// When each throttle reason was first seen (unix s).
    pub throttle_first_t: BTreeMap<String, f64>,
    /// Seconds covered by windows.
    pub seconds: f64,
    /// The PCIe link below its maximum ([`crate::hw_health::link_shortfall`]): the narrowest,
    /// slowest reading, when it first showed (unix s), and for how many seconds of windows.
    pub pcie_link: Option<(LinkShortfall, f64, f64)>,
    /// The link's last reading: it is read every 10 s, so it stands for the windows between
    /// two reads, each judged by its own load.
    pub link_reading: Option<LinkReading>,
}

/// One line of findings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// `xid_events`, `pcie_replays`, `throttle:sw_power_cap`, …
    pub signal: String,
    /// What a person reads.
    pub text: String,
    /// When it first showed (unix s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t: Option<f64>,
    /// Whether it threatens the job (an Xid, an uncorrected error), not merely slows it.
    pub severe: bool,
}

impl Health {
    /// Adds one window's counters and throttling.
    pub fn add(&mut self, w: &WindowReport) {
        let seconds = w.stats.duration_s();
        self.seconds += seconds;
        for (metric, _) in HEALTH_COUNTERS {
            let Some(summary) = w.stats.summary(metric) else {
                continue;
            };
            let course = self
                .counters
                .entry(metric.column())
                .or_insert(CounterCourse {
                    first: summary.min,
                    last: summary.min,
                    first_rise_t: None,
                    first_rise_class: None,
                });
            if summary.max > course.last {
                course.last = summary.max;
            }
            if course.first_rise_t.is_none() && summary.max > course.first {
                course.first_rise_t = Some(w.stats.start);
                course.first_rise_class = Some(w.class);
            }
        }
        if let Some(code) = w.stats.max(Metric::XidLast).filter(|c| *c > 0.0) {
            self.xid_last = Some(code);
        }
        if let Some(reading) = LinkReading::of(&w.stats) {
            self.link_reading = Some(reading);
        }
        if let Some(short) = self.link_reading.and_then(|r| r.shortfall(&w.stats)) {
            let (worst, _, s) = self.pcie_link.get_or_insert((short, w.stats.start, 0.0));
            *s += seconds;
            if (short.width, short.gen) < (worst.width, worst.gen) {
                *worst = short;
            }
        }
        for reason in &w.throttle {
            let key = reason
                .split(':')
                .next()
                .unwrap_or(reason)
                .trim()
                .to_string();
            // Whether a capped limit may be raised annotates `sw_power_cap`; it is no
            // throttling of its own.
            if matches!(key.as_str(), "power_limit_raisable" | "power_limit_at_max") {
                continue;
            }
            *self.throttle_s.entry(key.clone()).or_default() += seconds;
            self.throttle_first_t.entry(key).or_insert(w.stats.start);
        }
    }

    /// Whether any health counter was sampled at all.
    pub fn sampled(&self) -> bool {
        !self.counters.is_empty()
    }

    /// What went wrong, worst first; empty when every counter stayed put.
    pub fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        for (metric, words) in HEALTH_COUNTERS {
            let Some(c) = self.counters.get(metric.column()) else {
                continue;
            };
            let rise = c.last - c.first;
            let severe = !matches!(
                metric,
                Metric::EccVolatileCorrected | Metric::RemapCorrected | Metric::PcieReplays
            );
            if rise > 0.0 {
                let mut text = format!("{words}: {rise:.0}");
                if metric == Metric::XidEvents {
                    if let Some(code) = self.xid_last {
                        text += &format!(" (last: Xid {code:.0}");
                        if let Some(x) = crate::hw_health::lookup(code as u32) {
                            text += &format!(", {}: {}", x.meaning, x.action.as_str());
                        }
                        text += ")";
                    }
                }
                if let Some(t) = c.first_rise_t {
                    text += &format!(", first at {} UTC", super::utc_hms(t));
                    if let Some(class) = c.first_rise_class {
                        text += &format!(" during {class}");
                    }
                }
                out.push(Finding {
                    signal: metric.column().to_string(),
                    text,
                    t: c.first_rise_t,
                    severe,
                });
            } else if level_matters(metric) && c.last > 0.0 {
                let text = match metric {
                    Metric::RemapPending | Metric::RemapFailed | Metric::RetiredPending => {
                        words.to_string()
                    }
                    _ => format!("{words}: {:.0}", c.last),
                };
                out.push(Finding {
                    signal: metric.column().to_string(),
                    text,
                    t: None,
                    severe,
                });
            }
        }
        if let Some((short, first_t, seconds)) = &self.pcie_link {
            out.push(Finding {
                signal: "pcie_link".into(),
                text: format!(
                    "PCIe link trained below its maximum ({}) for {seconds:.0} s, first at {} UTC",
                    short.describe(),
                    super::utc_hms(*first_t)
                ),
                t: Some(*first_t),
                severe: false,
            });
        }
        for (reason, seconds) in &self.throttle_s {
            out.push(Finding {
                signal: format!("throttle:{reason}"),
                text: format!(
                    "throttled by {reason} {:.0}% of the time, first at {} UTC",
                    100.0 * seconds / self.seconds.max(1e-9),
                    self.throttle_first_t
                        .get(reason)
                        .map_or("?".into(), |t| super::utc_hms(*t))
                ),
                t: self.throttle_first_t.get(reason).copied(),
                severe: false,
            });
        }
        out.sort_by_key(|f| !f.severe);
        out
    }

    /// One line for people: the findings, or that the counters stayed clean, or that none was
    /// recorded.
    pub fn summary(&self) -> String {
        let findings = self.findings();
        let clean = "no Xid events, ECC errors, remapped rows, PCIe replays or link errors";
        match (findings.is_empty(), self.sampled()) {
            (false, _) => {
                let mut text = findings
                    .iter()
                    .map(|f| {
                        if f.severe {
                            format!("✗ {}", f.text)
                        } else {
                            f.text.clone()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                let counters_clean = !findings
                    .iter()
                    .any(|f| HEALTH_COUNTERS.iter().any(|(m, _)| m.column() == f.signal));
                if self.sampled() && counters_clean {
                    text = format!("{clean}; {text}");
                } else if !self.sampled() {
                    text = format!("{text}; {NOT_RECORDED}");
                }
                text
            }
            (true, true) => clean.to_string(),
            (true, false) => NOT_RECORDED.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::{Diagnoser, Thresholds};
    use crate::pipeline::Pipeline;
    use crate::sample::Sample;

    /// The health of one GPU fed 10 s at 10 Hz, `row` filling each sample.
    fn health(row: impl Fn(f64, Sample) -> Sample) -> Health {
        let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
        let mut pipeline = Pipeline::new(2.0, diagnoser);
        let mut h = Health::default();
        for i in 0..100 {
            let t = 100.0 + f64::from(i) / 10.0;
            let s = row(t, Sample::new(t, 0).with(Metric::PowerMw, 300_000.0));
            for r in pipeline.push(&s).expect("in order") {
                h.add(&r);
            }
        }
        for r in pipeline.finish() {
            h.add(&r);
        }
        h
    }

    fn link(s: Sample, gen: f64, width: f64, util: f64) -> Sample {
        s.with(Metric::PcieLinkGen, gen)
            .with(Metric::PcieLinkWidth, width)
            .with(Metric::PcieLinkGenMax, 5.0)
            .with(Metric::PcieLinkWidthMax, 16.0)
            .with(Metric::UtilGpu, util)
            .with(Metric::PcieReplays, 0.0)
    }

    #[test]
    fn a_link_read_every_10_s_stands_for_the_windows_between_its_reads() {
        // As live: the link read at t = 100 only (every 10 s), busy throughout at gen3 x16 of
        // gen5 x16. All 10 s count, not the one 2 s window that holds the reading.
        let h = health(|t, s| {
            let s = s
                .with(Metric::UtilGpu, 100.0)
                .with(Metric::PcieReplays, 0.0);
            if t == 100.0 {
                link(s, 3.0, 16.0, 100.0)
            } else {
                s
            }
        });
        let (short, first_t, seconds) = h.pcie_link.expect("a shortfall");
        assert_eq!(short.describe(), "gen3 x16 of gen5 x16");
        assert_eq!(first_t, 100.0);
        assert!((seconds - 10.0).abs() < 0.2, "{seconds} s");
        // Idle windows after the read do not count: the generation drops at idle.
        let h = health(|t, s| {
            let util = if t < 104.0 { 100.0 } else { 0.0 };
            let s = s.with(Metric::UtilGpu, util).with(Metric::PcieReplays, 0.0);
            if t == 100.0 {
                link(s, 3.0, 16.0, util)
            } else {
                s
            }
        });
        let (_, _, seconds) = h.pcie_link.expect("a shortfall");
        assert!((seconds - 4.0).abs() < 0.2, "{seconds} s");
    }

    #[test]
    fn a_link_trained_short_under_load_is_a_finding_and_idle_downshift_is_not() {
        // Idle for 4 s at gen1 (power saving), then busy at gen3 x16 of gen5 x16.
        let h = health(|t, s| {
            if t < 104.0 {
                link(s, 1.0, 16.0, 0.0)
            } else {
                link(s, 3.0, 16.0, 100.0)
            }
        });
        let findings = h.findings();
        assert_eq!(findings.len(), 1, "{findings:?}");
        let f = &findings[0];
        assert_eq!(f.signal, "pcie_link");
        assert_eq!(f.t, Some(104.0));
        assert!(!f.severe);
        assert_eq!(
            f.text,
            format!(
                "PCIe link trained below its maximum (gen3 x16 of gen5 x16) for 6 s, first at {} UTC",
                crate::report::utc_hms(104.0)
            )
        );
        // The counters stayed clean: the summary says so before the link.
        assert!(h.summary().starts_with("no Xid events"), "{}", h.summary());
        // Idle all along at gen1: the driver's power saving, no finding.
        assert!(health(|_, s| link(s, 1.0, 16.0, 0.0)).findings().is_empty());
        // Busy at the maximum: none either.
        assert!(health(|_, s| link(s, 5.0, 16.0, 100.0))
            .findings()
            .is_empty());
        // Half the lanes, idle: a downtrained link, found.
        let narrow = health(|_, s| link(s, 1.0, 8.0, 0.0)).findings();
        assert_eq!(narrow.len(), 1);
        assert!(
            narrow[0].text.contains("(gen1 x8 of gen5 x16) for 10 s"),
            "{narrow:?}"
        );
    }

    #[test]
    fn an_xid_finding_names_the_catalogue_meaning_and_action() {
        let h = health(|t, s| {
            let n = if t < 105.0 { 0.0 } else { 1.0 };
            s.with(Metric::XidEvents, n)
                .with(Metric::XidLast, if n > 0.0 { 79.0 } else { 0.0 })
        });
        let f = &h.findings()[0];
        assert_eq!(f.signal, "xid_events");
        assert!(
            f.text.starts_with(
                "Xid events: 1 (last: Xid 79, GPU has fallen off the bus: reboot_node), first at"
            ),
            "{}",
            f.text
        );
    }
}
