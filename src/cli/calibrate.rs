//! `gpuslack calibrate`: each GPU's own power baselines under the reference workloads, a
//! profile file, the validation of the thresholds, and a report. `--from-recording` runs the
//! same math on a recorded session.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gpuslack_bench_kernels::{gpu_count, Gpu, Options, Workload};
use gpuslack_calibration::compare::{self, Comparison};
use gpuslack_calibration::phases::PhaseSpan;
use gpuslack_calibration::session::{
    calibrate, from_recording, in_memory, save_session, Calibration,
};
use gpuslack_calibration::validate::latency_phase;
use gpuslack_calibration::{report, GpuProfile, ProfileFile};
use gpuslack_receiver::device::DeviceFacts;

use super::files;
use super::EXIT_NO_GPU;
use gpuslack_receiver::source::live::background::Sampler;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// GPU index, or `all`.
    #[arg(long, default_value = "0")]
    pub gpu: String,
    /// How long each workload runs (bare idle and held idle too).
    #[arg(long, value_name = "S", default_value_t = 8.0, value_parser = super::flags::finite)]
    pub seconds_per_workload: f64,
    /// Write the profiles here (TOML); GPUs already in the file and not calibrated now are kept.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Write the HTML report here.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Keep the live session (samples.csv, phases.json, facts.json) in this folder, in the form
    /// --from-recording reads.
    #[arg(long, value_name = "DIR")]
    pub save_session: Option<PathBuf>,
    /// Compute the profile from a recorded session (samples.csv + phases.json) instead.
    #[arg(long, value_name = "DIR")]
    pub from_recording: Option<PathBuf>,
    /// Compare each GPU's new baselines with its profile in this file (same UUID; for a
    /// recording without UUIDs, same model and index): is the calibration repeatable within 3%?
    #[arg(long, value_name = "FILE")]
    pub compare_with: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Calibrate as on a GPU without GPM: GPM is not read, the NVML-only rules are validated.
    #[arg(long)]
    pub no_gpm: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Toml,
}

