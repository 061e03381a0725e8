//! What each metric set costs a backend, counted on what really leaves the agent: the samples
//! of one Prometheus scrape and the points of one OTLP export (the Rotel collector), per GPU,
//! without the agent's own metrics (`gpuslack.agent.*`, a node's, not a GPU's), on two
//! recordings:
//! - `h200-diagnose-job`: one job holds the H200 through idle_held, launch-bound, compute-bound
//!   and input-starved phases (and nobody before and after it);
//! - the churn recording: the same 40 s with 28 owners passing through the GPU, one after
//!   another (a new process every 1.4 s: an owner or two a window), the worst churn a window
//!   can see.
//!
//! The bounds are docs/EXPORT.md's ("What it costs"): lean ≤ 30 a GPU with one owner and ≤ 45
//! under churn, the Datadog preset ≤ 25 custom metrics (its tag sets) a GPU with one owner.
//! `cargo test --test series -- --nocapture` prints the counts the table there holds.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{
    fixture_samples, free_port, read_collected, replay_run_of, repo, scrape_settled, serve_replay,
    start_rotel, temp_dir,
};
use serde_json::Value;

/// Owners in the churn recording.
const OWNERS: usize = 28;

/// `h200-diagnose-job` with its `processes` column rewritten: 28 owners, each holding the GPU
/// for an equal share of the recording, in turn (the facts file goes beside it).
fn churn_trace(dir: &Path) -> PathBuf {
    let text =
        std::fs::read_to_string(fixture_samples("h200-diagnose-job")).expect("the recording");
    let mut lines = text.lines();
    let header = lines.next().expect("a header");
    let columns: Vec<&str> = header.split(',').collect();
    let processes = columns
        .iter()
        .position(|c| *c == "processes")
        .expect("a processes column");
    assert_eq!(
        columns.len(),
        processes + 2,
        "processes, then pods, end the row"
    );
    let rows: Vec<&str> = lines.collect();
    let t = |row: &str| -> f64 {
        row.split(',')
            .next()
            .and_then(|c| c.parse().ok())
            .expect("t")
    };
    let (t0, t1) = (t(rows[0]), t(rows[rows.len() - 1]));
    let share = (t1 - t0) / OWNERS as f64;
    let mut out = format!("{header}\n");
    for row in &rows {
        // The cells before `processes` are plain; the row's last two cells are the process
        // list (quoted JSON, empty on rows that did not read it) and the pods.
        let plain: Vec<&str> = row.splitn(processes + 1, ',').collect();
        let rest = plain[processes];
        let read = !rest.starts_with(',');
        let k = (((t(row) - t0) / share) as usize).min(OWNERS - 1);
        let cell = if read {
            format!(
                r#""[{{""pid"":{},""name"":""train"",""pgid"":{}}}]""#,
                1000 + k,
                1000 + k
            )
        } else {
            String::new()
        };
        out.push_str(&plain[..processes].join(","));
        out.push(',');
        out.push_str(&cell);
        out.push_str(",\n");
    }
    let path = dir.join("churn.csv");
    std::fs::write(&path, out).expect("trace");
    std::fs::copy(
        repo("tests/fixtures/h200-diagnose-job/samples.facts.json"),
        dir.join("churn.facts.json"),
    )
    .expect("facts");
    path
}

/// The GPU metrics' samples of one scrape, per `gpuslack_gpu_index`.
fn per_gpu_of_scrape(text: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() || line.starts_with("target_info") {
            continue;
        }
        if line.starts_with("gpuslack_agent_") {
            continue;
        }
        // gpuslack's series name the GPU by `gpuslack_gpu_index`, dcgm-exporter's by `gpu`.
        let gpu = line
            .split("gpuslack_gpu_index=\"")
            .nth(1)
            .or_else(|| line.split(",gpu=\"").nth(1))
            .or_else(|| line.split("{gpu=\"").nth(1))
            .and_then(|r| r.split('"').next())
            .unwrap_or_else(|| panic!("a GPU sample without its index: {line}"));
        *out.entry(gpu.to_string()).or_default() += 1;
    }
    out
}

