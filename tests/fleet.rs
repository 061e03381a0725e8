//! Four agents pose as four nodes of two jobs, a real Prometheus scrapes them with the job rules
//! (deploy/prometheus/gpuslack-jobs.yml) loaded, and the alerts no single node can raise fire:
//! - `torch:10.0.0.1:29500` runs on node-a and node-b, cut from the two-GPU hang recording
//!   (`h200x2-scenarios`, its GPU 0 on node-a as rank 0, its GPU 1 on node-b as rank 1). In
//!   the deadlock rank 0 spins in the collective and rank 1 never joins, holding its context:
//!   `GpuslackJobHung` must fire within 90 s of the hang's start and
//!   `GpuslackJobHangCulprit` must name node-b's GPU, rank 1.
//! - `torch:run-b` runs on node-c and node-d (the recording's pipeline and straggler phases); 20
//!   s in, node-d's process disappears from its trace while its `pods` column goes on saying the
//!   kubelet assigns the GPU (what PodResources answered, recorded beside the process list):
//!   `GpuslackJobRankDied` must name rank 1 on node-d, allocated_idle.
//!
//! Time: the agents replay at `--speed 2`, so one second of wall time is two of the recording;
//! the rules' `for:` durations are halved in the copy Prometheus loads (60 s → 30 s, 30 s →
//! 15 s), so that they still mean 60 s and 30 s of the recording. The recorded hang lasts 30 s;
//! its last 20 s (a steady spin, no counter in it) are repeated three times, so that it lasts
//! 90 s of replay, longer than the rule needs. Delays are reported in replay time: wall
//! seconds since the agents started × 2.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, prometheus_query, repo, temp_dir, wait_for_port, Server};

/// The replay speed: replay seconds per wall second.
const SPEED: f64 = 2.0;
/// When the recording's deadlocked collective starts (phases.json, `collective_hang`), and ends.
const HANG_T0: f64 = 1796025965.5069287;
const HANG_T1: f64 = 1796025995.8398468;
/// The hang traces start this long before the hang.
const LEAD_S: f64 = 4.0;

/// One GPU's rows of the two-GPU recording within `[from, to]`, as GPU 0 of a node, with a
/// `processes` and (for `pods`) a `pods` cell per row from `cells(t)`. The energy counter is
/// left out: a repeated stretch would run it backwards, read as a driver reload.
fn node_trace(
    gpu: &str,
    from: f64,
    to: f64,
    repeat_last_s: Option<(f64, u32)>,
    cells: &dyn Fn(f64) -> (String, String),
) -> String {
    let text = std::fs::read_to_string(repo("tests/fixtures/h200x2-scenarios/samples.csv"))
        .expect("the recording");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (ti, gi, ei, ni) = (col("t"), col("gpu"), col("energy_mj"), col("nprocs"));
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>())
        .filter(|r| r[gi] == gpu)
        .filter(|r| {
            let t: f64 = r[ti].parse().expect("t");
            (from..=to).contains(&t)
        })
        .collect();
    let mut all = rows.clone();
    if let Some((last_s, times)) = repeat_last_s {
        let tail: Vec<&Vec<String>> = rows
            .iter()
            .filter(|r| r[ti].parse::<f64>().expect("t") >= to - last_s)
            .collect();
        for k in 1..=times {
            for r in &tail {
                let mut r = (*r).clone();
                let t: f64 = r[ti].parse().expect("t");
                r[ti] = format!("{:.4}", t + last_s * f64::from(k));
                all.push(r);
            }
        }
    }
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let mut out = format!("{},processes,pods\n", header.join(","));
    for mut r in all {
        let t: f64 = r[ti].parse().expect("t");
        r[gi] = "0".into();
        r[ei] = String::new();
        let (processes, pods) = cells(t);
        if processes == "[]" {
            r[ni] = "0".into();
        }
        let pods = if pods.is_empty() { pods } else { quote(&pods) };
        let _ = writeln!(out, "{},{},{}", r.join(","), quote(&processes), pods);
    }
    out
}

fn rank(pid: u32, rank: u32, key: &str) -> String {
    format!(
        r#"[{{"pid":{pid},"name":"python","rank":{rank},"local_rank":0,"world_size":2,"job_key":"{key}"}}]"#
    )
}

