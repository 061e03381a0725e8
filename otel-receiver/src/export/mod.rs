//! Exporters: OTLP (metrics and diagnosis-change logs) and a Prometheus text endpoint, both
//! fed from one [`ExportState`] that the pipeline updates window by window. What is exported,
//! with names and units, lives in [`catalogue`]; the values, in [`points`].

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

pub mod catalogue;
pub mod config;
mod connections;
pub mod dcgm;
pub mod delivery;
pub mod endpoint;
pub mod otlp;
pub mod point;
pub mod points;
pub mod prometheus;
pub mod prometheus_labels;
pub mod queue;
pub mod secret;
pub mod selection;
pub mod sender;
pub mod state;

pub use state::{ClassChange, ExportState, GpuView};
