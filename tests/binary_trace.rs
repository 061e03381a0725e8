//! The binary trace format (`.gstrace`) as the commands meet it: every fixture converted to it
//! holds the same samples and gets the same verdicts and scores, on one thread and on several;
//! `convert` goes both ways and never leaves half a file; a damaged or cut-short file fails
//! naming where.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpuslack_receiver::trace::TraceReader;

mod common;
use common::{fixture_samples as fixture, stderr, stdout};

/// Runs gpuslack with `args` and `GPUSLACK_TRACE_THREADS=threads`.
fn gpuslack(threads: u32, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(args)
        .env("GPUSLACK_TRACE_THREADS", threads.to_string())
        .output()
        .expect("gpuslack runs")
}

/// A fresh directory for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuslack-binary-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `convert FROM TO`, which must succeed.
fn convert(from: &Path, to: &Path) {
    let out = gpuslack(1, &["convert", &path(from), &path(to)]);
    assert!(out.status.success(), "convert: {}", stderr(&out));
}

const FIXTURES: [&str; 9] = [
    "h200-diagnose-job",
    "h200-health",
    "h200-live-torch",
    "h200-nogpm-lookalikes",
    "h200-reference",
    "h200-verdicts",
    "h200-verdicts-nogpm",
    "h200x2-calibration",
    "h200x2-scenarios",
];

