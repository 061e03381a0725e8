//! The command line as users and other tools meet it: the JSON-lines contract of `replay`, the
//! errors for bad traces, and `diagnose` on a machine without a GPU.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod common;
use common::{command as gpuslack, fixture_samples as fixture, stderr, stdout};

/// Writes `text` into a fresh temporary file and returns its path.
fn temp_trace(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuslack-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("samples.csv");
    std::fs::write(&path, text).expect("write trace");
    path
}

#[test]
fn replay_jsonl_keeps_its_contract() {
    let out = gpuslack(&[
        "replay",
        &fixture("h200x2-scenarios"),
        "--tdp-w",
        "700",
        "--format",
        "jsonl",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect();
    // 2 GPUs × 78 windows of 2 s: 153 s of samples from 1796025905.08 on.
    assert_eq!(lines.len(), 156);
    let mut last_start = 0.0;
    for v in &lines {
        assert_eq!(v["schema"], "gpuslack.window.v1");
        let gpu = v["gpu"].as_u64().expect("gpu is an integer");
        assert!(gpu <= 1);
        let (start, end) = (
            v["start"].as_f64().expect("start"),
            v["end"].as_f64().expect("end"),
        );
        assert_eq!(end - start, 2.0);
        assert!(start >= last_start, "windows come out in time order");
        last_start = start;
        let class = v["class"].as_str().expect("class");
        assert!(
            gpuslack_receiver::Class::from_name(class).is_some(),
            "{class}"
        );
        let sm = v["sm_active"].as_f64().expect("sm_active is a share");
        assert!((0.0..=1.0).contains(&sm));
        let power = v["power_w"].as_f64().expect("power_w");
        let eff = v["efficiency"].as_f64().expect("efficiency with a TDP");
        assert!((eff - power / 700.0 * sm).abs() < 0.002, "{v}");
        let evidence = v["evidence"].as_array().expect("evidence list");
        assert!(!evidence.is_empty());
        for e in evidence {
            assert!(e["signal"].is_string() && e["value"].is_number() && e["text"].is_string());
        }
        assert!(v["remedy"].as_str().is_some_and(|r| !r.is_empty()));
    }
    let hung = lines.iter().filter(|v| v["class"] == "hung").count();
    assert!(hung >= 5, "{hung} hung windows");
}

#[test]
fn replay_jsonl_names_each_windows_job_and_processes() {
    let trace = temp_trace(
        "jsonl-processes",
        "t,gpu,util_gpu,processes\n\
         1796025905,0,100,\"[{\"\"pid\"\":41,\"\"pgid\"\":7,\"\"sm_pct\"\":50}]\"\n\
         1796025906,0,100,\"[{\"\"pid\"\":41,\"\"pgid\"\":7,\"\"slurm_job\"\":\"\"812\"\"}]\"\n\
         1796025907,0,100,\n",
    );
    let out = gpuslack(&["replay", &trace.display().to_string(), "--format", "jsonl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    // Windows of 2 s from 1796025904: the first saw one list, its process group the job.
    assert_eq!(lines[0]["job"], "pgid:7");
    assert_eq!(lines[0]["processes"][0]["pid"], 41);
    assert_eq!(lines[0]["processes"][0]["sm_pct"], 50.0);
    // The second: the same process, now known to run in a Slurm job, which names the job;
    // the row without a list (not sampled) does not empty it.
    assert_eq!(lines[1]["job"], "slurm:812");
    assert_eq!(lines[1]["processes"][0]["slurm_job"], "812");
    assert!(lines[1]["processes"][0]["sm_pct"].is_null(), "{}", lines[1]);
}

#[test]
fn replay_without_tdp_gives_null_efficiency() {
    let out = gpuslack(&["replay", &fixture("h200x2-scenarios"), "--format", "jsonl"]);
    assert!(out.status.success());
    let first: Value =
        serde_json::from_str(stdout(&out).lines().next().expect("a line")).expect("json");
    assert!(first["efficiency"].is_null());
    assert!(first["tdp_w"].is_null());
}

#[test]
fn replay_reads_facts_json_beside_the_trace() {
    let out = gpuslack(&["replay", &fixture("h200-reference"), "--format", "jsonl"]);
    let first: Value =
        serde_json::from_str(stdout(&out).lines().next().expect("a line")).expect("json");
    assert_eq!(first["tdp_w"], 700.0);
}

#[test]
fn a_bad_number_fails_naming_file_line_and_column() {
    let path = temp_trace(
        "bad-number",
        "t,gpu,power_mw\n100.0,0,80000\n100.1,0,eighty\n",
    );
    let out = gpuslack(&["replay", &path.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{}:3: column `power_mw`: not a number: \"eighty\"",
            path.display()
        )),
        "{err}"
    );
    assert!(!err.contains("panicked"));
}

#[test]
fn unsorted_time_fails_naming_the_line() {
    let path = temp_trace("unsorted", "t,power_mw\n100.0,1\n104.0,1\n101.0,1\n");
    let out = gpuslack(&["replay", &path.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(":4: GPU 0: sample at t=101.0000 is older than the window in progress"),
        "{err}"
    );
}

#[test]
fn duplicate_rows_are_skipped_and_change_nothing() {
    let clean = "t,util_gpu,power_mw\n100.0,50,200000\n100.5,50,200000\n102.5,0,80000\n";
    let doubled = "t,util_gpu,power_mw\n100.0,50,200000\n100.0,50,200000\n100.5,50,200000\n102.5,0,80000\n102.5,0,80000\n";
    let a = gpuslack(&[
        "replay",
        &temp_trace("clean", clean).display().to_string(),
        "--format",
        "jsonl",
    ]);
    let b = gpuslack(&[
        "replay",
        &temp_trace("dup", doubled).display().to_string(),
        "--format",
        "jsonl",
    ]);
    assert!(a.status.success() && b.status.success());
    assert_eq!(stdout(&a), stdout(&b));
    assert_eq!(stdout(&a).lines().count(), 2);
}

#[test]
fn an_empty_file_and_a_missing_file_are_clear_errors() {
    let empty = temp_trace("empty", "");
    let out = gpuslack(&["replay", &empty.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the file is empty"),
        "{}",
        stderr(&out)
    );

    let out = gpuslack(&["replay", "/nonexistent/trace.csv"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("/nonexistent/trace.csv: cannot open"),
        "{}",
        stderr(&out)
    );
}

/// Issue #47: `replay` and `score` take a trace's folder as `calibrate --from-recording` does,
/// and a folder with no trace fails before any header is printed.
#[test]
fn replay_and_score_take_a_trace_folder() {
    let file = fixture("h200-diagnose-job");
    let dir = Path::new(&file).parent().expect("the fixture's folder");
    let by_file = gpuslack(&["replay", &file, "--format", "jsonl"]);
    let by_dir = gpuslack(&["replay", &dir.display().to_string(), "--format", "jsonl"]);
    assert!(by_dir.status.success(), "{}", stderr(&by_dir));
    assert_eq!(stdout(&by_dir), stdout(&by_file));
    assert_eq!(stdout(&by_dir).lines().count(), 21);
    let scenarios = fixture("h200x2-scenarios");
    let scenarios = Path::new(&scenarios).parent().expect("folder");
    let labels = scenarios.join("labels.json").display().to_string();
    let score = gpuslack(&[
        "score",
        &scenarios.display().to_string(),
        &labels,
        "--min-overall",
        "0",
        "--min-segment",
        "0",
    ]);
    assert!(score.status.success(), "{}", stderr(&score));
    // A folder without a trace: the error names it, and nothing went to stdout.
    let empty = std::env::temp_dir().join(format!("gpuslack-cli-{}-no-trace", std::process::id()));
    std::fs::create_dir_all(&empty).expect("temp dir");
    let out = gpuslack(&["replay", &empty.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("is a folder with no trace in it"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_trace_with_few_columns_still_gets_verdicts_and_says_what_is_missing() {
    // No GPM, no process list: GPU-Util 100% at 120 W of a 700 W TDP reads as tiny kernels.
    let path = temp_trace(
        "few-columns",
        "t,util_gpu,power_mw\n100.0,100,120000\n101.0,100,120000\n102.5,0,80000\n",
    );
    let out = gpuslack(&[
        "replay",
        &path.display().to_string(),
        "--tdp-w",
        "700",
        "--format",
        "jsonl",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first: Value =
        serde_json::from_str(stdout(&out).lines().next().expect("line")).expect("json");
    assert_eq!(first["class"], "launch_bound");
    assert!(first["sm_active"].is_null() && first["efficiency"].is_null());
    let missing = first["missing"].as_array().expect("missing");
    assert!(missing
        .iter()
        .any(|m| m.as_str().is_some_and(|m| m.starts_with("gpm"))));
}

#[test]
fn bad_flags_are_refused() {
    let out = gpuslack(&["replay", &fixture("h200-reference"), "--window-s", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--window-s must be between"));
    let out = gpuslack(&["replay", &fixture("h200-reference"), "--tdp-w", "-3"]);
    assert!(!out.status.success());
}

#[test]
fn unknown_columns_are_ignored_with_one_warning_naming_them_and_the_file() {
    let path = temp_trace(
        "unknown-columns",
        "t,powr_mw,power_mw,gpm_smm\n100.0,1,200000,5\n100.5,1,200000,5\n102.5,1,80000,5\n",
    );
    let trace = path.display().to_string();
    for args in [
        vec!["replay", &trace, "--format", "jsonl"],
        vec!["diagnose", "--trace", &trace],
        vec!["run", "--replay", &trace, "--speed", "0"],
    ] {
        let out = gpuslack(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        let warnings: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("ignoring columns"))
            .collect();
        assert_eq!(warnings.len(), 1, "{args:?}: once:\n{err}");
        assert!(warnings[0].contains(" WARN "), "{}", warnings[0]);
        assert!(
            warnings[0].contains("columns=`powr_mw`, `gpm_smm`"),
            "{}",
            warnings[0]
        );
        assert!(
            warnings[0].contains(&format!("trace={trace}")),
            "{}",
            warnings[0]
        );
    }
    // Still ignored: the windows read power_mw alone.
    let out = gpuslack(&["replay", &trace, "--format", "jsonl"]);
    let first: Value =
        serde_json::from_str(stdout(&out).lines().next().expect("a window")).expect("json");
    assert_eq!(first["power_w"], 200.0);
    assert!(first["sm_active"].is_null());
    // The bundled recording's `call_us`, an earlier recorder's, draws no warning.
    let out = gpuslack(&["replay", &fixture("h200-reference")]);
    assert!(
        !stderr(&out).contains("ignoring columns"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_crlf_trace_names_the_same_line_as_its_lf_copy() {
    let lf = "t,power_mw\n100.0,80000\n# a comment\n\n100.1,eighty\n";
    for (name, text) in [("lf", lf.to_string()), ("crlf", lf.replace('\n', "\r\n"))] {
        let path = temp_trace(name, &text);
        let out = gpuslack(&["replay", &path.display().to_string()]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains(&format!(
                "{}:5: column `power_mw`: not a number",
                path.display()
            )),
            "{name}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn diagnose_a_command_that_cannot_start_exits_as_a_shell_would() {
    let dir = temp_trace("cannot-start", "").with_file_name("");
    let plain = dir.join("not-executable.sh");
    std::fs::write(&plain, "echo hi\n").expect("write");
    let plain = plain.display().to_string();
    let folder = dir.display().to_string();
    for (command, code, says) in [
        ("/nonexistent/train.py", 127, "no such file"),
        ("gpuslack-no-such-command", 127, "not found on PATH"),
        (plain.as_str(), 126, "found, but not executable"),
        (folder.as_str(), 126, "found, but not executable"),
    ] {
        let out = gpuslack(&["diagnose", "--", command, "--epochs", "1"]);
        assert_eq!(out.status.code(), Some(code), "{command}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("gpuslack: cannot run {command:?}: {says}")),
            "{command}: {err}"
        );
        assert!(!err.contains("panicked"));
    }
    // A command that starts keeps its own code, 1 included.
    let out = gpuslack(&["diagnose", "--", "sh", "-c", "exit 1"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn calibrate_writes_no_file_through_a_symbolic_link() {
    let dir = temp_trace("calibrate-links", "").with_file_name("");
    let recording = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200-reference")
        .display()
        .to_string();
    let victim = dir.join("victim.toml");
    for flag in ["--out", "--report"] {
        std::fs::write(&victim, "# precious\n").expect("write");
        let link = dir.join(format!("link{flag}"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        let out = gpuslack(&[
            "calibrate",
            "--from-recording",
            &recording,
            flag,
            &link.display().to_string(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{flag}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{flag} {}: is a symbolic link", link.display())),
            "{flag}: {}",
            stderr(&out)
        );
        assert_eq!(
            std::fs::read_to_string(&victim).expect("read"),
            "# precious\n",
            "{flag} wrote through the link"
        );
        assert!(std::fs::symlink_metadata(&link)
            .expect("still there")
            .is_symlink());
    }
    // A plain file is replaced whole, and nothing else is left in the folder.
    let out_file = dir.join("profiles.toml");
    let report = dir.join("report.html");
    std::fs::write(&out_file, "").expect("write");
    let out = gpuslack(&[
        "calibrate",
        "--from-recording",
        &recording,
        "--out",
        &out_file.display().to_string(),
        "--report",
        &report.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read_to_string(&out_file)
        .expect("profiles")
        .contains("[[gpu]]"));
    assert!(std::fs::read_to_string(&report)
        .expect("report")
        .contains("<html"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "link--out",
            "link--report",
            "profiles.toml",
            "report.html",
            "samples.csv",
            "victim.toml"
        ]
    );
}

#[test]
fn every_numeric_flag_refuses_nan_and_infinity_as_a_usage_error() {
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h200-reference");
    let samples = reference.join("samples.csv").display().to_string();
    let labels = reference.join("labels.json").display().to_string();
    let recording = reference.display().to_string();
    let commands: Vec<(Vec<&str>, &str)> = vec![
        (vec!["score", &samples, &labels], "--min-overall"),
        (vec!["score", &samples, &labels], "--min-segment"),
        (vec!["score", &samples, &labels], "--window-s"),
        (vec!["replay", &samples], "--tdp-w"),
        (vec!["diagnose", "--trace", &samples], "--seconds"),
        (vec!["run", "--replay", &samples], "--speed"),
        (vec!["run", "--replay", &samples], "--seconds"),
        (vec!["run", "--replay", &samples], "--linger-s"),
        (vec!["run", "--replay", &samples], "--shutdown-timeout-s"),
        (vec!["record", "--out", "/dev/null"], "--seconds"),
        (vec!["bench", "starved"], "--duty"),
        (vec!["bench", "starved"], "--bubble-ms"),
        (vec!["bench", "tiny"], "--seconds"),
        (
            vec!["calibrate", "--from-recording", &recording],
            "--seconds-per-workload",
        ),
        // A NaN price made every cost NaN (issue #40).
        (
            vec!["fleet", "--prometheus", "http://127.0.0.1:1"],
            "--price-gpu-hour",
        ),
        (
            vec!["fleet", "--prometheus", "http://127.0.0.1:1"],
            "--price-kwh",
        ),
        (vec!["fleet", "--prometheus", "http://127.0.0.1:1"], "--at"),
        (
            vec!["fleet", "--prometheus", "http://127.0.0.1:1"],
            "--max-answer-mib",
        ),
    ];
    for (command, flag) in commands {
        for bad in ["nan", "inf", "-inf"] {
            let mut args = command.clone();
            let value = format!("{flag}={bad}");
            args.push(&value);
            let out = gpuslack(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
            let err = stderr(&out);
            assert!(
                err.contains(&format!("invalid value '{bad}' for '{flag} "))
                    && err.contains("is not a finite number"),
                "{args:?}: {err}"
            );
        }
    }
    // A share is written as a share or a percent, as the README quotes its default ("95%");
    // past 100% it is refused by name (a usage error, 2).
    for ok in ["0.95", "95", "95%"] {
        let out = gpuslack(&["score", &samples, &labels, "--min-overall", ok]);
        assert!(out.status.success(), "{ok}: {}", stderr(&out));
    }
    let out = gpuslack(&["score", &samples, &labels, "--min-overall", "150"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(
        "invalid value '150' for '--min-overall <SHARE>': \"150\" is not a share from 0 to 1 or a percent from 0 to 100"
    ));
}

#[test]
fn diagnose_without_a_gpu_says_so_and_shows_the_bundled_recording() {
    let out = gpuslack(&["diagnose", "--seconds", "1", "--detail"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // One line on stderr says what is shown; the reason is said once, in the report's header.
    let err = stderr(&out);
    assert_eq!(
        err.trim_end(),
        "gpuslack: no NVIDIA GPU here; showing the recording bundled in gpuslack instead (--require-gpu exits 69)."
    );
    let report = stdout(&out);
    assert!(report.starts_with("gpuslack diagnose — BUNDLED RECORDING, not this machine's GPUs"));
    assert_eq!(
        report
            .matches("no NVIDIA GPU here: NVML could not be loaded")
            .count(),
        1
    );
    assert!(!report.contains("installed?"), "{report}");
    assert!(report.contains("\nBottom line: "), "{report}");
    assert!(report.contains("GPU 0 · NVIDIA H100 80GB HBM3 · TDP 700 W"));
    // The first run shows whose job it was and whether the hardware is sound.
    assert!(
        report.contains("job pgid:518 · pid 519 python3"),
        "{report}"
    );
    assert!(report.contains("Hardware: sound: no Xid"), "{report}");
    for verdict in [
        "LAUNCH_BOUND",
        "MEMORY_BOUND",
        "COMPUTE_BOUND",
        "INPUT_STARVED",
    ] {
        assert!(report.contains(verdict), "{verdict} missing from\n{report}");
    }
    assert!(report.contains("✗ under 0.6: slacking"));
    assert!(report.contains("remedy"));
}

#[test]
fn diagnose_a_two_gpu_trace() {
    let out = gpuslack(&[
        "diagnose",
        "--trace",
        &fixture("h200x2-scenarios"),
        "--tdp-w",
        "700",
        "--detail",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(report.contains("GPU 0 ·") && report.contains("GPU 1 ·"));
    assert!(report.contains("HUNG") && report.contains("GPU 1 is the straggler"));
}

#[test]
fn score_reports_every_segment_and_passes_on_the_fixtures() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h200-reference");
    let out = gpuslack(&[
        "score",
        &dir.join("samples.csv").display().to_string(),
        &dir.join("labels.json").display().to_string(),
    ]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains("tiny_graph"));
    assert!(stdout(&out).contains("overall:"));
}

#[test]
fn commands_that_need_a_gpu_fail_clearly_without_one() {
    // CI has no GPU and no driver: each says what is missing and exits 69 (not clap's 2), never panics.
    let record = gpuslack(&[
        "record",
        "--out",
        "/tmp/gpuslack-never-written.csv",
        "--seconds",
        "1",
    ]);
    assert_eq!(record.status.code(), Some(69));
    assert!(
        stderr(&record).contains("libnvidia-ml.so.1"),
        "{}",
        stderr(&record)
    );
    let run = gpuslack(&["run", "--seconds", "1"]);
    assert_eq!(run.status.code(), Some(69));
    // One line, the reason: no count of windows that were never produced.
    assert_eq!(
        stderr(&run).trim_end(),
        "error: NVML could not be loaded (libnvidia-ml.so.1: cannot open shared object file: No such file or directory): the NVIDIA driver is not installed, or its libraries are not on the loader's path"
    );
    let bench = gpuslack(&["bench", "tiny"]);
    assert_eq!(bench.status.code(), Some(69));
    assert!(
        stderr(&bench).contains("no CUDA driver on this machine"),
        "{}",
        stderr(&bench)
    );
    for out in [&record, &run, &bench] {
        assert!(!stderr(out).contains("panicked"));
    }
}

#[test]
fn bench_refuses_an_unknown_workload() {
    let out = gpuslack(&["bench", "warp-drive"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unknown workload `warp-drive`"));
    // The list offered is every workload, the latency one among them.
    assert!(
        stderr(&out).contains("choose from tiny, memory, compute, latency, pcie, starved, seesaw"),
        "{}",
        stderr(&out)
    );
    // `latency` is a workload: without a GPU it fails for that reason, not as unknown.
    let latency = gpuslack(&["bench", "latency", "--format", "json"]);
    assert_eq!(latency.status.code(), Some(69), "{}", stderr(&latency));
    assert!(!stderr(&latency).contains("unknown workload"));
}

/// A MIG instance has memory, processes and GPM of its own, nothing else. Built from the live
/// H200 recording: GPU 0 as recorded, and GPU 1 as a whole-GPU instance of it (7g) would be
/// sampled, its other columns empty.
#[test]
fn a_mig_instance_is_diagnosed_from_its_own_evidence_and_named_as_such() {
    let recorded = std::fs::read_to_string(fixture("h200-live-torch")).expect("fixture");
    let mut lines = recorded.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let instance_has = |column: &str| {
        ["t", "mem_used", "mem_total", "nprocs"].contains(&column) || column.starts_with("gpm_")
    };
    let mut text = header.join(",") + "\n";
    for line in lines {
        text += line;
        text += "\n";
        let instance: Vec<&str> = header
            .iter()
            .zip(line.split(','))
            .map(|(column, value)| match *column {
                "gpu" => "1",
                c if instance_has(c) => value,
                _ => "",
            })
            .collect();
        text += &instance.join(",");
        text += "\n";
    }
    let path = temp_trace("mig", &text);
    std::fs::write(
        path.with_file_name("facts.json"),
        r#"{"name": "NVIDIA H200", "power_limit_default_mw": 700000,
            "gpus": {"0": {"name": "NVIDIA H200", "power_limit_default_mw": 700000},
                     "1": {"name": "NVIDIA H200 MIG 7g.141gb", "mig_parent_gpu": 0}}}"#,
    )
    .expect("facts");
    let out = gpuslack(&[
        "diagnose",
        "--trace",
        &path.display().to_string(),
        "--detail",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stdout(&out);
    let instance = report
        .split("\nGPU 1 · ")
        .nth(1)
        .expect("GPU 1 has a section");
    assert!(instance.starts_with(
        "NVIDIA H200 MIG 7g.141gb · MIG instance of GPU 0: its power, clocks and temperature are GPU 0's"
    ));
    for verdict in ["COMPUTE_BOUND", "MEMORY_BOUND", "IDLE_HELD", "IDLE "] {
        assert!(
            instance.contains(verdict),
            "{verdict} missing from\n{instance}"
        );
    }
    assert!(instance.contains("not measured   power"), "{instance}");
    assert!(report.contains("GPU 0 · NVIDIA H200 · TDP 700 W"));
}

/// `no_libcuda` works only if the executable exports its `dlopen` for NVML to bind to; a linker
/// that drops the export (build.rs) would silently bring libcuda's 4 MiB back.
#[test]
fn the_executable_exports_its_dlopen() {
    let nm = Command::new("nm")
        .args(["-D", "--defined-only", env!("CARGO_BIN_EXE_gpuslack")])
        .output()
        .expect("nm (binutils) runs");
    assert!(nm.status.success(), "{}", stderr(&nm));
    let symbols = stdout(&nm);
    assert!(
        symbols.lines().any(|l| l.ends_with(" T dlopen")),
        "dlopen is not exported:\n{symbols}"
    );
}

#[test]
fn the_agent_logs_a_start_line_and_verdict_changes_at_info_without_colour_off_a_terminal() {
    let run = gpuslack(&[
        "run",
        "--replay",
        &fixture("h200x2-scenarios"),
        "--speed",
        "0",
        "--prometheus",
        "127.0.0.1:0",
        "--linger-s",
        "0",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let log = stderr(&run);
    // stderr is a pipe here: no escape codes for journald or `kubectl logs` to show raw.
    assert!(!log.contains('\u{1b}'), "{log}");
    let start: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("gpuslack replaying"))
        .collect();
    assert_eq!(start.len(), 1, "{log}");
    // The port the endpoint took, not the `:0` that asked for any.
    assert!(
        start[0].contains("exporting to Prometheus on http://127.0.0.1:")
            && !start[0].contains("127.0.0.1:0/metrics"),
        "{}",
        start[0]
    );
    let changes: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("diagnosis changed"))
        .collect();
    assert!(changes.len() >= 4, "{log}");
    assert!(changes.iter().all(|l| l.contains(" INFO ")), "{changes:?}");
}

#[test]
fn a_cadence_is_adaptive_or_an_interval_in_ms_and_anything_else_is_a_usage_error() {
    let samples = common::fixture_samples("h200-reference");
    let labels = common::repo("tests/fixtures/h200-reference/labels.json");
    let labels = labels.to_string_lossy().to_string();
    for (bad, says) in [
        ("fast", "is neither `adaptive` nor an interval in ms"),
        ("5", "an interval must be between 10 and 60000 ms"),
        ("60001", "an interval must be between 10 and 60000 ms"),
    ] {
        for command in [vec!["score", &samples, &labels], vec!["replay", &samples]] {
            let mut args = command.clone();
            args.extend(["--cadence", bad]);
            let out = gpuslack(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
            assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
        }
    }
    // The bounds are accepted, and the output says what was read.
    let out = gpuslack(&["score", &samples, &labels, "--cadence", "10"]);
    assert!(
        stdout(&out).contains("cadence constant 10 ms: "),
        "{}",
        stdout(&out)
    );
    let out = gpuslack(&["score", &samples, &labels, "--cadence", "adaptive"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("overall: 51/51 windows right")
            && text.contains("cadence adaptive (1000 ms, 100 ms for 6 s after a trigger): "),
        "{text}"
    );
}
