//! Export end to end, against real third-party servers the test starts: the Rotel OpenTelemetry
//! collector (PyPI `rotel`, with a processor that writes down what arrived), a grpcio/http.server
//! stand-in that records request headers, and Prometheus (Debian `prometheus`). A fixture trace
//! is replayed through `gpuslack run`, and what arrived is compared with `gpuslack replay`.
//!
//! `scripts/test.sh` installs the servers and sets GPUSLACK_ROTEL, GPUSLACK_PYTHON and
//! GPUSLACK_PROMETHEUS; without them these tests fail and say so.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    fixture, free_port, gpuslack, prometheus_query, read_collected, replay_run, replay_run_of,
    requests, serve_replay, start_prometheus, start_rotel, start_stub, start_stub_with, temp_dir,
    wait_for_port, Server,
};
use serde_json::Value;

/// The first energy counter reading (J) of `gpu` in the fixture: where the agent starts
/// counting.
fn first_energy_j(gpu: u64) -> f64 {
    let text = std::fs::read_to_string(fixture()).expect("fixture");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|c| *c == name).expect(name);
    let (g, e) = (col("gpu"), col("energy_mj"));
    lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|cells| cells[g] == gpu.to_string() && !cells[e].is_empty())
        .and_then(|cells| cells[e].parse::<f64>().ok())
        .expect("an energy reading")
        / 1000.0
}

/// How many windows `gpuslack replay` makes of `gpu` in the fixture.
fn windows_of(gpu: u64) -> usize {
    let out = gpuslack(
        &["replay", &fixture(), "--tdp-w", "700", "--format", "jsonl"],
        &[],
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["gpu"] == gpu))
        .count()
}

/// The last window of each GPU, as `gpuslack replay` computes it, and the verdict changes the
/// agent announces: each GPU's first verdict, then a new one once it has held
/// `ANNOUNCE_AFTER_WINDOWS` windows.
fn replay_last_windows() -> (BTreeMap<u64, Value>, Vec<(u64, String)>) {
    let out = gpuslack(
        &["replay", &fixture(), "--tdp-w", "700", "--format", "jsonl"],
        &[],
    );
    assert!(out.status.success());
    let mut last = BTreeMap::new();
    let mut changes = Vec::new();
    let hold = gpuslack_receiver::export::state::ANNOUNCE_AFTER_WINDOWS;
    // Per GPU: the class announced, and a different one with how many windows it has held.
    let mut announced: BTreeMap<u64, (String, Option<(String, u32)>)> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).expect("json");
        let gpu = v["gpu"].as_u64().expect("gpu");
        let class = v["class"].as_str().expect("class").to_string();
        match announced.get_mut(&gpu) {
            None => {
                announced.insert(gpu, (class.clone(), None));
                changes.push((gpu, class));
            }
            Some((current, _)) if *current == class => {
                announced.insert(gpu, (class, None));
            }
            Some((_, pending)) => {
                let held = match pending {
                    Some((p, n)) if *p == class => *n + 1,
                    _ => 1,
                };
                if held >= hold {
                    announced.insert(gpu, (class.clone(), None));
                    changes.push((gpu, class));
                } else {
                    *pending = Some((class, held));
                }
            }
        }
        last.insert(gpu, v);
    }
    (last, changes)
}

fn points_of<'a>(records: &'a [Value], name: &str) -> Vec<(&'a Value, &'a Value)> {
    records
        .iter()
        .filter(|r| r["signal"] == "metric" && r["name"] == name)
        .flat_map(|r| {
            r["points"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |p| (r, p))
        })
        .collect()
}

/// The last exported value of `name` for GPU `gpu` with the given extra attribute.
fn last_value(records: &[Value], name: &str, gpu: u64, attr: Option<(&str, &str)>) -> Option<f64> {
    let gpu = gpu.to_string();
    points_of(records, name)
        .into_iter()
        .rfind(|(_, p)| {
            p["attributes"]["gpuslack.gpu.index"] == gpu.as_str()
                && attr.is_none_or(|(k, v)| p["attributes"][k] == v)
        })
        .and_then(|(_, p)| p["value"].as_f64())
}

