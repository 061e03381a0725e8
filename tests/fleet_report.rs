//! `gpuslack fleet` against a real Prometheus scraping several agents that pose as nodes
//! (`run --replay`, each with its own `host.name`, the default metric set): the fleet's
//! GPU-hours per verdict equal the sum of `diagnose` over the same traces to the GPU-second, and
//! so do each rank's in `fleet job`; the
//! errors a wrong URL gives are the documented exit codes; the Slurm epilog stores the job's
//! summary with `scontrol`.
//!
//! Counters of a replay at `--speed 0` hold their final values from the first scrape on, so the
//! report's exact rise (last value minus the value at the range's start, 0 for a series born in
//! the range; `fleet/promql.rs`) is what must match, not `increase`, which would see no rise.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    as_slurm_job, free_port, gpuslack_json, node_agent as agent, repo, scrape_config, temp_dir,
    wait_for_final_counters, Server,
};
use serde_json::Value;

/// `diagnose --trace` of each trace: seconds per verdict, per GPU index.
fn diagnose(trace: &Path) -> BTreeMap<String, BTreeMap<String, f64>> {
    let report = gpuslack_json(&[
        "diagnose",
        "--trace",
        &trace.display().to_string(),
        "--format",
        "json",
    ]);
    let mut out = BTreeMap::new();
    for gpu in report["gpus"].as_array().expect("gpus") {
        let by: BTreeMap<String, f64> = gpu["time_by_verdict"]
            .as_object()
            .expect("time_by_verdict")
            .iter()
            .map(|(c, v)| (c.clone(), v["seconds"].as_f64().unwrap_or(0.0)))
            .collect();
        out.insert(gpu["gpu"].to_string(), by);
    }
    out
}

fn seconds_of(by: &Value) -> BTreeMap<String, f64> {
    by.as_object()
        .expect("time_by_verdict")
        .iter()
        .map(|(c, v)| (c.clone(), v["seconds"].as_f64().unwrap_or(0.0)))
        .filter(|(_, s)| *s > 0.0)
        .collect()
}

/// Every verdict equal to `want`'s to the GPU-second (the default, lean metric set's per-owner
/// verdict time is diagnose's, window by window); prints both.
fn assert_to_the_gpu_second(what: &str, got: &BTreeMap<String, f64>, want: &BTreeMap<String, f64>) {
    let classes: std::collections::BTreeSet<&String> = got.keys().chain(want.keys()).collect();
    for class in classes {
        let (g, w) = (
            got.get(class).copied().unwrap_or(0.0),
            want.get(class).copied().unwrap_or(0.0),
        );
        eprintln!("{what} {class}: fleet {g:.1} s, diagnose {w:.1} s");
        let tolerance = 1.0;
        assert!(
            (g - w).abs() <= tolerance,
            "{what} {class}: fleet {g} s, diagnose {w} s"
        );
    }
}

