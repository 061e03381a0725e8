//! What we know about a GPU beyond its samples: its model, its limits and its power baselines.
//! The diagnosis reads power against these; a GPU's own calibrated profile beats the model's
//! built-in one, which beats fractions of the TDP. What each class should draw is the
//! diagnosis's to say (`Class::expected_power_w`): this module knows no class.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::spec::{DeviceSpec, LiveFigures};

/// Static facts about a GPU, from the live device, a trace's `facts.json`, or flags.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceFacts {
    /// The model, as NVML names it (`NVIDIA H200`).
    pub name: Option<String>,
    /// NVML's UUID (`GPU-…`, `MIG-…`): what a profile is found by.
    pub uuid: Option<String>,
    /// The driver version.
    pub driver: Option<String>,
    /// Default power limit (W): the TDP the article's efficiency divides by.
    pub tdp_w: Option<f64>,
    /// Enforced power limit (W), when it differs from the default (a cap).
    pub power_limit_w: Option<f64>,
    /// The range an administrator may set the enforced limit within (`nvidia-smi -pl`), in W:
    /// it tells a cap that can be lifted from a GPU already at its ceiling. This is its floor…
    pub power_limit_min_w: Option<f64>,
    /// …and this its ceiling.
    pub power_limit_max_w: Option<f64>,
    /// The temperature at which the GPU slows its clocks (°C).
    pub temp_slowdown_c: Option<f64>,
    /// Memory size (bytes).
    pub mem_total_bytes: Option<f64>,
    /// `/dev/nvidiaN`'s N (live GPUs only): how GKE's device plugin names a GPU to the kubelet.
    pub minor_number: Option<u32>,
    /// For a MIG instance, the index of the GPU it is carved from: power, clocks and
    /// temperature are that GPU's, not the instance's.
    pub mig_parent: Option<u32>,
    /// The PCI bus id (`00000000:1B:00.0`), the board's serial number and its VBIOS version:
    /// what an SRE quotes to a vendor or finds the board by in the kernel log (`NVRM: Xid
    /// (PCI:0000:1b:00)`). Exported once per GPU, on `gpuslack.gpu.info`, not on every series.
    pub pci_bus_id: Option<String>,
    /// The board's serial number (`nvmlDeviceGetSerial`).
    pub serial: Option<String>,
    /// The VBIOS version (`nvmlDeviceGetVbiosVersion`), exported as `hw.firmware_version`.
    pub vbios: Option<String>,
    /// What NVML reports of the GPU's make-up (memory bus and clock, cores, architecture, GPM):
    /// the live side of its peak figures.
    pub figures: LiveFigures,
    /// Its peak figures, each from NVML or the SKU table, once the model has been looked up
    /// (`gpuslack_calibration::sku::spec_for`); `None` before. `Some` with no `sku`: the model is
    /// not in the table, and nothing is taken from a neighbour's entry.
    pub spec: Option<DeviceSpec>,
}

/// Power levels that separate "nothing runs" from "a context is held" from "real work", in W.
#[derive(Debug, Clone, PartialEq)]
pub struct PowerBaselines {
    /// Bare idle: no process, clocks at their floor.
    pub idle_w: f64,
    /// A process holds a context but runs nothing (~45 W above bare idle on an H200).
    pub held_idle_w: f64,
    /// The most this GPU draws under real work: its power limit, or its calibrated peak.
    pub peak_w: f64,
    /// Where these numbers came from, for the evidence.
    pub origin: Cow<'static, str>,
}

/// A GPU's own power under each kind of load, measured by `gpuslack calibrate` (or built in for
/// a known model). Two H200s of one SKU drew 583 and 660 W on the same copy: baselines are per
/// GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerProfile {
    /// Bare idle: no process, clocks at their floor (W).
    pub idle_w: f64,
    /// A context held, nothing running (W).
    pub held_idle_w: f64,
    /// Tiny kernels in a loop (W).
    pub tiny_w: f64,
    /// Host↔device copies (W).
    pub pcie_w: f64,
    /// The memory-bound workload (W).
    pub memory_w: f64,
    /// The FP32 FMA chain (W).
    pub compute_fp32_w: f64,
    /// The tensor-core GEMM (W).
    pub compute_tensor_w: f64,
    /// "calibrated GPU-… on 2026-11-30", "built-in NVIDIA H200 profile", …
    pub origin: String,
}

impl PowerProfile {
    /// The baselines the rules read, from this GPU's own levels.
    pub fn baselines(&self) -> PowerBaselines {
        PowerBaselines {
            idle_w: self.idle_w,
            held_idle_w: self.held_idle_w,
            peak_w: self.peak_w(),
            origin: Cow::Owned(self.origin.clone()),
        }
    }

    /// The most this GPU drew under real work.
    pub fn peak_w(&self) -> f64 {
        self.compute_tensor_w
            .max(self.compute_fp32_w)
            .max(self.memory_w)
    }

    /// Power placed between this GPU's own bare idle (0) and its compute-bound peak (1).
    pub fn calibrated_efficiency(&self, power_w: f64) -> Option<f64> {
        let span = self.peak_w() - self.idle_w;
        (span > 0.0).then(|| ((power_w - self.idle_w) / span).clamp(0.0, 1.1))
    }
}

impl PowerBaselines {
    /// Fractions of TDP measured on the H200 (78 W idle, 125 W held, of 700 W): the fallback for
    /// a GPU with no profile. Calibration replaces them with the GPU's own numbers.
    pub fn from_tdp(tdp_w: f64) -> Self {
        PowerBaselines {
            idle_w: 0.112 * tdp_w,
            held_idle_w: 0.178 * tdp_w,
            peak_w: tdp_w,
            origin: Cow::Borrowed("fractions of TDP measured on an H200"),
        }
    }

    /// Where `power_w` sits between a held context (0) and this GPU's peak under real work
    /// (1): what the GPU spends on work beyond keeping a context, the stand-in for SM activity
    /// where GPM is missing. On the H200: tiny kernels −0.01, a spinning kernel 0.01, the FP32
    /// FMA chain 0.51, the pipeline seesaw 0.69, a device copy 0.80, the bf16 GEMM 0.98.
    pub fn load(&self, power_w: f64) -> Option<f64> {
        let span = self.peak_w - self.held_idle_w;
        (span > 0.0).then(|| ((power_w - self.held_idle_w) / span).clamp(-0.5, 1.5))
    }

    /// Power above which an otherwise quiet GPU is taken to have a context held.
    pub fn held_threshold_w(&self) -> f64 {
        self.idle_w + 0.4 * (self.held_idle_w - self.idle_w)
    }
}

impl DeviceFacts {
    /// Fractions of the TDP, for a GPU with no profile; `None` without a TDP.
    pub fn baselines(&self) -> Option<PowerBaselines> {
        self.tdp_w.map(PowerBaselines::from_tdp)
    }
}
