//! Which metrics a run exports, and in which shape: a named set (`lean`, the default; `full`;
//! `dcgm`; `datadog`) with metric names added or taken away. The export state applies it once,
//! where the points are made ([`super::ExportState::points`]), so OTLP and Prometheus export
//! the same series. docs/EXPORT.md, "Metric sets", has the sets and what each costs.

use super::catalogue::{self, MetricDef};

/// A named set of metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricSet {
    /// The fleet views at a bill an SRE can defend: the verdict, efficiency, power, energy,
    /// activity, memory, temperature, the health that is not all zeros, and the cost of slack
    /// per owner (≤ 30 series a GPU with one owner, ≤ 45 whatever the churn).
    Lean,
    /// Every metric of the table, as before the sets (≤ 369 series a GPU).
    Full,
    /// dcgm-exporter's exposition: its default fields, the profiling fields GPM gives and those
    /// Datadog's `dcgm` check maps, under dcgm-exporter's names, units and labels (the owner's
    /// pod on every series), with gpuslack's verdict series beside them under gpuslack's names
    /// (46 series a GPU on the H200 recordings; ≤ 72 whatever the churn: 38 fields, 4 gauges,
    /// the verdict times of ≤ 3 owners).
    Dcgm,
    /// What the Datadog monitors and dashboard in deploy/datadog read: ≤ 25 custom metrics a
    /// GPU with one owner.
    Datadog,
}

/// How the points of the selected metrics are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Today's: one-hot verdict and health (9 and 3 series), every counter per owner with the
    /// top `--owner-series` owners and `other`, a zero where a counter is read.
    Full,
    /// One series for the verdict and one for the health state; zeros that never moved are no
    /// series; the only per-owner series are the owner's energy and its time in each verdict it
    /// had; a former owner's series end once an export carried their last value.
    Lean,
}

impl MetricSet {
    /// Every set, in the order the documentation lists them.
    pub const ALL: [MetricSet; 4] = [
        MetricSet::Lean,
        MetricSet::Full,
        MetricSet::Dcgm,
        MetricSet::Datadog,
    ];

    /// The set's name, as the config, the environment and the flags write it.
    pub fn name(self) -> &'static str {
        match self {
            MetricSet::Lean => "lean",
            MetricSet::Full => "full",
            MetricSet::Dcgm => "dcgm",
            MetricSet::Datadog => "datadog",
        }
    }

    /// The set named `name` (any case); an unknown name is an error that suggests the nearest.
    pub fn parse(name: &str) -> Result<MetricSet, SelectionError> {
        let wanted = name.trim().to_ascii_lowercase();
        MetricSet::ALL
            .into_iter()
            .find(|s| s.name() == wanted)
            .ok_or_else(|| SelectionError::UnknownSet {
                name: name.to_string(),
                nearest: nearest(&wanted, MetricSet::ALL.iter().map(|s| s.name())),
            })
    }

    /// The shape its points take.
    pub fn shape(self) -> Shape {
        match self {
            MetricSet::Full => Shape::Full,
            MetricSet::Lean | MetricSet::Dcgm | MetricSet::Datadog => Shape::Lean,
        }
    }

    /// The GPU metrics of the set, by name (the agent's own metrics are in every set).
    pub fn metrics(self) -> Vec<&'static str> {
        match self {
            MetricSet::Full => catalogue::ALL.iter().map(|d| d.name).collect(),
            MetricSet::Lean => LEAN.to_vec(),
            MetricSet::Dcgm => catalogue::DCGM_FIELDS
                .iter()
                .map(|d| d.name)
                .chain(DCGM_VERDICTS)
                .collect(),
            MetricSet::Datadog => DATADOG.to_vec(),
        }
    }
}

