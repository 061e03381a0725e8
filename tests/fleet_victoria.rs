//! `gpuslack fleet` against VictoriaMetrics (Debian's `victoria-metrics`,
//! GPUSLACK_VICTORIA_METRICS), the store users move to when one Prometheus is not enough, equal
//! to the same against Prometheus: one simulated fleet (three `run --replay` agents posing as
//! nodes, as in tests/fleet_report.rs) scraped by both at once, each every second with the same
//! scrape configuration, and the fleet report, a job's report and the report from the hourly
//! recording rules read from each.
//!
//! The rules (deploy/prometheus/gpuslack-fleet-rules.yml, unchanged) run on VictoriaMetrics
//! through vmalert, from the same Debian package, in its replay mode (`-replay.timeFrom/To`:
//! the rules evaluated over a past range and written back by remote write, what promtool's
//! `tsdb create-blocks-from rules` is to Prometheus). Live, vmalert runs an hourly group once
//! an hour, at whole hours, which no test of a minute can wait for.
//!
//! Tolerance: both stores hold the same scraped floats, and the reports sum them in their own
//! order, so every number must agree to 1e-9 of its size (float rounding), and every label,
//! name and verdict exactly; a job's timeline, whose first point is its store's first scrape,
//! to the gap between the two stores' first scrapes and a step. The differences in query
//! semantics (VictoriaMetrics answers "now" 30 s late and puts a range query's points on
//! multiples of its step; its `increase` does not extrapolate) are in docs/DEPLOY.md,
//! "VictoriaMetrics instead of Prometheus": the test starts it with a 1 s latency and ends every
//! report on a multiple of the timeline's step.

mod common;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{
    as_slurm_job, free_port, gpuslack_json, node_agent, prometheus_query, query_scalar, repo,
    run_prometheus, scrape_config, start_victoria_metrics, temp_dir, tool, vmalert,
    wait_for_final_counters,
};
use serde_json::Value;

/// Relative difference allowed between a number from Prometheus and the same from
/// VictoriaMetrics: the same floats summed in another order.
const RELATIVE: f64 = 1e-9;

/// What two equal reports compared: numbers seen, and the largest relative difference.
#[derive(Default)]
struct Compared {
    numbers: usize,
    worst: f64,
}

/// `vm` is `prom` at every path but those in `skip` (the URL asked, the report's end): the
/// same keys, arrays of the same length in the same order, strings, booleans and nulls equal,
/// numbers within [`RELATIVE`].
fn assert_same(path: &str, prom: &Value, vm: &Value, skip: &[&str], seen: &mut Compared) {
    match (prom, vm) {
        (Value::Object(p), Value::Object(v)) => {
            let keys: std::collections::BTreeSet<&String> = p.keys().chain(v.keys()).collect();
            for k in keys {
                if skip.contains(&k.as_str()) {
                    continue;
                }
                let at = format!("{path}/{k}");
                match (p.get(k), v.get(k)) {
                    (Some(a), Some(b)) => assert_same(&at, a, b, skip, seen),
                    (a, b) => panic!("{at}: Prometheus {a:?}, VictoriaMetrics {b:?}"),
                }
            }
        }
        (Value::Array(p), Value::Array(v)) => {
            assert_eq!(
                p.len(),
                v.len(),
                "{path}: {} items from Prometheus, {} from VictoriaMetrics",
                p.len(),
                v.len()
            );
            for (i, (a, b)) in p.iter().zip(v).enumerate() {
                assert_same(&format!("{path}[{i}]"), a, b, skip, seen);
            }
        }
        (Value::Number(p), Value::Number(v)) => {
            let (a, b) = (
                p.as_f64().unwrap_or(f64::NAN),
                v.as_f64().unwrap_or(f64::NAN),
            );
            let relative = (a - b).abs() / a.abs().max(b.abs()).max(f64::MIN_POSITIVE);
            assert!(
                a == b || relative <= RELATIVE,
                "{path}: Prometheus {a}, VictoriaMetrics {b}"
            );
            seen.numbers += 1;
            if a != b {
                seen.worst = seen.worst.max(relative);
            }
        }
        (a, b) => assert_eq!(a, b, "{path}"),
    }
}

/// When the store behind `port` first scraped any target: its earliest `up` sample of the
/// last 15 minutes.
fn first_scrape(port: u16) -> f64 {
    let answer = prometheus_query(port, "up[15m]");
    answer["data"]["result"]
        .as_array()
        .expect("a matrix")
        .iter()
        .filter_map(|s| s["values"][0][0].as_f64())
        .fold(f64::INFINITY, f64::min)
}