fn check_export(records: &[Value], temporality: &str) {
    let (last, changes) = replay_last_windows();
    assert!(!records.is_empty(), "nothing reached the collector");
    // Resource: host, service, and what OTEL_RESOURCE_ATTRIBUTES added.
    let resource = &records[0]["resource"];
    assert_eq!(resource["service.name"], "gpuslack-ci");
    assert_eq!(resource["deployment.environment"], "ci");
    assert!(resource["host.name"]
        .as_str()
        .is_some_and(|h| !h.is_empty()));

    for (gpu, window) in &last {
        let power = last_value(records, "hw.power", *gpu, None).expect("hw.power");
        // replay's JSON rounds to 3 decimals.
        assert!(
            (power - window["power_w"].as_f64().expect("power")).abs() < 1e-3,
            "GPU {gpu}: {power} vs {window}"
        );
        let (rec, point) = points_of(records, "hw.power")[0];
        assert_eq!(
            (rec["unit"].as_str(), rec["kind"].as_str()),
            (Some("W"), Some("Gauge"))
        );
        for key in ["hw.id", "hw.type", "hw.vendor", "gpuslack.gpu.index"] {
            assert!(
                point["attributes"][key].is_string(),
                "{key} missing: {point}"
            );
        }
        let class = window["class"].as_str().expect("class");
        assert_eq!(
            last_value(
                records,
                "gpuslack.diagnosis",
                *gpu,
                Some(("gpuslack.diagnosis.class", class))
            ),
            Some(1.0)
        );
        let others = points_of(records, "gpuslack.diagnosis")
            .into_iter()
            .filter(|(_, p)| {
                p["attributes"]["gpuslack.gpu.index"] == gpu.to_string().as_str()
                    && p["attributes"]["gpuslack.diagnosis.class"] != class
            })
            .filter(|(_, p)| p["value"].as_f64() == Some(1.0))
            .count();
        assert!(others == 0 || temporality == "delta", "other classes at 1");
        // The verdict's confidence rides on the gauge's points, not on series of its own.
        assert!(points_of(records, "gpuslack.diagnosis")
            .into_iter()
            .all(|(_, p)| p["attributes"]["gpuslack.diagnosis.confidence"]
                .as_str()
                .is_some_and(|c| ["high", "medium", "low"].contains(&c))));

        // hw.energy counts from the agent's start: cumulative, the last value is the counter's
        // rise over the trace; delta, the exported deltas add up to it, the first included
        // (never the whole counter, joules since the driver loaded).
        let counter = window["energy_counter_j"].as_f64().expect("energy counter");
        let since_start = counter - first_energy_j(*gpu);
        let energy: Vec<(&Value, &Value)> = points_of(records, "hw.energy")
            .into_iter()
            .filter(|(_, p)| p["attributes"]["gpuslack.gpu.index"] == gpu.to_string().as_str())
            .collect();
        let (rec, first) = energy[0];
        assert_eq!(
            (
                rec["unit"].as_str(),
                rec["kind"].as_str(),
                rec["monotonic"].as_bool()
            ),
            (Some("J"), Some("Sum"), Some(true))
        );
        assert!(
            rec["temporality"]
                .as_str()
                .expect("temporality")
                .to_lowercase()
                .contains(temporality),
            "{rec}"
        );
        assert!(
            first["value"].as_f64().expect("value") <= since_start + 1e-3,
            "GPU {gpu}: the first hw.energy point carries the driver's whole counter: {first}"
        );
        let exported = if temporality == "delta" {
            energy
                .iter()
                .filter_map(|(_, p)| p["value"].as_f64())
                .sum::<f64>()
        } else {
            energy
                .last()
                .and_then(|(_, p)| p["value"].as_f64())
                .expect("value")
        };
        assert!(
            since_start > 1000.0 && (exported - since_start).abs() < 1e-3,
            "GPU {gpu}: hw.energy {exported} vs the counter's rise {since_start}"
        );
        // The cost of slack: GPU time per verdict adds up to the time the GPU was watched.
        let seconds: f64 = gpuslack_receiver::Class::ALL
            .iter()
            .filter_map(|class| {
                let class = Some(("gpuslack.diagnosis.class", class.as_str()));
                last_value(records, "gpuslack.diagnosis.time", *gpu, class)
            })
            .sum();
        if temporality == "cumulative" {
            assert!(
                (seconds - windows_of(*gpu) as f64 * 2.0).abs() < 1e-6,
                "GPU {gpu}: {seconds} s of verdicts for {} windows",
                windows_of(*gpu)
            );
        }
    }
    // Every name is the semantic conventions' or gpuslack's own: none is one Datadog's `gpu`
    // check (or its nvml and dcgm checks) emits, whose series would mix with ours.
    for r in records.iter().filter(|r| r["signal"] == "metric") {
        let name = r["name"].as_str().expect("name");
        assert!(
            name.starts_with("hw.") || name.starts_with("gpuslack."),
            "{name} is outside hw.* and gpuslack.*"
        );
        for taken in ["gpu.", "nvml.", "dcgm."] {
            assert!(!name.starts_with(taken), "{name}");
        }
    }
    // Memory is a quantity that sums across GPUs: a non-monotonic sum, as the conventions say.
    let (memory, _) = points_of(records, "hw.gpu.memory.usage")[0];
    assert_eq!(
        (memory["kind"].as_str(), memory["monotonic"].as_bool()),
        (Some("Sum"), Some(false)),
        "{memory}"
    );
    for name in [
        "hw.gpu.utilization",
        "hw.gpu.memory.usage",
        "gpuslack.sm.activity",
        "gpuslack.efficiency",
        "gpuslack.nvlink.io",
        "hw.gpu.io",
        "hw.temperature",
        "gpuslack.clock.sm",
        "gpuslack.diagnosis.energy",
    ] {
        assert!(!points_of(records, name).is_empty(), "{name} never arrived");
    }
    // One log record per announced change of verdict, carrying the class and the remedy.
    let logs: Vec<&Value> = records.iter().filter(|r| r["signal"] == "log").collect();
    assert_eq!(logs.len(), changes.len(), "log records vs verdict changes");
    for ((gpu, class), log) in changes.iter().zip(&logs) {
        assert_eq!(log["severity"], "INFO", "{log}");
        assert_eq!(
            log["attributes"]["gpuslack.diagnosis.class"],
            class.as_str()
        );
        assert_eq!(log["attributes"]["gpuslack.gpu.index"], gpu.to_string());
        assert!(log["attributes"]["gpuslack.diagnosis.remedy"]
            .as_str()
            .is_some_and(|r| !r.is_empty()));
        // How sure, and what it could not rule out (issue #27).
        assert!(log["attributes"]["gpuslack.diagnosis.confidence"]
            .as_str()
            .is_some_and(|c| ["high", "medium", "low"].contains(&c)));
        assert!(log["attributes"]["gpuslack.diagnosis.alternatives"]
            .as_str()
            .is_some_and(|a| a
                .split(',')
                .filter(|c| !c.is_empty())
                .all(|c| gpuslack_receiver::Class::from_name(c).is_some())));
        assert!(log["body"]
            .as_str()
            .is_some_and(|b| b.contains(&format!("GPU {gpu} became {class}"))));
    }
}

