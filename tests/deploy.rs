//! What an SRE deploys, checked with the real tools: the Prometheus alert rules with
//! `promtool check rules` and `promtool test rules`; every Grafana panel and alert query against
//! what `gpuslack run --replay` serves on /metrics and against a real Prometheus, which must
//! accept it; the Datadog dashboard and monitors against the OTLP catalogue; the systemd unit
//! with `systemd-analyze verify`; the Kubernetes manifests parsed and checked for what a
//! DaemonSet needs (tests/support/check_manifests.py), and the agent run as the shipped
//! DaemonSet would run it; the container build file and its build script; the Kubernetes
//! kustomization rendered by `kubectl kustomize` and validated (kubernetes-validate), its
//! PrometheusRule against the rule files; the collector config. Every Grafana panel must
//! return data from a real Prometheus scraping `gpuslack run --replay`.
//!
//! `scripts/test.sh` installs Prometheus (with promtool), systemd-analyze, PyYAML, kubectl and
//! kubernetes-validate.

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
    assert!(check.contains("SUCCESS: 14 rules found"), "{check}");
    let test = run_ok(
        Command::new(promtool())
            .args(["test", "rules", "gpuslack-rules.test.yml"])
            .current_dir(&dir),
    );
    assert!(test.contains("SUCCESS"), "{test}");
}

/// The job and team rules (deploy/prometheus/gpuslack-jobs.yml): cost per verdict, the hung job
/// and its culprit, the dead rank, the straggler, each at its threshold (tests/fleet.rs runs
/// them live on four replayed nodes).
#[test]
fn the_job_rules_check_and_pass_their_unit_tests() {
    let dir = repo("deploy/prometheus");
    let check = run_ok(
        Command::new(promtool())
            .args(["check", "rules", "gpuslack-jobs.yml"])
            .current_dir(&dir),
    );
    assert!(check.contains("SUCCESS: 33 rules found"), "{check}");
    let test = run_ok(
        Command::new(promtool())
            .args(["test", "rules", "gpuslack-jobs.test.yml"])
            .current_dir(&dir),
    );
    assert!(test.contains("SUCCESS"), "{test}");
}

/// The example scrape job is named as the agent alerts select it (`up{job="gpuslack"}`),
/// keeps the DaemonSet's pods on their `metrics` port, and passes `promtool check config`
/// (with static targets in place of the Kubernetes discovery, which Debian's promtool lacks).
#[test]
fn the_example_scrape_job_is_the_job_the_agent_alerts_select() {
    let text = std::fs::read_to_string(repo("deploy/prometheus/prometheus.yml")).expect("config");
    let jobs: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- job_name: "))
        .collect();
    assert_eq!(jobs, ["gpuslack"], "{text}");
    let rules =
        std::fs::read_to_string(repo("deploy/prometheus/gpuslack-rules.yml")).expect("rules");
    assert!(
        rules.contains("up{job=\"gpuslack\"} == 0")
            && rules.contains("absent(up{job=\"gpuslack\"})")
    );
    assert!(text.contains("regex: gpuslack") && text.contains("regex: metrics"));
    let sd = "    kubernetes_sd_configs:\n      - role: pod\n        namespaces: { names: [gpuslack] }\n";
    assert!(text.contains(sd), "the pod discovery");
    let dir = temp_dir("scrape-config");
    std::fs::write(
        dir.join("prometheus.yml"),
        text.replace(
            sd,
            "    static_configs: [{ targets: ['127.0.0.1:9464'] }]\n",
        ),
    )
    .expect("config");
    // Every rule file `gpuslack fleet --from-rules` and the alerts need, each checked.
    let files: Vec<&str> = text
        .split("rule_files:\n")
        .nth(1)
        .expect("rule_files")
        .lines()
        .map_while(|l| l.trim().strip_prefix("- "))
        .collect();
    assert_eq!(
        files,
        [
            "gpuslack-rules.yml",
            "gpuslack-jobs.yml",
            "gpuslack-fleet-rules.yml"
        ]
    );
    for file in &files {
        std::fs::copy(repo(&format!("deploy/prometheus/{file}")), dir.join(file)).expect("rules");
    }
    let out = run_ok(
        Command::new(promtool())
            .args(["check", "config", "prometheus.yml"])
            .current_dir(&dir),
    );
    assert!(out.contains("SUCCESS"), "{out}");
    assert!(out.contains("SUCCESS: 3 rule files found"), "{out}");
    for file in &files {
        let checked = out
            .split(&format!("Checking {file}\n"))
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .unwrap_or_default();
        assert!(
            checked.contains("SUCCESS") && checked.contains("rules found"),
            "{file}: {out}"
        );
    }
    // The PodMonitor labels the node as the plain job does.
    let pod_monitor =
        std::fs::read_to_string(repo("deploy/kubernetes/podmonitor.yaml")).expect("PodMonitor");
    assert!(text
        .contains("source_labels: [__meta_kubernetes_pod_node_name]\n        target_label: node"));
    assert!(
        pod_monitor.contains(
            "relabelings:\n        - sourceLabels: [__meta_kubernetes_pod_node_name]\n          targetLabel: node"
        ),
        "{pod_monitor}"
    );
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
        .replace("$job", ".*")
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
    let out = rule_file_queries("deploy/prometheus/gpuslack-rules.yml");
    assert_eq!(out.len(), 14, "{out:?}");
    out
}

/// Every rule's name and expression in a rule file (YAML, whose `expr:` lines are one-line
/// PromQL).
fn rule_file_queries(path: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo(path)).expect("rules");
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
    out
}

