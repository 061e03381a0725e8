//! Verdicts in the forms they are judged in: each fixture as a GPU without GPM would have
//! recorded it and as a 1 Hz agent would have (scripts/degrade-trace.py, the judges' own tool),
//! scored by `gpuslack score` itself; and a hang stretched to ten minutes with the outliers a
//! live GPU produces (scripts/stretch-hang.py), which must read `hung` on every GPU of the job
//! within a minute of its start and for every window to its end.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod common;
use common::{repo, temp_dir};

fn python() -> String {
    std::env::var("GPUSLACK_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Writes nogpm.csv, hz1.csv and nogpm_hz1.csv for `trace` into `dir`.
fn degrade(trace: &Path, dir: &Path) {
    let status = Command::new(python())
        .arg(repo("scripts/degrade-trace.py"))
        .arg(trace)
        .arg(dir)
        .status()
        .expect("python3 runs scripts/degrade-trace.py");
    assert!(
        status.success(),
        "degrade-trace.py failed on {}",
        trace.display()
    );
}

/// `gpuslack score TRACE LABELS --json`: (overall share, per segment (scenario, gpu, share)).
fn score(trace: &Path, labels: &Path) -> (f64, Vec<(String, u64, f64)>) {
    let s = scored(trace, labels);
    (s.overall, s.segments)
}

/// A score's figures: by class overall, by class over the segments whose truth is not
/// `latency_bound`, with a low verdict's alternatives counted, and per segment.
struct Scored {
    overall: f64,
    not_latency: f64,
    with_alternatives: f64,
    segments: Vec<(String, u64, f64)>,
}

/// `gpuslack score TRACE LABELS --json`, summed.
fn scored(trace: &Path, labels: &Path) -> Scored {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .arg("score")
        .arg(trace)
        .arg(labels)
        .arg("--json")
        .output()
        .expect("gpuslack runs");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "score {}: {e}: {}",
            trace.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let (mut right, mut windows, mut with_alts) = (0, 0, 0);
    let (mut right_nl, mut windows_nl) = (0, 0);
    let mut segments = Vec::new();
    for seg in json["segments"].as_array().expect("segments") {
        let n = seg["windows"].as_u64().expect("windows");
        let c = seg["correct"].as_u64().expect("correct");
        windows += n;
        right += c;
        with_alts += seg["correct_with_alternatives"]
            .as_u64()
            .expect("correct_with_alternatives");
        let latency = seg["accept"]
            .as_array()
            .expect("accept")
            .iter()
            .any(|a| a == "latency_bound");
        if !latency {
            windows_nl += n;
            right_nl += c;
        }
        let share = if n == 0 { 0.0 } else { c as f64 / n as f64 };
        segments.push((
            seg["scenario"].as_str().unwrap_or("").to_string(),
            seg["gpu"].as_u64().unwrap_or(0),
            share,
        ));
    }
    let share = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    Scored {
        overall: share(right, windows),
        not_latency: share(right_nl, windows_nl),
        with_alternatives: share(with_alts, windows),
        segments,
    }
}

struct Forms {
    full: f64,
    nogpm: f64,
    hz1: f64,
    nogpm_hz1: f64,
    /// Without GPM, by class, on the segments whose truth is not `latency_bound`: no NVML
    /// reading tells a unit at its peak from kernels waiting on latency, so those are judged by
    /// `nogpm_alternatives` instead.
    nogpm_not_latency: f64,
    nogpm_hz1_not_latency: f64,
    /// Without GPM, a low verdict naming the truth among its alternatives counted right.
    nogpm_alternatives: f64,
}

fn forms(name: &str) -> Forms {
    let dir = repo("tests/fixtures").join(name);
    let trace = dir.join("samples.csv");
    let labels = dir.join("labels.json");
    let out = temp_dir(name);
    degrade(&trace, &out);
    let nogpm = scored(&out.join("nogpm.csv"), &labels);
    let nogpm_hz1 = scored(&out.join("nogpm_hz1.csv"), &labels);
    Forms {
        full: score(&trace, &labels).0,
        nogpm: nogpm.overall,
        hz1: score(&out.join("hz1.csv"), &labels).0,
        nogpm_hz1: nogpm_hz1.overall,
        nogpm_not_latency: nogpm.not_latency,
        nogpm_hz1_not_latency: nogpm_hz1.not_latency,
        nogpm_alternatives: nogpm.with_alternatives,
    }
}

#[test]
fn a_recording_with_nvml_link_columns_scores_90_percent_without_gpm() {
    // h200-verdicts carries NVML's PCIe columns; h200-verdicts-nogpm is the same run recorded
    // live with --no-gpm. The single-GPU spin (8 of 106 windows) cannot be told from tiny
    // kernels without GPM and stays launch_bound; the transformer step (5 windows, its tensor
    // pipe at 52%: latency_bound) draws near the limit and reads compute_bound, low, naming
    // latency_bound; the register-only FP32 FMA chain (1 window, power load 0.51) and a GEMM's
    // half-resident last window draw less than a unit at its peak usually does and read
    // latency_bound, low, naming compute_bound (thresholds.rs, `compute_power_load`): power
    // alone cannot tell the two. Everything else is right.
    let f = forms("h200-verdicts");
    eprintln!(
        "h200-verdicts: full {:.3} nogpm {:.3} ({:.3} not latency, {:.3} with alternatives) hz1 {:.3} nogpm_hz1 {:.3}",
        f.full, f.nogpm, f.nogpm_not_latency, f.nogpm_alternatives, f.hz1, f.nogpm_hz1
    );
    assert!(
        f.nogpm_not_latency >= 0.88,
        "without GPM: {:.3}",
        f.nogpm_not_latency
    );
    assert!(
        f.nogpm_alternatives >= 0.97,
        "without GPM: {:.3}",
        f.nogpm_alternatives
    );
    assert!(
        f.hz1 >= f.full - 0.03,
        "at 1 Hz: {:.3} against {:.3}",
        f.hz1,
        f.full
    );
    let dir = repo("tests/fixtures/h200-verdicts-nogpm");
    let live = scored(&dir.join("samples.csv"), &dir.join("labels.json"));
    assert!(
        live.not_latency >= 0.88 && live.with_alternatives >= 0.97,
        "recorded live with --no-gpm: {:.3} ({:.3} with alternatives): {:?}",
        live.not_latency,
        live.with_alternatives,
        live.segments
    );
}

#[test]
fn without_gpm_and_at_1_hz_the_fixtures_keep_their_verdicts() {
    // The fixtures recorded before NVML's link counters were: the floor is 75%
    // without GPM; they score 97–100% (docs/DIAGNOSIS.md), held here at 90%, by class where
    // the truth is not latency_bound (which no NVML reading tells from a unit at its peak:
    // there a low verdict names it, and ≥ 90% counting alternatives holds).
    for name in [
        "h200-reference",
        "h200x2-scenarios",
        "h200-live-torch",
        "h200-middle-ground",
        "h200-profiler-and-shared",
        "h100-everyday",
        "h100-busy",
    ] {
        let f = forms(name);
        eprintln!(
            "{name}: full {:.3} nogpm {:.3} ({:.3} not latency, {:.3} with alternatives) hz1 {:.3} nogpm_hz1 {:.3}",
            f.full, f.nogpm, f.nogpm_not_latency, f.nogpm_alternatives, f.hz1, f.nogpm_hz1
        );
        // h100-everyday's pageable 1 GiB copies (5 of 6 windows) read launch_bound without
        // GPM, as they did before issue #46 (0.853 overall then): held at 85%.
        let floor = if name == "h100-everyday" { 0.85 } else { 0.90 };
        assert!(
            f.nogpm_not_latency >= floor,
            "{name} without GPM: {:.3}",
            f.nogpm_not_latency
        );
        assert!(
            f.nogpm_alternatives >= 0.90,
            "{name} without GPM, with alternatives: {:.3}",
            f.nogpm_alternatives
        );
        // One transition window of the 21 of h200-live-torch is 4.8 points; of the larger
        // fixtures' 51 and 100, 2 and 1. h100-everyday's host-paced jobs lose 4 windows of 95
        // without GPM at 1 Hz, as they did before issue #46 (0.789 against 0.853 then).
        let windows_of_slack = if name == "h200-live-torch" || name == "h100-everyday" {
            0.05
        } else {
            0.03
        };
        assert!(
            f.hz1 >= f.full - windows_of_slack,
            "{name} at 1 Hz: {:.3} against {:.3}",
            f.hz1,
            f.full
        );
        assert!(
            f.nogpm_hz1_not_latency >= f.nogpm_not_latency - windows_of_slack,
            "{name} without GPM at 1 Hz: {:.3} against {:.3}",
            f.nogpm_hz1_not_latency,
            f.nogpm_not_latency
        );
    }
}

/// The hang of h200x2-scenarios: GPU 0 spins in an all-reduce GPU 1 never joined, from
/// t≈1796025972.5 to the kill at 1796025995.8. The block [980, 990) is repeated 60 times.
const HANG_START: f64 = 1796025972.5;
const BLOCK: (f64, f64) = (1796025980.0, 1796025990.0);
const REPEATS: u32 = 60;

fn long_hang_labels(dir: &Path) -> PathBuf {
    let end = BLOCK.1 + f64::from(REPEATS) * (BLOCK.1 - BLOCK.0);
    let within = HANG_START + 60.0;
    let mut segments = Vec::new();
    for (gpu, rank) in [(0, "spinning"), (1, "stalled")] {
        segments.push(serde_json::json!({
            "gpu": gpu, "start": within, "end": end,
            "scenario": format!("hang_after_its_first_minute_{rank}_rank"), "accept": ["hung"],
        }));
    }
    let labels = serde_json::json!({ "tdp_w": 700, "segments": segments });
    let path = dir.join("long-hang.labels.json");
    std::fs::write(&path, labels.to_string()).expect("labels");
    path
}

#[test]
fn a_ten_minute_hang_with_outliers_reads_hung_on_both_ranks_to_its_end() {
    let dir = temp_dir("long-hang");
    let trace = dir.join("long-hang.csv");
    let out = Command::new(python())
        .arg(repo("scripts/stretch-hang.py"))
        .arg(repo("tests/fixtures/h200x2-scenarios/samples.csv"))
        .arg(BLOCK.0.to_string())
        .arg(BLOCK.1.to_string())
        .arg(REPEATS.to_string())
        .output()
        .expect("python3 runs scripts/stretch-hang.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&trace, &out.stdout).expect("trace");
    let text = String::from_utf8_lossy(&out.stdout);
    let stale = text.lines().filter(|l| l.contains(",nan,")).count();
    assert!(stale >= 100, "{stale} unrefreshed GPM pairs injected");
    let labels = long_hang_labels(&dir);
    degrade(&trace, &dir);
    for form in ["long-hang.csv", "nogpm.csv", "hz1.csv", "nogpm_hz1.csv"] {
        let (overall, segments) = score(&dir.join(form), &labels);
        assert_eq!(
            overall, 1.0,
            "{form}: every window of both ranks from a minute in must read hung: {segments:?}"
        );
    }
}

/// Per confidence: (confidence, (right, windows)).
type PerConfidence = Vec<(String, (u64, u64))>;

/// `gpuslack score --json`'s right windows per confidence, over every segment, and the share
/// right counting a `low` verdict whose alternatives hold the truth.
fn by_confidence(trace: &Path, labels: &Path) -> (PerConfidence, f64) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .arg("score")
        .arg(trace)
        .arg(labels)
        .arg("--json")
        .output()
        .expect("gpuslack runs");
    let json: Value = serde_json::from_slice(&out.stdout).expect("score --json");
    let mut tally: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    let (mut with_alts, mut windows) = (0, 0);
    for seg in json["segments"].as_array().expect("segments") {
        windows += seg["windows"].as_u64().expect("windows");
        with_alts += seg["correct_with_alternatives"]
            .as_u64()
            .expect("correct_with_alternatives");
        for (c, t) in seg["by_confidence"].as_object().expect("by_confidence") {
            let e = tally.entry(c.clone()).or_default();
            e.0 += t["correct"].as_u64().expect("correct");
            e.1 += t["windows"].as_u64().expect("windows");
        }
    }
    (
        tally.into_iter().collect(),
        with_alts as f64 / windows.max(1) as f64,
    )
}

#[test]
fn confident_verdicts_without_gpm_are_right_on_every_fixture() {
    // Issue #27: without GPM, `high` verdicts are right ≥ 97% of the time on every fixture,
    // and a low verdict names the truth among its alternatives often enough that the second
    // column holds ≥ 90%. The facts file is copied beside the degraded traces, so that the
    // GPU's model (and so its built-in, measured profile) is known as it was when recorded.
    for name in [
        "h200-reference",
        "h200x2-scenarios",
        "h200-live-torch",
        "h200-verdicts",
        "h200-nogpm-lookalikes",
        "h200-middle-ground",
        "h200-profiler-and-shared",
        "h100-everyday",
        "h100-busy",
        "h100-diagnose-job",
        "h100-diagnose-job-nogpm",
        "h100-hang-job",
    ] {
        let dir = repo("tests/fixtures").join(name);
        let out = temp_dir(&format!("{name}-confidence"));
        degrade(&dir.join("samples.csv"), &out);
        let facts = ["samples.facts.json", "facts.json"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.exists());
        for form in ["nogpm", "nogpm_hz1"] {
            if let Some(facts) = &facts {
                std::fs::copy(facts, out.join(format!("{form}.facts.json"))).expect("facts");
            }
            let (tally, with_alts) =
                by_confidence(&out.join(format!("{form}.csv")), &dir.join("labels.json"));
            eprintln!("{name} {form}: {tally:?}, with alternatives {with_alts:.3}");
            if let Some((_, (right, n))) = tally.iter().find(|(c, _)| c == "high") {
                assert!(
                    *right as f64 >= 0.97 * *n as f64,
                    "{name} {form}: high verdicts {right}/{n} right"
                );
            }
            assert!(with_alts >= 0.90, "{name} {form}: {with_alts:.3}");
        }
    }
    // The lookalikes recorded live with --no-gpm (NVML's PCIe every second): ≥ 90% by class.
    let dir = repo("tests/fixtures/h200-nogpm-lookalikes");
    let (live, segments) = score(&dir.join("nogpm-live.csv"), &dir.join("labels.json"));
    assert!(
        live >= 0.90,
        "lookalikes live without GPM: {live:.3}: {segments:?}"
    );
    // The bundled demo's job recorded live with --no-gpm: the one-block reduction, which the
    // degraded h100-diagnose-job (NVML's PCIe every 10 s beside GPM) reads as a copy in 5 of 6
    // windows, reads launch_bound in every window with NVML's PCIe every second.
    let dir = repo("tests/fixtures/h100-diagnose-job-nogpm");
    let (live, segments) = score(&dir.join("samples.csv"), &dir.join("labels.json"));
    assert_eq!(live, 1.0, "the demo live without GPM: {segments:?}");
    assert!(
        segments
            .iter()
            .any(|(name, gpu, share)| name == "one_block_sum" && *gpu == 0 && *share == 1.0),
        "{segments:?}"
    );
}

/// `gpuslack score TRACE LABELS --json [--cadence MODE]`: (right windows, windows, share of
/// the time at the fast tick, 0 without a cadence).
fn score_at(trace: &Path, labels: &Path, cadence: Option<&str>) -> (u64, u64, f64) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpuslack"));
    command.args(["score", "--json"]);
    if let Some(cadence) = cadence {
        command.args(["--cadence", cadence]);
    }
    let out = command
        .arg(trace)
        .arg(labels)
        .output()
        .expect("gpuslack runs");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "score --cadence {cadence:?} {}: {e}: {}",
            trace.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let segments = json["segments"].as_array().expect("segments");
    let sum = |key: &str| segments.iter().map(|s| s[key].as_u64().expect(key)).sum();
    let fast = match cadence {
        Some(_) => json["cadence"]["fast_share_of_time"]
            .as_f64()
            .expect("cadence.fast_share_of_time"),
        None => 0.0,
    };
    (sum("correct"), sum("windows"), fast)
}

#[test]
fn the_adaptive_cadence_scores_every_fixture_as_10_hz_does() {
    // Issue #28: the agent's default cadence (1 s, 100 ms for 6 s after a trigger) must decide
    // as a constant 10 Hz does. Every labelled fixture is read both ways by the same policy
    // code the agent runs (`score --cadence`), with GPM and as a GPU without it; the right
    // windows are equal, and never fewer than at 1 Hz (hz1.csv) but where 10 Hz itself scores
    // fewer. The numbers are docs/benchmarks.md's "Cadence" table.
    let expected: [(&str, u64, u64, u64); 12] = [
        // (fixture, windows, right with GPM, right without GPM)
        ("h200-reference", 51, 51, 51),
        ("h200x2-scenarios", 100, 98, 98),
        ("h200-live-torch", 21, 21, 21),
        // Without GPM, power alone sets the side of the line (`compute_power_load`): the
        // latency segments that draw near the limit read compute_bound, low, naming
        // latency_bound (h200-verdicts' transformer, 5 windows; h200-middle-ground's convnet
        // and softmax, 18); the FP32 FMA chain and a GEMM's last window, short of it, read
        // latency_bound, low, naming compute_bound (2).
        ("h200-verdicts", 106, 106, 91),
        ("h200-verdicts-nogpm", 106, 91, 91),
        ("h200-nogpm-lookalikes", 49, 49, 33),
        ("h200-middle-ground", 140, 140, 122),
        ("h200-profiler-and-shared", 17, 17, 17),
        ("h100-everyday", 95, 94, 89),
        // Its latency-bound jobs draw 0.49–0.71 of the span: latency_bound without GPM too.
        ("h100-busy", 68, 68, 68),
        // The one-block reduction without GPM (5 of its 6 windows): GPU-Util 100%, the memory
        // controller 1% busy and a held context's power read as a copy engine writing at a
        // link's pace, low, naming launch_bound; a pinned copy reads the same two NVML figures
        // (h200-middle-ground: 2%), and the NVML PCIe counter that tells them apart was read
        // every 10 s beside GPM, so the degraded trace holds it in one window of the five.
        ("h100-diagnose-job", 13, 13, 8),
        // Without GPM the 24-block spin's first 30 s read tiny kernels or a spin, low, until the
        // hang is called (7 windows; hung named among the alternatives).
        ("h100-hang-job", 37, 37, 30),
    ];
    for (name, windows, right_gpm, right_nogpm) in expected {
        let dir = repo("tests/fixtures").join(name);
        let labels = dir.join("labels.json");
        let out = temp_dir(&format!("{name}-cadence"));
        degrade(&dir.join("samples.csv"), &out);
        let facts = ["samples.facts.json", "facts.json"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.exists());
        for form in ["nogpm", "hz1", "nogpm_hz1"] {
            if let Some(facts) = &facts {
                std::fs::copy(facts, out.join(format!("{form}.facts.json"))).expect("facts");
            }
        }
        for (trace, hz1, right) in [
            (dir.join("samples.csv"), out.join("hz1.csv"), right_gpm),
            (
                out.join("nogpm.csv"),
                out.join("nogpm_hz1.csv"),
                right_nogpm,
            ),
        ] {
            let (c10, n10, fast10) = score_at(&trace, &labels, Some("100"));
            let (ad, n_ad, fast_ad) = score_at(&trace, &labels, Some("adaptive"));
            let (at_1hz, _, _) = score_at(&hz1, &labels, None);
            let form = trace.display();
            eprintln!("{name} {form}: 10 Hz {c10}/{n10}, adaptive {ad}/{n_ad} ({:.0}% of the time at 100 ms), 1 Hz {at_1hz}", 100.0 * fast_ad);
            assert_eq!((c10, n10), (right, windows), "{form} at 10 Hz");
            assert_eq!((ad, n_ad), (c10, n10), "{form}: adaptive against 10 Hz");
            assert_eq!(fast10, 0.0, "a constant cadence is never escalated");
            assert!(fast_ad > 0.0 && fast_ad < 1.0, "{form}: {fast_ad}");
            assert!(
                ad >= at_1hz.min(c10),
                "{form}: adaptive {ad}, 1 Hz {at_1hz}"
            );
        }
    }
}

/// The windows of `gpuslack replay TRACE --format jsonl --tdp-w TDP` that contradict the
/// invariants, judged from the JSON as `shared/tools/contradictions.py` judges them (a copy
/// of its conditions, independent of the guard's code): (contradictions, windows).
fn contradictions(trace: &Path, tdp_w: f64) -> (Vec<String>, usize) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .arg("replay")
        .arg(trace)
        .args(["--format", "jsonl", "--tdp-w", &tdp_w.to_string()])
        .output()
        .expect("gpuslack runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut bad = Vec::new();
    let mut windows = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let w: Value = serde_json::from_str(line).expect("a JSON line");
        let Some(class) = w["class"].as_str() else {
            continue;
        };
        windows += 1;
        let num = |k: &str| w[k].as_f64();
        let tdp = num("tdp_w").unwrap_or(700.0);
        let power = num("power_w").unwrap_or(0.0);
        let (dram, tensor) = (num("dram_active"), num("tensor_active"));
        let (sm, duty) = (num("sm_active"), num("util_duty").unwrap_or(0.0));
        let broken = match class {
            "launch_bound" => {
                power >= 0.55 * tdp || dram.unwrap_or(0.0) >= 0.40 || tensor.unwrap_or(0.0) >= 0.30
            }
            "input_starved" | "idle" | "idle_held" => sm.is_some_and(|s| s >= 0.90) && duty >= 0.98,
            "compute_bound" | "memory_bound" | "latency_bound" => {
                sm.is_some_and(|s| s < 0.20) && power < 0.30 * tdp
            }
            _ => false,
        };
        if broken {
            bad.push(format!(
                "{}@{}: {class} at {power:.0} W, SM {sm:?}, DRAM {dram:?}, tensor {tensor:?}",
                trace.display(),
                w["start"]
            ));
        }
    }
    (bad, windows)
}

