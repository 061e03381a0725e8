//! Calibration math on the recorded H200 session (the same code a live `gpuslack calibrate`
//! runs after its workloads), the profile file, the report, and the command line.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuslack_calibration::session::from_recording;
use gpuslack_calibration::{report, ProfileFile};
use gpuslack_receiver::Class;

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

/// Two GPUs' samples interleaved, as a live calibration of a two-GPU machine records them:
/// the reference session, and the same session as GPU 1 drawing 10% more.
#[test]
fn a_two_gpu_session_gives_one_profile_per_gpu() {
    use gpuslack_calibration::phases::load_phases;
    use gpuslack_calibration::session::calibrate;
    use gpuslack_receiver::trace::TraceReader;
    use gpuslack_receiver::Metric;

    let samples: Vec<_> = TraceReader::open(&reference().join("samples.csv"))
        .expect("trace")
        .collect::<Result<_, _>>()
        .expect("samples");
    let both: Vec<_> = samples
        .iter()
        .flat_map(|s| {
            let mut other = s.clone();
            other.gpu = 1;
            for metric in [
                Metric::PowerMw,
                Metric::PowerInstMw,
                Metric::PowerAvgMw,
                Metric::EnergyMj,
            ] {
                if let Some(v) = s.get(metric) {
                    other.set(metric, v * 1.1);
                }
            }
            [s.clone(), other]
        })
        .collect();
    let phases = load_phases(&reference().join("phases.json")).expect("phases");
    let c = calibrate(&both, phases, &Default::default(), "two GPUs").expect("calibration");
    let gpus: Vec<_> = c.profiles.iter().map(|p| p.workloads[0].gpu).collect();
    assert_eq!(gpus, [0, 1]);
    let memory: Vec<_> = c.profiles.iter().filter_map(|p| p.memory_w).collect();
    assert!(within(memory[1], memory[0] * 1.1, 0.01), "{memory:?}");
    assert_eq!(c.validations.len(), 2);
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
    assert!(c.windows.iter().all(|w| w.calibrated_efficiency.is_some()));
}

#[test]
fn the_report_plots_power_util_and_sm_with_the_workload_bands() {
    let c = from_recording(&reference()).expect("calibration");
    let html = report::html(&c.profiles[0], &c.validations[&0], &c.windows, &c.phases);
    assert_eq!(html.matches("<svg").count(), 4);
    for text in [
        "power, W",
        "GPU-Util, %",
        "SM activity, %",
        "membound_copy",
        "limit 700 W",
        "<polyline",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
    let text = report::terminal(&c.profiles[0], &c.validations[&0]);
    assert!(text.contains("memory-bound") && text.contains("0.6 rule"));
}

fn gpuslack(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(args)
        .output()
        .expect("runs")
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
    assert!(std::fs::read_to_string(&report_path)
        .expect("report")
        .contains("<svg"));
}

#[test]
fn calibrate_without_a_gpu_or_with_a_bad_recording_fails_clearly() {
    let live = gpuslack(&["calibrate"]);
    assert_eq!(live.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&live.stderr).contains("--from-recording"));
    let missing = gpuslack(&["calibrate", "--from-recording", "/nonexistent/session"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr)
        .contains("/nonexistent/session/samples.csv: cannot open"));
}
