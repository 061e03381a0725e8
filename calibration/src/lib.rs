//! Calibration: each GPU's own power baselines, measured under known loads, so that the
//! diagnosis and the calibrated efficiency judge a GPU against itself rather than a fixed share
//! of TDP. This crate holds the math, the profile format, the validation of the thresholds and
//! the report; `gpuslack calibrate` runs the workloads (bench-kernels) and samples (the live
//! source), and `--from-recording` runs the same math on a recorded session.

// The workspace's `missing_docs` rule is for the embeddable library (gpuslack-receiver);
// this crate's public items are not all documented yet.
#![allow(missing_docs)]

pub mod compare;
pub mod phases;
pub mod profile;
pub mod report;
pub mod session;
pub mod sku;
pub mod validate;

pub use phases::{PhaseSpan, PhaseStats};
pub use profile::{GpuProfile, ProfileFile};
