//! The reports from the query API's answers: a handful of instant queries (the counters' rise
//! summed by job, class and the owner labels; the job info; the hosts) and, for a job, one
//! range query of the verdict gauge for the timelines. Teams and users are joined to jobs here,
//! by `gpuslack_job_id`, rather than in PromQL: `gpuslack_job_info` names a GPU's current owner,
//! and over a week a GPU has many, so a `* on (hw_id, instance) group_left` join would give
//! every past job the team of the GPU's last one.

use std::collections::{BTreeMap, HashMap};

use super::client::{Prometheus, Sample};
use super::promql::{self, ENERGY, JOB_INFO, RATIO, TIME};
use super::{
    add, top_cause, totals, ByVerdict, Finding, FleetError, FleetReport, Funnel, JobReport, Owner,
    Prices, Rank,
};
use crate::diagnosis::Class;

/// What a report covers and how it prices.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Seconds back from `end`.
    pub since_s: f64,
    /// The range's end (Unix seconds).
    pub end: f64,
    /// Prices.
    pub prices: Prices,
    /// How many jobs, teams and users each top list keeps.
    pub top: usize,
    /// Read the hourly recording rules (deploy/prometheus/gpuslack-fleet-rules.yml) instead of
    /// every GPU's raw counters: the fleet report at the size of thousands of nodes.
    pub from_rules: bool,
}

/// Verdicts that wait on something outside the GPU's own work: a peer rank, mostly.
fn waiting(class: &str) -> bool {
    matches!(class, "sync_wait" | "hung")
}

/// More GPUs than any fleet has, in one series: a rise of GPU time larger than this many GPUs
/// hold over the range is no counter's (Prometheus answered `1e300`, or a broken rule).
const MAX_GPUS: f64 = 1e7;

/// More power than any GPU draws (W), for the same bound on energy.
const MAX_GPU_POWER_W: f64 = 1e4;

/// What the query API's values are checked against, and how many were refused.
#[derive(Debug, Clone, Copy, Default)]
struct Believable {
    max_seconds: f64,
    max_joules: f64,
    refused: usize,
}

impl Believable {
    fn over(range_s: f64) -> Self {
        Believable {
            max_seconds: range_s * MAX_GPUS,
            max_joules: range_s * MAX_GPUS * MAX_GPU_POWER_W,
            refused: 0,
        }
    }

    /// `v` where a counter's rise can be it, counted and `None` where not: NaN, ±Inf, or past
    /// `max`. A rise a rounding below 0 (last minus first of equal floats) is 0.
    fn rise(&mut self, v: f64, max: f64) -> Option<f64> {
        if v.is_finite() && v <= max {
            Some(v.max(0.0))
        } else {
            self.refused += 1;
            None
        }
    }
}

/// Joules of each series' class, keyed by `(key(sample), class)`: the energy answer folded as
/// soon as it arrives, and let go. Values no counter can have are left out and counted.
fn joules_by(
    energy: Vec<Sample>,
    check: &mut Believable,
    key: impl Fn(&Sample) -> String,
) -> HashMap<(String, String), f64> {
    let mut joules: HashMap<(String, String), f64> = HashMap::new();
    for s in &energy {
        let Some(j) = check.rise(s.value, check.max_joules) else {
            continue;
        };
        *joules
            .entry((key(s), s.label("gpuslack_diagnosis_class").to_string()))
            .or_default() += j;
    }
    joules
}

