//! The fleet and job reports: what `gpuslack fleet` prints, read from any Prometheus-compatible
//! query API (Prometheus, Thanos, Mimir, VictoriaMetrics) that scrapes the agents. Nothing here
//! aggregates on a server of ours: the engine sums the per-owner counters
//! (`gpuslack_diagnosis_time_seconds_total`, `gpuslack_diagnosis_energy_joules_total`) by job,
//! and this module turns the sums into GPU-hours, kWh, money, causes and remedies.
//!
//! [`client`] speaks the HTTP API, [`promql`] writes the queries, [`build`] the reports and
//! [`render`] prints them (text, a terminal strip per rank, an HTML page with an SVG timeline
//! per rank drawn by `report::timeline`).

pub mod build;
pub mod client;
pub mod promql;
pub mod render;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::diagnosis::Class;

pub use build::{fleet_report, job_report, Options};
pub use client::Prometheus;

/// Why a report could not be made. Each variant is one exit code of `gpuslack fleet`
/// ([`FleetError::exit_code`]), so that a script (the Slurm epilog) can tell a job that left no
/// series from a Prometheus that is down.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The URL given is not one an HTTP client can use.
    #[error("--prometheus {url}: not a usable URL: {reason}")]
    BadUrl {
        /// As given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Nothing answered (refused, DNS, timeout, TLS).
    #[error("{url}: no answer: {reason}")]
    Unreachable {
        /// The API's base URL.
        url: String,
        /// The client's error and causes.
        reason: String,
    },
    /// Something answered, but not the Prometheus query API.
    #[error("{url}: not a Prometheus query API: {reason}")]
    NotPrometheus {
        /// The API's base URL.
        url: String,
        /// What came back instead.
        reason: String,
    },
    /// The API refused a query (bad PromQL, too many samples, a timeout on its side).
    #[error("the query API refused a query ({kind}: {message}): {query}")]
    Query {
        /// The PromQL sent.
        query: String,
        /// Prometheus' `errorType`.
        kind: String,
        /// Prometheus' `error`.
        message: String,
    },
    /// An answer larger than the cap on what one is read: refused before it is held.
    #[error("{url}: an answer larger than {cap_mib} MiB, refused before it is held (raise the cap with --max-answer-mib, or narrow the report: --since, --from-rules)")]
    TooLarge {
        /// The API's base URL.
        url: String,
        /// The cap, MiB.
        cap_mib: f64,
    },
    /// The API answered, but holds no gpuslack series for what was asked.
    #[error("{what}")]
    NoData {
        /// What was looked for, and where.
        what: String,
    },
    /// No `--prometheus` was given: there is nothing to read the fleet from.
    #[error("--prometheus URL is required: the query API's base URL, e.g. http://prometheus:9090")]
    NoUrl,
    /// `--since` does not parse.
    #[error("--since {0:?}: not a duration such as 90s, 30m, 12h, 7d or 2w")]
    BadDuration(String),
}

impl FleetError {
    /// The process exit code: 1 no series, 2 a usage error (bad URL or duration, as clap's),
    /// 75 unreachable (EX_TEMPFAIL: try again later), 76 not Prometheus, a refused query or an answer past
    /// its cap (EX_PROTOCOL).
    pub fn exit_code(&self) -> u8 {
        match self {
            FleetError::NoData { .. } => 1,
            FleetError::BadUrl { .. } | FleetError::NoUrl | FleetError::BadDuration(_) => 2,
            // sysexits' EX_TEMPFAIL: try again later. Not 69, which means "no GPU" to every
            // other command (README, docs/OUTPUT.md).
            FleetError::Unreachable { .. } => 75,
            FleetError::NotPrometheus { .. }
            | FleetError::Query { .. }
            | FleetError::TooLarge { .. } => 76,
        }
    }
}

/// Parses a Prometheus-style duration (`90s`, `30m`, `12h`, `7d`, `2w`) into seconds.
pub fn parse_duration_s(text: &str) -> Result<f64, FleetError> {
    let bad = || FleetError::BadDuration(text.to_string());
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let n: f64 = number.parse().map_err(|_| bad())?;
    let unit_s = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 604_800.0,
        _ => return Err(bad()),
    };
    if n <= 0.0 {
        return Err(bad());
    }
    Ok(n * unit_s)
}

/// GPU time and energy in one verdict.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct VerdictTotal {
    /// GPU-seconds.
    pub seconds: f64,
    /// The same in GPU-hours.
    pub gpu_hours: f64,
    /// Joules.
    pub energy_j: f64,
    /// The same in kWh.
    pub energy_kwh: f64,
    /// Whether the verdict is slack (`diagnosis::Class::is_healthy` is false), as `diagnose`
    /// counts it.
    pub slack: bool,
}

