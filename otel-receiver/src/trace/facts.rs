//! The facts file beside a trace: what each GPU is (model, UUID, driver, limits), which the CSV
//! rows do not carry. The recorded H200 sessions (`../shared/fixtures`) hold one GPU's facts at
//! the top level; `record` and `calibrate --save-session` add a `gpus` table with each GPU's own,
//! keyed by index, and keep the top level (GPU 0's) for readers that know only that form.
//!
//! For a trace `DIR/NAME.csv` the file is `DIR/NAME.facts.json`, else `DIR/facts.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::device::DeviceFacts;
use crate::files::{Input, ReadError};
use crate::spec::{DeviceSpec, LiveFigures};

#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    /// The file could not be read, or is past its cap (the error names both).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The file's content is not facts.
    #[error("{path}: {problem}")]
    Bad { path: String, problem: String },
}

/// Every GPU's facts for one trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceFacts {
    /// For GPUs without an entry of their own (all of them, in single-GPU files).
    pub default: DeviceFacts,
    pub per_gpu: BTreeMap<u32, DeviceFacts>,
}

impl TraceFacts {
    /// GPU `gpu`'s facts: its own where the file has them, else the default.
    pub fn gpu(&self, gpu: u32) -> &DeviceFacts {
        self.per_gpu.get(&gpu).unwrap_or(&self.default)
    }

    /// Reads the facts file beside `trace`; `Ok(None)` when there is none.
    pub fn beside(trace: &Path) -> Result<Option<TraceFacts>, FactsError> {
        for path in candidates(trace) {
            // Bounded and a regular file only: a bundle's facts linked to `/dev/zero` took
            // `replay` to 11 GB.
            match crate::files::read_text(&path, Input::TraceFacts) {
                Ok(text) => {
                    return TraceFacts::from_json(&text, &path.display().to_string()).map(Some)
                }
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(FactsError::Read(e)),
            }
        }
        Ok(None)
    }

    /// Parses a facts document; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<TraceFacts, FactsError> {
        let file: FactsFile = serde_json::from_str(text).map_err(|e| FactsError::Bad {
            path: origin.to_string(),
            problem: e.to_string(),
        })?;
        let bad = |problem: String| FactsError::Bad {
            path: origin.to_string(),
            problem,
        };
        file.top.check("").map_err(bad)?;
        let mut per_gpu = BTreeMap::new();
        for (key, entry) in &file.gpus {
            let gpu = key
                .parse::<u32>()
                .map_err(|_| bad(format!("gpus: key {key:?} is not a GPU index")))?;
            entry.check(&format!("gpus.{key}.")).map_err(bad)?;
            per_gpu.insert(gpu, entry.to_facts());
        }
        Ok(TraceFacts {
            default: file.top.to_facts(),
            per_gpu,
        })
    }

    /// The file `record` writes: GPU 0's facts at the top level, each GPU's under `gpus`.
    pub fn to_json(&self) -> String {
        let file = FactsFile {
            top: FactsEntry::from_facts(self.per_gpu.values().next().unwrap_or(&self.default)),
            gpus: self
                .per_gpu
                .iter()
                .map(|(gpu, f)| (gpu.to_string(), FactsEntry::from_facts(f)))
                .collect(),
        };
        serde_json::to_string_pretty(&file).unwrap_or_default()
    }

    /// Where `record` writes the facts for `trace`.
    pub fn path_for(trace: &Path) -> PathBuf {
        let stem = trace
            .file_stem()
            .map_or_else(|| "trace".to_string(), |s| s.to_string_lossy().into_owned());
        trace.with_file_name(format!("{stem}.facts.json"))
    }
}

fn candidates(trace: &Path) -> Vec<PathBuf> {
    let mut paths = vec![TraceFacts::path_for(trace)];
    if let Some(dir) = trace.parent() {
        paths.push(dir.join("facts.json"));
    }
    paths
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct FactsFile {
    #[serde(flatten)]
    top: FactsEntry,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    gpus: BTreeMap<String, FactsEntry>,
}

/// One GPU's facts in the fixtures' own field names and units.
#[derive(Debug, Default, Serialize, Deserialize)]
struct FactsEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    driver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    power_limit_enforced_mw: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    power_limit_default_mw: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    power_limit_min_mw: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    power_limit_max_mw: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temp_slowdown_c: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mem_total: Option<f64>,
    /// Set on a MIG instance: the index of its GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mig_parent_gpu: Option<u32>,
    /// `/dev/nvidiaN`'s N.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    minor_number: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pci_bus_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vbios: Option<String>,
    /// What NVML reports of the GPU's make-up, in the recorded fixtures' names where they have
    /// them (`max_mem_mhz`, `num_cores`, `arch`, `gpm_supported` as 0 or 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mem_bus_width_bits: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_mem_mhz: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    num_cores: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gpm_supported: Option<u8>,
    /// A MIG instance's SMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    multiprocessor_count: Option<u32>,
    /// The peak figures and where each came from, as resolved when the file was written: for
    /// whoever reads the file. A replay resolves them again from the readings above and the
    /// table of its day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spec: Option<DeviceSpec>,
}