/// The lean set, and [`HEADROOM`] (one series a GPU, budgeted).
const LEAN: [&str; 25] = [
    "hw.power",
    "hw.energy",
    "hw.gpu.utilization",
    "hw.gpu.memory.usage",
    "hw.gpu.memory.limit",
    "gpuslack.memory.swing",
    "hw.temperature",
    "hw.errors",
    "hw.status",
    "gpuslack.sm.activity",
    "gpuslack.dram.activity",
    "gpuslack.power.tdp",
    "gpuslack.throttle",
    "gpuslack.efficiency",
    "gpuslack.diagnosis",
    "gpuslack.diagnosis.time",
    "gpuslack.ecc.errors",
    "gpuslack.memory.remapped_rows",
    "gpuslack.memory.remap.pending",
    "gpuslack.memory.remap.failed",
    "gpuslack.memory.retired_pages",
    "gpuslack.memory.retirement.pending",
    "gpuslack.xid.last",
    "gpuslack.xid.errors",
    "gpuslack.job.info",
];

/// The headroom gauge (the binding resource's fraction of its peak, issue #39): one series a
/// GPU, in the lean and Datadog sets' budgets.
pub const HEADROOM: &str = super::catalogue::HEADROOM.name;

/// The Datadog set: what deploy/datadog's monitors and dashboard read, ≤ 25 custom metrics a GPU
/// with one owner. The straggler monitor reads the process SM share, which names the job (a
/// Datadog monitor cannot join a gauge to `gpuslack.job.info`); the Xid monitor reads the
/// per-code Xid count, whose action tag keeps the application's own Xids (13, 31, 43) from
/// paging (a series only for a code seen, at most 8 and `other` a GPU).
const DATADOG: [&str; 21] = [
    "hw.power",
    "hw.energy",
    "hw.gpu.utilization",
    "hw.gpu.memory.usage",
    "hw.gpu.memory.limit",
    "gpuslack.memory.swing",
    "hw.temperature",
    "hw.errors",
    "hw.status",
    "gpuslack.sm.activity",
    "gpuslack.power.tdp",
    "gpuslack.efficiency",
    "gpuslack.diagnosis",
    "gpuslack.diagnosis.time",
    "gpuslack.memory.remap.failed",
    "gpuslack.memory.remap.pending",
    "gpuslack.xid.last",
    "gpuslack.job.info",
    "gpuslack.process.sm.activity",
    "gpuslack.ecc.errors",
    // The Xid monitor filters on the action tag: the application's own Xids do not page.
    "gpuslack.xid.errors",
];

/// gpuslack's series beside dcgm-exporter's fields in the dcgm set: the verdict and its cost,
/// the efficiency, the headroom and the job (`gpuslack.job.info`), under gpuslack's names.
/// The fields themselves are [`catalogue::DCGM_FIELDS`].
pub const DCGM_VERDICTS: [&str; 5] = [
    "gpuslack.diagnosis",
    "gpuslack.diagnosis.time",
    "gpuslack.efficiency",
    "gpuslack.headroom",
    "gpuslack.job.info",
];

/// Why a selection cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error(
        "unknown metric set {name:?}{}: the sets are lean, full, dcgm and datadog",
        suggest(nearest)
    )]
    UnknownSet {
        name: String,
        nearest: Option<&'static str>,
    },
    #[error(
        "unknown metric {name:?}{}: docs/EXPORT.md lists every metric",
        suggest(nearest)
    )]
    UnknownMetric {
        name: String,
        nearest: Option<&'static str>,
    },
    #[error("{name:?} is the agent's own metric, exported whatever the selection (it says whether the rest arrives)")]
    AgentMetric { name: String },
    #[error("the metric set {set} with these includes and excludes selects no metric: nothing would be exported")]
    Empty { set: &'static str },
}

fn suggest(nearest: &Option<&'static str>) -> String {
    nearest.map_or(String::new(), |n| format!(" (did you mean {n:?}?)"))
}

/// The candidate nearest to `name` by edit distance, where near enough to be a typo (at most a
/// third of the name's length, and 3 edits).
fn nearest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let bound = (name.chars().count() / 3).clamp(1, 3);
    candidates
        .map(|c| (strsim::damerau_levenshtein(name, c), c))
        .filter(|(d, _)| *d <= bound)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Every metric name a selection may name: the GPUs', gpuslack's and dcgm-exporter's. The
/// agent's own (`gpuslack.agent.*`, a node's ~20 series that say whether the rest arrives) are
/// exported whatever the selection.
fn every_metric() -> impl Iterator<Item = MetricDef> {
    catalogue::ALL.into_iter().chain(catalogue::DCGM_FIELDS)
}

