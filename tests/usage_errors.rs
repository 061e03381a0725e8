//! Every subcommand's usage errors, walked (issue #42): a bad flag value, a missing file, a
//! missing required argument or flag. Each failure prints one line on stderr that says why,
//! naming the flag, the file or the argument, says nothing twice, and exits with the code
//! docs/OUTPUT.md gives: 2 for what clap refuses (and `fleet`'s usage errors), 1 for a value a
//! flag's own check refuses or a file that cannot be read.

use std::process::{Command, Output};

fn gpuslack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(args)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("gpuslack runs")
}

fn fixture(path: &str) -> String {
    format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// The parts of a message, split where messages join their causes.
fn parts(line: &str) -> Vec<String> {
    line.split([':', ';', '(', ')'])
        .map(|p| p.trim().to_string())
        .filter(|p| p.len() >= 12)
        .collect()
}

#[test]
fn every_usage_error_is_one_line_that_says_why() {
    let trace = fixture("h200-reference/samples.csv");
    let labels = fixture("h200-reference/labels.json");
    let t = trace.as_str();
    let l = labels.as_str();
    // (arguments, exit code, what the line must name)
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        // diagnose
        (
            vec!["diagnose", "--trace", "/nonexistent/a.csv"],
            1,
            "/nonexistent/a.csv: cannot open",
        ),
        (vec!["diagnose", "--seconds", "x"], 2, "'--seconds <N>'"),
        (
            vec!["diagnose", "--format", "xml"],
            2,
            "'--format <FORMAT>'",
        ),
        (
            vec!["diagnose", "--trace", t, "--price-kwh", "-1"],
            1,
            "--price-kwh must be a price",
        ),
        (
            vec!["diagnose", "--trace", t, "--profile", "/nonexistent/p.toml"],
            1,
            "/nonexistent/p.toml",
        ),
        (
            vec!["diagnose", "--trace", t, "--window-s", "0"],
            1,
            "--window-s must be",
        ),
        (
            vec!["diagnose", "--interval-ms", "5"],
            1,
            "--interval-ms must be between 10 and 60000",
        ),
        (vec!["diagnose", "--detial"], 2, "'--detial'"),
        // replay
        (vec!["replay"], 2, "<TRACE>"),
        (
            vec!["replay", "/nonexistent/a.csv"],
            1,
            "/nonexistent/a.csv: cannot open",
        ),
        (
            vec!["replay", t, "--cadence", "fast"],
            2,
            "'--cadence <adaptive|MS>'",
        ),
        (vec!["replay", t, "--tdp-w", "-3"], 1, "--tdp-w must be"),
        (
            vec!["replay", t, "--format", "csv"],
            2,
            "'--format <FORMAT>'",
        ),
        // score
        (vec!["score"], 2, "<TRACE> <LABELS>"),
        (
            vec!["score", "/nonexistent/a.csv", l],
            1,
            "/nonexistent/a.csv: cannot open",
        ),
        (
            vec!["score", t, "/nonexistent/l.json"],
            1,
            "/nonexistent/l.json: cannot read",
        ),
        (
            vec!["score", t, l, "--min-overall", "150"],
            2,
            "'--min-overall <SHARE>'",
        ),
        (
            vec!["score", t, l, "--min-segment", "-1"],
            2,
            "'--min-segment <SHARE>'",
        ),
        // record
        (vec!["record"], 2, "--out <FILE>"),
        (
            vec![
                "record",
                "--out",
                "/tmp/gpuslack-never.csv",
                "--format",
                "xml",
            ],
            2,
            "'--format <FORMAT>'",
        ),
        (
            vec![
                "record",
                "--out",
                "/tmp/gpuslack-never.csv",
                "--interval-ms",
                "5",
            ],
            1,
            "--interval-ms must be",
        ),
        // convert
        (vec!["convert"], 2, "<INPUT> <OUTPUT>"),
        (
            vec![
                "convert",
                "/nonexistent/a.csv",
                "/tmp/gpuslack-never.gstrace",
            ],
            1,
            "/nonexistent/a.csv: cannot open",
        ),
        (
            vec!["convert", t, "/tmp/gpuslack-never.bin", "--to", "xml"],
            2,
            "'--to <TO>'",
        ),
        // run
        (
            vec!["run", "--replay", "/nonexistent/a.csv"],
            1,
            "/nonexistent/a.csv: cannot open",
        ),
        (
            vec!["run", "--replay", t, "--speed", "-1"],
            1,
            "--speed must be",
        ),
        (
            vec!["run", "--replay", t, "--seconds", "x"],
            2,
            "'--seconds <N>'",
        ),
        (vec!["run", "--otlp-protocol", "foo"], 1, "--otlp-protocol"),
        (
            vec!["run", "--config", "/nonexistent/g.toml"],
            1,
            "/nonexistent/g.toml: cannot read",
        ),
        (
            vec!["run", "--prometheus", "notanaddr"],
            1,
            "--prometheus: \"notanaddr\"",
        ),
        (
            vec!["run", "--replay", t, "--otlp-endpoint", "notaurl"],
            1,
            "\"notaurl\" must start with http",
        ),
        (
            vec!["run", "--process-series", "65"],
            1,
            "--process-series must be at most 64",
        ),
        // bench
        (vec!["bench", "foo"], 1, "unknown workload `foo`"),
        (vec!["bench", "tiny", "--gpu", "x"], 2, "'--gpu <GPU>'"),
        (
            vec!["bench", "starved", "--duty", "nan"],
            2,
            "'--duty <DUTY>'",
        ),
        // calibrate
        (
            vec!["calibrate", "--from-recording", "/nonexistent/dir"],
            1,
            "/nonexistent/dir/samples.csv: cannot open",
        ),
        (
            vec!["calibrate", "--format", "xml"],
            2,
            "'--format <FORMAT>'",
        ),
        // fleet
        (vec!["fleet"], 2, "--prometheus URL is required"),
        (
            vec!["fleet", "--prometheus", "notaurl"],
            2,
            "--prometheus notaurl: not a usable URL",
        ),
        (
            vec![
                "fleet",
                "--prometheus",
                "http://127.0.0.1:9",
                "--since",
                "3x",
            ],
            2,
            "--since \"3x\"",
        ),
        (
            vec!["fleet", "--prometheus", "http://127.0.0.1:9", "job"],
            2,
            "<JOB>",
        ),
        // doctor: its own flags and run's export flags, each refused by name
        (vec!["doctor", "--format", "yaml"], 2, "--format"),
        (
            vec!["doctor", "--prometheus", "not an address"],
            1,
            "--prometheus",
        ),
        (
            vec!["doctor", "--config", "/nonexistent/gpuslack.toml"],
            1,
            "/nonexistent/gpuslack.toml",
        ),
        // no such command
        (vec!["nosuchcommand"], 2, "'nosuchcommand'"),
    ];
    // Every subcommand is walked.
    let help = String::from_utf8_lossy(&gpuslack(&["--help"]).stdout).into_owned();
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .expect("commands")
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    for command in &commands {
        assert!(
            cases.iter().filter(|(a, _, _)| a[0] == *command).count() >= 2,
            "no usage errors walked for `gpuslack {command}`"
        );
    }
    for (args, code, names) in &cases {
        let out = gpuslack(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line, not\n{err}");
        let line = lines[0];
        assert!(line.starts_with("error: "), "{args:?}: {line}");
        assert!(
            line.contains(names),
            "{args:?}: the line does not name {names:?}: {line}"
        );
        let said = parts(line);
        for (i, part) in said.iter().enumerate() {
            assert!(
                !said[i + 1..].contains(part),
                "{args:?}: {part:?} said twice: {line}"
            );
        }
    }
}

#[test]
fn a_failing_score_names_the_figure_that_failed() {
    // The recording without GPM scores 85.8% (its transformer step, latency_bound by the
    // speed-of-light line, reads compute_bound without GPM; the FP32 FMA chain and a GEMM's last
    // window read latency_bound) and a segment at 0%: under both defaults.
    let out = gpuslack(&[
        "score",
        &fixture("h200-verdicts-nogpm/samples.csv"),
        &fixture("h200-verdicts-nogpm/labels.json"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "gpuslack: score failed: 91/106 windows right overall (85.8%), under --min-overall 95.0%",
            "gpuslack: score failed: segment \"transformer_train\" on GPU 0 has 0.0% of its 5 windows right, under --min-segment 80.0%",
        ]
    );
    // The same score passes at thresholds it meets, written as a percent or a share.
    let out = gpuslack(&[
        "score",
        &fixture("h200-verdicts-nogpm/samples.csv"),
        &fixture("h200-verdicts-nogpm/labels.json"),
        "--min-overall",
        "85%",
        "--min-segment",
        "0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
}

#[test]
fn without_a_gpu_run_says_why_once_and_nothing_else() {
    let out = gpuslack(&["run", "--seconds", "2"]);
    assert_eq!(out.status.code(), Some(69));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("error: NVML could not be loaded ("),
        "{err}"
    );
    assert!(!err.contains("windows produced"), "{err}");
    assert!(!err.contains("installed?;"), "{err}");
}

#[test]
fn the_prometheus_log_lines_show_the_address_it_listens_on() {
    let out = gpuslack(&[
        "-v",
        "run",
        "--replay",
        &fixture("h200-health/samples.csv"),
        "--speed",
        "0",
        "--prometheus",
        "127.0.0.1:0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = err
        .lines()
        .find(|l| l.contains("serving Prometheus metrics"))
        .unwrap_or_else(|| panic!("no serving line in\n{err}"));
    assert!(line.contains("addr=127.0.0.1:"), "{line}");
    assert!(!line.contains("Some("), "{line}");
    // The start line names the port the endpoint took, not the `:0` asked for.
    let port: String = line
        .split("addr=127.0.0.1:")
        .nth(1)
        .expect("port")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert!(
        err.contains(&format!("Prometheus on http://127.0.0.1:{port}/metrics")),
        "{err}"
    );
}