#[test]
fn every_fixture_holds_the_same_samples_and_verdicts_in_binary() {
    let dir = temp_dir("fixtures");
    for name in FIXTURES {
        let csv = PathBuf::from(fixture(name));
        let binary = dir.join(format!("{name}.gstrace"));
        convert(&csv, &binary);
        let samples = |p: &Path| -> Vec<_> {
            TraceReader::open(p)
                .expect("opens")
                .map(|s| s.expect("a good row"))
                .collect()
        };
        let from_csv = samples(&csv);
        assert!(from_csv.len() > 200, "{name}: {} samples", from_csv.len());
        assert_eq!(samples(&binary), from_csv, "{name}: the same samples");
        // The facts beside the CSV went along: the same TDP, profile and verdicts follow.
        let csv_lines = gpuslack(1, &["replay", &path(&csv), "--format", "jsonl"]);
        assert!(csv_lines.status.success(), "{name}: {}", stderr(&csv_lines));
        for threads in [1, 3] {
            let lines = gpuslack(threads, &["replay", &path(&binary), "--format", "jsonl"]);
            assert!(lines.status.success(), "{name}: {}", stderr(&lines));
            assert_eq!(
                stdout(&lines),
                stdout(&csv_lines),
                "{name}, {threads} threads: the same windows, byte for byte"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_score_from_the_binary_copy_is_the_csv_score() {
    let dir = temp_dir("score");
    for name in ["h200-reference", "h200x2-scenarios", "h200-verdicts-nogpm"] {
        let csv = PathBuf::from(fixture(name));
        let labels = csv.with_file_name("labels.json");
        let binary = dir.join(format!("{name}.gstrace"));
        convert(&csv, &binary);
        let score = |trace: &Path, threads| {
            let out = gpuslack(
                threads,
                &[
                    "score",
                    &path(trace),
                    &path(&labels),
                    "--json",
                    "--min-overall",
                    "0",
                    "--min-segment",
                    "0",
                ],
            );
            assert!(out.status.success(), "{name}: {}", stderr(&out));
            stdout(&out)
        };
        assert_eq!(score(&binary, 2), score(&csv, 1), "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn convert_goes_both_ways_and_binary_is_smaller_than_csv() {
    let dir = temp_dir("both-ways");
    let csv = PathBuf::from(fixture("h200x2-scenarios"));
    let binary = dir.join("a.gstrace");
    let back = dir.join("back.csv");
    let again = dir.join("again.gstrace");
    convert(&csv, &binary);
    convert(&binary, &back);
    convert(&back, &again);
    assert_eq!(
        std::fs::read(&binary).expect("first"),
        std::fs::read(&again).expect("second"),
        "CSV written from a binary trace converts back to the same bytes"
    );
    // Counts and milliwatts take a few bytes as integers; GPM's fractions take eight, as many
    // as their decimals: 58% of the CSV here (340,013 bytes against 582,257).
    let size = |p: &Path| std::fs::metadata(p).expect("exists").len();
    assert!(
        size(&binary) * 10 < size(&csv) * 6,
        "{} bytes binary against {} CSV",
        size(&binary),
        size(&csv)
    );
    // `--to` overrides the name; `-` writes to standard output.
    let out = gpuslack(1, &["convert", &path(&csv), "-", "--to", "binary"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, std::fs::read(&binary).expect("binary"));
    let err = stderr(&out);
    assert!(
        err.contains("converted 6158 samples") && err.contains("(CSV, ") && err.contains("(binary"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn convert_leaves_no_half_file_and_never_writes_over_its_input() {
    let dir = temp_dir("half");
    let bad = dir.join("bad.csv");
    let mut text = String::from("t,power_mw\n");
    for i in 0..5000 {
        text.push_str(&format!("{}.5,80000\n", 1_796_000_000 + i));
    }
    text.push_str("1796009999.5,eighty\n");
    std::fs::write(&bad, text).expect("write");
    let out_path = dir.join("bad.gstrace");
    let out = gpuslack(1, &["convert", &path(&bad), &path(&out_path)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("bad.csv:5002: column `power_mw`: not a number: \"eighty\""),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["bad.csv"], "no output and no partial file");
    let same = gpuslack(1, &["convert", &path(&bad), &path(&bad)]);
    assert_eq!(same.status.code(), Some(1));
    assert!(
        stderr(&same).contains("the output is the input"),
        "{}",
        stderr(&same)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_binary_trace_fails_naming_its_block_and_a_cut_one_where_it_ends() {
    let dir = temp_dir("damaged");
    let binary = dir.join("t.gstrace");
    convert(&PathBuf::from(fixture("h200-reference")), &binary);
    let bytes = std::fs::read(&binary).expect("read");
    // Damage a byte near the middle, in some block's rows.
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x10;
    let damaged_path = dir.join("damaged.gstrace");
    std::fs::write(&damaged_path, &damaged).expect("write");
    for threads in [1, 3] {
        let out = gpuslack(
            threads,
            &["replay", &path(&damaged_path), "--format", "jsonl"],
        );
        assert_eq!(out.status.code(), Some(1), "{threads} threads");
        let err = stderr(&out);
        assert!(
            err.contains("damaged.gstrace: block at byte ")
                && err.contains("its checksum does not match: damaged on disk or in a copy"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        // The windows before the damaged block were written.
        assert!(stdout(&out).lines().count() > 10, "{threads} threads");
    }
    let cut_path = dir.join("cut.gstrace");
    std::fs::write(&cut_path, &bytes[..bytes.len() - 7]).expect("write");
    let out = gpuslack(1, &["replay", &path(&cut_path)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("cut.gstrace: block at byte ") && err.contains("cut short"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_out_of_order_row_is_named_by_its_row_on_one_thread_and_several() {
    let dir = temp_dir("order");
    let csv = dir.join("unsorted.csv");
    std::fs::write(&csv, "t,power_mw\n100.0,1\n104.0,1\n101.0,1\n").expect("write");
    let binary = dir.join("unsorted.gstrace");
    convert(&csv, &binary);
    let mut outputs = Vec::new();
    for threads in [1, 3] {
        for (trace, place) in [
            (&csv, "unsorted.csv:4: "),
            (&binary, "unsorted.gstrace: row 3: "),
        ] {
            let out = gpuslack(threads, &["replay", &path(trace), "--format", "jsonl"]);
            assert_eq!(out.status.code(), Some(1));
            let err = stderr(&out);
            assert!(
                err.contains(&format!(
                    "{place}GPU 0: sample at t=101.0000 is older than the window in progress"
                )),
                "{threads} threads: {err}"
            );
            outputs.push(stdout(&out));
        }
    }
    // What came before the refused row, the same whichever way it was read.
    assert!(outputs.iter().all(|o| o == &outputs[0]), "{outputs:?}");
    assert_eq!(
        outputs[0].lines().count(),
        1,
        "the window [100, 102) closed first"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
