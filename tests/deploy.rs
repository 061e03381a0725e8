//! What an SRE deploys, checked with the real tools: the Prometheus alert rules with
//! `promtool check rules` and `promtool test rules`; every Grafana panel and alert query against
//! what `gpuslack run --replay` serves on /metrics and against a real Prometheus, which must
//! accept it; the Datadog dashboard and monitors against the OTLP catalogue; the systemd unit
//! with `systemd-analyze verify`; the Kubernetes manifests parsed and checked for what a
//! DaemonSet needs (tests/support/check_manifests.py); the container build file.
//!
//! `scripts/test.sh` installs Prometheus (with promtool), systemd-analyze and PyYAML.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    free_port, prometheus_query, promtool, repo, serve_replay, start_prometheus, temp_dir, tool,
};
use serde_json::Value;

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn the_alert_rules_check_and_pass_their_unit_tests() {
    let dir = repo("deploy/prometheus");
    let check = run_ok(
        Command::new(promtool())
            .args(["check", "rules", "gpuslack-rules.yml"])
            .current_dir(&dir),
    );
    assert!(check.contains("SUCCESS: 12 rules found"), "{check}");
    let test = run_ok(
        Command::new(promtool())
            .args(["test", "rules", "gpuslack-rules.test.yml"])
            .current_dir(&dir),
    );
    assert!(test.contains("SUCCESS"), "{test}");
}

/// The metric names a PromQL expression reads: identifiers outside label matchers and outside
/// `by`/`without`/`on`/`ignoring` groups, minus functions, keywords and recording rules (`a:b`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = String::new();
    let mut depth = 0;
    for c in expr.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ if depth > 0 => {}
            _ => rest.push(c),
        }
    }
    // Drop quoted strings (label values outside braces do not occur, templates might).
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    for c in rest.chars().chain([' ']) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            if c == '(' {
                words.push("(".into());
            } else if c == ')' {
                words.push(")".into());
            }
        }
    }
    let mut grouping = false;
    for (i, w) in words.iter().enumerate() {
        if [
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
        ]
        .contains(&w.as_str())
        {
            grouping = words.get(i + 1).is_some_and(|n| n == "(");
            continue;
        }
        if w == ")" {
            grouping = false;
            continue;
        }
        if grouping || w.contains(':') {
            continue;
        }
        if w.starts_with("hw_") || w.starts_with("gpuslack_") {
            out.insert(w.clone());
        }
    }
    out
}

/// Grafana's variables, as a dashboard would fill them in.
fn fill_in(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__range", "1h")
        .replace("$instance", ".*")
}

fn grafana_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo("deploy/grafana/gpuslack.json")).expect("dashboard");
    let dash: Value = serde_json::from_str(&text).expect("the Grafana dashboard is JSON");
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut out = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("title").to_string();
        for t in p["targets"].as_array().expect("targets") {
            out.push((title.clone(), t["expr"].as_str().expect("expr").to_string()));
        }
    }
    out
}

fn rule_queries() -> Vec<(String, String)> {
    // The rule file is YAML; its `expr:` lines are one-line PromQL.
    let text =
        std::fs::read_to_string(repo("deploy/prometheus/gpuslack-rules.yml")).expect("rules");
    let mut out = Vec::new();
    let mut name = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(n) = line
            .strip_prefix("- alert: ")
            .or(line.strip_prefix("- record: "))
        {
            name = n.to_string();
        } else if let Some(expr) = line.strip_prefix("expr: ") {
            out.push((name.clone(), expr.to_string()));
        }
    }
    assert_eq!(out.len(), 12, "{out:?}");
    out
}

#[test]
fn every_dashboard_and_alert_query_reads_served_metrics_and_prometheus_accepts_it() {
    // A real H200 recording with the health columns, served as the agent serves it.
    let dir = temp_dir("deploy-queries");
    let agent_port = free_port();
    let (_prometheus, prom_port) = start_prometheus(&dir, agent_port);
    let fixture = repo("tests/fixtures/h200-health/samples.csv");
    let _agent = serve_replay(&fixture.display().to_string(), agent_port, 30, &[]);
    let scrape = |path: &str| -> String {
        let out = Command::new("curl")
            .args(["-s", &format!("http://127.0.0.1:{agent_port}{path}")])
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The replay is done once the last window's verdict is out.
    let started = Instant::now();
    let mut text = scrape("/metrics");
    while !text.contains("gpuslack_diagnosis_ratio") && started.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(200));
        text = scrape("/metrics");
    }
    let served: BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next().map(String::from))
        .collect();
    for name in [
        "hw_errors_total",
        "hw_status",
        "gpuslack_ecc_errors",
        "gpuslack_xid_last",
    ] {
        assert!(served.contains(name), "{name} not served:\n{served:?}");
    }
    let queries: Vec<(String, String)> = grafana_queries()
        .into_iter()
        .chain(rule_queries())
        .collect();
    for (what, expr) in &queries {
        let names = metric_names(expr);
        // An alert over recording rules only (`gpuslack:…`) reads their metrics through them.
        assert!(
            !names.is_empty() || expr.contains("gpuslack:"),
            "{what}: no metric in {expr}"
        );
        for name in &names {
            assert!(
                served.contains(name),
                "{what}: {name} is not served by gpuslack run --replay"
            );
        }
    }
    // Let Prometheus scrape twice, then ask it every query.
    let started = Instant::now();
    while prometheus_query(prom_port, "count(gpuslack_diagnosis_ratio)")["data"]["result"]
        .as_array()
        .is_none_or(|r| r.is_empty())
        && started.elapsed() < Duration::from_secs(15)
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    for (what, expr) in &queries {
        let answer = prometheus_query(prom_port, &fill_in(expr));
        assert_eq!(answer["status"], "success", "{what}: {expr}\n{answer}");
    }
    // The panel that shows the lie has data: GPU-Util and SM activity side by side.
    let lie = prometheus_query(
        prom_port,
        "gpuslack_sm_activity_ratio and on (hw_id) hw_gpu_utilization_ratio{hw_gpu_task=\"general\"}",
    );
    assert!(
        lie["data"]["result"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "{lie}"
    );
}