#[test]
fn no_fixture_window_contradicts_the_invariants_in_any_form() {
    // Issue #39: the invariants hold with GPM, without it and at 1 Hz, on every fixture.
    let mut windows = 0;
    for name in [
        "h200-reference",
        "h200x2-scenarios",
        "h200-live-torch",
        "h200-verdicts",
        "h200-verdicts-nogpm",
        "h200-nogpm-lookalikes",
        "h200-middle-ground",
        "h200-profiler-and-shared",
        "h100-everyday",
        "h100-busy",
        "h100-diagnose-job",
        "h100-diagnose-job-nogpm",
        "h100-hang-job",
    ] {
        let dir = repo("tests/fixtures").join(name);
        let out = temp_dir(&format!("{name}-invariants"));
        degrade(&dir.join("samples.csv"), &out);
        let facts = ["samples.facts.json", "facts.json"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.exists());
        for form in ["nogpm", "hz1", "nogpm_hz1"] {
            if let Some(facts) = &facts {
                std::fs::copy(facts, out.join(format!("{form}.facts.json"))).expect("facts");
            }
        }
        for trace in [
            dir.join("samples.csv"),
            out.join("nogpm.csv"),
            out.join("hz1.csv"),
            out.join("nogpm_hz1.csv"),
        ] {
            let (bad, n) = contradictions(&trace, 700.0);
            assert!(bad.is_empty(), "{} contradictions: {bad:#?}", bad.len());
            windows += n;
        }
    }
    assert!(windows > 3000, "{windows} windows");
}
