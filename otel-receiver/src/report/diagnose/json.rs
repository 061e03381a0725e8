//! The report as one JSON document for programs: schema [`REPORT_SCHEMA`], described field by
//! field in docs/output.schema.json and docs/OUTPUT.md. The document is typed, one struct per
//! object, so that a field cannot be dropped or change its type without the compiler seeing it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Serialize, Serializer};

use crate::device::DeviceFacts;
use crate::diagnosis::{self, Class, Rule};
use crate::report::health::Finding;
use crate::report::words;
use crate::spec::DeviceSpec;

use super::collect::{GpuReport, Identity};
use super::summary::{is_slack, BottomLine, Remedy, Summary};
use super::{HumanReport, Prices, SourceLabel};

/// The version of `diagnose --format json`'s document (docs/OUTPUT.md). Fields are only ever
/// added; a rename or a type change would change it.
pub const REPORT_SCHEMA: &str = "gpuslack.diagnose.v1";

/// `diagnose --format json`'s document, as [`HumanReport::json`] returns it. Its keys are
/// written in alphabetical order at every level, the objects of other modules (a process, a
/// finding, a spec) included, as they have been since the first v1 document: a script that
/// diffs two documents sees only what changed.
#[derive(Debug, Clone)]
pub struct DiagnoseDocument(Doc);

impl Serialize for DiagnoseDocument {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Through `serde_json::Value`, whose objects keep their keys sorted.
        serde_json::to_value(&self.0)
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

#[derive(Debug, Clone, Serialize)]
struct Doc {
    schema: &'static str,
    source: Source,
    bottom_line: BottomLineJson,
    remedies: Vec<RemedyJson>,
    gpus: Vec<GpuJson>,
}

/// Where the numbers came from ([`SourceLabel`]).
#[derive(Debug, Clone, Serialize)]
struct Source {
    /// `live`, `trace` or `bundled`.
    kind: &'static str,
    name: String,
    reason: String,
}

/// The bottom line's numbers and its paragraph.
#[derive(Debug, Clone, Serialize)]
struct BottomLineJson {
    text: String,
    seconds: f64,
    slack_seconds: f64,
    slack_share: f64,
    slack_energy_share: f64,
    slack_gpu_hours: f64,
    slack_kwh: f64,
    slack_cost: Option<f64>,
    top_cause: Option<&'static str>,
    /// The `id` of the remedy to try first.
    first_fix: Option<usize>,
}

/// One remedy, numbered as the text numbers it.
#[derive(Debug, Clone, Serialize)]
struct RemedyJson {
    id: usize,
    class: &'static str,
    fix: bool,
    seconds: f64,
    gpus: BTreeSet<u32>,
    text: &'static str,
    change: String,
    won_back_seconds: f64,
    severity: &'static str,
}

/// One GPU: what it is, who held it, its health, its time per verdict and its phases.
#[derive(Debug, Clone, Serialize)]
struct GpuJson {
    gpu: u32,
    name: Option<String>,
    /// The same as `name`, under the name the fleet report uses.
    model: Option<String>,
    uuid: Option<String>,
    serial: Option<String>,
    pci_bus_id: Option<String>,
    vbios: Option<String>,
    tdp_w: Option<f64>,
    mig_parent: Option<u32>,
    spec: Option<DeviceSpec>,
    seconds: f64,
    jobs: BTreeSet<String>,
    owners: Vec<OwnerJson>,
    health: HealthJson,
    time_by_verdict: BTreeMap<&'static str, VerdictJson>,
    phases: Vec<PhaseJson>,
    /// Phases past the 200 kept, counted only.
    more_phases: usize,
}

/// Who held the GPU, longest first, with the identity as recorded.
#[derive(Debug, Clone, Serialize)]
struct OwnerJson {
    owner: String,
    seconds: f64,
    classes: Vec<&'static str>,
    /// `process` or `pod`, as sampled.
    #[serde(flatten)]
    identity: Identity,
}

#[derive(Debug, Clone, Serialize)]
struct HealthJson {
    sampled: bool,
    summary: String,
    findings: Vec<Finding>,
}

/// One verdict's totals on one GPU; shares and activities as fractions (0–1).
#[derive(Debug, Clone, Serialize)]
struct VerdictJson {
    seconds: f64,
    energy_j: f64,
    energy_kwh: f64,
    share: f64,
    phases: usize,
    slack: bool,
    power_w: Option<f64>,
    util_gpu: Option<f64>,
    sm_active: Option<f64>,
    dram: Option<f64>,
    sm_occupancy: Option<f64>,
}

/// One kept phase: its figures are means over its kept windows, its evidence that of the
/// window in its middle.
#[derive(Debug, Clone, Serialize)]
struct PhaseJson {
    start: f64,
    end: f64,
    class: &'static str,
    windows: usize,
    energy_j: f64,
    /// `phase_mean`: what the figures are.
    basis: &'static str,
    power_w: Option<f64>,
    util_gpu: Option<f64>,
    sm_active: Option<f64>,
    evidence_window: Span,
    rule: Rule,
    evidence: Vec<String>,
    headroom: Option<HeadroomJson>,
    remedy: &'static str,
    remedy_id: usize,
    owners: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
struct Span {
    start: f64,
    end: f64,
}

#[derive(Debug, Clone, Serialize)]
struct HeadroomJson {
    resource: &'static str,
    fraction: f64,
    text: String,
}

/// A percentage (0–100) as the document's fraction, rounded to three places.
fn fraction(pct: Option<f64>) -> Option<f64> {
    pct.map(|u| diagnosis::round3(u / 100.0))
}

impl HumanReport {
    /// The report as one JSON document (schema [`REPORT_SCHEMA`], docs/output.schema.json).
    pub fn json(
        &self,
        source: &SourceLabel,
        prices: &Prices,
        facts: impl Fn(u32) -> DeviceFacts,
    ) -> DiagnoseDocument {
        let summary = self.summary(prices);
        DiagnoseDocument(Doc {
            schema: REPORT_SCHEMA,
            source: Source {
                kind: source.kind(),
                name: source.name().to_string(),
                reason: source.reason(),
            },
            bottom_line: bottom_line(&summary.bottom, prices),
            remedies: summary.remedies.iter().map(remedy).collect(),
            gpus: self
                .gpus
                .iter()
                .map(|(gpu, r)| self.gpu(*gpu, r, facts(*gpu), &summary))
                .collect(),
        })
    }