/// A rank's timeline from each store: the same verdicts in the same order, each band's start
/// and end within `slack_s` of the other's.
fn assert_same_bands(prom: &Value, vm: &Value, slack_s: f64) {
    let bands = |b: &Value| -> Vec<(f64, f64, String)> {
        b.as_array()
            .expect("bands")
            .iter()
            .map(|b| {
                (
                    b[0].as_f64().expect("start"),
                    b[1].as_f64().expect("end"),
                    b[2].as_str().expect("verdict").to_string(),
                )
            })
            .collect()
    };
    let (p, v) = (bands(prom), bands(vm));
    let verdicts = |b: &[(f64, f64, String)]| b.iter().map(|b| b.2.clone()).collect::<Vec<_>>();
    assert_eq!(verdicts(&p), verdicts(&v), "{p:?} against {v:?}");
    for (a, b) in p.iter().zip(&v) {
        assert!(
            (a.0 - b.0).abs() <= slack_s && (a.1 - b.1).abs() <= slack_s,
            "bands {a:?} and {b:?}, {slack_s} s apart at most"
        );
    }
}

/// `unix_s` as RFC 3339 in UTC, as vmalert's `-replay.timeFrom/To` take it.
fn rfc3339(unix_s: u64) -> String {
    use gpuslack_receiver::report::{utc_date, utc_hms};
    let t = unix_s as f64;
    format!("{}T{}Z", utc_date(t), utc_hms(t))
}

/// What a site moving to VictoriaMetrics loads: the three rule files of deploy/prometheus/ parse
/// in vmalert (its MetricsQL check of every expression and template), and
/// deploy/prometheus/prometheus.yml scrapes there once unknown fields are let through
/// (`rule_files` is Prometheus' own; VictoriaMetrics refuses it by default).
#[test]
fn the_rule_files_and_the_scrape_config_load_in_victoria_metrics() {
    let dir = temp_dir("victoria-config");
    let rules = [
        "gpuslack-rules.yml",
        "gpuslack-jobs.yml",
        "gpuslack-fleet-rules.yml",
    ];
    let mut check = Command::new(vmalert());
    for file in rules {
        check.arg(format!(
            "-rule={}",
            repo("deploy/prometheus").join(file).display()
        ));
    }
    let out = check
        .args(["-dryRun", "-loggerLevel=ERROR"])
        .output()
        .expect("vmalert runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scrape = |strict: bool| {
        Command::new(tool("GPUSLACK_VICTORIA_METRICS"))
            .arg(format!(
                "-promscrape.config={}",
                repo("deploy/prometheus/prometheus.yml").display()
            ))
            .arg(format!("-promscrape.config.strictParse={strict}"))
            .arg(format!("-storageDataPath={}", dir.join("data").display()))
            .args(["-promscrape.config.dryRun", "-loggerLevel=ERROR"])
            .output()
            .expect("victoria-metrics runs")
    };
    let strict = scrape(true);
    assert!(!strict.status.success());
    assert!(
        String::from_utf8_lossy(&strict.stderr).contains("field rule_files not found"),
        "{}",
        String::from_utf8_lossy(&strict.stderr)
    );
    let lenient = scrape(false);
    assert!(
        lenient.status.success(),
        "{}",
        String::from_utf8_lossy(&lenient.stderr)
    );
}

#[test]
fn rfc3339_is_utc_civil_time() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(1_796_500_342), "2026-12-05T19:52:22Z");
}