/// Seconds and joules of each series' class, keyed by `key(sample)`; values no counter can
/// have left out and counted in `check`. Joules without a class (the owner's `hw.energy`, what
/// the lean set exports) are split over the key's verdicts in the shares of their seconds;
/// joules with one (the full set's `gpuslack.diagnosis.energy`, or a rule over it) go to their
/// class.
fn by_key(
    time: &[Sample],
    mut joules: HashMap<(String, String), f64>,
    check: &mut Believable,
    key: impl Fn(&Sample) -> String,
) -> BTreeMap<String, ByVerdict> {
    let mut out: BTreeMap<String, ByVerdict> = BTreeMap::new();
    let mut unsplit: BTreeMap<String, f64> = BTreeMap::new();
    joules.retain(|(k, class), j| {
        if class.is_empty() {
            *unsplit.entry(k.clone()).or_default() += *j;
            false
        } else {
            true
        }
    });
    for s in time {
        let Some(seconds) = check.rise(s.value, check.max_seconds) else {
            continue;
        };
        let k = key(s);
        let class = s.label("gpuslack_diagnosis_class");
        let j = joules
            .remove(&(k.clone(), class.to_string()))
            .unwrap_or(0.0);
        add(out.entry(k).or_default(), class, seconds, j);
    }
    // Energy without time (cannot happen with the agent's series; kept rather than lost).
    for ((k, class), j) in joules {
        add(out.entry(k).or_default(), &class, 0.0, j);
    }
    for (k, j) in unsplit {
        let by = out.entry(k).or_default();
        let seconds: f64 = by.values().map(|v| v.seconds).sum();
        if seconds > 0.0 {
            let shares: Vec<(String, f64)> = by
                .iter()
                .map(|(class, v)| (class.clone(), v.seconds / seconds))
                .collect();
            for (class, share) in shares {
                add(by, &class, 0.0, j * share);
            }
        } else {
            add(by, "", 0.0, j);
        }
    }
    out
}