/// The metric of the table named `name`, or an error suggesting the nearest.
fn known(name: &str) -> Result<&'static str, SelectionError> {
    let name = name.trim();
    if catalogue::AGENT.iter().any(|d| d.name == name) {
        return Err(SelectionError::AgentMetric {
            name: name.to_string(),
        });
    }
    every_metric()
        .map(|d| d.name)
        .find(|n| *n == name)
        .ok_or_else(|| SelectionError::UnknownMetric {
            name: name.to_string(),
            nearest: nearest(name, every_metric().map(|d| d.name)),
        })
}

/// The metrics a run exports, and the shape of their points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    set: MetricSet,
    /// The selected metrics' names, in the table's order.
    names: Vec<&'static str>,
    /// The owner's pod on every per-GPU series ([`Selection::with_pod_labels`]).
    pod_labels: bool,
}

/// The set exported where no layer names one.
pub const DEFAULT_SET: MetricSet = MetricSet::Lean;

impl Default for Selection {
    /// The default set, whole.
    fn default() -> Self {
        Selection::new(DEFAULT_SET, &[], &[]).unwrap_or_else(|_| Selection::full())
    }
}

impl Selection {
    /// `set`, with `include` added and `exclude` taken away (an exclude wins over an include).
    /// A name not in the table, or a selection of nothing, is an error.
    pub fn new(
        set: MetricSet,
        include: &[String],
        exclude: &[String],
    ) -> Result<Selection, SelectionError> {
        let include = include
            .iter()
            .map(|n| known(n))
            .collect::<Result<Vec<_>, _>>()?;
        let exclude = exclude
            .iter()
            .map(|n| known(n))
            .collect::<Result<Vec<_>, _>>()?;
        let mut base = set.metrics();
        if set != MetricSet::Full && set != MetricSet::Dcgm {
            base.push(HEADROOM);
        }
        let names: Vec<&'static str> = every_metric()
            .map(|d| d.name)
            .filter(|n| base.contains(n) || include.contains(n))
            .filter(|n| !exclude.contains(n))
            .collect();
        if names.is_empty() {
            return Err(SelectionError::Empty { set: set.name() });
        }
        Ok(Selection {
            set,
            names,
            pod_labels: set == MetricSet::Dcgm,
        })
    }

    /// The whole table in today's shape: what the tests of every metric read (gpuslack's
    /// names; dcgm-exporter's are the dcgm set's).
    pub fn full() -> Selection {
        Selection {
            set: MetricSet::Full,
            names: catalogue::ALL.iter().map(|d| d.name).collect(),
            pod_labels: false,
        }
    }

    /// With or without the owner's `pod`, `namespace` and `container` on every per-GPU series
    /// (on by default in the dcgm set, as dcgm-exporter has them; off in the others, whose
    /// gauges name the GPU alone: docs/EXPORT.md, "Pods on GPU series").
    pub fn with_pod_labels(mut self, on: bool) -> Selection {
        self.pod_labels = on;
        self
    }

    /// Whether the owner's pod rides on every per-GPU series.
    pub fn pod_labels(&self) -> bool {
        self.pod_labels
    }

    /// Whether any of dcgm-exporter's fields is selected.
    pub fn has_dcgm_fields(&self) -> bool {
        catalogue::DCGM_FIELDS.iter().any(|d| self.includes(d))
    }

    pub fn set(&self) -> MetricSet {
        self.set
    }

    pub fn shape(&self) -> Shape {
        self.set.shape()
    }

    /// Whether `def`, a GPU metric, is exported.
    pub fn includes(&self, def: &MetricDef) -> bool {
        self.names.contains(&def.name)
    }

    /// Whether the selection exports `name` (a GPU metric of the table).
    pub fn has(&self, name: &str) -> bool {
        self.names.contains(&name)
    }

    /// The selected metrics' names, in the table's order.
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_name_only_metrics_of_the_table() {
        for set in MetricSet::ALL {
            for name in set.metrics() {
                assert!(known(name).is_ok(), "{}: {name}", set.name());
            }
        }
    }