#[test]
fn fleet_and_its_rules_against_victoria_metrics_equal_the_same_against_prometheus() {
    let started = Instant::now();
    let dir = temp_dir("fleet-victoria");
    // The fleet of tests/fleet_report.rs: job slurm:4711 on two "nodes" (the two-GPU hang
    // recording, twice), node-c running its own job (pgid:485).
    let a = as_slurm_job("h200x2-scenarios", "4711", &dir, "node-a.csv");
    let b = as_slurm_job("h200x2-scenarios", "4711", &dir, "node-b.csv");
    let c = repo("tests/fixtures/h200-diagnose-job/samples.csv");
    let ports = [free_port(), free_port(), free_port()];
    let _agents = [
        node_agent(&a, "node-a", ports[0]),
        node_agent(&b, "node-b", ports[1]),
        node_agent(&c, "node-c", ports[2]),
    ];
    let config = scrape_config(&ports);
    std::fs::write(dir.join("prometheus.yml"), &config).expect("config");
    let prom_port = free_port();
    // Taking remote writes, as VictoriaMetrics does: vmalert writes the rules' series there.
    let _prometheus = run_prometheus(&dir, prom_port, &["--web.enable-remote-write-receiver"]);
    let (_victoria, vm_port) = start_victoria_metrics(&dir, &config);
    wait_for_final_counters(prom_port, 3);
    wait_for_final_counters(vm_port, 3);
    let prom = format!("http://127.0.0.1:{prom_port}");
    let vm = format!("http://127.0.0.1:{vm_port}");
    // One end for every report, so that both stores answer for the same range; a multiple of
    // the job timeline's step (2 s over 15 min), where VictoriaMetrics puts a range query's
    // steps (it aligns them to the step, Prometheus starts them at `start`).
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        / 2
        * 2;
    let at_arg = at.to_string();
    let report = |url: &str, extra: &[&str]| {
        let mut args = vec!["fleet"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--prometheus", url, "--since", "15m", "--at", &at_arg]);
        args.push("--json");
        gpuslack_json(&args)
    };

    // The fleet report.
    let fleet_prom = report(&prom, &[]);
    let fleet_vm = report(&vm, &[]);
    let seconds: f64 = fleet_prom["time_by_verdict"]
        .as_object()
        .expect("time_by_verdict")
        .values()
        .filter_map(|v| v["seconds"].as_f64())
        .sum();
    assert!(seconds > 300.0, "the fleet's GPU time: {seconds} s");
    let mut seen = Compared::default();
    assert_same("fleet", &fleet_prom, &fleet_vm, &["prometheus"], &mut seen);

    // A job's report: its ranks' GPU time (instant queries) and their timelines (a range query
    // of the verdict gauge joined to the job's info series).
    let job_prom = report(&prom, &["job", "slurm:4711"]);
    let job_vm = report(&vm, &["job", "slurm:4711"]);
    assert_eq!(job_prom["ranks"].as_array().map(Vec::len), Some(4));
    assert!(
        job_prom["ranks"].as_array().is_some_and(|r| r
            .iter()
            .all(|r| r["bands"].as_array().is_some_and(|b| !b.is_empty()))),
        "every rank has its timeline"
    );
    assert_same(
        "job",
        &job_prom,
        &job_vm,
        &["prometheus", "bands"],
        &mut seen,
    );
    // Each store scraped from its own start: a timeline begins at its store's first scrape, so
    // its bands' edges may differ by that gap (and a step); the verdicts in them may not.
    let step_s = job_prom["step_s"].as_f64().expect("step_s");
    let firsts = [first_scrape(prom_port), first_scrape(vm_port)];
    let gap_s = (firsts[0] - firsts[1]).abs();
    for (p, v) in job_prom["ranks"]
        .as_array()
        .expect("ranks")
        .iter()
        .zip(job_vm["ranks"].as_array().expect("ranks"))
    {
        assert_same_bands(&p["bands"], &v["bands"], gap_s + step_s);
    }

    // Without the recorded series, `--from-rules` is the same error from both: exit 1, naming
    // the rule file to load.
    for url in [&prom, &vm] {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
            .args([
                "fleet",
                "--from-rules",
                "--prometheus",
                url,
                "--since",
                "15m",
            ])
            .args(["--at", &at_arg])
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(1), "{url}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("gpuslack-fleet-rules.yml loaded?"),
            "{url}: {err}"
        );
    }

    // The rules, evaluated by vmalert over the hour up to `at` (one evaluation, at `at`) and
    // written back by remote write into each store. Prometheus' own rule engine runs the same
    // file in `promtool test rules` and tests/fleet_report.rs' backfill.
    for url in [&prom, &vm] {
        let replay = Command::new(vmalert())
            .arg(format!(
                "-rule={}",
                repo("deploy/prometheus/gpuslack-fleet-rules.yml").display()
            ))
            .arg(format!("-datasource.url={url}"))
            .arg(format!("-remoteWrite.url={url}"))
            .arg(format!("-replay.timeFrom={}", rfc3339(at - 3600)))
            .arg(format!("-replay.timeTo={}", rfc3339(at)))
            .arg("-replay.disableProgressBar")
            .arg("-replay.rulesDelay=0s")
            .output()
            .expect("vmalert runs");
        let log = String::from_utf8_lossy(&replay.stderr);
        assert!(replay.status.success(), "vmalert into {url}: {log}");
    }
    // Remote-written points become searchable within a second or two.
    let waited = Instant::now();
    for port in [prom_port, vm_port] {
        while query_scalar(port, "count(gpuslack:energy_joules:rise1h)").is_none()
            || query_scalar(port, "count(gpuslack:diagnosis_time_seconds:rise1h)").is_none()
        {
            assert!(
                waited.elapsed() < Duration::from_secs(20),
                "vmalert's series never showed on {port}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let rules_prom = report(&prom, &["--from-rules"]);
    let rules_vm = report(&vm, &["--from-rules"]);
    // From the rules, owners come from the info series at whole hours (a subquery,
    // `[15m:1h]`): should a whole hour fall between the two stores' first scrapes, one store
    // has them at that tick and the other not.
    let (early, late) = (firsts[0].min(firsts[1]), firsts[0].max(firsts[1]));
    let skip: &[&str] = if (late / 3600.0).floor() > (early / 3600.0).floor() {
        &["prometheus", "owners_from"]
    } else {
        &["prometheus"]
    };
    assert_same("rules", &rules_prom, &rules_vm, skip, &mut seen);
    // And the report from the rules is the raw one, but for where owners come from: no whole
    // hour need fall in these 15 minutes (the jobs here name no team, so no figure changes).
    assert_same(
        "rules against raw",
        &fleet_prom,
        &rules_vm,
        &["prometheus", "owners_from"],
        &mut seen,
    );

    eprintln!(
        "{} numbers compared, largest relative difference {:e}, in {:.1} s",
        seen.numbers,
        seen.worst,
        started.elapsed().as_secs_f64()
    );
}