/// The fleet waste report over `options.since_s` up to `options.end`.
pub fn fleet_report(prom: &Prometheus, options: &Options) -> Result<FleetReport, FleetError> {
    let by = [
        "gpuslack_job_id",
        "k8s_namespace_name",
        "process_owner",
        "gpuslack_diagnosis_class",
    ];
    // The owner's energy has no verdict: by the owner's labels only.
    let owner_by = &by[..3];
    let (time_q, energy_q, source) = if options.from_rules {
        (
            promql::sum_rule(promql::TIME_RULE, &by, options.since_s),
            promql::sum_rule(promql::ENERGY_RULE, owner_by, options.since_s),
            promql::TIME_RULE,
        )
    } else {
        (
            promql::sum_rise(TIME, &by, options.since_s),
            promql::sum_rise(ENERGY, owner_by, options.since_s),
            TIME,
        )
    };
    let time = prom.query(&time_q, options.end)?;
    if time.is_empty() {
        return Err(FleetError::NoData {
            what: format!(
                "{}: no {source} series in the last {}: {}",
                prom.url(),
                promql::range(options.since_s),
                if options.from_rules {
                    "is deploy/prometheus/gpuslack-fleet-rules.yml loaded?"
                } else {
                    "no gpuslack agent is scraped there"
                }
            ),
        });
    }
    // Each answer folded as it arrives, and let go: an answer near the cap is some 300 MB
    // parsed.
    let fleet_key = |s: &Sample| {
        format!(
            "{}\u{1f}{}\u{1f}{}",
            s.label("gpuslack_job_id"),
            s.label("k8s_namespace_name"),
            s.label("process_owner")
        )
    };
    let mut check = Believable::over(options.since_s);
    let joules = joules_by(prom.query(&energy_q, options.end)?, &mut check, fleet_key);
    // From the rules, the info series are read once an hour (a subquery) rather than at every
    // scrape: a job shorter than an hour between two ticks may go without its team.
    let info_range = if options.from_rules {
        format!("{}:1h", promql::range(options.since_s))
    } else {
        promql::range(options.since_s)
    };
    let info = prom.query(
        &format!(
            "max by (gpuslack_job_id, slurm_job_user, slurm_job_account, k8s_namespace_name) (max_over_time({JOB_INFO}[{info_range}]))"
        ),
        options.end,
    )?;
    let mut team_of: HashMap<String, String> = HashMap::new();
    let mut user_of: HashMap<String, String> = HashMap::new();
    for s in &info {
        let job = s.label("gpuslack_job_id").to_string();
        let team = [s.label("slurm_job_account"), s.label("k8s_namespace_name")]
            .into_iter()
            .find(|t| !t.is_empty());
        if let Some(team) = team {
            team_of.insert(job.clone(), team.to_string());
        }
        if !s.label("slurm_job_user").is_empty() {
            user_of.insert(job, s.label("slurm_job_user").to_string());
        }
    }
    let info_found = !info.is_empty();
    drop(info);
    // Per (job, namespace, user) first, then folded by each key.
    let rows = by_key(&time, joules, &mut check, fleet_key);
    drop(time);
    let mut fleet = ByVerdict::new();
    let mut allocated = ByVerdict::new();
    let mut jobs: BTreeMap<String, ByVerdict> = BTreeMap::new();
    let mut teams: BTreeMap<String, (ByVerdict, usize)> = BTreeMap::new();
    let mut users: BTreeMap<String, (ByVerdict, usize)> = BTreeMap::new();
    let mut team_jobs: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    let mut user_jobs: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for (key, by) in &rows {
        let mut parts = key.split('\u{1f}');
        let job = parts.next().unwrap_or_default().to_string();
        let namespace = parts.next().unwrap_or_default();
        let process_owner = parts.next().unwrap_or_default();
        for (class, v) in by {
            add(&mut fleet, class, v.seconds, v.energy_j);
        }
        if job.is_empty() {
            continue;
        }
        let team = team_of
            .get(&job)
            .cloned()
            .or_else(|| (!namespace.is_empty()).then(|| namespace.to_string()))
            .unwrap_or_else(|| "(no team label)".to_string());
        let user = user_of
            .get(&job)
            .cloned()
            .or_else(|| (!process_owner.is_empty()).then(|| process_owner.to_string()))
            .unwrap_or_else(|| "(no user label)".to_string());
        for (class, v) in by {
            add(&mut allocated, class, v.seconds, v.energy_j);
            add(
                jobs.entry(job.clone()).or_default(),
                class,
                v.seconds,
                v.energy_j,
            );
            add(
                &mut teams.entry(team.clone()).or_default().0,
                class,
                v.seconds,
                v.energy_j,
            );
            add(
                &mut users.entry(user.clone()).or_default().0,
                class,
                v.seconds,
                v.energy_j,
            );
        }
        team_jobs.entry(team).or_default().insert(job.clone());
        user_jobs.entry(user).or_default().insert(job);
    }
    drop((rows, team_of, user_of));
    let hours = |by: &ByVerdict, keep: &dyn Fn(&str) -> bool| -> f64 {
        by.iter()
            .filter(|(c, _)| keep(c))
            .map(|(_, v)| v.seconds)
            .sum::<f64>()
            / 3600.0
            + 0.0
    };
    let allocated_h = hours(&allocated, &|_| true);
    let effective_h = hours(&allocated, &|c| {
        matches!(c, "compute_bound" | "memory_bound")
    });
    let wasted_j: f64 = allocated
        .iter()
        .filter(|(c, _)| !matches!(c.as_str(), "compute_bound" | "memory_bound"))
        .map(|(_, v)| v.energy_j)
        .sum();
    let funnel = Funnel {
        observed_gpu_hours: hours(&fleet, &|_| true),
        allocated_gpu_hours: allocated_h,
        active_gpu_hours: hours(&allocated, &|c| !matches!(c, "idle" | "idle_held")),
        effective_gpu_hours: effective_h,
        wasted_gpu_hours: allocated_h - effective_h,
        wasted_cost: options
            .prices
            .cost(allocated_h - effective_h, wasted_j / 3.6e6),
    };
    let top = |list: Vec<Owner>| -> Vec<Owner> {
        let mut list = list;
        list.sort_by(|a, b| {
            b.slack_gpu_hours
                .total_cmp(&a.slack_gpu_hours)
                .then_with(|| a.name.cmp(&b.name))
        });
        list.truncate(options.top);
        list
    };
    let owners_from = if !info_found {
        "the counters' own labels (k8s_namespace_name, process_owner): no gpuslack_job_info series"
    } else {
        "gpuslack_job_info (slurm_job_account or k8s_namespace_name, slurm_job_user), joined by gpuslack_job_id"
    };
    Ok(FleetReport {
        schema: "gpuslack.fleet.v1",
        prometheus: prom.url().to_string(),
        since_s: options.since_s,
        end: options.end,
        prices: options.prices,
        time_by_verdict: fleet,
        funnel,
        jobs: top(jobs
            .iter()
            .map(|(j, by)| Owner::of(j, by, &options.prices, 1))
            .collect()),
        teams: top(teams
            .iter()
            .map(|(t, (by, _))| {
                Owner::of(
                    t,
                    by,
                    &options.prices,
                    team_jobs.get(t).map_or(0, |s| s.len()),
                )
            })
            .collect()),
        users: top(users
            .iter()
            .map(|(u, (by, _))| {
                Owner::of(
                    u,
                    by,
                    &options.prices,
                    user_jobs.get(u).map_or(0, |s| s.len()),
                )
            })
            .collect()),
        owners_from: owners_from.to_string(),
        values_refused: check.refused,
    })
}

