//! The profile file (TOML): one `[[gpu]]` table per GPU, keyed by UUID, carrying the model,
//! driver, limits, date, the power baselines and the per-workload figures they came from.
//! Built-in profiles for known models (`profiles/*.toml`) stand in for a GPU without its own.

use std::path::Path;

use gpuslack_receiver::device::PowerProfile;
use gpuslack_receiver::files::{self, Input};
use serde::{Deserialize, Serialize};

use crate::phases::PhaseStats;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuProfile {
    pub uuid: Option<String>,
    pub model: Option<String>,
    pub driver: Option<String>,
    /// When it was measured (UTC date).
    pub date: String,
    /// What it was measured from: "live calibration" or "recording `<dir>`".
    pub source: String,
    pub tdp_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub idle_w: f64,
    pub held_idle_w: Option<f64>,
    pub tiny_w: Option<f64>,
    pub pcie_w: Option<f64>,
    /// Every SM busy on a random gather over a table far larger than L2, no unit near its peak
    /// (the latency workload's `gather_random`): what a latency-bound GPU draws. Absent from
    /// profiles made before the latency workloads, which still load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_w: Option<f64>,
    pub memory_w: Option<f64>,
    pub compute_fp32_w: Option<f64>,
    pub compute_tensor_w: Option<f64>,
    /// Each workload's figures, as measured.
    #[serde(default)]
    pub workloads: Vec<PhaseStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    #[serde(default)]
    pub gpu: Vec<GpuProfile>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Unreadable, not a regular file, or past its cap (the error names the file and cap).
    #[error(transparent)]
    Read(#[from] files::ReadError),
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("profile has no `{0}` baseline: the calibration did not measure it")]
    Missing(&'static str),
}

/// The built-in profiles, measured on real GPUs (see each file's `source`).
const BUILT_IN: &[(&str, &str)] = &[("profiles/h200.toml", include_str!("../profiles/h200.toml"))];

impl ProfileFile {
    pub fn load(path: &Path) -> Result<ProfileFile, ProfileError> {
        let shown = path.display().to_string();
        // Bounded and a regular file only: `--profile /dev/zero` took 7.1 GB.
        let text = files::read_text(path, Input::Profile)?;
        ProfileFile::parse(&text, &shown)
    }

    pub fn parse(text: &str, origin: &str) -> Result<ProfileFile, ProfileError> {
        let file: ProfileFile = toml::from_str(text).map_err(|e| ProfileError::Parse {
            path: origin.to_string(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
        for (i, p) in file.gpu.iter().enumerate() {
            p.check().map_err(|message| ProfileError::Parse {
                path: origin.to_string(),
                message: format!(
                    "gpu[{i}] ({}): {message}",
                    p.uuid
                        .as_deref()
                        .or(p.model.as_deref())
                        .unwrap_or("no UUID")
                ),
            })?;
        }
        Ok(file)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Every built-in profile.
    pub fn built_in() -> ProfileFile {
        let mut all = ProfileFile::default();
        for (name, text) in BUILT_IN {
            match ProfileFile::parse(text, name) {
                Ok(f) => all.gpu.extend(f.gpu),
                Err(e) => tracing_free_warning(&e.to_string()),
            }
        }
        all
    }

    /// This GPU's own profile by UUID, else the first one for its model.
    pub fn find(&self, uuid: Option<&str>, model: Option<&str>) -> Option<&GpuProfile> {
        uuid.and_then(|u| self.gpu.iter().find(|p| p.uuid.as_deref() == Some(u)))
            .or_else(|| {
                model.and_then(|m| {
                    self.gpu
                        .iter()
                        .find(|p| p.uuid.is_none() && p.model.as_deref() == Some(m))
                })
            })
    }
}

/// The built-in profiles are compiled in and tested; a parse failure is a build defect, shown
/// on stderr rather than hidden.
fn tracing_free_warning(message: &str) {
    use std::io::Write as _;
    // Not `eprintln!`, which panics when stderr is a pipe whose reader went away.
    let _ = writeln!(
        std::io::stderr().lock(),
        "gpuslack: built-in profile unusable: {message}"
    );
}

impl GpuProfile {
    /// The index of the GPU the profile was measured on, from its workloads; `None` for a
    /// model profile without any.
    pub fn gpu_index(&self) -> Option<u32> {
        self.workloads.first().map(|w| w.gpu)
    }

    /// Refuses baselines no GPU draws (NaN, infinite, not positive, over 10 kW): a profile
    /// the diagnosis would divide by must hold real numbers.
    fn check(&self) -> Result<(), String> {
        let fields = [
            ("idle_w", Some(self.idle_w)),
            ("held_idle_w", self.held_idle_w),
            ("tiny_w", self.tiny_w),
            ("pcie_w", self.pcie_w),
            ("latency_w", self.latency_w),
            ("memory_w", self.memory_w),
            ("compute_fp32_w", self.compute_fp32_w),
            ("compute_tensor_w", self.compute_tensor_w),
            ("tdp_w", self.tdp_w),
            ("power_limit_w", self.power_limit_w),
        ];
        for (name, value) in fields {
            if let Some(v) = value {
                if !(v.is_finite() && v > 0.0 && v <= 10_000.0) {
                    return Err(format!(
                        "`{name}` = {v} is not a plausible power (above 0, at most 10000 W)"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every power baseline by its display name, in order from idle to compute.
    pub fn baselines(&self) -> [(&'static str, Option<f64>); 8] {
        [
            ("bare idle", Some(self.idle_w)),
            ("context held", self.held_idle_w),
            ("tiny kernels", self.tiny_w),
            ("PCIe copies", self.pcie_w),
            ("latency-bound", self.latency_w),
            ("memory-bound", self.memory_w),
            ("compute FP32", self.compute_fp32_w),
            ("compute tensor", self.compute_tensor_w),
        ]
    }

    /// The baselines the diagnosis uses. Needs every level; a partial calibration is refused.
    /// The latency baseline is not among them: it is measured and validated, for the report.
    pub fn power_profile(&self) -> Result<PowerProfile, ProfileError> {
        let origin = match (&self.uuid, &self.model) {
            (Some(uuid), _) => format!("calibrated {uuid} on {}", self.date),
            (None, Some(model)) => format!("built-in {model} profile"),
            (None, None) => format!("profile from {}", self.source),
        };
        Ok(PowerProfile {
            idle_w: self.idle_w,
            held_idle_w: self
                .held_idle_w
                .ok_or(ProfileError::Missing("held_idle_w"))?,
            tiny_w: self.tiny_w.ok_or(ProfileError::Missing("tiny_w"))?,
            pcie_w: self.pcie_w.ok_or(ProfileError::Missing("pcie_w"))?,
            memory_w: self.memory_w.ok_or(ProfileError::Missing("memory_w"))?,
            compute_fp32_w: self
                .compute_fp32_w
                .ok_or(ProfileError::Missing("compute_fp32_w"))?,
            compute_tensor_w: self
                .compute_tensor_w
                .ok_or(ProfileError::Missing("compute_tensor_w"))?,
            origin,
        })
    }
}

/// The phase whose power is the latency baseline: the random gather.
pub const LATENCY_BASELINE_PHASE: &str = "latency_gather";

/// What a phase measured, by its name (the names `gpuslack calibrate` uses, and those of the
/// recorded H200 sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Idle,
    HeldIdle,
    Tiny,
    Pcie,
    Latency,
    Memory,
    ComputeFp32,
    ComputeTensor,
}

pub fn role(phase: &str) -> Option<Role> {
    Some(match phase {
        "idle" | "bare_idle" => Role::Idle,
        "idle_held" | "held_idle" => Role::HeldIdle,
        "tiny" | "tiny_graph" => Role::Tiny,
        "pcie" | "h2d_pcie" | "h2d_pinned" => Role::Pcie,
        LATENCY_BASELINE_PHASE | "random_gather" => Role::Latency,
        "memory" | "membound_copy" | "device_copy" => Role::Memory,
        "compute_fp32" | "fp32_fma" => Role::ComputeFp32,
        "compute_tensor" | "compute_bf16" | "matmul_bf16" | "bf16_gemm" => Role::ComputeTensor,
        _ => return None,
    })
}

/// Builds a profile from per-phase figures of one GPU. `held_idle_w` comes from a held-idle
/// phase, else from the quietest gap between workloads (a process held the GPU there).
pub fn derive(
    stats: &[PhaseStats],
    gaps: &[PhaseStats],
    meta: ProfileMeta,
) -> Result<GpuProfile, ProfileError> {
    let power = |r: Role| {
        stats
            .iter()
            .find(|s| role(&s.name) == Some(r))
            .and_then(|s| s.power_w)
    };
    let idle_w = power(Role::Idle).ok_or(ProfileError::Missing("idle_w"))?;
    let held_from_gaps = gaps
        .iter()
        .filter(|g| g.util_pct.is_some_and(|u| u < 1.0) && g.sm_pct.is_none_or(|s| s < 0.5))
        .filter_map(|g| g.power_w)
        .filter(|w| *w > idle_w + 5.0)
        .reduce(f64::min);
    Ok(GpuProfile {
        uuid: meta.uuid,
        model: meta.model,
        driver: meta.driver,
        date: meta.date,
        source: meta.source,
        tdp_w: meta.tdp_w,
        power_limit_w: meta.power_limit_w,
        idle_w,
        held_idle_w: power(Role::HeldIdle).or(held_from_gaps),
        tiny_w: power(Role::Tiny),
        pcie_w: power(Role::Pcie),
        latency_w: power(Role::Latency),
        memory_w: power(Role::Memory),
        compute_fp32_w: power(Role::ComputeFp32),
        compute_tensor_w: power(Role::ComputeTensor),
        workloads: stats.to_vec(),
    })
}

/// Who and when, for a derived profile.
#[derive(Debug, Clone, Default)]
pub struct ProfileMeta {
    pub uuid: Option<String>,
    pub model: Option<String>,
    pub driver: Option<String>,
    pub date: String,
    pub source: String,
    pub tdp_w: Option<f64>,
    pub power_limit_w: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_h200_profile_is_complete() {
        let built_in = ProfileFile::built_in();
        let h200 = built_in
            .find(Some("GPU-unknown"), Some("NVIDIA H200"))
            .expect("H200 built in");
        let p = h200.power_profile().expect("complete");
        assert!((p.idle_w - 78.0).abs() < 2.0 && (p.memory_w - 583.0).abs() < 12.0);
        assert!(p.calibrated_efficiency(p.idle_w) == Some(0.0));
    }

    #[test]
    fn a_gpus_own_profile_wins_over_its_models() {
        let mut file = ProfileFile::built_in();
        let mut own = file.gpu[0].clone();
        own.uuid = Some("GPU-own".into());
        own.idle_w = 80.0;
        file.gpu.push(own);
        assert_eq!(
            file.find(Some("GPU-own"), Some("NVIDIA H200"))
                .map(|p| p.idle_w),
            Some(80.0)
        );
        assert_ne!(
            file.find(Some("GPU-other"), Some("NVIDIA H200"))
                .map(|p| p.idle_w),
            Some(80.0)
        );
        assert!(file.find(None, Some("Tesla T4")).is_none());
    }

    #[test]
    fn a_bad_profile_file_names_the_problem() {
        let err = ProfileFile::parse("[[gpu]]\nidle_w = \"cold\"\n", "p.toml").expect_err("bad");
        assert!(err.to_string().starts_with("p.toml: "), "{err}");
    }
}
