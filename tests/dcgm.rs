//! `--metrics dcgm` read as a dcgm-exporter user reads it (issue #49): the exposition against
//! dcgm-exporter's own default-counters.csv (names, types, help, labels), NVIDIA's Grafana
//! dashboard's queries answered by a real Prometheus scraping a replay, and every metric that
//! Datadog's `dcgm` check maps by default present. The references are the published files
//! in tests/fixtures/dcgm-exporter (README.md there names each one's source and commit).
//! Needs GPUSLACK_PROMETHEUS (`source /work/tools/test-env.sh`, or scripts/test.sh).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    fixture_samples, free_port, prometheus_query, repo, scrape_settled, serve_replay,
    start_prometheus, temp_dir,
};
use gpuslack_receiver::export::catalogue;
use serde_json::Value;

/// One sample of a scrape: its labels and value.
#[derive(Debug, Clone)]
struct Sample {
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape in the text format, by metric name: the samples, `# TYPE` and `# HELP`.
#[derive(Debug, Default)]
struct Scrape {
    samples: BTreeMap<String, Vec<Sample>>,
    types: BTreeMap<String, String>,
    help: BTreeMap<String, String>,
}

/// Label values in these tests hold no `,`, `"` or `}`: a plain split reads them.
fn parse(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            scrape.types.insert(name.into(), kind.into());
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            scrape.help.insert(name.into(), help.into());
        } else if !line.starts_with('#') && !line.is_empty() {
            let (series, value) = line.rsplit_once(' ').expect("series value");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|l| !l.is_empty())
                .filter_map(|l| l.split_once("=\""))
                .map(|(k, v)| (k.to_string(), v.trim_end_matches('"').to_string()))
                .collect();
            let value = value.parse().expect("a number");
            scrape
                .samples
                .entry(name.into())
                .or_default()
                .push(Sample { labels, value });
        }
    }
    scrape
}

/// An agent replaying `h200-diagnose-job` (one H200, every NVML and GPM column) with
/// `--metrics dcgm`, and its scrape once the replay is done (the windows produced stand still).
fn replayed_agent(port: u16) -> (common::Server, Scrape) {
    let agent = serve_replay(
        &fixture_samples("h200-diagnose-job"),
        port,
        60,
        &["--metrics", "dcgm"],
    );
    let text = scrape_settled(port, 2);
    (agent, parse(&text))
}

/// The rows of dcgm-exporter's etc/default-counters.csv that are not commented out: (field,
/// Prometheus type, help).
fn default_counters() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(repo("tests/fixtures/dcgm-exporter/default-counters.csv"))
        .expect("the CSV");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut cells = l.splitn(3, ',').map(str::trim);
            let mut cell = || cells.next().expect("three cells").to_string();
            (cell(), cell(), cell())
        })
        .collect()
}