/// One job's report across its nodes.
pub fn job_report(
    prom: &Prometheus,
    job: &str,
    options: &Options,
) -> Result<JobReport, FleetError> {
    let by = [
        "instance",
        "hw_id",
        "gpuslack_gpu_index",
        "gpuslack_diagnosis_class",
    ];
    let r = promql::range(options.since_s);
    let time = prom.query(
        &promql::sum_rise(&promql::of_job(TIME, job), &by, options.since_s),
        options.end,
    )?;
    if time.is_empty() {
        return Err(FleetError::NoData {
            what: format!(
                "{}: no series of job \"{}\" in the last {r} (jobs are named as the agent names them: slurm:ID, pod:UID, container:ID, pgid:N)",
                prom.url(),
                crate::text::name(job)
            ),
        });
    }
    let rank_key = |s: &Sample| {
        format!(
            "{}\u{1f}{}\u{1f}{}",
            s.label("instance"),
            s.label("hw_id"),
            s.label("gpuslack_gpu_index")
        )
    };
    let mut check = Believable::over(options.since_s);
    let joules = joules_by(
        prom.query(
            &promql::sum_rise(&promql::of_job(ENERGY, job), &by[..3], options.since_s),
            options.end,
        )?,
        &mut check,
        rank_key,
    );
    let hosts = prom.query(
        &format!("max by (instance, host_name) (last_over_time(target_info[{r}]))"),
        options.end,
    )?;
    let host_of: HashMap<&str, &str> = hosts
        .iter()
        .filter(|s| !s.label("host_name").is_empty())
        .map(|s| (s.label("instance"), s.label("host_name")))
        .collect();
    let info = prom.query(
        &format!(
            "max by (instance, hw_id, gpuslack_job_rank) (last_over_time({}[{r}]))",
            promql::of_job(JOB_INFO, job)
        ),
        options.end,
    )?;
    let rank_of: HashMap<(String, String), String> = info
        .iter()
        .filter(|s| !s.label("gpuslack_job_rank").is_empty())
        .map(|s| {
            (
                (
                    s.label("instance").to_string(),
                    s.label("hw_id").to_string(),
                ),
                s.label("gpuslack_job_rank").to_string(),
            )
        })
        .collect();
    let rows = by_key(&time, joules, &mut check, rank_key);
    // The timelines: the verdict gauge over the range (of the GPUs the job's info series says
    // it held at each step: the gauge names no owner), at a step that keeps a rank's strip
    // within about 600 points (Prometheus refuses more than 11,000 a series).
    let step_s = (options.since_s / 600.0).ceil().max(1.0);
    let timeline = prom.query_range(
        &format!(
            "max by (instance, hw_id, gpuslack_gpu_index, gpuslack_diagnosis_class) ({}) == 1",
            promql::gauge_of_job(RATIO, job)
        ),
        options.end - options.since_s,
        options.end,
        step_s,
    )?;
    let mut steps: HashMap<String, Vec<(f64, String)>> = HashMap::new();
    let (first, last) = (options.end - options.since_s - step_s, options.end + step_s);
    for series in &timeline {
        let s = Sample {
            labels: series.labels.clone(),
            value: 0.0,
        };
        let class = s.label("gpuslack_diagnosis_class").to_string();
        let list = steps.entry(rank_key(&s)).or_default();
        for (t, _) in &series.points {
            // A point outside the range asked for is no answer to it (1e300, NaN).
            if (first..=last).contains(t) {
                list.push((*t, class.clone()));
            } else {
                check.refused += 1;
            }
        }
    }
    let mut all = ByVerdict::new();
    let mut ranks = Vec::new();
    for (key, by) in rows {
        let mut parts = key.split('\u{1f}');
        let instance = parts.next().unwrap_or_default().to_string();
        let hw_id = parts.next().unwrap_or_default().to_string();
        let gpu_index = parts.next().unwrap_or_default().to_string();
        for (class, v) in &by {
            add(&mut all, class, v.seconds, v.energy_j);
        }
        let (seconds, _, _) = totals(&by);
        let wait: f64 = by
            .iter()
            .filter(|(c, _)| waiting(c))
            .map(|(_, v)| v.seconds)
            .sum::<f64>()
            + 0.0;
        let mut points = steps.remove(&key).unwrap_or_default();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut bands: Vec<(f64, f64, String)> = Vec::new();
        for (t, class) in points {
            match bands.last_mut() {
                Some(last) if last.2 == class && t - last.1 <= step_s * 1.5 => last.1 = t + step_s,
                _ => bands.push((t, t + step_s, class)),
            }
        }
        ranks.push(Rank {
            node: host_of
                .get(instance.as_str())
                .map_or_else(|| instance.clone(), |h| h.to_string()),
            rank: rank_of.get(&(instance.clone(), hw_id.clone())).cloned(),
            instance,
            hw_id,
            gpu_index,
            wait_share: if seconds > 0.0 { wait / seconds } else { 0.0 },
            seconds,
            last_class: bands.last().map(|b| b.2.clone()),
            last_seen: bands.last().map(|b| b.1 - step_s),
            bands,
            time_by_verdict: by,
        });
    }
    ranks.sort_by(|a, b| (&a.node, &a.gpu_index).cmp(&(&b.node, &b.gpu_index)));
    let finding = find(&ranks, step_s);
    let (seconds, slack, slack_j) = totals(&all);
    let cause = top_cause(&all);
    Ok(JobReport {
        schema: "gpuslack.fleet.job.v1",
        job: crate::text::name(job).into_owned(),
        prometheus: prom.url().to_string(),
        since_s: options.since_s,
        end: options.end,
        step_s,
        prices: options.prices,
        gpu_hours: seconds / 3600.0,
        slack_gpu_hours: slack / 3600.0,
        slack_share: if seconds > 0.0 { slack / seconds } else { 0.0 },
        slack_kwh: slack_j / 3.6e6,
        slack_cost: options.prices.cost(slack / 3600.0, slack_j / 3.6e6),
        top_cause: cause.map(|(c, _)| c.as_str().to_string()),
        remedy: cause.map(|(c, _)| c.remedy().to_string()),
        time_by_verdict: all,
        finding,
        ranks,
        values_refused: check.refused,
    })
}