/// The GPU-health recording as a pod on a GPU with a troubled history would give it: the
/// kubelet's pod on every row (the `pods` column `record` writes from PodResources), and over
/// its second half an Xid 79, a row remap pending and the software power cap among the clock
/// reasons. The recording itself has none of these (the H200 it was taken on is healthy, and
/// the agent ran outside Kubernetes); without them the pod, Xid, remap and throttle panels have
/// no series to show. Written to `dir`; the path.
fn troubled_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(repo("tests/fixtures/h200-health/samples.csv"))
        .expect("the health fixture");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|c| *c == name)
            .unwrap_or_else(|| panic!("no {name} column"))
    };
    let (clk, xid_events, xid_last, remap_pending) = (
        col("clk_reasons"),
        col("xid_events"),
        col("xid_last"),
        col("remap_pending"),
    );
    assert_eq!(
        header.last(),
        Some(&"processes"),
        "processes is the last column"
    );
    let rows: Vec<&str> = lines.collect();
    let pod = r#""[{""pod"":""trainer-0"",""namespace"":""ml"",""container"":""trainer""}]""#;
    let mut out = format!("{},pods\n", header.join(","));
    for (i, row) in rows.iter().enumerate() {
        // Every column but the last (processes, quoted JSON with commas) is a plain cell.
        let mut cells: Vec<String> = row.splitn(header.len(), ',').map(String::from).collect();
        if i >= rows.len() / 2 {
            cells[clk] = "0x4".into(); // SW power cap
            for (c, v) in [(xid_events, "1"), (xid_last, "79"), (remap_pending, "1")] {
                if !cells[c].is_empty() {
                    cells[c] = v.into();
                }
            }
        }
        out.push_str(&cells.join(","));
        out.push(',');
        out.push_str(pod);
        out.push('\n');
    }
    let path = dir.join("troubled.csv");
    std::fs::write(&path, out).expect("trace");
    let facts = repo("tests/fixtures/h200-health/samples.facts.json");
    std::fs::copy(facts, dir.join("troubled.facts.json")).expect("facts");
    path
}

