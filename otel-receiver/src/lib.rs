//! gpuslack's pipeline: **source → window → efficiency + diagnosis → exporters**.
//!
//! Everything here after the source is pure: it takes [`Sample`]s and returns reports, so it is
//! tested on recorded real traces. See `docs/ARCHITECTURE.md` for the flow of a sample.

pub mod agent;
pub mod attribution;
mod causes;
pub mod device;
pub mod diagnosis;
pub mod doctor;
pub mod efficiency;
pub mod export;
pub mod files;
pub mod fleet;
pub mod hw_health;
pub mod pipeline;
pub mod report;
pub mod sample;
pub mod score;
pub mod source;
pub mod spec;
pub mod stop;
pub mod text;
pub mod thinned;
pub mod trace;
pub mod usage;
pub mod window;

pub use agent::{Agent, AgentOptions, Exporter};
pub use diagnosis::{Class, Diagnoser, Thresholds, WindowReport};
pub use pipeline::Pipeline;
pub use sample::{Metric, Sample};