/// An agent replaying `trace` as `host`, serving /metrics on `port`.
fn agent(trace: &Path, host: &str, port: u16) -> Server {
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_gpuslack"))
            .args(["run", "--replay"])
            .arg(trace)
            .args(["--speed", &SPEED.to_string(), "--linger-s", "150"])
            .args(["--prometheus", &format!("127.0.0.1:{port}")])
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env("OTEL_RESOURCE_ATTRIBUTES", format!("host.name={host}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent starts"),
    );
    server
}

/// The firing alerts named `name`, as label maps.
fn firing(prom: u16, name: &str) -> Vec<serde_json::Value> {
    let q = format!("ALERTS{{alertname=\"{name}\",alertstate=\"firing\"}}");
    prometheus_query(prom, &q)["data"]["result"]
        .as_array()
        .map(|r| r.iter().map(|s| s["metric"].clone()).collect())
        .unwrap_or_default()
}

#[test]
fn four_nodes_two_jobs_a_hung_job_names_its_culprit_and_a_dead_rank_is_reported() {
    let dir = temp_dir("fleet");
    let hang_key = "10.0.0.1:29500";
    let (from, to) = (HANG_T0 - LEAD_S, HANG_T1);
    let hang = |gpu: &str, pid: u32, r: u32| {
        node_trace(gpu, from, to, Some((20.0, 3)), &|_| {
            (rank(pid, r, hang_key), String::new())
        })
    };
    let pods = r#"[{"pod":"trainer-1","namespace":"vision","container":"trainer"}]"#;
    let (b_from, b_to) = (1796025906.35, 1796025963.5);
    let died_at = b_from + 20.0;
    let traces = [
        ("node-a", hang("0", 4100, 0)),
        ("node-b", hang("1", 4200, 1)),
        (
            "node-c",
            node_trace("0", b_from, b_to, None, &|_| {
                (
                    rank(5100, 0, "run-b"),
                    pods.replace("trainer-1", "trainer-0"),
                )
            }),
        ),
        (
            "node-d",
            node_trace("1", b_from, b_to, None, &|t| {
                let p = if t < died_at {
                    rank(5200, 1, "run-b")
                } else {
                    "[]".to_string()
                };
                (p, pods.to_string())
            }),
        ),
    ];
    let ports: Vec<u16> = traces.iter().map(|_| free_port()).collect();
    // The rules as deployed, their `for:` scaled to the replay's speed.
    let rules = std::fs::read_to_string(repo("deploy/prometheus/gpuslack-jobs.yml"))
        .expect("rules")
        .replace("for: 1m", "for: 30s")
        .replace("for: 30s\n        labels: { severity: critical }\n        annotations:\n          summary: \"Rank {{ $labels.gpuslack_job_rank }} of job", "for: 15s\n        labels: { severity: critical }\n        annotations:\n          summary: \"Rank {{ $labels.gpuslack_job_rank }} of job");
    assert!(
        rules.contains("for: 15s"),
        "the RankDied rule's `for:` was scaled"
    );
    std::fs::write(dir.join("gpuslack-jobs.yml"), rules).expect("rules copy");
    let targets: Vec<String> = ports.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    let (_prometheus, prom_port) = common::start_prometheus_with(
        &dir,
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - gpuslack-jobs.yml\nscrape_configs:\n  - job_name: gpuslack\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    );
    let mut agents = Vec::new();
    let start = Instant::now();
    let start_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    for ((host, trace), port) in traces.iter().zip(&ports) {
        let path = dir.join(format!("{host}.csv"));
        std::fs::write(&path, trace).expect("trace");
        agents.push(agent(&path, host, *port));
    }
    for port in &ports {
        wait_for_port(*port, "an agent's /metrics");
    }
    let instance = |host: &str| {
        let i = traces.iter().position(|(h, _)| *h == host).expect("host");
        format!("127.0.0.1:{}", ports[i])
    };
    let replay_s = || start.elapsed().as_secs_f64() * SPEED;
    let (mut hung_at, mut culprit_at, mut died_at_alert) = (None, None, None);
    let mut culprits = Vec::new();
    let mut dead = Vec::new();
    while start.elapsed() < Duration::from_secs(110)
        && (hung_at.is_none() || culprit_at.is_none() || died_at_alert.is_none())
    {
        std::thread::sleep(Duration::from_millis(500));
        if hung_at.is_none() && !firing(prom_port, "GpuslackJobHung").is_empty() {
            hung_at = Some(replay_s());
        }
        if culprit_at.is_none() {
            culprits = firing(prom_port, "GpuslackJobHangCulprit");
            if !culprits.is_empty() {
                culprit_at = Some(replay_s());
            }
        }
        if died_at_alert.is_none() {
            dead = firing(prom_port, "GpuslackJobRankDied");
            if !dead.is_empty() {
                died_at_alert = Some(replay_s());
            }
        }
    }
    // Each node says who it is: host.name reaches target_info.
    let hosts = prometheus_query(prom_port, "count by (host_name) (target_info)");
    let hosts: std::collections::BTreeSet<String> = hosts["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["metric"]["host_name"].as_str().map(String::from))
        .collect();
    // And each rank's identity, from its trace's processes column, reaches Prometheus.
    let ranks = prometheus_query(
        prom_port,
        &format!("gpuslack_job_info{{gpuslack_job_id=\"torch:{hang_key}\",gpuslack_job_world_size=\"2\"}}"),
    );
    let ranks: std::collections::BTreeSet<(String, String)> = ranks["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let l = |k: &str| r["metric"][k].as_str().unwrap_or_default().to_string();
            (l("instance"), l("gpuslack_job_rank"))
        })
        .collect();
    // When the rule's condition first held (before its `for:`), in replay time.
    let first = prometheus_query(
        prom_port,
        &format!("min_over_time(timestamp(gpuslack_job:hung{{gpuslack_job_id=\"torch:{hang_key}\"}} == 1)[3m:1s])"),
    );
    let condition_at = first["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse::<f64>().ok())
        .map(|t| (t - start_unix) * SPEED);
    eprintln!("gpuslack_job:hung first held at replay {condition_at:?} s");
    eprintln!(
        "hang began at replay {LEAD_S} s; GpuslackJobHung fired at replay {hung_at:?} s, the culprit at {culprit_at:?} s; the rank died at replay 20 s, GpuslackJobRankDied fired at {died_at_alert:?} s"
    );
    assert_eq!(
        hosts,
        ["node-a", "node-b", "node-c", "node-d"]
            .map(String::from)
            .into(),
        "target_info names each node"
    );
    assert_eq!(
        ranks,
        [
            (instance("node-a"), "0".to_string()),
            (instance("node-b"), "1".to_string())
        ]
        .into(),
        "the hung job's ranks"
    );
    let hung_at = hung_at.expect("GpuslackJobHung fired");
    assert!(
        hung_at - LEAD_S <= 90.0,
        "the hang alert came {} s after the hang began",
        hung_at - LEAD_S
    );
    let names = |a: &serde_json::Value, k: &str| a[k].as_str().unwrap_or_default().to_string();
    assert!(
        culprits
            .iter()
            .any(|c| names(c, "instance") == instance("node-b")
                && names(c, "gpuslack_job_rank") == "1"
                && names(c, "gpuslack_job_id") == format!("torch:{hang_key}")),
        "the culprit is rank 1 on node-b: {culprits:?}"
    );
    assert!(
        culprits
            .iter()
            .all(|c| names(c, "instance") != instance("node-a")),
        "the spinning rank is no culprit: {culprits:?}"
    );
    assert!(
        dead.iter()
            .any(|d| names(d, "instance") == instance("node-d")
                && names(d, "gpuslack_job_rank") == "1"
                && names(d, "gpuslack_job_id") == "torch:run-b"
                && names(d, "gpuslack_culprit") == "allocated_idle"),
        "the dead rank is reported: {dead:?}"
    );
    // The hang alert's own description names the culprit too.
    let alerts = Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{prom_port}/api/v1/alerts")])
        .output()
        .expect("curl");
    let alerts: serde_json::Value = serde_json::from_slice(&alerts.stdout).unwrap_or_default();
    let description = alerts["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| {
            a["labels"]["alertname"] == "GpuslackJobHung"
                && a["labels"]["gpuslack_job_id"] == format!("torch:{hang_key}").as_str()
        })
        .and_then(|a| a["annotations"]["description"].as_str())
        .unwrap_or_default()
        .to_string();
    let named = format!("{} GPU 0 rank 1 (not_waiting)", instance("node-b"));
    assert!(description.contains(&named), "{description}");
    assert!(!description.contains(&instance("node-a")), "{description}");
    drop(agents);
}
