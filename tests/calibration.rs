//! Calibration math on the recorded H200 session (the same code a live `gpuslack calibrate`
//! runs after its workloads), the profile file, the report, and the command line.

use std::path::{Path, PathBuf};

use gpuslack_calibration::session::from_recording;
use gpuslack_calibration::{report, ProfileFile};
use gpuslack_receiver::Class;

mod common;
use common::command as gpuslack;

fn reference() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h200-reference")
}

fn within(got: f64, want: f64, share: f64) -> bool {
    (got - want).abs() <= want * share
}

#[test]
fn the_reference_recording_gives_the_measured_baselines_within_2_percent() {
    let c = from_recording(&reference()).expect("calibration");
    assert_eq!(c.profiles.len(), 1);
    let p = &c.profiles[0];
    assert!(within(p.idle_w, 78.0, 0.02), "idle {}", p.idle_w);
    assert!(
        within(p.memory_w.expect("memory"), 583.0, 0.02),
        "copy {:?}",
        p.memory_w
    );
    assert!(
        within(p.compute_tensor_w.expect("tensor"), 691.0, 0.02),
        "bf16 {:?}",
        p.compute_tensor_w
    );
    assert!(
        within(p.tiny_w.expect("tiny"), 121.0, 0.02),
        "tiny {:?}",
        p.tiny_w
    );
    // No held-idle phase in this recording: the quietest gap between workloads gives it.
    assert!(
        within(p.held_idle_w.expect("held"), 122.0, 0.05),
        "held {:?}",
        p.held_idle_w
    );
    assert_eq!(
        (p.model.as_deref(), p.tdp_w),
        (Some("NVIDIA H200"), Some(700.0))
    );
    let power = p.power_profile().expect("complete profile");
    assert_eq!(power.calibrated_efficiency(p.idle_w), Some(0.0));
    assert!(power.calibrated_efficiency(689.0).is_some_and(|e| e > 0.99));
}

/// A saved session reads back as the same calibration, each GPU keeping its own facts.
#[test]
fn a_saved_session_gives_the_same_profiles_back() {
    use gpuslack_calibration::phases::load_phases;
    use gpuslack_calibration::session::save_session;
    use gpuslack_receiver::device::DeviceFacts;
    use gpuslack_receiver::trace::TraceReader;

    let samples: Vec<_> = TraceReader::open(&reference().join("samples.csv"))
        .expect("trace")
        .collect::<Result<_, _>>()
        .expect("samples");
    let phases = load_phases(&reference().join("phases.json")).expect("phases");
    let facts = [(
        0,
        DeviceFacts {
            name: Some("NVIDIA H200".into()),
            uuid: Some("GPU-14b9f8c5-584b-e400-6895-ecbe4933fdb7".into()),
            tdp_w: Some(700.0),
            power_limit_w: Some(700.0),
            ..DeviceFacts::default()
        },
    )]
    .into();
    let dir = std::env::temp_dir().join(format!("gpuslack-session-{}", std::process::id()));
    save_session(&dir, &samples, &phases, &facts).expect("saved");
    let again = from_recording(&dir).expect("reads back");
    let first = from_recording(&reference()).expect("reference");
    let (a, b) = (&first.profiles[0], &again.profiles[0]);
    assert_eq!(
        b.uuid.as_deref(),
        Some("GPU-14b9f8c5-584b-e400-6895-ecbe4933fdb7")
    );
    for ((name, x), (_, y)) in a.baselines().into_iter().zip(b.baselines()) {
        let (x, y) = (x.expect("measured"), y.expect("measured"));
        assert!((x - y).abs() < 1e-6, "{name}: {x} then {y}");
    }
}