/// A value that is a number within `range`, for the plausibility checks.
fn plausible(
    at: &str,
    field: &str,
    value: Option<f64>,
    range: std::ops::RangeInclusive<f64>,
    what: &str,
) -> Result<(), String> {
    match value {
        Some(v) if !(v.is_finite() && range.contains(&v)) => Err(format!(
            "{at}{field} = {v} is not a plausible {what} ({} to {})",
            range.start(),
            range.end()
        )),
        _ => Ok(()),
    }
}

impl FactsEntry {
    /// Refuses values no GPU has: a TDP of 0 would divide every efficiency by zero.
    fn check(&self, at: &str) -> Result<(), String> {
        const MW: std::ops::RangeInclusive<f64> = 1_000.0..=10_000_000.0;
        let limit = "power limit in mW";
        plausible(
            at,
            "power_limit_default_mw",
            self.power_limit_default_mw,
            MW,
            limit,
        )?;
        plausible(
            at,
            "power_limit_enforced_mw",
            self.power_limit_enforced_mw,
            MW,
            limit,
        )?;
        plausible(at, "power_limit_min_mw", self.power_limit_min_mw, MW, limit)?;
        plausible(at, "power_limit_max_mw", self.power_limit_max_mw, MW, limit)?;
        plausible(
            at,
            "temp_slowdown_c",
            self.temp_slowdown_c,
            1.0..=200.0,
            "temperature in °C",
        )?;
        plausible(
            at,
            "mem_total",
            self.mem_total,
            1.0..=1e15,
            "memory size in bytes",
        )?;
        plausible(
            at,
            "max_mem_mhz",
            self.max_mem_mhz,
            1.0..=100_000.0,
            "memory clock in MHz",
        )?;
        plausible(
            at,
            "mem_bus_width_bits",
            self.mem_bus_width_bits.map(f64::from),
            8.0..=65_536.0,
            "memory bus width in bits",
        )
    }

    fn to_facts(&self) -> DeviceFacts {
        DeviceFacts {
            name: self.name.clone(),
            uuid: self.uuid.clone(),
            driver: self.driver.clone(),
            tdp_w: self.power_limit_default_mw.map(|mw| mw / 1000.0),
            power_limit_w: self.power_limit_enforced_mw.map(|mw| mw / 1000.0),
            power_limit_min_w: self.power_limit_min_mw.map(|mw| mw / 1000.0),
            power_limit_max_w: self.power_limit_max_mw.map(|mw| mw / 1000.0),
            temp_slowdown_c: self.temp_slowdown_c,
            mem_total_bytes: self.mem_total,
            minor_number: self.minor_number,
            mig_parent: self.mig_parent_gpu,
            pci_bus_id: self.pci_bus_id.clone(),
            serial: self.serial.clone(),
            vbios: self.vbios.clone(),
            figures: LiveFigures {
                mem_bus_width_bits: self.mem_bus_width_bits,
                mem_clock_max_mhz: self.max_mem_mhz,
                cuda_cores: self.num_cores,
                arch: self.arch,
                sm_count: self.multiprocessor_count,
                gpm_supported: self.gpm_supported.map(|g| g != 0),
            },
            spec: self.spec.clone(),
        }
    }