#[test]
fn the_scrape_is_dcgm_exporters_default_counters_with_their_types_help_and_labels() {
    let port = free_port();
    let (_agent, scrape) = replayed_agent(port);
    let rows = default_counters();
    assert_eq!(rows.len(), 26, "the release's 26 active rows");
    let not_read: BTreeSet<&str> = catalogue::DCGM_NOT_READ.iter().map(|(n, _)| *n).collect();
    let facts: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("tests/fixtures/h200-diagnose-job/samples.facts.json"))
            .expect("facts"),
    )
    .expect("JSON");
    let mut checked = 0;
    for (field, kind, help) in &rows {
        if kind == "label" {
            // The driver version rides on every field's series.
            assert_eq!(field, catalogue::DCGM_DRIVER_LABEL);
            for (name, samples) in scrape
                .samples
                .iter()
                .filter(|(n, _)| n.starts_with("DCGM_"))
            {
                for s in samples {
                    assert_eq!(
                        s.labels.get(field.as_str()).map(String::as_str),
                        facts["driver"].as_str(),
                        "{name}"
                    );
                }
            }
            continue;
        }
        if not_read.contains(field.as_str()) {
            assert!(!scrape.samples.contains_key(field), "{field} is not read");
            continue;
        }
        let samples = scrape
            .samples
            .get(field)
            .unwrap_or_else(|| panic!("{field} is missing from the scrape"));
        assert_eq!(samples.len(), 1, "{field}: one GPU, one series");
        assert_eq!(scrape.types.get(field), Some(kind), "{field}'s type");
        assert_eq!(scrape.help.get(field), Some(help), "{field}'s help");
        let labels = &samples[0].labels;
        assert_eq!(labels["gpu"], "0", "{field}");
        assert_eq!(labels["device"], "nvidia0", "{field}");
        assert_eq!(Some(labels["UUID"].as_str()), facts["uuid"].as_str());
        assert_eq!(Some(labels["modelName"].as_str()), facts["name"].as_str());
        assert!(!labels["Hostname"].is_empty(), "{field}");
        // dcgm-exporter's labels, no OpenTelemetry scope.
        assert!(!labels.contains_key("otel_scope_name"), "{field}");
        checked += 1;
    }
    assert_eq!(checked, rows.len() - 1 - not_read.len());
    // The units are DCGM's: MHz, °C, W, mJ, MiB, % and ratios.
    let one = |name: &str| scrape.samples[name][0].value;
    let mem_total_mib = facts["mem_total"].as_f64().expect("mem_total") / 1024.0 / 1024.0;
    // The recording's last seconds: the H200 idle after the job, its clocks falling to 345 MHz,
    // memory at 3201 MHz, 39–41 °C, 644,939,776 bytes in use, near its 78 W idle.
    assert!(
        (345.0..=1980.0).contains(&one("DCGM_FI_DEV_SM_CLOCK")),
        "MHz"
    );
    assert_eq!(one("DCGM_FI_DEV_MEM_CLOCK"), 3201.0, "MHz");
    assert!((39.0..=41.0).contains(&one("DCGM_FI_DEV_GPU_TEMP")), "°C");
    assert!(
        (70.0..=130.0).contains(&one("DCGM_FI_DEV_POWER_USAGE")),
        "W"
    );
    assert_eq!(
        one("DCGM_FI_DEV_FB_USED"),
        644_939_776.0 / 1024.0 / 1024.0,
        "MiB"
    );
    assert!(
        one("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") > 1e6,
        "mJ since the driver loaded"
    );
    let fb = one("DCGM_FI_DEV_FB_USED") + one("DCGM_FI_DEV_FB_FREE");
    assert!(
        (fb - mem_total_mib).abs() < 1.0,
        "MiB: {fb} vs {mem_total_mib}"
    );
    assert!((0.0..=100.0).contains(&one("DCGM_FI_DEV_GPU_UTIL")), "%");
    // The profiling fields GPM gives: ratios 0–1, rates in bytes per second.
    for ratio in [
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    ] {
        assert_eq!(scrape.types.get(ratio).map(String::as_str), Some("gauge"));
        assert!((0.0..=1.0).contains(&one(ratio)), "{ratio}: {}", one(ratio));
    }
    for rate in [
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    ] {
        assert!(one(rate) >= 0.0, "{rate}");
    }
    // Both formats pass prometheus_client's strict parsers: in OpenMetrics, which wants `_total`
    // on a counter's samples, dcgm-exporter's counters are of unknown type under their names.
    for (format, accept) in [
        ("text", "text/plain"),
        ("openmetrics", "application/openmetrics-text; version=1.0.0"),
    ] {
        let text = Command::new("curl")
            .args(["-s", "-H", &format!("Accept: {accept}")])
            .arg(format!("http://127.0.0.1:{port}/metrics"))
            .output()
            .expect("curl")
            .stdout;
        let mut parser = Command::new(common::tool("GPUSLACK_PYTHON"))
            .arg(repo("tests/support/parse_exposition.py"))
            .arg(format)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python runs");
        std::io::Write::write_all(&mut parser.stdin.take().expect("stdin"), &text)
            .expect("the exposition");
        let parsed = parser.wait_with_output().expect("the parser ends");
        let summary: Value = serde_json::from_slice(&parsed.stdout).unwrap_or(Value::Null);
        assert!(
            parsed.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&parsed.stderr)
        );
        let names = summary["names"].as_array().expect("names");
        // The counter keeps its name in both (no `_total` added, none stripped).
        assert!(
            names
                .iter()
                .any(|n| n == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
            "{format}: {summary}"
        );
    }
    // The verdict beside them, under gpuslack's names, and not OpenTelemetry's names for the
    // same readings.
    assert_eq!(scrape.samples["gpuslack_diagnosis_ratio"].len(), 1);
    assert!(scrape.samples.contains_key("gpuslack_efficiency_ratio"));
    assert!(!scrape.samples.contains_key("hw_power_watts"));
}

