//! Reference GPU workloads for gpuslack: each pattern the diagnosis names, reproduced on
//! purpose and measured against the hardware's limits. Kernels are CUDA C compiled with NVRTC
//! at run time for the device's architecture; the tensor-core GEMM goes through cuBLASLt.
//!
//! This crate knows nothing of NVML: the `gpuslack bench` command samples the GPU with the live
//! source while a workload runs and puts the two side by side.

// The workspace's `missing_docs` rule is for the embeddable library (gpuslack-receiver);
// this crate's public items are not all documented yet.
#![allow(missing_docs)]

pub mod accounting;
mod gpu;
pub mod reference;
mod workloads;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

pub use gpu::{check_cublaslt, gpu_count, BenchError, Gpu};
pub use workloads::latency::Sizes as LatencySizes;
pub use workloads::tiny::TinyStep;

/// The reference workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// Tiny kernels: eager, the article's allocate-and-copy form, a CUDA graph, one fused kernel.
    Tiny,
    /// BabelStream copy, scale, add, triad, dot over arrays far larger than L2.
    Memory,
    /// An FP32 FMA chain (non-tensor pipes) and a bf16 tensor-core GEMM (cuBLASLt).
    Compute,
    /// Host→device and device→host copies, pinned and pageable.
    Pcie,
    /// Bursts of real work separated by host waits.
    Starved,
    /// Two GPUs handing data to each other so that each idles while the other works.
    Seesaw,
    /// Every SM busy and no unit near its peak: random gathers, dependent loads, scattered
    /// atomics, an under-filled grid; and their fixes beside them.
    Latency,
}

impl Workload {
    pub const ALL: [Workload; 7] = [
        Workload::Tiny,
        Workload::Memory,
        Workload::Compute,
        Workload::Latency,
        Workload::Pcie,
        Workload::Starved,
        Workload::Seesaw,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Tiny => "tiny",
            Workload::Memory => "memory",
            Workload::Compute => "compute",
            Workload::Pcie => "pcie",
            Workload::Starved => "starved",
            Workload::Seesaw => "seesaw",
            Workload::Latency => "latency",
        }
    }

    pub fn from_name(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }

    /// GPUs the workload needs.
    pub fn gpus_needed(self) -> usize {
        if self == Workload::Seesaw {
            2
        } else {
            1
        }
    }

    /// Runs the workload on `gpus` (the first, or the first two for `seesaw`).
    pub fn run(self, gpus: &[Gpu], options: &Options) -> Result<Vec<Measurement>, BenchError> {
        if gpus.len() < self.gpus_needed() {
            return Err(BenchError::NotEnoughGpus {
                workload: self.name(),
                needed: self.gpus_needed(),
                found: gpus.len(),
            });
        }
        match self {
            Workload::Tiny => workloads::tiny::run(&gpus[0], options),
            Workload::Memory => workloads::memory::run(&gpus[0], options),
            Workload::Compute => workloads::compute::run(&gpus[0], options),
            Workload::Pcie => workloads::pcie::run(&gpus[0], options),
            Workload::Starved => workloads::starved::run(&gpus[0], options),
            Workload::Seesaw => workloads::seesaw::run(&gpus[0], &gpus[1], options),
            Workload::Latency => workloads::latency::run(&gpus[0], options),
        }
    }
}

/// How long and how hard to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Run each measured part for at least this long (for power readings); `None`: a fixed
    /// count, enough for a stable rate.
    pub seconds: Option<f64>,
    /// `starved`: the share of time the GPU gets work (0–1).
    pub duty: f64,
    /// `seesaw`: host wait between hand-offs, in ms.
    pub bubble_ms: f64,
    /// `latency`: the DRAM peak (GB/s) that achieved bandwidth is a share of: the spec table's
    /// (this crate knows no NVML). `None`: the figures stay in GB/s.
    pub dram_peak_gb_s: Option<f64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seconds: None,
            duty: 0.2,
            bubble_ms: 20.0,
            dram_peak_gb_s: None,
        }
    }
}

