//! The PromQL the reports send. Kept in one place, and as plain strings, so that a reader can
//! paste any of them into Grafana and get the same numbers.
//!
//! **How much a counter rose over the range.** `increase(c[R])` misses what a series had at its
//! first scrape (a job that started inside the range: up to one export interval, 10 s, of its
//! time) and extrapolates the ends, so it is off by a few percent on short ranges. The reports
//! therefore take, per series, its last value in the range minus its value at the range's start
//! (0 for a series born inside it): exact while the agent did not restart. A series that reset
//! in the range (an agent restart) falls back to `increase`, which handles resets.

/// The GPU-seconds counter.
pub const TIME: &str = "gpuslack_diagnosis_time_seconds_total";
/// The joules counter: the owner's energy (`hw.energy`, a series per owner in every metric
/// set), split over its verdicts by their GPU time where the report needs it per verdict (the
/// lean set has no energy per verdict; `fleet/build.rs`, `by_key`).
pub const ENERGY: &str = "hw_energy_joules_total";
/// The verdict gauge: 1 for the current verdict.
pub const RATIO: &str = "gpuslack_diagnosis_ratio";
/// The per-GPU job info series (one per GPU, its current owner's job), where exported.
pub const JOB_INFO: &str = "gpuslack_job_info";

/// The hourly rise of [`TIME`] by job, team, user and verdict
/// (deploy/prometheus/gpuslack-fleet-rules.yml), for `fleet --from-rules`.
pub const TIME_RULE: &str = "gpuslack:diagnosis_time_seconds:rise1h";
/// The hourly rise of [`ENERGY`] by job, team and user.
pub const ENERGY_RULE: &str = "gpuslack:energy_joules:rise1h";

/// `sum by (labels) (sum_over_time(rule[range]))`: the hourly rises telescope, so their sum
/// over the range is the range's rise.
pub fn sum_rule(rule: &str, by: &[&str], range_s: f64) -> String {
    format!(
        "sum by ({}) (sum_over_time({rule}[{}]))",
        by.join(", "),
        range(range_s)
    )
}

/// A `[…]` range selector for `range_s` seconds.
pub fn range(range_s: f64) -> String {
    format!("{}s", range_s.round().max(1.0) as u64)
}

/// How much each series of `selector` rose over the `range_s` seconds up to the query time,
/// exactly where it did not reset (see the module's documentation).
pub fn rise(selector: &str, range_s: f64) -> String {
    let r = range(range_s);
    let exact = format!(
        "(last_over_time({selector}[{r}]) - (last_over_time({selector}[5m] offset {r}) or last_over_time({selector}[{r}]) * 0))"
    );
    format!("(({exact} and (resets({selector}[{r}]) == 0)) or increase({selector}[{r}]))")
}

/// `sum by (labels) (rise(selector))`.
pub fn sum_rise(selector: &str, by: &[&str], range_s: f64) -> String {
    format!("sum by ({}) ({})", by.join(", "), rise(selector, range_s))
}

/// `metric{gpuslack_job_id="job"}`, the job's value escaped for PromQL's double quotes.
pub fn of_job(metric: &str, job: &str) -> String {
    format!("{metric}{{{}}}", job_matcher(job))
}

/// `gpuslack_job_id="job"`, the job's value escaped for PromQL's double quotes.
fn job_matcher(job: &str) -> String {
    let escaped = job.replace('\\', "\\\\").replace('"', "\\\"");
    format!("gpuslack_job_id=\"{escaped}\"")
}

/// A gauge's series of the GPUs a process of `job` held: a gauge names its GPU, never its owner
/// (docs/EXPORT.md, "Series budget"), so the job is its GPU's info series' while it ran there,
/// matched on `instance, hw_id` at each evaluation (each step of a range query). Only the GPU's
/// latest info series counts: without staleness markers (remote write) a finished job's lingers
/// 5 minutes beside the next one's, and would claim the next job's verdicts.
pub fn gauge_of_job(gauge: &str, job: &str) -> String {
    format!(
        "({gauge} and on (instance, hw_id) (topk by (instance, hw_id) (1, timestamp({JOB_INFO})) and on (instance, hw_id, gpuslack_job_id, gpuslack_job_state) {JOB_INFO}{{{},gpuslack_job_state=\"running\"}}))",
        job_matcher(job)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gauge_joins_its_job_through_the_info_series() {
        assert_eq!(
            gauge_of_job(RATIO, "slurm:7"),
            r#"(gpuslack_diagnosis_ratio and on (instance, hw_id) (topk by (instance, hw_id) (1, timestamp(gpuslack_job_info)) and on (instance, hw_id, gpuslack_job_id, gpuslack_job_state) gpuslack_job_info{gpuslack_job_id="slurm:7",gpuslack_job_state="running"}))"#
        );
        // A brace in the job's name is inside its quotes: the state joins the selector.
        assert_eq!(
            gauge_of_job(RATIO, "a}b"),
            r#"(gpuslack_diagnosis_ratio and on (instance, hw_id) (topk by (instance, hw_id) (1, timestamp(gpuslack_job_info)) and on (instance, hw_id, gpuslack_job_id, gpuslack_job_state) gpuslack_job_info{gpuslack_job_id="a}b",gpuslack_job_state="running"}))"#
        );
    }

    #[test]
    fn a_job_id_cannot_break_out_of_its_quotes() {
        assert_eq!(
            of_job(TIME, r#"slurm:1"} or up{x="\"#),
            r#"gpuslack_diagnosis_time_seconds_total{gpuslack_job_id="slurm:1\"} or up{x=\"\\"}"#
        );
    }

    #[test]
    fn the_rise_falls_back_to_increase_only_where_a_series_reset() {
        let q = rise(TIME, 3600.0);
        assert!(q.contains("last_over_time(gpuslack_diagnosis_time_seconds_total[3600s])"));
        assert!(q.contains("offset 3600s"));
        assert!(q.contains("resets(gpuslack_diagnosis_time_seconds_total[3600s]) == 0"));
        assert!(q.ends_with("or increase(gpuslack_diagnosis_time_seconds_total[3600s]))"));
    }
}