pub fn run(args: Args) -> Result<ExitCode> {
    // At least 3: 1.5 s of each phase is left out as ramp.
    super::flags::seconds(
        "--seconds-per-workload",
        args.seconds_per_workload,
        3.0,
        3600.0,
    )?;
    if args.save_session.is_some() && args.from_recording.is_some() {
        bail!("--save-session keeps a live calibration's session; --from-recording reads one already saved");
    }
    // Refused before calibrating, like a bad file below: not after minutes of work.
    for (flag, path) in [("--out", &args.out), ("--report", &args.report)] {
        if let Some(path) = path {
            files::check_output(flag, path)?;
        }
    }
    // Read before calibrating: a bad file should fail in a second, not after minutes of work.
    let earlier = match &args.compare_with {
        Some(path) => Some(ProfileFile::load(path)?),
        None => None,
    };
    let calibration = match &args.from_recording {
        Some(dir) => from_recording(dir)?,
        None => match live(&args)? {
            Some(c) => c,
            None => return Ok(ExitCode::from(EXIT_NO_GPU)),
        },
    };
    let (comparisons, missing) = comparisons(&args, &calibration.profiles, earlier.as_ref());
    output(&args, &calibration, &comparisons)?;
    show_differences(&args, &comparisons, &missing)?;
    // How far the published specification would have placed this GPU's baselines.
    let spec = gpuslack_calibration::sku::spec_terminal(&calibration.profiles);
    if args.format == Format::Table {
        out!("{spec}");
    } else {
        err!("{spec}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Each GPU against the first (same SKU, different silicon), and each against its earlier
/// calibration; and a line for each GPU the earlier file has no profile for.
fn comparisons(
    args: &Args,
    profiles: &[GpuProfile],
    earlier: Option<&ProfileFile>,
) -> (Vec<Comparison>, Vec<String>) {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    let label = |p: &GpuProfile| format!("GPU {}", p.gpu_index().unwrap_or(0));
    if let Some((first, rest)) = profiles.split_first() {
        for other in rest {
            let title = format!("differences: {} against {}", label(other), label(first));
            out.push(Comparison::new(
                title,
                (&label(first), &label(other)),
                (first, other),
                None,
            ));
        }
    }
    if let (Some(earlier), Some(path)) = (earlier, &args.compare_with) {
        for p in profiles {
            // The same GPU: its UUID, or for a recording without one, the same model and index.
            let old = earlier.gpu.iter().find(|o| match &p.uuid {
                Some(_) => o.uuid == p.uuid,
                None => o.uuid.is_none() && o.model == p.model && o.gpu_index() == p.gpu_index(),
            });
            let Some(old) = old else {
                missing.push(format!(
                    "{}: no profile for {} in {}",
                    label(p),
                    p.uuid
                        .as_deref()
                        .or(p.model.as_deref())
                        .unwrap_or("this GPU"),
                    path.display()
                ));
                continue;
            };
            let title = format!(
                "repeatability: {} ({}) against {} of {}",
                label(p),
                p.date,
                path.display(),
                old.date
            );
            out.push(Comparison::new(
                title,
                ("earlier", "now"),
                (old, p),
                Some(compare::REPEAT_TOLERANCE_PCT),
            ));
        }
    }
    (out, missing)
}

/// The comparisons as text: on stdout for the table format; on stderr when stdout carries a
/// profile.
fn show_differences(
    args: &Args,
    comparisons: &[Comparison],
    missing: &[String],
) -> std::io::Result<()> {
    let mut text = String::new();
    for c in comparisons {
        text.push_str(&c.terminal());
    }
    for line in missing {
        let _ = writeln!(text, "{line}");
    }
    if args.format == Format::Table {
        out!("{text}");
    } else {
        err!("{text}");
    }
    Ok(())
}

fn output(args: &Args, c: &Calibration, comparisons: &[Comparison]) -> Result<()> {
    let file = ProfileFile {
        gpu: c.profiles.clone(),
    };
    match args.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&c.profiles)?),
        Format::Toml => out!("{}", file.to_toml()),
        Format::Table => {
            for p in &c.profiles {
                let gpu = p.gpu_index().unwrap_or(0);
                if let Some(v) = c.validations.get(&gpu) {
                    let nvml = c.nvml_validations.get(&gpu);
                    outln!("GPU {gpu} · {}", report::terminal(p, v, nvml));
                    if let Some(spent) = c.spent.get(&gpu) {
                        out!("{}", report::spent_terminal(spent));
                    }
                }
            }
        }
    }
    if let Some(path) = &args.out {
        files::check_output("--out", path)?;
        // Only a regular file holds profiles to keep: a device (`/dev/null`) is written
        // through unread (`--out /dev/zero`, read first, took 8.5 GB).
        let mut existing = if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
            ProfileFile::load(path)?
        } else {
            ProfileFile::default()
        };
        for p in &c.profiles {
            existing
                .gpu
                .retain(|old| old.uuid.is_none() || old.uuid != p.uuid);
            existing.gpu.push(p.clone());
        }
        files::write_replacing("--out", path, existing.to_toml().as_bytes())?;
        errln!("profiles written to {}", path.display());
    }
    if let Some(path) = &args.report {
        let sections: Vec<report::GpuSection> = c
            .profiles
            .iter()
            .filter_map(|p| {
                let gpu = p.gpu_index().unwrap_or(0);
                Some(report::GpuSection {
                    profile: p,
                    validation: c.validations.get(&gpu)?,
                    nvml_only: c.nvml_validations.get(&gpu),
                    plots: c.plots.get(&gpu).map_or(&[], |v| v.as_slice()),
                    spent: c.spent.get(&gpu),
                })
            })
            .collect();
        let html = report::page(&sections, &c.phases, comparisons);
        files::write_replacing("--report", path, html.as_bytes())?;
        errln!("report written to {}", path.display());
    }
    Ok(())
}

/// A progress line on stderr: which step of how many, on which GPU, for how long so far.
struct Progress {
    steps: usize,
    done: usize,
    started: Instant,
}