impl Options {
    /// Repetitions to run: `count` when no duration is set, else as many as fit, at least one.
    fn reps_for(&self, count: u64, one_rep: Duration) -> u64 {
        match self.seconds {
            None => count,
            Some(s) => {
                let per = one_rep.as_secs_f64().max(1e-6);
                ((s / per).ceil() as u64).max(1)
            }
        }
    }
}

/// One measured figure of a workload.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    pub workload: &'static str,
    pub variant: String,
    pub gpu: usize,
    /// The headline figure, in `unit`.
    pub value: f64,
    pub unit: &'static str,
    /// Supporting figures (per-kernel µs, median, bytes…).
    pub details: BTreeMap<&'static str, f64>,
    /// How the result was checked against the CPU reference, and the error found.
    pub check: String,
    /// When the measured part ran, unix seconds: live samples in this span describe it.
    pub started: f64,
    pub ended: f64,
}

pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Builds measurements for one workload run, stamping times.
pub(crate) struct Recorder {
    workload: &'static str,
    gpu: usize,
    started: f64,
    ended: Option<f64>,
}

impl Recorder {
    pub(crate) fn start(workload: &'static str, gpu: usize) -> Recorder {
        Recorder {
            workload,
            gpu,
            started: unix_now(),
            ended: None,
        }
    }

    /// Marks the end of the measured part, before result checks keep the host busy and the GPU
    /// idle: live samples after this do not describe the workload.
    /// Starts the measured part again from now: set-up and warm-up since `start` are not in it.
    pub(crate) fn restart(&mut self) {
        self.started = unix_now();
        self.ended = None;
    }

    pub(crate) fn stop(&mut self) {
        self.ended.get_or_insert_with(unix_now);
    }

    /// A measurement of the part that ran since `start`.
    pub(crate) fn measure(
        &self,
        variant: impl Into<String>,
        value: f64,
        unit: &'static str,
        details: &[(&'static str, f64)],
        check: String,
    ) -> Measurement {
        Measurement {
            workload: self.workload,
            variant: variant.into(),
            gpu: self.gpu,
            value,
            unit,
            details: details.iter().copied().collect(),
            check,
            started: self.started,
            ended: self.ended.unwrap_or_else(unix_now),
        }
    }
}

/// Fails a workload whose worst error is above `tolerance`.
pub(crate) fn verify(
    workload: &'static str,
    what: &str,
    worst: f64,
    tolerance: f64,
    samples: usize,
) -> Result<String, BenchError> {
    if worst.is_nan() || worst > tolerance {
        return Err(BenchError::WrongResult {
            workload,
            detail: format!("{what}: worst relative error {worst:.3e} over {samples} values, allowed {tolerance:.1e}"),
        });
    }
    Ok(format!(
        "{what}: max rel err {worst:.1e} over {samples} values vs CPU"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_seesaw_needs_two_gpus() {
        for w in Workload::ALL {
            assert_eq!(Workload::from_name(w.name()), Some(w));
        }
        assert_eq!(Workload::Seesaw.gpus_needed(), 2);
        assert_eq!(Workload::Tiny.gpus_needed(), 1);
        assert!(Workload::Seesaw.run(&[], &Options::default()).is_err());
    }

    #[test]
    fn repetitions_follow_count_or_duration() {
        let fixed = Options::default();
        assert_eq!(fixed.reps_for(20, Duration::from_millis(5)), 20);
        let timed = Options {
            seconds: Some(2.0),
            ..Options::default()
        };
        assert_eq!(timed.reps_for(20, Duration::from_millis(5)), 400);
        assert_eq!(timed.reps_for(20, Duration::from_secs(10)), 1);
    }

    #[test]
    fn verification_fails_above_tolerance_and_on_nan() {
        assert!(verify("tiny", "x", 1e-7, 1e-6, 100).is_ok());
        assert!(verify("tiny", "x", 1e-3, 1e-6, 100).is_err());
        assert!(verify("tiny", "x", f64::NAN, 1e-6, 100).is_err());
    }
}