#[test]
fn every_dashboard_and_alert_query_reads_served_metrics_and_every_panel_returns_data() {
    // A real H200 recording with the health columns, served as the agent serves it.
    let dir = temp_dir("deploy-queries");
    let agent_port = free_port();
    let (_prometheus, prom_port) = start_prometheus(&dir, agent_port);
    let fixture = troubled_trace(&dir);
    // The default metric set, lean: the dashboards and the rules read nothing else.
    let _agent = serve_replay(
        &fixture.display().to_string(),
        agent_port,
        60,
        &["--metrics", "lean"],
    );
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
    for name in ["hw_errors_total", "hw_status", "gpuslack_xid_last"] {
        assert!(served.contains(name), "{name} not served:\n{served:?}");
    }
    // ECC counts read and never above zero are no series in the lean set.
    assert!(!served.contains("gpuslack_ecc_errors"), "{served:?}");
    let queries: Vec<(String, String)> = grafana_queries()
        .into_iter()
        .chain(rule_queries())
        .collect();
    for (what, expr) in &queries {
        let names = metric_names(expr);
        // An alert over recording rules only (`gpuslack:…`) reads their metrics through them;
        // one over `up` reads Prometheus' own.
        assert!(
            !names.is_empty() || expr.contains("gpuslack:") || expr.contains("up{job="),
            "{what}: no metric in {expr}"
        );
        for name in &names {
            assert!(
                served.contains(name),
                "{what}: {name} is not served by gpuslack run --replay"
            );
        }
    }
    // Let Prometheus scrape a few times (rate() and increase() need two samples), then ask it
    // every query.
    let started = Instant::now();
    while prometheus_query(
        prom_port,
        "count_over_time(gpuslack_diagnosis_ratio[1m]) > 3",
    )["data"]["result"]
        .as_array()
        .is_none_or(|r| r.is_empty())
        && started.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    for (what, expr) in &queries {
        let answer = prometheus_query(prom_port, &fill_in(expr));
        assert_eq!(answer["status"], "success", "{what}: {expr}\n{answer}");
    }
    // Every query of every panel returns data: a panel that shows "No data" on a live agent is
    // a broken panel. No exception is needed with the trace above.
    let mut empty = Vec::new();
    for (panel, expr) in grafana_queries() {
        let answer = prometheus_query(prom_port, &fill_in(&expr));
        if answer["data"]["result"]
            .as_array()
            .is_none_or(|r| r.is_empty())
        {
            empty.push(format!("{panel}: {expr}"));
        }
    }
    assert!(
        empty.is_empty(),
        "panels without data:\n{}",
        empty.join("\n")
    );
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

/// Table and bar-chart panels show one value per series: Grafana renders them from an instant
/// query in table format, and shows nothing useful from a range query.
#[test]
fn table_and_bar_panels_use_instant_queries() {
    let text = std::fs::read_to_string(repo("deploy/grafana/gpuslack.json")).expect("dashboard");
    let dash: Value = serde_json::from_str(&text).expect("JSON");
    let mut checked = 0;
    for p in dash["panels"].as_array().expect("panels") {
        if !["table", "barchart"].contains(&p["type"].as_str().unwrap_or_default()) {
            continue;
        }
        for t in p["targets"].as_array().expect("targets") {
            assert_eq!(
                (&t["instant"], &t["range"], &t["format"]),
                (
                    &Value::Bool(true),
                    &Value::Bool(false),
                    &Value::from("table")
                ),
                "{}: {t}",
                p["title"]
            );
            checked += 1;
        }
    }
    assert!(checked >= 5, "{checked} table and bar targets");
}

/// Per-owner counters (docs/DEPLOY.md): every query takes increase()/rate() of the bare series
/// and aggregates after, never the other way round; an alert over a counter aggregates to one
/// series per GPU (or fewer), so an owner change neither resets it nor fires it twice.
#[test]
fn counter_queries_take_increase_per_series_and_then_sum_over_owners() {
    let jobs = rule_file_queries("deploy/prometheus/gpuslack-jobs.yml");
    assert_eq!(jobs.len(), 33, "{jobs:?}");
    let queries: Vec<(String, String)> = grafana_queries()
        .into_iter()
        .chain(rule_queries())
        .chain(jobs)
        .collect();
    let aggregations = ["sum", "max", "min", "avg", "count"];
    for (what, expr) in &queries {
        let compact: String = expr.chars().filter(|c| !c.is_whitespace()).collect();
        for f in ["increase(", "rate(", "irate(", "delta("] {
            for agg in aggregations {
                assert!(
                    !compact.contains(&format!("{f}{agg}("))
                        && !compact.contains(&format!("{f}{agg}by")),
                    "{what}: {f} over an aggregation: {expr}"
                );
            }
        }
        if compact.contains("increase(") || compact.contains("rate(") {
            assert!(
                compact.contains("sumby(") || compact.contains("sumwithout("),
                "{what}: a counter query that does not sum over owners: {expr}"
            );
        }
    }
}

/// The labels that name a GPU's owner on /metrics (its OTLP keys, sanitised): on the per-owner
/// counters, the process series and `gpuslack_job_info` only, never on a gauge (docs/EXPORT.md,
/// "Series budget").
fn owner_labels() -> Vec<String> {
    gpuslack_receiver::export::point::OWNER_KEYS
        .iter()
        .map(|k| k.replace('.', "_"))
        .collect()
}

/// The GPU-level gauges: every metric but the counters, the per-process series, the pod
/// assignments and the job info.
fn gpu_gauges() -> Vec<gpuslack_receiver::export::catalogue::MetricDef> {
    use gpuslack_receiver::export::catalogue::{self as c, Kind};
    let own = [
        c::PROCESS_SM,
        c::PROCESS_MEMORY,
        c::PROCESS_CPU,
        c::POD_ASSIGNMENT,
        c::JOB_INFO,
    ];
    c::ALL
        .into_iter()
        .filter(|d| d.kind != Kind::Counter && !own.contains(d))
        .collect()
}

/// Gauges name no owner, so no query may select or group one by an owner label: a query that
/// needs the owner of a gauge's GPU joins `gpuslack_job_info` on `hw_id`, or reads a per-owner
/// counter. A query written against the old labels would return nothing, silently.
#[test]
fn no_query_selects_a_gauge_by_its_owner() {
    let gauges: Vec<String> = gpu_gauges()
        .iter()
        .map(gpuslack_receiver::export::prometheus::prometheus_name)
        .collect();
    assert!(gauges.len() >= 30, "{gauges:?}");
    let owner_labels = owner_labels();
    let queries: Vec<(String, String)> = grafana_queries()
        .into_iter()
        .chain(rule_queries())
        .chain(rule_file_queries("deploy/prometheus/gpuslack-jobs.yml"))
        .chain(rule_file_queries(
            "deploy/prometheus/gpuslack-fleet-rules.yml",
        ))
        .collect();
    let mut joined = 0;
    for (what, expr) in &queries {
        let reads = metric_names(expr);
        let gauges_read: Vec<&String> = gauges.iter().filter(|g| reads.contains(*g)).collect();
        if gauges_read.is_empty() {
            continue;
        }
        // The selector of each gauge it reads names no owner label.
        for gauge in &gauges_read {
            for (i, _) in expr.match_indices(gauge.as_str()) {
                let rest = &expr[i + gauge.len()..];
                if let Some(selector) = rest.strip_prefix('{') {
                    let selector = &selector[..selector.find('}').unwrap_or(selector.len())];
                    for label in &owner_labels {
                        assert!(
                            !selector.contains(label),
                            "{what}: {gauge} selected by {label}: {expr}"
                        );
                    }
                }
            }
        }
        // An owner label in a query over a gauge comes from the job info it joins.
        if owner_labels.iter().any(|l| expr.contains(l.as_str())) {
            assert!(
                expr.contains("gpuslack_job_info"),
                "{what}: reads {gauges_read:?} by an owner label without joining gpuslack_job_info: {expr}"
            );
            joined += 1;
        }
    }
    // GpuHung, the ranks' waiting, working and busy share, and the job view's timeline.
    assert!(joined >= 5, "{joined} queries join a gauge to its owner");
    // Datadog has no joins: a monitor or widget over a gauge neither filters nor groups it by
    // an owner tag (a job's view reads the per-owner counters or the process series).
    let dd_gauges: Vec<&str> = gpu_gauges().iter().map(|d| d.name).collect();
    for (file, queries) in datadog_queries() {
        for q in queries {
            // `max:gpuslack.diagnosis{…} by {host,hw.id}`: each metric, its filter and grouping.
            for (i, _) in q.match_indices(':') {
                let tail = &q[i + 1..];
                let name: String = tail
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_')
                    .collect();
                if !dd_gauges.contains(&name.as_str()) {
                    continue;
                }
                let after = &tail[name.len()..];
                let filter_end = after.find('}').map_or(0, |e| e + 1);
                let mut scope = after[..filter_end].to_string();
                if let Some(by) = after[filter_end..].trim_start().strip_prefix("by {") {
                    scope.push_str(&by[..by.find('}').unwrap_or(by.len())]);
                }
                for tag in gpuslack_receiver::export::point::OWNER_KEYS {
                    assert!(!scope.contains(tag), "{file}: {name} scoped by {tag}: {q}");
                }
            }
        }
    }
}

/// The Xid alert pages only on the codes NVIDIA's catalog gives an action on the GPU or the
/// node (the rule's comment cites it): never on the application errors, and on the ones an SRE
/// must act on. The promtool tests check the behaviour on 79 and 13.
#[test]
fn the_xid_alert_names_only_actionable_codes() {
    let (_, expr) = rule_queries()
        .into_iter()
        .find(|(name, _)| name == "GpuXidError")
        .expect("GpuXidError");
    let codes: BTreeSet<u32> = expr
        .split("gpuslack_xid_last == ")
        .skip(1)
        .filter_map(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect();
    // One table: the codes the agent's Xid table (hw_health.rs) says need an operator.
    let table: BTreeSet<u32> = gpuslack_receiver::hw_health::operator_codes()
        .into_iter()
        .collect();
    assert_eq!(codes, table, "the rule and hw_health::XIDS disagree");
    for actionable in [48, 62, 64, 74, 79, 95, 119, 120, 140, 154] {
        assert!(
            codes.contains(&actionable),
            "Xid {actionable} missing: {codes:?}"
        );
    }
    // RESTART_APP (the job's bug) and IGNORE in the catalog.
    for application in [13, 31, 43, 45, 63, 68, 69, 92, 94] {
        assert!(
            !codes.contains(&application),
            "Xid {application} pages: {codes:?}"
        );
    }
    let rules =
        std::fs::read_to_string(repo("deploy/prometheus/gpuslack-rules.yml")).expect("rules");
    assert!(rules.contains("https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"));
    let doc = std::fs::read_to_string(repo("docs/DEPLOY.md")).expect("DEPLOY.md");
    for code in &codes {
        assert!(
            doc.contains(&format!("| {code} |")),
            "Xid {code} not in docs/DEPLOY.md's table"
        );
    }
}

#[test]
fn the_datadog_dashboard_and_monitors_name_exported_metrics() {
    let names: BTreeSet<&str> = gpuslack_receiver::export::catalogue::ALL
        .into_iter()
        .chain(gpuslack_receiver::export::catalogue::AGENT)
        .map(|d| d.name)
        .collect();
    let mut seen = 0;
    for (file, queries) in datadog_queries() {
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

/// Every query of the Datadog dashboard and monitors, by file.
fn datadog_queries() -> Vec<(&'static str, Vec<String>)> {
    [
        "deploy/datadog/dashboard.json",
        "deploy/datadog/monitors.json",
    ]
    .into_iter()
    .map(|file| {
        let text = std::fs::read_to_string(repo(file)).expect(file);
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut queries = Vec::new();
        collect_queries(&v, &mut queries);
        (file, queries)
    })
    .collect()
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
    assert!(
        unit.contains("ExecStart=/usr/local/bin/gpuslack run --config /etc/gpuslack/gpuslack.toml")
    );
    // An admin's own flags from the environment file, split into words.
    assert!(
        unit.contains("Environment=GPUSLACK_ARGS=\n")
            && unit
                .trim_end()
                .ends_with("[Install]\nWantedBy=multi-user.target")
    );
    assert!(unit
        .lines()
        .any(|l| l.starts_with("ExecStart=") && l.ends_with(" $GPUSLACK_ARGS")));
    let config = std::fs::read_to_string(repo("deploy/systemd/gpuslack.toml")).expect("config");
    assert!(config.contains("# preset = \"datadog\"") && !config.contains("0.0.0.0"));
    // No exit status is final (69, no NVML, least of all): the agent waits for its driver.
    assert!(unit.contains("DynamicUser=yes") && !unit.contains("RestartPreventExitStatus"));
    assert!(unit.contains("Restart=on-failure"));
    assert!(unit
        .lines()
        .any(|l| l.starts_with("ExecStart=") && l.contains(" --wait-for-driver ")));
    // /metrics and /healthz on loopback unless the environment file names another address.
    assert!(unit.contains("Environment=GPUSLACK_PROMETHEUS_LISTEN=127.0.0.1:9464"));
    assert!(unit.contains("--prometheus ${GPUSLACK_PROMETHEUS_LISTEN}"));
    assert!(
        !unit.contains("0.0.0.0"),
        "the unit listens on every interface"
    );
    // The preset and the health threshold come from the environment file.
    assert!(unit
        .contains("--unhealthy-after-failed-exports ${GPUSLACK_UNHEALTHY_AFTER_FAILED_EXPORTS}"));
    let env_file = std::fs::read_to_string(repo("deploy/systemd/gpuslack.env")).expect("env");
    assert!(env_file.contains("# GPUSLACK_PRESET=datadog"), "{env_file}");
    // systemd has no HTTP probe: the health-check timer asks /healthz and restarts on a 503.
    let check = std::fs::read_to_string(repo("deploy/systemd/gpuslack-healthcheck.service"))
        .expect("health check");
    assert!(
        check.contains("/healthz")
            && check.contains("systemctl --no-block restart gpuslack.service")
    );
    // Not Requisite= on an agent that may be between restarts: skipped, not failed.
    assert!(!check.lines().any(|l| l.starts_with("Requisite=")));
    assert!(check.contains("ExecCondition=/bin/systemctl is-active --quiet gpuslack.service"));
    let timer =
        std::fs::read_to_string(repo("deploy/systemd/gpuslack-healthcheck.timer")).expect("timer");
    assert!(
        timer.contains("PartOf=gpuslack.service") && timer.contains("WantedBy=gpuslack.service")
    );
    // verify checks that ExecStart's binary exists: point it at the one just built.
    let local = unit.replace("/usr/local/bin/gpuslack", env!("CARGO_BIN_EXE_gpuslack"));
    let path = dir.join("gpuslack.service");
    std::fs::write(&path, local).expect("unit");
    let mut paths = vec![path];
    for name in ["gpuslack-healthcheck.service", "gpuslack-healthcheck.timer"] {
        let p = dir.join(name);
        std::fs::copy(repo(&format!("deploy/systemd/{name}")), &p).expect("copy");
        paths.push(p);
    }
    let out = Command::new(tool("GPUSLACK_SYSTEMD_ANALYZE"))
        .arg("verify")
        .args(&paths)
        .output()
        .expect("systemd-analyze runs");
    let text = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = text.lines().filter(|l| l.contains("gpuslack")).collect();
    assert!(out.status.success() && ours.is_empty(), "{text}");
}

/// The health check's shell line, as systemd would run it (`$$` → `$`, `%%` → `%`), against
/// an agent whose /healthz is healthy: it must not restart anything. `systemctl` is a stub
/// that records its call; a 503 must call it.
#[test]
fn the_systemd_health_check_restarts_only_on_an_unhealthy_answer() {
    let dir = temp_dir("healthcheck");
    let unit = std::fs::read_to_string(repo("deploy/systemd/gpuslack-healthcheck.service"))
        .expect("health check");
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart=/bin/sh -c '"))
        .and_then(|l| l.strip_suffix('\''))
        .expect("ExecStart=/bin/sh -c '…'")
        .replace("$$", "$")
        .replace("%%", "%");
    let stub = dir.join("systemctl");
    std::fs::write(
        &stub,
        format!("#!/bin/sh\necho \"$@\" >> {}/calls\n", dir.display()),
    )
    .expect("stub");
    Command::new("chmod")
        .arg("+x")
        .arg(&stub)
        .status()
        .expect("chmod");
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run_check = |listen: &str| {
        let out = Command::new("/bin/sh")
            .args(["-c", &line])
            .env("PATH", &path)
            .env("GPUSLACK_PROMETHEUS_LISTEN", listen)
            .output()
            .expect("sh");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Healthy: a replay lingering on its endpoint.
    let port = free_port();
    let fixture = repo("tests/fixtures/h200-health/samples.csv");
    let agent = serve_replay(&fixture.display().to_string(), port, 30, &[]);
    let said = run_check(&format!("127.0.0.1:{port}"));
    assert!(
        !dir.join("calls").exists(),
        "restarted a healthy agent: {said}"
    );
    drop(agent);
    // Unhealthy: the same agent told that one failed export is too many, against a collector
    // that refuses every export.
    let (_collector, collector_port) = {
        let port = free_port();
        let out = dir.join("faulty.jsonl");
        let child = Command::new(tool("GPUSLACK_PYTHON"))
            .arg(repo("tests/support/faulty_collector.py"))
            .args(["status:503", &out.display().to_string(), &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the faulty collector starts");
        let server = common::Server(child);
        common::wait_for_port(port, "the faulty collector");
        (server, port)
    };
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{collector_port}");
    let _agent = serve_replay(
        &fixture.display().to_string(),
        port,
        30,
        &[
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/protobuf",
            "--export-interval-ms",
            "100",
            "--unhealthy-after-failed-exports",
            "1",
        ],
    );
    let started = Instant::now();
    let mut said = String::new();
    while !dir.join("calls").exists() && started.elapsed() < Duration::from_secs(15) {
        said = run_check(&format!("127.0.0.1:{port}"));
        std::thread::sleep(Duration::from_millis(300));
    }
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap_or_default();
    assert_eq!(
        calls.trim(),
        "--no-block restart gpuslack.service",
        "{said}"
    );
    assert!(said.contains("gpuslack /healthz: 503"), "{said}");
}

/// The agent as the shipped DaemonSet runs it, before anyone opts into OTLP: the ConfigMap's
/// config file and the environment the manifest sets. It must export no OTLP (on a
/// Prometheus-only cluster every export would fail, /healthz would restart it, and
/// GpuslackDroppingWindows would fire), serve /metrics, and stay healthy.
#[test]
fn the_daemonset_as_shipped_exports_no_otlp_and_stays_healthy() {
    let dir = temp_dir("daemonset-as-shipped");
    let out = Command::new(tool("GPUSLACK_PYTHON"))
        .arg(repo("tests/support/check_manifests.py"))
        .arg("--print-config")
        .arg(repo("deploy/kubernetes/gpuslack.yaml"))
        .arg(repo("deploy/kubernetes/secret.example.yaml"))
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (toml, env) = text.split_once("# env\n").expect("config, then env");
    let config = dir.join("gpuslack.toml");
    std::fs::write(&config, toml).expect("config");
    let env: Vec<(&str, &str)> = env.lines().filter_map(|l| l.split_once('=')).collect();
    assert!(
        env.iter().all(|(k, _)| !k.starts_with("OTEL_EXPORTER")),
        "{env:?}"
    );
    let port = free_port();
    let fixture = repo("tests/fixtures/h200-health/samples.csv");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuslack"));
    cmd.args([
        "run",
        "--replay",
        &fixture.display().to_string(),
        "--speed",
        "0",
    ])
    .args(["--config", &config.display().to_string()])
    .args(["--prometheus", &format!("127.0.0.1:{port}")])
    .args(["--linger-s", "30"])
    .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
    .env_remove("GPUSLACK_PRESET")
    .envs(env.iter().copied())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    let mut child = common::Server(cmd.spawn().expect("gpuslack starts"));
    common::wait_for_port(port, "the agent");
    let get = |path: &str| -> String {
        let out = Command::new("curl")
            .args(["-s", "-i", &format!("http://127.0.0.1:{port}{path}")])
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let started = Instant::now();
    while !get("/readyz").starts_with("HTTP/1.1 200") && started.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let health = get("/healthz");
    assert!(
        health.starts_with("HTTP/1.1 200") && health.contains("\"exports_failed\":0"),
        "{health}"
    );
    assert!(get("/metrics").contains("gpuslack_diagnosis_ratio"));
    let _ = child.0.kill();
    let mut stderr = String::new();
    if let Some(mut e) = child.0.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    let start = stderr
        .lines()
        .find(|l| l.contains("exporting to"))
        .unwrap_or_else(|| panic!("no start line:\n{stderr}"));
    assert!(!start.contains("OTLP"), "OTLP on by default: {start}");
}

/// GPUSLACK_PRESET picks the preset where --preset is not given (the systemd environment file,
/// a DaemonSet env): its keys are then read, a missing key is an error that names it, and an
/// unknown preset is an error that names the variable.
#[test]
fn gpuslack_preset_in_the_environment_selects_the_preset() {
    let fixture = repo("tests/fixtures/h200-health/samples.csv")
        .display()
        .to_string();
    let run = |env: &[(&str, &str)]| {
        let out = common::gpuslack(
            &[
                "run",
                "--replay",
                &fixture,
                "--speed",
                "0",
                "--shutdown-timeout-s",
                "1",
                "--otlp-timeout-ms",
                "300",
            ],
            env,
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[("GPUSLACK_PRESET", "bogus")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("GPUSLACK_PRESET=\"bogus\" is not datadog, datadog-agent or honeycomb"),
        "{err}"
    );
    let (code, err) = run(&[("GPUSLACK_PRESET", "honeycomb"), ("HONEYCOMB_API_KEY", "")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("HONEYCOMB_API_KEY"), "{err}");
    // With the key, the preset's endpoint is used (nothing answers there: exit 3).
    let (_, err) = run(&[
        ("GPUSLACK_PRESET", "Datadog"),
        ("DD_API_KEY", "k"),
        ("DD_SITE", "localhost:9"),
    ]);
    let start = err
        .lines()
        .find(|l| l.contains("exporting to"))
        .unwrap_or_default();
    assert!(start.contains("https://otlp.localhost:9"), "{err}");
    assert!(
        !err.contains("DD_API_KEY=k") && !err.contains("\"k\""),
        "the key in the log: {err}"
    );
    // An empty variable is no preset.
    let (code, err) = run(&[("GPUSLACK_PRESET", "")]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn the_image_the_daemonset_names_is_the_one_the_build_script_builds() {
    let out = Command::new("sh")
        .arg(repo("deploy/container/build.sh"))
        .arg("--print")
        .env_remove("GPUSLACK_IMAGE")
        .env_remove("GPUSLACK_TAG")
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        built,
        format!("ghcr.io/gpuslack/gpuslack:{}", env!("CARGO_PKG_VERSION"))
    );
    let manifest = std::fs::read_to_string(repo("deploy/kubernetes/gpuslack.yaml")).expect("yaml");
    let images: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .collect();
    assert_eq!(images, [built.as_str()], "the DaemonSet's image");
    let dockerfile =
        std::fs::read_to_string(repo("deploy/container/Dockerfile")).expect("Dockerfile");
    assert!(dockerfile.contains(&built) && dockerfile.contains("build.sh"));
    let kustomization = std::fs::read_to_string(repo("deploy/kubernetes/kustomization.yaml"))
        .expect("kustomization");
    assert!(
        kustomization.contains("  - name: ghcr.io/gpuslack/gpuslack\n")
            && kustomization.contains(&format!("    newTag: {}\n", env!("CARGO_PKG_VERSION"))),
        "the kustomization's image is not {built}"
    );
    let doc = std::fs::read_to_string(repo("docs/DEPLOY.md")).expect("DEPLOY.md");
    assert!(
        doc.contains("deploy/container/build.sh"),
        "docs/DEPLOY.md does not say how to build the image"
    );
}

/// Prometheus remote write takes cumulative counters only and drops delta sums: every pipeline
/// that ends in `prometheusremotewrite` converts them first.
#[test]
fn the_collector_turns_delta_into_cumulative_before_remote_write() {
    let script = r#"
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
assert "deltatocumulative" in c["processors"], "no deltatocumulative processor"
n = 0
for name, p in c["service"]["pipelines"].items():
    if "prometheusremotewrite" in p.get("exporters", []):
        n += 1
        procs = p.get("processors", [])
        assert "deltatocumulative" in procs, f"{name}: delta sums reach remote write"
        assert procs.index("deltatocumulative") < procs.index("batch"), f"{name}: convert before batching"
    for proc in p.get("processors", []):
        assert proc in c["processors"], f"{name}: {proc} is not configured"
    for exp in p.get("exporters", []):
        assert exp in c["exporters"], f"{name}: {exp} is not configured"
assert n >= 1, "no remote-write pipeline"
"#;
    let out = Command::new(tool("GPUSLACK_PYTHON"))
        .args(["-c", script])
        .arg(repo("deploy/otel-collector/config.yaml"))
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Datadog Xid monitor pages on the per-code count of the actions that need an operator,
/// exactly the agent's table's (hw_health.rs), so that the application's own Xids (13, 31, 43:
/// restart_app) never page; the `datadog` set exports that count.
#[test]
fn the_datadog_xid_monitor_filters_out_the_applications_xids() {
    use gpuslack_receiver::export::selection::{MetricSet, Selection};
    use gpuslack_receiver::hw_health::{lookup, XIDS};
    let text = std::fs::read_to_string(repo("deploy/datadog/monitors.json")).expect("monitors");
    let monitors: Value = serde_json::from_str(&text).expect("JSON");
    let xid: Vec<&str> = monitors
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|m| m["query"].as_str())
        .filter(|q| q.contains("xid"))
        .collect();
    assert_eq!(xid.len(), 1, "one Xid monitor: {xid:?}");
    let q = xid[0];
    assert!(
        q.starts_with("sum(last_10m):sum:gpuslack.xid.errors{"),
        "{q}"
    );
    assert!(
        q.contains("by {host,hw.id,gpuslack.xid.code,gpuslack.xid.action}"),
        "{q}"
    );
    let listed: BTreeSet<&str> = q
        .split("gpuslack.xid.action IN (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("an action filter")
        .split(',')
        .map(str::trim)
        .collect();
    let paging: BTreeSet<&str> = XIDS
        .iter()
        .filter(|x| x.action.needs_operator())
        .map(|x| x.action.as_str())
        .collect();
    assert_eq!(listed, paging);
    for application in [13, 31, 43] {
        let action = lookup(application).expect("in the table").action.as_str();
        assert!(
            !listed.contains(action),
            "Xid {application} ({action}) pages"
        );
    }
    let datadog = Selection::new(MetricSet::Datadog, &[], &[]).expect("the set");
    assert!(datadog.has("gpuslack.xid.errors"));
}

/// Every Prometheus alert has its Datadog monitor, GpuFailed among them.
#[test]
fn the_datadog_monitors_include_gpu_failed() {
    let text = std::fs::read_to_string(repo("deploy/datadog/monitors.json")).expect("monitors");
    let monitors: Value = serde_json::from_str(&text).expect("JSON");
    let failed: Vec<&Value> = monitors
        .as_array()
        .expect("a list")
        .iter()
        .filter(|m| {
            m["query"]
                .as_str()
                .is_some_and(|q| q.contains("hw.status{hw.state:failed}"))
        })
        .collect();
    assert_eq!(failed.len(), 1, "{text}");
    assert!(failed[0]["query"]
        .as_str()
        .is_some_and(|q| q.ends_with(">= 1")));
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

/// The image build file as far as it can be checked without a container engine (CI has none):
/// every base pinned by the digest of its image, no tag standing alone; no RUN in the target
/// platform's stage (building arm64 on x86 would need emulation); root, with the reasons
/// written beside it; and the ENTRYPOINT and CMD run as the image runs them: the flags parse
/// (no GPU here: exit 69, where a usage error would be 2) and bind loopback, never 0.0.0.0.
/// tests/dist.rs checks the context's binaries and the CMD with the shipped binary.
#[test]
fn the_container_build_is_pinned_and_its_cmd_binds_loopback() {
    let text = std::fs::read_to_string(repo("deploy/container/Dockerfile")).expect("Dockerfile");
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    for from in &froms {
        let image = from
            .split_whitespace()
            .skip(1)
            .find(|w| !w.starts_with("--"))
            .expect("an image");
        let (name, digest) = image
            .split_once("@sha256:")
            .unwrap_or_else(|| panic!("{from}: not pinned by digest"));
        assert!(
            digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
            "{from}"
        );
        assert!(!name.ends_with(":latest"), "{from}");
    }
    assert!(froms[0].contains("--platform=$BUILDPLATFORM") && froms[0].ends_with(" AS certs"));
    let last_stage = &text[text.rfind("\nFROM ").expect("FROM")..];
    assert!(
        !last_stage.lines().any(|l| l.starts_with("RUN ")),
        "a RUN in the target platform's stage"
    );
    assert!(last_stage.contains("COPY ${TARGETARCH}/gpuslack /usr/local/bin/gpuslack"));
    let user = text
        .lines()
        .rfind(|l| l.starts_with("USER "))
        .expect("a USER line");
    assert_eq!(user, "USER 0:0");
    for why in ["PodResources", "/proc/PID/environ", "--user 65532:65532"] {
        assert!(text.contains(why), "the Dockerfile does not say {why:?}");
    }
    let json_array = |prefix: &str| -> Vec<String> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix}"));
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{prefix}{line}: {e}"))
    };
    assert_eq!(json_array("ENTRYPOINT "), ["/usr/local/bin/gpuslack"]);
    let cmd = json_array("CMD ");
    assert_eq!(cmd, ["run", "--prometheus", "127.0.0.1:9464"]);
    // The image's command on this machine, which has no GPU: parsed, then NVML is missing.
    let out = common::gpuslack(&cmd.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kubectl kustomize deploy/kubernetes` renders the whole install: the Namespace at Pod
/// Security level privileged (hostPID), the ServiceAccount, the ConfigMap, the DaemonSet with
/// the annotations an OpenTelemetry Collector's receiver_creator discovers it by, the Service,
/// the PodMonitor and the PrometheusRule, all in the gpuslack namespace. kubernetes-validate
/// checks the built-in kinds against Kubernetes' schemas (strict: no unknown field); the two
/// Prometheus Operator kinds, whose schemas it lacks, are checked against the DaemonSet (the
/// selector, the port, the job name the alerts select).
#[test]
fn the_kustomization_renders_every_object_and_they_validate() {
    let dir = temp_dir("kustomize");
    let rendered = run_ok(
        Command::new(tool("GPUSLACK_KUBECTL"))
            .args(["kustomize"])
            .arg(repo("deploy/kubernetes")),
    );
    let path = dir.join("rendered.yaml");
    std::fs::write(&path, &rendered).expect("rendered");
    let validated = run_ok(
        Command::new(tool("GPUSLACK_KUBERNETES_VALIDATE"))
            .arg("--strict")
            .arg(&path),
    );
    for kind in [
        "namespace",
        "serviceaccount",
        "configmap",
        "service",
        "daemonset",
    ] {
        assert!(
            validated.contains(&format!("passed for resource {kind}/gpuslack")),
            "{validated}"
        );
    }
    assert!(!validated.contains("failed"), "{validated}");
    let script = r#"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = {d["kind"]: d for d in docs}
assert sorted(kinds) == ["ConfigMap", "DaemonSet", "Namespace", "PodMonitor", "PrometheusRule", "Service", "ServiceAccount"], sorted(kinds)
for d in docs:
    if d["kind"] != "Namespace":
        assert d["metadata"]["namespace"] == "gpuslack", d["metadata"]
labels = kinds["Namespace"]["metadata"]["labels"]
assert labels["pod-security.kubernetes.io/enforce"] == "privileged", labels
ds = kinds["DaemonSet"]
pod = ds["spec"]["template"]
assert pod["spec"]["hostPID"] is True
ann = pod["metadata"]["annotations"]
assert ann["io.opentelemetry.discovery.metrics/enabled"] == "true", ann
assert ann["io.opentelemetry.discovery.metrics/scraper"] == "prometheus_simple", ann
assert yaml.safe_load(ann["io.opentelemetry.discovery.metrics/config"])["metrics_path"] == "/metrics", ann
ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c["ports"]}
pm = kinds["PodMonitor"]
assert pm["apiVersion"] == "monitoring.coreos.com/v1"
assert pm["spec"]["selector"]["matchLabels"] == ds["spec"]["selector"]["matchLabels"], pm["spec"]["selector"]
assert pm["spec"]["namespaceSelector"]["matchNames"] == ["gpuslack"]
for ep in pm["spec"]["podMetricsEndpoints"]:
    assert ep["port"] in ports, (ep, ports)
    assert ep["path"] == "/metrics"
# The alerts select job="gpuslack": the job is the pods' value of jobLabel.
assert pod["metadata"]["labels"][pm["spec"]["jobLabel"]] == "gpuslack", pm["spec"]["jobLabel"]
pr = kinds["PrometheusRule"]
assert pr["apiVersion"] == "monitoring.coreos.com/v1"
names = [r.get("alert") or r.get("record") for g in pr["spec"]["groups"] for r in g["rules"]]
assert "GpuslackTargetDown" in names and "GpuslackJobHung" in names, names
image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
print(image)
"#;
    let out = Command::new(tool("GPUSLACK_PYTHON"))
        .args(["-c", script])
        .arg(&path)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("ghcr.io/gpuslack/gpuslack:{}", env!("CARGO_PKG_VERSION")),
        "the kustomization's image"
    );
}

/// deploy/kubernetes/prometheusrule.yaml is what scripts/dist/prometheusrule.py writes from
/// the rule files, byte for byte, and its groups parse to the rule files' groups: an edit to a
/// rule that was not carried over fails here.
#[test]
fn the_prometheusrule_is_the_rule_files() {
    let generated =
        run_ok(Command::new(tool("GPUSLACK_PYTHON")).arg(repo("scripts/dist/prometheusrule.py")));
    let committed = std::fs::read_to_string(repo("deploy/kubernetes/prometheusrule.yaml"))
        .expect("prometheusrule.yaml");
    assert!(
        generated == committed,
        "deploy/kubernetes/prometheusrule.yaml is stale: run python3 scripts/dist/prometheusrule.py > deploy/kubernetes/prometheusrule.yaml"
    );
    let script = r#"
import sys, yaml
root = sys.argv[1]
rule = yaml.safe_load(open(root + "/deploy/kubernetes/prometheusrule.yaml"))
groups = []
for name in ["gpuslack-rules.yml", "gpuslack-jobs.yml", "gpuslack-fleet-rules.yml"]:
    groups += yaml.safe_load(open(root + "/deploy/prometheus/" + name))["groups"]
assert rule["spec"]["groups"] == groups, "the PrometheusRule's groups differ from the rule files'"
print(sum(len(g["rules"]) for g in groups))
"#;
    let out = Command::new(tool("GPUSLACK_PYTHON"))
        .args(["-c", script])
        .arg(repo(""))
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 14 per GPU, 32 per job and team, and the fleet roll-ups.
    let rules: usize = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a count");
    assert!(rules > 14 + 32, "{rules} rules");
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