impl Progress {
    fn step(&mut self, gpu: usize, what: &str) {
        self.done += 1;
        let filled = 20 * self.done / self.steps.max(1);
        errln!(
            "[{}{}] {}/{} GPU {gpu}: {what} ({:.0} s)",
            "#".repeat(filled),
            ".".repeat(20 - filled),
            self.done,
            self.steps,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// Waits until `gpu` has cooled to within 3 °C of `start_c`, at most `max`.
fn cool_down(sampler: &Sampler, gpu: u32, start_c: Option<f64>, max: Duration) {
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    while started.elapsed() < max {
        match (sampler.temperature(gpu), start_c) {
            (Some(now), Some(start)) if now > start + 3.0 => {
                std::thread::sleep(Duration::from_millis(500))
            }
            _ => break,
        }
    }
}

/// Waits until no GPU's temperature fell by 1 °C or more over the last 5 s, at most `max`.
fn settle(sampler: &Sampler, gpus: &[usize], max: Duration) {
    let started = Instant::now();
    let temps = || -> Vec<Option<f64>> {
        gpus.iter()
            .map(|&g| sampler.temperature(g as u32))
            .collect()
    };
    let mut before = temps();
    while started.elapsed() < max {
        std::thread::sleep(Duration::from_secs(5));
        let now = temps();
        let falling = before
            .iter()
            .zip(&now)
            .any(|(b, n)| matches!((b, n), (Some(b), Some(n)) if b - n >= 1.0));
        if !falling {
            return;
        }
        before = now;
    }
}

fn live(args: &Args) -> Result<Option<Calibration>> {
    let count = match gpu_count() {
        Ok(n) if n > 0 => n,
        Ok(_) | Err(_) => {
            errln!("error: no CUDA GPU or driver on this machine: calibration runs workloads on a GPU (use --from-recording DIR for a recorded session)");
            return Ok(None);
        }
    };
    let gpus: Vec<usize> = if args.gpu == "all" {
        (0..count).collect()
    } else {
        let g: usize = args
            .gpu
            .parse()
            .with_context(|| format!("--gpu {:?}: expected an index or `all`", args.gpu))?;
        if g >= count {
            bail!("--gpu {g}: this machine has {count} GPU(s)");
        }
        vec![g]
    };
    let Some(sampler) = Sampler::start(args.no_gpm) else {
        errln!(
            "error: NVML is not available: calibration needs the live source beside the workloads"
        );
        return Ok(None);
    };
    let s = args.seconds_per_workload;
    let options = Options {
        seconds: Some(s),
        ..Options::default()
    };
    let mut progress = Progress {
        steps: 2 + 5 * gpus.len(),
        done: 0,
        started: Instant::now(),
    };
    let now = super::live::unix_now;
    // An idle phase of every GPU at once: `s` seconds from now.
    let idle_for_s = |name: &str| {
        let t0 = now();
        std::thread::sleep(Duration::from_secs_f64(s));
        PhaseSpan {
            name: name.into(),
            t0,
            t1: now(),
            gpus: None,
        }
    };
    let mut phases = Vec::new();
    // Bare idle: no CUDA context exists yet in this process. A GPU still warm from earlier
    // work draws more at idle (leakage rises with temperature): wait for it to settle.
    std::thread::sleep(Duration::from_secs(1));
    settle(&sampler, &gpus, Duration::from_secs(60));
    phases.push(idle_for_s("idle"));
    progress.step(gpus[0], "bare idle measured");
    let opened = gpus
        .iter()
        .map(|&g| Gpu::open(g))
        .collect::<Result<Vec<_>, _>>()?;
    std::thread::sleep(Duration::from_secs(2));
    phases.push(idle_for_s("idle_held"));
    progress.step(gpus[0], "context-held idle measured");
    for gpu in &opened {
        let index = gpu.ordinal as u32;
        let start_c = sampler.temperature(index);
        for workload in [
            Workload::Tiny,
            Workload::Pcie,
            Workload::Memory,
            Workload::Compute,
            Workload::Latency,
        ] {
            for m in workload.run(std::slice::from_ref(gpu), &options)? {
                if let Some(name) = latency_phase(&m.variant).filter(|_| m.workload == "latency") {
                    phases.push(PhaseSpan {
                        name: name.into(),
                        t0: m.started,
                        t1: m.ended,
                        gpus: Some(vec![index]),
                    });
                    continue;
                }
                let name = match (m.workload, m.variant.as_str()) {
                    ("tiny", "graph") => "tiny",
                    ("pcie", "h2d_pinned") => "pcie",
                    ("memory", "copy") => "memory",
                    ("compute", "fp32_fma") => "compute_fp32",
                    ("compute", gemm) if gemm.ends_with("_gemm_8192") => {
                        // The tensor cores' own 16-bit type: bf16 from sm_80, fp16 before.
                        errln!(
                            "GPU {index}: tensor-core workload: {gemm} ({:.0} {})",
                            m.value,
                            m.unit
                        );
                        "compute_tensor"
                    }
                    _ => continue,
                };
                phases.push(PhaseSpan {
                    name: name.into(),
                    t0: m.started,
                    t1: m.ended,
                    gpus: Some(vec![index]),
                });
            }
            progress.step(gpu.ordinal, &format!("{} done", workload.name()));
            cool_down(&sampler, index, start_c, Duration::from_secs(15));
        }
    }
    // Let the last readings of the last phase arrive.
    std::thread::sleep(Duration::from_millis(500));
    let facts: BTreeMap<u32, DeviceFacts> = sampler.facts().iter().cloned().collect();
    let samples = sampler.samples();
    drop(sampler);
    if let Some(dir) = &args.save_session {
        save_session(dir, &samples, &phases, &facts)?;
        errln!("session written to {}", dir.display());
    }
    let source = in_memory(&samples);
    let calibration = calibrate(&source, phases, &facts, "live calibration")?;
    Ok(Some(calibration))
}
