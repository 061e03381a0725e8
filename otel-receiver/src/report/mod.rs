//! Ways to show window reports to people and programs: JSON lines (a stable contract), a
//! compact table, the human diagnosis report of `gpuslack diagnose` (text, JSON, HTML), and the
//! pieces it is built from that other reports reuse: the timeline (SVG, terminal strip), the
//! HTML page, the health summary.

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

mod diagnose;
mod first_screen;
mod health;
mod html;
mod jsonl;
mod ranking;
mod table;
mod time;
mod timeline;
mod units;
mod words;

pub use diagnose::{
    is_slack, pod_label, process_label, BottomLine, DiagnoseDocument, HumanReport, Prices, Remedy,
    RenderOptions, SourceLabel, Spent, REPORT_SCHEMA,
};
pub use first_screen::{SCREEN_COLUMNS, SCREEN_LINES};
pub use health::{Finding, Health};
pub use html::HtmlPage;
pub use jsonl::{WindowRecord, JSONL_SCHEMA};
pub use ranking::Severity;
pub use table::TableWriter;
pub use time::{utc_date, utc_hms, utc_stamp};
pub use timeline::{class_colour, escape, Band, Point, Timeline};
pub use units::{duration, energy, gpu_hours};
pub use words::{change, label};
