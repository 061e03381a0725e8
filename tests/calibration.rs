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
        // The recording predates the latency workloads: that baseline is absent on both sides.
        let (Some(x), Some(y)) = (x, y) else {
            assert!(
                name == "latency-bound" && x.is_none() && y.is_none(),
                "{name}: {x:?} then {y:?}"
            );
            continue;
        };
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
            // Recorded before the latency workloads: no latency baseline on either side.
            let (Some(a), Some(b)) = (a, b) else {
                assert!(
                    name == "latency-bound" && a.is_none() && b.is_none(),
                    "{name}: {a:?} from the recording, {b:?} live"
                );
                continue;
            };
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

/// A GPU as the live source sees it through the `DeviceReader` seam, with the facts NVML would
/// give: what it reports of its make-up must win over the SKU table, and say so.
struct ScriptedGpu(gpuslack_receiver::device::DeviceFacts);

impl gpuslack_receiver::source::live::DeviceReader for ScriptedGpu {
    fn facts(&mut self) -> gpuslack_receiver::device::DeviceFacts {
        self.0.clone()
    }

    fn read(
        &mut self,
        _field: gpuslack_receiver::source::live::Field,
        _sample: &mut gpuslack_receiver::Sample,
    ) -> Result<(), gpuslack_receiver::source::live::ReadError> {
        Err(gpuslack_receiver::source::live::ReadError::NotSupported)
    }
}

#[test]
fn the_live_figures_override_the_table_and_say_where_each_came_from() {
    use gpuslack_calibration::sku::spec_for;
    use gpuslack_receiver::device::DeviceFacts;
    use gpuslack_receiver::source::live::{Cadence, LiveSource};
    use gpuslack_receiver::spec::{FigureSource, LiveFigures};
    use gpuslack_receiver::trace::TraceFacts;
    use std::time::Duration;

    let gpu = |name: &str, tdp_w: f64, figures: LiveFigures| {
        ScriptedGpu(DeviceFacts {
            name: Some(name.into()),
            tdp_w: Some(tdp_w),
            figures,
            ..DeviceFacts::default()
        })
    };
    // An A100 80GB PCIe as NVML reads it: 5,120-bit bus at 1,512 MHz, 6,912 cores, Ampere.
    let a100 = LiveFigures {
        mem_bus_width_bits: Some(5120),
        mem_clock_max_mhz: Some(1512.0),
        cuda_cores: Some(6912),
        arch: Some(7),
        sm_count: None,
        gpm_supported: Some(false),
    };
    // A GB200 reporting 152 SMs' worth of cores, and a driver that reads nothing else.
    let gb200 = LiveFigures {
        cuda_cores: Some(152 * 128),
        arch: Some(10),
        ..LiveFigures::default()
    };
    // A part the table does not know: only what NVML reads.
    let a1000 = LiveFigures {
        mem_bus_width_bits: Some(128),
        mem_clock_max_mhz: Some(6001.0),
        cuda_cores: Some(2304),
        arch: Some(7),
        sm_count: None,
        gpm_supported: Some(false),
    };
    let source = LiveSource::new(
        vec![
            (0, gpu("NVIDIA A100 80GB PCIe", 275.0, a100)),
            (1, gpu("NVIDIA GB200", 1200.0, gb200)),
            (2, gpu("NVIDIA RTX A1000", 50.0, a1000)),
        ],
        Cadence::every(Duration::from_millis(100)),
    );
    let specs: Vec<_> = source
        .facts()
        .iter()
        .map(|(_, f)| spec_for(f).expect("table"))
        .collect();

    let a = &specs[0];
    assert_eq!(a.sku.as_deref(), Some("A100 PCIe 80GB"));
    assert_eq!(
        (a.tdp_w.value, a.tdp_w.source),
        (Some(275.0), FigureSource::Nvml),
        "the default limit NVML read, not the table's 300 W"
    );
    assert_eq!(a.mem_bandwidth_gb_s.source, FigureSource::Nvml);
    assert!((a.mem_bandwidth_gb_s.value.expect("bw") - 1935.36).abs() < 1e-6);
    assert_eq!(
        (a.sm_count.value, a.sm_count.source),
        (Some(108), FigureSource::Nvml)
    );
    assert_eq!(
        (a.fp16_dense_tflops.value, a.fp16_dense_tflops.source),
        (Some(312.0), FigureSource::Table),
        "NVML reports no TFLOP/s"
    );
    assert_eq!(a.gpm.source, FigureSource::Nvml);

    let g = &specs[1];
    assert_eq!(
        (g.sm_count.value, g.sm_count.source),
        (Some(152), FigureSource::Nvml)
    );
    assert!(
        !g.sm_count.unsure,
        "read on the GPU, not the table's unsure figure"
    );
    assert_eq!(
        (g.mem_bandwidth_gb_s.value, g.mem_bandwidth_gb_s.source),
        (Some(8000.0), FigureSource::Table)
    );
    assert_eq!(
        (g.gpm.value, g.gpm.source),
        (Some(true), FigureSource::Table)
    );

    let u = &specs[2];
    assert_eq!(u.sku, None);
    assert_eq!(
        (u.tdp_w.value, u.tdp_w.source),
        (Some(50.0), FigureSource::Nvml)
    );
    assert!((u.mem_bandwidth_gb_s.value.expect("bw") - 192.032).abs() < 1e-6);
    assert_eq!(
        u.sm_count.source,
        FigureSource::Unknown,
        "Ampere without an entry"
    );
    assert_eq!(u.fp16_dense_tflops.source, FigureSource::Unknown);

    // The facts file `record` writes keeps the readings and the sources, and reads back.
    let facts = TraceFacts {
        default: DeviceFacts::default(),
        per_gpu: source
            .facts()
            .into_iter()
            .zip(&specs)
            .map(|((gpu, mut f), spec)| {
                f.spec = Some(spec.clone());
                (gpu, f)
            })
            .collect(),
    };
    let json = facts.to_json();
    let back = TraceFacts::from_json(&json, "samples.facts.json").expect("reads back");
    assert_eq!(back.per_gpu, facts.per_gpu);
    assert_eq!(spec_for(back.gpu(0)).expect("table"), specs[0]);
    let doc: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(
        doc["gpus"]["0"]["spec"]["mem_bandwidth_gb_s"]["source"],
        "nvml"
    );
    assert_eq!(
        doc["gpus"]["0"]["spec"]["fp16_dense_tflops"]["source"],
        "table"
    );
    assert_eq!(doc["gpus"]["2"]["spec"]["sm_count"]["source"], "unknown");
    assert_eq!(doc["gpus"]["0"]["mem_bus_width_bits"], 5120);
}