    fn gpu(&self, gpu: u32, r: &GpuReport, f: DeviceFacts, summary: &Summary) -> GpuJson {
        let total = r.seconds();
        let time_by_verdict = r
            .by_class
            .iter()
            .map(|(c, t)| {
                (
                    c.as_str(),
                    VerdictJson {
                        seconds: t.seconds,
                        energy_j: t.energy_j.round(),
                        energy_kwh: diagnosis::round3(t.energy_j / 3.6e3) / 1000.0,
                        share: if total > 0.0 { t.seconds / total } else { 0.0 },
                        phases: t.phases,
                        slack: is_slack(*c),
                        power_w: t.power_w.get().map(diagnosis::round3),
                        util_gpu: fraction(t.util_pct.get()),
                        sm_active: fraction(t.sm_pct.get()),
                        dram: fraction(t.dram_pct.get()),
                        sm_occupancy: fraction(t.occupancy_pct.get()),
                    },
                )
            })
            .collect();
        let phases = r
            .phases
            .iter()
            .map(|p| {
                let rep = p.representative();
                PhaseJson {
                    start: p.start,
                    end: p.end,
                    class: p.class.as_str(),
                    windows: p.count,
                    energy_j: p.energy_j.round(),
                    basis: "phase_mean",
                    power_w: p.mean(|w| w.signals.power_w),
                    util_gpu: p.mean(|w| w.signals.util_pct.map(|u| u / 100.0)),
                    sm_active: p.mean(|w| w.signals.sm_pct.map(|u| u / 100.0)),
                    evidence_window: Span {
                        start: rep.stats.start,
                        end: rep.stats.end,
                    },
                    rule: rep.rule,
                    evidence: rep.evidence.iter().map(|e| e.text.clone()).collect(),
                    headroom: rep.headroom.map(|h| HeadroomJson {
                        resource: h.resource.as_str(),
                        fraction: h.fraction,
                        text: h.text(),
                    }),
                    remedy: rep.remedy(),
                    remedy_id: summary.remedy_id(rep.remedy()),
                    owners: p
                        .owners
                        .ranked()
                        .iter()
                        .map(|(o, _)| (*o).clone())
                        .collect(),
                }
            })
            .collect();
        let owners = r
            .owners
            .ranked()
            .into_iter()
            .map(|(o, (s, classes, identity))| OwnerJson {
                owner: o.clone(),
                seconds: *s,
                classes: classes.iter().map(|c: &Class| c.as_str()).collect(),
                identity: identity.clone(),
            })
            .collect();
        GpuJson {
            gpu,
            name: f.name.clone(),
            model: f.name,
            uuid: f.uuid,
            serial: f.serial,
            pci_bus_id: f.pci_bus_id,
            vbios: f.vbios,
            tdp_w: r.tdp_w.or(f.tdp_w),
            mig_parent: f.mig_parent,
            spec: f.spec,
            seconds: total,
            jobs: r.jobs.clone(),
            owners,
            health: HealthJson {
                sampled: r.health.sampled(),
                summary: r.health.summary(),
                findings: r.health.findings(),
            },
            time_by_verdict,
            phases,
            more_phases: r.more_phases,
        }
    }
}

fn bottom_line(bottom: &BottomLine, prices: &Prices) -> BottomLineJson {
    BottomLineJson {
        text: bottom.text(prices),
        seconds: bottom.seconds,
        slack_seconds: bottom.slack_seconds,
        slack_share: bottom.slack_share(),
        slack_energy_share: bottom.slack_energy_share(),
        slack_gpu_hours: bottom.slack_gpu_hours(),
        slack_kwh: bottom.slack_kwh(),
        slack_cost: bottom.cost,
        top_cause: bottom.top_cause.map(|(c, _)| c.as_str()),
        first_fix: bottom.first_fix.as_ref().map(|r| r.id),
    }
}

fn remedy(r: &Remedy) -> RemedyJson {
    RemedyJson {
        id: r.id,
        class: r.class.as_str(),
        fix: r.is_fix,
        seconds: r.seconds,
        gpus: r.gpus.clone(),
        text: r.text,
        change: words::change(r.advice, r.class),
        won_back_seconds: r.won_s,
        severity: r.severity.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::PodContainer;

    #[test]
    fn the_document_writes_its_keys_sorted_as_json_did() {
        let source = SourceLabel::Trace {
            name: "t.csv".into(),
            note: "recorded".into(),
        };
        let doc =
            HumanReport::default().json(&source, &Prices::default(), |_| DeviceFacts::default());
        let text = serde_json::to_string(&doc).expect("serialisable");
        assert_eq!(
            text,
            r#"{"bottom_line":{"first_fix":null,"seconds":0.0,"slack_cost":null,"slack_energy_share":0.0,"slack_gpu_hours":0.0,"slack_kwh":0.0,"slack_seconds":0.0,"slack_share":0.0,"text":"Bottom line: no samples, nothing to diagnose.","top_cause":null},"gpus":[],"remedies":[],"schema":"gpuslack.diagnose.v1","source":{"kind":"trace","name":"t.csv","reason":"recorded"}}"#
        );
    }

    #[test]
    fn an_owner_carries_its_pod_or_process_beside_its_label() {
        let pod = PodContainer {
            pod: "trainer-0".into(),
            namespace: "ml".into(),
            container: "main".into(),
        };
        let owner = OwnerJson {
            owner: "pod ml/trainer-0, container main".into(),
            seconds: 4.0,
            classes: vec!["launch_bound"],
            identity: Identity::Pod(pod),
        };
        let text = serde_json::to_value(&owner)
            .expect("serialisable")
            .to_string();
        assert_eq!(
            text,
            r#"{"classes":["launch_bound"],"owner":"pod ml/trainer-0, container main","pod":{"container":"main","namespace":"ml","pod":"trainer-0"},"seconds":4.0}"#
        );
    }
}