    fn from_facts(f: &DeviceFacts) -> FactsEntry {
        FactsEntry {
            name: f.name.clone(),
            uuid: f.uuid.clone(),
            driver: f.driver.clone(),
            power_limit_enforced_mw: f.power_limit_w.map(|w| w * 1000.0),
            power_limit_default_mw: f.tdp_w.map(|w| w * 1000.0),
            power_limit_min_mw: f.power_limit_min_w.map(|w| w * 1000.0),
            power_limit_max_mw: f.power_limit_max_w.map(|w| w * 1000.0),
            temp_slowdown_c: f.temp_slowdown_c,
            mem_total: f.mem_total_bytes,
            mig_parent_gpu: f.mig_parent,
            minor_number: f.minor_number,
            pci_bus_id: f.pci_bus_id.clone(),
            serial: f.serial.clone(),
            vbios: f.vbios.clone(),
            mem_bus_width_bits: f.figures.mem_bus_width_bits,
            max_mem_mhz: f.figures.mem_clock_max_mhz,
            num_cores: f.figures.cuda_cores,
            arch: f.figures.arch,
            gpm_supported: f.figures.gpm_supported.map(u8::from),
            multiprocessor_count: f.figures.sm_count,
            spec: f.spec.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE: &str = include_str!("../../../tests/fixtures/h200-reference/facts.json");

    #[test]
    fn the_fixtures_single_gpu_form_applies_to_every_gpu() {
        let facts = TraceFacts::from_json(REFERENCE, "facts.json").expect("facts");
        assert!(facts.per_gpu.is_empty());
        let gpu3 = facts.gpu(3);
        assert_eq!(gpu3.name.as_deref(), Some("NVIDIA H200"));
        assert_eq!((gpu3.tdp_w, gpu3.power_limit_w), (Some(700.0), Some(700.0)));
        assert_eq!(gpu3.uuid, None);
        // The recorded H200's make-up, in the names its file has always used; no bus width.
        assert_eq!(
            gpu3.figures,
            LiveFigures {
                mem_bus_width_bits: None,
                mem_clock_max_mhz: Some(3201.0),
                cuda_cores: Some(16896),
                arch: Some(9),
                sm_count: None,
                gpm_supported: Some(true),
            }
        );
        assert_eq!(gpu3.figures.sm_count(None), Some(132));
    }

    /// Files written before the live figures existed read as before: nothing read, no spec.
    #[test]
    fn the_recorded_facts_files_without_figures_still_read() {
        for text in [
            include_str!("../../../tests/fixtures/h200-verdicts/samples.facts.json"),
            include_str!("../../../tests/fixtures/h200x2-calibration/facts.json"),
        ] {
            let facts = TraceFacts::from_json(text, "samples.facts.json").expect("reads");
            let gpu0 = facts.gpu(0);
            assert_eq!(gpu0.name.as_deref(), Some("NVIDIA H200"));
            assert_eq!(gpu0.figures, LiveFigures::default());
            assert_eq!(gpu0.spec, None);
        }
    }

    #[test]
    fn each_gpu_keeps_its_own_facts_through_a_round_trip() {
        let gpu = |uuid: &str, limit: f64| DeviceFacts {
            name: Some("NVIDIA H200".into()),
            uuid: Some(uuid.into()),
            driver: Some("580.159.04".into()),
            tdp_w: Some(700.0),
            power_limit_w: Some(limit),
            power_limit_min_w: Some(200.0),
            power_limit_max_w: Some(700.0),
            temp_slowdown_c: Some(89.0),
            mem_total_bytes: Some(150754820096.0),
            minor_number: Some(uuid.len() as u32),
            mig_parent: None,
            pci_bus_id: Some(format!("00000000:{:02X}:00.0", uuid.len())),
            serial: Some(format!("165{}", uuid.len())),
            vbios: Some("96.00.9F.00.01".into()),
            figures: LiveFigures {
                mem_bus_width_bits: Some(6144),
                mem_clock_max_mhz: Some(3201.0),
                cuda_cores: Some(16896),
                arch: Some(9),
                sm_count: None,
                gpm_supported: Some(true),
            },
            spec: Some(DeviceSpec::resolve(
                Some(700.0),
                &LiveFigures {
                    gpm_supported: Some(true),
                    ..LiveFigures::default()
                },
                None,
            )),
        };
        let facts = TraceFacts {
            default: DeviceFacts::default(),
            per_gpu: [(0, gpu("GPU-a", 700.0)), (1, gpu("GPU-b", 650.0))].into(),
        };
        let json = facts.to_json();
        assert!(json.contains(r#""source": "nvml""#), "{json}");
        let back = TraceFacts::from_json(&json, "x.facts.json").expect("parses");
        assert_eq!(back.gpu(1), &gpu("GPU-b", 650.0));
        assert_eq!(back.default, gpu("GPU-a", 700.0), "GPU 0 at the top level");
        assert_eq!(
            TraceFacts::path_for(Path::new("/r/run.csv")),
            Path::new("/r/run.facts.json")
        );
    }

    #[test]
    fn a_bad_gpu_key_or_document_names_the_file() {
        let err = TraceFacts::from_json(r#"{"gpus": {"zero": {}}}"#, "f.json").expect_err("bad");
        assert_eq!(
            err.to_string(),
            "f.json: gpus: key \"zero\" is not a GPU index"
        );
        let err = TraceFacts::from_json("[1]", "f.json").expect_err("bad");
        assert!(err.to_string().starts_with("f.json: "), "{err}");
    }

    #[test]
    fn implausible_facts_are_refused_naming_the_field() {
        let err = TraceFacts::from_json(r#"{"power_limit_default_mw": 0}"#, "f.json")
            .expect_err("a TDP of 0");
        assert_eq!(
            err.to_string(),
            "f.json: power_limit_default_mw = 0 is not a plausible power limit in mW (1000 to 10000000)"
        );
        let err = TraceFacts::from_json(
            r#"{"gpus": {"1": {"power_limit_default_mw": -5}}}"#,
            "f.json",
        )
        .expect_err("negative");
        assert!(
            err.to_string()
                .contains("gpus.1.power_limit_default_mw = -5"),
            "{err}"
        );
    }
}