/// A recording whose GPU the table does not know: the report says so on the GPU's line and in
/// the JSON, the log says so once, and no figure comes from a neighbour's entry.
#[test]
fn a_model_not_in_the_table_is_said_so_in_the_report_and_the_log() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h200-health");
    let dir = std::env::temp_dir().join(format!("gpuslack-unknown-sku-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let trace = dir.join("samples.csv");
    std::fs::copy(fixture.join("samples.csv"), &trace).expect("trace copied");
    // The H100 SXM5 64GB: no entry of its own, and the 80GB's figures are not its.
    std::fs::write(
        dir.join("samples.facts.json"),
        r#"{"name": "NVIDIA H100 SXM5 64GB", "power_limit_default_mw": 700000}"#,
    )
    .expect("facts");
    let trace = trace.to_string_lossy().into_owned();
    let text = gpuslack(&["diagnose", "--trace", &trace]);
    let report = String::from_utf8_lossy(&text.stdout);
    assert!(text.status.success(), "{report}");
    let line = report
        .lines()
        .find(|l| l.contains("model not in gpuslack's table"))
        .unwrap_or_else(|| panic!("no spec line: {report}"));
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>().join(" "),
        "spec model not in gpuslack's table: no spec-scaled figures; TDP 700 W as NVML reads it"
    );
    let log = String::from_utf8_lossy(&text.stderr);
    assert_eq!(
        log.matches("model not in gpuslack's table").count(),
        1,
        "said once: {log}"
    );
    let json = gpuslack(&["diagnose", "--trace", &trace, "--format", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json report");
    let spec = &doc["gpus"][0]["spec"];
    assert_eq!(spec["sku"], serde_json::Value::Null);
    assert_eq!(spec["tdp_w"]["source"], "nvml");
    assert_eq!(spec["mem_bandwidth_gb_s"]["source"], "unknown");
    assert_eq!(spec["fp16_dense_tflops"]["value"], serde_json::Value::Null);
    let _ = std::fs::remove_dir_all(&dir);
}

fn verdicts_session() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h200-verdicts")
}

/// Profiles written before the latency workloads still load, without a latency baseline; a
/// profile with one keeps it through the file, and an implausible one is refused by name.
#[test]
fn old_profiles_load_without_a_latency_baseline_and_new_ones_keep_it() {
    let path = two_gpu_session().join("profiles-live-run1.toml");
    let text = std::fs::read_to_string(&path).expect("fixture");
    assert!(!text.contains("latency_w"), "the fixture predates it");
    let old = ProfileFile::load(&path).expect("an old profile loads");
    assert_eq!(old.gpu.len(), 2);
    assert!(old.gpu.iter().all(|p| p.latency_w.is_none()));
    let mut new = old.clone();
    new.gpu[0].latency_w = Some(345.0);
    let toml = new.to_toml();
    assert!(toml.contains("latency_w = 345.0"), "{toml}");
    let back = ProfileFile::parse(&toml, "new.toml").expect("parses");
    assert_eq!(back.gpu[0].latency_w, Some(345.0));
    assert_eq!(back.gpu[1].latency_w, None);
    new.gpu[0].latency_w = Some(-1.0);
    let err = ProfileFile::parse(&new.to_toml(), "bad.toml").expect_err("refused");
    assert!(err.to_string().contains("`latency_w` = -1"), "{err}");
}

/// The H200 verdicts session ran a random 4-byte gather (`random_gather`, 7 s, every SM busy):
/// `--from-recording` takes its power as the latency baseline, and the article's 0.6 rule,
/// with SM activity at 99% and power at 73% of the limit, calls that waste healthy.
#[test]
fn a_recorded_random_gather_gives_the_latency_baseline_and_validates_latency_bound() {
    let c = from_recording(&verdicts_session()).expect("calibration");
    let p = &c.profiles[0];
    let latency = p.latency_w.expect("the gather's power");
    assert!(within(latency, 509.0, 0.01), "{latency}");
    let limit = p.power_limit_w.expect("limit");
    let gather = p
        .workloads
        .iter()
        .find(|w| w.name == "random_gather")
        .expect("phase");
    let sm = gather.sm_pct.expect("GPM") / 100.0;
    assert!(sm > 0.98, "{sm}");
    let efficiency = latency / limit * sm;
    assert!(
        (0.6..0.8).contains(&efficiency),
        "(power/TDP) × SM = {efficiency:.2}: above the rule's 0.6"
    );
    // Between the held context and the bf16 GEMM, as the report's baseline table lists it.
    let names: Vec<&str> = p.baselines().iter().map(|(n, _)| *n).collect();
    assert_eq!(names[4], "latency-bound");
    // With GPM every window of the gather is latency_bound, and the 0.6 rule's miss is named.
    let v = &c.validations[&0];
    let check = v
        .phases
        .iter()
        .find(|x| x.phase == "random_gather")
        .expect("validated");
    assert_eq!(check.expected, Class::LatencyBound);
    assert!(
        check.windows >= 2 && check.right == check.windows,
        "{check:?}"
    );
    assert_eq!(v.right(), v.windows());
    let rule = v.rule_statement();
    let line = rule
        .iter()
        .find(|l| l.starts_with("random_gather"))
        .expect("the rule on the gather");
    assert!(
        line.contains("WRONG: waste passes as healthy (the latency-bound case"),
        "{line}"
    );
    // Without GPM the gather leans to latency_bound by its power alone (load ~0.7: above a
    // spin, short of a unit at its peak), and the report says what NVML cannot see.
    let nvml = &c.nvml_validations[&0];
    let blind = nvml
        .phases
        .iter()
        .find(|x| x.phase == "random_gather")
        .expect("judged without GPM");
    assert_eq!(blind.right, blind.windows, "{blind:?}");
    let text = report::terminal(p, v, Some(nvml));
    assert!(text.contains(report::NVML_LATENCY_LIMITS), "{text}");
    // The page says the same, and lists the latency baseline and the gather's verdicts.
    let section = report::GpuSection {
        profile: p,
        validation: v,
        nvml_only: Some(nvml),
        plots: &c.plots[&0],
        spent: c.spent.get(&0),
    };
    let html = report::page(&[section], &c.phases, &[]);
    for text in [
        "<td>latency-bound</td><td>509.0 W</td><td>73%</td>",
        "<td>random gather</td><td>latency_bound</td><td>latency_bound×2</td>",
        "Latency-bound work (every SM waiting on scattered or dependent loads) is beyond what NVML can measure",
        "waste passes as healthy (the latency-bound case",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
}

/// The two-GPU H200 session predates the latency workloads: it still validates every window,
/// and its report says nothing of latency it did not run.
#[test]
fn a_session_without_the_latency_workloads_validates_as_before() {
    let c = from_recording(&two_gpu_session()).expect("calibration");
    for (gpu, v) in &c.validations {
        assert_eq!((v.right(), v.windows()), (7, 7), "GPU {gpu}");
        assert!(v.phases.iter().all(|p| p.expected != Class::LatencyBound));
    }
    for p in &c.profiles {
        assert_eq!(p.latency_w, None);
        let gpu = p.gpu_index().expect("index");
        let text = report::terminal(p, &c.validations[&gpu], c.nvml_validations.get(&gpu));
        assert!(!text.contains(report::NVML_LATENCY_LIMITS));
    }
}

fn h100_latency_session() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h100-calibration-latency")
}

/// The live H100 session with the latency workload (tests/fixtures/h100-calibration-latency):
/// with GPM, the chase, the atomic scatter, its shared-memory fix and the under-filled grid are
/// latency_bound in every window, as Nsight Compute's speed-of-light put them (every unit under
/// 60%); the sorted gather and the full-width copy are memory_bound (DRAM 88% and 90%); the
/// random gather sits on the line (ncu DRAM 60.6%) and either side counts.
#[test]
fn the_h100_latency_session_validates_each_pattern_and_fix_as_ncu_measured_it() {
    let c = from_recording(&h100_latency_session()).expect("calibration");
    let v = &c.validations[&0];
    let check = |phase: &str| {
        v.phases
            .iter()
            .find(|x| x.phase == phase)
            .unwrap_or_else(|| panic!("{phase} validated"))
    };
    for (phase, class) in [
        ("latency_chase", Class::LatencyBound),
        ("latency_scatter", Class::LatencyBound),
        ("fix_scatter_smem", Class::LatencyBound),
        ("underfilled_grid", Class::LatencyBound),
        ("fix_gather_sorted", Class::MemoryBound),
        ("fix_full_grid", Class::MemoryBound),
    ] {
        let p = check(phase);
        assert_eq!(p.expected, class, "{phase}");
        assert!(p.windows >= 1 && p.right == p.windows, "{phase}: {p:?}");
    }
    let gather = check("latency_gather");
    assert_eq!(
        (gather.expected, gather.also),
        (Class::LatencyBound, Some(Class::MemoryBound))
    );
    assert_eq!(gather.right, gather.windows, "{gather:?}");
    // The baseline: the random gather's power, between a held context and the GEMM.
    let p = &c.profiles[0];
    let latency = p.latency_w.expect("the gather's power");
    assert!(within(latency, 467.5, 0.02), "{latency}");
    // Without GPM the chase leans to latency_bound by power alone, and the report says what
    // NVML cannot see.
    let nvml = &c.nvml_validations[&0];
    assert_eq!(
        nvml.phases
            .iter()
            .find(|x| x.phase == "latency_chase")
            .map(|x| (x.right, x.windows)),
        Some((2, 2))
    );
    let text = report::terminal(p, v, Some(nvml));
    assert!(text.contains(report::NVML_LATENCY_LIMITS), "{text}");
    assert!(
        text.contains("latency_gather   expected latency_bound or memory_bound"),
        "{text}"
    );
}
