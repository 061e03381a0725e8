//! Ways to show window reports to people and programs: JSON lines (a stable contract), a
//! compact table, and the human diagnosis report of `gpuslack diagnose`.

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

mod human;
mod jsonl;
mod table;
mod time;

pub use human::{cost_of_slack, duration, energy, HumanReport, SourceLabel, Spent};
pub use jsonl::{WindowRecord, JSONL_SCHEMA};
pub use table::TableWriter;
pub use time::utc_hms;