#[test]
fn the_datadog_dashboard_and_monitors_name_exported_metrics() {
    let names: BTreeSet<&str> = gpuslack_receiver::export::catalogue::ALL
        .into_iter()
        .chain(gpuslack_receiver::export::catalogue::AGENT)
        .map(|d| d.name)
        .collect();
    let mut seen = 0;
    for file in [
        "deploy/datadog/dashboard.json",
        "deploy/datadog/monitors.json",
    ] {
        let text = std::fs::read_to_string(repo(file)).expect(file);
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut queries = Vec::new();
        collect_queries(&v, &mut queries);
        assert!(queries.len() >= 5, "{file}: {} queries", queries.len());
        for q in queries {
            // `avg:gpuslack.efficiency{*} by {host}` → gpuslack.efficiency
            for part in q.split([':', '(', ')', ',', ' ']) {
                if let Some(metric) = part.split('{').next().filter(|_| part.contains('{')) {
                    if metric.starts_with("hw.") || metric.starts_with("gpuslack.") {
                        assert!(
                            names.contains(metric),
                            "{file}: {metric} is not exported: {q}"
                        );
                        seen += 1;
                    }
                }
            }
        }
    }
    assert!(seen >= 10, "{seen} metric references");
}

fn collect_queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                if k == "query" || k == "q" {
                    if let Some(s) = x.as_str() {
                        out.push(s.to_string());
                    }
                }
                collect_queries(x, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|x| collect_queries(x, out)),
        _ => {}
    }
}

#[test]
fn the_systemd_unit_verifies() {
    let dir = temp_dir("systemd");
    let unit = std::fs::read_to_string(repo("deploy/systemd/gpuslack.service")).expect("unit");
    assert!(unit.contains("ExecStart=/usr/local/bin/gpuslack run"));
    assert!(unit.contains("DynamicUser=yes") && unit.contains("RestartPreventExitStatus=69"));
    // /metrics and /healthz on loopback unless the environment file names another address.
    assert!(unit.contains("Environment=GPUSLACK_PROMETHEUS_LISTEN=127.0.0.1:9464"));
    assert!(unit.contains("--prometheus ${GPUSLACK_PROMETHEUS_LISTEN}"));
    assert!(
        !unit.contains("0.0.0.0"),
        "the unit listens on every interface"
    );
    // verify checks that ExecStart's binary exists: point it at the one just built.
    let local = unit.replace("/usr/local/bin/gpuslack", env!("CARGO_BIN_EXE_gpuslack"));
    let path = dir.join("gpuslack.service");
    std::fs::write(&path, local).expect("unit");
    let out = Command::new(tool("GPUSLACK_SYSTEMD_ANALYZE"))
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze runs");
    let text = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = text.lines().filter(|l| l.contains("gpuslack")).collect();
    assert!(out.status.success() && ours.is_empty(), "{text}");
}

#[test]
fn the_kubernetes_manifests_carry_what_a_daemonset_needs() {
    let out = Command::new(tool("GPUSLACK_PYTHON"))
        .arg(repo("tests/support/check_manifests.py"))
        .arg(repo("deploy/kubernetes/gpuslack.yaml"))
        .arg(repo("deploy/kubernetes/secret.example.yaml"))
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_container_build_is_multi_stage_and_not_root() {
    let text = std::fs::read_to_string(repo("deploy/container/Dockerfile")).expect("Dockerfile");
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    assert!(froms[0].ends_with(" AS build"), "{froms:?}");
    let user = text
        .lines()
        .rfind(|l| l.starts_with("USER "))
        .expect("a USER line");
    assert!(!user.contains("root") && !user.contains(" 0"), "{user}");
    assert!(text.contains("cargo build --release --locked"));
}

#[test]
fn metric_names_are_told_from_labels_and_functions() {
    let names = metric_names(
        "sum by (gpuslack_diagnosis_class) (increase(gpuslack_diagnosis_energy_joules_total{instance=~\".*\"}[1h])) / on (instance, hw_id) hw_power_watts and gpuslack:gpu_in_use == 1",
    );
    let expected: BTreeSet<String> = ["gpuslack_diagnosis_energy_joules_total", "hw_power_watts"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, expected);
}