#[test]
fn fleet_and_job_reports_match_diagnose_of_the_same_traces_to_the_gpu_second() {
    let dir = temp_dir("fleet-report");
    // Job slurm:4711 on two "nodes" (the two-GPU hang recording, twice); node-c runs its own
    // job (pgid:485, from the recording's own processes column).
    let a = as_slurm_job("h200x2-scenarios", "4711", &dir, "node-a.csv");
    let b = as_slurm_job("h200x2-scenarios", "4711", &dir, "node-b.csv");
    let c = repo("tests/fixtures/h200-diagnose-job/samples.csv");
    let ports = [free_port(), free_port(), free_port()];
    let _agents = [
        agent(&a, "node-a", ports[0]),
        agent(&b, "node-b", ports[1]),
        agent(&c, "node-c", ports[2]),
    ];
    let (_prometheus, port) = common::start_prometheus_with(&dir, &scrape_config(&ports));
    wait_for_final_counters(port, 3);
    let url = format!("http://127.0.0.1:{port}");

    let mut want_fleet: BTreeMap<String, f64> = BTreeMap::new();
    let mut want_ranks: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for (trace, node) in [(&a, "node-a"), (&b, "node-b"), (&c, "node-c")] {
        for (gpu, by) in diagnose(trace) {
            for (class, s) in &by {
                *want_fleet.entry(class.clone()).or_default() += s;
            }
            if node != "node-c" {
                want_ranks.insert(format!("{node} GPU {gpu}"), by);
            }
        }
    }
    want_fleet.retain(|_, s| *s > 0.0);

    let fleet = gpuslack_json(&["fleet", "--prometheus", &url, "--since", "15m", "--json"]);
    assert_eq!(fleet["schema"], "gpuslack.fleet.v1");
    assert_to_the_gpu_second("fleet", &seconds_of(&fleet["time_by_verdict"]), &want_fleet);
    let jobs: Vec<&str> = fleet["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["name"].as_str())
        .collect();
    assert!(
        jobs.contains(&"slurm:4711") && jobs.contains(&"pgid:485"),
        "{jobs:?}"
    );
    let f = &fleet["funnel"];
    let stage = |k: &str| f[k].as_f64().expect("a funnel stage");
    assert!(stage("observed_gpu_hours") >= stage("allocated_gpu_hours"));
    assert!(stage("allocated_gpu_hours") >= stage("active_gpu_hours"));
    assert!(stage("active_gpu_hours") >= stage("effective_gpu_hours"));

    let html = dir.join("job.html");
    let job = gpuslack_json(&[
        "fleet",
        "job",
        "slurm:4711",
        "--prometheus",
        &url,
        "--since",
        "15m",
        "--json",
        "--html",
        &html.display().to_string(),
    ]);
    let ranks = job["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 4, "two GPUs on each of two nodes");
    for rank in ranks {
        let label = format!(
            "{} GPU {}",
            rank["node"].as_str().unwrap_or("?"),
            rank["gpu_index"].as_str().unwrap_or("?")
        );
        let want = want_ranks
            .get(&label)
            .unwrap_or_else(|| panic!("no diagnose of {label}"));
        let want: BTreeMap<String, f64> = want
            .iter()
            .filter(|(_, s)| **s > 0.0)
            .map(|(c, s)| (c.clone(), *s))
            .collect();
        assert_to_the_gpu_second(&label, &seconds_of(&rank["time_by_verdict"]), &want);
        // The timeline reads the verdict gauge, which names no job: joined through the GPU's
        // info series, every rank has its strip, ending in a verdict it spent time in.
        let bands = rank["bands"].as_array().expect("bands");
        assert!(!bands.is_empty(), "{label}: no timeline");
        let last = rank["last_class"].as_str().expect("last_class");
        assert!(
            want.contains_key(last),
            "{label}: last {last}, spent {want:?}"
        );
    }
    let page = std::fs::read_to_string(&html).expect("the HTML page");
    assert_eq!(page.matches("<svg").count(), 4, "an SVG timeline per rank");

    // What a wrong URL gives: the documented exit codes, never a panic.
    let code = |url: &str| {
        Command::new(env!("CARGO_BIN_EXE_gpuslack"))
            .args(["fleet", "--prometheus", url, "--since", "15m"])
            .output()
            .expect("runs")
            .status
            .code()
    };
    assert_eq!(code("not a url"), Some(2));
    // Nothing listening: 75 (EX_TEMPFAIL), never 69, which means "no GPU" to every command.
    assert_eq!(code(&format!("http://127.0.0.1:{}", free_port())), Some(75));
    assert_eq!(
        code(&format!("http://127.0.0.1:{}", ports[0])),
        Some(76),
        "an agent is not a query API"
    );
    let unknown = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args([
            "fleet",
            "job",
            "slurm:1",
            "--prometheus",
            &url,
            "--since",
            "15m",
        ])
        .output()
        .expect("runs");
    assert_eq!(unknown.status.code(), Some(1));

    epilog_stores_the_summary_where_sacct_shows_it(&dir, &url);
}

/// deploy/slurm/gpuslack-epilog.sh with a stub `scontrol` on PATH: the AdminComment it sets is
/// `GS1:` and the gzipped, base64 job summary; with Prometheus down it sets none and exits 0.
fn epilog_stores_the_summary_where_sacct_shows_it(dir: &Path, url: &str) {
    let bin = dir.join("stub-bin");
    std::fs::create_dir_all(&bin).expect("stub dir");
    let calls = dir.join("scontrol-calls");
    let stub = bin.join("scontrol");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{}'\n",
            calls.display()
        ),
    )
    .expect("stub");
    std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let epilog = |url: &str| {
        Command::new(repo("deploy/slurm/gpuslack-epilog.sh"))
            .env("PATH", &path)
            .env("SLURM_JOB_ID", "4711")
            .env("GPUSLACK", env!("CARGO_BIN_EXE_gpuslack"))
            .env("GPUSLACK_PROMETHEUS_URL", url)
            .env(
                "SLURM_JOB_START_TIME",
                (std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("clock")
                    .as_secs()
                    - 600)
                    .to_string(),
            )
            .output()
            .expect("the epilog runs")
    };
    let out = epilog(url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let args = std::fs::read_to_string(&calls).expect("scontrol was called");
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(&args[..2], &["update", "job=4711"], "{args:?}");
    let encoded = args[2]
        .strip_prefix("AdminComment=GS1:")
        .expect("the tagged comment");
    let decoded = Command::new("sh")
        .args([
            "-c",
            &format!("printf '%s' '{encoded}' | base64 -d | gunzip"),
        ])
        .output()
        .expect("decodes");
    let summary: Value = serde_json::from_slice(&decoded.stdout).expect("the summary is JSON");
    assert_eq!(summary["job"], "slurm:4711");
    assert_eq!(summary["ranks"].as_array().map(Vec::len), Some(4));
    assert!(summary["gpu_hours"].as_f64().is_some_and(|h| h > 0.0));
    assert!(
        encoded.len() < 4000,
        "small enough for AdminComment: {} bytes",
        encoded.len()
    );

    std::fs::remove_file(&calls).expect("reset");
    let down = epilog(&format!("http://127.0.0.1:{}", free_port()));
    assert!(down.status.success(), "an epilog never fails the job");
    assert!(String::from_utf8_lossy(&down.stderr).contains("no summary"));
    assert!(!calls.exists(), "no comment without a summary");
}

/// The scale benchmark's pipeline in miniature: scripts/synthetic-fleet.py's OpenMetrics,
/// backfilled by promtool, served by Prometheus, read by `gpuslack fleet`: every GPU-second the
/// generator wrote is in the report (2 nodes × 8 GPUs × 1.2 h = 19.2 GPU-hours).
#[test]
fn a_synthetic_fleet_backfilled_by_promtool_is_read_whole() {
    let dir = temp_dir("fleet-synthetic");
    let end = 1_796_000_000u64;
    let out = Command::new("python3")
        .arg(repo("scripts/synthetic-fleet.py"))
        .args([
            "--nodes",
            "2",
            "--days",
            "0.05",
            "--end",
            &end.to_string(),
            "--out",
        ])
        .arg(dir.join("om"))
        .output()
        .expect("python3 runs the generator");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for family in ["time", "energy", "ratio", "info", "target"] {
        let backfill = Command::new(common::promtool())
            .args(["tsdb", "create-blocks-from", "openmetrics"])
            .arg(dir.join("om").join(format!("{family}.om")))
            .arg(dir.join("data"))
            .output()
            .expect("promtool runs");
        assert!(
            backfill.status.success(),
            "{family}: {}",
            String::from_utf8_lossy(&backfill.stderr)
        );
    }
    let port = free_port();
    std::fs::write(dir.join("prometheus.yml"), "scrape_configs: []\n").expect("config");
    let fleet = |url: &str, since: &str, at: u64, extra: &[&str]| -> Value {
        let started = Instant::now();
        loop {
            let out = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
                .args([
                    "fleet",
                    "--prometheus",
                    url,
                    "--since",
                    since,
                    "--at",
                    &at.to_string(),
                    "--json",
                ])
                .args(extra)
                .output()
                .expect("runs");
            if out.status.success() {
                break serde_json::from_slice::<Value>(&out.stdout).expect("JSON");
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    let report = {
        let _prometheus = synthetic_prometheus(&dir, port);
        let url = format!("http://127.0.0.1:{port}");
        let report = fleet(&url, "2h", end, &[]);
        // The hourly rules, evaluated over the past by promtool against this Prometheus.
        let rules = Command::new(common::promtool())
            .args(["tsdb", "create-blocks-from", "rules"])
            .arg(format!("--url={url}"))
            // Evaluations at end − 2 h, end − 1 h and end: hours that tile the report's range
            // (promtool writes nothing for a range within one of its 2-hour blocks).
            .arg(format!("--start={}", end - 7200))
            .arg(format!("--end={}", end + 3600))
            .arg("--eval-interval=1h")
            .arg(format!("--output-dir={}", dir.join("data").display()))
            .arg(repo("deploy/prometheus/gpuslack-fleet-rules.yml"))
            .output()
            .expect("promtool runs");
        assert!(
            rules.status.success(),
            "{}",
            String::from_utf8_lossy(&rules.stderr)
        );
        report
    };
    let observed = report["funnel"]["observed_gpu_hours"]
        .as_f64()
        .expect("observed");
    assert!(
        (observed - 19.2).abs() < 0.192,
        "observed {observed} GPU-hours, 19.2 written"
    );
    // Restarted on the blocks with the rules' output: the report from the rules is the same.
    let port = free_port();
    let _prometheus = synthetic_prometheus(&dir, port);
    // A rule group evaluates at an offset of its own within the hour (promtool's backfill as
    // Prometheus does): the report from the rules ends at their last evaluation before --at,
    // so it is asked an hour later and an hour longer, which covers every hour of the data.
    let from_rules = fleet(
        &format!("http://127.0.0.1:{port}"),
        "3h",
        end + 3600,
        &["--from-rules"],
    );
    for class in report["time_by_verdict"]
        .as_object()
        .expect("verdicts")
        .keys()
    {
        let raw = report["time_by_verdict"][class]["seconds"]
            .as_f64()
            .unwrap_or(0.0);
        let ruled = from_rules["time_by_verdict"][class]["seconds"]
            .as_f64()
            .unwrap_or(0.0);
        assert!(
            (raw - ruled).abs() <= raw * 0.01,
            "{class}: raw {raw} s, from the rules {ruled} s"
        );
    }
    assert!(report["teams"].as_array().is_some_and(|t| !t.is_empty()));
    assert!(report["owners_from"]
        .as_str()
        .is_some_and(|s| s.starts_with("gpuslack_job_info")));
}

/// A Prometheus serving the blocks in `dir/data`, scraping nothing.
fn synthetic_prometheus(dir: &Path, port: u16) -> Server {
    common::run_prometheus(dir, port, &["--storage.tsdb.retention.time=3650d"])
}