    #[test]
    fn the_dcgm_set_is_dcgm_exporters_fields_and_the_verdicts_with_pods_on() {
        let dcgm = Selection::new(MetricSet::Dcgm, &[], &[]).expect("the set");
        assert_eq!(
            dcgm.names().len(),
            catalogue::DCGM_FIELDS.len() + DCGM_VERDICTS.len()
        );
        assert!(dcgm.has_dcgm_fields() && dcgm.pod_labels());
        assert!(dcgm.has("DCGM_FI_DEV_GPU_TEMP") && dcgm.has("gpuslack.diagnosis"));
        // Not OpenTelemetry's names for the same fields: one exposition, not two.
        assert!(!dcgm.has("hw.power") && !dcgm.has("hw.temperature"));
        let lean = Selection::default();
        assert!(!lean.has_dcgm_fields() && !lean.pod_labels());
        // A field may be added to another set by name, and the switch turns pods on.
        let lean = Selection::new(MetricSet::Lean, &["DCGM_FI_DEV_GPU_TEMP".into()], &[])
            .expect("an include")
            .with_pod_labels(true);
        assert!(lean.has_dcgm_fields() && lean.pod_labels());
        assert!(!Selection::full().has_dcgm_fields());
    }

    #[test]
    fn a_set_typo_names_the_set_and_suggests_the_nearest() {
        let e = MetricSet::parse("laen").expect_err("a typo");
        assert_eq!(
            e.to_string(),
            "unknown metric set \"laen\" (did you mean \"lean\"?): the sets are lean, full, dcgm and datadog"
        );
        assert_eq!(MetricSet::parse("FULL"), Ok(MetricSet::Full));
        let far = MetricSet::parse("everything").expect_err("unknown");
        assert!(!far.to_string().contains("did you mean"), "{far}");
    }

    #[test]
    fn an_unknown_metric_names_it_and_suggests_the_nearest() {
        let e = Selection::new(MetricSet::Lean, &["hw.powr".into()], &[]).expect_err("typo");
        assert_eq!(
            e,
            SelectionError::UnknownMetric {
                name: "hw.powr".into(),
                nearest: Some("hw.power")
            }
        );
        assert!(e.to_string().contains("did you mean \"hw.power\"?"), "{e}");
        let e = Selection::new(MetricSet::Full, &[], &["gpuslack.diagnosis.tim".into()])
            .expect_err("typo in an exclude");
        assert!(
            e.to_string()
                .contains("\"gpuslack.diagnosis.tim\" (did you mean \"gpuslack.diagnosis.time\"?)"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_selection_is_an_error() {
        let all: Vec<String> = every_metric().map(|d| d.name.to_string()).collect();
        let e = Selection::new(MetricSet::Dcgm, &[], &all).expect_err("nothing left");
        assert_eq!(e, SelectionError::Empty { set: "dcgm" });
        assert!(e.to_string().contains("selects no metric"), "{e}");
    }

    #[test]
    fn includes_add_excludes_win_and_the_agent_is_not_selected() {
        let s = Selection::new(
            MetricSet::Lean,
            &[
                "gpuslack.throttle".into(),
                "gpuslack.clock.sm".into(),
                "hw.power".into(),
            ],
            &["hw.power".into()],
        )
        .expect("valid");
        assert!(s.includes(&catalogue::THROTTLE));
        assert!(!s.includes(&catalogue::HW_POWER));
        let agent = Selection::new(MetricSet::Lean, &[], &["gpuslack.agent.points".into()]);
        assert!(
            matches!(agent, Err(SelectionError::AgentMetric { .. })),
            "{agent:?}"
        );
        assert!(s.includes(&catalogue::CLOCK_SM));
        assert!(!s.includes(&catalogue::CLOCK_MEMORY));
        assert_eq!(s.shape(), Shape::Lean);
        let full = Selection::new(MetricSet::Full, &[], &[]).expect("full");
        assert_eq!(full, Selection::full());
        assert_eq!(full.names().len(), catalogue::ALL.len());
        assert_eq!(Selection::default().set(), DEFAULT_SET);
    }
}
