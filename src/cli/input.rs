//! Opening a trace for the pipeline: the file, its `facts.json` if one sits beside it, and the
//! TDP to divide by.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use gpuslack_calibration::ProfileFile;
use gpuslack_receiver::device::{DeviceFacts, PowerProfile};
use gpuslack_receiver::trace::TraceFacts;
use gpuslack_receiver::{Diagnoser, Pipeline, Thresholds};

/// Window length and TDP flags shared by the commands that run the pipeline.
#[derive(clap::Args, Debug, Clone)]
pub struct PipelineArgs {
    /// TDP in W for the efficiency; default: the trace's power_default_limit_mw column or facts.json.
    #[arg(long, value_name = "W", value_parser = super::flags::finite)]
    pub tdp_w: Option<f64>,
    /// Window length in seconds.
    #[arg(long, value_name = "S", default_value_t = 2.0, value_parser = super::flags::finite)]
    pub window_s: f64,
    /// Calibration profiles (`gpuslack calibrate --out`); a GPU without one of its own uses the
    /// built-in profile of its model, if any.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<std::path::PathBuf>,
}

impl PipelineArgs {
    pub fn validate(&self) -> Result<()> {
        if !(self.window_s.is_finite() && self.window_s >= 0.1 && self.window_s <= 3600.0) {
            bail!(
                "--window-s must be between 0.1 and 3600 seconds, got {}",
                self.window_s
            );
        }
        if let Some(tdp) = self.tdp_w {
            if !(tdp.is_finite() && tdp > 0.0 && tdp <= 10_000.0) {
                bail!("--tdp-w must be a number of watts above 0 and at most 10000, got {tdp}");
            }
        }
        Ok(())
    }

    /// The user's profiles first, then the built-in ones.
    pub fn profiles(&self) -> Result<ProfileFile> {
        let mut all = match &self.profile {
            Some(path) => ProfileFile::load(path)?,
            None => ProfileFile::default(),
        };
        all.gpu.extend(ProfileFile::built_in().gpu);
        Ok(all)
    }

    /// A pipeline for a trace's GPUs: the facts file's default for every GPU, and each GPU's
    /// own facts (and so its own profile, by UUID) where the file has them.
    pub fn pipeline_for_trace(&self, facts: &TraceFacts) -> Result<Pipeline> {
        self.pipeline_for_gpus(facts.default.clone(), facts.per_gpu.clone())
    }

    /// A pipeline for live GPUs, each with the facts the source read from it.
    pub fn pipeline_for_live(&self, gpus: Vec<(u32, DeviceFacts)>) -> Result<Pipeline> {
        self.pipeline_for_gpus(DeviceFacts::default(), gpus)
    }

    /// A pipeline whose every GPU is described by `default` but those in `gpus`, each GPU with
    /// its profile: its own by UUID, else its model's.
    fn pipeline_for_gpus(
        &self,
        default: DeviceFacts,
        gpus: impl IntoIterator<Item = (u32, DeviceFacts)>,
    ) -> Result<Pipeline> {
        let profiles = self.profiles()?;
        let skus = gpuslack_calibration::sku::table()?;
        // Its peak figures: NVML's where the facts have them, else its SKU entry's; a model the
        // table does not know gets none of the table's, and is said so once. Without a model
        // name (a trace with no facts file) there is nothing to look up, and nothing to say.
        let mut unknown = BTreeSet::new();
        let mut with_spec = |mut f: DeviceFacts| -> Result<DeviceFacts> {
            let Some(name) = f.name.clone() else {
                return Ok(f);
            };
            let spec = gpuslack_calibration::sku::spec_for(&f)?;
            if spec.sku.is_none() && unknown.insert(name.clone()) {
                tracing::warn!(
                    model = name.as_str(),
                    "model not in gpuslack's table: no spec-scaled figures; power is judged \
                     against NVML's own power limit until `gpuslack calibrate` measures it"
                );
            }
            f.spec = Some(spec);
            Ok(f)
        };
        let default = with_spec(default)?;
        let gpus: Vec<(u32, DeviceFacts)> = gpus
            .into_iter()
            .map(|(gpu, f)| Ok((gpu, with_spec(f)?)))
            .collect::<Result<_>>()?;
        // Its own profile, else its model's built-in one, else baselines scaled from its SKU's
        // published specification (marked unmeasured: its power verdicts stay medium at best);
        // none for a model not in the table, whose power is then read against fractions of the
        // TDP NVML reports.
        let profile_of = |f: &DeviceFacts| -> Result<Option<PowerProfile>> {
            if let Some(p) = profiles.find(f.uuid.as_deref(), f.name.as_deref()) {
                return Ok(Some(p.power_profile()?));
            }
            Ok(f.name
                .as_deref()
                .and_then(|name| gpuslack_calibration::sku::resolve_in(&skus, name).sku())
                .map(|sku| sku.scaled_profile_at(f.tdp_w)))
        };
        // The GPU's peak DRAM bandwidth (NVML's bus width and memory clock, else its SKU's
        // published figure; none for a model not in the table): the headroom's absolute peak.
        let dram_peak_of =
            |f: &DeviceFacts| f.spec.as_ref().and_then(|s| s.mem_bandwidth_gb_s.value);
        let diagnoser = Diagnoser::new(Thresholds::default())
            .with_default_dram_peak_gb_s(dram_peak_of(&default))
            .with_default_profile(profile_of(&default)?)
            .with_default_facts(default)
            .with_tdp_override(self.tdp_w);
        let mut pipeline = Pipeline::new(self.window_s, diagnoser);
        for (gpu, facts) in gpus {
            if let Some(gb_s) = dram_peak_of(&facts) {
                pipeline.diagnoser_mut().set_dram_peak_gb_s(gpu, gb_s);
            }
            if let Some(profile) = profile_of(&facts)? {
                pipeline.diagnoser_mut().set_profile(gpu, profile);
            }
            pipeline.diagnoser_mut().set_facts(gpu, facts);
        }
        Ok(pipeline)
    }
}