/// Time and energy per verdict, by class name.
pub type ByVerdict = BTreeMap<String, VerdictTotal>;

/// Adds `seconds` and `joules` of `class` to `by`.
fn add(by: &mut ByVerdict, class: &str, seconds: f64, joules: f64) {
    let entry = by.entry(class.to_string()).or_insert_with(|| VerdictTotal {
        slack: Class::from_name(class).is_some_and(|c| !c.is_healthy()),
        ..VerdictTotal::default()
    });
    entry.seconds += seconds;
    entry.gpu_hours = entry.seconds / 3600.0;
    entry.energy_j += joules;
    entry.energy_kwh = entry.energy_j / 3.6e6;
}

/// The totals of a [`ByVerdict`]: (all seconds, slack seconds, slack joules).
fn totals(by: &ByVerdict) -> (f64, f64, f64) {
    // `+ 0.0`: the sum of no floats is -0.0, which prints as "-0.00" and "-0%".
    let all = by.values().map(|v| v.seconds).sum::<f64>() + 0.0;
    let slack = by
        .values()
        .filter(|v| v.slack)
        .map(|v| v.seconds)
        .sum::<f64>()
        + 0.0;
    let slack_j = by
        .values()
        .filter(|v| v.slack)
        .map(|v| v.energy_j)
        .sum::<f64>()
        + 0.0;
    (all, slack, slack_j)
}

/// The slack verdict with the most GPU time, and its remedy.
fn top_cause(by: &ByVerdict) -> Option<(Class, f64)> {
    by.iter()
        .filter(|(_, v)| v.slack && v.seconds > 0.0)
        .filter_map(|(name, v)| Class::from_name(name).map(|c| (c, v.seconds)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// Prices per GPU-hour and per kWh, either optional: a report without them says GPU-hours and
/// kWh only.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Prices {
    /// Money per GPU-hour.
    pub gpu_hour: Option<f64>,
    /// Money per kWh.
    pub kwh: Option<f64>,
}

impl Prices {
    /// The cost of `gpu_hours` and `kwh`; `None` without any price.
    pub fn cost(&self, gpu_hours: f64, kwh: f64) -> Option<f64> {
        if self.gpu_hour.is_none() && self.kwh.is_none() {
            return None;
        }
        Some(gpu_hours * self.gpu_hour.unwrap_or(0.0) + kwh * self.kwh.unwrap_or(0.0))
    }
}

/// The funnel, each stage a subset of the one before, in GPU-hours.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Funnel {
    /// All GPU time the agents reported in the range, owned or not.
    pub observed_gpu_hours: f64,
    /// GPU time whose series carry a `gpuslack_job_id`: a job held the GPU.
    pub allocated_gpu_hours: f64,
    /// Allocated time not `idle` or `idle_held`: something ran.
    pub active_gpu_hours: f64,
    /// Allocated time `compute_bound` or `memory_bound`: work at the hardware's pace.
    pub effective_gpu_hours: f64,
    /// Allocated minus effective: what jobs held and did not use well.
    pub wasted_gpu_hours: f64,
    /// The cost of the wasted hours and their energy, with prices.
    pub wasted_cost: Option<f64>,
}

/// One job, team or user in a top list.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Owner {
    /// The job (`slurm:4711`), team or user.
    pub name: String,
    /// GPU-hours it held.
    pub gpu_hours: f64,
    /// Of which slack (by `diagnose`'s definition).
    pub slack_gpu_hours: f64,
    /// slack / held.
    pub slack_share: f64,
    /// Energy of the slack.
    pub slack_kwh: f64,
    /// Cost of the slack, with prices.
    pub slack_cost: Option<f64>,
    /// The slack verdict with the most time.
    pub top_cause: Option<String>,
    /// Its remedy, from `diagnosis::Class::remedy`.
    pub remedy: Option<String>,
    /// Jobs counted (1 for a job).
    pub jobs: usize,
}

impl Owner {
    fn of(name: &str, by: &ByVerdict, prices: &Prices, jobs: usize) -> Owner {
        let (all, slack, slack_j) = totals(by);
        let cause = top_cause(by);
        Owner {
            name: name.to_string(),
            gpu_hours: all / 3600.0,
            slack_gpu_hours: slack / 3600.0,
            slack_share: if all > 0.0 { slack / all } else { 0.0 },
            slack_kwh: slack_j / 3.6e6,
            slack_cost: prices.cost(slack / 3600.0, slack_j / 3.6e6),
            top_cause: cause.map(|(c, _)| c.as_str().to_string()),
            remedy: cause.map(|(c, _)| c.remedy().to_string()),
            jobs,
        }
    }
}

