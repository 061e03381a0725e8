//! The report as one JSON document for programs: schema [`REPORT_SCHEMA`], described field by
//! field in docs/output.schema.json and docs/OUTPUT.md.

use crate::device::DeviceFacts;
use crate::diagnosis;
use crate::report::words;

use super::summary::is_slack;
use super::{HumanReport, Prices, SourceLabel};

/// The version of `diagnose --format json`'s document (docs/OUTPUT.md). Fields are only ever
/// added; a rename or a type change would change it.
pub const REPORT_SCHEMA: &str = "gpuslack.diagnose.v1";

impl HumanReport {
    /// The report as one JSON document (schema [`REPORT_SCHEMA`], docs/output.schema.json).
    pub fn json(
        &self,
        source: &SourceLabel,
        prices: &Prices,
        facts: impl Fn(u32) -> DeviceFacts,
    ) -> serde_json::Value {
        use serde_json::json;
        let remedies = self.remedies();
        let bottom = self.bottom_line(prices);
        let gpus: Vec<serde_json::Value> = self
            .gpus
            .iter()
            .map(|(gpu, r)| {
                let f = facts(*gpu);
                let total = r.seconds();
                let by_verdict: serde_json::Map<String, serde_json::Value> = r
                    .by_class
                    .iter()
                    .map(|(c, t)| {
                        (
                            c.as_str().to_string(),
                            json!({
                                "seconds": t.seconds,
                                "energy_j": t.energy_j.round(),
                                "energy_kwh": diagnosis::round3(t.energy_j / 3.6e3) / 1000.0,
                                "share": if total > 0.0 { t.seconds / total } else { 0.0 },
                                "phases": t.phases,
                                "slack": is_slack(*c),
                                "power_w": t.power_w.get().map(diagnosis::round3),
                                "util_gpu": t.util_pct.get().map(|u| diagnosis::round3(u / 100.0)),
                                "sm_active": t.sm_pct.get().map(|u| diagnosis::round3(u / 100.0)),
                                "dram": t.dram_pct.get().map(|u| diagnosis::round3(u / 100.0)),
                                "sm_occupancy": t.occupancy_pct.get().map(|u| diagnosis::round3(u / 100.0)),
                            }),
                        )
                    })
                    .collect();
                let phases: Vec<serde_json::Value> = r
                    .phases
                    .iter()
                    .map(|p| {
                        let rep = p.representative();
                        json!({
                            "start": p.start,
                            "end": p.end,
                            "class": p.class.as_str(),
                            "windows": p.count,
                            "energy_j": p.energy_j.round(),
                            "basis": "phase_mean",
                            "power_w": p.mean(|w| w.signals.power_w),
                            "util_gpu": p.mean(|w| w.signals.util_pct.map(|u| u / 100.0)),
                            "sm_active": p.mean(|w| w.signals.sm_pct.map(|u| u / 100.0)),
                            "evidence_window": {"start": rep.stats.start, "end": rep.stats.end},
                            "rule": rep.rule,
                            "evidence": rep.evidence.iter().map(|e| e.text.as_str()).collect::<Vec<_>>(),
                            "headroom": rep.headroom.map(|h| json!({
                                "resource": h.resource.as_str(),
                                "fraction": h.fraction,
                                "text": h.text(),
                            })),
                            "remedy": rep.remedy(),
                            "remedy_id": self.remedy_id(&remedies, rep.remedy()),
                            "owners": p.owners.ranked().iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                let owners: Vec<serde_json::Value> = r
                    .owners
                    .ranked()
                    .iter()
                    .map(|(o, (s, classes, identity))| {
                        let mut owner = json!({
                            "owner": o,
                            "seconds": s,
                            "classes": classes.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                        });
                        if let (Some(owner), Some(identity)) =
                            (owner.as_object_mut(), identity.as_object())
                        {
                            owner.extend(identity.clone());
                        }
                        owner
                    })
                    .collect();
                json!({
                    "gpu": gpu,
                    "name": f.name,
                    "model": f.name,
                    "uuid": f.uuid,
                    "serial": f.serial,
                    "pci_bus_id": f.pci_bus_id,
                    "vbios": f.vbios,
                    "tdp_w": r.tdp_w.or(f.tdp_w),
                    "mig_parent": f.mig_parent,
                    "spec": f.spec,
                    "seconds": total,
                    "jobs": r.jobs,
                    "owners": owners,
                    "health": {
                        "sampled": r.health.sampled(),
                        "summary": r.health.summary(),
                        "findings": r.health.findings(),
                    },
                    "time_by_verdict": by_verdict,
                    "phases": phases,
                    "more_phases": r.more_phases,
                })
            })
            .collect();
        let remedies_json: Vec<serde_json::Value> = remedies
            .iter()
            .map(|r| {
                json!({
                    "id": r.id,
                    "class": r.class.as_str(),
                    "fix": r.is_fix,
                    "seconds": r.seconds,
                    "gpus": r.gpus,
                    "text": r.text,
                    "change": words::change(r.advice, r.class),
                    "won_back_seconds": r.won_s,
                    "severity": r.severity.as_str(),
                })
            })
            .collect();
        json!({
            "schema": REPORT_SCHEMA,
            "source": {
                "kind": source.kind(),
                "name": source.name(),
                "reason": source.reason(),
            },
            "bottom_line": {
                "text": bottom.text(prices),
                "seconds": bottom.seconds,
                "slack_seconds": bottom.slack_seconds,
                "slack_share": bottom.slack_share(),
                "slack_energy_share": bottom.slack_energy_share(),
                "slack_gpu_hours": bottom.slack_gpu_hours(),
                "slack_kwh": bottom.slack_kwh(),
                "slack_cost": bottom.cost,
                "top_cause": bottom.top_cause.map(|(c, _)| c.as_str()),
                "first_fix": bottom.first_fix.as_ref().map(|r| r.id),
            },
            "remedies": remedies_json,
            "gpus": gpus,
        })
    }
}