/// The hang or straggler the ranks show, if any.
///
/// - **Hang**: at the last step, at least half the ranks are `hung` (or all wait, one hung).
///   The culprits are the ranks that are not waiting, and those that stopped reporting (their
///   last point more than 3 steps before the others'): the ones the others wait on.
/// - **Straggler**: otherwise, the rank that waits least while its peers wait a fifth of their
///   time or more, 15 points below their median: the others wait on it.
pub fn find(ranks: &[Rank], step_s: f64) -> Option<Finding> {
    if ranks.len() < 2 {
        return None;
    }
    let latest = ranks
        .iter()
        .filter_map(|r| r.last_seen)
        .fold(f64::MIN, f64::max);
    let stale = |r: &Rank| r.last_seen.is_none_or(|t| t < latest - 3.0 * step_s);
    let hung = ranks
        .iter()
        .filter(|r| !stale(r) && r.last_class.as_deref() == Some(Class::Hung.as_str()))
        .count();
    let waiting_now = ranks
        .iter()
        .filter(|r| !stale(r) && r.last_class.as_deref().is_some_and(waiting))
        .count();
    if hung > 0
        && (2 * hung >= ranks.len()
            || waiting_now + ranks.iter().filter(|r| stale(r)).count() == ranks.len())
    {
        let culprits: Vec<&Rank> = ranks
            .iter()
            .filter(|r| stale(r) || !r.last_class.as_deref().is_some_and(waiting))
            .collect();
        let text = if culprits.is_empty() {
            format!("hang: all {} ranks wait or are hung, none differs: a collective every rank entered (dump every rank's stack)", ranks.len())
        } else {
            let named: Vec<String> = culprits
                .iter()
                .map(|r| {
                    if stale(r) {
                        format!("{} (stopped reporting)", r.label())
                    } else {
                        format!("{} ({})", r.label(), r.last_class.as_deref().unwrap_or("?"))
                    }
                })
                .collect();
            format!(
                "hang: {waiting_now} of {} ranks wait or are hung; the one(s) not waiting: {}",
                ranks.len(),
                named.join(", ")
            )
        };
        return Some(Finding {
            kind: "hang",
            culprits: culprits.iter().map(|r| r.label()).collect(),
            text,
        });
    }
    let mut shares: Vec<f64> = ranks.iter().map(|r| r.wait_share).collect();
    shares.sort_by(f64::total_cmp);
    let median = shares[shares.len() / 2];
    let slow: Vec<&Rank> = ranks
        .iter()
        .filter(|r| r.wait_share <= median - 0.15)
        .collect();
    if median < 0.2 || slow.is_empty() || 2 * slow.len() >= ranks.len() {
        return None;
    }
    let named: Vec<String> = slow
        .iter()
        .map(|r| format!("{} waits {:.0}%", r.label(), r.wait_share * 100.0))
        .collect();
    Some(Finding {
        kind: "straggler",
        culprits: slow.iter().map(|r| r.label()).collect(),
        text: format!(
            "straggler: {}, its peers {:.0}% of their time (median): they wait on it",
            named.join(", "),
            median * 100.0
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(node: &str, last: &str, wait_share: f64, last_seen: f64) -> Rank {
        Rank {
            node: node.into(),
            instance: node.into(),
            hw_id: "gpu-0".into(),
            gpu_index: "0".into(),
            rank: None,
            time_by_verdict: ByVerdict::new(),
            seconds: 100.0,
            wait_share,
            last_class: Some(last.into()),
            last_seen: Some(last_seen),
            bands: vec![],
        }
    }

    #[test]
    fn values_no_counter_can_have_are_refused_and_counted_at_their_bound() {
        let mut check = Believable::over(3600.0);
        let max = 3600.0 * MAX_GPUS;
        assert_eq!(check.max_seconds, 3.6e10);
        assert_eq!(check.rise(max, check.max_seconds), Some(max));
        assert_eq!(check.rise(-1e-9, check.max_seconds), Some(0.0));
        assert_eq!(check.refused, 0);
        assert_eq!(check.rise(max * 1.000_001, check.max_seconds), None);
        assert_eq!(check.rise(f64::NAN, check.max_seconds), None);
        assert_eq!(check.rise(f64::INFINITY, check.max_joules), None);
        assert_eq!(check.rise(1e300, check.max_joules), None);
        assert_eq!(check.refused, 4);
        assert_eq!(check.max_joules, 3.6e10 * MAX_GPU_POWER_W);
    }

    #[test]
    fn a_hang_names_the_rank_that_is_not_waiting() {
        let ranks = [
            rank("a", "hung", 0.5, 100.0),
            rank("b", "hung", 0.5, 100.0),
            rank("c", "compute_bound", 0.0, 100.0),
        ];
        let f = find(&ranks, 10.0).expect("a hang");
        assert_eq!(f.kind, "hang");
        assert_eq!(f.culprits, vec!["c GPU 0".to_string()]);
    }

    #[test]
    fn a_rank_that_stopped_reporting_is_a_culprit_of_the_hang() {
        let ranks = [
            rank("a", "hung", 0.5, 100.0),
            rank("b", "hung", 0.5, 100.0),
            rank("c", "hung", 0.0, 20.0),
        ];
        let f = find(&ranks, 10.0).expect("a hang");
        assert_eq!(f.culprits, vec!["c GPU 0".to_string()]);
    }

    #[test]
    fn the_rank_its_peers_wait_on_is_the_straggler() {
        let ranks = [
            rank("a", "sync_wait", 0.4, 100.0),
            rank("b", "sync_wait", 0.45, 100.0),
            rank("c", "compute_bound", 0.05, 100.0),
        ];
        let f = find(&ranks, 10.0).expect("a straggler");
        assert_eq!((f.kind, f.culprits[0].as_str()), ("straggler", "c GPU 0"));
        assert!(find(
            &[
                rank("a", "compute_bound", 0.0, 1.0),
                rank("b", "compute_bound", 0.0, 1.0)
            ],
            1.0
        )
        .is_none());
    }
}