#[test]
fn otlp_grpc_cumulative_reaches_the_collector() {
    let dir = temp_dir("grpc");
    let (_rotel, grpc, _, out) = start_rotel(&dir);
    let endpoint = format!("http://127.0.0.1:{grpc}");
    let run = replay_run(
        &[
            "--speed",
            "0",
            "--tdp-w",
            "700",
            "--otlp-endpoint",
            &endpoint,
            // Only the final flush exports: the replay at full speed can outlast a short
            // interval on a loaded machine, and an export of a state midway would carry other
            // verdicts at 1.
            "--export-interval-ms",
            "60000",
        ],
        &[
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci"),
            ("OTEL_SERVICE_NAME", "gpuslack-ci"),
        ],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    check_export(&read_collected(&out, true), "cumulative");
}

#[test]
fn otlp_http_protobuf_delta_with_gzip_reaches_the_collector() {
    let dir = temp_dir("http");
    let (_rotel, _, http, out) = start_rotel(&dir);
    let config = dir.join("gpuslack.toml");
    std::fs::write(
        &config,
        format!("[otlp]\nendpoint = \"http://127.0.0.1:{http}\"\nprotocol = \"http/protobuf\"\ntemporality = \"delta\"\ncompression = \"gzip\"\ninterval_ms = 100\n[resource]\nservice_name = \"gpuslack-ci\"\nattributes = {{ \"deployment.environment\" = \"ci\" }}\n"),
    )
    .expect("config");
    // 153 s of trace at 100× speed: about 15 exports, whose deltas must add up.
    let run = replay_run(
        &[
            "--speed",
            "100",
            "--tdp-w",
            "700",
            "--config",
            &config.display().to_string(),
        ],
        &[],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let records = read_collected(&out, true);
    let exports = records.iter().filter(|r| r["name"] == "hw.power").count();
    assert!(exports >= 5, "{exports} exports");
    check_export(&records, "delta");
}

#[test]
fn headers_reach_the_receiver_over_grpc_and_http_and_never_the_logs() {
    let dir = temp_dir("headers");
    let (_stub, http, grpc, out) = start_stub(&dir, 200);
    for (protocol, endpoint, path) in [
        (
            "grpc",
            format!("http://127.0.0.1:{grpc}"),
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        ),
        (
            "http/protobuf",
            format!("http://127.0.0.1:{http}"),
            "/v1/metrics",
        ),
    ] {
        let run = replay_run(
            &[
                "--speed",
                "0",
                "--otlp-endpoint",
                &endpoint,
                "--otlp-protocol",
                protocol,
                "-v",
            ],
            &[(
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-honeycomb-team=hc-s3cr3t,x-honeycomb-dataset=gpus",
            )],
        );
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let seen = requests(&out);
        let hit = seen
            .iter()
            .find(|r| r["path"] == path)
            .unwrap_or_else(|| panic!("{protocol}: no export arrived: {seen:?}"));
        assert_eq!(
            hit["headers"]["x-honeycomb-team"], "hc-s3cr3t",
            "{protocol}"
        );
        assert_eq!(hit["headers"]["x-honeycomb-dataset"], "gpus", "{protocol}");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            !stderr.contains("hc-s3cr3t"),
            "{protocol}: the key leaked into the log:\n{stderr}"
        );
    }
}

/// A throw-away CA and a server certificate for 127.0.0.1 signed by it, made with openssl.
fn test_ca(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=gpuslack test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext");
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

#[test]
fn tls_with_a_custom_ca_over_grpc_and_http() {
    let dir = temp_dir("tls");
    let (ca, cert, key) = test_ca(&dir);
    let (_stub, http, grpc, out) = start_stub_with(&dir, 200, Some((&cert, &key)));
    for (protocol, endpoint, path) in [
        (
            "grpc",
            format!("https://127.0.0.1:{grpc}"),
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        ),
        (
            "http/protobuf",
            format!("https://127.0.0.1:{http}"),
            "/v1/metrics",
        ),
    ] {
        // Without the CA the server's certificate is not trusted: nothing arrives, the agent
        // still finishes.
        let before = requests(&out).len();
        let untrusted = replay_run(
            &[
                "--speed",
                "0",
                "--otlp-endpoint",
                &endpoint,
                "--otlp-protocol",
                protocol,
                "--no-otlp-logs",
            ],
            &[],
        );
        // Nothing delivered: exit 3, and the failures are filed under TLS, not "network".
        let said = String::from_utf8_lossy(&untrusted.stderr);
        assert_eq!(untrusted.status.code(), Some(3), "{said}");
        assert!(said.contains("failed (tls×"), "{protocol}: {said}");
        assert_eq!(
            requests(&out).len(),
            before,
            "{protocol}: an untrusted server got data"
        );
        let trusted = replay_run(
            &[
                "--speed",
                "0",
                "--otlp-endpoint",
                &endpoint,
                "--otlp-protocol",
                protocol,
                "--otlp-ca",
                &ca.display().to_string(),
                "--no-otlp-logs",
            ],
            &[],
        );
        assert!(
            trusted.status.success(),
            "{}",
            String::from_utf8_lossy(&trusted.stderr)
        );
        assert!(
            requests(&out).iter().any(|r| r["path"] == path),
            "{protocol}: nothing arrived over TLS"
        );
    }
}

/// The end-of-run summary's counts: (windows produced, delivered, dropped, undelivered).
fn summary_windows(stderr: &str) -> (u64, u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains("windows produced"))
        .unwrap_or_else(|| panic!("no summary line:\n{stderr}"));
    let number = |before: &str| -> u64 {
        let head = line.split(before).next().unwrap_or("");
        head.rsplit(|c: char| !c.is_ascii_digit())
            .find(|w| !w.is_empty())
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no count before {before:?} in {line}"))
    };
    (
        number(" windows produced"),
        number(" delivered, "),
        number(" dropped, "),
        number(" undelivered"),
    )
}

fn failing_run(endpoint: &str, protocol: &str) -> (String, f64) {
    // 153 s of trace at 25×: ~6 s, an export attempt every 100 ms that fails.
    let run = replay_run(
        &[
            "--speed",
            "25",
            "--otlp-endpoint",
            endpoint,
            "--otlp-protocol",
            protocol,
            "--export-interval-ms",
            "100",
            "--otlp-timeout-ms",
            "500",
            "--otlp-header",
            "dd-api-key=dd-s3cr3t",
            "--usage",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    // It survives its exporter, and says nothing was delivered: exit 3, every window dropped.
    assert_eq!(
        run.status.code(),
        Some(3),
        "{endpoint} ({protocol}): {stderr}"
    );
    let (produced, delivered, dropped, pending) = summary_windows(&stderr);
    assert!(produced > 100, "{produced} windows");
    assert_eq!((delivered, dropped, pending), (0, produced, 0), "{stderr}");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let rss = stdout
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse::<f64>().ok())
        .expect("usage line");
    (String::from_utf8_lossy(&run.stderr).into_owned(), rss)
}

#[test]
fn an_unreachable_or_refusing_exporter_is_retried_quietly_with_bounded_memory() {
    let dir = temp_dir("failing");
    let closed = format!("http://127.0.0.1:{}", free_port());
    let (_stub503, http503, _, seen503) = start_stub(&dir, 503);
    let dir401 = temp_dir("failing401");
    let (_stub401, http401, _, _) = start_stub(&dir401, 401);
    for (endpoint, protocol, reason) in [
        (closed.clone(), "grpc", "connect"),
        (closed, "http/protobuf", "connect"),
        (
            format!("http://127.0.0.1:{http503}"),
            "http/protobuf",
            "unavailable",
        ),
        (
            format!("http://127.0.0.1:{http401}"),
            "http/protobuf",
            "auth",
        ),
    ] {
        let (stderr, rss_mib) = failing_run(&endpoint, protocol);
        assert!(
            stderr.contains(&format!("failed ({reason}×")),
            "{endpoint} ({protocol}): failures not filed under {reason}:\n{stderr}"
        );
        let export_errors = stderr
            .lines()
            .filter(|l| l.contains("opentelemetry"))
            .count();
        assert!(
            export_errors <= 6,
            "{endpoint} ({protocol}): {export_errors} log lines about exports:\n{stderr}"
        );
        assert!(!stderr.contains("dd-s3cr3t"), "the key leaked:\n{stderr}");
        assert!(rss_mib < 64.0, "{endpoint} ({protocol}): {rss_mib} MiB");
    }
    // 503 is retryable: the sender tried the queued batch again, with a backoff (500 ms
    // doubling), not once per 100 ms export (some 60 in the run).
    let asked = requests(&seen503).len();
    assert!((3..=30).contains(&asked), "{asked} requests");
}

#[test]
fn prometheus_scrapes_the_endpoint_with_translated_names() {
    let dir = temp_dir("prometheus");
    let agent_port = free_port();
    let (_prometheus, prom_port) = start_prometheus(&dir, agent_port);
    let _agent = serve_replay(&fixture(), agent_port, 8, &["--tdp-w", "700"]);
    let (last, _) = replay_last_windows();
    let query = |q: &str| -> Vec<Value> {
        prometheus_query(prom_port, q)["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let started = Instant::now();
    let mut power = Vec::new();
    while power.len() < 2 && started.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(500));
        power = query("hw_power_watts");
    }
    assert_eq!(power.len(), 2, "both GPUs scraped: {power:?}");
    for series in &power {
        let gpu: u64 = series["metric"]["gpuslack_gpu_index"]
            .as_str()
            .and_then(|g| g.parse().ok())
            .expect("gpu_index label");
        assert_eq!(series["metric"]["hw_type"], "gpu");
        let value: f64 = series["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("value");
        assert!(
            (value - last[&gpu]["power_w"].as_f64().expect("power")).abs() < 1e-3,
            "{value} vs {}",
            last[&gpu]
        );
        let class = last[&gpu]["class"].as_str().expect("class");
        let diag = query(&format!(
            "gpuslack_diagnosis_ratio{{gpuslack_gpu_index=\"{gpu}\",gpuslack_diagnosis_class=\"{class}\"}}"
        ));
        assert_eq!(diag[0]["value"][1], "1", "GPU {gpu}: {diag:?}");
    }
    let energy = query("hw_energy_joules_total");
    assert_eq!(energy.len(), 2, "{energy:?}");
    assert_eq!(
        query("target_info")[0]["metric"]["service_name"],
        "gpuslack"
    );
}

#[test]
fn processes_and_their_owner_reach_the_collector() {
    let dir = temp_dir("processes");
    let (_rotel, grpc, _, collected) = start_rotel(&dir);
    // GPU 0: one training process in a container; GPU 1: two processes of another job.
    let container = "3f4c2e1b9a8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b";
    let one = format!(
        r#"[{{"pid":4242,"name":"python","user":"alice","gpu_mem_bytes":2.5e9,"sm_pct":87,"cpu_pct":104,"thread_pct":99,"pgid":4200,"container_id":"{container}"}}]"#
    );
    let two = r#"[{"pid":5000,"name":"trainer","sm_pct":60,"pgid":5000},{"pid":5001,"name":"holder","gpu_mem_bytes":1e9,"sm_pct":0,"pgid":5000}]"#;
    // The kubelet assigned GPU 0 to one container of one pod, and GPU 1 to two time-sliced pods.
    let trainer = r#"[{"pod":"trainer-0","namespace":"ml","container":"trainer"}]"#;
    let sliced = r#"[{"pod":"nb-a","namespace":"lab","container":"c"},{"pod":"nb-b","namespace":"lab","container":"c"}]"#;
    let quote = |json: &str| format!("\"{}\"", json.replace('"', "\"\""));
    let mut text = String::from("t,gpu,util_gpu,power_mw,nprocs,processes,pods\n");
    for i in 0..40 {
        let t = 1796025905.0 + f64::from(i) * 0.25;
        text.push_str(&format!(
            "{t},0,100,600000,1,{},{}\n",
            quote(&one),
            quote(trainer)
        ));
        text.push_str(&format!(
            "{t},1,100,300000,2,{},{}\n",
            quote(two),
            quote(sliced)
        ));
    }
    let trace = dir.join("procs.csv");
    std::fs::write(&trace, text).expect("trace");
    let run = replay_run_of(
        &trace.display().to_string(),
        &[
            "--speed",
            "0",
            "--otlp-endpoint",
            &format!("http://127.0.0.1:{grpc}"),
            "--process-series",
            "1",
        ],
        &[],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let records = read_collected(&collected, true);
    // Gauges name the GPU, never its owner: an owner change starts no gauge series.
    let power = points_of(&records, "hw.power");
    assert!(power.len() >= 2, "{power:?}");
    for (_, p) in &power {
        for key in gpuslack_receiver::export::point::OWNER_KEYS {
            assert!(
                p["attributes"].get(key).is_none(),
                "hw.power names {key}: {p}"
            );
        }
    }
    // The owner rides on the per-owner counters and on the GPU's job info.
    let attrs_of = |metric: &str, gpu: &str| {
        points_of(&records, metric)
            .iter()
            .rfind(|(_, p)| {
                p["attributes"]["gpuslack.gpu.index"] == gpu
                    && p["attributes"].get("gpuslack.job.id").is_some()
            })
            .map(|(_, p)| p["attributes"].clone())
            .unwrap_or_else(|| panic!("no owned {metric} for GPU {gpu}"))
    };
    // The lone process owns GPU 0: its pid, executable and container name its series.
    for metric in ["hw.energy", "gpuslack.diagnosis.time", "gpuslack.job.info"] {
        let gpu0 = attrs_of(metric, "0");
        assert_eq!(
            gpu0["process.pid"], 4242,
            "{metric}: an int, as semconv types it"
        );
        assert_eq!(gpu0["process.executable.name"], "python", "{metric}");
        assert_eq!(gpu0["container.id"], container, "{metric}");
        assert_eq!(
            gpu0["gpuslack.job.id"], "container:3f4c2e1b9a8d",
            "{metric}"
        );
        assert_eq!(gpu0["k8s.pod.name"], "trainer-0", "{metric}");
        assert_eq!(gpu0["k8s.namespace.name"], "ml", "{metric}");
        assert_eq!(gpu0["k8s.container.name"], "trainer", "{metric}");
        // GPU 1 is shared: no single process owns it, nor a pod; its job is the process group.
        let gpu1 = attrs_of(metric, "1");
        assert!(gpu1.get("process.pid").is_none(), "{metric}: {gpu1}");
        assert!(gpu1.get("k8s.pod.name").is_none(), "{metric}: {gpu1}");
        assert_eq!(gpu1["gpuslack.job.id"], "pgid:5000", "{metric}");
    }
    // Each container the GPU is assigned to has its assignment series: GPU 1's two pods too.
    let assigned = |gpu: &str| -> std::collections::BTreeSet<String> {
        points_of(&records, "gpuslack.gpu.assignment")
            .iter()
            .filter(|(_, p)| p["attributes"]["gpuslack.gpu.index"] == gpu && p["value"] == 1.0)
            .filter_map(|(_, p)| p["attributes"]["k8s.pod.name"].as_str().map(String::from))
            .collect()
    };
    assert_eq!(assigned("0"), ["trainer-0"].map(String::from).into());
    assert_eq!(assigned("1"), ["nb-a", "nb-b"].map(String::from).into());
    // The verdict-change records name whose GPU changed, in the collector and in the log: an
    // event is no series, so it names the owner.
    let change = records
        .iter()
        .find(|r| r["signal"] == "log" && r["attributes"]["gpuslack.gpu.index"] == "0")
        .expect("a verdict change of GPU 0 reached the collector");
    assert_eq!(
        change["attributes"]["k8s.pod.name"], "trainer-0",
        "{change}"
    );
    assert_eq!(
        change["attributes"]["gpuslack.job.id"],
        "container:3f4c2e1b9a8d"
    );
    let log = String::from_utf8_lossy(&run.stderr);
    let line = log
        .lines()
        .find(|l| l.contains("diagnosis changed") && l.contains("gpu=0"))
        .unwrap_or_else(|| panic!("no change of GPU 0 logged: {log}"));
    assert!(
        line.contains("job=\"container:3f4c2e1b9a8d\" pod=\"ml/trainer-0\""),
        "{line}"
    );
    // Per-process series, bounded: --process-series 1 keeps GPU 1's busiest process only.
    let sm = points_of(&records, "gpuslack.process.sm.activity");
    let pids: std::collections::BTreeSet<i64> = sm
        .iter()
        .filter_map(|(_, p)| p["attributes"]["process.pid"].as_i64())
        .collect();
    assert_eq!(pids, [4242, 5000].into());
    let python = sm
        .iter()
        .rfind(|(_, p)| p["attributes"]["process.pid"] == 4242)
        .map(|(_, p)| p["value"].as_f64().expect("value"))
        .expect("python's share");
    assert!((python - 0.87).abs() < 1e-9);
    let cpu = points_of(&records, "gpuslack.process.cpu.utilization");
    assert!(cpu
        .iter()
        .any(|(_, p)| p["attributes"]["gpuslack.thread"] == "busiest"
            && p["attributes"]["process.pid"] == 4242
            && (p["value"].as_f64().unwrap_or(0.0) - 0.99).abs() < 1e-9));
    // On Prometheus, the owner's labels and a process series' own name one process once.
    let port = free_port();
    let _agent = Server(
        Command::new(env!("CARGO_BIN_EXE_gpuslack"))
            .env("GPUSLACK_METRICS", "full")
            .args([
                "run",
                "--replay",
                &trace.display().to_string(),
                "--speed",
                "0",
            ])
            .args([
                "--prometheus",
                &format!("127.0.0.1:{port}"),
                "--linger-s",
                "8",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent starts"),
    );
    wait_for_port(port, "gpuslack's Prometheus endpoint");
    let started = Instant::now();
    let mut text = String::new();
    while !text.contains("gpuslack_process_sm_activity_ratio{")
        && started.elapsed() < Duration::from_secs(8)
    {
        std::thread::sleep(Duration::from_millis(200));
        let out = Command::new("curl")
            .args(["-s", &format!("http://127.0.0.1:{port}/metrics")])
            .output()
            .expect("curl");
        text = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gpuslack_process_sm_activity_ratio{"))
        .collect();
    assert_eq!(series.len(), 3, "{text}");
    for line in series {
        let labels = &line[line.find('{').expect("{") + 1..line.rfind('}').expect("}")];
        let keys: Vec<&str> = labels
            .split("\",")
            .filter_map(|kv| kv.split('=').next())
            .map(|k| k.trim_start_matches(','))
            .collect();
        let unique: std::collections::BTreeSet<&str> = keys.iter().copied().collect();
        assert_eq!(unique.len(), keys.len(), "a label twice: {line}");
        assert_eq!(line.matches("process_pid=").count(), 1, "{line}");
    }
    assert!(
        text.lines().any(|l| l.ends_with("} 0.87")
            && [
                "process_pid=\"4242\"",
                "process_executable_name=\"python\"",
                "process_owner=\"alice\""
            ]
            .iter()
            .all(|label| l.contains(label))),
        "{text}"
    );
    let nb_a = text
        .lines()
        .find(|l| l.starts_with("gpuslack_gpu_assignment{") && l.contains("k8s_pod_name=\"nb-a\""))
        .unwrap_or_else(|| panic!("no assignment series of nb-a: {text}"));
    assert!(
        nb_a.ends_with("} 1")
            && nb_a.contains("k8s_namespace_name=\"lab\"")
            && nb_a.contains("k8s_container_name=\"c\""),
        "{nb_a}"
    );
}

#[test]
fn health_metrics_and_the_resource_reach_the_collector_with_their_attributes() {
    // A live H200 recording with the health columns (ECC, remapped rows, PCIe replays, Xid,
    // memory temperature, encoder/decoder), replayed to Rotel over gRPC.
    let dir = temp_dir("health");
    let (_rotel, grpc, _, out) = start_rotel(&dir);
    let trace = common::repo("tests/fixtures/h200-health/samples.csv");
    let run = replay_run_of(
        &trace.display().to_string(),
        &[
            "--speed",
            "0",
            "--otlp-endpoint",
            &format!("http://127.0.0.1:{grpc}"),
        ],
        &[("K8S_NODE_NAME", "gpu-node-17")],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let records = read_collected(&out, false);
    let resource = &records[0]["resource"];
    assert_eq!(resource["k8s.node.name"], "gpu-node-17");
    assert_eq!(resource["telemetry.sdk.name"], "opentelemetry");
    assert_eq!(resource["telemetry.sdk.language"], "rust");
    assert!(resource["host.arch"].is_string(), "{resource}");
    let value = |name: &str, attrs: &[(&str, &str)]| -> Option<f64> {
        points_of(&records, name)
            .into_iter()
            .rfind(|(_, p)| attrs.iter().all(|(k, v)| p["attributes"][*k] == *v))
            .and_then(|(_, p)| p["value"].as_f64())
    };
    // The H200 had no errors: zeros that arrive, not absences.
    for (kind, source) in [
        ("corrected", "ecc"),
        ("uncorrected", "ecc"),
        ("replay", "pcie"),
        ("xid", "driver"),
    ] {
        assert_eq!(
            value(
                "hw.errors",
                &[("error.type", kind), ("gpuslack.error.source", source)]
            ),
            Some(0.0),
            "hw.errors {kind}/{source}"
        );
    }
    let (errors, _) = points_of(&records, "hw.errors")[0];
    assert_eq!(
        (errors["unit"].as_str(), errors["monotonic"].as_bool()),
        (Some("{error}"), Some(true))
    );
    assert_eq!(value("hw.status", &[("hw.state", "ok")]), Some(1.0));
    assert_eq!(value("hw.status", &[("hw.state", "failed")]), Some(0.0));
    assert_eq!(
        value(
            "gpuslack.ecc.errors",
            &[
                ("error.type", "uncorrected"),
                ("gpuslack.ecc.counter", "aggregate")
            ]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            "gpuslack.memory.remapped_rows",
            &[("error.type", "corrected")]
        ),
        Some(0.0)
    );
    assert_eq!(value("gpuslack.xid.last", &[]), Some(0.0));
    let memory_c = value("hw.temperature", &[("hw.sensor_location", "memory")]).expect("HBM");
    let gpu_c = value("hw.temperature", &[("hw.sensor_location", "gpu")]).expect("GPU");
    assert!((20.0..90.0).contains(&memory_c) && (20.0..90.0).contains(&gpu_c));
    assert_eq!(
        value("hw.gpu.utilization", &[("hw.gpu.task", "encoder")]),
        Some(0.0)
    );
    // Clocks in Hz: the H200's memory clock, 3,201 MHz in the recording.
    assert_eq!(value("gpuslack.clock.memory", &[]), Some(3.201e9));
    // The cost of slack: the recording's last verdict, latency_bound (DRAM 50%, tensor 11%:
    // under the speed-of-light line), took its share.
    let busy = value(
        "gpuslack.diagnosis.time",
        &[("gpuslack.diagnosis.class", "latency_bound")],
    )
    .expect("time");
    assert!(busy >= 8.0, "{busy} s latency_bound");
    // The headroom names its unit through one bounded attribute: DRAM, at 50% of its peak.
    let headroom = value("gpuslack.headroom", &[("gpuslack.headroom.unit", "dram")])
        .expect("the headroom names DRAM");
    assert!((headroom - 0.504).abs() < 0.01, "{headroom}");
    // hw.energy has a series per owner of the GPU (here the recorded job, `pgid:715`, from
    // the start), each counting its own span; together, the counter's rise over the recording.
    let mut last_of_series: BTreeMap<String, f64> = BTreeMap::new();
    for (_, p) in points_of(&records, "hw.energy") {
        let owner = p["attributes"]["gpuslack.job.id"].to_string();
        last_of_series.insert(owner, p["value"].as_f64().expect("value"));
    }
    assert!(
        last_of_series.contains_key("\"pgid:715\""),
        "{last_of_series:?}"
    );
    let text = std::fs::read_to_string(&trace).expect("trace");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let e = header
        .iter()
        .position(|c| *c == "energy_mj")
        .expect("energy_mj");
    let readings: Vec<f64> = lines
        .filter_map(|l| l.split(',').nth(e).and_then(|v| v.parse().ok()))
        .collect();
    let rise_j = (readings[readings.len() - 1] - readings[0]) / 1000.0;
    let exported: f64 = last_of_series.values().sum();
    assert!(
        rise_j > 1000.0 && (exported - rise_j).abs() < 1e-3,
        "{exported} J exported over the owners, the counter rose {rise_j} J"
    );
}

/// `OTEL_RESOURCE_ATTRIBUTES` as a hostile user writes it: a `/` (Kubernetes label keys), two
/// keys that meet once sanitised, a leading digit, a reserved `__` key, a unicode key, quotes,
/// a line feed and a backslash in values, and 200 attributes in all.
fn hostile_resource_attributes() -> String {
    let mut attrs = vec![
        "team/owner=b".to_string(),
        "team.owner=a".into(),
        "0day=x".into(),
        "__name__=evil".into(),
        "équipe=ml%2Fcv".into(),
        "quote=say%22hi%22".into(),
        "nl=line1%0Aline2".into(),
        "back=a%5Cb".into(),
    ];
    attrs.extend((attrs.len()..200).map(|i| format!("attr.{i}=v{i}")));
    attrs.join(",")
}

#[test]
fn any_resource_attribute_keeps_the_scrape_valid_in_prometheus_and_promtool() {
    let dir = temp_dir("hostile-attributes");
    let agent_port = free_port();
    let agent = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args([
            "run",
            "--replay",
            &fixture(),
            "--speed",
            "0",
            "--linger-s",
            "30",
        ])
        .args(["--prometheus", &format!("127.0.0.1:{agent_port}")])
        .env("OTEL_RESOURCE_ATTRIBUTES", hostile_resource_attributes())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent starts");
    let _agent = common::Server(agent);
    common::wait_for_port(agent_port, "gpuslack's Prometheus endpoint");
    let (_prometheus, prom_port) = start_prometheus(&dir, agent_port);
    let query = |q: &str| -> Vec<Value> {
        prometheus_query(prom_port, q)["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let started = Instant::now();
    let mut info = Vec::new();
    while info.is_empty() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(500));
        info = query("target_info");
    }
    assert_eq!(query("up")[0]["value"][1], "1", "the target is up");
    let labels = &info.first().expect("target_info scraped")["metric"];
    assert_eq!(labels["team_owner"], "a;b", "{labels}");
    assert_eq!(labels["key_0day"], "x");
    assert_eq!(labels["key_name_"], "evil");
    assert_eq!(labels["_quipe"], "ml/cv");
    assert_eq!(labels["quote"], "say\"hi\"");
    assert_eq!(labels["nl"], "line1\nline2");
    assert_eq!(labels["back"], "a\\b");
    assert_eq!(labels["attr_199"], "v199");
    // Prometheus negotiated OpenMetrics (its default Accept); the same state as text, for
    // promtool and for counting.
    let scrape = |accept: &str| {
        let out = Command::new("curl")
            .args(["-s", "-i", "-H", &format!("Accept: {accept}")])
            .arg(format!("http://127.0.0.1:{agent_port}/metrics"))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let open_metrics = scrape("application/openmetrics-text;version=1.0.0,text/plain;q=0.5");
    assert!(
        open_metrics.contains("application/openmetrics-text; version=1.0.0")
            && open_metrics.trim_end().ends_with("# EOF"),
        "{}",
        &open_metrics[..open_metrics.len().min(400)]
    );
    let text = scrape("text/plain");
    let body = text.split("\r\n\r\n").nth(1).expect("a body").to_string();
    let samples = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    // Every sample is a series Prometheus stored (besides the five it makes per scrape: up,
    // scrape_duration_seconds, scrape_samples_*, scrape_series_added).
    let stored: usize = query("count({job=\"gpuslack\"})")[0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("a count");
    // Two GPUs in the default, lean set: about 20 series each, and the agent's own.
    assert!(samples > 30, "{samples} samples");
    assert_eq!(stored, samples + 5, "every sample is a stored series");
    common::assert_promtool_accepts(&body);
}

#[test]
fn per_signal_endpoints_are_used_and_ints_arrive_as_ints() {
    let dir = temp_dir("per-signal");
    let (_rotel, _, http, out) = start_rotel(&dir);
    let trace = common::repo("tests/fixtures/h200-health/samples.csv");
    // The general endpoint goes nowhere: only the per-signal ones, used as given, can deliver.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let metrics = format!("http://127.0.0.1:{http}/v1/metrics");
    let logs = format!("http://127.0.0.1:{http}/v1/logs");
    let run = replay_run_of(
        &trace.display().to_string(),
        &["--speed", "0", "--otlp-protocol", "http/protobuf"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &closed),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", &metrics),
            ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &logs),
        ],
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains(", 0 failed"),
        "every export delivered: {stderr}"
    );
    let records = read_collected(&out, true);
    assert!(
        records.iter().any(|r| r["signal"] == "log"),
        "the logs arrived"
    );
    let type_of = |name: &str| -> Vec<String> {
        points_of(&records, name)
            .into_iter()
            .map(|(_, p)| p["value_type"].as_str().unwrap_or("").to_string())
            .collect()
    };
    for name in [
        "hw.errors",
        "hw.gpu.memory.usage",
        "hw.status",
        "gpuslack.agent.windows",
    ] {
        let types = type_of(name);
        assert!(!types.is_empty(), "{name}");
        assert!(types.iter().all(|t| t.contains("Int")), "{name}: {types:?}");
    }
    for name in ["hw.power", "hw.energy"] {
        let types = type_of(name);
        assert!(
            !types.is_empty() && types.iter().all(|t| t.contains("Double")),
            "{name}: {types:?}"
        );
    }
    let pids: Vec<Value> = records
        .iter()
        .filter(|r| r["signal"] == "metric")
        .flat_map(|r| r["points"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["attributes"].get("process.pid").cloned())
        .collect();
    assert!(!pids.is_empty(), "process series");
    assert!(
        pids.iter().all(Value::is_i64),
        "process.pid as an int: {pids:?}"
    );
    let first = records
        .iter()
        .find(|r| r["signal"] == "metric")
        .expect("a metric");
    assert_eq!(first["scope"]["name"], "gpuslack", "{first}");
    assert_eq!(first["scope"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        first["scope"]["schema_url"],
        "https://opentelemetry.io/schemas/1.42.0"
    );
    let instance = first["resource"]["service.instance.id"]
        .as_str()
        .expect("service.instance.id");
    assert_eq!(instance.len(), 36, "a UUID: {instance}");
}

/// The exposition, in each format, through `tests/support/parse_exposition.py`
/// (prometheus_client's parsers); its JSON summary, or the parser's error.
fn strict_parse(format: &str, body: &str) -> Result<Value, String> {
    use std::io::Write as _;
    let mut parser = Command::new(common::tool("GPUSLACK_PYTHON"))
        .arg(common::repo("tests/support/parse_exposition.py"))
        .arg(format)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the parser starts");
    parser
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("the parser reads");
    let out = parser.wait_with_output().expect("the parser ends");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// Every scrape, OpenMetrics and text, parses with a strict parser (prometheus_client) beside
/// promtool, whatever the resource's attributes. Python's OpenMetrics parser stopped at
/// "Clashing name" on `# HELP target_info` before `# TYPE target info`, and an attribute named
/// `le` failed `promtool check metrics`: names Prometheus reserves are remapped (`key_le`).
#[test]
fn every_scrape_parses_strictly_in_both_formats_whatever_the_attributes() {
    let agent_port = free_port();
    let attributes = format!(
        "{},le=0.5,quantile=0.99,__meta_x=m",
        hostile_resource_attributes()
    );
    let agent = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args([
            "run",
            "--replay",
            &fixture(),
            "--speed",
            "0",
            "--linger-s",
            "30",
            // Every family, each of which the strict parsers must take.
            "--metrics",
            "full",
        ])
        .args(["--prometheus", &format!("127.0.0.1:{agent_port}")])
        .env("OTEL_RESOURCE_ATTRIBUTES", attributes)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent starts");
    let _agent = common::Server(agent);
    wait_for_port(agent_port, "gpuslack's Prometheus endpoint");
    let scrape = |accept: &str| {
        let out = Command::new("curl")
            .args(["-s", "-H", &format!("Accept: {accept}")])
            .arg(format!("http://127.0.0.1:{agent_port}/metrics"))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Once the replay's windows are in, GPU series and the agent's own are both there.
    let started = Instant::now();
    let mut text = scrape("text/plain");
    while !text.contains("hw_power_watts") && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(300));
        text = scrape("text/plain");
    }
    let open_metrics = scrape("application/openmetrics-text;version=1.0.0");
    assert!(open_metrics.trim_end().ends_with("# EOF"), "{open_metrics}");
    for (format, body) in [("openmetrics", &open_metrics), ("text", &text)] {
        let parsed = strict_parse(format, body).unwrap_or_else(|e| panic!("{format}: {e}"));
        let samples = body
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count() as u64;
        assert!(samples > 100, "{format}: {samples} samples");
        assert_eq!(parsed["samples"], samples, "{format}: {parsed}");
        let labels: Vec<&str> = parsed["labels"]
            .as_array()
            .expect("labels")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for name in [
            "key_le",
            "key_quantile",
            "key_meta_x",
            "team_owner",
            "hw_id",
        ] {
            assert!(labels.contains(&name), "{format}: no {name} in {labels:?}");
        }
        assert!(
            !labels.contains(&"le") && !labels.contains(&"quantile"),
            "{format}: {labels:?}"
        );
        let names = parsed["names"].as_array().expect("names");
        let info = if format == "openmetrics" {
            "target"
        } else {
            "target_info"
        };
        assert!(names.iter().any(|n| n == info), "{format}: {names:?}");
    }
    common::assert_promtool_accepts(&text);
}