/// The GPU series per GPU of a scrape once the replay is done (the windows produced stand still
/// for three scrapes); the scrape's text too.
fn scraped(trace: &str, extra: &[&str]) -> (BTreeMap<String, usize>, String) {
    let port = free_port();
    let _agent = serve_replay(trace, port, 30, extra);
    let text = scrape_settled(port, 3);
    (per_gpu_of_scrape(&text), text)
}

/// The GPU points per GPU of the one export a replay makes (an interval longer than the run:
/// only the final flush exports), with the records.
fn exported(
    trace: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (BTreeMap<String, usize>, Vec<Value>) {
    let dir = temp_dir(&format!("series-otlp-{}", free_port()));
    let (_rotel, grpc, http, collected) = start_rotel(&dir);
    let endpoint = if extra.contains(&"--preset") {
        format!("http://127.0.0.1:{http}")
    } else {
        format!("http://127.0.0.1:{grpc}")
    };
    let mut args = vec![
        "--speed",
        "0",
        "--otlp-endpoint",
        &endpoint,
        "--export-interval-ms",
        "600000",
        "--no-otlp-logs",
    ];
    args.extend_from_slice(extra);
    let run = replay_run_of(trace, &args, env);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let records = read_collected(&collected, false);
    let mut out = BTreeMap::new();
    for r in records.iter().filter(|r| r["signal"] == "metric") {
        let name = r["name"].as_str().unwrap_or_default();
        if name.starts_with("gpuslack.agent.") {
            continue;
        }
        for p in r["points"].as_array().into_iter().flatten() {
            let attributes = &p["attributes"];
            let gpu = attributes["gpuslack.gpu.index"]
                .as_str()
                .or_else(|| attributes["gpu"].as_str())
                .unwrap_or_else(|| panic!("{name}: a point without its GPU: {p}"));
            *out.entry(gpu.to_string()).or_default() += 1;
        }
    }
    (out, records)
}

fn most(per_gpu: &BTreeMap<String, usize>) -> usize {
    per_gpu.values().copied().max().unwrap_or(0)
}

/// The counts of one set on both recordings, scraped and exported, printed for the docs.
struct Counts {
    job_scrape: usize,
    job_otlp: usize,
    churn_scrape: usize,
    churn_otlp: usize,
}

fn counts(set: &str, extra: &[&str], env: &[(&str, &str)]) -> Counts {
    let dir = temp_dir(&format!("series-{set}"));
    let job = fixture_samples("h200-diagnose-job");
    let churn = churn_trace(&dir).display().to_string();
    let flags: Vec<&str> = ["--metrics", set]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let (job_scrape, _) = scraped(&job, &flags);
    let (churn_scrape, _) = scraped(&churn, &flags);
    let (job_otlp, _) = exported(&job, &flags, env);
    let (churn_otlp, _) = exported(&churn, &flags, env);
    for (what, n) in [
        ("h200-diagnose-job scrape", &job_scrape),
        ("h200-diagnose-job OTLP", &job_otlp),
        ("churn scrape", &churn_scrape),
        ("churn OTLP", &churn_otlp),
    ] {
        assert_eq!(n.len(), 1, "{set}, {what}: one GPU: {n:?}");
        println!("series per GPU, {set}, {what}: {}", most(n));
    }
    Counts {
        job_scrape: most(&job_scrape),
        job_otlp: most(&job_otlp),
        churn_scrape: most(&churn_scrape),
        churn_otlp: most(&churn_otlp),
    }
}

#[test]
fn lean_is_at_most_30_series_a_gpu_with_one_owner_and_45_under_churn() {
    let c = counts("lean", &[], &[]);
    assert!(
        c.job_scrape <= 30 && c.job_otlp <= 30,
        "one owner: {} scraped, {} exported",
        c.job_scrape,
        c.job_otlp
    );
    assert!(
        c.churn_scrape <= 45 && c.churn_otlp <= 45,
        "28 owners: {} scraped, {} exported",
        c.churn_scrape,
        c.churn_otlp
    );
    // Not a trivially small set: the fleet views are there.
    assert!(c.job_scrape >= 15, "{}", c.job_scrape);
}

#[test]
fn the_lean_scrape_has_the_fleet_views_and_no_zero_that_never_moved() {
    let (_, text) = scraped(
        &fixture_samples("h200-diagnose-job"),
        &["--metrics", "lean"],
    );
    let names: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    for name in [
        "gpuslack_diagnosis_ratio",
        "gpuslack_efficiency_ratio",
        "hw_power_watts",
        "hw_energy_joules_total",
        "gpuslack_sm_activity_ratio",
        "gpuslack_dram_activity_ratio",
        "hw_gpu_utilization_ratio",
        "hw_gpu_memory_usage_bytes",
        "hw_temperature_celsius",
        "hw_status",
        "gpuslack_diagnosis_time_seconds_total",
    ] {
        assert!(names.contains(name), "{name} missing: {names:?}");
    }
    // A one-hot of nine is one series; read and all-zero health counts are none.
    let verdicts = text
        .lines()
        .filter(|l| l.starts_with("gpuslack_diagnosis_ratio{"))
        .count();
    assert_eq!(verdicts, 1, "{text}");
    for absent in [
        "gpuslack_ecc_errors",
        "gpuslack_xid_last",
        "hw_errors_total",
    ] {
        assert!(!names.contains(absent), "{absent} is all zeros: {text}");
    }
    // The confidence rides on the verdict's one series.
    assert!(text.contains("gpuslack_diagnosis_confidence=\""), "{text}");
}

#[test]
fn full_is_todays_table() {
    let c = counts("full", &[], &[]);
    // Today's bound (docs/EXPORT.md, "Series budget"), and far more than the lean set.
    for n in [c.job_scrape, c.job_otlp, c.churn_scrape, c.churn_otlp] {
        assert!((78..=369).contains(&n), "{n}");
    }
}

#[test]
fn dcgm_is_dcgm_exporters_fields_and_the_verdict() {
    let c = counts("dcgm", &[], &[]);
    // 38 fields, of which the H200's recording lacks the fan (an SXM board has none) and an
    // NVLink (one GPU: no NVLink rates), one verdict series, the efficiency, the headroom, the
    // job, and the verdict time per owner: whatever the churn, at most the owner-series bound
    // more (docs/EXPORT.md, "What it costs").
    for n in [c.job_scrape, c.job_otlp] {
        assert!((38..=46).contains(&n), "{n}");
    }
    // docs/EXPORT.md's bound whatever the churn: 38 fields, 4 gauges, ≤ 3 owners' verdict
    // times of ≤ 10 classes.
    for n in [c.churn_scrape, c.churn_otlp] {
        assert!((38..=72).contains(&n), "{n}");
    }
}

#[test]
fn the_datadog_preset_sends_at_most_25_custom_metrics_a_gpu_with_delta_counters() {
    // The tests' helpers name the full set in the environment, which is above the preset.
    let env = [("DD_API_KEY", "not-a-key"), ("GPUSLACK_METRICS", "")];
    let (per_gpu, records) = exported(
        &fixture_samples("h200-diagnose-job"),
        &["--preset", "datadog"],
        &env,
    );
    println!(
        "series per GPU, datadog preset, h200-diagnose-job OTLP: {}",
        most(&per_gpu)
    );
    assert!(most(&per_gpu) <= 25, "{per_gpu:?}");
    // Counters go out as deltas, which Datadog's intake wants.
    let sums: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "Sum" && r["monotonic"] == true)
        .collect();
    assert!(!sums.is_empty());
    for r in sums {
        assert!(
            r["temporality"]
                .as_str()
                .is_some_and(|t| t.to_lowercase().contains("delta")),
            "{}: {}",
            r["name"],
            r["temporality"]
        );
    }
    // What the monitors in deploy/datadog read is there.
    let names: std::collections::BTreeSet<&str> =
        records.iter().filter_map(|r| r["name"].as_str()).collect();
    for name in [
        "gpuslack.diagnosis",
        "gpuslack.efficiency",
        "hw.power",
        "gpuslack.power.tdp",
        "hw.temperature",
        "gpuslack.diagnosis.time",
        "gpuslack.memory.swing",
        "hw.gpu.memory.limit",
    ] {
        assert!(names.contains(name), "{name} missing: {names:?}");
    }
    let c = counts("datadog", &[], &[]);
    assert!(
        c.job_scrape <= 25 && c.job_otlp <= 25,
        "{} {}",
        c.job_scrape,
        c.job_otlp
    );
    // And with 28 owners through the GPU: one export's tag sets.
    assert!(
        c.churn_scrape <= 25 && c.churn_otlp <= 25,
        "{} {}",
        c.churn_scrape,
        c.churn_otlp
    );
}