/// The trace a path names: the file itself, or in a folder (a fixture's, a recording's, as
/// `calibrate --from-recording` takes one) its `samples.csv` or `samples.gstrace`, else its one
/// trace file. Decided before anything is printed, so that a folder never fails after a header.
pub fn trace_in(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    for name in ["samples.csv", "samples.gstrace"] {
        if path.join(name).is_file() {
            return Ok(path.join(name));
        }
    }
    let entries = std::fs::read_dir(path)
        .with_context(|| format!("listing the trace folder {}", path.display()))?;
    let mut traces: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "csv" || e == "gstrace"))
        .collect();
    traces.sort();
    match traces.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!(
            "{} is a folder with no trace in it (samples.csv, samples.gstrace, or one .csv or .gstrace file)",
            path.display()
        ),
        many => bail!(
            "{} holds {} traces ({}): name the file",
            path.display(),
            many.len(),
            many.iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The facts beside a trace, or empty facts when there are none.
pub fn facts_beside(trace: &Path) -> Result<TraceFacts> {
    Ok(TraceFacts::beside(trace)
        .with_context(|| format!("reading the device facts beside {}", trace.display()))?
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traces_per_gpu_facts_reach_the_diagnosis_with_their_profiles() {
        let h200 = |uuid: &str| DeviceFacts {
            name: Some("NVIDIA H200".into()),
            uuid: Some(uuid.into()),
            tdp_w: Some(700.0),
            ..DeviceFacts::default()
        };
        let facts = TraceFacts {
            default: DeviceFacts::default(),
            per_gpu: [(0, h200("GPU-a")), (1, h200("GPU-b"))].into(),
        };
        let args = PipelineArgs {
            tdp_w: None,
            window_s: 2.0,
            profile: None,
        };
        let pipeline = args.pipeline_for_trace(&facts).expect("pipeline");
        assert_eq!(pipeline.diagnoser().facts(1).uuid.as_deref(), Some("GPU-b"));
        assert!(
            pipeline.diagnoser().profile(1).is_some(),
            "the built-in H200 profile, found by model"
        );
        let spec = pipeline
            .diagnoser()
            .facts(1)
            .spec
            .clone()
            .expect("resolved");
        assert_eq!(spec.sku.as_deref(), Some("H200 SXM"));
    }

    /// A model in the table but not calibrated gets baselines scaled from its own entry; one in
    /// no entry gets none (not a neighbour's), and its facts say it is unknown.
    #[test]
    fn an_unknown_model_gets_no_spec_scaled_baselines() {
        let gpu = |name: &str, tdp_w: f64| DeviceFacts {
            name: Some(name.into()),
            tdp_w: Some(tdp_w),
            ..DeviceFacts::default()
        };
        let args = PipelineArgs {
            tdp_w: None,
            window_s: 2.0,
            profile: None,
        };
        let pipeline = args
            .pipeline_for_live(vec![
                (0, gpu("NVIDIA L40", 300.0)),
                (1, gpu("NVIDIA RTX A1000", 50.0)),
                (2, DeviceFacts::default()),
            ])
            .expect("pipeline");
        let d = pipeline.diagnoser();
        let l40 = d.profile(0).expect("scaled from the L40's entry");
        assert!(l40.origin.contains("of the L40 (300 W)"), "{}", l40.origin);
        assert!((l40.idle_w - 300.0 * 79.0 / 700.0).abs() < 1e-9);
        assert_eq!(d.profile(1), None, "nothing scaled from the A100's 400 W");
        let spec = d.facts(1).spec.clone().expect("resolved");
        assert_eq!(spec.sku, None);
        assert_eq!(
            spec.unknown_note().as_deref(),
            Some(
                "model not in gpuslack's table: no spec-scaled figures; TDP 50 W as NVML reads it"
            )
        );
        assert_eq!(d.facts(2).spec, None, "no model name: nothing looked up");
    }
}