/// The fleet waste report.
#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    /// `gpuslack.fleet.v1`.
    pub schema: &'static str,
    /// The query API read.
    pub prometheus: String,
    /// The range, seconds back from `end`.
    pub since_s: f64,
    /// The range's end (Unix seconds).
    pub end: f64,
    /// The prices used.
    pub prices: Prices,
    /// GPU time and energy per verdict, the whole fleet, owned or not.
    pub time_by_verdict: ByVerdict,
    /// Allocated → active → effective.
    pub funnel: Funnel,
    /// The top jobs by slack GPU-hours.
    pub jobs: Vec<Owner>,
    /// The top teams (Slurm account or Kubernetes namespace).
    pub teams: Vec<Owner>,
    /// The top users (Slurm user or the processes' owner).
    pub users: Vec<Owner>,
    /// Where the teams and users came from.
    pub owners_from: String,
    /// Values the query API answered that no counter can have (NaN, ±Inf, more GPU time than
    /// ten million GPUs hold over the range), left out of every figure.
    pub values_refused: usize,
}

/// One rank (a GPU of one node) of a job.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Rank {
    /// The node: `host_name` from `target_info`, else the scrape `instance`.
    pub node: String,
    /// The scrape target.
    pub instance: String,
    /// The GPU (`hw_id`).
    pub hw_id: String,
    /// `gpuslack_gpu_index`.
    pub gpu_index: String,
    /// `gpuslack_job_rank` from `gpuslack_job_info`, where exported.
    pub rank: Option<String>,
    /// GPU time and energy per verdict.
    pub time_by_verdict: ByVerdict,
    /// All its GPU-seconds in the job.
    pub seconds: f64,
    /// Share of its time in `sync_wait` or `hung`: waiting on its peers.
    pub wait_share: f64,
    /// The verdict at the last step it reported.
    pub last_class: Option<String>,
    /// When it last reported (Unix seconds).
    pub last_seen: Option<f64>,
    /// Verdicts over time: (start, end, class) per stretch.
    pub bands: Vec<(f64, f64, String)>,
}

impl Rank {
    /// "node-a GPU 0 (rank 3)".
    pub fn label(&self) -> String {
        match &self.rank {
            Some(r) => format!("{} GPU {} (rank {r})", self.node, self.gpu_index),
            None => format!("{} GPU {}", self.node, self.gpu_index),
        }
    }
}

/// A hang or a straggler, and who it points at.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Finding {
    /// `hang` or `straggler`.
    pub kind: &'static str,
    /// The ranks that differ from the others (`Rank::label`).
    pub culprits: Vec<String>,
    /// One sentence.
    pub text: String,
}

/// One job across all its nodes.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    /// `gpuslack.fleet.job.v1`.
    pub schema: &'static str,
    /// As the agent names it: `slurm:4711`.
    pub job: String,
    /// The query API read.
    pub prometheus: String,
    /// The range, seconds back from `end`.
    pub since_s: f64,
    /// The range's end (Unix seconds).
    pub end: f64,
    /// The step of the rank timelines (s).
    pub step_s: f64,
    /// Prices used.
    pub prices: Prices,
    /// GPU time and energy per verdict, all ranks.
    pub time_by_verdict: ByVerdict,
    /// All GPU-hours.
    pub gpu_hours: f64,
    /// Slack GPU-hours.
    pub slack_gpu_hours: f64,
    /// slack / all.
    pub slack_share: f64,
    /// Energy of the slack.
    pub slack_kwh: f64,
    /// Its cost, with prices.
    pub slack_cost: Option<f64>,
    /// The slack verdict with the most time.
    pub top_cause: Option<String>,
    /// Its remedy.
    pub remedy: Option<String>,
    /// The hang or straggler, when the series show one.
    pub finding: Option<Finding>,
    /// The ranks, by node then GPU.
    pub ranks: Vec<Rank>,
    /// Values the query API answered that no counter can have, and timeline points outside
    /// the range, left out.
    pub values_refused: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_without_slack_has_zero_not_minus_zero() {
        let mut by = ByVerdict::new();
        add(&mut by, "compute_bound", 3600.0, 1e6);
        let o = Owner::of("slurm:1", &by, &Prices::default(), 1);
        assert_eq!(o.gpu_hours, 1.0);
        assert!(o.slack_gpu_hours.is_sign_positive() && o.slack_share.is_sign_positive());
        assert_eq!(
            format!("{:.2} {:.0}%", o.slack_gpu_hours, o.slack_share * 100.0),
            "0.00 0%"
        );
    }
}