/// The dashboard's template variables (`label_values(METRIC, LABEL)`) and every panel's
/// queries, as Grafana has them.
fn dashboard() -> (Vec<(String, String, String)>, Vec<String>) {
    let text = std::fs::read_to_string(repo(
        "tests/fixtures/dcgm-exporter/dcgm-exporter-dashboard.json",
    ))
    .expect("the dashboard");
    let d: Value = serde_json::from_str(&text).expect("JSON");
    let mut variables = Vec::new();
    for v in d["templating"]["list"].as_array().expect("templating") {
        let Some(q) = v["query"].as_str() else {
            continue;
        };
        if let Some(args) = q
            .strip_prefix("label_values(")
            .and_then(|a| a.strip_suffix(')'))
        {
            let (metric, label) = args.split_once(',').expect("metric, label");
            let name = v["name"].as_str().expect("a name");
            variables.push((name.into(), metric.trim().into(), label.trim().into()));
        }
    }
    let mut exprs = Vec::new();
    for panel in d["panels"].as_array().expect("panels") {
        for t in panel["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                exprs.push(e.to_string());
            }
        }
    }
    (variables, exprs)
}

#[test]
fn every_query_of_nvidias_dashboard_returns_data_from_a_real_prometheus() {
    let dir = temp_dir("dcgm-dashboard");
    let port = free_port();
    let (_agent, scrape) = replayed_agent(port);
    let (_prometheus, prom) = start_prometheus(&dir, port);
    let result = |q: &str| -> Vec<Value> {
        prometheus_query(prom, q)["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let (variables, exprs) = dashboard();
    assert_eq!(variables.len(), 2, "instance and gpu: {variables:?}");
    assert_eq!(exprs.len(), 8, "{exprs:?}");
    // The variables, as Grafana's label_values asks Prometheus for them.
    let started = Instant::now();
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
    while values.len() < variables.len() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no values for {variables:?}: {values:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
        for (name, metric, label) in &variables {
            let found: Vec<String> = result(&format!("count by ({label}) ({metric})"))
                .iter()
                .filter_map(|s| s["metric"][label].as_str().map(String::from))
                .collect();
            if !found.is_empty() {
                values.insert(name.clone(), found);
            }
        }
    }
    assert_eq!(values["gpu"], ["0"]);
    assert_eq!(values["instance"], [format!("127.0.0.1:{port}")]);
    // Each panel's query, its variables set to every value (Grafana's "All"), against the
    // scrape's own numbers.
    for expr in &exprs {
        let mut q = expr.clone();
        for (name, vals) in &values {
            q = q.replace(&format!("${name}"), &vals.join("|"));
        }
        let answer = result(&q);
        assert!(!answer.is_empty(), "no data for {expr} ({q})");
        let got: f64 = answer[0]["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("a value");
        let metric = q
            .trim_start_matches("avg(")
            .trim_start_matches("sum(")
            .split('{')
            .next()
            .expect("a metric");
        let mut want = scrape.samples[metric][0].value;
        if q.contains("* 1000000") {
            want *= 1e6;
        }
        assert!(
            (got - want).abs() <= want.abs() * 1e-9 + 1e-9,
            "{q}: {got} vs the scrape's {want}"
        );
    }
}

#[test]
fn every_metric_datadogs_dcgm_check_maps_by_default_is_present() {
    let port = free_port();
    let (_agent, scrape) = replayed_agent(port);
    let map: Value = serde_json::from_str(
        &std::fs::read_to_string(repo(
            "tests/fixtures/dcgm-exporter/datadog-dcgm-metric-map.json",
        ))
        .expect("the map"),
    )
    .expect("JSON");
    let map = map["metric_map"].as_object().expect("metric_map");
    assert_eq!(map.len(), 38);
    let missing: BTreeSet<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|name| !scrape.samples.contains_key(*name))
        .collect();
    // What the H200's recording cannot have: the two fields gpuslack does not read, and the
    // fan of a board without one (an SXM module; dcgm-exporter has none there either: DCGM
    // reports it blank). The unit tests give the fan a reading (export::dcgm).
    let not_read: BTreeSet<&str> = catalogue::DCGM_NOT_READ.iter().map(|(n, _)| *n).collect();
    let mut expected = not_read.clone();
    expected.insert("DCGM_FI_DEV_FAN_SPEED");
    assert_eq!(missing, expected);
    // Every other field gpuslack exports is one the check maps, or a profiling field of GPM.
    for def in catalogue::DCGM_FIELDS {
        assert!(
            map.contains_key(def.name) || def.name.starts_with("DCGM_FI_PROF_NVLINK"),
            "{} is neither in Datadog's map nor GPM's NVLink rates",
            def.name
        );
    }
}