#[test]
fn the_diagnosis_is_validated_on_the_calibration_windows() {
    let c = from_recording(&reference()).expect("calibration");
    let v = &c.validations[&0];
    assert_eq!((v.right(), v.windows()), (51, 51));
    assert_eq!(
        v.confusion.get(&(Class::LaunchBound, Class::LaunchBound)),
        Some(&10)
    );
    assert!(v.confusion.keys().all(|(expected, got)| expected == got));
    let rule = v.rule_statement();
    assert!(
        rule.iter()
            .any(|l| l.starts_with("tiny_graph") && l.contains("right: it flags real waste")),
        "{rule:?}"
    );
    assert!(rule
        .iter()
        .any(|l| l.starts_with("membound_copy") && l.contains("right: healthy work passes")));
    // Windows carry the calibrated efficiency from the derived profile.
    assert!(c.plots[&0]
        .iter()
        .all(|w| w.calibrated_efficiency.is_some()));
}

#[test]
fn the_report_plots_power_util_and_sm_with_the_workload_bands() {
    let c = from_recording(&reference()).expect("calibration");
    let section = report::GpuSection {
        profile: &c.profiles[0],
        validation: &c.validations[&0],
        nvml_only: c.nvml_validations.get(&0),
        plots: &c.plots[&0],
        spent: c.spent.get(&0),
    };
    let html = report::page(&[section], &c.phases, &[]);
    assert_eq!(html.matches("<svg").count(), 4);
    assert_eq!(html.matches("<!doctype html>").count(), 1);
    for text in [
        "power, W",
        "GPU-Util, %",
        "SM activity, %",
        // Phase labels as a person reads them, the time axis, the tables in the page.
        ">membound copy<",
        "time since the session started",
        ">0 s<",
        "limit 700 W",
        "<polyline",
        "<th>baseline</th><th>power</th><th>of limit</th>",
        "51/51 windows classified as their workload",
        "<td>membound copy</td><td>memory_bound</td><td>memory_bound×",
        "the cost of slack",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
    // The cost of slack: every window's 2 s is filed under its verdict (the session is short
    // enough that every window is also plotted), with its energy.
    let spent = &c.spent[&0];
    let seconds: f64 = spent.values().map(|s| s.seconds).sum();
    assert_eq!(seconds, 2.0 * c.plots[&0].len() as f64);
    let joules: f64 = spent.values().map(|s| s.energy_j).sum();
    let plotted: f64 = c.plots[&0]
        .iter()
        .filter_map(|p| p.power_w)
        .map(|w| 2.0 * w)
        .sum();
    assert!(
        (joules / plotted - 1.0).abs() < 0.01,
        "{joules} J vs {plotted} J"
    );
    let launch = spent[&Class::LaunchBound];
    assert!(
        launch.seconds >= 20.0 && launch.energy_j / launch.seconds < 200.0,
        "{launch:?}"
    );
    let text = report::terminal(
        &c.profiles[0],
        &c.validations[&0],
        c.nvml_validations.get(&0),
    );
    assert!(text.contains("memory-bound") && text.contains("0.6 rule"));
}

#[test]
fn calibrate_from_recording_writes_a_profile_that_loads_back() {
    let dir = std::env::temp_dir().join(format!("gpuslack-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let out = dir.join("profiles.toml");
    let report_path = dir.join("report.html");
    let run = gpuslack(&[
        "calibrate",
        "--from-recording",
        &reference().display().to_string(),
        "--out",
        &out.display().to_string(),
        "--report",
        &report_path.display().to_string(),
        "--format",
        "json",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&run.stdout).expect("json");
    assert!(within(
        json[0]["memory_w"].as_f64().expect("memory_w"),
        583.0,
        0.02
    ));
    let file = ProfileFile::load(&out).expect("profile file");
    assert_eq!(file.gpu.len(), 1);

    // A second derivation from the same recording is the same measurement: 0.0% everywhere.
    let out_arg = out.display().to_string();
    let args = [
        "calibrate",
        "--from-recording",
        &reference().display().to_string(),
    ];
    let again = gpuslack(&[&args[..], &["--compare-with", &out_arg]].concat());
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("repeatability: GPU 0"), "{text}");
    assert!(
        text.contains("largest change 0.0%: every baseline within 3%"),
        "{text}"
    );
    // An earlier run whose memory baseline was 5% higher is flagged, and its change shown.
    let mut earlier = file.clone();
    earlier.gpu[0].memory_w = earlier.gpu[0].memory_w.map(|w| w * 1.05);
    std::fs::write(&out, earlier.to_toml()).expect("write");
    let drifted = gpuslack(&[&args[..], &["--compare-with", &out_arg]].concat());
    let text = String::from_utf8_lossy(&drifted.stdout);
    assert!(text.contains("-4.8%"), "{text}");
    assert!(text.contains("NOT every baseline within 3%"), "{text}");
    // The same comparison, as a table in the page.
    let page = dir.join("compare.html");
    let with_page = gpuslack(
        &[
            &args[..],
            &[
                "--compare-with",
                &out_arg,
                "--report",
                &page.display().to_string(),
            ],
        ]
        .concat(),
    );
    assert!(with_page.status.success());
    let html = std::fs::read_to_string(&page).expect("report");
    assert!(
        html.contains("<h2>Comparisons</h2>") && html.contains("<td>-4.8%</td>"),
        "{html}"
    );
    assert!(html.contains("NOT every baseline within 3%"));
    assert!(std::fs::read_to_string(&report_path)
        .expect("report")
        .contains("<svg"));
}

#[test]
fn calibrate_without_a_gpu_or_with_a_bad_recording_fails_clearly() {
    let live = gpuslack(&["calibrate"]);
    assert_eq!(live.status.code(), Some(69));
    assert!(String::from_utf8_lossy(&live.stderr).contains("--from-recording"));
    let missing = gpuslack(&["calibrate", "--from-recording", "/nonexistent/session"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr)
        .contains("/nonexistent/session/samples.csv: cannot open"));
}

fn two_gpu_session() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h200x2-calibration")
}

/// A live calibration of both GPUs of the two-H200 machine, saved with --save-session: the
/// recording gives back what the live run computed, each GPU keyed by its own UUID.
#[test]
fn the_two_gpu_session_gives_back_the_live_profiles() {
    let c = from_recording(&two_gpu_session()).expect("calibration");
    let live = ProfileFile::load(&two_gpu_session().join("profiles-live-run1.toml")).expect("toml");
    assert_eq!(c.profiles.len(), 2);
    for (derived, measured) in c.profiles.iter().zip(&live.gpu) {
        assert_eq!(derived.uuid, measured.uuid);
        assert!(derived
            .uuid
            .as_deref()
            .is_some_and(|u| u.starts_with("GPU-")));
        for ((name, a), (_, b)) in derived.baselines().into_iter().zip(measured.baselines()) {
            let (a, b) = (a.expect("derived"), b.expect("live"));
            assert!(
                within(a, b, 0.005),
                "{name}: {a} from the recording, {b} live"
            );
        }
        // The tensor GEMM at the power cap: at least 97% of the enforced limit.
        let limit = derived.power_limit_w.expect("limit");
        assert!(derived.compute_tensor_w.expect("tensor") >= 0.97 * limit);
    }
    for v in c.validations.values() {
        assert_eq!((v.right(), v.windows()), (7, 7));
    }
}

#[test]
fn a_second_live_calibration_agrees_within_3_percent_and_the_gpus_differences_show() {
    let session = two_gpu_session().display().to_string();
    let second = two_gpu_session().join("profiles-live-run2.toml");
    let run = gpuslack(&[
        "calibrate",
        "--from-recording",
        &session,
        "--compare-with",
        &second.display().to_string(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.contains("differences: GPU 1 against GPU 0"), "{text}");
    assert!(
        text.contains("bare idle                78.4 W       81.2 W     +3.6%"),
        "{text}"
    );
    assert_eq!(
        text.matches("largest change 0.4%: every baseline within 3%")
            .count(),
        2,
        "{text}"
    );
}
