//! The report of `gpuslack diagnose` as its readers meet it (issue #26): the bottom line agrees
//! with the verdict rows, numbers name their basis, the length stays bounded however long the
//! run, whose job and the GPU's health show, the JSON validates against docs/output.schema.json,
//! the bundled fallback says so, and the HTML timeline renders in a real browser.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn gpuslack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(args)
        .output()
        .expect("gpuslack runs")
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn fixture(name: &str) -> String {
    repo("tests/fixtures")
        .join(name)
        .join("samples.csv")
        .display()
        .to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The text with every run of whitespace as one space: what a wrapped line says.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuslack-report-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The fixtures every report test reads: one GPU and two, with and without processes.
const FIXTURES: [&str; 6] = [
    "h100-diagnose-job",
    "h200-diagnose-job",
    "h200-reference",
    "h200x2-scenarios",
    "h200-health",
    "h200-live-torch",
];

fn diagnose(args: &[&str]) -> String {
    let out = gpuslack(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

fn json_of(trace: &str) -> Value {
    let text = diagnose(&["diagnose", "--trace", trace, "--format", "json"]);
    serde_json::from_str(&text).expect("one JSON document")
}

/// The share printed in "Bottom line: 57% of the GPU time".
fn bottom_line_share(report: &str) -> f64 {
    let line = report
        .lines()
        .find(|l| l.starts_with("Bottom line: "))
        .unwrap_or_else(|| panic!("no bottom line in\n{report}"));
    let pct = line
        .trim_start_matches("Bottom line: ")
        .split('%')
        .next()
        .expect("a share");
    pct.parse()
        .unwrap_or_else(|_| panic!("not a share: {line}"))
}

/// The slack verdicts: every class the diagnosis's table calls not healthy.
fn slack_classes() -> Vec<&'static str> {
    gpuslack_receiver::Class::ALL
        .into_iter()
        .filter(|c| !c.is_healthy())
        .map(|c| c.as_str())
        .collect()
}

/// Every trace under tests/fixtures (a CSV whose header starts with `t,`).
fn every_fixture_trace() -> Vec<String> {
    let mut traces = Vec::new();
    for dir in std::fs::read_dir(repo("tests/fixtures")).expect("fixtures") {
        let dir = dir.expect("entry").path();
        for file in std::fs::read_dir(&dir).into_iter().flatten() {
            let path = file.expect("entry").path();
            let is_trace = path.extension().is_some_and(|e| e == "csv")
                && std::fs::read_to_string(&path).is_ok_and(|t| t.starts_with("t,"));
            if is_trace {
                traces.push(path.display().to_string());
            }
        }
    }
    traces.sort();
    traces
}

/// The first screen (24 lines of 100 columns) says what the GPUs did, the slack, whether the
/// hardware is sound and the change to make first, as an instruction naming code, in words: no
/// class id on it, whatever the fixture, and the bundled recording too.
#[test]
fn the_first_24_lines_name_the_change_to_make_without_class_ids() {
    let mut reports: Vec<(String, String)> = every_fixture_trace()
        .into_iter()
        .map(|trace| {
            let report = diagnose(&["diagnose", "--trace", &trace]);
            (trace, report)
        })
        .collect();
    assert!(reports.len() >= 10, "{} fixture traces", reports.len());
    // A node of eight GPUs: the two-GPU recording's rows, copied to GPUs 2–7.
    let two = std::fs::read_to_string(fixture("h200x2-scenarios")).expect("fixture");
    let mut eight = String::new();
    for (i, line) in two.lines().enumerate() {
        if i == 0 {
            eight += line;
            eight.push('\n');
            continue;
        }
        let (t, rest) = line.split_once(',').expect("t");
        let (gpu, rest) = rest.split_once(',').expect("gpu");
        let gpu: u32 = gpu.parse().expect("gpu index");
        for copy in 0..4 {
            eight += &format!("{t},{},{rest}\n", gpu + 2 * copy);
        }
    }
    let path = temp_dir("eight").join("samples.csv");
    std::fs::write(&path, eight).expect("write");
    let trace = path.display().to_string();
    let report = diagnose(&["diagnose", "--trace", &trace]);
    assert!(report.contains("GPU 0–7 (8 GPUs)"), "{report}");
    reports.push((trace, report));
    let bundled = gpuslack(&["diagnose"]);
    assert!(bundled.status.success(), "{}", stderr(&bundled));
    reports.push(("bundled".into(), stdout(&bundled)));
    let codes = [
        "torch.compile",
        "num_workers",
        "pin_memory=True",
        "non_blocking=True",
        "torch.cuda.empty_cache()",
        "no_sync",
        "py-spy dump",
        "PYTORCH_CUDA_ALLOC_CONF",
        "cuda-gdb",
        "torch.autocast",
        "CUDA_VISIBLE_DEVICES",
        "nsys profile",
        "cudaAccessPolicyWindow",
        "torch.sum",
        "`ncu`",
    ];
    for (name, report) in &reports {
        let screen: Vec<&str> = report.lines().take(24).collect();
        let text = screen.join("\n");
        for line in &screen {
            assert!(
                line.chars().count() <= 100,
                "{name}: wider than 100:\n{line}"
            );
        }
        // "idle" and "hung" are words too; the ids with an underscore are ids only.
        let ids = gpuslack_receiver::Class::ALL.map(|c| c.as_str());
        for class in ids.iter().filter(|c| c.contains('_')) {
            assert!(
                !text.contains(class),
                "{name}: class id {class} on the first screen:\n{text}"
            );
        }
        assert!(text.contains("Bottom line: "), "{name}:\n{text}");
        // One GPU's line, or every GPU's as one ("GPU 0–7 (8 GPUs)", "GPU 0, 1 (2 GPUs)").
        assert!(
            text.contains("GPU 0 · ")
                || text.contains("GPU 0–")
                || text.contains("GPU 0, 1 (2 GPUs)"),
            "{name}:\n{text}"
        );
        assert!(text.contains("Hardware"), "{name}:\n{text}");
        let at = screen
            .iter()
            .position(|l| l.starts_with("Change first ("))
            .unwrap_or_else(|| panic!("{name}: no change on the first screen:\n{text}"));
        // The change's readings, then its instruction: three lines name the code it touches.
        let change = screen[at + 1..(at + 4).min(screen.len())].join("\n");
        assert!(
            codes.iter().any(|c| change.contains(c)),
            "{name}: the change names no code:\n{text}"
        );
    }
    // The bundled recording shows whose job it was.
    let (_, bundled) = reports.last().expect("bundled");
    assert!(
        bundled.contains("job pgid:518 · pid 519 python3"),
        "{bundled}"
    );
}

/// The first 24 lines of a report, as one line: what a wrapped sentence says.
fn first_screen(trace: &str) -> String {
    let report = diagnose(&["diagnose", "--trace", trace]);
    one_line(&report.lines().take(24).collect::<Vec<_>>().join("\n"))
}

/// The "Change first" sentence of a first screen, up to the next change.
fn change_first(screen: &str) -> &str {
    let at = screen
        .find("Change first (")
        .unwrap_or_else(|| panic!("no change first:\n{screen}"));
    let rest = &screen[at..];
    let end = rest.find("Then: ").unwrap_or(rest.len());
    &rest[..end]
}

/// Issue #47, two GPUs: a hang is an incident, not a share of time, so it comes first and
/// names the GPU that never joined (GPU 1 held its context while GPU 0 spun in the all-reduce);
/// the straggler of the all-reduce is named by its GPU, and GPU 0 is said to wait on it.
#[test]
fn a_hang_comes_first_and_names_the_gpu_and_the_straggler_is_named() {
    let screen = first_screen(&fixture("h200x2-scenarios"));
    let report = diagnose(&["diagnose", "--trace", &fixture("h200x2-scenarios")]);
    let first = report
        .lines()
        .find(|l| !l.is_empty() && !l.starts_with("gpuslack diagnose") && !l.starts_with("  "))
        .expect("a first line");
    assert!(
        first.starts_with("HUNG: GPUs 0, 1 stopped together"),
        "{report}"
    );
    assert!(
        // From the stall's start: 8 s read as waiting on peers before it was called hung.
        screen.contains("made no progress for 22 s from 08:06:14 UTC"),
        "{screen}"
    );
    assert!(
        screen.contains("Likely culprit: GPU 1 held its context and never joined"),
        "{screen}"
    );
    assert!(
        screen.contains("Now: `py-spy dump --pid PID` on it first, then every rank."),
        "{screen}"
    );
    let change = change_first(&screen);
    assert!(
        change
            .contains("Change first (the hang, before any share of time; GPU 1 first; [1] below)"),
        "{change}"
    );
    assert!(change.contains("GPU 1 first"), "{change}");
    assert!(change.contains("py-spy dump"), "{change}");
    // The straggler: GPU 1 computed while GPU 0 waited on it for 22 s of its 2 min 36 s.
    assert!(
        screen.contains("Straggler: GPU 1. GPU 0 waits on it 22 s (14% of its time)"),
        "{screen}"
    );
    assert!(
        screen.contains("waiting for GPU 1, the straggler"),
        "{screen}"
    );
    // The wait on peers comes second, naming the straggler; the wait since the hang began is
    // the hang's, not a share to win back.
    assert!(
        screen.contains("Then: 2. Waiting on peers, up to 1 min 06 s back (21%) [2]: GPU 1 is the straggler GPU 0 waits on"),
        "{screen}"
    );
}

/// A hang on one GPU recorded with its process list (h100-hang-job: a kernel of 24 one-warp
/// blocks waits 75 s on a flag nothing writes, as a rank whose peer died). The first line names
/// the process to dump; the hang lasts from the stall's start, and the 30 s it spun before it
/// was called hung (read as tiny kernels) are the hang's, so no "fuse the kernels" follows it.
#[test]
fn a_hang_names_the_process_to_dump_and_claims_its_own_beginning() {
    let screen = first_screen(&fixture("h100-hang-job"));
    assert!(
        screen.contains("HUNG: GPU 0 made no progress for 1 min 14 s from 22:33:32 UTC. Now: find the spinning kernel (cuda-gdb, `info cuda kernels`) and the host threads of pid 511 python3 (`py-spy dump --pid 511`)."),
        "{screen}"
    );
    assert!(
        change_first(&screen)
            .contains("Change first (the hang, before any share of time; [1] below):"),
        "{screen}"
    );
    assert!(!screen.contains("torch.compile"), "{screen}");
    assert!(!screen.contains("Then: "), "{screen}");
}

/// Issue #47, Nsight Compute on a GEMM loop: the one-window phases where the GEMM processes
/// start and stop never drive the change (no DataLoader in this job); the windows the profiler
/// paced come first, and the change names Nsight Compute.
#[test]
fn a_profiler_comes_before_start_up_and_tear_down_windows() {
    let screen = first_screen(&fixture("h200-profiler-and-shared"));
    let change = change_first(&screen);
    assert!(
        change.contains("up to 6 s back, 8% of the GPU time"),
        "{change}"
    );
    assert!(change.contains("Nsight Compute (`ncu`)"), "{change}");
    assert!(!change.contains("DataLoader"), "{change}");
    // The loader's advice came from single windows where a process started or stopped, each
    // a stray inside the profiler's phase: nothing a change wins back, so not on the screen.
    assert!(!screen.contains("DataLoader"), "{screen}");
    assert!(!screen.contains("Then: "), "{screen}");
}

/// Issue #47, the earlier demo: 6 of the 8 held seconds come before the first kernel ran and 2
/// are a one-window phase after the last, so "release the GPU" wins nothing back; the code
/// change (fuse the tiny kernels) comes first, tied in share with the starved phase.
#[test]
fn start_up_never_drives_the_change_and_code_goes_before_habit() {
    {
        let trace = fixture("h200-diagnose-job");
        let screen = first_screen(&trace);
        let change = change_first(&screen);
        assert!(
            change.contains("up to 6 s back, 14% of the GPU time"),
            "{trace}: {change}"
        );
        assert!(change.contains("torch.compile"), "{trace}: {change}");
        assert!(!screen.contains("Release the GPU"), "{trace}: {screen}");
        assert!(
            screen.contains("Then: 2. Starved of input, up to 6 s back (14%)"),
            "{trace}: {screen}"
        );
    }
    // The remedies below still list the held context, with its whole 8 s in the JSON.
    let json = json_of(&fixture("h200-diagnose-job"));
    let held = json["remedies"]
        .as_array()
        .expect("remedies")
        .iter()
        .find(|r| r["class"] == "idle_held")
        .expect("the held context's remedy");
    assert_eq!(held["seconds"], 8.0);
    assert_eq!(held["won_back_seconds"], 0.0);
    assert_eq!(held["severity"], "slack");
    assert_eq!(held["id"], 3);
    let first = &json["remedies"][0];
    assert_eq!(first["class"], "launch_bound");
    assert_eq!(first["seconds"], 8.0);
    assert_eq!(first["won_back_seconds"], 6.0);
    let hang = json_of(&fixture("h200x2-scenarios"));
    assert_eq!(hang["remedies"][0]["severity"], "incident");
    assert_eq!(hang["remedies"][0]["class"], "hung");
}

/// Issue #47, the bundled demo shows the pitch: for 14 s a reduction launched with one block
/// keeps GPU-Util at 100% on 0.8% of the SMs at 128 W of 700 W (h100-diagnose-job, Nsight
/// Compute: 0.3% of DRAM's peak, 10.9 GB/s against torch.sum's 2,706 GB/s). Its first screen
/// says so beside the change, and the change is one in code: launch enough blocks.
#[test]
fn the_bundled_demo_shows_gpu_util_high_at_low_power_and_a_code_change_first() {
    let out = gpuslack(&["diagnose"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bundled = stdout(&out);
    let screen = one_line(&bundled.lines().take(24).collect::<Vec<_>>().join("\n"));
    let change = change_first(&screen);
    // Named by its fix, not by launch_bound's "tiny kernels": the kernel is one long block.
    assert!(
        screen.contains("Largest cause: too few blocks (28% of the GPU time)."),
        "{screen}"
    );
    assert!(
        change.contains(
            "Change first (up to 12 s back, 24% of the GPU time; how sure: high; [1] below):"
        ),
        "{change}"
    );
    assert!(
        change.contains("Its windows: GPU-Util 100%, yet 0.8% of the SMs active, 128 W of 700 W."),
        "{change}"
    );
    assert!(
        change.contains("Launch enough blocks to fill every SM"),
        "{change}"
    );
    assert!(change.contains("torch.sum"), "{change}");
    assert!(
        screen.contains("job pgid:518 · pid 519 python3 (user root, pgid 518)"),
        "{screen}"
    );
    // The stray window where the GEMMs give way to the starved bursts reads host-paced; one
    // window is a transition, not a change to make.
    assert!(
        screen.contains("Then: 2. Starved of input, up to 6 s back (12%)"),
        "{screen}"
    );
    assert!(!screen.contains("profiler ran here"), "{screen}");
    // The bundled recording is the fixture as recorded: the same report from the folder.
    let fixture_screen = first_screen(&fixture("h100-diagnose-job"));
    assert_eq!(change_first(&fixture_screen), change);
}

/// Words never beyond figures, over every fixture: the first screen says a GPU moved data "at
/// its memory bandwidth's limit" only where a memory-bound GPU's DRAM averaged at least the
/// 60% line; it claims occupancy only where occupancy was measured; and the layout advice the
/// counters cannot check (channels_last, bf16) is hedged.
#[test]
fn the_first_screen_says_no_more_than_its_figures() {
    for trace in every_fixture_trace() {
        let screen = first_screen(&trace);
        let json = json_of(&trace);
        let gpus = json["gpus"].as_array().expect("gpus");
        let verdict = |class: &str, field: &str| -> Vec<Option<f64>> {
            gpus.iter()
                .filter_map(|g| g["time_by_verdict"].get(class))
                .map(|v| v[field].as_f64())
                .collect()
        };
        if screen.contains("at its memory bandwidth's limit") {
            let dram = verdict("memory_bound", "dram");
            assert!(
                dram.iter().flatten().any(|d| *d >= 0.6),
                "{trace}: bandwidth's limit with DRAM at {dram:?}:\n{screen}"
            );
        }
        // Every memory-bound GPU whose DRAM is under the line has its share said instead.
        for d in verdict("memory_bound", "dram").into_iter().flatten() {
            if d < 0.6 && gpus.len() == 1 {
                assert!(
                    screen.contains(&format!("with DRAM moving {:.0}% of its peak", d * 100.0)),
                    "{trace}: DRAM {d}:\n{screen}"
                );
            }
        }
        if screen.to_lowercase().contains("occupancy") {
            let measured = gpus.iter().any(|g| {
                g["time_by_verdict"]
                    .as_object()
                    .is_some_and(|m| m.values().any(|v| v["sm_occupancy"].is_number()))
            });
            assert!(measured, "{trace}: occupancy unmeasured:\n{screen}");
        }
        for (advice, hedge) in [
            ("channels_last", "If not already channels_last"),
            ("torch.autocast", "not already in bf16"),
        ] {
            if screen.contains(advice) {
                assert!(
                    screen.contains(hedge),
                    "{trace}: {advice} unhedged:\n{screen}"
                );
            }
        }
    }
}

/// Each sentence of evidence says one thing, once: the figures the issue found said twice or
/// against their own words are gone.
#[test]
fn evidence_says_each_figure_once() {
    let reference = diagnose(&["diagnose", "--trace", &fixture("h200-reference")]);
    let flat = one_line(&reference);
    for confusing in [
        "emptier than GPU-Util claims",
        ": kernels are resident",
        "the SMs are busy (SM",
        "is further from bare idle",
        "is closer to bare idle",
    ] {
        assert!(!flat.contains(confusing), "{confusing}: {flat}");
    }
    assert!(
        flat.contains("the resident kernels fill 1/141 of what GPU-Util suggests"),
        "{flat}"
    );
    assert!(
        flat.contains("120 W: a held context's level (120 W), above bare idle (77 W"),
        "{flat}"
    );
    // A power cap says whether to act: this H200's limit is already its maximum.
    let job = one_line(&diagnose(&[
        "diagnose",
        "--trace",
        &fixture("h200-diagnose-job"),
    ]));
    assert!(
        job.contains("At its power limit 19% of the time (sw_power_cap), already the board's 700 W maximum: nothing to raise."),
        "{job}"
    );
}

#[test]
fn the_bottom_line_slack_share_is_the_sum_of_the_slack_verdicts() {
    for name in FIXTURES {
        let trace = fixture(name);
        let report = diagnose(&["diagnose", "--trace", &trace]);
        let json = json_of(&trace);
        let (mut slack, mut total) = (0.0, 0.0);
        for gpu in json["gpus"].as_array().expect("gpus") {
            for (class, spent) in gpu["time_by_verdict"].as_object().expect("verdicts") {
                let s = spent["seconds"].as_f64().expect("seconds");
                total += s;
                if slack_classes().contains(&class.as_str()) {
                    slack += s;
                }
            }
        }
        let expected = 100.0 * slack / total;
        let printed = bottom_line_share(&report);
        assert!(
            (printed - expected).abs() <= 0.5,
            "{name}: bottom line says {printed}%, the verdicts sum to {expected:.2}%"
        );
        let share = json["bottom_line"]["slack_share"].as_f64().expect("share");
        assert!((100.0 * share - expected).abs() < 1e-6, "{name}");
        // The report opens with it, before any GPU's details.
        let bottom = report.find("Bottom line: ").expect("bottom line");
        let first_gpu = report.find("\nGPU 0 ·").expect("GPU 0");
        assert!(bottom < first_gpu, "{name}: the bottom line comes first");
        assert!(
            report.contains("GPU-hours") && report.contains("kWh"),
            "{name}"
        );
    }
}

#[test]
fn a_price_puts_a_cost_on_the_slack() {
    let trace = fixture("h200x2-scenarios");
    let report = diagnose(&[
        "diagnose",
        "--trace",
        &trace,
        "--price-gpu-hour",
        "2.5",
        "--price-kwh",
        "0.2",
    ]);
    assert!(
        report.contains("at 2.5 per GPU-hour and 0.2 per kWh"),
        "{report}"
    );
    let out = gpuslack(&["diagnose", "--trace", &trace, "--price-kwh=-1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--price-kwh must be a price of 0 or more"));
}

#[test]
fn every_number_names_its_basis_and_flags_fit_the_class() {
    for name in FIXTURES {
        let trace = fixture(name);
        let report = diagnose(&["diagnose", "--trace", &trace, "--tdp-w", "700"]);
        // The verdict rows are means over the verdict's windows; the evidence is one window's.
        assert!(
            report.contains("means over all its windows"),
            "{name}: {report}"
        );
        assert!(
            report.contains("the evidence of a typical window"),
            "{name}"
        );
        assert!(!report.contains("(rule: "), "{name}: rule ids only with -v");
        let detail = diagnose(&["diagnose", "--trace", &trace, "--tdp-w", "700", "--detail"]);
        let blocks: Vec<&str> = detail.split("\n    ▸ ").skip(1).collect();
        assert!(!blocks.is_empty(), "{name}: --detail has a block per phase");
        for block in blocks {
            let head = block.lines().next().expect("head");
            assert!(head.contains("figures: phase means over"), "{name}: {head}");
            assert!(
                block.contains("evidence from the typical window"),
                "{name}: {block}"
            );
            let idle = head.contains(" idle ·") || head.contains(" idle_held ·");
            if idle {
                assert!(!block.contains("under 60% of TDP"), "{name}: {block}");
            }
            if head.contains("launch_bound") || head.contains("transfer_bound") {
                assert!(!block.contains("no work is running"), "{name}: {block}");
                assert!(!block.contains("compute has stopped"), "{name}: {block}");
            }
            assert!(!block.contains("kJ"), "{name}: one unit family: {block}");
        }
        let verbose = diagnose(&["diagnose", "--trace", &trace, "-v"]);
        assert!(verbose.contains("(rule: "), "{name}: -v shows the rule ids");
    }
}

#[test]
fn a_four_hour_trace_gives_a_bounded_report_and_detail_brings_the_blocks_back() {
    let dir = temp_dir("stretched");
    let long = dir.join("samples.csv");
    let stretched = Command::new("python3")
        .arg(repo("scripts/stretch-trace.py"))
        .arg(fixture("h200x2-scenarios"))
        .arg("92")
        .output()
        .expect("python3 runs");
    assert!(stretched.status.success(), "{}", stderr(&stretched));
    std::fs::write(&long, &stretched.stdout).expect("write");
    let trace = long.display().to_string();
    let json = json_of(&trace);
    let hours = json["bottom_line"]["seconds"].as_f64().expect("seconds") / 3600.0;
    assert!(
        hours >= 2.0 * 3.9,
        "two GPUs of four hours each: {hours} GPU-hours"
    );
    let report = diagnose(&["diagnose", "--trace", &trace]);
    let lines = report.lines().count();
    assert!(lines <= 150, "{lines} lines:\n{report}");
    // Each remedy once, whole; the ranked fixes refer to it by number.
    let flat = one_line(&report);
    for remedy in json["remedies"].as_array().expect("remedies") {
        let text = remedy["text"].as_str().expect("text");
        assert_eq!(flat.matches(text).count(), 1, "{text}");
        let id = remedy["id"].as_u64().expect("id");
        assert!(flat.contains(&format!("[{id}] ")), "[{id}]");
    }
    let detail = diagnose(&["diagnose", "--trace", &trace, "--detail"]);
    assert!(
        detail.lines().count() > 10 * lines,
        "--detail is the full report"
    );
}

#[test]
fn the_report_says_whose_job_it_was() {
    let trace = fixture("h200-health");
    let report = diagnose(&["diagnose", "--trace", &trace]);
    assert!(
        report.contains("pid 717 python3 (user root, pgid 715)"),
        "{report}"
    );
    assert!(report.contains("job            pgid:715"), "{report}");
    let detail = diagnose(&["diagnose", "--trace", &trace, "--detail"]);
    let blocks = detail.split("\n    ▸ ").skip(1);
    for block in blocks {
        assert!(block.contains("who            pid 717 python3"), "{block}");
    }
    let json = json_of(&trace);
    let owner = &json["gpus"][0]["owners"][0];
    assert_eq!(owner["owner"], "pid 717 python3 (user root, pgid 715)");
    assert_eq!(owner["process"]["pid"], 717);
    assert_eq!(owner["process"]["user"], "root");
    assert_eq!(json["gpus"][0]["phases"][0]["owners"][0], owner["owner"]);
    // A Slurm job's process in a container, on a GPU the kubelet gave to a pod.
    let dir = temp_dir("owners");
    let path = dir.join("samples.csv");
    let mut text = String::from("t,util_gpu,power_mw,nprocs,processes,pods\n");
    let procs = r#""[{""pid"":42,""name"":""train.py"",""user"":""alice"",""slurm_job"":""981"",""container_id"":""0123456789abcdef""}]""#;
    let pods = r#""[{""pod"":""trainer-0"",""namespace"":""ml"",""container"":""main""}]""#;
    for i in 0..40 {
        text += &format!("{}.0,100,300000,1,{procs},{pods}\n", 1000 + i);
    }
    std::fs::write(&path, text).expect("write");
    let report = one_line(&diagnose(&[
        "diagnose",
        "--trace",
        &path.display().to_string(),
    ]));
    assert!(
        report.contains("pid 42 train.py (user alice, Slurm job 981, container 0123456789ab)"),
        "{report}"
    );
    assert!(
        report.contains("pod ml/trainer-0, container main"),
        "{report}"
    );
    assert!(report.contains("job slurm:981"), "{report}");
    // A trace without a process list says so rather than "nobody".
    let none = diagnose(&["diagnose", "--trace", &fixture("h200-reference")]);
    assert!(none.contains("not recorded (no process list"), "{none}");
}

#[test]
fn health_shows_where_it_occurred() {
    let clean = diagnose(&["diagnose", "--trace", &fixture("h200-health")]);
    assert!(
        clean.contains(
            "health         no Xid events, ECC errors, remapped rows, PCIe replays or link errors"
        ),
        "{clean}"
    );
    // The same recording with an Xid 79 and PCIe replays from its 10th second on.
    let text = std::fs::read_to_string(fixture("h200-health")).expect("fixture");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|c| *c == name).expect(name);
    let (t, xid, last, replays) = (
        col("t"),
        col("xid_events"),
        col("xid_last"),
        col("pcie_replays"),
    );
    let start: f64 = text
        .lines()
        .nth(1)
        .expect("row")
        .split(',')
        .next()
        .expect("t")
        .parse()
        .expect("t");
    let mut out = header.join(",") + "\n";
    for line in lines {
        // Split on commas outside the quoted `processes` cell: it is the last column.
        let (cells, rest) = match line.find(",\"") {
            Some(i) => (&line[..i], &line[i..]),
            None => (line, ""),
        };
        let mut cells: Vec<String> = cells.split(',').map(str::to_string).collect();
        let late = cells[t].parse::<f64>().expect("t") >= start + 10.0;
        for (c, v) in [(xid, "1"), (last, "79"), (replays, "12")] {
            if late && c < cells.len() && !cells[c].is_empty() {
                cells[c] = v.into();
            }
        }
        out += &cells.join(",");
        out += rest;
        out += "\n";
    }
    let dir = temp_dir("health");
    let path = dir.join("samples.csv");
    std::fs::write(&path, out).expect("write");
    std::fs::copy(
        repo("tests/fixtures/h200-health/samples.facts.json"),
        dir.join("samples.facts.json"),
    )
    .expect("facts");
    let trace = path.display().to_string();
    let report = one_line(&diagnose(&["diagnose", "--trace", &trace]));
    assert!(
        report.contains(
            "health ✗ Xid events: 1 (last: Xid 79, GPU has fallen off the bus: reboot_node), first at 10:49:32 UTC during input_starved"
        ),
        "{report}"
    );
    assert!(report.contains("PCIe replays: 12, first at"), "{report}");
    let json = json_of(&trace);
    let findings = json["gpus"][0]["health"]["findings"]
        .as_array()
        .expect("findings");
    assert!(findings
        .iter()
        .any(|f| f["signal"] == "xid_events" && f["severe"] == true));
}

/// Every `--format json` the tests produce, checked against docs/output.schema.json with the
/// `jsonschema` package (scripts/test.sh installs it in the test venv).
#[test]
fn every_json_report_validates_against_the_schema() {
    let dir = temp_dir("schema");
    let mut documents = Vec::new();
    for name in FIXTURES {
        documents.push((name.to_string(), json_of(&fixture(name))));
    }
    // No GPU here: the bundled recording, marked as such.
    let out = gpuslack(&["diagnose", "--format", "json", "--seconds", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bundled: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(bundled["source"]["kind"], "bundled");
    assert!(bundled["source"]["reason"]
        .as_str()
        .is_some_and(|r| r.contains("no NVIDIA GPU")));
    assert_eq!(bundled["schema"], "gpuslack.diagnose.v1");
    assert_eq!(bundled["gpus"][0]["model"], "NVIDIA H100 80GB HBM3");
    documents.push(("bundled".into(), bundled));
    let trace = json_of(&fixture("h200-health"));
    assert_eq!(trace["source"]["kind"], "trace");
    assert_eq!(
        trace["gpus"][0]["uuid"],
        "GPU-36115abe-0e13-085e-c915-3fc286e9fc08"
    );
    let mut paths = Vec::new();
    for (name, doc) in &documents {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, doc.to_string()).expect("write");
        paths.push(path);
    }
    let python = [
        std::env::var("GPUSLACK_PYTHON").ok(),
        Some("python3".into()),
    ]
    .into_iter()
    .flatten()
    .find(|p| {
        Command::new(p)
            .args(["-c", "import jsonschema"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
    .expect("a Python with jsonschema: run the tests through scripts/test.sh");
    let check = Command::new(python)
        .arg("-c")
        .arg(
            "import json, sys, jsonschema\n\
             schema = json.load(open(sys.argv[1]))\n\
             jsonschema.Draft202012Validator.check_schema(schema)\n\
             for path in sys.argv[2:]:\n\
             \x20   jsonschema.Draft202012Validator(schema).validate(json.load(open(path)))\n\
             print('valid', len(sys.argv) - 2)\n",
        )
        .arg(repo("docs/output.schema.json"))
        .args(&paths)
        .output()
        .expect("python runs");
    assert!(check.status.success(), "{}", stderr(&check));
    assert_eq!(stdout(&check).trim(), format!("valid {}", paths.len()));
}

#[test]
fn without_a_gpu_the_bundled_recording_is_labelled_and_require_gpu_exits_69() {
    let out = gpuslack(&["diagnose", "--seconds", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("gpuslack diagnose — BUNDLED RECORDING, not this machine's GPUs")
    );
    let out = gpuslack(&["diagnose", "--seconds", "1", "--require-gpu"]);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
    assert!(stderr(&out).contains("no NVIDIA GPU or driver was found"));
}

#[test]
fn a_missing_file_is_named_with_its_cause_once() {
    for args in [
        vec!["replay", "/nonexistent/trace.csv"],
        vec!["diagnose", "--trace", "/nonexistent/trace.csv"],
        vec![
            "replay",
            &*Box::leak(fixture("h200-health").into_boxed_str()),
            "--profile",
            "/nonexistent/profile.toml",
        ],
    ] {
        let out = gpuslack(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert_eq!(
            err.matches("No such file or directory").count(),
            1,
            "{args:?}: {err}"
        );
    }
}

/// Chromium, as scripts/test.sh installs it (Debian's `chromium`).
fn chromium() -> String {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("chromium is installed (scripts/test.sh installs it)")
        .to_string()
}

fn headless(browser: &str, profile: &Path) -> Command {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

#[test]
fn the_html_page_renders_one_band_per_phase_in_a_real_browser() {
    let browser = chromium();
    for name in ["h200x2-scenarios", "h200-health"] {
        let dir = temp_dir(&format!("html-{name}"));
        let page = dir.join("report.html");
        let trace = fixture(name);
        let page_arg = page.display().to_string();
        let out = gpuslack(&["diagnose", "--trace", &trace, "--html", &page_arg]);
        assert!(out.status.success(), "{}", stderr(&out));
        let json = json_of(&trace);
        let phases: Vec<usize> = json["gpus"]
            .as_array()
            .expect("gpus")
            .iter()
            .map(|g| g["phases"].as_array().expect("phases").len())
            .collect();
        let dom = headless(&browser, &dir.join("profile"))
            .arg("--dump-dom")
            .arg(format!("file://{}", page.display()))
            .output()
            .expect("chromium runs");
        assert!(dom.status.success(), "{}", stderr(&dom));
        let dom = stdout(&dom);
        // The DOM as the browser parsed it: one <svg> per GPU, one band per phase.
        let svgs: Vec<&str> = dom.split("<svg").skip(1).collect();
        assert_eq!(svgs.len(), phases.len(), "{name}: one timeline per GPU");
        for (svg, want) in svgs.iter().zip(&phases) {
            let svg = svg.split("</svg>").next().expect("svg");
            assert_eq!(svg.matches(r#"class="band""#).count(), *want, "{name}");
            assert!(svg.contains(r#"class="power""#) && svg.contains(r#"class="activity""#));
        }
        assert!(dom.contains("Bottom line: "), "{name}");
        assert!(dom.contains("<table>"), "{name}");
        // The change to make first, in words, as on the terminal's first screen.
        assert!(
            dom.contains(r#"<p class="change">Change first ("#),
            "{name}"
        );
        // Every phase has its row, a one-window phase marked short; each says how sure.
        let tables: Vec<&str> = dom
            .split("<th>phase (UTC)</th>")
            .skip(1)
            .map(|t| t.split("</table>").next().expect("table"))
            .collect();
        assert_eq!(tables.len(), phases.len(), "{name}: a phase table per GPU");
        for (table, want) in tables.iter().zip(&phases) {
            assert_eq!(
                table.matches("<tr>").count(),
                *want,
                "{name}: one row per phase"
            );
            assert!(table.contains("<th>how sure</th>"), "{name}");
        }
        let short = json["gpus"]
            .as_array()
            .expect("gpus")
            .iter()
            .flat_map(|g| g["phases"].as_array().expect("phases"))
            .filter(|p| p["windows"] == 1)
            .count();
        assert_eq!(dom.matches(">1 (short)<").count(), short, "{name}");
        // Scales on both curves' axes, and each verdict its own colour.
        for tick in [
            "0 W",
            "100%",
            "50%",
            "0%",
            "(%, right axis)",
            "power (W, left axis)",
        ] {
            assert!(dom.contains(tick), "{name}: {tick}");
        }
        let mut fills: Vec<(String, String)> = dom
            .split(r#"<rect class="band" data-class=""#)
            .skip(1)
            .map(|r| {
                let class = r.split('"').next().expect("class").to_string();
                let fill = r.split(r#"fill=""#).nth(1).expect("fill");
                (class, fill.split('"').next().expect("fill").to_string())
            })
            .collect();
        fills.sort();
        fills.dedup();
        let classes: std::collections::BTreeSet<&String> = fills.iter().map(|f| &f.0).collect();
        let colours: std::collections::BTreeSet<&String> = fills.iter().map(|f| &f.1).collect();
        assert_eq!(
            classes.len(),
            colours.len(),
            "{name}: one colour per verdict: {fills:?}"
        );
        assert_eq!(classes.len(), fills.len(), "{name}: {fills:?}");
    }
}

/// What the browser measured of a page laid out `width` px wide. Headless Chromium will not
/// open a window under 500 px, so the page is laid out in a frame of that width (`srcdoc`, so
/// that the host page may read it), and a script measures it once loaded: how wide the page
/// scrolls, and which of a timeline's legend items, axis ticks and caption meet.
fn layout_at(browser: &str, page: &Path, width: u32) -> Value {
    let html = std::fs::read_to_string(page).expect("page");
    let srcdoc = html.replace('&', "&amp;").replace('"', "&quot;");
    let host = format!(
        r#"<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">
<iframe id="f" style="width:{width}px;height:4000px;border:0" srcdoc="{srcdoc}"></iframe>
<script>
document.getElementById('f').addEventListener('load', () => {{
  const w = document.getElementById('f').contentWindow, d = w.document;
  const box = e => {{ const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }};
  const meets = (a, b) => a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3];
  const out = {{ width: w.innerWidth, scroll: d.documentElement.scrollWidth, overlaps: [], timelines: 0, legend: 0 }};
  for (const svg of d.querySelectorAll('svg.timeline')) {{
    out.timelines += 1;
    const caption = svg.querySelector('.caption');
    const items = [...svg.querySelectorAll('.legend-item')];
    const ticks = [...svg.querySelectorAll('.tick')];
    out.legend = Math.max(out.legend, items.length);
    items.forEach((item, i) => {{
      if (meets(box(item), box(caption))) out.overlaps.push('legend ' + i + ' / caption');
      items.slice(i + 1).forEach((o, j) => {{ if (meets(box(item), box(o))) out.overlaps.push('legend ' + i + ' / ' + (i + 1 + j)); }});
      ticks.forEach((t, j) => {{ if (meets(box(item), box(t))) out.overlaps.push('legend ' + i + ' / tick ' + j); }});
    }});
    ticks.forEach((t, j) => {{ if (meets(box(t), box(caption))) out.overlaps.push('tick ' + j + ' / caption'); }});
    ticks.slice(1).forEach((t, j) => {{ if (meets(box(ticks[j]), box(t))) out.overlaps.push('tick ' + j + ' / tick ' + (j + 1)); }});
  }}
  document.body.setAttribute('data-layout', JSON.stringify(out));
}});
</script></body></html>"#
    );
    let measured = page.with_file_name(format!("measured-{width}.html"));
    std::fs::write(&measured, host).expect("write");
    let dir = page.parent().expect("dir");
    let dom = headless(browser, &dir.join(format!("profile-{width}")))
        .arg("--window-size=1400,1200")
        .arg("--dump-dom")
        .arg(format!("file://{}", measured.display()))
        .output()
        .expect("chromium runs");
    assert!(dom.status.success(), "{}", stderr(&dom));
    let dom = stdout(&dom);
    let attr = dom
        .split("data-layout=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no measurement in the DOM: {dom}"));
    serde_json::from_str(&attr.replace("&quot;", "\"")).expect("the measurement")
}

/// Issue #47: a page worth sharing. Its title names the job, the trace and the date; its
/// times carry the date and the zone; GPU-Util is drawn beside SM activity and power; with
/// seven verdicts and more the legend wraps and never meets the curves' caption or the time
/// axis; and at a phone's 420 px nothing makes the page scroll sideways.
#[test]
fn the_html_page_reads_at_phone_width_and_its_legend_never_overlaps() {
    let browser = chromium();
    for name in ["h200-verdicts", "h200x2-calibration", "h200-diagnose-job"] {
        let dir = temp_dir(&format!("layout-{name}"));
        let page = dir.join("report.html");
        let trace = fixture(name);
        let out = gpuslack(&[
            "diagnose",
            "--trace",
            &trace,
            "--html",
            &page.display().to_string(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let html = std::fs::read_to_string(&page).expect("page");
        let title = html
            .split("<title>")
            .nth(1)
            .and_then(|t| t.split("</title>").next())
            .expect("a title");
        let json = json_of(&trace);
        let start = json["gpus"][0]["phases"][0]["start"]
            .as_f64()
            .expect("start");
        let date = gpuslack_receiver::report::utc_date(start);
        assert!(title.starts_with("gpuslack diagnose · "), "{title}");
        assert!(title.contains("trace samples.csv"), "{title}");
        assert!(title.contains(&format!(" · {date} ")), "{title}");
        assert!(title.ends_with(" UTC"), "{title}");
        for job in json["gpus"][0]["jobs"].as_array().expect("jobs") {
            assert!(title.contains(job.as_str().expect("job")), "{title}");
        }
        // Times with their date and zone: the axis's first tick, every phase row.
        let stamp = gpuslack_receiver::report::utc_stamp(start);
        assert!(
            html.contains(&format!(">{stamp}</text>")),
            "{name}: {stamp}"
        );
        assert!(html.contains(&format!("<td>{date} ")), "{name}");
        // GPU-Util beside SM activity, where GPM read the SMs.
        assert!(html.contains(r#"class="util""#), "{name}");
        assert!(html.contains("— GPU-Util (%, right axis)"), "{name}");
        for width in [1280, 420] {
            let layout = layout_at(&browser, &page, width);
            assert_eq!(layout["width"], width, "{name}: {layout}");
            assert!(
                layout["scroll"].as_u64() <= layout["width"].as_u64(),
                "{name} at {width} px scrolls sideways: {layout}"
            );
            assert_eq!(
                layout["overlaps"],
                serde_json::json!([]),
                "{name} at {width} px"
            );
            assert!(layout["timelines"].as_u64() >= Some(1), "{layout}");
            if name != "h200-diagnose-job" {
                assert!(layout["legend"].as_u64() >= Some(7), "{name}: {layout}");
            }
        }
    }
}

/// Writes the README's pictures when asked (`GPUSLACK_SCREENSHOT=1 cargo test --test report
/// screenshot`): docs/diagnose-terminal.png, the first screen of `diagnose` where there is no
/// GPU (the bundled recording) as a 100-column terminal shows it, and
/// docs/diagnose-h100-job.png, the HTML page of the same job (the README's and
/// docs/REPORT-H100.md's), and docs/diagnose-h100-job-phone.png, that page at a phone's 420 px. Each from the current build, with paths relative to the
/// repository, so that no local path shows.
#[test]
fn screenshot() {
    if std::env::var("GPUSLACK_SCREENSHOT").is_err() {
        return;
    }
    let dir = temp_dir("screenshot");
    let shoot = |page: &Path, png: &str, size: &str| {
        let shot = headless(&chromium(), &dir.join("profile"))
            .arg(format!("--window-size={size}"))
            .arg(format!("--screenshot={}", repo(png).display()))
            .arg(format!("file://{}", page.display()))
            .output()
            .expect("chromium runs");
        assert!(shot.status.success(), "{}", stderr(&shot));
    };
    // The terminal: the first 24 lines, in a <pre> of 100 columns.
    let out = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(["diagnose", "--html", "report.html"])
        .current_dir(&dir)
        .output()
        .expect("gpuslack runs");
    assert!(out.status.success(), "{}", stderr(&out));
    let screen: Vec<String> = stdout(&out).lines().take(24).map(str::to_string).collect();
    let escaped = screen
        .join("\n")
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let terminal = dir.join("terminal.html");
    std::fs::write(
        &terminal,
        format!(
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{{margin:0;background:#1e1e1e}}pre{{margin:0;padding:10px 12px;color:#e8e8e8;font:14px/18px 'DejaVu Sans Mono',monospace}}</style></head><body><pre>$ gpuslack diagnose\n{escaped}</pre></body></html>"
        ),
    )
    .expect("write");
    shoot(&terminal, "docs/diagnose-terminal.png", "880,470");
    // The page, from the repository's root with the trace's path as the docs quote it.
    let page = dir.join("page.html");
    let out = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args([
            "diagnose",
            "--trace",
            "tests/fixtures/h100-diagnose-job/samples.csv",
            "--html",
        ])
        .arg(&page)
        .current_dir(repo("."))
        .output()
        .expect("gpuslack runs");
    assert!(out.status.success(), "{}", stderr(&out));
    shoot(&page, "docs/diagnose-h100-job.png", "1060,1500");
    // The same page on a phone: laid out 420 px wide and drawn at twice the pixels, as a phone
    // shows it (Chromium opens no window under 500 px, so the page sits in a frame).
    let html = std::fs::read_to_string(&page).expect("page");
    let phone = dir.join("phone.html");
    std::fs::write(
        &phone,
        format!(
            r#"<!DOCTYPE html><html><head><meta charset="utf-8"><style>body{{margin:0;overflow:hidden}}iframe{{width:420px;height:900px;border:0;transform:scale(2);transform-origin:0 0}}</style></head><body><iframe srcdoc="{}"></iframe></body></html>"#,
            html.replace('&', "&amp;").replace('"', "&quot;")
        ),
    )
    .expect("write");
    shoot(&phone, "docs/diagnose-h100-job-phone.png", "840,1800");
}

#[test]
fn a_terminal_gets_a_coloured_strip_and_a_pipe_plain_text() {
    let trace = fixture("h200x2-scenarios");
    let piped = diagnose(&["diagnose", "--trace", &trace]);
    assert!(!piped.contains('\u{1b}'), "no escape codes off a terminal");
    assert!(!piped.contains("    timeline       "));
    // `script` gives the command a pseudo-terminal for stdout.
    let command = format!(
        "'{}' diagnose --trace '{trace}'",
        env!("CARGO_BIN_EXE_gpuslack")
    );
    let tty = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .expect("script (util-linux) runs");
    assert!(tty.status.success(), "{}", stderr(&tty));
    let shown = stdout(&tty);
    let strips: Vec<&str> = shown
        .lines()
        .filter(|l| l.starts_with("    timeline       "))
        .collect();
    assert_eq!(strips.len(), 2, "one strip per GPU:\n{shown}");
    assert!(strips
        .iter()
        .all(|s| s.contains("\u{1b}[38;5;") && s.contains('█')));
}