#[test]
fn run_usage_prints_the_series_per_gpu_of_the_set() {
    let out = replay_run_of(
        &fixture_samples("h200-diagnose-job"),
        &["--speed", "0", "--usage", "--metrics", "lean"],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("series per GPU (lean metric set): "))
        .unwrap_or_else(|| panic!("no series line: {text}"));
    let n: usize = line
        .trim_start_matches("series per GPU (lean metric set): ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!((15..=30).contains(&n), "{line}");
    let full = replay_run_of(
        &fixture_samples("h200-diagnose-job"),
        &["--speed", "0", "--usage", "--metrics", "full"],
        &[],
    );
    let text = String::from_utf8_lossy(&full.stdout);
    assert!(
        text.contains("series per GPU (full metric set): "),
        "{text}"
    );
}

#[test]
fn a_bad_selection_is_an_error_that_names_it() {
    for (args, want) in [
        (
            vec!["--metrics", "laen"],
            "--metrics`: unknown metric set \"laen\" (did you mean \"lean\"?)",
        ),
        (
            vec!["--metrics-include", "hw.powr"],
            "unknown metric \"hw.powr\" (did you mean \"hw.power\"?)",
        ),
    ] {
        let mut all = vec!["--speed", "0"];
        all.extend(args);
        let out = replay_run_of(&fixture_samples("h200-diagnose-job"), &all, &[]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{err}");
    }
    let every: String = gpuslack_receiver::export::catalogue::ALL
        .iter()
        .chain(&gpuslack_receiver::export::catalogue::DCGM_FIELDS)
        .map(|d| d.name)
        .collect::<Vec<_>>()
        .join(",");
    let out = replay_run_of(
        &fixture_samples("h200-diagnose-job"),
        &["--speed", "0"],
        &[
            ("GPUSLACK_METRICS", "dcgm"),
            ("GPUSLACK_METRICS_EXCLUDE", &every),
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("selects no metric"), "{err}");
}

/// Every metric name in a Datadog query (`avg:gpuslack.efficiency{*} by {host}` →
/// `gpuslack.efficiency`).
fn datadog_metrics(query: &str) -> Vec<String> {
    query
        .split([':', '(', ')', ',', ' '])
        .filter(|part| part.contains('{'))
        .filter_map(|part| part.split('{').next())
        .filter(|m| m.starts_with("hw.") || m.starts_with("gpuslack."))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_datadog_set_holds_every_metric_the_monitors_read() {
    use gpuslack_receiver::export::selection::{MetricSet, Selection};
    let datadog = Selection::new(MetricSet::Datadog, &[], &[]).expect("the set");
    let text = std::fs::read_to_string(repo("deploy/datadog/monitors.json")).expect("monitors");
    let monitors: Value = serde_json::from_str(&text).expect("JSON");
    let mut read = 0;
    for m in monitors.as_array().expect("a list") {
        let query = m["query"].as_str().expect("a query");
        for metric in datadog_metrics(query) {
            read += 1;
            assert!(
                metric.starts_with("gpuslack.agent.") || datadog.has(&metric),
                "{metric} ({query}) is not in the datadog set"
            );
        }
    }
    assert!(read >= 15, "{read} metrics read");
}
